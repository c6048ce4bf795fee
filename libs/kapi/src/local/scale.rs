//! The `scale` subresource's writes, above the verbs: a PUT or PATCH of an `autoscaling/v1`
//! `Scale` changes the parent's `spec.replicas` (through the update verb's commit, so the
//! parent's strategy and generation rules apply) and answers the parent's new `Scale`. A
//! `resourceVersion` in the written `Scale` is a precondition on the parent, as in
//! kube-apiserver's scale REST. The writer owns the parent's `spec.replicas` through the
//! `scale` subresource; a server-side apply of a `Scale` applies its replicas to the parent.

use apimachinery::managedfields::{self, Scope};
use apimachinery::patch::{self, PatchType};
use apimachinery::status::OPTIMISTIC_LOCK_MSG;
use apimachinery::{ApiError, scale};
use bytes::Bytes;
use objstore::Mutation;
use serde_json::{Value, json};

use super::update::{self, Part};
use super::vocab::{Core, Target, name_mismatch, parse};
use super::{meta, owners};

/// `PUT .../{name}/scale`.
pub(super) async fn update(core: &Core, target: Target, body: Value) -> Result<Value, ApiError> {
    let t = target.clone();
    let applied = core
        .mutate(vec![], target.key(), move |current, revision, _| {
            let parent = parse(current.ok_or_else(|| t.not_found())?)?;
            apply(&t, &parent, &body, revision)
        })
        .await?;
    Ok(applied.output)
}

/// `PATCH .../{name}/scale`: the patch applies to the parent's current `Scale`.
pub(super) async fn patch(
    core: &Core,
    target: Target,
    kind: PatchType,
    body: Bytes,
) -> Result<Value, ApiError> {
    let t = target.clone();
    let applied = core
        .mutate(vec![], target.key(), move |current, revision, _| {
            let parent = parse(current.ok_or_else(|| t.not_found())?)?;
            if kind == PatchType::Apply {
                let config = managedfields::decode_config(&body)?;
                return apply_config(&t, &parent, &config, revision);
            }
            let patched = patch::apply(&t.info, kind, &scale::of(&parent), &body)?;
            apply(&t, &parent, &patched, revision)
        })
        .await?;
    Ok(applied.output)
}

/// Checks `wanted` against the parent, then commits the parent with its replicas.
fn apply(
    target: &Target,
    parent: &Value,
    wanted: &Value,
    revision: u64,
) -> Result<(Mutation, Value), ApiError> {
    check_wanted(target, parent, wanted)?;
    let replicas = scale::replicas(wanted)?;
    let mut next = parent.clone();
    let map = meta::object_mut(&mut next);
    let spec = meta::object_mut(map.entry("spec").or_insert_with(|| json!({})));
    spec.insert("replicas".into(), json!(replicas));
    owners::record(target, Scope::Scale, Some(parent), &mut next);
    let (mutation, stored) = update::commit(target, Part::Main, parent, next, revision)?;
    Ok((mutation, scale::of(&stored)))
}

/// Server-side apply of a `Scale`: its `spec.replicas` applied to the parent.
fn apply_config(
    target: &Target,
    parent: &Value,
    config: &Value,
    revision: u64,
) -> Result<(Mutation, Value), ApiError> {
    check_wanted(target, parent, config)?;
    scale::replicas(config)?;
    let next = owners::apply(target, Scope::Scale, parent, config)?;
    let (mutation, stored) = update::commit(target, Part::Main, parent, next, revision)?;
    Ok((mutation, scale::of(&stored)))
}

/// The written `Scale` names the parent, and its `resourceVersion` (if any) is the parent's.
fn check_wanted(target: &Target, parent: &Value, wanted: &Value) -> Result<(), ApiError> {
    let name = meta::name(wanted);
    if !name.is_empty() && name != target.name {
        return Err(name_mismatch(name, &target.name));
    }
    let rv = meta::resource_version(wanted);
    if !rv.is_empty() && rv != meta::resource_version(parent) {
        let info = &target.info;
        return Err(ApiError::conflict(
            &info.group,
            &info.plural,
            &target.name,
            OPTIMISTIC_LOCK_MSG,
        ));
    }
    Ok(())
}
