//! What a node may write: the rules of Kubernetes' node authorizer and NodeRestriction
//! admission, for both places that enforce them (the embedded control plane, for kubelets
//! holding node certificates, and edgecontroller, for writes edge nodes forward). A node may
//! register and update its own Node and its status, create and renew its own Lease in
//! `kube-node-lease`, manage its own CSINode, create mirror pods bound to itself that reference no other object, update the
//! status of and delete pods bound to it, ask for service-account tokens bound to pods bound to
//! it, and create or update events. Nothing else.
//!
//! What a node (and anyone else short of an administrator) may read is [`NodeRead`]'s and
//! [`Read`]'s to say.

use serde_json::Value;

mod labels;
mod read;

pub use labels::{node_change_refusal, node_may_set_label};
pub use read::{NodeRead, Read, ReadRule};

use crate::podrefs::{self, PodRef};
use crate::status::ApiError;

/// A node's user name is this prefix and its name (its certificate's CN).
pub const NODE_USER_PREFIX: &str = "system:node:";
/// The group every node identity is in.
pub const NODES_GROUP: &str = "system:nodes";
/// The group every authenticated user is in.
pub const AUTHENTICATED_GROUP: &str = "system:authenticated";
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
    /// Allowed if the pod the write depends on ([`NodeWrite::bound_pod`]) is bound to the
    /// node: look it up, then [`NodeWrite::check_bound`].
    IfPodBound,
    Denied(ApiError),
}

// === impl NodeWrite ===

impl<'a> NodeWrite<'a> {
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
            ("", "pods", None) if verb == "create" => match self.mirror_pod_refusal() {
                None => NodeRule::Allowed,
                Some(why) => NodeRule::Denied(ApiError::forbidden("", "pods", name, &why)),
            },
            ("", "pods", Some("status")) if matches!(verb, "update" | "patch") => {
                NodeRule::IfPodBound
            }
            ("", "pods", None) if verb == "delete" => NodeRule::IfPodBound,
            ("", "serviceaccounts", Some("token")) if verb == "create" => self.token_rule(),
            _ => self.deny(&format!("node {node:?} may not {verb} this resource")),
        }
    }

    /// The pod to look up for a write whose rule is [`NodeRule::IfPodBound`]: the pod written
    /// (`pods/status`, a pod delete), or the pod a token request is bound to
    /// (`spec.boundObjectRef.name` of a `serviceaccounts/token` create).
    pub fn bound_pod(&self) -> &'a str {
        match self.is_token_request() {
            true => self
                .body
                .and_then(|b| b["spec"]["boundObjectRef"]["name"].as_str())
                .unwrap_or(""),
            false => self.name,
        }
    }

    /// The decision for a write whose rule is [`NodeRule::IfPodBound`], given the node the pod
    /// [`NodeWrite::bound_pod`] names is bound to (`None`: no such pod, 404; `Some("")`: not
    /// scheduled).
    pub fn check_bound(&self, bound: Option<&str>) -> Result<(), ApiError> {
        let why = match bound {
            Some(bound) if bound == self.node => return Ok(()),
            None => return Err(ApiError::not_found("", "pods", self.bound_pod())),
            Some(_) if self.is_token_request() => {
                "node requested token bound to a pod scheduled on a different node".to_owned()
            }
            Some(_) => format!(
                "node {:?} can only modify pods with spec.nodeName set to itself",
                self.node
            ),
        };
        Err(self.forbidden(&why))
    }

    /// A token request from a node must be bound to a pod (kind Pod, apiVersion v1, a name and
    /// a uid), as the NodeRestriction admission plugin requires; whether that pod is bound to
    /// the node is the lookup's to say.
    fn token_rule(&self) -> NodeRule {
        let bound = self.body.map(|b| &b["spec"]["boundObjectRef"]);
        let field = |key: &str| bound.and_then(|r| r[key].as_str()).unwrap_or("");
        if field("kind") != "Pod" || field("apiVersion") != "v1" || field("name").is_empty() {
            return self.deny("node requested token not bound to a pod");
        }
        if field("uid").is_empty() {
            return self.deny("node requested token with a pod binding without a uid");
        }
        NodeRule::IfPodBound
    }

    fn is_token_request(&self) -> bool {
        (self.group, self.resource, self.subresource) == ("", "serviceaccounts", Some("token"))
    }

    /// Why NodeRestriction admission refuses this pod create, if it does: a node creates only
    /// mirror pods, bound to itself, owned by nothing but its own Node, that reference no other
    /// API object (service accounts and their tokens, secrets, configmaps, claims, trust
    /// bundles), so a pod cannot be used to read what the node may not. The node's UID in an
    /// owner reference is not checked (that needs a lookup).
    fn mirror_pod_refusal(&self) -> Option<String> {
        let node = self.node;
        let Some(pod) = self.body else {
            return Some(format!("node {node:?} can only create mirror pods"));
        };
        if pod["metadata"]["annotations"]
            .get(MIRROR_ANNOTATION)
            .is_none()
        {
            return Some(format!(
                "pod does not have \"{MIRROR_ANNOTATION}\" annotation, node {node:?} can only create mirror pods"
            ));
        }
        if pod["spec"]["nodeName"].as_str() != Some(node) {
            return Some(format!(
                "node {node:?} can only create pods with spec.nodeName set to itself"
            ));
        }
        self.owner_refusal(pod)
            .or_else(|| mirror_reference(pod).map(|what| format!("node {node:?} {what}")))
    }

    /// A mirror pod may have one owner reference: a controller reference to the node's own Node.
    fn owner_refusal(&self, pod: &Value) -> Option<String> {
        let node = self.node;
        let owners = pod["metadata"]["ownerReferences"].as_array()?;
        let [owner] = owners.as_slice() else {
            return (!owners.is_empty()).then(|| {
                format!(
                    "node {node:?} can only create pods with a single owner reference set to itself"
                )
            });
        };
        let field = |key: &str| owner[key].as_str().unwrap_or("");
        if field("apiVersion") != "v1" || field("kind") != "Node" || field("name") != node {
            return Some(format!(
                "node {node:?} can only create pods with an owner reference set to itself"
            ));
        }
        if owner["controller"].as_bool() != Some(true) {
            return Some(format!(
                "node {node:?} can only create pods with a controller owner reference set to itself"
            ));
        }
        if owner["blockOwnerDeletion"].as_bool() == Some(true) {
            return Some(format!(
                "node {node:?} must not set blockOwnerDeletion on an owner reference"
            ));
        }
        None
    }

    fn deny(&self, why: &str) -> NodeRule {
        NodeRule::Denied(self.forbidden(why))
    }

    /// 403 in kube-apiserver's words: `User "system:node:n1" cannot update resource
    /// "pods/status" ...: <why>`.
    fn forbidden(&self, why: &str) -> ApiError {
        let resource = match self.subresource {
            Some(sub) => format!("{}/{sub}", self.resource),
            None => self.resource.to_owned(),
        };
        let message = format!(
            "User \"system:node:{}\" cannot {} resource {resource:?}: {why}",
            self.node, self.verb
        );
        ApiError::forbidden(self.group, self.resource, self.name, &message)
    }
}

/// The first kind of API object `pod` references, as NodeRestriction words its refusal
/// (`can not create pods that reference secrets`).
fn mirror_reference(pod: &Value) -> Option<&'static str> {
    let mut first = None;
    podrefs::walk(pod, &mut |kind, _| {
        first.get_or_insert(kind);
    });
    Some(match first? {
        PodRef::ServiceAccount => "can not create pods that reference a service account",
        PodRef::ServiceAccountToken => "can not create pods that use service account tokens",
        PodRef::Secret => "can not create pods that reference secrets",
        PodRef::ConfigMap => "can not create pods that reference configmaps",
        PodRef::PersistentVolumeClaim => {
            "can not create pods that reference persistentvolumeclaims"
        }
        PodRef::ResourceClaim => "can not create pods that reference resourceclaims",
        PodRef::ClusterTrustBundle => "can not create pods that use clustertrustbundles",
    })
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

    fn token_request(body: Option<&Value>) -> NodeWrite<'_> {
        NodeWrite {
            subresource: Some("token"),
            body,
            ..write("create", "", "serviceaccounts", "d", "builder")
        }
    }

    fn denied(w: NodeWrite<'_>) -> ApiError {
        match w.rule() {
            NodeRule::Denied(e) => e,
            other => panic!("{w:?} was not denied: {other:?}"),
        }
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
    fn a_node_asks_for_tokens_only_for_pods_bound_to_it() {
        let to_pod = json!({"spec": {"boundObjectRef": {"kind": "Pod", "apiVersion": "v1", "name": "web", "uid": "u1"}}});
        let asked = token_request(Some(&to_pod));
        assert_eq!(asked.rule(), NodeRule::IfPodBound);
        assert_eq!(
            asked.bound_pod(),
            "web",
            "the bound pod is looked up, not the account"
        );
        assert_eq!(asked.check_bound(Some("n1")), Ok(()));
        let elsewhere = asked.check_bound(Some("n2")).unwrap_err();
        assert_eq!(elsewhere.code, 403);
        assert!(
            elsewhere.message.contains("scheduled on a different node"),
            "{}",
            elsewhere.message
        );
        assert_eq!(asked.check_bound(Some("")).unwrap_err().code, 403);
        let gone = asked.check_bound(None).unwrap_err();
        assert_eq!(
            (gone.code, gone.message.as_str()),
            (404, "pods \"web\" not found")
        );
    }

    #[test]
    fn a_token_request_from_a_node_without_a_pod_binding_is_refused() {
        let unbound = json!({"spec": {"audiences": ["api"]}});
        let to_secret = json!({"spec": {"boundObjectRef": {"kind": "Secret", "apiVersion": "v1", "name": "s", "uid": "u"}}});
        let no_uid =
            json!({"spec": {"boundObjectRef": {"kind": "Pod", "apiVersion": "v1", "name": "web"}}});
        for body in [None, Some(&unbound), Some(&to_secret)] {
            let e = denied(token_request(body));
            assert_eq!(e.code, 403);
            assert!(
                e.message.contains(
                    "cannot create resource \"serviceaccounts/token\": node requested token not bound to a pod"
                ),
                "{}",
                e.message
            );
        }
        let e = denied(token_request(Some(&no_uid)));
        assert!(e.message.contains("without a uid"), "{}", e.message);
        let to_pod = json!({"spec": {"boundObjectRef": {"kind": "Pod", "apiVersion": "v1", "name": "web", "uid": "u1"}}});
        let update = NodeWrite {
            verb: "update",
            ..token_request(Some(&to_pod))
        };
        assert_eq!(denied(update).code, 403);
    }

    fn mirror_create(pod: &Value) -> NodeRule {
        let mut create = write("create", "", "pods", "d", "m");
        create.body = Some(pod);
        create.rule()
    }

    fn mirror(spec: Value) -> Value {
        json!({"metadata": {"name": "m", "annotations": {MIRROR_ANNOTATION: "h"}},
               "spec": spec})
    }

    fn mirror_refusal(pod: &Value) -> String {
        match mirror_create(pod) {
            NodeRule::Denied(e) => {
                assert_eq!((e.code, e.reason.as_str()), (403, "Forbidden"));
                e.message
            }
            other => panic!("{pod} was not refused: {other:?}"),
        }
    }

    #[test]
    fn a_mirror_pod_that_references_an_object_is_refused_naming_what() {
        let cases = [
            (
                json!({"serviceAccountName": "sa"}),
                "reference a service account",
            ),
            (
                json!({"volumes": [{"name": "v", "projected": {"sources": [{"serviceAccountToken": {"path": "t"}}]}}]}),
                "use service account tokens",
            ),
            (
                json!({"volumes": [{"name": "v", "secret": {"secretName": "s"}}]}),
                "reference secrets",
            ),
            (
                json!({"volumes": [{"name": "v", "projected": {"sources": [{"secret": {"name": "s"}}]}}]}),
                "reference secrets",
            ),
            (
                json!({"volumes": [{"name": "v", "csi": {"driver": "d", "nodePublishSecretRef": {"name": "s"}}}]}),
                "reference secrets",
            ),
            (
                json!({"imagePullSecrets": [{"name": "s"}]}),
                "reference secrets",
            ),
            (
                json!({"containers": [{"env": [{"valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]}]}),
                "reference secrets",
            ),
            (
                json!({"containers": [{"envFrom": [{"secretRef": {"name": "s"}}]}]}),
                "reference secrets",
            ),
            (
                json!({"volumes": [{"name": "v", "configMap": {"name": "c"}}]}),
                "reference configmaps",
            ),
            (
                json!({"initContainers": [{"envFrom": [{"configMapRef": {"name": "c"}}]}]}),
                "reference configmaps",
            ),
            (
                json!({"volumes": [{"name": "v", "persistentVolumeClaim": {"claimName": "c"}}]}),
                "reference persistentvolumeclaims",
            ),
            (
                json!({"volumes": [{"name": "v", "ephemeral": {"volumeClaimTemplate": {}}}]}),
                "reference persistentvolumeclaims",
            ),
            (
                json!({"resourceClaims": [{"name": "gpu", "resourceClaimName": "c"}]}),
                "reference resourceclaims",
            ),
            (
                json!({"volumes": [{"name": "v", "projected": {"sources": [{"clusterTrustBundle": {"name": "b", "path": "p"}}]}}]}),
                "use clustertrustbundles",
            ),
        ];
        for (mut spec, what) in cases {
            spec["nodeName"] = json!("n1");
            let message = mirror_refusal(&mirror(spec));
            assert_eq!(
                message,
                format!("pods \"m\" is forbidden: node \"n1\" can not create pods that {what}")
            );
        }
    }

    #[test]
    fn a_mirror_pod_is_owned_by_its_own_node_or_by_nothing() {
        let owned = |owners: Value| {
            let mut pod =
                mirror(json!({"nodeName": "n1", "containers": [{"name": "c", "image": "i"}]}));
            pod["metadata"]["ownerReferences"] = owners;
            pod
        };
        let own = json!({"apiVersion": "v1", "kind": "Node", "name": "n1", "uid": "u", "controller": true});
        assert_eq!(
            mirror_create(&owned(json!([own.clone()]))),
            NodeRule::Allowed
        );
        assert_eq!(mirror_create(&owned(json!([]))), NodeRule::Allowed);
        let other_node = json!({"apiVersion": "v1", "kind": "Node", "name": "n2", "uid": "u", "controller": true});
        let replicaset = json!({"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "n1", "uid": "u", "controller": true});
        let not_controller = json!({"apiVersion": "v1", "kind": "Node", "name": "n1", "uid": "u"});
        let mut blocking = own.clone();
        blocking["blockOwnerDeletion"] = json!(true);
        for (owners, why) in [
            (
                json!([own.clone(), own.clone()]),
                "with a single owner reference set to itself",
            ),
            (json!([other_node]), "with an owner reference set to itself"),
            (json!([replicaset]), "with an owner reference set to itself"),
            (
                json!([not_controller]),
                "with a controller owner reference set to itself",
            ),
        ] {
            let message = mirror_refusal(&owned(owners));
            assert!(
                message.ends_with(&format!("can only create pods {why}")),
                "{message}"
            );
        }
        let message = mirror_refusal(&owned(json!([blocking])));
        assert!(
            message.contains("must not set blockOwnerDeletion"),
            "{message}"
        );
    }

    #[test]
    fn a_plain_mirror_pod_bound_to_the_node_is_allowed_and_any_other_pod_refused() {
        let plain = mirror(
            json!({"nodeName": "n1", "containers": [{"name": "c", "image": "i",
            "env": [{"name": "A", "value": "1"}]}], "volumes": [{"name": "tmp", "emptyDir": {}}]}),
        );
        assert_eq!(mirror_create(&plain), NodeRule::Allowed);
        let unannotated = json!({"metadata": {"name": "m"}, "spec": {"nodeName": "n1"}});
        assert!(mirror_refusal(&unannotated).contains("can only create mirror pods"));
        let elsewhere = mirror(json!({"nodeName": "n2"}));
        assert!(
            mirror_refusal(&elsewhere)
                .ends_with("can only create pods with spec.nodeName set to itself")
        );
    }

    #[test]
    fn pod_writes_look_up_the_pod_they_name() {
        assert_eq!(
            status(write("patch", "", "pods", "d", "p")).bound_pod(),
            "p"
        );
        assert_eq!(write("delete", "", "pods", "d", "p").bound_pod(), "p");
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
