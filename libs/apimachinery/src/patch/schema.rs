//! The patch strategies of the built-in kinds' lists, from the `patchStrategy` and
//! `patchMergeKey` struct tags of k8s.io/api. Lists not named here are atomic (replaced whole),
//! as are all lists of kinds not named here; maps always merge. The pod templates of the
//! workload kinds (Deployment, Job, CronJob, PodTemplate, ...) merge as a Pod's spec does.

use crate::catalog::ResourceInfo;

/// How a list field is merged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ListStrategy {
    /// Replaced by the patch's list.
    Atomic,
    /// A list of scalars merged as a set (`patchStrategy:"merge"` without a key).
    Set,
    /// A list of objects merged element-wise by this key.
    MergeKey(&'static str),
}

/// The strategies of one kind.
pub(crate) struct Schema {
    kind: Kind,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Pod,
    Node,
    Service,
    Namespace,
    ServiceAccount,
    CsiNode,
    /// A kind holding a pod template at this path (`spec.template`).
    Template(&'static [&'static str]),
    Other,
}

// === impl ListStrategy ===

impl ListStrategy {
    pub(crate) fn merge_key(self) -> Option<&'static str> {
        match self {
            ListStrategy::MergeKey(key) => Some(key),
            ListStrategy::Atomic | ListStrategy::Set => None,
        }
    }
}

// === impl Schema ===

impl Schema {
    pub(crate) fn for_resource(info: &ResourceInfo) -> Schema {
        let kind = match (info.group.as_str(), info.kind.as_str()) {
            ("", "Pod") => Kind::Pod,
            ("", "Node") => Kind::Node,
            ("", "Service") => Kind::Service,
            ("", "Namespace") => Kind::Namespace,
            ("", "ServiceAccount") => Kind::ServiceAccount,
            ("storage.k8s.io", "CSINode") => Kind::CsiNode,
            ("apps", "Deployment" | "ReplicaSet" | "StatefulSet" | "DaemonSet")
            | ("batch", "Job")
            | ("", "ReplicationController") => Kind::Template(&["spec", "template"]),
            ("batch", "CronJob") => Kind::Template(&["spec", "jobTemplate", "spec", "template"]),
            ("", "PodTemplate") => Kind::Template(&["template"]),
            _ => Kind::Other,
        };
        Schema { kind }
    }

    /// The strategy of the list at `path` (the object keys from the root; list elements do
    /// not add a step).
    pub(crate) fn list(&self, path: &[String]) -> ListStrategy {
        let path: Vec<&str> = path.iter().map(String::as_str).collect();
        if let ["metadata", rest @ ..] = path.as_slice() {
            return object_meta(rest);
        }
        match self.kind {
            Kind::Pod => pod(&path),
            Kind::Node => node(&path),
            Kind::Service => service(&path),
            Kind::Namespace => conditions_only(&path),
            Kind::ServiceAccount => service_account(&path),
            Kind::CsiNode => csi_node(&path),
            Kind::Template(prefix) => template(prefix, &path),
            Kind::Other => ListStrategy::Atomic,
        }
    }
}

impl Schema {
    /// Whether the map or struct at `path` is set whole by server-side apply (`+mapType=atomic`,
    /// `+structType=atomic`): a workload's label selector, a pod's node selector, a
    /// Service's selector.
    pub(crate) fn atomic_map(&self, path: &[String]) -> bool {
        let path: Vec<&str> = path.iter().map(String::as_str).collect();
        match self.kind {
            Kind::Pod => path == ["spec", "nodeSelector"],
            Kind::Service => path == ["spec", "selector"],
            Kind::Template(prefix) => {
                path == ["spec", "selector"]
                    || path
                        .strip_prefix(prefix)
                        .is_some_and(|rest| rest == ["spec", "nodeSelector"])
            }
            _ => false,
        }
    }
}

fn object_meta(path: &[&str]) -> ListStrategy {
    match path {
        ["ownerReferences"] => ListStrategy::MergeKey("uid"),
        ["finalizers"] => ListStrategy::Set,
        _ => ListStrategy::Atomic,
    }
}

fn pod(path: &[&str]) -> ListStrategy {
    match path {
        ["spec", rest @ ..] => pod_spec(rest),
        ["status", "conditions"] => ListStrategy::MergeKey("type"),
        ["status", "podIPs" | "hostIPs"] => ListStrategy::MergeKey("ip"),
        ["status", "resourceClaimStatuses"] => ListStrategy::MergeKey("name"),
        _ => ListStrategy::Atomic,
    }
}

/// PodSpec (also used by Pod templates, should they be added).
fn pod_spec(path: &[&str]) -> ListStrategy {
    match path {
        [
            "containers"
            | "initContainers"
            | "ephemeralContainers"
            | "volumes"
            | "imagePullSecrets"
            | "schedulingGates"
            | "resourceClaims",
        ] => ListStrategy::MergeKey("name"),
        [
            "containers" | "initContainers" | "ephemeralContainers",
            field,
        ] => container(field),
        ["hostAliases"] => ListStrategy::MergeKey("ip"),
        ["topologySpreadConstraints"] => ListStrategy::MergeKey("topologyKey"),
        _ => ListStrategy::Atomic,
    }
}

/// A workload: its pod template's metadata and spec, and its status conditions.
fn template(prefix: &[&str], path: &[&str]) -> ListStrategy {
    if let Some(rest) = path.strip_prefix(prefix) {
        return match rest {
            ["metadata", meta @ ..] => object_meta(meta),
            ["spec", spec @ ..] => pod_spec(spec),
            _ => ListStrategy::Atomic,
        };
    }
    conditions_only(path)
}

fn container(field: &str) -> ListStrategy {
    match field {
        "ports" => ListStrategy::MergeKey("containerPort"),
        "env" => ListStrategy::MergeKey("name"),
        "volumeMounts" => ListStrategy::MergeKey("mountPath"),
        "volumeDevices" => ListStrategy::MergeKey("devicePath"),
        _ => ListStrategy::Atomic,
    }
}

/// Node: `spec.taints`, `status.images`, `status.volumesInUse` and `status.volumesAttached`
/// are atomic upstream.
fn node(path: &[&str]) -> ListStrategy {
    match path {
        ["spec", "podCIDRs"] => ListStrategy::Set,
        ["status", "conditions" | "addresses"] => ListStrategy::MergeKey("type"),
        _ => ListStrategy::Atomic,
    }
}

fn service(path: &[&str]) -> ListStrategy {
    match path {
        ["spec", "ports"] => ListStrategy::MergeKey("port"),
        ["status", "conditions"] => ListStrategy::MergeKey("type"),
        _ => ListStrategy::Atomic,
    }
}

fn conditions_only(path: &[&str]) -> ListStrategy {
    match path {
        ["status", "conditions"] => ListStrategy::MergeKey("type"),
        _ => ListStrategy::Atomic,
    }
}

fn service_account(path: &[&str]) -> ListStrategy {
    match path {
        ["secrets"] => ListStrategy::MergeKey("name"),
        _ => ListStrategy::Atomic,
    }
}

fn csi_node(path: &[&str]) -> ListStrategy {
    match path {
        ["spec", "drivers"] => ListStrategy::MergeKey("name"),
        _ => ListStrategy::Atomic,
    }
}
