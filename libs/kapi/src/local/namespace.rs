//! The namespace strategy: a namespace starts `Active` with the `kubernetes` cleanup
//! finalizer in `spec.finalizers` and its name as a label; a delete only marks it
//! `Terminating`, and the drain (`namespace_drain`, above the verbs) empties and finalizes it.
//! The namespaces the system needs may not be deleted. Every namespace gets its `default`
//! ServiceAccount once written (the serviceaccounts controller's part), unless it is
//! terminating.

use apimachinery::ApiError;
use apimachinery::time::now_rfc3339;
use objstore::Mutation;
use serde_json::{Value, json};

use super::meta;
use super::vocab::{Cleanup, Core, NameRule, Strategy, Subresource, Target, namespace_key, parse};

/// The `spec.finalizers` entry the namespace drain owns.
pub(super) const FINALIZER: &str = "kubernetes";
/// The namespaces that may not be deleted.
const PROTECTED: [&str; 4] = ["default", "kube-system", "kube-public", "kube-node-lease"];
/// Every namespace carries its own name as this label.
const NAME_LABEL: &str = "kubernetes.io/metadata.name";

/// Namespaces.
pub(super) struct Namespaces;

// === impl Namespaces ===

#[async_trait::async_trait]
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

    async fn after_write(&self, core: &Core, name: &str) {
        if let Err(e) = ensure_default_account(core, name).await {
            tracing::warn!(namespace = %name, error = %e, "creating the default service account");
        }
    }
}

/// Creates ServiceAccount `default` in namespace `ns` when it is missing and `ns` exists and
/// is not terminating; in one transaction, so no account lands in a namespace being emptied.
async fn ensure_default_account(core: &Core, ns: &str) -> Result<(), ApiError> {
    let Some(info) = core.registry.get("", "v1", "serviceaccounts") else {
        return Ok(());
    };
    let target = core.target_for(info, ns, "default");
    let t = target.clone();
    core.mutate(
        vec![namespace_key(ns)],
        target.key(),
        move |current, revision, parents| {
            let open = match parents.first().and_then(Option::as_ref) {
                Some(stored) => {
                    let ns = parse(stored)?;
                    !meta::deleting(&ns)
                        && ns.pointer("/status/phase").and_then(Value::as_str)
                            != Some("Terminating")
                }
                None => false,
            };
            if current.is_some() || !open {
                return Ok((Mutation::Keep, ()));
            }
            let mut account = json!({
                "apiVersion": "v1",
                "kind": "ServiceAccount",
                "metadata": {
                    "name": "default",
                    "namespace": t.namespace,
                    "uid": uuid::Uuid::new_v4().to_string(),
                    "creationTimestamp": now_rfc3339(),
                },
            });
            Ok((t.write(&mut account, revision)?, ()))
        },
    )
    .await?;
    Ok(())
}

// === helpers ===

fn set_name_label(obj: &mut Value) {
    let name = meta::name(obj).to_owned();
    let meta = meta::metadata_mut(obj);
    let labels = meta::object_mut(meta.entry("labels").or_insert_with(|| json!({})));
    labels.insert(NAME_LABEL.into(), Value::String(name));
}
