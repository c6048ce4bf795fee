//! Which writes a node may make: [`apimachinery::noderules`], applied to a forwarded write.

use apimachinery::noderules::{NodeRule, NodeWrite};
use apimachinery::{ApiError, ForwardedWrite};

/// Checks `write` from `node`. `pod_node` says which node a pod is bound to, if it is known.
pub(crate) fn authorize<'a>(
    node: &str,
    write: &ForwardedWrite,
    pod_node: impl Fn(&str, &str) -> Option<&'a str>,
) -> Result<(), ApiError> {
    let asked = node_write(node, write);
    match asked.rule() {
        NodeRule::Allowed => Ok(()),
        NodeRule::Denied(e) => Err(e),
        NodeRule::IfPodBound => asked.check_bound(pod_node(&write.namespace, asked.bound_pod())),
    }
}

/// The pod (in the write's namespace) whose node decides `write`, if its rule depends on one.
pub(crate) fn bound_pod(write: &ForwardedWrite) -> &str {
    node_write("", write).bound_pod()
}

fn node_write<'a>(node: &'a str, write: &'a ForwardedWrite) -> NodeWrite<'a> {
    NodeWrite {
        node,
        verb: &write.verb,
        group: &write.group,
        resource: &write.resource,
        namespace: &write.namespace,
        name: write.object_name(),
        subresource: write.subresource.as_deref(),
        body: write.body.as_ref(),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn write(verb: &str, resource: &str, name: &str, sub: Option<&str>) -> ForwardedWrite {
        ForwardedWrite {
            verb: verb.into(),
            version: "v1".into(),
            resource: resource.into(),
            namespace: "d".into(),
            name: name.into(),
            subresource: sub.map(str::to_owned),
            ..Default::default()
        }
    }

    fn check(w: &ForwardedWrite) -> Result<(), u16> {
        let pods = |_: &str, name: &str| match name {
            "mine" => Some("n1"),
            "theirs" => Some("n2"),
            _ => None,
        };
        authorize("n1", w, pods).map_err(|e| e.code)
    }

    #[test]
    fn pod_writes_are_checked_against_where_the_pod_is_bound() {
        assert_eq!(
            check(&write("patch", "pods", "mine", Some("status"))),
            Ok(())
        );
        assert_eq!(check(&write("delete", "pods", "mine", None)), Ok(()));
        assert_eq!(
            check(&write("patch", "pods", "theirs", Some("status"))),
            Err(403)
        );
        assert_eq!(
            check(&write("patch", "pods", "unknown", Some("status"))),
            Err(404)
        );
    }

    #[test]
    fn a_token_request_is_checked_against_where_its_bound_pod_is() {
        let token = |pod: &str| {
            let mut create = write("create", "serviceaccounts", "builder", Some("token"));
            create.body = Some(json!({"spec": {"boundObjectRef": {
                "kind": "Pod", "apiVersion": "v1", "name": pod, "uid": "u",
            }}}));
            create
        };
        assert_eq!(bound_pod(&token("mine")), "mine");
        assert_eq!(check(&token("mine")), Ok(()));
        assert_eq!(check(&token("theirs")), Err(403));
        assert_eq!(check(&token("unknown")), Err(404));
        let unbound = write("create", "serviceaccounts", "builder", Some("token"));
        assert_eq!(check(&unbound), Err(403));
    }

    #[test]
    fn a_forwarded_mirror_pod_that_references_a_secret_is_refused() {
        let mirror = |volumes: serde_json::Value| {
            let mut create = write("create", "pods", "", None);
            create.body = Some(json!({
                "metadata": {"name": "m", "namespace": "d",
                             "annotations": {"kubernetes.io/config.mirror": "h"}},
                "spec": {"nodeName": "n1", "volumes": volumes,
                         "containers": [{"name": "c", "image": "i"}]},
            }));
            create
        };
        let stealing = mirror(json!([{"name": "v", "secret": {"secretName": "admin-token"}}]));
        let e = authorize("n1", &stealing, |_: &str, _: &str| None).unwrap_err();
        assert_eq!(
            (e.code, e.message.as_str()),
            (
                403,
                "pods \"m\" is forbidden: node \"n1\" can not create pods that reference secrets"
            )
        );
        assert_eq!(
            check(&mirror(json!([{"name": "tmp", "emptyDir": {}}]))),
            Ok(())
        );
    }

    #[test]
    fn a_create_is_named_by_its_body() {
        let mut create = write("create", "nodes", "", None);
        create.namespace.clear();
        create.body = Some(json!({"metadata": {"name": "n1"}}));
        assert_eq!(check(&create), Ok(()));
        create.body = Some(json!({"metadata": {"name": "n2"}}));
        assert_eq!(check(&create), Err(403));
    }
}
