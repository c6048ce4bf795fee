//! What the edge store makes of the cloud's answer to a forwarded write, and what the client
//! is answered. Pure logic: metamanager applies the answer ([`metamanager::Handle::write_through`]).
//!
//! The answer is stored before the client gets it (write-through), so a client reads its own
//! writes at once, and the client is answered with the object as stored: with its local
//! revision as `resourceVersion`, the only resourceVersion space lwproxy's clients see. An
//! answer that is not an object the store holds (a dry run, an Event, a subresource such as
//! `token` or `eviction`, a review) is not stored; a cloud resourceVersion it carries is
//! replaced by the local revision of the same version when held, else left out.

use apimachinery::object::meta_str;
use kapi::WriteRequest;
use metamanager::{CloudAnswer, WrittenThrough};
use objstore::StoredObject;
use serde_json::Value;

use crate::envelope::Change;

/// Where (the object's name) and what the store keeps of `body`, the cloud's answer (HTTP
/// `code`) to `change`; `None` when the answer is not stored (see the module doc).
pub(crate) fn stored_as(
    req: &WriteRequest<'_>,
    change: &Change,
    code: u16,
    body: &Value,
) -> Option<(String, CloudAnswer)> {
    let events = req.info.plural == "events";
    if req.dry_run || events || !matches!(req.subresource, None | Some("status")) {
        return None;
    }
    let name = match meta_str(body, "name") {
        "" => req.name,
        named => named,
    };
    if name.is_empty() || (!req.name.is_empty() && name != req.name) {
        return None;
    }
    let deleted = matches!(change, Change::Delete(_));
    let rv = meta_str(body, "resourceVersion");
    let answer = if body["kind"] == "Status" || rv.is_empty() {
        // A delete answered with a Status removed the object; any other write answered
        // without a version is not one the store can hold.
        deleted.then(|| CloudAnswer::Gone {
            uid: String::new(),
            resource_version: String::new(),
        })?
    } else if deleted && !still_there(body) {
        CloudAnswer::Gone {
            uid: meta_str(body, "uid").to_owned(),
            resource_version: rv.to_owned(),
        }
    } else if code == 201 {
        CloudAnswer::Created(body.clone())
    } else {
        CloudAnswer::Present(body.clone())
    };
    Some((name.to_owned(), answer))
}

/// The answer for the client once the store applied the cloud's `body`: the object as held
/// now, or for a delete that removed it, the cloud's last state at the local revision of the
/// delete.
pub(crate) fn answer(
    req: &WriteRequest<'_>,
    body: Value,
    removed: bool,
    done: &WrittenThrough,
) -> Value {
    match (&done.object, removed) {
        (Some(held), false) => as_stored(req, held).unwrap_or_else(|| at(body, done.revision)),
        _ => at(body, done.revision),
    }
}

/// `body` with the local revision of its cloud resourceVersion when `held` is that version,
/// else without a resourceVersion.
pub(crate) fn localize(body: Value, held: Option<&StoredObject>) -> Value {
    let rv = meta_str(&body, "resourceVersion");
    match held {
        Some(held) if !rv.is_empty() && held.resource_version == rv => at(body, held.revision),
        _ => without_version(body),
    }
}

/// The object as stored, with kind and apiVersion; `None` if it does not decode.
pub(crate) fn as_stored(req: &WriteRequest<'_>, stored: &StoredObject) -> Option<Value> {
    let mut obj: Value = serde_json::from_slice(&stored.value).ok()?;
    let map = obj.as_object_mut()?;
    map.insert("kind".into(), Value::String(req.info.kind.clone()));
    map.insert("apiVersion".into(), Value::String(req.info.api_version()));
    Some(obj)
}

/// Whether a delete's answer is an object still there: marked for deletion and waiting for
/// its finalizers or its grace period.
fn still_there(obj: &Value) -> bool {
    let meta = &obj["metadata"];
    let marked = !meta["deletionTimestamp"].is_null();
    let finalizers = meta["finalizers"].as_array().is_some_and(|f| !f.is_empty());
    let grace = meta["deletionGracePeriodSeconds"].as_i64().unwrap_or(0) > 0;
    marked && (finalizers || grace)
}

/// `body` at local revision `revision` (a Status has no version to set).
fn at(mut body: Value, revision: u64) -> Value {
    if body["kind"] == "Status" {
        return body;
    }
    if let Some(meta) = body.get_mut("metadata").and_then(Value::as_object_mut) {
        let rv = Value::String(revision.to_string());
        meta.insert("resourceVersion".into(), rv);
    }
    body
}

fn without_version(mut body: Value) -> Value {
    if let Some(meta) = body.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.remove("resourceVersion");
    }
    body
}

#[cfg(test)]
mod tests;
