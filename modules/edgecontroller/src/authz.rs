//! Which writes a node may make: [`apimachinery::noderules`], applied to a forwarded write.

use apimachinery::ApiError;
use apimachinery::forward::NodeRequest;
use apimachinery::noderules::{NodeRule, NodeWrite};

/// Checks `write` from `node`. `pod_node` says which node a pod is bound to, if it is known.
pub(crate) fn authorize<'a>(
    node: &str,
    write: &NodeRequest,
    pod_node: impl Fn(&str, &str) -> Option<&'a str>,
) -> Result<(), ApiError> {
    let asked = node_write(node, write);
    match asked.rule() {
        NodeRule::Allowed => Ok(()),
        NodeRule::Denied(e) => Err(e),
        NodeRule::IfPodBound => asked.check_bound(pod_node(asked.namespace, asked.bound_pod())),
    }
}

/// The pod (in the write's namespace) whose node decides `write`, if its rule depends on one.
pub(crate) fn bound_pod(write: &NodeRequest) -> &str {
    node_write("", write).bound_pod()
}

fn node_write<'a>(node: &'a str, write: &'a NodeRequest) -> NodeWrite<'a> {
    NodeWrite {
        node,
        verb: write.verb.as_str(),
        group: &write.group,
        resource: &write.resource,
        namespace: write.namespace.as_deref().unwrap_or(""),
        name: write.object_name(),
        subresource: write.subresource.map(|s| s.as_str()),
        body: write.body.as_ref(),
    }
}

#[cfg(test)]
mod tests {
    use apimachinery::forward::{BodyType, Subresource, Verb};
    use serde_json::json;

    use super::*;

    fn write(verb: Verb, resource: &str, name: &str, sub: Option<Subresource>) -> NodeRequest {
        NodeRequest {
            verb,
            group: String::new(),
            version: "v1".into(),
            resource: resource.into(),
            namespace: Some("d".into()),
            name: Some(name.to_owned()).filter(|n| !n.is_empty()),
            subresource: sub,
            body_type: BodyType::Json,
            body: None,
            dry_run: false,
        }
    }

    fn check(w: &NodeRequest) -> Result<(), u16> {
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
            check(&write(
                Verb::Patch,
                "pods",
                "mine",
                Some(Subresource::Status)
            )),
            Ok(())
        );
        assert_eq!(check(&write(Verb::Delete, "pods", "mine", None)), Ok(()));
        assert_eq!(
            check(&write(
                Verb::Patch,
                "pods",
                "theirs",
                Some(Subresource::Status)
            )),
            Err(403)
        );
        assert_eq!(
            check(&write(
                Verb::Patch,
                "pods",
                "unknown",
                Some(Subresource::Status)
            )),
            Err(404)
        );
    }

    #[test]
    fn a_token_request_is_checked_against_where_its_bound_pod_is() {
        let token = |pod: &str| {
            let mut create = write(
                Verb::Create,
                "serviceaccounts",
                "builder",
                Some(Subresource::Token),
            );
            create.body = Some(json!({"spec": {"boundObjectRef": {
                "kind": "Pod", "apiVersion": "v1", "name": pod, "uid": "u",
            }}}));
            create
        };
        assert_eq!(bound_pod(&token("mine")), "mine");
        assert_eq!(check(&token("mine")), Ok(()));
        assert_eq!(check(&token("theirs")), Err(403));
        assert_eq!(check(&token("unknown")), Err(404));
        let unbound = write(
            Verb::Create,
            "serviceaccounts",
            "builder",
            Some(Subresource::Token),
        );
        assert_eq!(check(&unbound), Err(403));
    }

    #[test]
    fn a_forwarded_mirror_pod_that_references_a_secret_is_refused() {
        let mirror = |volumes: serde_json::Value| {
            let mut create = write(Verb::Create, "pods", "", None);
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
        let mut create = write(Verb::Create, "nodes", "", None);
        create.namespace = None;
        create.body = Some(json!({"metadata": {"name": "n1"}}));
        assert_eq!(check(&create), Ok(()));
        create.body = Some(json!({"metadata": {"name": "n2"}}));
        assert_eq!(check(&create), Err(403));
    }
}
