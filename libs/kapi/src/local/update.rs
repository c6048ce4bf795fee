//! PUT and PATCH of the main resource and of the `status`, `finalize`, `approval` and
//! `ephemeralcontainers` subresources.
//!
//! Both end in [`commit`]: a body (PUT) or a patched copy of the current object (PATCH) is
//! checked against the current object (resourceVersion and uid preconditions), merged
//! according to the part written (the main resource keeps the status, `status` takes only
//! the status, `finalize` only `spec.finalizers`), then stored with a bumped generation when
//! the spec changed, not stored at all when nothing changed, or deleted when it lost its last
//! finalizer while marked for deletion (or still held by its kind). What the kind adds comes
//! from its [`Strategy`](super::vocab::Strategy). Before the commit, the write's field
//! manager gets the fields it set ([`owners`](super::owners)); a server-side apply merges
//! its configuration by field ownership instead of patching, and creates a missing object.

use apimachinery::managedfields::{self, Scope};
use apimachinery::patch::{self, PatchType};
use apimachinery::status::OPTIMISTIC_LOCK_MSG;
use apimachinery::{ApiError, ResourceInfo, statuswrite};
use bytes::Bytes;
use objstore::{Applied, Mutation, StoredObject};
use serde_json::{Value, json};

use super::create::Held;
use super::vocab::{Core, Subresource, Target, name_mismatch, parse, unsupported};
use super::{create, meta, owners, strategy, subresources, validate};

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
    /// `certificatesigningrequests/{name}/approval`: `status.conditions` (Approved, Denied).
    Approval,
    /// `pods/{name}/ephemeralcontainers`: `spec.ephemeralContainers`, only added to.
    EphemeralContainers,
}

impl Part {
    /// The part a subresource names (405 for subresources that cannot be written).
    pub(super) fn of(info: &ResourceInfo, sub: Option<&str>, verb: &str) -> Result<Part, ApiError> {
        let Some(sub) = sub else {
            return Ok(Part::Main);
        };
        match sub {
            _ if !info.has_subresource(sub) => {}
            "status" => return Ok(Part::Status),
            "approval" => return Ok(Part::Approval),
            "ephemeralcontainers" => return Ok(Part::EphemeralContainers),
            _ => {}
        }
        match strategy::of(info).subresource(sub) {
            Some(Subresource::Finalize) => Ok(Part::Finalize),
            _ => Err(unsupported(verb, info, sub)),
        }
    }

    /// The fields a write of this part can own.
    fn scope(self, target: &Target) -> Scope {
        match self {
            Part::Status | Part::Approval => Scope::Status,
            _ => owners::main_scope(target),
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
    let (t, c) = (target.clone(), core.clone());
    let applied = write(core, &target, part, move |current, revision, held| {
        let current = served(&t, current.ok_or_else(|| t.not_found())?)?;
        check_preconditions(&t, &current, &body)?;
        let mut next = merge(&t, part, &current, body)?;
        owners::record(&t, part.scope(&t), Some(&current), &mut next);
        allocate(&c, &t, held, &current, &mut next)?;
        commit(&t, part, &current, next, revision)
    })
    .await?;
    after_update(core, &target).await;
    Ok(applied.output)
}

/// PATCH: applies `patch` to the current object, then writes `part` of the result. Server-side
/// apply (`Apply`) goes to [`apply`].
pub(super) async fn patch(
    core: &Core,
    target: Target,
    part: Part,
    kind: PatchType,
    patch: Bytes,
) -> Result<Value, ApiError> {
    if kind == PatchType::Apply {
        return apply(core, target, part, &patch).await;
    }
    let (t, c) = (target.clone(), core.clone());
    let applied = write(core, &target, part, move |current, revision, held| {
        let current = served(&t, current.ok_or_else(|| t.not_found())?)?;
        let patched = patch::apply(&t.info, kind, &current, &patch).map_err(ApiError::from)?;
        let patched = check_body(&t, patched)?;
        check_preconditions(&t, &current, &patched)?;
        let mut next = merge(&t, part, &current, patched)?;
        owners::record(&t, part.scope(&t), Some(&current), &mut next);
        allocate(&c, &t, held, &current, &mut next)?;
        commit(&t, part, &current, next, revision)
    })
    .await?;
    after_update(core, &target).await;
    Ok(applied.output)
}

/// Server-side apply: the configuration merged into the current object by field ownership
/// (409 on conflicts unless forced), then written as `part`. Applying the main resource of a
/// missing object creates it, as kube-apiserver does.
async fn apply(core: &Core, target: Target, part: Part, body: &[u8]) -> Result<Value, ApiError> {
    let config = check_body(&target, managedfields::decode_config(body)?)?;
    let (t, c) = (target.clone(), core.clone());
    let cfg = config.clone();
    let written = write(core, &target, part, move |current, revision, held| {
        let current = served(&t, current.ok_or_else(|| t.not_found())?)?;
        check_preconditions(&t, &current, &cfg)?;
        let applied = owners::apply(&t, part.scope(&t), &current, &cfg)?;
        patch::check_size(&applied)?;
        let mut next = merge(&t, part, &current, applied.clone())?;
        owners::carry(&applied, &mut next);
        allocate(&c, &t, held, &current, &mut next)?;
        commit(&t, part, &current, next, revision)
    })
    .await;
    match written {
        Err(e) if e.code == 404 && part == Part::Main => {
            let obj = owners::apply(&target, part.scope(&target), &json!({}), &config)?;
            let mut target = target;
            target.owner.applying = true;
            create::create(core, target, obj).await
        }
        Err(e) => Err(e),
        Ok(written) => {
            after_update(core, &target).await;
            Ok(written.output)
        }
    }
}

/// The stored object in the version the write addresses (a HorizontalPodAutoscaler may be
/// stored as v1 or v2 and written through either): the write applies to what its client
/// reads.
fn served(target: &Target, stored: &StoredObject) -> Result<Value, ApiError> {
    let mut current = parse(stored)?;
    let info = &target.info;
    if apimachinery::convert::has_versions(&info.group, &info.kind) {
        apimachinery::convert::to_version(&info.group, &info.version, &mut current);
    }
    Ok(current)
}

/// Runs the store step of an update, patch or apply. The main resource of a kind with a
/// ledger (Services) is written in a transaction that lets the step allocate (see
/// [`allocate`]); everything else is a plain write of the one object.
async fn write<F>(
    core: &Core,
    target: &Target,
    part: Part,
    step: F,
) -> Result<Applied<Value>, ApiError>
where
    F: FnOnce(Option<&StoredObject>, u64, Option<&mut Held>) -> Result<(Mutation, Value), ApiError>
        + Send
        + 'static,
{
    if part == Part::Main && strategy::of(&target.info).ledger().is_some() {
        let key = target.key();
        create::with_ledger(core, target, vec![], key, move |current, revision, held| {
            step(current, revision, Some(held))
        })
        .await
    } else {
        core.mutate(vec![], target.key(), move |current, revision, _| {
            step(current, revision, None)
        })
        .await
    }
}

/// What an update of the main resource gains takes its allocations (a Service turned
/// NodePort gets its node ports); what it keeps stays, what it drops is released.
fn allocate(
    core: &Core,
    target: &Target,
    held: Option<&mut Held>,
    current: &Value,
    next: &mut Value,
) -> Result<(), ApiError> {
    match held {
        Some(held) => held.allocate(core, target, next, Some(meta::uid(current))),
        None => Ok(()),
    }
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
    let kind = strategy::of(&target.info);
    kind.canonicalize(target, &mut next)?;
    kind.validate_update(target, current, &next)?;
    validate::check_metadata(&target.info, &next)?;
    check_new_finalizers(target, current, &next)?;
    if part == Part::Main && kind.tracks_generation() {
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

/// Commits `edit` as `part` to the cluster-scoped object `name` of `group`/v1/`plural`, if it
/// still has `uid`; an object that is gone, or was deleted and created again, is left alone.
/// For the cleanups above the verbs, which finish what a delete started.
pub(super) async fn edit_if_same(
    core: &Core,
    (group, plural): (&str, &str),
    name: &str,
    uid: &str,
    part: Part,
    edit: impl FnOnce(&mut Value) + Send + 'static,
) -> Result<(), ApiError> {
    let info = core.registry.get(group, "v1", plural).ok_or_else(|| {
        ApiError::internal(format!("{plural} are not among the served resources"))
    })?;
    let target = core.target_for(info, "", name);
    let uid = uid.to_owned();
    core.mutate(vec![], target.key(), move |current, revision, _| {
        let Some(current) = current else {
            return Ok((Mutation::Keep, ()));
        };
        let current = parse(current)?;
        if meta::uid(&current) != uid {
            return Ok((Mutation::Keep, ()));
        }
        let mut next = current.clone();
        edit(&mut next);
        let (mutation, _) = commit(&target, part, &current, next, revision)?;
        Ok((mutation, ()))
    })
    .await?;
    Ok(())
}

/// A body's type, name and namespace must match the URL (filled in when absent).
fn check_body(target: &Target, mut body: Value) -> Result<Value, ApiError> {
    validate::check_type(&target.info, &mut body)?;
    let name = meta::name(&body);
    if name.is_empty() {
        meta::set(&mut body, "name", Value::String(target.name.clone()));
    } else if name != target.name {
        return Err(name_mismatch(name, &target.name));
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
            strategy::of(&target.info).prepare_update(target, &mut next, current)?;
            Ok(next)
        }
        // One rule with lwproxy's offline status writes.
        Part::Status => {
            let mut next = statuswrite::apply(current, &body, target.info.custom);
            // Where approval is a subresource of its own, `status` cannot approve or deny.
            if target.info.has_subresource("approval") {
                subresources::keep_approval(current, &mut next);
            }
            Ok(next)
        }
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
        Part::Approval => subresources::approve(target, current, &body),
        Part::EphemeralContainers => subresources::ephemeral_containers(target, current, &body),
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

/// True when the write removes what held a marked object: no finalizers left, nothing the
/// kind holds it by (a namespace's `spec.finalizers`), and no grace period still running.
fn finished_deleting(target: &Target, current: &Value, next: &Value) -> bool {
    meta::deleting(current)
        && meta::finalizers(next).is_empty()
        && meta::deletion_grace(current).unwrap_or(0) == 0
        && !strategy::of(&target.info).holds_deletion(next)
}

/// Work after a committed write (a CRD's served resources follow it).
async fn after_update(core: &Core, target: &Target) {
    if !target.dry_run {
        strategy::of(&target.info)
            .after_write(core, &target.name)
            .await;
    }
}
