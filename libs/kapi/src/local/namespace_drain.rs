//! The namespace controller's part, above the verbs: the namespaces the system needs are
//! created at start, and a terminating namespace is emptied and then finalized, through the
//! same verbs a client calls.
//!
//! Objects in it are deleted like a client would (`DeleteOptions` defaults): pods without a
//! node go at once, scheduled pods get their grace period and wait for their kubelet's final
//! delete, objects with finalizers wait for their controllers. The drain re-checks every
//! [`DRAIN_INTERVAL`] until the namespace is empty, then removes the `kubernetes` finalizer
//! and the namespace goes.

use std::collections::HashSet;
use std::time::Duration;

use apimachinery::ApiError;
use serde_json::{Value, json};

use super::update::Part;
use super::vocab::{Core, namespace_key, parse};
use super::{create, delete, meta, namespace, update};

/// How often a terminating namespace is re-checked while objects in it wait.
const DRAIN_INTERVAL: Duration = Duration::from_secs(1);

/// Creates the namespaces that do not exist yet.
pub(super) async fn ensure(core: &Core, names: &[&str]) -> Result<(), ApiError> {
    let info = core
        .registry
        .get("", "v1", "namespaces")
        .ok_or_else(|| ApiError::internal("namespaces are not among the served resources"))?;
    for name in names {
        let target = core.target_for(info.clone(), "", "");
        let body = json!({"metadata": {"name": name}});
        match create::create(core, target, body).await {
            Ok(_) => tracing::info!(namespace = %name, "created namespace"),
            Err(e) if e.reason == "AlreadyExists" => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Starts emptying the namespace `name` (with uid `uid`) unless that already runs.
pub(super) fn spawn(core: &Core, name: &str, uid: &str) {
    let (name, uid) = (name.to_owned(), uid.to_owned());
    core.spawn_cleanup(namespace_key(&name), move |core| async move {
        drain(&core, &name, &uid).await
    });
}

/// Restarts the drain of namespaces left terminating by a previous run.
pub(super) async fn resume(core: &Core) -> Result<(), ApiError> {
    for stored in core.list("namespaces", None).await? {
        let ns = parse(&stored)?;
        if meta::deleting(&ns) {
            spawn(core, meta::name(&ns), meta::uid(&ns));
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
    let ns = core.get(&namespace_key(name)).await?;
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

/// Removes the drain's finalizer; the namespace goes unless other finalizers hold it.
async fn finalize(core: &Core, name: &str, uid: &str) -> Result<(), ApiError> {
    let edit = |next: &mut Value| {
        if let Some(list) = next
            .pointer_mut("/spec/finalizers")
            .and_then(Value::as_array_mut)
        {
            list.retain(|f| f.as_str() != Some(namespace::FINALIZER));
        }
    };
    update::edit_if_same(core, ("", "namespaces"), name, uid, Part::Finalize, edit).await
}
