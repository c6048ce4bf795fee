//! The largest object stored: etcd's default request limit (1.5 MiB), which kube-apiserver's
//! store inherits. Every object a [`crate::local::LocalBackend`] write stores is checked here
//! once, encoded, just before it goes to the store (`Target::write`); lwproxy checks what it
//! stores offline the same way. A larger object is a 413 `RequestEntityTooLarge` naming it.

use apimachinery::{ApiError, ResourceInfo};
use serde_json::json;

/// The largest encoded object stored, in bytes (etcd's `--max-request-bytes` default).
pub const MAX_OBJECT_BYTES: usize = 1_572_864;

/// `Ok` when `encoded` (the object's stored JSON) fits [`MAX_OBJECT_BYTES`], else the 413
/// naming the object and the limit.
pub fn check_object_size(info: &ResourceInfo, name: &str, encoded: &[u8]) -> Result<(), ApiError> {
    if encoded.len() <= MAX_OBJECT_BYTES {
        return Ok(());
    }
    let what = match info.group.as_str() {
        "" => info.plural.clone(),
        group => format!("{}.{group}", info.plural),
    };
    let message = format!(
        "Request entity too large: {what} {name:?} is {} bytes, larger than the limit of {MAX_OBJECT_BYTES} bytes",
        encoded.len()
    );
    Err(ApiError {
        details: Some(json!({ "name": name, "group": info.group, "kind": info.plural })),
        ..ApiError::new(413, "RequestEntityTooLarge", message)
    })
}
