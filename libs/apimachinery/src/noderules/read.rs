//! What a caller may read (get, list, watch) of the embedded control plane, short of RBAC.
//!
//! A node reads what Kubernetes' Node authorizer and the `system:node` role let a kubelet read
//! (with `AuthorizeNodeWithSelectors`, as in Kubernetes 1.32):
//! - secrets, configmaps, persistentvolumeclaims and serviceaccounts referenced by a pod bound
//!   to it: a get, or a list/watch narrowed to that one object with
//!   `fieldSelector=metadata.name=<x>` (kubelet's watch-based managers do that);
//! - pods: a get of a pod bound to it, a list/watch with `fieldSelector=spec.nodeName=<node>`;
//! - its own Node (get, or list/watch narrowed to its name), its own Lease in
//!   `kube-node-lease` and its own CSINode (get);
//! - the cluster-wide kinds kubelet and kube-proxy list: services, endpoints, endpointslices,
//!   runtimeclasses, csidrivers.
//!
//! Not granted (decided against the `system:node` role): namespaces, other nodes,
//! storageclasses, events, subresources. Persistent volumes, volume attachments and resource
//! claims would need more of the Node authorizer's graph than this control plane keeps.
//!
//! What a node may read beyond these, and what anyone else may read, is RBAC's to say (the
//! embedded control plane asks these rules OR RBAC, as kube-apiserver's `Node,RBAC`).

use crate::noderules::NODE_LEASE_NAMESPACE;
use crate::selector::{FieldOperator, FieldSelector};
use crate::status::ApiError;

/// One read, as the REST layer resolved it.
#[derive(Clone, Copy, Debug)]
pub struct Read<'a> {
    /// `get`, `list` or `watch`.
    pub verb: &'a str,
    pub group: &'a str,
    /// Plural resource name.
    pub resource: &'a str,
    /// `""`: cluster-scoped, or across all namespaces.
    pub namespace: &'a str,
    /// The object named in the URL (`""`: a collection).
    pub name: &'a str,
    pub subresource: Option<&'a str>,
    /// The request's field selector, if it parsed.
    pub field_selector: Option<&'a FieldSelector>,
}

/// One read by a node.
#[derive(Clone, Copy, Debug)]
pub struct NodeRead<'a> {
    /// The node's name (from its certificate).
    pub node: &'a str,
    pub read: Read<'a>,
}

/// The rules' answer to a node's read before any lookup.
#[derive(Clone, Debug, PartialEq)]
pub enum ReadRule {
    Allowed,
    /// Allowed if a pod bound to the node in the read's namespace references the object
    /// [`Read::target`] names ([`crate::podrefs::readable`]): look, then
    /// [`NodeRead::check_related`].
    IfReferenced,
    /// Allowed if the pod [`Read::target`] names is bound to the node: look, then
    /// [`NodeRead::check_related`].
    IfPodBound,
    Denied(ApiError),
}

/// The kinds every node lists (`(group, resource)`).
const CLUSTER_WIDE: &[(&str, &str)] = &[
    ("", "services"),
    ("", "endpoints"),
    ("discovery.k8s.io", "endpointslices"),
    ("node.k8s.io", "runtimeclasses"),
    ("storage.k8s.io", "csidrivers"),
];

/// The kinds a node reads one object at a time, when its pods reference them.
const REFERENCED: &[&str] = &[
    "secrets",
    "configmaps",
    "persistentvolumeclaims",
    "serviceaccounts",
];

// === impl Read ===

impl<'a> Read<'a> {
    /// The one object the read is about: the URL's name, else the `metadata.name=<x>` of a
    /// list or watch's field selector (`""`: a whole collection).
    pub fn target(&self) -> &'a str {
        if !self.name.is_empty() {
            return self.name;
        }
        self.selected("metadata.name").unwrap_or("")
    }

    /// 403 in kube-apiserver's words: `secrets "s" is forbidden: User "u" cannot get resource
    /// "secrets" in API group "" in the namespace "d": <why>`.
    pub fn forbidden(&self, user: &str, why: &str) -> ApiError {
        let resource = match self.subresource {
            Some(sub) => format!("{}/{sub}", self.resource),
            None => self.resource.to_owned(),
        };
        let scope = match self.namespace {
            "" => "at the cluster scope".to_owned(),
            ns => format!("in the namespace {ns:?}"),
        };
        let mut message = format!(
            "User {user:?} cannot {} resource {resource:?} in API group {:?} {scope}",
            self.verb, self.group
        );
        if !why.is_empty() {
            message = format!("{message}: {why}");
        }
        ApiError::forbidden(self.group, self.resource, self.target(), &message)
    }

    /// The value of a `field=value` term of the field selector.
    fn selected(&self, field: &str) -> Option<&'a str> {
        let selector = self.field_selector?;
        selector
            .requirements()
            .iter()
            .find(|t| t.field == field && t.operator == FieldOperator::Equals)
            .map(|t| t.value.as_str())
    }
}

// === impl NodeRead ===

impl NodeRead<'_> {
    /// What the rules say of this read.
    pub fn rule(&self) -> ReadRule {
        let read = &self.read;
        if let Some(sub) = read.subresource {
            return self.deny(&format!("cannot {} subresource {sub:?}", read.verb));
        }
        if CLUSTER_WIDE.contains(&(read.group, read.resource)) {
            return ReadRule::Allowed;
        }
        match (read.group, read.resource) {
            ("", resource) if REFERENCED.contains(&resource) => self.referenced_rule(),
            ("", "pods") => self.pods_rule(),
            ("", "nodes") => self.own_rule(true, "can only read its own Node object"),
            ("coordination.k8s.io", "leases") => match read.namespace == NODE_LEASE_NAMESPACE {
                true => self.own_rule(false, "can only get its own Lease"),
                false => self.deny(&format!(
                    "can only get its own Lease in {NODE_LEASE_NAMESPACE}"
                )),
            },
            ("storage.k8s.io", "csinodes") => self.own_rule(false, "can only get its own CSINode"),
            _ => self.deny(""),
        }
    }

    /// The decision for a read whose rule needed a lookup, given whether the object is related
    /// to the node (referenced by one of its pods, or a pod bound to it). A missing object is
    /// a 403 as well: authorization comes before the lookup, so it does not tell what exists.
    pub fn check_related(&self, related: bool) -> Result<(), ApiError> {
        match related {
            true => Ok(()),
            false => Err(self.forbidden(&format!(
                "no relationship found between node '{}' and this object",
                self.node
            ))),
        }
    }

    /// A referenced object: one at a time, in a namespace.
    fn referenced_rule(&self) -> ReadRule {
        let read = &self.read;
        if read.target().is_empty() || read.namespace.is_empty() {
            return self.deny("can only read individual resources of this type");
        }
        ReadRule::IfReferenced
    }

    /// Pods: one bound to the node, or the node's pods by field selector.
    fn pods_rule(&self) -> ReadRule {
        let read = &self.read;
        if read.verb == "get" {
            return ReadRule::IfPodBound;
        }
        match read.selected("spec.nodeName") == Some(self.node) {
            true => ReadRule::Allowed,
            false => self.deny(&format!(
                "can only list/watch pods with spec.nodeName field selector set to {:?}",
                self.node
            )),
        }
    }

    /// An object named after the node: a get of it, or (`narrowed_lists`) a list/watch
    /// narrowed to it.
    fn own_rule(&self, narrowed_lists: bool, why: &str) -> ReadRule {
        let read = &self.read;
        let verb_ok = read.verb == "get" || narrowed_lists;
        match verb_ok && read.target() == self.node {
            true => ReadRule::Allowed,
            false => self.deny(&format!("node {:?} {why}", self.node)),
        }
    }

    fn deny(&self, why: &str) -> ReadRule {
        ReadRule::Denied(self.forbidden(why))
    }

    fn forbidden(&self, why: &str) -> ApiError {
        let user = format!("system:node:{}", self.node);
        self.read.forbidden(&user, why)
    }
}

#[cfg(test)]
mod tests;
