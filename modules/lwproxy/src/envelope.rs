//! From a parsed REST write to the [`ForwardedWrite`] the cloud replays, and the
//! resourceVersion bookkeeping that goes with it. Pure logic: no store, no messages.
//!
//! Clients of lwproxy see the edge store's local revisions as resourceVersions, the cloud knows
//! only its own. A precondition naming the local revision of the object held is rewritten to
//! the cloud resourceVersion held beside it; one already naming the held cloud version goes
//! as is; any other value is stale, and answered with a 409 here as the API server would.

use apimachinery::patch::PatchType;
use apimachinery::status::OPTIMISTIC_LOCK_MSG;
use apimachinery::{ApiError, ForwardedWrite};
use bytes::Bytes;
use kapi::{DeleteOptions, WriteRequest};
use objstore::StoredObject;
use serde_json::{Map, Value, json};

/// What a write asks for, with its body.
#[derive(Clone, Debug)]
pub(crate) enum Change {
    Create(Value),
    Update(Value),
    Patch(PatchType, Bytes),
    Delete(DeleteOptions),
}

/// A resourceVersion precondition that names neither version of the object held.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Stale {
    pub(crate) requested: String,
}

// === impl Change ===

impl Change {
    pub(crate) fn verb(&self) -> &'static str {
        match self {
            Change::Create(_) => "create",
            Change::Update(_) => "update",
            Change::Patch(..) => "patch",
            Change::Delete(_) => "delete",
        }
    }

    /// The beehive operation the forwarded message carries.
    pub(crate) fn operation(&self) -> beehive::Operation {
        match self {
            Change::Create(_) => beehive::Operation::Insert,
            Change::Update(_) => beehive::Operation::Update,
            Change::Patch(..) => beehive::Operation::Patch,
            Change::Delete(_) => beehive::Operation::Delete,
        }
    }
}

// === impl Stale ===

impl Stale {
    /// The 409 the API server answers for this precondition of `change` on `held`.
    pub(crate) fn conflict(
        &self,
        req: &WriteRequest<'_>,
        change: &Change,
        held: &StoredObject,
    ) -> ApiError {
        let why = match change {
            Change::Delete(_) => format!(
                "Precondition failed: ResourceVersion in precondition: {}, ResourceVersion in object meta: {}",
                self.requested, held.revision
            ),
            _ => OPTIMISTIC_LOCK_MSG.to_owned(),
        };
        ApiError::conflict(&req.info.group, &req.info.plural, req.name, &why)
    }
}

/// The envelope of `change` on the object `req` names. A patch body that is not JSON is sent
/// as a JSON string; the cloud refuses it as the API server would.
pub(crate) fn envelope(req: &WriteRequest<'_>, change: &Change) -> ForwardedWrite {
    let (content_type, body) = match change {
        Change::Create(obj) | Change::Update(obj) => ("application/json", obj.clone()),
        Change::Patch(kind, patch) => (kind.content_type(), patch_body(patch)),
        Change::Delete(opts) => ("application/json", delete_options(opts)),
    };
    ForwardedWrite {
        verb: change.verb().to_owned(),
        group: req.info.group.clone(),
        version: req.info.version.clone(),
        resource: req.info.plural.clone(),
        namespace: req.namespace.to_owned(),
        name: req.name.to_owned(),
        subresource: req.subresource.map(str::to_owned),
        content_type: Some(content_type.to_owned()),
        body: Some(body),
        dry_run: req.dry_run,
    }
}

/// `DeleteOptions` as the API server reads them from a DELETE body.
pub(crate) fn delete_options(opts: &DeleteOptions) -> Value {
    let mut body = Map::new();
    body.insert("kind".into(), json!("DeleteOptions"));
    body.insert("apiVersion".into(), json!("v1"));
    if let Some(grace) = opts.grace_period_seconds {
        body.insert("gracePeriodSeconds".into(), json!(grace));
    }
    let mut preconditions = Map::new();
    if let Some(uid) = &opts.uid {
        preconditions.insert("uid".into(), json!(uid));
    }
    if let Some(rv) = &opts.resource_version {
        preconditions.insert("resourceVersion".into(), json!(rv));
    }
    if !preconditions.is_empty() {
        body.insert("preconditions".into(), Value::Object(preconditions));
    }
    if let Some(policy) = &opts.propagation_policy {
        body.insert("propagationPolicy".into(), json!(policy));
    }
    Value::Object(body)
}

/// Rewrites every resourceVersion precondition of `write` for the cloud, given the object
/// held for it (a write on an object not held goes unchanged). `alias` is an earlier local
/// revision that stands for the held object too (see [`crate::echo`]).
pub(crate) fn translate(
    write: &mut ForwardedWrite,
    held: &StoredObject,
    alias: Option<u64>,
) -> Result<(), Stale> {
    let verb = write.verb.clone();
    let kind = write
        .content_type
        .as_deref()
        .and_then(PatchType::from_content_type);
    let Some(body) = write.body.as_mut() else {
        return Ok(());
    };
    for rv in preconditions(&verb, kind, body) {
        let Some(requested) = rv.as_str().filter(|s| !s.is_empty()) else {
            continue;
        };
        *rv = Value::String(to_cloud(requested, held, alias)?);
    }
    Ok(())
}

/// The cloud resourceVersion a precondition `requested` stands for, for the object `held`
/// (known locally also as revision `alias`).
pub(crate) fn to_cloud(
    requested: &str,
    held: &StoredObject,
    alias: Option<u64>,
) -> Result<String, Stale> {
    let local = |revision: u64| requested == revision.to_string();
    if local(held.revision) || alias.is_some_and(local) {
        Ok(held.resource_version.clone())
    } else if requested == held.resource_version {
        Ok(requested.to_owned())
    } else {
        Err(Stale {
            requested: requested.to_owned(),
        })
    }
}

/// Whether `requested` (from a write applied locally) names the object held: empty (no
/// precondition), its local revision, or its cloud resourceVersion.
pub(crate) fn is_current(requested: &str, held: &StoredObject) -> bool {
    requested.is_empty() || to_cloud(requested, held, None).is_ok()
}

/// The places a body carries a resourceVersion precondition: `metadata.resourceVersion` of an
/// object or of a merge patch, the value of a JSON patch `test` of `/metadata/resourceVersion`,
/// `preconditions.resourceVersion` of `DeleteOptions`.
fn preconditions<'a>(
    verb: &str,
    kind: Option<PatchType>,
    body: &'a mut Value,
) -> Vec<&'a mut Value> {
    let at = |body: &'a mut Value, parent: &str| -> Vec<&'a mut Value> {
        body.get_mut(parent)
            .and_then(|p| p.get_mut("resourceVersion"))
            .into_iter()
            .collect()
    };
    match (verb, kind) {
        ("update", _) => at(body, "metadata"),
        ("delete", _) => at(body, "preconditions"),
        ("patch", Some(PatchType::Merge | PatchType::StrategicMerge)) => at(body, "metadata"),
        ("patch", Some(PatchType::Json)) => body
            .as_array_mut()
            .into_iter()
            .flatten()
            .filter(|op| op["op"] == "test" && op["path"] == "/metadata/resourceVersion")
            .filter_map(|op| op.get_mut("value"))
            .collect(),
        _ => Vec::new(),
    }
}

fn patch_body(patch: &[u8]) -> Value {
    serde_json::from_slice(patch)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(patch).into_owned()))
}

#[cfg(test)]
mod tests;
