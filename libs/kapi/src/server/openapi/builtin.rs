//! The schemas of the built-in kinds, generated from `k8s-openapi`'s `schemars` support and
//! completed with what that generator leaves out: the `x-kubernetes-group-version-kind`
//! extension on each kind and the strategic-merge metadata (`x-kubernetes-patch-strategy`,
//! `x-kubernetes-patch-merge-key`) that `kubectl apply` reads.

use std::collections::{BTreeMap, HashMap};
use std::sync::OnceLock;

use k8s_openapi::Resource;
use k8s_openapi::api::{
    admissionregistration, apps, authentication, authorization, autoscaling, batch, certificates,
    coordination, core, discovery, events, flowcontrol, networking, node, policy, rbac, scheduling,
    storage,
};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions;
use k8s_openapi::kube_aggregator::pkg::apis::apiregistration;
use k8s_openapi::schemars::generate::SchemaSettings;
use k8s_openapi::schemars::{JsonSchema, SchemaGenerator};
use serde_json::{Map, Value, json};

use super::{Gvk, REF_V2};

/// Every definition reachable from the table's kinds, and which definition each kind is.
pub(super) struct Builtins {
    /// Definition name (`io.k8s.api.core.v1.Pod`) to its schema, v2 references.
    pub(super) definitions: BTreeMap<String, Value>,
    pub(super) kinds: HashMap<Gvk, String>,
}

/// The built-in schemas, generated on first use.
pub(super) fn builtins() -> &'static Builtins {
    static BUILTINS: OnceLock<Builtins> = OnceLock::new();
    BUILTINS.get_or_init(generate)
}

/// One built-in kind: its group, version and kind, and how to generate its schema.
struct Entry {
    gvk: (&'static str, &'static str, &'static str),
    schema: fn(&mut SchemaGenerator) -> String,
}

fn entry<K: Resource + JsonSchema>() -> Entry {
    Entry {
        gvk: (K::GROUP, K::VERSION, K::KIND),
        schema: |generator| {
            generator.subschema_for::<K>();
            K::schema_name().into_owned()
        },
    }
}

/// The kinds with a schema: the served built-ins and the common ones a registry may add.
fn table() -> Vec<Entry> {
    vec![
        entry::<core::v1::Binding>(),
        entry::<core::v1::ConfigMap>(),
        entry::<core::v1::ComponentStatus>(),
        entry::<core::v1::Endpoints>(),
        entry::<core::v1::Event>(),
        entry::<core::v1::LimitRange>(),
        entry::<core::v1::Namespace>(),
        entry::<core::v1::Node>(),
        entry::<core::v1::PersistentVolume>(),
        entry::<core::v1::PersistentVolumeClaim>(),
        entry::<core::v1::Pod>(),
        entry::<core::v1::PodTemplate>(),
        entry::<core::v1::ReplicationController>(),
        entry::<core::v1::ResourceQuota>(),
        entry::<core::v1::Secret>(),
        entry::<core::v1::Service>(),
        entry::<core::v1::ServiceAccount>(),
        entry::<admissionregistration::v1::MutatingWebhookConfiguration>(),
        entry::<admissionregistration::v1::ValidatingWebhookConfiguration>(),
        entry::<admissionregistration::v1::ValidatingAdmissionPolicy>(),
        entry::<admissionregistration::v1::ValidatingAdmissionPolicyBinding>(),
        entry::<apiregistration::v1::APIService>(),
        entry::<apiextensions::v1::CustomResourceDefinition>(),
        entry::<apps::v1::ControllerRevision>(),
        entry::<apps::v1::DaemonSet>(),
        entry::<apps::v1::Deployment>(),
        entry::<apps::v1::ReplicaSet>(),
        entry::<apps::v1::StatefulSet>(),
        entry::<authentication::v1::SelfSubjectReview>(),
        entry::<authentication::v1::TokenReview>(),
        entry::<authorization::v1::LocalSubjectAccessReview>(),
        entry::<authorization::v1::SelfSubjectAccessReview>(),
        entry::<authorization::v1::SelfSubjectRulesReview>(),
        entry::<authorization::v1::SubjectAccessReview>(),
        entry::<autoscaling::v1::HorizontalPodAutoscaler>(),
        entry::<autoscaling::v2::HorizontalPodAutoscaler>(),
        entry::<batch::v1::CronJob>(),
        entry::<batch::v1::Job>(),
        entry::<certificates::v1::CertificateSigningRequest>(),
        entry::<coordination::v1::Lease>(),
        entry::<discovery::v1::EndpointSlice>(),
        entry::<events::v1::Event>(),
        entry::<flowcontrol::v1::FlowSchema>(),
        entry::<flowcontrol::v1::PriorityLevelConfiguration>(),
        entry::<networking::v1::Ingress>(),
        entry::<networking::v1::IngressClass>(),
        entry::<networking::v1::NetworkPolicy>(),
        entry::<node::v1::RuntimeClass>(),
        entry::<policy::v1::PodDisruptionBudget>(),
        entry::<rbac::v1::ClusterRole>(),
        entry::<rbac::v1::ClusterRoleBinding>(),
        entry::<rbac::v1::Role>(),
        entry::<rbac::v1::RoleBinding>(),
        entry::<scheduling::v1::PriorityClass>(),
        entry::<storage::v1::CSIDriver>(),
        entry::<storage::v1::CSINode>(),
        entry::<storage::v1::CSIStorageCapacity>(),
        entry::<storage::v1::StorageClass>(),
        entry::<storage::v1::VolumeAttachment>(),
    ]
}

/// `(definition, property, x-kubernetes-patch-strategy, x-kubernetes-patch-merge-key)`: the
/// `patchStrategy`/`patchMergeKey` tags of the Kubernetes types (k8s-openapi's generated
/// `DeepMerge` follows the same keys), which its JSON schemas do not carry.
const PATCH_META: &[(&str, &str, &str, &str)] = &[
    (
        "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta",
        "finalizers",
        "merge",
        "",
    ),
    (
        "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta",
        "ownerReferences",
        "merge",
        "uid",
    ),
    ("io.k8s.api.core.v1.PodSpec", "containers", "merge", "name"),
    (
        "io.k8s.api.core.v1.PodSpec",
        "initContainers",
        "merge",
        "name",
    ),
    (
        "io.k8s.api.core.v1.PodSpec",
        "ephemeralContainers",
        "merge",
        "name",
    ),
    (
        "io.k8s.api.core.v1.PodSpec",
        "volumes",
        "merge,retainKeys",
        "name",
    ),
    (
        "io.k8s.api.core.v1.PodSpec",
        "imagePullSecrets",
        "merge",
        "name",
    ),
    ("io.k8s.api.core.v1.PodSpec", "hostAliases", "merge", "ip"),
    (
        "io.k8s.api.core.v1.PodSpec",
        "topologySpreadConstraints",
        "merge",
        "topologyKey",
    ),
    (
        "io.k8s.api.core.v1.PodSpec",
        "schedulingGates",
        "merge",
        "name",
    ),
    (
        "io.k8s.api.core.v1.PodSpec",
        "resourceClaims",
        "merge,retainKeys",
        "name",
    ),
    (
        "io.k8s.api.core.v1.Container",
        "ports",
        "merge",
        "containerPort",
    ),
    ("io.k8s.api.core.v1.Container", "env", "merge", "name"),
    (
        "io.k8s.api.core.v1.Container",
        "volumeMounts",
        "merge",
        "mountPath",
    ),
    (
        "io.k8s.api.core.v1.Container",
        "volumeDevices",
        "merge",
        "devicePath",
    ),
    (
        "io.k8s.api.core.v1.EphemeralContainer",
        "ports",
        "merge",
        "containerPort",
    ),
    (
        "io.k8s.api.core.v1.EphemeralContainer",
        "env",
        "merge",
        "name",
    ),
    (
        "io.k8s.api.core.v1.EphemeralContainer",
        "volumeMounts",
        "merge",
        "mountPath",
    ),
    (
        "io.k8s.api.core.v1.EphemeralContainer",
        "volumeDevices",
        "merge",
        "devicePath",
    ),
    (
        "io.k8s.api.core.v1.PodStatus",
        "conditions",
        "merge",
        "type",
    ),
    ("io.k8s.api.core.v1.PodStatus", "podIPs", "merge", "ip"),
    ("io.k8s.api.core.v1.PodStatus", "hostIPs", "merge", "ip"),
    (
        "io.k8s.api.core.v1.PodStatus",
        "resourceClaimStatuses",
        "merge,retainKeys",
        "name",
    ),
    (
        "io.k8s.api.core.v1.ContainerStatus",
        "allocatedResourcesStatus",
        "merge",
        "name",
    ),
    ("io.k8s.api.core.v1.ServiceSpec", "ports", "merge", "port"),
    (
        "io.k8s.api.core.v1.ServiceStatus",
        "conditions",
        "merge",
        "type",
    ),
    (
        "io.k8s.api.core.v1.ServiceAccount",
        "secrets",
        "merge",
        "name",
    ),
    ("io.k8s.api.core.v1.NodeSpec", "podCIDRs", "merge", ""),
    (
        "io.k8s.api.core.v1.NodeStatus",
        "addresses",
        "merge",
        "type",
    ),
    (
        "io.k8s.api.core.v1.NodeStatus",
        "conditions",
        "merge",
        "type",
    ),
    (
        "io.k8s.api.core.v1.NamespaceStatus",
        "conditions",
        "merge",
        "type",
    ),
    (
        "io.k8s.api.core.v1.PersistentVolumeClaimStatus",
        "conditions",
        "merge",
        "type",
    ),
    (
        "io.k8s.api.core.v1.ReplicationControllerStatus",
        "conditions",
        "merge",
        "type",
    ),
    (
        "io.k8s.api.apps.v1.DeploymentSpec",
        "strategy",
        "retainKeys",
        "",
    ),
    (
        "io.k8s.api.apps.v1.DeploymentStatus",
        "conditions",
        "merge",
        "type",
    ),
    (
        "io.k8s.api.apps.v1.DaemonSetStatus",
        "conditions",
        "merge",
        "type",
    ),
    (
        "io.k8s.api.apps.v1.ReplicaSetStatus",
        "conditions",
        "merge",
        "type",
    ),
    (
        "io.k8s.api.apps.v1.StatefulSetStatus",
        "conditions",
        "merge",
        "type",
    ),
    (
        "io.k8s.api.batch.v1.JobStatus",
        "conditions",
        "merge",
        "type",
    ),
    (
        "io.k8s.api.autoscaling.v2.HorizontalPodAutoscalerStatus",
        "conditions",
        "merge",
        "type",
    ),
    (
        "io.k8s.api.policy.v1.PodDisruptionBudgetSpec",
        "selector",
        "replace",
        "",
    ),
    (
        "io.k8s.api.policy.v1.PodDisruptionBudgetStatus",
        "conditions",
        "merge",
        "type",
    ),
    (
        "io.k8s.api.storage.v1.CSINodeSpec",
        "drivers",
        "merge",
        "name",
    ),
    (
        "io.k8s.api.admissionregistration.v1.MutatingWebhookConfiguration",
        "webhooks",
        "merge",
        "name",
    ),
    (
        "io.k8s.api.admissionregistration.v1.ValidatingWebhookConfiguration",
        "webhooks",
        "merge",
        "name",
    ),
    (
        "io.k8s.api.admissionregistration.v1.MutatingWebhook",
        "matchConditions",
        "merge",
        "name",
    ),
    (
        "io.k8s.api.admissionregistration.v1.ValidatingWebhook",
        "matchConditions",
        "merge",
        "name",
    ),
];

/// `(definition, property, x-kubernetes-list-type, x-kubernetes-list-map-keys)`: lists whose
/// topology server-side apply and clients read (the `listType`/`listMapKey` markers).
const LIST_META: &[(&str, &str, &str, &[&str])] = &[
    ("io.k8s.api.core.v1.PodSpec", "containers", "map", &["name"]),
    (
        "io.k8s.api.core.v1.PodSpec",
        "initContainers",
        "map",
        &["name"],
    ),
    (
        "io.k8s.api.core.v1.PodSpec",
        "ephemeralContainers",
        "map",
        &["name"],
    ),
    (
        "io.k8s.api.core.v1.Container",
        "ports",
        "map",
        &["containerPort", "protocol"],
    ),
    (
        "io.k8s.api.core.v1.ServiceSpec",
        "ports",
        "map",
        &["port", "protocol"],
    ),
    (
        "io.k8s.api.core.v1.PodStatus",
        "conditions",
        "map",
        &["type"],
    ),
    (
        "io.k8s.api.core.v1.NodeStatus",
        "conditions",
        "map",
        &["type"],
    ),
    (
        "io.k8s.api.core.v1.NamespaceStatus",
        "conditions",
        "map",
        &["type"],
    ),
    (
        "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta",
        "finalizers",
        "set",
        &[],
    ),
];

// === generation ===

fn generate() -> Builtins {
    let settings = SchemaSettings::draft2020_12().with(|s| {
        s.definitions_path = "/definitions".into();
        s.meta_schema = None;
    });
    let mut generator = SchemaGenerator::new(settings);
    let mut kinds = HashMap::new();
    for e in table() {
        let name = (e.schema)(&mut generator);
        let (group, version, kind) = e.gvk;
        kinds.insert(Gvk::new(group, version, kind), name);
    }
    let mut definitions: BTreeMap<String, Value> =
        generator.take_definitions(false).into_iter().collect();
    for (gvk, name) in &kinds {
        if let Some(Value::Object(def)) = definitions.get_mut(name) {
            add_gvk(def, gvk);
        }
    }
    for (def, prop, strategy, key) in PATCH_META {
        if let Some(p) = property(&mut definitions, def, prop) {
            p.insert("x-kubernetes-patch-strategy".into(), json!(strategy));
            if !key.is_empty() {
                p.insert("x-kubernetes-patch-merge-key".into(), json!(key));
            }
        }
    }
    for (def, prop, list_type, keys) in LIST_META {
        if let Some(p) = property(&mut definitions, def, prop) {
            p.insert("x-kubernetes-list-type".into(), json!(list_type));
            if !keys.is_empty() {
                p.insert("x-kubernetes-list-map-keys".into(), json!(keys));
            }
        }
    }
    for schema in definitions.values_mut() {
        v2_forms(schema);
    }
    Builtins { definitions, kinds }
}

/// Adds a kind's `x-kubernetes-group-version-kind` (a list, as Kubernetes writes it).
pub(super) fn add_gvk(def: &mut Map<String, Value>, gvk: &Gvk) {
    def.insert(
        "x-kubernetes-group-version-kind".into(),
        json!([{ "group": gvk.group, "kind": gvk.kind, "version": gvk.version }]),
    );
}

fn property<'a>(
    definitions: &'a mut BTreeMap<String, Value>,
    def: &str,
    prop: &str,
) -> Option<&'a mut Map<String, Value>> {
    definitions
        .get_mut(def)?
        .get_mut("properties")?
        .get_mut(prop)?
        .as_object_mut()
}

/// Rewrites what JSON Schema allows but Swagger 2.0 readers (kubectl's protobuf models) do
/// not: an int-or-string without a type becomes `type: string, format: int-or-string`, as
/// Kubernetes publishes it.
fn v2_forms(schema: &mut Value) {
    let Value::Object(map) = schema else { return };
    if map.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true))
        && !map.contains_key("type")
    {
        map.insert("type".into(), json!("string"));
        map.insert("format".into(), json!("int-or-string"));
    }
    for (key, value) in map.iter_mut() {
        if key == "properties" {
            if let Value::Object(props) = value {
                props.values_mut().for_each(v2_forms);
            }
        } else if matches!(key.as_str(), "items" | "additionalProperties") {
            v2_forms(value);
        }
    }
}

/// `#/definitions/<name>` of a schema's `$ref`, if it is one.
pub(super) fn ref_name(schema: &Map<String, Value>) -> Option<&str> {
    schema.get("$ref")?.as_str()?.strip_prefix(REF_V2)
}
