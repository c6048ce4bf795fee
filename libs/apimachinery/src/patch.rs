//! JSON patch, JSON merge patch and strategic merge patch.
//!
//! Every patched object is bounded: a JSON patch has at most [`MAX_JSON_PATCH_OPERATIONS`]
//! operations and may not grow the object past [`MAX_PATCHED_BYTES`] while it applies, and
//! the result of any patch type is refused past that size (413). A merge patch can only add
//! what its body holds, so its growth is bounded by the request body already; the object store
//! refuses anything past its own, smaller, object limit when it is written.
//!
//! Server-side apply (`application/apply-patch+yaml`) needs the object's field owners, so it
//! is not a patch of this module: [`crate::managedfields::apply`] does it, and [`apply`]
//! refuses it.

use serde_json::Value;

use crate::catalog::ResourceInfo;

mod json;
pub(crate) mod schema;
mod strategic;

/// The most operations a JSON patch may hold (kube-apiserver's `maxJSONPatchOperations`).
pub const MAX_JSON_PATCH_OPERATIONS: usize = 10_000;

/// The largest a patched object may become, in encoded JSON bytes, while a patch applies and
/// after: kube-apiserver's request body limit (3 MiB), which also bounds what its JSON patch
/// `copy` operations may accumulate.
pub const MAX_PATCHED_BYTES: usize = 3 * 1024 * 1024;

/// The patch types, by request content type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PatchType {
    /// `application/json-patch+json` (RFC 6902).
    Json,
    /// `application/merge-patch+json` (RFC 7386).
    Merge,
    /// `application/strategic-merge-patch+json`.
    StrategicMerge,
    /// `application/apply-patch+yaml` (server-side apply).
    Apply,
}

/// A patch could not be applied.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PatchError {
    /// The patch type is not supported for this resource (HTTP 415).
    #[error("{0}")]
    Unsupported(String),
    /// The patch body is not a valid patch (HTTP 400).
    #[error("{0}")]
    BadRequest(String),
    /// The patch is valid but cannot be applied to this object (HTTP 422).
    #[error("{0}")]
    Invalid(String),
    /// The patch has too many operations, or would make the object too large (HTTP 413).
    #[error("{0}")]
    TooLarge(String),
}

// === impl PatchType ===

impl PatchType {
    /// From a `Content-Type` header (parameters ignored).
    pub fn from_content_type(content_type: &str) -> Option<PatchType> {
        let media_type = content_type.split(';').next()?.trim().to_ascii_lowercase();
        match media_type.as_str() {
            "application/json-patch+json" => Some(PatchType::Json),
            "application/merge-patch+json" => Some(PatchType::Merge),
            "application/strategic-merge-patch+json" => Some(PatchType::StrategicMerge),
            "application/apply-patch+yaml" => Some(PatchType::Apply),
            _ => None,
        }
    }

    pub fn content_type(self) -> &'static str {
        match self {
            PatchType::Json => "application/json-patch+json",
            PatchType::Merge => "application/merge-patch+json",
            PatchType::StrategicMerge => "application/strategic-merge-patch+json",
            PatchType::Apply => "application/apply-patch+yaml",
        }
    }

    /// The patch types [`apply`] accepts for this resource: JSON and merge patches always,
    /// strategic merge patches for built-in resources.
    pub fn supported(info: &ResourceInfo) -> &'static [PatchType] {
        if info.custom {
            &[PatchType::Json, PatchType::Merge]
        } else {
            &[PatchType::Json, PatchType::Merge, PatchType::StrategicMerge]
        }
    }
}

/// Applies `patch` (raw body) of type `kind` to `original`. Strategic merge uses the merge
/// keys and patch strategies of the built-in kinds (Pod, Node, Service, ...); it is refused with
/// [`PatchError::Unsupported`] for custom resources, as kube-apiserver does. Server-side apply
/// is refused here: it goes through [`crate::managedfields::apply`].
pub fn apply(
    info: &ResourceInfo,
    kind: PatchType,
    original: &Value,
    patch: &[u8],
) -> Result<Value, PatchError> {
    if !PatchType::supported(info).contains(&kind) {
        return Err(unsupported(info));
    }
    let patched = match kind {
        PatchType::Json => json::apply(original, patch)?,
        PatchType::Merge => merge_patch(original, patch)?,
        PatchType::StrategicMerge => {
            let schema = schema::Schema::for_resource(info);
            strategic::apply(&schema, original, &decode_object(patch)?)?
        }
        PatchType::Apply => return Err(unsupported(info)),
    };
    if !patched.is_object() {
        return Err(PatchError::Invalid(
            "the patched object must be a JSON object".to_owned(),
        ));
    }
    check_size(&patched)?;
    Ok(patched)
}

/// Refuses an object whose JSON encoding is larger than [`MAX_PATCHED_BYTES`] (413), for
/// what a patch or a server-side apply made.
pub fn check_size(obj: &Value) -> Result<(), PatchError> {
    let size = encoded_len(obj);
    if size > MAX_PATCHED_BYTES {
        return Err(too_large(&format!("the patched object is {size} bytes")));
    }
    Ok(())
}

/// The length of `value`'s compact JSON encoding, counted without building it.
pub fn encoded_len(value: &Value) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 = self.0.saturating_add(buf.len());
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    // Writing a `Value` to a sink that never fails cannot fail.
    let _ = serde_json::to_writer(&mut count, value);
    count.0
}

/// kube-apiserver's `RequestEntityTooLarge` wording, with what was too large.
fn too_large(what: &str) -> PatchError {
    PatchError::TooLarge(format!(
        "Request entity too large: {what}, the limit is {MAX_PATCHED_BYTES} bytes"
    ))
}

/// kube-apiserver's 415 message, listing what this resource accepts.
fn unsupported(info: &ResourceInfo) -> PatchError {
    let accepted: Vec<&str> = PatchType::supported(info)
        .iter()
        .map(|t| t.content_type())
        .collect();
    PatchError::Unsupported(format!(
        "the body of the request was in an unknown format - accepted media types include: {}",
        accepted.join(", ")
    ))
}

/// RFC 7386: objects merge recursively, `null` deletes, everything else replaces.
fn merge_patch(original: &Value, patch: &[u8]) -> Result<Value, PatchError> {
    let patch = decode_object(patch)?;
    let mut doc = original.clone();
    json_patch::merge(&mut doc, &patch);
    Ok(doc)
}

fn decode_object(patch: &[u8]) -> Result<Value, PatchError> {
    let value: Value = serde_json::from_slice(patch)
        .map_err(|e| PatchError::BadRequest(format!("invalid JSON in patch body: {e}")))?;
    if !value.is_object() {
        return Err(PatchError::BadRequest(
            "the patch body must be a JSON object".to_owned(),
        ));
    }
    Ok(value)
}

#[cfg(test)]
mod tests;
