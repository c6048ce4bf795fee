//! Which writes a node may make (the rules of Kubernetes' node authorizer and NodeRestriction,
//! for what an edge node sends): register and update its own Node and its status, create and
//! renew its own Lease, manage its own CSINode, create mirror pods bound to it, update the
//! status of pods bound to it, delete pods bound to it, and create or update events.
//! Everything else is refused with 403.

use apimachinery::{ApiError, ForwardedWrite};

use crate::kinds::NODE_LEASE_NAMESPACE;

/// Checks `write` from `node`. `pod_node` says which node a pod is bound to, if it exists.
pub(crate) fn authorize<'a>(
    node: &str,
    write: &ForwardedWrite,
    pod_node: impl Fn(&str, &str) -> Option<&'a str>,
) -> Result<(), ApiError> {
    let name = write.object_name();
    let verb = write.verb.as_str();
    let sub = write.subresource.as_deref();
    let deny = |why: String| {
        Err(ApiError::forbidden(
            &write.group,
            &write.resource,
            name,
            &why,
        ))
    };
    match (write.group.as_str(), write.resource.as_str()) {
        ("", "nodes") => {
            if !matches!(verb, "create" | "update" | "patch")
                || !matches!(sub, None | Some("status"))
            {
                return deny(format!("node {node:?} may not {verb} nodes"));
            }
            if name != node {
                return deny(format!("node {node:?} can only modify its own Node"));
            }
            Ok(())
        }
        ("coordination.k8s.io", "leases") => {
            let own = write.namespace == NODE_LEASE_NAMESPACE && name == node;
            if !matches!(verb, "create" | "update" | "patch") || sub.is_some() || !own {
                return deny(format!(
                    "node {node:?} can only create and renew its own Lease in {NODE_LEASE_NAMESPACE}"
                ));
            }
            Ok(())
        }
        ("storage.k8s.io", "csinodes") => {
            if !matches!(verb, "create" | "update" | "patch" | "delete") || name != node {
                return deny(format!("node {node:?} can only modify its own CSINode"));
            }
            Ok(())
        }
        ("", "pods") if verb == "create" && sub.is_none() => {
            let body = write.body.as_ref();
            let bound = body.and_then(|b| b["spec"]["nodeName"].as_str()) == Some(node);
            let mirror = body.is_some_and(|b| {
                b["metadata"]["annotations"]
                    .get("kubernetes.io/config.mirror")
                    .is_some()
            });
            if !(bound && mirror) {
                return deny(format!(
                    "node {node:?} can only create mirror pods bound to itself"
                ));
            }
            Ok(())
        }
        ("", "pods") => {
            let allowed = matches!(
                (verb, sub),
                ("update" | "patch", Some("status")) | ("delete", None)
            );
            if !allowed {
                return deny(format!(
                    "node {node:?} may only update the status of and delete pods bound to it"
                ));
            }
            match pod_node(&write.namespace, name) {
                Some(bound) if bound == node => Ok(()),
                Some(_) => deny(format!(
                    "node {node:?} can only modify pods with spec.nodeName set to itself"
                )),
                None => Err(ApiError::not_found("", "pods", name)),
            }
        }
        ("" | "events.k8s.io", "events") if matches!(verb, "create" | "update" | "patch") => Ok(()),
        _ => deny(format!(
            "node {node:?} may not {verb} {}",
            write.store_resource()
        )),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn write(verb: &str, group: &str, resource: &str, ns: &str, name: &str) -> ForwardedWrite {
        ForwardedWrite {
            verb: verb.into(),
            group: group.into(),
            version: "v1".into(),
            resource: resource.into(),
            namespace: ns.into(),
            name: name.into(),
            ..Default::default()
        }
    }

    fn status(mut w: ForwardedWrite) -> ForwardedWrite {
        w.subresource = Some("status".into());
        w
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
    fn a_node_manages_its_own_node_and_lease() {
        let mut create = write("create", "", "nodes", "", "");
        create.body = Some(json!({"metadata": {"name": "n1"}}));
        assert_eq!(check(&create), Ok(()));
        assert_eq!(
            check(&status(write("patch", "", "nodes", "", "n1"))),
            Ok(())
        );
        assert_eq!(
            check(&status(write("patch", "", "nodes", "", "n2"))),
            Err(403)
        );
        assert_eq!(check(&write("delete", "", "nodes", "", "n1")), Err(403));
        let lease = write(
            "update",
            "coordination.k8s.io",
            "leases",
            "kube-node-lease",
            "n1",
        );
        assert_eq!(check(&lease), Ok(()));
        let other = write(
            "update",
            "coordination.k8s.io",
            "leases",
            "kube-node-lease",
            "n2",
        );
        assert_eq!(check(&other), Err(403));
        let elsewhere = write("update", "coordination.k8s.io", "leases", "default", "n1");
        assert_eq!(check(&elsewhere), Err(403));
        let csinode = write("update", "storage.k8s.io", "csinodes", "", "n1");
        assert_eq!(check(&csinode), Ok(()));
        let other = write("update", "storage.k8s.io", "csinodes", "", "n2");
        assert_eq!(check(&other), Err(403));
    }

    #[test]
    fn a_node_touches_only_pods_bound_to_it() {
        assert_eq!(
            check(&status(write("patch", "", "pods", "d", "mine"))),
            Ok(())
        );
        assert_eq!(check(&write("delete", "", "pods", "d", "mine")), Ok(()));
        assert_eq!(
            check(&status(write("patch", "", "pods", "d", "theirs"))),
            Err(403)
        );
        assert_eq!(check(&write("delete", "", "pods", "d", "theirs")), Err(403));
        assert_eq!(check(&write("patch", "", "pods", "d", "mine")), Err(403));
        assert_eq!(check(&write("create", "", "pods", "d", "")), Err(403));
        let mut mirror = write("create", "", "pods", "d", "");
        mirror.body = Some(
            json!({"metadata": {"name": "m", "annotations": {"kubernetes.io/config.mirror": "h"}}, "spec": {"nodeName": "n1"}}),
        );
        assert_eq!(check(&mirror), Ok(()));
        mirror.body.as_mut().unwrap()["spec"]["nodeName"] = json!("n2");
        assert_eq!(check(&mirror), Err(403));
        assert_eq!(
            check(&status(write("patch", "", "pods", "d", "unknown"))),
            Err(404)
        );
    }

    #[test]
    fn events_are_allowed_and_everything_else_refused() {
        assert_eq!(check(&write("create", "", "events", "d", "")), Ok(()));
        assert_eq!(check(&write("delete", "", "events", "d", "e")), Err(403));
        assert_eq!(
            check(&write("update", "", "configmaps", "d", "c")),
            Err(403)
        );
        assert_eq!(check(&write("create", "", "secrets", "d", "")), Err(403));
    }
}
