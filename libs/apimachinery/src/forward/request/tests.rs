use serde_json::json;

use super::*;

/// Pods (with their subresources), leases, nodes and serviceaccounts/token are known.
fn known(group: &str, version: &str, plural: &str) -> Option<KnownResource> {
    let (namespaced, subs): (bool, &[&str]) = match (group, version, plural) {
        ("", "v1", "pods") => (
            true,
            &["status", "binding", "eviction", "ephemeralcontainers"],
        ),
        ("", "v1", "serviceaccounts") => (true, &["token"]),
        ("", "v1", "nodes") => (false, &["status"]),
        ("", "v1", "events") => (true, &[]),
        ("coordination.k8s.io", "v1", "leases") => (true, &[]),
        _ => return None,
    };
    Some(KnownResource {
        namespaced: Some(namespaced),
        subresources: subs.iter().map(|s| s.to_string()).collect(),
    })
}

fn write(verb: &str, resource: &str, namespace: &str, name: &str) -> ForwardedWrite {
    ForwardedWrite {
        verb: verb.into(),
        version: "v1".into(),
        resource: resource.into(),
        namespace: namespace.into(),
        name: name.into(),
        ..Default::default()
    }
}

fn parse(w: ForwardedWrite) -> Result<NodeRequest, ApiError> {
    NodeRequest::parse(w, known)
}

fn refusal(w: ForwardedWrite) -> (u16, String) {
    let e = parse(w).expect_err("the write was taken");
    (e.code, e.message)
}

#[test]
fn paths_follow_the_api_layout() {
    let mut status = write("patch", "pods", "default", "p");
    status.subresource = Some("status".into());
    status.content_type = Some("application/merge-patch+json".into());
    let req = parse(status).unwrap();
    assert_eq!(req.path(), "/api/v1/namespaces/default/pods/p/status");
    assert_eq!(
        (req.method(), req.content_type()),
        ("PATCH", "application/merge-patch+json")
    );
    let mut lease = write("create", "leases", "kube-node-lease", "");
    lease.group = "coordination.k8s.io".into();
    lease.dry_run = true;
    lease.body = Some(json!({"metadata": {"name": "n1"}}));
    let req = parse(lease).unwrap();
    assert_eq!(
        req.path(),
        "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases?dryRun=All"
    );
    assert_eq!(req.object_name(), "n1");
    let node = parse(write("update", "nodes", "", "n1")).unwrap();
    assert_eq!(node.path(), "/api/v1/nodes/n1");
}

#[test]
fn a_namespace_that_smuggles_another_path_is_refused() {
    // What lwproxy decoded from `kube-system%2Fsecrets%2Ftopsecret%3Fx%3D`.
    let mut event = write("create", "events", "kube-system/secrets/topsecret?x=", "");
    event.body = Some(json!({"metadata": {"name": "e"}}));
    let (code, message) = refusal(event);
    assert_eq!(code, 400);
    assert!(
        message.contains("namespace") && message.contains("DNS-1123"),
        "{message}"
    );
}

#[test]
fn names_that_are_not_path_segments_are_refused() {
    for name in [
        "a/b",
        "..",
        ".",
        "a%2Fb",
        "a?x=1",
        "a#f",
        "a b",
        "\u{e9}t\u{e9}",
    ] {
        let (code, message) = refusal(write("delete", "pods", "default", name));
        assert_eq!(code, 400, "{name}: {message}");
        assert!(message.contains("name"), "{message}");
    }
    let long = "a".repeat(254);
    assert_eq!(refusal(write("delete", "pods", "default", &long)).0, 400);
    let mut create = write("create", "pods", "default", "");
    create.body = Some(json!({"metadata": {"name": "../../secrets/x"}}));
    assert_eq!(
        refusal(create).0,
        400,
        "a create is checked by its body's name"
    );
}

#[test]
fn escaping_keeps_names_kubernetes_allows_and_encodes_the_rest() {
    let req = parse(write("update", "nodes", "", "system:node=1")).unwrap();
    assert_eq!(req.path(), "/api/v1/nodes/system:node%3D1");
}

#[test]
fn only_write_verbs_known_resources_and_their_subresources_are_taken() {
    let (code, message) = refusal(write("get", "pods", "default", "p"));
    assert_eq!(code, 400, "{message}");
    assert!(message.contains("verb"), "{message}");
    assert_eq!(refusal(write("create", "secrets", "default", "s")).0, 404);
    let mut exec = write("create", "pods", "default", "p");
    exec.subresource = Some("exec".into());
    assert_eq!(refusal(exec).0, 400);
    let mut node_token = write("create", "nodes", "", "n1");
    node_token.subresource = Some("token".into());
    assert_eq!(
        refusal(node_token).0,
        400,
        "nodes have no token subresource"
    );
    let mut token_update = write("update", "serviceaccounts", "default", "sa");
    token_update.subresource = Some("token".into());
    assert_eq!(refusal(token_update).0, 405);
    assert_eq!(
        refusal(write("delete", "pods", "", "p")).0,
        400,
        "no namespace"
    );
    assert_eq!(
        refusal(write("update", "nodes", "default", "n1")).0,
        400,
        "nodes have none"
    );
    assert_eq!(
        refusal(write("delete", "pods", "default", "")).0,
        400,
        "no name"
    );
}

#[test]
fn group_version_and_body_type_come_from_the_known_sets() {
    let mut w = write("update", "nodes", "", "n1");
    w.version = "v1/../../api/v1/namespaces/kube-system/secrets".into();
    assert_eq!(refusal(w).0, 400);
    let mut w = write("update", "leases", "kube-node-lease", "n1");
    w.group = "coordination.k8s.io/v1/namespaces".into();
    assert_eq!(refusal(w).0, 400);
    for version in ["v1", "v2", "v1beta1", "v2alpha3"] {
        assert!(check_group_version("apps", version).is_ok(), "{version}");
    }
    for version in ["", "v", "1", "v1gamma1", "v1beta", "V1"] {
        assert!(check_group_version("apps", version).is_err(), "{version}");
    }
    let mut w = write("update", "nodes", "", "n1");
    w.content_type = Some("text/plain".into());
    assert_eq!(refusal(w).0, 415);
    let mut w = write("patch", "nodes", "", "n1");
    w.content_type = Some("application/json".into());
    assert_eq!(refusal(w).0, 415, "a patch names its patch type");
}
