//! JSON patch, JSON merge patch and strategic merge patch.
//!
//! Server-side apply (`application/apply-patch+yaml`) needs the object's field owners, so it
//! is not a patch of this module: [`crate::managedfields::apply`] does it, and [`apply`]
//! refuses it.

use serde_json::Value;

use crate::catalog::ResourceInfo;

pub(crate) mod schema;
mod strategic;

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
        PatchType::Json => json_patch(original, patch)?,
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
    Ok(patched)
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

/// RFC 6902: malformed operations are 400, operations that do not apply (a failed `test`, a
/// missing path) are 422.
fn json_patch(original: &Value, patch: &[u8]) -> Result<Value, PatchError> {
    let ops: json_patch::Patch = serde_json::from_slice(patch)
        .map_err(|e| PatchError::BadRequest(format!("invalid JSON patch: {e}")))?;
    let mut doc = original.clone();
    json_patch::patch(&mut doc, &ops.0).map_err(|e| PatchError::Invalid(e.to_string()))?;
    Ok(doc)
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
