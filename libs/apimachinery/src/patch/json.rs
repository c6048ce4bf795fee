//! RFC 6902 JSON patch, applied with kube-apiserver's bounds: at most
//! [`MAX_JSON_PATCH_OPERATIONS`] operations, and a document that may not grow past
//! [`MAX_PATCHED_BYTES`] while the operations apply (the CVE-2019-1002100 fix: a few `copy`
//! operations doubling a value would otherwise make gigabytes out of a small request).
//!
//! The growth is counted before each operation, from what it inserts: the value of an `add`
//! or `replace`, the value a `copy` duplicates. Removals are not subtracted, so the count is an
//! upper bound of the document's size, and measuring costs at most the bytes it admits.

use json_patch::PatchOperation;
use serde_json::Value;

use super::{MAX_JSON_PATCH_OPERATIONS, MAX_PATCHED_BYTES, PatchError, encoded_len, too_large};

/// Applies the JSON patch `patch` (raw body) to a copy of `original`. Malformed operations are
/// 400, too many of them or too much growth 413, operations that do not apply (a failed
/// `test`, a missing path) 422.
pub(super) fn apply(original: &Value, patch: &[u8]) -> Result<Value, PatchError> {
    let ops: json_patch::Patch = serde_json::from_slice(patch)
        .map_err(|e| PatchError::BadRequest(format!("invalid JSON patch: {e}")))?;
    let ops = ops.0;
    if ops.len() > MAX_JSON_PATCH_OPERATIONS {
        return Err(PatchError::TooLarge(format!(
            "The allowed number of operations in a JSON patch is {MAX_JSON_PATCH_OPERATIONS}, got {}",
            ops.len()
        )));
    }
    let mut doc = original.clone();
    let mut size = encoded_len(&doc);
    for (index, op) in ops.iter().enumerate() {
        size = size.saturating_add(growth(&doc, op));
        if size > MAX_PATCHED_BYTES {
            return Err(too_large(&format!(
                "JSON patch operation {index} ({}) would grow the object past {MAX_PATCHED_BYTES} bytes",
                name(op)
            )));
        }
        if absent_tested_null(&doc, op) {
            continue;
        }
        // One operation at a time, on a copy: a failure leaves nothing to undo.
        json_patch::patch_unsafe(&mut doc, std::slice::from_ref(op)).map_err(|e| {
            PatchError::Invalid(format!(
                "operation '/{index}' failed at path '{}': {}",
                e.path, e.kind
            ))
        })?;
    }
    Ok(doc)
}

/// Whether `op` tests that a member missing from an object that exists is `null`: it passes,
/// as in kube-apiserver (a missing key reads as null; kube-runtime's finalizer helper sends
/// `{"op": "test", "path": "/metadata/finalizers", "value": null}` to an object without any).
fn absent_tested_null(doc: &Value, op: &PatchOperation) -> bool {
    let PatchOperation::Test(test) = op else {
        return false;
    };
    if !test.value.is_null() || doc.pointer(test.path.as_str()).is_some() {
        return false;
    }
    let path = test.path.as_str();
    let parent = path.rfind('/').map(|at| &path[..at]);
    parent.is_some_and(|p| doc.pointer(p).is_some_and(Value::is_object))
}

/// The most bytes `op` can add to `doc`'s encoding (a missing `from` adds nothing: the
/// operation fails).
fn growth(doc: &Value, op: &PatchOperation) -> usize {
    let inserted = match op {
        PatchOperation::Add(op) => Some((&op.value, op.path.as_str())),
        PatchOperation::Replace(op) => Some((&op.value, op.path.as_str())),
        PatchOperation::Copy(op) => doc.pointer(op.from.as_str()).map(|v| (v, op.path.as_str())),
        PatchOperation::Move(op) => Some((&Value::Null, op.path.as_str())),
        PatchOperation::Remove(_) | PatchOperation::Test(_) => None,
    };
    // The value, its key (at most the path's last segment) and the separators.
    inserted.map_or(0, |(value, path)| encoded_len(value) + path.len() + 4)
}

fn name(op: &PatchOperation) -> &'static str {
    match op {
        PatchOperation::Add(_) => "add",
        PatchOperation::Remove(_) => "remove",
        PatchOperation::Replace(_) => "replace",
        PatchOperation::Move(_) => "move",
        PatchOperation::Copy(_) => "copy",
        PatchOperation::Test(_) => "test",
    }
}

#[cfg(test)]
mod tests;
