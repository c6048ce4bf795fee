//! The resource types edgecontroller watches, and which nodes get each one.

use apimachinery::noderules::NODE_LEASE_NAMESPACE;
use kube::core::ApiResource;

/// Which edge nodes hold an object of a kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Scope {
    /// The Node named like the node.
    Node,
    /// Objects named like the node: its Lease (in `kube-node-lease`), its CSINode.
    Named,
    /// Pods bound to the node (`spec.nodeName`).
    Pod,
    /// ConfigMaps, Secrets and ServiceAccounts the node's pods reference.
    Referenced,
    /// Every edge node (services and endpointslices for kube-proxy, cluster objects a kubelet
    /// reads, the CRDs of subscribed custom resources).
    Global,
    /// Subscribed custom resources: the node named in `spec.nodeName` when set (a device bound
    /// to a node), else every edge node.
    Custom,
    /// A kind nodes asked for ([`apimachinery::subscribe`]): every object, to the nodes that
    /// subscribed to it.
    Subscribed,
    /// KubeEdge's NodeGroups: each to the nodes whose
    /// [`BELONGING_TO`](apimachinery::sites::BELONGING_TO) label names it (the edge filters
    /// site-local services with its members).
    Group,
}

/// One watched resource type.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Kind {
    pub group: String,
    pub version: String,
    pub kind: String,
    pub plural: String,
    pub scope: Scope,
    /// Watch only this namespace (leases: `kube-node-lease`).
    pub namespace: Option<String>,
    /// Watch only objects matching this field selector (the CRD of a custom resource).
    pub field_selector: Option<String>,
    /// The API may not serve the kind (its CRD is not installed): a watch that fails is retried
    /// quietly (readiness waits for the built-in kinds only).
    pub optional: bool,
}

/// The label that makes a Node an edge node.
pub const EDGE_LABEL: &str = "node-role.kubernetes.io/edge";

// === impl Kind ===

impl Kind {
    fn new(group: &str, version: &str, kind: &str, plural: &str, scope: Scope) -> Kind {
        Kind {
            group: group.into(),
            version: version.into(),
            kind: kind.into(),
            plural: plural.into(),
            scope,
            namespace: None,
            field_selector: None,
            optional: false,
        }
    }

    /// KubeEdge's NodeGroup (`apps.kubeedge.io/v1alpha1`), whose CRD is there only while the
    /// site controllers are enabled.
    pub fn node_group() -> Kind {
        use apimachinery::sites;
        let mut kind = Kind::new(
            sites::NODE_GROUP_GROUP,
            sites::NODE_GROUP_VERSION,
            sites::NODE_GROUP_KIND,
            sites::NODE_GROUPS,
            Scope::Group,
        );
        kind.optional = true;
        kind
    }

    /// The built-in kinds, in a fixed order (their index is their id).
    pub fn builtins() -> Vec<Kind> {
        let mut lease = Kind::new("coordination.k8s.io", "v1", "Lease", "leases", Scope::Named);
        lease.namespace = Some(NODE_LEASE_NAMESPACE.into());
        vec![
            Kind::new("", "v1", "Node", "nodes", Scope::Node),
            lease,
            Kind::new("storage.k8s.io", "v1", "CSINode", "csinodes", Scope::Named),
            Kind::new("", "v1", "Pod", "pods", Scope::Pod),
            Kind::new("", "v1", "ConfigMap", "configmaps", Scope::Referenced),
            Kind::new("", "v1", "Secret", "secrets", Scope::Referenced),
            Kind::new(
                "",
                "v1",
                "ServiceAccount",
                "serviceaccounts",
                Scope::Referenced,
            ),
            Kind::new("", "v1", "Service", "services", Scope::Global),
            Kind::new(
                "discovery.k8s.io",
                "v1",
                "EndpointSlice",
                "endpointslices",
                Scope::Global,
            ),
            Kind::new(
                "storage.k8s.io",
                "v1",
                "CSIDriver",
                "csidrivers",
                Scope::Global,
            ),
            Kind::new(
                "node.k8s.io",
                "v1",
                "RuntimeClass",
                "runtimeclasses",
                Scope::Global,
            ),
        ]
    }

    /// A subscribed custom resource, `group/version/plural/Kind`
    /// (`devices.kubeedge.io/v1beta1/devices/Device`), and the kind that brings its CRD along
    /// (so the edge serves it).
    pub fn custom(spec: &str) -> Option<[Kind; 2]> {
        let parts: Vec<&str> = spec.split('/').collect();
        let [group, version, plural, kind] = parts[..] else {
            return None;
        };
        if [group, version, plural, kind].iter().any(|p| p.is_empty()) {
            return None;
        }
        let mut crd = Kind::new(
            "apiextensions.k8s.io",
            "v1",
            "CustomResourceDefinition",
            "customresourcedefinitions",
            Scope::Global,
        );
        crd.field_selector = Some(format!("metadata.name={plural}.{group}"));
        Some([crd, Kind::new(group, version, kind, plural, Scope::Custom)])
    }

    /// A kind nodes subscribed to, of kind name `kind` (from discovery).
    pub fn subscribed(sub: &apimachinery::subscribe::Subscription, kind: &str) -> Kind {
        Kind::new(
            &sub.group,
            &sub.version,
            kind,
            &sub.resource,
            Scope::Subscribed,
        )
    }

    /// `plural` for the core group, else `plural.group`: the edge store's collection name.
    pub fn store_resource(&self) -> String {
        if self.group.is_empty() {
            self.plural.clone()
        } else {
            format!("{}.{}", self.plural, self.group)
        }
    }

    pub fn api_resource(&self) -> ApiResource {
        let api_version = match self.group.is_empty() {
            true => self.version.clone(),
            false => format!("{}/{}", self.group, self.version),
        };
        ApiResource {
            group: self.group.clone(),
            version: self.version.clone(),
            api_version,
            kind: self.kind.clone(),
            plural: self.plural.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn custom_resources_are_named_by_group_version_plural_and_kind() {
        let [crd, k] = Kind::custom("devices.kubeedge.io/v1beta1/devices/Device").unwrap();
        assert_eq!(
            crd.field_selector.as_deref(),
            Some("metadata.name=devices.devices.kubeedge.io")
        );
        assert_eq!(k.store_resource(), "devices.devices.kubeedge.io");
        assert_eq!(k.api_resource().api_version, "devices.kubeedge.io/v1beta1");
        assert_eq!(k.scope, Scope::Custom);
        assert!(Kind::custom("devices.kubeedge.io/v1beta1/devices").is_none());
        assert!(Kind::custom("a//b/C").is_none());
    }

    #[test]
    fn node_groups_are_optional_and_stored_under_their_group() {
        let kind = Kind::node_group();
        assert!(kind.optional);
        assert_eq!(
            kind.store_resource(),
            apimachinery::sites::NODE_GROUP_RESOURCE
        );
        assert!(apimachinery::subscribe::is_always_delivered(
            &kind.group,
            &kind.plural
        ));
    }

    #[test]
    fn the_built_in_kinds_are_the_ones_the_edge_knows_are_always_delivered() {
        for kind in Kind::builtins() {
            assert!(
                apimachinery::subscribe::is_always_delivered(&kind.group, &kind.plural),
                "{} is delivered by node rules but the edge would subscribe to it",
                kind.store_resource()
            );
        }
    }
}
