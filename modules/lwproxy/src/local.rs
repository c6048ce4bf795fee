//! The writes lwproxy applies to the edge store itself while the cloud is unreachable, so a
//! kubelet keeps reporting: `pods/status` and `nodes/status` updates and patches, and lease
//! creates, updates and patches. Pure logic: what the object becomes, checked as the API
//! server would check it; storing and queueing are the backend's.
//!
//! A status write changes what it changes online ([`apimachinery::statuswrite`]: `status`,
//! and labels and annotations). A lease write takes the request's object, with the identity
//! the store holds (uid, creationTimestamp) kept.
//!
//! What is queued for the cloud ([`upstream`]) is what the client changed, never the whole
//! object, so replaying it after the cloud changed the object meanwhile undoes nothing: a
//! merge patch of the status write ([`statuswrite::merge_patch`]), a merge patch of a lease's
//! renew fields, or, for a lease the cloud has never sent (created here), its create.

use apimachinery::object::{meta_str, metadata_mut, object_mut};
use apimachinery::patch::PatchType;
use apimachinery::status::OPTIMISTIC_LOCK_MSG;
use apimachinery::{ApiError, ForwardedWrite, ResourceInfo, patch, statuswrite};
use objstore::{ObjKey, StoredObject};
use serde_json::Value;

use crate::envelope::{Change, is_current};

/// The `spec` fields of a Lease its holder writes when it acquires or renews it.
pub(crate) const RENEW_FIELDS: [&str; 5] = [
    "holderIdentity",
    "leaseDurationSeconds",
    "acquireTime",
    "renewTime",
    "leaseTransitions",
];

/// A write lwproxy may apply locally.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LocalWrite {
    /// `pods/status` or `nodes/status`: update or patch.
    Status,
    /// `coordination.k8s.io` leases: create, update or patch.
    Lease,
}

/// The object a write is about, as the REST layer named it.
pub(crate) struct Subject<'a> {
    pub(crate) info: &'a ResourceInfo,
    pub(crate) namespace: &'a str,
    /// From the URL; `""` for a create.
    pub(crate) name: &'a str,
}

// === impl LocalWrite ===

impl LocalWrite {
    /// The kind of local write `change` on `info` (and `subresource`) is, if it is one.
    pub(crate) fn of(
        info: &ResourceInfo,
        subresource: Option<&str>,
        change: &Change,
    ) -> Option<LocalWrite> {
        let changes_object = matches!(change, Change::Update(_) | Change::Patch(..));
        match (info.group.as_str(), info.plural.as_str(), subresource) {
            ("", "pods" | "nodes", Some("status")) if changes_object => Some(LocalWrite::Status),
            ("coordination.k8s.io", "leases", None)
                if changes_object || matches!(change, Change::Create(_)) =>
            {
                Some(LocalWrite::Lease)
            }
            _ => None,
        }
    }
}

// === impl Subject ===

impl Subject<'_> {
    fn conflict(&self, why: &str) -> ApiError {
        ApiError::conflict(&self.info.group, &self.info.plural, self.name, why)
    }

    fn not_found(&self) -> ApiError {
        ApiError::not_found(&self.info.group, &self.info.plural, self.name)
    }
}

/// What `change` leaves of the object `held` (`None`: not held), ready to store: kind and
/// apiVersion set, no `metadata.resourceVersion` (the store gives it), at most
/// [`kapi::MAX_OBJECT_BYTES`] encoded (413 past it). Preconditions are
/// checked against the held object: a `metadata.resourceVersion` must be its local revision or
/// its cloud resourceVersion, a `metadata.uid` its uid.
pub(crate) fn next_object(
    write: LocalWrite,
    subject: &Subject<'_>,
    held: Option<&StoredObject>,
    change: &Change,
) -> Result<Value, ApiError> {
    let mut next = match (held, change) {
        (Some(_), Change::Create(_)) => {
            let info = subject.info;
            let name = name_of(change).unwrap_or(subject.name);
            return Err(ApiError::already_exists(&info.group, &info.plural, name));
        }
        (None, Change::Create(obj)) => created(subject, obj.clone())?,
        (None, _) => return Err(subject.not_found()),
        (Some(held), change) => changed(write, subject, held, change)?,
    };
    let map = object_mut(&mut next);
    map.insert("kind".into(), Value::String(subject.info.kind.clone()));
    map.insert(
        "apiVersion".into(),
        Value::String(subject.info.api_version()),
    );
    metadata_mut(&mut next).remove("resourceVersion");
    let encoded = serde_json::to_vec(&next)
        .map_err(|e| ApiError::internal(format!("encoding the object: {e}")))?;
    kapi::check_object_size(subject.info, meta_str(&next, "name"), &encoded)?;
    Ok(next)
}

/// An update or patch of the held object.
fn changed(
    write: LocalWrite,
    subject: &Subject<'_>,
    held: &StoredObject,
    change: &Change,
) -> Result<Value, ApiError> {
    let current = parse(held)?;
    let requested = match change {
        Change::Update(obj) => obj.clone(),
        Change::Patch(kind, bytes) => patch::apply(subject.info, *kind, &current, bytes)?,
        Change::Create(_) | Change::Delete(_) => {
            return Err(ApiError::internal("not a write lwproxy applies locally"));
        }
    };
    let rv = meta_str(&requested, "resourceVersion");
    if !is_current(rv, held) {
        return Err(subject.conflict(OPTIMISTIC_LOCK_MSG));
    }
    let (uid, have) = (meta_str(&requested, "uid"), meta_str(&current, "uid"));
    if !uid.is_empty() && uid != have {
        let why =
            format!("Precondition failed: UID in precondition: {uid}, UID in object meta: {have}");
        return Err(subject.conflict(&why));
    }
    Ok(match write {
        LocalWrite::Status => statuswrite::apply(&current, &requested, subject.info.custom),
        LocalWrite::Lease => with_identity_of(&current, requested),
    })
}

/// A lease made here: named, in the URL's namespace, created now. It has no uid until the
/// cloud creates it and sends its version down.
fn created(subject: &Subject<'_>, mut obj: Value) -> Result<Value, ApiError> {
    let name = meta_str(&obj, "name").to_owned();
    if name.is_empty() {
        let info = subject.info;
        let why = "Required value: name or generateName is required";
        return Err(ApiError::invalid(
            &info.group,
            &info.kind,
            "",
            &[("metadata.name", why)],
        ));
    }
    let meta = metadata_mut(&mut obj);
    meta.remove("uid");
    meta.insert(
        "namespace".into(),
        Value::String(subject.namespace.to_owned()),
    );
    let now = apimachinery::time::now_rfc3339();
    meta.insert("creationTimestamp".into(), Value::String(now));
    Ok(obj)
}

/// The write that makes `next` (the object a local write stored over `held`) in the cloud:
/// see the module doc.
pub(crate) fn upstream(
    write: LocalWrite,
    subject: &Subject<'_>,
    key: &ObjKey,
    held: Option<&StoredObject>,
    next: &Value,
) -> Result<ForwardedWrite, ApiError> {
    let info = subject.info;
    let base = ForwardedWrite {
        group: info.group.clone(),
        version: info.version.clone(),
        resource: info.plural.clone(),
        namespace: key.namespace.clone(),
        name: key.name.clone(),
        content_type: Some(PatchType::Merge.content_type().into()),
        ..Default::default()
    };
    let held = match held {
        Some(held) if !held.resource_version.is_empty() => held,
        // Not in the cloud yet: only a lease is written without being held.
        _ => return Ok(create(base, next)),
    };
    let before = parse(held)?;
    let (subresource, body) = match write {
        LocalWrite::Status => (
            Some("status".to_owned()),
            statuswrite::merge_patch(&before, next, info.custom),
        ),
        LocalWrite::Lease => (None, renew_patch(&before, next)),
    };
    Ok(ForwardedWrite {
        verb: "patch".into(),
        subresource,
        body: Some(body),
        ..base
    })
}

/// The create of an object made here: without the store's resourceVersion, and without
/// uid and creationTimestamp, which the cloud gives it.
fn create(base: ForwardedWrite, next: &Value) -> ForwardedWrite {
    let mut body = next.clone();
    let meta = metadata_mut(&mut body);
    for field in ["resourceVersion", "uid", "creationTimestamp"] {
        meta.remove(field);
    }
    ForwardedWrite {
        verb: "create".into(),
        name: String::new(),
        content_type: Some("application/json".into()),
        body: Some(body),
        ..base
    }
}

/// A merge patch of the lease fields a holder renews ([`RENEW_FIELDS`]), as `next` has them.
fn renew_patch(before: &Value, next: &Value) -> Value {
    let mut spec = serde_json::Map::new();
    for field in RENEW_FIELDS {
        let value = next["spec"].get(field).filter(|v| !v.is_null());
        match value {
            Some(v) => spec.insert(field.into(), v.clone()),
            None if before["spec"].get(field).is_some() => spec.insert(field.into(), Value::Null),
            None => None,
        };
    }
    serde_json::json!({ "spec": spec })
}

/// `requested` with the identity of `current`: name, namespace, uid, creationTimestamp.
fn with_identity_of(current: &Value, mut requested: Value) -> Value {
    let meta = metadata_mut(&mut requested);
    for key in ["name", "namespace", "uid", "creationTimestamp"] {
        match current["metadata"].get(key) {
            Some(value) => meta.insert(key.into(), value.clone()),
            None => meta.remove(key),
        };
    }
    requested
}

fn name_of(change: &Change) -> Option<&str> {
    match change {
        Change::Create(obj) => obj["metadata"]["name"].as_str(),
        _ => None,
    }
}

fn parse(held: &StoredObject) -> Result<Value, ApiError> {
    serde_json::from_slice(&held.value)
        .map_err(|e| ApiError::internal(format!("decoding stored {}: {e}", held.key)))
}

#[cfg(test)]
mod tests;
