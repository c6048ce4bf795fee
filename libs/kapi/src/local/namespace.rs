//! Namespace lifecycle, with the namespace controller's part done here: a deleted namespace
//! turns `Terminating` (no new objects), a task deletes everything in it, and once it is
//! empty the `kubernetes` finalizer is removed and the namespace goes.
//!
//! Objects in it are deleted like a client would (`DeleteOptions` defaults): pods without a
//! node go at once, scheduled pods get their grace period and wait for their kubelet's final
//! delete, objects with finalizers wait for their controllers. The task re-checks every
//! [`DRAIN_INTERVAL`] until the namespace is empty.

use std::collections::HashSet;
use std::time::Duration;

use apimachinery::ApiError;
use objstore::{ObjKey, StoredObject};
use serde_json::{Value, json};

use super::update::Part;
use super::{Core, Target, delete, meta};

/// The namespaces that may not be deleted.
const PROTECTED: [&str; 4] = ["default", "kube-system", "kube-public", "kube-node-lease"];
/// The `spec.finalizers` entry the namespace cleanup owns.
const FINALIZER: &str = "kubernetes";
/// Every namespace carries its own name as this label.
const NAME_LABEL: &str = "kubernetes.io/metadata.name";
/// How often a terminating namespace is re-checked while objects in it wait.
const DRAIN_INTERVAL: Duration = Duration::from_secs(1);

/// The store key of namespace `name`.
pub(super) fn key(name: &str) -> ObjKey {
    ObjKey::new("namespaces", "", name)
}

/// A new namespace: `Active`, with the cleanup finalizer and its name label.
pub(super) fn prepare_create(obj: &mut Value) {
    set_name_label(obj);
    let map = meta::object_mut(obj);
    let spec = meta::object_mut(map.entry("spec").or_insert_with(|| json!({})));
    spec.insert("finalizers".into(), json!([FINALIZER]));
    map.insert("status".into(), json!({"phase": "Active"}));
}

/// What an update may not change: the name label, `spec.finalizers` (only through
/// `finalize`).
pub(super) fn prepare_update(obj: &mut Value, current: &Value) {
    set_name_label(obj);
    let finalizers = current.pointer("/spec/finalizers").cloned();
    let map = meta::object_mut(obj);
    let spec = meta::object_mut(map.entry("spec").or_insert_with(|| json!({})));
    match finalizers {
        Some(f) => spec.insert("finalizers".into(), f),
        None => spec.remove("finalizers"),
    };
}

/// True while the namespace cleanup still owns the namespace.
pub(super) fn has_spec_finalizers(obj: &Value) -> bool {
    obj.pointer("/spec/finalizers")
        .and_then(Value::as_array)
        .is_some_and(|f| !f.is_empty())
}

/// Refuses a create into a namespace that is missing (404) or terminating (403).
pub(super) fn check_create_in(
    target: &Target,
    name: &str,
    ns: Option<&StoredObject>,
) -> Result<(), ApiError> {
    let Some(ns) = ns else {
        return Err(ApiError::not_found("", "namespaces", &target.namespace));
    };
    let ns = super::parse(ns)?;
    let terminating = meta::deleting(&ns)
        || ns.pointer("/status/phase").and_then(Value::as_str) == Some("Terminating");
    if terminating {
        let why = format!(
            "unable to create new content in namespace {} because it is being terminated",
            target.namespace
        );
        let info = &target.info;
        return Err(ApiError::forbidden(&info.group, &info.plural, name, &why));
    }
    Ok(())
}

/// 403 for the namespaces the system needs.
pub(super) fn check_deletable(name: &str) -> Result<(), ApiError> {
    if PROTECTED.contains(&name) {
        let why = "this namespace may not be deleted";
        return Err(ApiError::forbidden("", "namespaces", name, why));
    }
    Ok(())
}

/// Marks a namespace being deleted.
pub(super) fn mark_terminating(obj: &mut Value) {
    let map = meta::object_mut(obj);
    let status = meta::object_mut(map.entry("status").or_insert_with(|| json!({})));
    status.insert("phase".into(), json!("Terminating"));
}

/// Starts emptying the namespace `name` (with uid `uid`) unless that already runs.
pub(super) fn spawn_drain(core: &Core, name: &str, uid: &str) {
    let (name, uid) = (name.to_owned(), uid.to_owned());
    core.spawn_cleanup(key(&name), move |core| async move {
        drain(&core, &name, &uid).await
    });
}

/// Creates the namespaces that do not exist yet.
pub(super) async fn ensure(core: &Core, names: &[&str]) -> Result<(), ApiError> {
    let info = core
        .registry
        .get("", "v1", "namespaces")
        .ok_or_else(|| ApiError::internal("namespaces are not among the served resources"))?;
    for name in names {
        let target = core.target_for(info.clone(), "", "");
        let body = json!({"metadata": {"name": name}});
        match super::create::create(core, target, body).await {
            Ok(_) => tracing::info!(namespace = %name, "created namespace"),
            Err(e) if e.reason == "AlreadyExists" => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Restarts the cleanup of namespaces left terminating by a previous run.
pub(super) async fn resume(core: &Core) -> Result<(), ApiError> {
    for stored in core.list("namespaces", None).await? {
        let ns = super::parse(&stored)?;
        if meta::deleting(&ns) {
            spawn_drain(core, meta::name(&ns), meta::uid(&ns));
        }
    }
    Ok(())
}

/// Deletes what is in the namespace until nothing is left, then finalizes it.
async fn drain(core: &Core, name: &str, uid: &str) {
    loop {
        match still_terminating(core, name, uid).await {
            Ok(true) => {}
            Ok(false) => return,
            Err(e) => tracing::warn!(namespace = %name, error = %e, "reading namespace"),
        }
        match delete_contents(core, name).await {
            Ok(0) => break,
            Ok(left) => tracing::debug!(namespace = %name, left, "namespace not empty yet"),
            Err(e) => tracing::warn!(namespace = %name, error = %e, "emptying namespace"),
        }
        tokio::time::sleep(DRAIN_INTERVAL).await;
    }
    if let Err(e) = finalize(core, name, uid).await {
        tracing::warn!(namespace = %name, error = %e, "finalizing namespace");
    }
}

/// False once the namespace is gone or is another one (deleted and created again).
async fn still_terminating(core: &Core, name: &str, uid: &str) -> Result<bool, ApiError> {
    let ns = core.get(&key(name)).await?;
    Ok(ns.is_some_and(|ns| meta::uid(&ns) == uid && meta::deleting(&ns)))
}

/// Issues a delete for every object in the namespace; returns how many remain.
async fn delete_contents(core: &Core, ns: &str) -> Result<usize, ApiError> {
    let mut seen = HashSet::new();
    let mut left = 0;
    for info in core.registry.all() {
        if !info.namespaced || !seen.insert(info.store_resource()) {
            continue;
        }
        left += delete::delete_all(core, info, Some(ns)).await?;
    }
    Ok(left)
}

/// Removes the cleanup finalizer; the namespace goes unless other finalizers hold it.
async fn finalize(core: &Core, name: &str, uid: &str) -> Result<(), ApiError> {
    core.edit_if_same(("", "namespaces"), name, uid, Part::Finalize, |next| {
        if let Some(list) = next
            .pointer_mut("/spec/finalizers")
            .and_then(Value::as_array_mut)
        {
            list.retain(|f| f.as_str() != Some(FINALIZER));
        }
    })
    .await
}

fn set_name_label(obj: &mut Value) {
    let name = meta::name(obj).to_owned();
    let meta = meta::metadata_mut(obj);
    let labels = meta::object_mut(meta.entry("labels").or_insert_with(|| json!({})));
    labels.insert(NAME_LABEL.into(), Value::String(name));
}
