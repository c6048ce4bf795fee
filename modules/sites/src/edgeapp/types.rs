//! KubeEdge's `apps.kubeedge.io/v1alpha1` EdgeApplication, field for field, so its users'
//! manifests apply unchanged. Deserialization is lenient (strings for operators and
//! components, raw JSON for manifests): the decision logic reports a bad value per manifest
//! and target instead of the whole object failing to decode in the watch.

use std::borrow::Cow;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// An application deployed once per target site.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct EdgeApplication {
    /// Standard object metadata.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// The templates and where they go.
    #[serde(default)]
    pub spec: EdgeApplicationSpec,
    /// What was applied and how it runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<EdgeApplicationStatus>,
}

/// `spec`: the templates and the scope.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EdgeApplicationSpec {
    /// The objects to deploy.
    #[serde(default)]
    pub workload_template: ResourceTemplate,
    /// The sites they go to.
    #[serde(default)]
    pub workload_scope: WorkloadScope,
}

/// `spec.workloadTemplate`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ResourceTemplate {
    /// Raw Kubernetes objects, kept as written (unknown fields included).
    #[serde(default)]
    pub manifests: Vec<Value>,
}

/// `spec.workloadScope`: node groups by name and node sets by label selector.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WorkloadScope {
    /// One copy per named NodeGroup.
    #[serde(default)]
    pub target_node_groups: Vec<TargetNodeGroup>,
    /// One copy per label selector over nodes.
    #[serde(default)]
    pub target_node_labels: Vec<TargetNodeLabels>,
}

/// A NodeGroup target and its overrides.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TargetNodeGroup {
    /// The NodeGroup's name (its members carry `apps.kubeedge.io/belonging-to=<name>`).
    #[serde(default)]
    pub name: String,
    /// What this group's copy changes.
    #[serde(default)]
    pub overriders: Overriders,
}

/// A node label selector target and its overrides.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TargetNodeLabels {
    /// The nodes this copy runs on.
    #[serde(default)]
    pub label_selector: LabelSelector,
    /// What this copy changes.
    #[serde(default)]
    pub overriders: Overriders,
}

/// The changes a target's copy gets.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Overriders {
    /// `spec.replicas` of Deployments and StatefulSets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i64>,
    /// Image reference changes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub image_overriders: Vec<ImageOverrider>,
    /// Container environment changes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env_overriders: Vec<EnvOverrider>,
    /// Container command changes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub command_overriders: Vec<CommandArgsOverrider>,
    /// Container args changes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args_overriders: Vec<CommandArgsOverrider>,
    /// Container resource requirements, replaced whole.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resources_overriders: Vec<ResourcesOverrider>,
}

/// Changes one component of image references.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ImageOverrider {
    /// Only the image at this path (`/spec/template/spec/containers/0/image`); all
    /// containers' images when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub predicate: Option<ImagePredicate>,
    /// `Registry`, `Repository` or `Tag` (any letter case).
    #[serde(default)]
    pub component: String,
    /// `add`, `remove` or `replace`.
    #[serde(default)]
    pub operator: String,
    /// What is added or put in place.
    #[serde(default)]
    pub value: String,
}

/// `imageOverriders[].predicate`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ImagePredicate {
    /// A slash-separated path from the object's root to an image string.
    #[serde(default)]
    pub path: String,
}

/// Changes one container's environment.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EnvOverrider {
    /// The container.
    #[serde(default)]
    pub container_name: String,
    /// `add`, `remove` or `replace`.
    #[serde(default)]
    pub operator: String,
    /// Environment variables (`EnvVar`s as written).
    #[serde(default)]
    pub value: Vec<Value>,
}

/// Changes one container's command or args.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CommandArgsOverrider {
    /// The container.
    #[serde(default)]
    pub container_name: String,
    /// `add` (append) or `remove` (drop equal items).
    #[serde(default)]
    pub operator: String,
    /// The items.
    #[serde(default)]
    pub value: Vec<String>,
}

/// Replaces one container's resource requirements.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourcesOverrider {
    /// The container.
    #[serde(default)]
    pub container_name: String,
    /// A `ResourceRequirements` as written.
    #[serde(default)]
    pub value: Value,
}

/// `status`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EdgeApplicationStatus {
    /// One entry per applied object (per manifest and target).
    #[serde(default)]
    pub workload_status: Vec<ManifestStatus>,
}

/// The state of one object made from a manifest.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ManifestStatus {
    /// Which object.
    pub identifier: ResourceIdentifier,
    /// `Processing` or `Available` (KubeEdge names the field `conditions`).
    #[serde(default)]
    pub conditions: String,
}

/// `Processing`: the object does not (yet) match its template.
pub const PROCESSING: &str = "Processing";

/// `Available`: the object matches its template and runs as asked.
pub const AVAILABLE: &str = "Available";

/// Names one object made from a manifest.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ResourceIdentifier {
    /// The manifest's index in `spec.workloadTemplate.manifests`.
    pub ordinal: usize,
    /// API group (empty for the core group).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub group: String,
    /// API version.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub version: String,
    /// Kind.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub kind: String,
    /// Resource (plural), when known.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub resource: String,
    /// Namespace.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    /// Name.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
}

// === impl EdgeApplication ===

impl kube::Resource for EdgeApplication {
    type DynamicType = ();
    type Scope = k8s_openapi::NamespaceResourceScope;

    fn kind(_: &()) -> Cow<'_, str> {
        "EdgeApplication".into()
    }

    fn group(_: &()) -> Cow<'_, str> {
        "apps.kubeedge.io".into()
    }

    fn version(_: &()) -> Cow<'_, str> {
        "v1alpha1".into()
    }

    fn plural(_: &()) -> Cow<'_, str> {
        "edgeapplications".into()
    }

    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

impl EdgeApplication {
    /// The recorded workload status (empty when there is none).
    pub fn workload_status(&self) -> &[ManifestStatus] {
        self.status
            .as_ref()
            .map_or(&[], |s| s.workload_status.as_slice())
    }
}

// === impl ResourceIdentifier ===

impl ResourceIdentifier {
    /// Whether both name the same object (the ordinal and resource aside).
    pub fn same_object(&self, other: &ResourceIdentifier) -> bool {
        self.group == other.group
            && self.kind == other.kind
            && self.namespace == other.namespace
            && self.name == other.name
    }
}
