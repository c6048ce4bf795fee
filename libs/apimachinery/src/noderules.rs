//! What a node may write: the rules of Kubernetes' node authorizer and NodeRestriction
//! admission, for both places that enforce them (the embedded control plane, for kubelets
//! holding node certificates, and edgecontroller, for writes edge nodes forward). A node may
//! register and update its own Node and its status, create and renew its own Lease in
//! `kube-node-lease`, manage its own CSINode, create mirror pods bound to itself, update the
//! status of and delete pods bound to it, and create or update events. Nothing else.

use serde_json::Value;

use crate::status::ApiError;

/// The namespace of node leases.
pub const NODE_LEASE_NAMESPACE: &str = "kube-node-lease";
/// The annotation that marks a mirror pod (a static pod's copy in the API).
pub const MIRROR_ANNOTATION: &str = "kubernetes.io/config.mirror";

/// One write a node asks for.
#[derive(Clone, Copy, Debug)]
pub struct NodeWrite<'a> {
    /// The node's name (from its certificate).
    pub node: &'a str,
    /// `create`, `update`, `patch` or `delete`.
    pub verb: &'a str,
    pub group: &'a str,
    /// Plural resource name.
    pub resource: &'a str,
    pub namespace: &'a str,
    /// The object's name (for a create: the body's).
    pub name: &'a str,
    pub subresource: Option<&'a str>,
    /// The object written, when there is one (create, update).
    pub body: Option<&'a Value>,
}

/// The rules' answer before any lookup.
#[derive(Clone, Debug, PartialEq)]
pub enum NodeRule {
    Allowed,
    /// Allowed if the pod named by the write is bound to the node: look it up, then
    /// [`NodeWrite::check_bound`].
    IfPodBound,
    Denied(ApiError),
}

// === impl NodeWrite ===

impl NodeWrite<'_> {
    /// What the rules say of this write.
    pub fn rule(&self) -> NodeRule {
        let (node, verb, name) = (self.node, self.verb, self.name);
        let writes = matches!(verb, "create" | "update" | "patch");
        match (self.group, self.resource, self.subresource) {
            ("" | "events.k8s.io", "events", _) if writes => NodeRule::Allowed,
            ("", "nodes", None | Some("status")) if writes => match name == node {
                true => NodeRule::Allowed,
                false => self.deny(&format!("node {node:?} can only modify its own Node")),
            },
            ("coordination.k8s.io", "leases", None) if writes => {
                match self.namespace == NODE_LEASE_NAMESPACE && name == node {
                    true => NodeRule::Allowed,
                    false => self.deny(&format!(
                        "node {node:?} can only create and renew its own Lease in {NODE_LEASE_NAMESPACE}"
                    )),
                }
            }
            ("storage.k8s.io", "csinodes", None) if writes || verb == "delete" => {
                match name == node {
                    true => NodeRule::Allowed,
                    false => self.deny(&format!("node {node:?} can only modify its own CSINode")),
                }
            }
            ("", "pods", None) if verb == "create" => match self.is_own_mirror_pod() {
                true => NodeRule::Allowed,
                false => self.deny(&format!(
                    "node {node:?} can only create mirror pods bound to itself"
                )),
            },
            ("", "pods", Some("status")) if matches!(verb, "update" | "patch") => {
                NodeRule::IfPodBound
            }
            ("", "pods", None) if verb == "delete" => NodeRule::IfPodBound,
            _ => self.deny(&format!("node {node:?} may not {verb} this resource")),
        }
    }

    /// The decision for a write whose rule is [`NodeRule::IfPodBound`], given the node the pod
    /// is bound to (`None`: no such pod, 404).
    pub fn check_bound(&self, bound: Option<&str>) -> Result<(), ApiError> {
        match bound {
            Some(bound) if bound == self.node => Ok(()),
            Some(_) => match self.deny(&format!(
                "node {:?} can only modify pods with spec.nodeName set to itself",
                self.node
            )) {
                NodeRule::Denied(e) => Err(e),
                _ => unreachable!("deny always denies"),
            },
            None => Err(ApiError::not_found(self.group, self.resource, self.name)),
        }
    }

    fn is_own_mirror_pod(&self) -> bool {
        let Some(body) = self.body else {
            return false;
        };
        let bound = body["spec"]["nodeName"].as_str() == Some(self.node);
        bound
            && body["metadata"]["annotations"]
                .get(MIRROR_ANNOTATION)
                .is_some()
    }

    /// 403 in kube-apiserver's words: `User "system:node:n1" cannot update resource
    /// "pods/status" ...: <why>`.
    fn deny(&self, why: &str) -> NodeRule {
        let resource = match self.subresource {
            Some(sub) => format!("{}/{sub}", self.resource),
            None => self.resource.to_owned(),
        };
        let message = format!(
            "User \"system:node:{}\" cannot {} resource {resource:?}: {why}",
            self.node, self.verb
        );
        NodeRule::Denied(ApiError::forbidden(
            self.group,
            self.resource,
            self.name,
            &message,
        ))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn write<'a>(
        verb: &'a str,
        group: &'a str,
        resource: &'a str,
        ns: &'a str,
        name: &'a str,
    ) -> NodeWrite<'a> {
        NodeWrite {
            node: "n1",
            verb,
            group,
            resource,
            namespace: ns,
            name,
            subresource: None,
            body: None,
        }
    }

    fn status(mut w: NodeWrite<'_>) -> NodeWrite<'_> {
        w.subresource = Some("status");
        w
    }

    fn allowed(w: NodeWrite<'_>) -> bool {
        w.rule() == NodeRule::Allowed
    }

    #[test]
    fn a_node_manages_its_own_node_lease_and_csinode() {
        assert!(allowed(write("create", "", "nodes", "", "n1")));
        assert!(allowed(status(write("patch", "", "nodes", "", "n1"))));
        assert!(!allowed(status(write("patch", "", "nodes", "", "n2"))));
        assert!(!allowed(write("delete", "", "nodes", "", "n1")));
        let lease = |ns, name| write("update", "coordination.k8s.io", "leases", ns, name);
        assert!(allowed(lease("kube-node-lease", "n1")));
        assert!(!allowed(lease("kube-node-lease", "n2")));
        assert!(!allowed(lease("default", "n1")));
        assert!(allowed(write(
            "update",
            "storage.k8s.io",
            "csinodes",
            "",
            "n1"
        )));
        assert!(!allowed(write(
            "update",
            "storage.k8s.io",
            "csinodes",
            "",
            "n2"
        )));
    }

    #[test]
    fn pods_need_to_be_bound_to_the_node() {
        let patch = status(write("patch", "", "pods", "d", "p"));
        assert_eq!(patch.rule(), NodeRule::IfPodBound);
        assert_eq!(patch.check_bound(Some("n1")), Ok(()));
        assert_eq!(patch.check_bound(Some("n2")).unwrap_err().code, 403);
        assert_eq!(patch.check_bound(None).unwrap_err().code, 404);
        assert_eq!(
            write("delete", "", "pods", "d", "p").rule(),
            NodeRule::IfPodBound
        );
        assert!(!allowed(write("patch", "", "pods", "d", "p")));
        assert!(!allowed(write("create", "", "pods", "d", "p")));
        let mirror = json!({"metadata": {"annotations": {MIRROR_ANNOTATION: "h"}}, "spec": {"nodeName": "n1"}});
        let mut create = write("create", "", "pods", "d", "m");
        create.body = Some(&mirror);
        assert!(allowed(create));
        let elsewhere = json!({"metadata": {"annotations": {MIRROR_ANNOTATION: "h"}}, "spec": {"nodeName": "n2"}});
        create.body = Some(&elsewhere);
        assert!(!allowed(create));
    }

    #[test]
    fn events_are_allowed_and_everything_else_refused_in_the_api_servers_words() {
        assert!(allowed(write("create", "", "events", "d", "e")));
        assert!(allowed(write("patch", "events.k8s.io", "events", "d", "e")));
        assert!(!allowed(write("delete", "", "events", "d", "e")));
        let NodeRule::Denied(e) = write("update", "", "configmaps", "d", "c").rule() else {
            panic!("a configmap update was not denied");
        };
        assert_eq!((e.code, e.reason.as_str()), (403, "Forbidden"));
        assert!(
            e.message
                .contains("User \"system:node:n1\" cannot update resource \"configmaps\""),
            "{}",
            e.message
        );
    }
}
