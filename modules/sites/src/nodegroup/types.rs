//! NodeGroup as KubeEdge defines it (`apps.kubeedge.io/v1alpha1`, cluster-scoped): the same
//! field names, so KubeEdge users' manifests apply unchanged; and its CustomResourceDefinition.

use std::borrow::Cow;
use std::collections::BTreeMap;

use k8s_openapi::ClusterResourceScope;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Serialize};
use serde_json::json;

/// The API group of NodeGroup.
pub const GROUP: &str = "apps.kubeedge.io";

/// The API version of NodeGroup within [`GROUP`].
pub const VERSION: &str = "v1alpha1";

/// The kind.
pub const KIND: &str = "NodeGroup";

/// The resource (plural) name.
pub const PLURAL: &str = "nodegroups";

/// A set of nodes (a site): named in `spec.nodes` and/or selected by `spec.matchLabels`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeGroup {
    /// `apps.kubeedge.io/v1alpha1`.
    #[serde(default)]
    pub api_version: String,
    /// `NodeGroup`.
    #[serde(default)]
    pub kind: String,
    /// The object's metadata.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// Which nodes the group wants.
    #[serde(default)]
    pub spec: NodeGroupSpec,
    /// What the controller observed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<NodeGroupStatus>,
}

/// `spec` of a NodeGroup.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeGroupSpec {
    /// Names of member nodes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nodes: Vec<String>,
    /// Nodes carrying all these labels are members; an empty map selects no node.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub match_labels: BTreeMap<String, String>,
    /// Also label members `topology.kubernetes.io/zone=<group>`, so Kubernetes' topology-aware
    /// routing treats the group as a zone.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub topology_enabled: bool,
}

/// `status` of a NodeGroup.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeGroupStatus {
    /// Every member and every node the group wanted but could not have, by name. Always
    /// written (also empty), so a merge patch of the status replaces the old list.
    #[serde(default)]
    pub node_statuses: Vec<NodeStatus>,
    /// How many nodes are members (`kubectl get nodegroups` NODES). Not in KubeEdge's schema.
    #[serde(default)]
    pub node_num: i32,
    /// How many members are Ready (`kubectl get nodegroups` READY). Not in KubeEdge's schema.
    #[serde(default)]
    pub ready_node_num: i32,
}

/// One node the group selected.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeStatus {
    /// The node.
    pub node_name: String,
    /// The node's Ready condition.
    pub ready_status: ReadyStatus,
    /// Whether the node is a member.
    pub selection_status: SelectionStatus,
    /// Why it is not, for a failed selection.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub selection_status_reason: String,
}

/// A node's readiness, from its `Ready` condition.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ReadyStatus {
    /// `Ready` is `True`.
    Ready,
    /// `Ready` is `False`.
    NotReady,
    /// `Ready` is missing or `Unknown` (or the node does not exist).
    Unknown,
}

/// Whether a node became a member.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum SelectionStatus {
    /// The node is a member (it carries the group label).
    Succeeded,
    /// The node is not: it belongs to another group, or does not exist.
    Failed,
}

// === impl NodeGroup ===

impl NodeGroup {
    /// A NodeGroup named `name` wanting `spec`.
    pub fn new(name: &str, spec: NodeGroupSpec) -> NodeGroup {
        NodeGroup {
            api_version: format!("{GROUP}/{VERSION}"),
            kind: KIND.to_owned(),
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                ..ObjectMeta::default()
            },
            spec,
            status: None,
        }
    }
}

impl kube::Resource for NodeGroup {
    type DynamicType = ();
    type Scope = ClusterResourceScope;

    fn kind(_: &()) -> Cow<'_, str> {
        KIND.into()
    }

    fn group(_: &()) -> Cow<'_, str> {
        GROUP.into()
    }

    fn version(_: &()) -> Cow<'_, str> {
        VERSION.into()
    }

    fn plural(_: &()) -> Cow<'_, str> {
        PLURAL.into()
    }

    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

// === impl ReadyStatus ===

impl ReadyStatus {
    /// The readiness a Node's `Ready` condition status (`True`, `False`, ...) says.
    pub fn from_condition(status: Option<&str>) -> ReadyStatus {
        match status {
            Some("True") => ReadyStatus::Ready,
            Some("False") => ReadyStatus::NotReady,
            _ => ReadyStatus::Unknown,
        }
    }
}

/// The CustomResourceDefinition: KubeEdge's schema (same fields, `ng` short name), plus the
/// member counts in the status and the printer columns NODES, READY and AGE.
pub fn crd() -> CustomResourceDefinition {
    let string = json!({"type": "string"});
    let node_status = json!({
        "type": "object",
        "description": "A node this NodeGroup selected.",
        "required": ["nodeName", "readyStatus", "selectionStatus"],
        "properties": {
            "nodeName": string,
            "readyStatus": {"type": "string", "enum": ["Ready", "NotReady", "Unknown"]},
            "selectionStatus": {"type": "string", "enum": ["Succeeded", "Failed"]},
            "selectionStatusReason": string,
        },
    });
    let schema = json!({
        "type": "object",
        "description": "A set of nodes (a site), named or selected by labels.",
        "required": ["spec"],
        "properties": {
            "apiVersion": string,
            "kind": string,
            "metadata": {"type": "object"},
            "spec": {
                "type": "object",
                "properties": {
                    "nodes": {"type": "array", "items": string},
                    "matchLabels": {"type": "object", "additionalProperties": string},
                    "topologyEnabled": {"type": "boolean"},
                },
            },
            "status": {
                "type": "object",
                "properties": {
                    "nodeStatuses": {"type": "array", "items": node_status},
                    "nodeNum": {"type": "integer", "format": "int32"},
                    "readyNodeNum": {"type": "integer", "format": "int32"},
                },
            },
        },
    });
    let crd = json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{PLURAL}.{GROUP}")},
        "spec": {
            "group": GROUP,
            "scope": "Cluster",
            "names": {
                "kind": KIND,
                "listKind": format!("{KIND}List"),
                "plural": PLURAL,
                "singular": "nodegroup",
                "shortNames": ["ng"],
            },
            "versions": [{
                "name": VERSION,
                "served": true,
                "storage": true,
                "schema": {"openAPIV3Schema": schema},
                "subresources": {"status": {}},
                "additionalPrinterColumns": [
                    {"name": "Nodes", "type": "integer", "jsonPath": ".status.nodeNum",
                     "description": "Member nodes"},
                    {"name": "Ready", "type": "integer", "jsonPath": ".status.readyNodeNum",
                     "description": "Member nodes that are Ready"},
                    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
                ],
            }],
        },
    });
    // Invariant: the literal above is a well-formed CustomResourceDefinition (a unit test
    // decodes it).
    serde_json::from_value(crd).expect("the NodeGroup CRD literal decodes")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_crd_serves_kubeedges_nodegroup_with_the_member_columns() {
        let crd = crd();
        assert_eq!(
            crd.metadata.name.as_deref(),
            Some("nodegroups.apps.kubeedge.io")
        );
        assert_eq!(crd.spec.scope, "Cluster");
        assert_eq!(crd.spec.names.short_names, Some(vec!["ng".to_owned()]));
        let version = &crd.spec.versions[0];
        assert_eq!(version.name, VERSION);
        assert!(version.subresources.as_ref().unwrap().status.is_some());
        let columns: Vec<_> = version
            .additional_printer_columns
            .iter()
            .flatten()
            .map(|c| c.name.as_str())
            .collect();
        assert_eq!(columns, ["Nodes", "Ready", "Age"]);
    }

    #[test]
    fn a_kubeedge_manifest_decodes_with_its_field_names() {
        let group: NodeGroup = serde_json::from_value(json!({
            "apiVersion": "apps.kubeedge.io/v1alpha1",
            "kind": "NodeGroup",
            "metadata": {"name": "beijing"},
            "spec": {"nodes": ["n1"], "matchLabels": {"city": "beijing"}, "topologyEnabled": true},
            "status": {"nodeStatuses": [{"nodeName": "n1", "readyStatus": "NotReady",
                "selectionStatus": "Failed", "selectionStatusReason": "taken"}]},
        }))
        .unwrap();
        assert_eq!(group.spec.nodes, ["n1"]);
        assert_eq!(group.spec.match_labels["city"], "beijing");
        assert!(group.spec.topology_enabled);
        let status = &group.status.unwrap().node_statuses[0];
        assert_eq!(status.ready_status, ReadyStatus::NotReady);
        assert_eq!(status.selection_status, SelectionStatus::Failed);
    }

    #[test]
    fn a_new_group_serializes_with_its_type_and_without_empty_fields() {
        let group = NodeGroup::new("g", NodeGroupSpec::default());
        assert_eq!(
            serde_json::to_value(&group).unwrap(),
            json!({"apiVersion": "apps.kubeedge.io/v1alpha1", "kind": "NodeGroup",
                   "metadata": {"name": "g"}, "spec": {}})
        );
    }
}
