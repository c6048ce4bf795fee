//! PUT and PATCH of the main resource and of the `status` and `finalize` subresources.
//!
//! Both end in [`commit`]: a body (PUT) or a patched copy of the current object (PATCH) is
//! checked against the current object (resourceVersion and uid preconditions), merged
//! according to the part written (the main resource keeps the status, `status` takes only
//! the status, `finalize` only `spec.finalizers`), then stored with a bumped generation when
//! the spec changed, not stored at all when nothing changed, or deleted when it lost its last
//! finalizer while marked for deletion.

use apimachinery::patch::{self, PatchError, PatchType};
use apimachinery::status::OPTIMISTIC_LOCK_MSG;
use apimachinery::{ApiError, ResourceInfo, statuswrite};
use bytes::Bytes;
use objstore::Mutation;
use serde_json::{Value, json};

use super::{Core, Parents, Special, Target, crd, create, meta, namespace, validate};

/// Metadata the server owns: kept from the current object whatever the body says.
const SERVER_OWNED: [&str; 7] = [
    "uid",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "generateName",
    "generation",
    "resourceVersion",
];

/// Which part of the object a write replaces.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Part {
    /// The main resource: everything but the status (when there is a status subresource).
    Main,
    /// `status`: the status (and, for built-in kinds, labels and annotations).
    Status,
    /// `namespaces/{name}/finalize`: `spec.finalizers`.
    Finalize,
}

impl Part {
    /// The part a subresource names (405 for subresources that cannot be written).
    pub(super) fn of(info: &ResourceInfo, sub: Option<&str>, verb: &str) -> Result<Part, ApiError> {
        match sub {
            None => Ok(Part::Main),
            Some("status") if info.has_subresource("status") => Ok(Part::Status),
            Some("finalize") if super::special(info) == Special::Namespace => Ok(Part::Finalize),
            Some(s) => Err(super::unsupported(verb, info, s)),
        }
    }
}

/// PUT: replaces `part` of the object with `body`'s.
pub(super) async fn update(
    core: &Core,
    target: Target,
    part: Part,
    body: Value,
) -> Result<Value, ApiError> {
    let body = check_body(&target, body)?;
    let t = target.clone();
    let applied = core
        .mutate(vec![], target.key(), move |current, revision, _| {
            let current = super::parse(current.ok_or_else(|| t.not_found())?)?;
            check_preconditions(&t, &current, &body)?;
            let next = merge(&t, part, &current, body)?;
            commit(&t, part, &current, next, revision)
        })
        .await?;
    after_update(core, &target).await;
    Ok(applied.output)
}

/// PATCH: applies `patch` to the current object, then writes `part` of the result. Server-side
/// apply (`Apply`) of a missing object creates it, as kube-apiserver does.
pub(super) async fn patch(
    core: &Core,
    target: Target,
    part: Part,
    kind: PatchType,
    patch: Bytes,
) -> Result<Value, ApiError> {
    let create_on_apply = kind == PatchType::Apply && part == Part::Main;
    let parents = if create_on_apply {
        create::parents(&target)
    } else {
        Vec::new()
    };
    let t = target.clone();
    let applied = core
        .mutate(parents, target.key(), move |current, revision, parents| {
            let Some(current) = current else {
                if create_on_apply {
                    return apply_create(&t, &patch, revision, parents);
                }
                return Err(t.not_found());
            };
            let current = super::parse(current)?;
            let patched = patch::apply(&t.info, kind, &current, &patch).map_err(patch_error)?;
            let patched = check_body(&t, patched)?;
            check_preconditions(&t, &current, &patched)?;
            let next = merge(&t, part, &current, patched)?;
            commit(&t, part, &current, next, revision)
        })
        .await?;
    after_update(core, &target).await;
    Ok(applied.output)
}

/// The store step shared by updates, patches and the cleanups: checks `next`, sets its
/// generation, and stores it, keeps the current object when nothing changed, or deletes the
/// object when its last finalizer went while it is marked for deletion.
pub(super) fn commit(
    target: &Target,
    part: Part,
    current: &Value,
    mut next: Value,
    revision: u64,
) -> Result<(Mutation, Value), ApiError> {
    validate::check_data(&target.info, &mut next)?;
    validate::check_metadata(&target.info, &next)?;
    check_new_finalizers(target, current, &next)?;
    if part == Part::Main && target.tracks_generation() {
        let base = meta::generation(current).unwrap_or(1);
        let changed = meta::spec_changed(current, &next, target.has_status_subresource());
        meta::set(&mut next, "generation", json!(base + i64::from(changed)));
    }
    if finished_deleting(target, current, &next) {
        let mutation = if target.dry_run {
            Mutation::Keep
        } else {
            Mutation::Delete
        };
        return Ok((mutation, next));
    }
    if next == *current {
        return Ok((Mutation::Keep, next));
    }
    let mutation = target.write(&mut next, revision)?;
    Ok((mutation, next))
}

/// A body's type, name and namespace must match the URL (filled in when absent).
fn check_body(target: &Target, mut body: Value) -> Result<Value, ApiError> {
    validate::check_type(&target.info, &mut body)?;
    let name = meta::name(&body);
    if name.is_empty() {
        meta::set(&mut body, "name", Value::String(target.name.clone()));
    } else if name != target.name {
        return Err(create::name_mismatch(name, &target.name));
    }
    validate::check_namespace(&target.info, &target.namespace, &mut body)?;
    Ok(body)
}

/// A resourceVersion in the body must be the current one, a uid the current uid (409).
fn check_preconditions(target: &Target, current: &Value, body: &Value) -> Result<(), ApiError> {
    let info = &target.info;
    let conflict = |why: &str| ApiError::conflict(&info.group, &info.plural, &target.name, why);
    let rv = meta::resource_version(body);
    if !rv.is_empty() && rv != meta::resource_version(current) {
        return Err(conflict(OPTIMISTIC_LOCK_MSG));
    }
    let (uid, have) = (meta::uid(body), meta::uid(current));
    if !uid.is_empty() && uid != have {
        let why =
            format!("Precondition failed: UID in precondition: {uid}, UID in object meta: {have}");
        return Err(conflict(&why));
    }
    Ok(())
}

/// The object as it would be after writing `part` of `body` over `current`.
fn merge(target: &Target, part: Part, current: &Value, body: Value) -> Result<Value, ApiError> {
    match part {
        Part::Main => {
            let mut next = body;
            for field in SERVER_OWNED {
                meta::copy(&mut next, current, field);
            }
            if target.has_status_subresource() {
                meta::set_top(&mut next, "status", current.get("status").cloned());
            }
            match target.special() {
                Special::Namespace => namespace::prepare_update(&mut next, current),
                Special::Crd => crd::prepare(&target.registry, &mut next, Some(current))?,
                Special::Pod | Special::None => {}
            }
            Ok(next)
        }
        // One rule with lwproxy's offline status writes.
        Part::Status => Ok(statuswrite::apply(current, &body, target.info.custom)),
        Part::Finalize => {
            let mut next = current.clone();
            let finalizers = body
                .pointer("/spec/finalizers")
                .cloned()
                .unwrap_or_else(|| json!([]));
            let map = meta::object_mut(&mut next);
            let spec = meta::object_mut(map.entry("spec").or_insert_with(|| json!({})));
            spec.insert("finalizers".into(), finalizers);
            Ok(next)
        }
    }
}

/// An object marked for deletion may lose finalizers but not gain them (422).
fn check_new_finalizers(target: &Target, current: &Value, next: &Value) -> Result<(), ApiError> {
    if !meta::deleting(current) {
        return Ok(());
    }
    let had = meta::finalizers(current);
    let added: Vec<&str> = meta::finalizers(next)
        .into_iter()
        .filter(|f| !had.contains(f))
        .collect();
    if added.is_empty() {
        return Ok(());
    }
    let why = format!(
        "Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers {added:?}"
    );
    Err(validate::invalid(
        &target.info,
        &target.name,
        "metadata.finalizers",
        why,
    ))
}

/// True when the write removes what held a marked object: no finalizers left (and, for a
/// namespace, no `spec.finalizers`), and no grace period still running.
fn finished_deleting(target: &Target, current: &Value, next: &Value) -> bool {
    meta::deleting(current)
        && meta::finalizers(next).is_empty()
        && meta::deletion_grace(current).unwrap_or(0) == 0
        && !(target.special() == Special::Namespace && namespace::has_spec_finalizers(next))
}

/// Server-side apply of a missing object: the patch applied to an empty object, created.
fn apply_create(
    target: &Target,
    patch: &[u8],
    revision: u64,
    parents: &Parents,
) -> Result<(Mutation, Value), ApiError> {
    let mut skeleton = json!({
        "apiVersion": target.info.api_version(),
        "kind": target.info.kind,
        "metadata": {"name": target.name},
    });
    if target.info.namespaced {
        meta::set(
            &mut skeleton,
            "namespace",
            Value::String(target.namespace.clone()),
        );
    }
    let obj =
        patch::apply(&target.info, PatchType::Apply, &skeleton, patch).map_err(patch_error)?;
    let obj = create::prepare(target, obj)?;
    validate::check_name(&target.info, &target.name)?;
    create::step(target, obj, None, revision, parents)
}

/// Work after a committed write: a CRD's served resources follow it.
async fn after_update(core: &Core, target: &Target) {
    if target.special() == Special::Crd && !target.dry_run {
        crd::sync(core, &target.name).await;
    }
}

fn patch_error(e: PatchError) -> ApiError {
    match e {
        PatchError::Unsupported(m) => ApiError::new(415, "UnsupportedMediaType", m),
        PatchError::BadRequest(m) => ApiError::bad_request(m),
        PatchError::Invalid(m) => ApiError::new(422, "Invalid", m),
    }
}
