//! JSON patch, JSON merge patch and strategic merge patch.

use serde_json::Value;

use crate::catalog::ResourceInfo;

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

impl PatchType {
    /// From a `Content-Type` header (parameters ignored).
    pub fn from_content_type(content_type: &str) -> Option<PatchType> {
        let _ = content_type;
        todo!()
    }

    pub fn content_type(self) -> &'static str {
        todo!()
    }
}

/// Applies `patch` (raw body) of type `kind` to `original`. Strategic merge uses the merge
/// keys and patch strategies of the built-in kinds (Pod, Node, Service, ...); it is refused with
/// [`PatchError::Unsupported`] for custom resources, as kube-apiserver does.
pub fn apply(
    info: &ResourceInfo,
    kind: PatchType,
    original: &Value,
    patch: &[u8],
) -> Result<Value, PatchError> {
    let _ = (info, kind, original, patch);
    todo!()
}
