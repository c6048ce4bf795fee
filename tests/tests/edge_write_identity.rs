//! A write that comes from an edge node is made with that node's rights, never the cloud's:
//! the attacks of the security review, against a real cloudcore (embedded control plane) and a
//! real edgecore on loopback. Through lwproxy with no credentials, and forged straight onto the
//! link as the node's own edgehub would carry them, a path smuggled in a namespace or name is a
//! 400 that reaches nothing, a write the node may not make is a 403, and the API's own
//! NodeRestriction (label and taint rules) is the last gate, because the cloud replays the
//! node's write impersonating the node.

use std::time::Duration;

use apimachinery::{ForwardedReply, ForwardedWrite};
use beehive::{Message, Operation};
use e2e::Edge;
use k8s_openapi::api::core::v1::{ConfigMap, Event, Node, Secret};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use testkit::eventually;

const WAIT: Duration = Duration::from_secs(30);
const NODE: &str = "edge-1";

async fn linked(edge: &Edge) {
    eventually("the edge is linked", WAIT, || async {
        matches!(
            *edge.running.hub().unwrap().state().borrow(),
            edgehub::LinkState::Connected { .. }
        )
    })
    .await;
}

/// A raw request to lwproxy: `(status, body)`.
async fn raw(
    edge: &Edge,
    method: &str,
    path: &str,
    host: Option<&str>,
    body: Value,
) -> (u16, String) {
    let addr = edge.running.lwproxy().unwrap().addr();
    let host = host.map_or_else(|| addr.to_string(), str::to_owned);
    let request = http::Request::builder()
        .method(method)
        .uri(format!("http://{addr}{path}"))
        .header(http::header::HOST, host)
        .header(http::header::CONTENT_TYPE, content_type(method))
        .body(serde_json::to_vec(&body).unwrap())
        .unwrap();
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let io = hyper_util::rt::TokioIo::new(stream);
    let (mut sender, conn) = hyper::client::conn::http1::handshake(io).await.unwrap();
    tokio::spawn(conn);
    let request = request.map(http_body_util::Full::<bytes::Bytes>::from);
    let response = sender.send_request(request).await.unwrap();
    let code = response.status().as_u16();
    use http_body_util::BodyExt;
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    (code, String::from_utf8_lossy(&bytes).into_owned())
}

fn content_type(method: &str) -> &'static str {
    match method {
        "PATCH" => "application/merge-patch+json",
        _ => "application/json",
    }
}

/// Sends `write` onto the link as lwproxy does (a sync request to edgehub), bypassing
/// lwproxy's own checks as a process holding the node's certificate could; the cloud's reply.
async fn forged(edge: &Edge, write: ForwardedWrite) -> ForwardedReply {
    let resource = format!(
        "{}/{}/{}",
        write.namespace,
        write.resource,
        write.object_name()
    );
    let msg = Message::new()
        .route(
            "lwproxy",
            lwproxy::MESSAGE_GROUP,
            resource,
            Operation::Insert,
        )
        .with_content(serde_json::to_vec(&write).unwrap());
    let ctx = edge.running.context();
    let resp = ctx
        .send_sync(lwproxy::HUB_MODULE, msg, Duration::from_secs(20))
        .await
        .expect("the cloud answers");
    assert_ne!(
        resp.router.operation,
        Operation::Error,
        "{}",
        String::from_utf8_lossy(&resp.content)
    );
    serde_json::from_slice(&resp.content).expect("a forwarded reply")
}

fn write(verb: &str, resource: &str, namespace: &str, name: &str, body: Value) -> ForwardedWrite {
    ForwardedWrite {
        verb: verb.into(),
        version: "v1".into(),
        resource: resource.into(),
        namespace: namespace.into(),
        name: name.into(),
        content_type: Some(content_type(if verb == "patch" { "PATCH" } else { "POST" }).into()),
        body: Some(body),
        ..Default::default()
    }
}

/// A Secret in kube-system, a ConfigMap in default, and a taint an admin put on the node.
async fn targets(admin: &kube::Client) {
    let pp = PostParams::default();
    let secret: Secret = serde_json::from_value(
        json!({"metadata": {"name": "topsecret"}, "stringData": {"password": "hunter2"}}),
    )
    .unwrap();
    Api::<Secret>::namespaced(admin.clone(), "kube-system")
        .create(&pp, &secret)
        .await
        .unwrap();
    let cm: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "settings"}, "data": {"mode": "safe"}}))
            .unwrap();
    Api::<ConfigMap>::namespaced(admin.clone(), "default")
        .create(&pp, &cm)
        .await
        .unwrap();
    let nodes: Api<Node> = Api::all(admin.clone());
    eventually("the edge node is registered", WAIT, || async {
        nodes.get_opt(NODE).await.unwrap().is_some()
    })
    .await;
    let taint = json!({"spec": {"taints": [{"key": "dedicated", "value": "admin", "effect": "NoSchedule"}]}});
    nodes
        .patch(NODE, &PatchParams::default(), &Patch::Merge(&taint))
        .await
        .unwrap();
}

/// Nothing the attacks aimed at changed.
async fn untouched(admin: &kube::Client) {
    let cm = Api::<ConfigMap>::namespaced(admin.clone(), "default")
        .get("settings")
        .await
        .unwrap();
    assert_eq!(cm.data.unwrap()["mode"], "safe");
    let node = Api::<Node>::all(admin.clone()).get(NODE).await.unwrap();
    let labels = node.metadata.labels.unwrap_or_default();
    assert!(
        !labels.contains_key("node-role.kubernetes.io/control-plane"),
        "{labels:?}"
    );
    assert!(
        !labels.contains_key("node-restriction.kubernetes.io/pci"),
        "{labels:?}"
    );
    let taints = node.spec.unwrap().taints.unwrap_or_default();
    assert_eq!(taints.len(), 1, "the admin's taint stays");
    let ns = Api::<k8s_openapi::api::core::v1::Namespace>::all(admin.clone())
        .get("kube-system")
        .await
        .unwrap();
    assert!(!ns.metadata.labels.unwrap_or_default().contains_key("pwned"));
    let events = Api::<Event>::all(admin.clone())
        .list(&ListParams::default())
        .await
        .unwrap();
    assert!(
        events
            .items
            .iter()
            .all(|e| e.metadata.name.as_deref() != Some("smuggled")),
        "no smuggled event"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_through_lwproxy_cannot_smuggle_paths_or_reach_beyond_the_node() {
    let (pki, dir) = (e2e::Pki::new(), tempfile::tempdir().unwrap());
    let (cloud, edge) = e2e::linked_site(&pki, dir.path(), NODE).await;
    linked(&edge).await;
    let admin = cloud.kube().await;
    targets(&admin).await;
    let event = json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": "smuggled"},
        "involvedObject": {"kind": "Node", "name": NODE}, "reason": "x", "message": "x"});

    // The review's injection: a namespace that decodes to another path and a query.
    for path in [
        "/api/v1/namespaces/kube-system%2Fsecrets%2Ftopsecret%3Fx%3D/events",
        "/api/v1/namespaces/default%2Fconfigmaps%2Fsettings%3Fx%3D/events",
        "/api/v1/namespaces/default/events/..%2F..%2Fconfigmaps%2Fsettings",
    ] {
        for method in ["POST", "PATCH", "PUT"] {
            let (code, body) = raw(&edge, method, path, None, event.clone()).await;
            assert!(
                code == 400 || code == 404 || code == 405,
                "{method} {path}: {code} {body}"
            );
            assert!(
                !body.contains("hunter2") && !body.contains("aHVudGVyMg"),
                "{body}"
            );
        }
    }
    // Writes the node may not make are refused by the cloud, as the node.
    let relabel = json!({"metadata": {"labels": {"pwned": "yes"}}});
    let (code, body) = raw(
        &edge,
        "PATCH",
        "/api/v1/namespaces/kube-system",
        None,
        relabel,
    )
    .await;
    assert_eq!(code, 403, "{body}");
    let (code, body) = raw(
        &edge,
        "PATCH",
        "/api/v1/namespaces/default/configmaps/settings",
        None,
        json!({"data": {"mode": "owned"}}),
    )
    .await;
    assert_eq!(code, 403, "{body}");
    // The node's own Node: NodeRestriction's label and taint rules, applied by the API.
    let nodes: Api<Node> = Api::all(edge.lwproxy_client());
    let pp = PatchParams::default();
    for labels in [
        json!({"node-role.kubernetes.io/control-plane": ""}),
        json!({"node-restriction.kubernetes.io/pci": "true"}),
    ] {
        let err = nodes
            .patch(
                NODE,
                &pp,
                &Patch::Merge(&json!({"metadata": {"labels": labels}})),
            )
            .await
            .unwrap_err();
        assert!(
            matches!(&err, kube::Error::Api(s) if s.code == 403 && s.message.contains("is not allowed to modify labels")),
            "{err:?}"
        );
    }
    let err = nodes
        .patch(NODE, &pp, &Patch::Merge(&json!({"spec": {"taints": []}})))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, kube::Error::Api(s) if s.code == 403 && s.message.contains("is not allowed to modify taints")),
        "{err:?}"
    );
    nodes
        .patch(NODE, &pp, &Patch::Merge(&json!({"metadata": {"labels": {"site": "shop-1", "topology.kubernetes.io/zone": "z1"}}})))
        .await
        .expect("a node sets its own labels and the kubelet's well-known ones");
    // A page in a browser on the edge host reaches lwproxy under its own domain's name.
    let (code, body) = raw(
        &edge,
        "GET",
        "/api/v1/namespaces/default/configmaps",
        Some("rebind.example:10550"),
        Value::Null,
    )
    .await;
    assert_eq!(code, 403, "{body}");
    let (code, _) = raw(
        &edge,
        "GET",
        "/api/v1/namespaces/default/pods",
        Some("localhost:10550"),
        Value::Null,
    )
    .await;
    assert_eq!(code, 200);
    untouched(&admin).await;
    edge.stop().await;
    cloud.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_forged_on_the_link_are_checked_and_made_as_the_node() {
    let (pki, dir) = (e2e::Pki::new(), tempfile::tempdir().unwrap());
    let (cloud, edge) = e2e::linked_site(&pki, dir.path(), NODE).await;
    linked(&edge).await;
    let admin = cloud.kube().await;
    targets(&admin).await;

    // A smuggled path, a read dressed as a write, an unknown subresource: 400, nothing sent.
    let smuggle = write(
        "create",
        "events",
        "kube-system/secrets/topsecret?x=",
        "",
        json!({"metadata": {"name": "smuggled"}}),
    );
    let mut read = write("get", "secrets", "kube-system", "topsecret", Value::Null);
    read.content_type = None;
    let mut exec = write("create", "pods", "default", "p", json!({}));
    exec.subresource = Some("exec".into());
    let mut version = write("patch", "nodes", "", NODE, json!({}));
    version.version = "v1/namespaces/kube-system/secrets/topsecret".into();
    for forged_write in [smuggle, read, exec, version] {
        let reply = forged(&edge, forged_write.clone()).await;
        assert_eq!(reply.code, 400, "{forged_write:?}: {}", reply.body);
        assert!(
            !reply.body.to_string().contains("hunter2"),
            "{}",
            reply.body
        );
    }
    // A privileged pod bound to another node: refused.
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "root", "namespace": "default"},
        "spec": {"nodeName": "other", "containers": [{"name": "c", "image": "busybox",
            "securityContext": {"privileged": true}}],
            "volumes": [{"name": "host", "hostPath": {"path": "/"}}]}});
    let reply = forged(&edge, write("create", "pods", "default", "", pod)).await;
    assert_eq!(reply.code, 403, "{}", reply.body);
    // The node's own Node is the node's to patch, so edgecontroller lets the write through:
    // the API refuses it, because the write reaches it as the node (with the cloud's rights it
    // was applied).
    let label = json!({"metadata": {"labels": {"node-role.kubernetes.io/control-plane": ""}}});
    let reply = forged(&edge, write("patch", "nodes", "", NODE, label)).await;
    assert_eq!(reply.code, 403, "{}", reply.body);
    assert!(
        reply.body["message"]
            .as_str()
            .unwrap()
            .contains("is not allowed to modify labels"),
        "{}",
        reply.body
    );
    let untaint = write(
        "patch",
        "nodes",
        "",
        NODE,
        json!({"spec": {"taints": null}}),
    );
    assert_eq!(forged(&edge, untaint).await.code, 403);
    let allowed = write(
        "patch",
        "nodes",
        "",
        NODE,
        json!({"metadata": {"labels": {"site": "shop-1"}}}),
    );
    let reply = forged(&edge, allowed).await;
    assert_eq!(reply.code, 200, "{}", reply.body);
    untouched(&admin).await;
    edge.stop().await;
    cloud.stop().await;
}
