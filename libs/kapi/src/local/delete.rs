//! DELETE: preconditions, then either the object goes now or it is marked
//! (`deletionTimestamp`) and kept: while finalizers remain, while the grace period its
//! strategy gives runs (a scheduled pod's), and always when its strategy says a delete only
//! marks (namespaces: their drain finishes the deletion). A cleanup the kind names is started
//! by the caller, above the verbs, never from here.
//!
//! `propagationPolicy` is kube-apiserver's: `Foreground` marks the object with the
//! `foregroundDeletion` finalizer and `Orphan` with `orphan`, so it stays until the garbage
//! collector (cloudcore's controllers, through the API) has deleted or orphaned its dependents
//! and removed the finalizer; `Background` (the default) removes it at once and leaves the
//! dependents to the collector.

use std::sync::Arc;

use apimachinery::time::{format_rfc3339, now_unix};
use apimachinery::{ApiError, ResourceInfo};
use objstore::Mutation;
use serde_json::{Value, json};

use super::vocab::{Core, Target, parse};
use super::{meta, strategy};
use crate::DeleteOptions;

const POLICIES: [&str; 3] = ["Foreground", "Background", "Orphan"];

/// What a delete did.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum Outcome {
    /// The object is gone; its last state.
    Removed(Value),
    /// The object is marked for deletion and kept; its new state.
    Marked(Value),
}

// === impl Outcome ===

impl Outcome {
    /// The object's last state (removed) or new state (marked).
    pub(super) fn object(&self) -> &Value {
        match self {
            Outcome::Removed(obj) | Outcome::Marked(obj) => obj,
        }
    }

    pub(super) fn into_object(self) -> Value {
        match self {
            Outcome::Removed(obj) | Outcome::Marked(obj) => obj,
        }
    }
}

/// Deletes the object (or marks it) for a client; what became of it.
pub(super) async fn delete(
    core: &Core,
    target: Target,
    opts: DeleteOptions,
) -> Result<Outcome, ApiError> {
    check_options(&opts)?;
    strategy::of(&target.info).check_delete(&target)?;
    delete_object(core, target, opts).await
}

/// The delete of one object, also used by [`delete_all`].
async fn delete_object(
    core: &Core,
    target: Target,
    opts: DeleteOptions,
) -> Result<Outcome, ApiError> {
    let applied = core
        .mutate(vec![], target.key(), move |current, revision, _| {
            let current = parse(current.ok_or_else(|| target.not_found())?)?;
            check_preconditions(&target, &current, &opts)?;
            step(&target, &opts, current, revision)
        })
        .await?;
    Ok(applied.output)
}

/// Deletes every object of `info` (in `namespace`, when given) with default options; returns
/// how many are still there (marked and waiting, or failing).
pub(super) async fn delete_all(
    core: &Core,
    info: Arc<ResourceInfo>,
    namespace: Option<&str>,
) -> Result<usize, ApiError> {
    let mut left = 0;
    for item in core.list(&info.store_resource(), namespace).await? {
        let target = core.target_for(info.clone(), &item.key.namespace, &item.key.name);
        match delete_object(core, target, DeleteOptions::default()).await {
            Ok(Outcome::Removed(_)) => {}
            Err(e) if e.code == 404 => {}
            Ok(Outcome::Marked(_)) => left += 1,
            Err(e) => {
                tracing::warn!(resource = %item.key, error = %e, "cleanup delete failed");
                left += 1;
            }
        }
    }
    Ok(left)
}

/// 409 when `preconditions.uid` or `preconditions.resourceVersion` do not match.
fn check_preconditions(
    target: &Target,
    current: &Value,
    opts: &DeleteOptions,
) -> Result<(), ApiError> {
    let checks = [
        ("UID", opts.uid.as_deref(), meta::uid(current)),
        (
            "ResourceVersion",
            opts.resource_version.as_deref(),
            meta::resource_version(current),
        ),
    ];
    for (what, want, have) in checks {
        if let Some(want) = want
            && want != have
        {
            let why = format!(
                "Precondition failed: {what} in precondition: {want}, {what} in object meta: {have}"
            );
            let info = &target.info;
            return Err(ApiError::conflict(
                &info.group,
                &info.plural,
                &target.name,
                &why,
            ));
        }
    }
    Ok(())
}

fn check_options(opts: &DeleteOptions) -> Result<(), ApiError> {
    match opts.propagation_policy.as_deref() {
        None => Ok(()),
        Some(p) if POLICIES.contains(&p) => Ok(()),
        Some(p) => {
            let why = format!(
                "Unsupported value: \"{p}\": supported values: \"Foreground\", \"Background\", \"Orphan\""
            );
            Err(ApiError::invalid(
                "",
                "DeleteOptions",
                "",
                &[("propagationPolicy", &why)],
            ))
        }
    }
}

/// The store step: remove, mark, or leave an already marked object as it is.
fn step(
    target: &Target,
    opts: &DeleteOptions,
    current: Value,
    revision: u64,
) -> Result<(Mutation, Outcome), ApiError> {
    let kind = strategy::of(&target.info);
    let grace = kind.grace_seconds(&current, opts);
    let mut marked = current.clone();
    if let Some(finalizer) = propagation_finalizer(opts)
        && !meta::deleting(&current)
        && !meta::finalizers(&current).contains(&finalizer)
    {
        let mut finalizers: Vec<Value> = meta::finalizers(&current)
            .iter()
            .map(|f| json!(f))
            .collect();
        finalizers.push(json!(finalizer));
        meta::set(&mut marked, "finalizers", Value::Array(finalizers));
    }
    let held = kind.marks_on_delete() || !meta::finalizers(&marked).is_empty();
    if grace == 0 && !held {
        let mutation = if target.dry_run {
            Mutation::Keep
        } else {
            Mutation::Delete
        };
        // An object marked earlier goes with its grace period shortened to 0, as
        // kube-apiserver answers the final delete: who reads the answer can tell it is gone.
        let mut last = current;
        if meta::deleting(&last) {
            set_grace(&mut last, grace);
        }
        return Ok((mutation, Outcome::Removed(last)));
    }
    let mut next = marked;
    mark(target, &mut next, grace);
    if next == current {
        return Ok((Mutation::Keep, Outcome::Marked(current)));
    }
    let mutation = target.write(&mut next, revision)?;
    Ok((mutation, Outcome::Marked(next)))
}

/// The finalizer a propagation policy leaves for the garbage collector.
fn propagation_finalizer(opts: &DeleteOptions) -> Option<&'static str> {
    match opts.propagation_policy.as_deref() {
        Some("Foreground") => Some("foregroundDeletion"),
        Some("Orphan") => Some("orphan"),
        _ => None,
    }
}

/// Marks the object deleted with `grace` (see [`set_grace`]).
fn mark(target: &Target, obj: &mut Value, grace: i64) {
    let first = !meta::deleting(obj);
    set_grace(obj, grace);
    if first && let Some(generation) = meta::generation(obj) {
        meta::set(obj, "generation", json!(generation + 1));
    }
    strategy::of(&target.info).mark_deleting(obj);
}

/// Sets `deletionTimestamp` (now + grace) and `deletionGracePeriodSeconds`; a later delete may
/// shorten the grace period but never extend it.
fn set_grace(obj: &mut Value, grace: i64) {
    if !meta::deleting(obj) || meta::deletion_grace(obj).is_none_or(|g| grace < g) {
        let at = format_rfc3339(now_unix().saturating_add(grace));
        meta::set(obj, "deletionTimestamp", Value::String(at));
        meta::set(obj, "deletionGracePeriodSeconds", json!(grace));
    }
}
