//! The namespace strategy: a namespace starts `Active` with the `kubernetes` cleanup
//! finalizer in `spec.finalizers` and its name as a label; a delete only marks it
//! `Terminating`, and the drain (`namespace_drain`, above the verbs) empties and finalizes it.
//! The namespaces the system needs may not be deleted.

use apimachinery::ApiError;
use serde_json::{Value, json};

use super::meta;
use super::vocab::{Cleanup, NameRule, Strategy, Subresource, Target};

/// The `spec.finalizers` entry the namespace drain owns.
pub(super) const FINALIZER: &str = "kubernetes";
/// The namespaces that may not be deleted.
const PROTECTED: [&str; 4] = ["default", "kube-system", "kube-public", "kube-node-lease"];
/// Every namespace carries its own name as this label.
const NAME_LABEL: &str = "kubernetes.io/metadata.name";

/// Namespaces.
pub(super) struct Namespaces;

// === impl Namespaces ===

impl Strategy for Namespaces {
    fn name_rule(&self) -> NameRule {
        NameRule::Label
    }

    fn subresource(&self, name: &str) -> Option<Subresource> {
        (name == "finalize").then_some(Subresource::Finalize)
    }

    /// A new namespace: `Active`, with the cleanup finalizer and its name label.
    fn prepare_create(&self, _target: &Target, obj: &mut Value) -> Result<(), ApiError> {
        set_name_label(obj);
        let map = meta::object_mut(obj);
        let spec = meta::object_mut(map.entry("spec").or_insert_with(|| json!({})));
        spec.insert("finalizers".into(), json!([FINALIZER]));
        map.insert("status".into(), json!({"phase": "Active"}));
        Ok(())
    }

    /// What an update may not change: the name label, `spec.finalizers` (only through
    /// `finalize`).
    fn prepare_update(
        &self,
        _target: &Target,
        next: &mut Value,
        current: &Value,
    ) -> Result<(), ApiError> {
        set_name_label(next);
        let finalizers = current.pointer("/spec/finalizers").cloned();
        let map = meta::object_mut(next);
        let spec = meta::object_mut(map.entry("spec").or_insert_with(|| json!({})));
        match finalizers {
            Some(f) => spec.insert("finalizers".into(), f),
            None => spec.remove("finalizers"),
        };
        Ok(())
    }

    /// 403 for the namespaces the system needs.
    fn check_delete(&self, target: &Target) -> Result<(), ApiError> {
        if PROTECTED.contains(&target.name.as_str()) {
            let why = "this namespace may not be deleted";
            return Err(ApiError::forbidden("", "namespaces", &target.name, why));
        }
        Ok(())
    }

    fn marks_on_delete(&self) -> bool {
        true
    }

    fn mark_deleting(&self, obj: &mut Value) {
        let map = meta::object_mut(obj);
        let status = meta::object_mut(map.entry("status").or_insert_with(|| json!({})));
        status.insert("phase".into(), json!("Terminating"));
    }

    /// True while the namespace drain still owns the namespace.
    fn holds_deletion(&self, obj: &Value) -> bool {
        obj.pointer("/spec/finalizers")
            .and_then(Value::as_array)
            .is_some_and(|f| !f.is_empty())
    }

    fn cleanup(&self) -> Option<Cleanup> {
        Some(Cleanup::DrainNamespace)
    }
}

// === helpers ===

fn set_name_label(obj: &mut Value) {
    let name = meta::name(obj).to_owned();
    let meta = meta::metadata_mut(obj);
    let labels = meta::object_mut(meta.entry("labels").or_insert_with(|| json!({})));
    labels.insert(NAME_LABEL.into(), Value::String(name));
}
