use super::*;

fn read<'a>(
    verb: &'a str,
    group: &'a str,
    resource: &'a str,
    ns: &'a str,
    name: &'a str,
) -> Read<'a> {
    Read {
        verb,
        group,
        resource,
        namespace: ns,
        name,
        subresource: None,
        field_selector: None,
    }
}

fn by_node(read: Read<'_>) -> ReadRule {
    NodeRead { node: "n1", read }.rule()
}

fn selected<'a>(mut r: Read<'a>, selector: &'a FieldSelector) -> Read<'a> {
    r.field_selector = Some(selector);
    r
}

fn denied(read: Read<'_>) -> ApiError {
    match by_node(read) {
        ReadRule::Denied(e) => e,
        other => panic!("{read:?} was not denied: {other:?}"),
    }
}

fn selector(s: &str) -> FieldSelector {
    FieldSelector::parse(s).unwrap()
}

#[test]
fn a_node_reads_a_referenced_object_one_at_a_time() {
    for resource in [
        "secrets",
        "configmaps",
        "persistentvolumeclaims",
        "serviceaccounts",
    ] {
        assert_eq!(
            by_node(read("get", "", resource, "d", "x")),
            ReadRule::IfReferenced
        );
    }
    let one = selector("metadata.name=s");
    let narrowed = selected(read("watch", "", "secrets", "d", ""), &one);
    assert_eq!(by_node(narrowed), ReadRule::IfReferenced);
    assert_eq!(
        narrowed.target(),
        "s",
        "the selector names the object looked up"
    );
    assert_eq!(
        by_node(selected(read("list", "", "secrets", "d", ""), &one)),
        ReadRule::IfReferenced
    );
}

#[test]
fn a_node_may_not_list_referenced_kinds_whole() {
    let e = denied(read("list", "", "secrets", "x", ""));
    assert_eq!((e.code, e.reason.as_str()), (403, "Forbidden"));
    assert_eq!(
        e.message,
        "secrets is forbidden: User \"system:node:n1\" cannot list resource \"secrets\" in API group \"\" in the namespace \"x\": can only read individual resources of this type"
    );
    let e = denied(read("watch", "", "configmaps", "", ""));
    assert!(e.message.contains("at the cluster scope"), "{}", e.message);
    let one = selector("metadata.name=s");
    let everywhere = selected(read("list", "", "secrets", "", ""), &one);
    assert_eq!(
        denied(everywhere).code,
        403,
        "a name across all namespaces is not one object"
    );
    let other_field = selector("type=Opaque");
    assert_eq!(
        denied(selected(read("list", "", "secrets", "d", ""), &other_field)).code,
        403
    );
}

#[test]
fn a_lookup_that_finds_no_relationship_is_refused_in_the_node_authorizers_words() {
    let asked = NodeRead {
        node: "n1",
        read: read("get", "", "secrets", "d", "s"),
    };
    assert_eq!(asked.check_related(true), Ok(()));
    let e = asked.check_related(false).unwrap_err();
    assert_eq!(
        e.message,
        "secrets \"s\" is forbidden: User \"system:node:n1\" cannot get resource \"secrets\" in API group \"\" in the namespace \"d\": no relationship found between node 'n1' and this object"
    );
}

#[test]
fn a_node_reads_its_pods_by_field_selector_and_gets_pods_bound_to_it() {
    assert_eq!(
        by_node(read("get", "", "pods", "d", "p")),
        ReadRule::IfPodBound
    );
    let mine = selector("spec.nodeName=n1");
    assert_eq!(
        by_node(selected(read("list", "", "pods", "", ""), &mine)),
        ReadRule::Allowed
    );
    assert_eq!(
        by_node(selected(read("watch", "", "pods", "d", ""), &mine)),
        ReadRule::Allowed
    );
    let theirs = selector("spec.nodeName=n2");
    assert_eq!(
        denied(selected(read("list", "", "pods", "", ""), &theirs)).code,
        403
    );
    let not_mine = selector("spec.nodeName!=n1");
    assert_eq!(
        denied(selected(read("list", "", "pods", "", ""), &not_mine)).code,
        403
    );
    let e = denied(read("list", "", "pods", "", ""));
    assert!(
        e.message.contains("cannot list resource \"pods\""),
        "{}",
        e.message
    );
}

#[test]
fn a_node_reads_its_own_node_lease_and_csinode() {
    assert_eq!(
        by_node(read("get", "", "nodes", "", "n1")),
        ReadRule::Allowed
    );
    let own = selector("metadata.name=n1");
    assert_eq!(
        by_node(selected(read("watch", "", "nodes", "", ""), &own)),
        ReadRule::Allowed
    );
    assert_eq!(denied(read("get", "", "nodes", "", "n2")).code, 403);
    assert_eq!(denied(read("list", "", "nodes", "", "")).code, 403);
    let lease = |ns, name| read("get", "coordination.k8s.io", "leases", ns, name);
    assert_eq!(by_node(lease("kube-node-lease", "n1")), ReadRule::Allowed);
    assert_eq!(denied(lease("kube-node-lease", "n2")).code, 403);
    assert_eq!(denied(lease("default", "n1")).code, 403);
    assert_eq!(
        denied(read(
            "list",
            "coordination.k8s.io",
            "leases",
            "kube-node-lease",
            ""
        ))
        .code,
        403
    );
    assert_eq!(
        by_node(read("get", "storage.k8s.io", "csinodes", "", "n1")),
        ReadRule::Allowed
    );
    assert_eq!(
        denied(read("get", "storage.k8s.io", "csinodes", "", "n2")).code,
        403
    );
}

#[test]
fn a_node_lists_the_cluster_wide_kinds_kubelet_and_kube_proxy_need_and_nothing_else() {
    for (group, resource) in [
        ("", "services"),
        ("", "endpoints"),
        ("discovery.k8s.io", "endpointslices"),
        ("node.k8s.io", "runtimeclasses"),
        ("storage.k8s.io", "csidrivers"),
    ] {
        assert_eq!(
            by_node(read("watch", group, resource, "", "")),
            ReadRule::Allowed
        );
    }
    for (group, resource) in [
        ("", "namespaces"),
        ("", "events"),
        ("storage.k8s.io", "storageclasses"),
        ("apps", "deployments"),
        ("", "persistentvolumes"),
    ] {
        let e = denied(read("list", group, resource, "", ""));
        assert!(e.message.ends_with("at the cluster scope"), "{}", e.message);
    }
}

#[test]
fn a_node_reads_no_subresource() {
    let mut status = read("get", "", "pods", "d", "p");
    status.subresource = Some("status");
    let e = denied(status);
    assert!(
        e.message.contains("cannot get resource \"pods/status\""),
        "{}",
        e.message
    );
}
