//! Which [`Strategy`] a resource's writes follow: the kinds with their own files (pods,
//! services, workloads, namespaces, CRDs and custom resources), the small ones here
//! (configmaps, secrets, RBAC), and [`Generic`] for everything else. A new kind is a
//! strategy and a line in [`of`], not a branch in the verbs.

use apimachinery::configdata::{self, DataError};
use apimachinery::{ApiError, ResourceInfo};
use serde_json::Value;

use super::vocab::{NameRule, Strategy, Target};
use super::{crd, csr, meta, namespace, pods, services, validate, workloads};

/// Kinds that follow only the generic rules.
struct Generic;

/// ConfigMaps: keys and values checked ([`apimachinery::configdata`]).
struct ConfigMaps;

/// Secrets: `stringData` merged into `data`, keys and values checked.
struct Secrets;

/// The strategy of `info`'s resource.
pub(super) fn of(info: &ResourceInfo) -> &'static dyn Strategy {
    if info.custom {
        return &crd::CustomResources;
    }
    match (info.group.as_str(), info.plural.as_str()) {
        ("", "pods") => &pods::Pods,
        ("", "namespaces") => &namespace::Namespaces,
        ("", "services") => &services::Services,
        ("apps", "deployments" | "replicasets" | "statefulsets" | "daemonsets")
        | ("batch", "jobs" | "cronjobs")
        | ("", "replicationcontrollers" | "podtemplates") => &workloads::Workloads,
        ("", "configmaps") => &ConfigMaps,
        ("", "secrets") => &Secrets,
        (crd::GROUP, "customresourcedefinitions") => &crd::Crds,
        (csr::GROUP, "certificatesigningrequests") => &csr::Csrs,
        ("rbac.authorization.k8s.io", _) => &Rbac,
        _ => &Generic,
    }
}

/// Roles, ClusterRoles and their bindings: names are path segments (`system:basic-user`).
struct Rbac;

// === impl Generic ===

impl Strategy for Generic {}

// === impl Rbac ===

impl Strategy for Rbac {
    fn name_rule(&self) -> NameRule {
        NameRule::PathSegment
    }

    fn prepare_update(
        &self,
        target: &Target,
        next: &mut Value,
        current: &Value,
    ) -> Result<(), ApiError> {
        let errs = apimachinery::rbac::validate_update(&target.info.kind, next, current);
        validate::field_errors(&target.info, meta::name(next), errs)
    }

    fn canonicalize(&self, target: &Target, obj: &mut Value) -> Result<(), ApiError> {
        let errs = apimachinery::rbac::validate(&target.info.kind, obj);
        validate::field_errors(&target.info, meta::name(obj), errs)
    }
}

// === impl ConfigMaps ===

impl Strategy for ConfigMaps {
    fn canonicalize(&self, target: &Target, obj: &mut Value) -> Result<(), ApiError> {
        let checked = configdata::check_configmap(obj);
        checked.map_err(|e| data_error(&target.info, obj, e))
    }
}

// === impl Secrets ===

impl Strategy for Secrets {
    fn canonicalize(&self, target: &Target, obj: &mut Value) -> Result<(), ApiError> {
        let checked = configdata::prepare_secret(obj);
        checked.map_err(|e| data_error(&target.info, obj, e))
    }
}

// === helpers ===

/// A data check's failure as kube-apiserver answers it: 422 for a bad key or value, 400 for
/// data that does not decode.
fn data_error(info: &ResourceInfo, obj: &Value, e: DataError) -> ApiError {
    match e {
        DataError::Invalid { field, why } => validate::invalid(info, meta::name(obj), &field, why),
        DataError::Malformed(why) => ApiError::bad_request(format!(
            "{} in version \"v1\" cannot be handled as a {}: {why}",
            info.kind, info.kind
        )),
    }
}
