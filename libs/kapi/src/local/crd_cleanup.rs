//! The CRD finalizer controller's part, above the verbs: a deleted CRD's custom objects are
//! deleted through the delete verb (objects with finalizers are waited for, re-checked every
//! [`CLEANUP_INTERVAL`]), then its resources stop being served and the
//! `customresourcecleanup` finalizer is removed, so the CRD goes.

use std::time::Duration;

use apimachinery::ApiError;
use serde_json::Value;

use super::update::Part;
use super::vocab::{Core, parse, store_error};
use super::{crd, delete, meta, update};

/// How often a deleted CRD's cleanup re-checks objects that wait for their finalizers.
const CLEANUP_INTERVAL: Duration = Duration::from_secs(1);

/// Starts deleting the custom objects of CRD `name` (with uid `uid`) unless that already runs.
pub(super) fn spawn(core: &Core, name: &str, uid: &str) {
    let (name, uid) = (name.to_owned(), uid.to_owned());
    core.spawn_cleanup(crd::key(&name), move |core| async move {
        cleanup(&core, &name, &uid).await
    });
}

/// Restarts the cleanup of CRDs left terminating by a previous run.
pub(super) async fn resume(core: &Core) -> Result<(), ApiError> {
    for stored in core.list(crd::STORE_RESOURCE, None).await? {
        let obj = parse(&stored)?;
        if meta::deleting(&obj) {
            spawn(core, meta::name(&obj), meta::uid(&obj));
        }
    }
    Ok(())
}

/// Deletes the CRD's objects until none is left, then stops serving them and lets the CRD go.
async fn cleanup(core: &Core, name: &str, uid: &str) {
    loop {
        match core.get(&crd::key(name)).await {
            Ok(Some(crd)) if meta::uid(&crd) != uid => return,
            Ok(_) => {}
            Err(e) => tracing::warn!(crd = %name, error = %e, "reading CRD"),
        }
        // Custom objects are stored under `plural.group`, the CRD's name.
        let left = match core.registry.by_store_resource(name) {
            Some(info) => delete::delete_all(core, info, None).await,
            None => purge(core, name).await,
        };
        match left {
            Ok(0) => break,
            Ok(left) => tracing::debug!(crd = %name, left, "custom objects remain"),
            Err(e) => tracing::warn!(crd = %name, error = %e, "deleting custom objects"),
        }
        tokio::time::sleep(CLEANUP_INTERVAL).await;
    }
    crd::unregister(&core.registry, name);
    if let Err(e) = remove_finalizer(core, name, uid).await {
        tracing::warn!(crd = %name, error = %e, "finalizing CRD");
    }
}

/// Removes the objects of a resource no longer served (its CRD stopped parsing): nothing can
/// act on their finalizers any more. Returns how many are left (none).
async fn purge(core: &Core, store_resource: &str) -> Result<usize, ApiError> {
    for item in core.list(store_resource, None).await? {
        core.store.delete(&item.key).await.map_err(store_error)?;
    }
    Ok(0)
}

/// Removes the cleanup finalizer; the CRD goes unless other finalizers hold it.
async fn remove_finalizer(core: &Core, name: &str, uid: &str) -> Result<(), ApiError> {
    let edit = |next: &mut Value| {
        let kept: Vec<Value> = meta::finalizers(next)
            .into_iter()
            .filter(|f| *f != crd::CLEANUP_FINALIZER)
            .map(|f| Value::String(f.to_owned()))
            .collect();
        let kept = if kept.is_empty() {
            Value::Null
        } else {
            Value::Array(kept)
        };
        meta::set(next, "finalizers", kept);
    };
    let resource = (crd::GROUP, "customresourcedefinitions");
    update::edit_if_same(core, resource, name, uid, Part::Main, edit).await
}
