//! `Status` errors with the code and reason kube-apiserver gives.

use serde_json::Value;

/// An API error, turned into a `Status` body.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("{message}")]
pub struct ApiError {
    /// HTTP status code.
    pub code: u16,
    /// `NotFound`, `AlreadyExists`, `Conflict`, `Invalid`, `BadRequest`, `Forbidden`,
    /// `Unauthorized`, `MethodNotAllowed`, `Expired`, `Gone`, `ServiceUnavailable`,
    /// `UnsupportedMediaType`, `NotAcceptable`, `InternalError`, `Timeout`, `TooManyRequests`.
    pub reason: String,
    pub message: String,
    /// `details` (name, group, kind, causes), if any.
    pub details: Option<Value>,
}

impl ApiError {
    /// `pods "x" not found` (404).
    pub fn not_found(group: &str, plural: &str, name: &str) -> ApiError {
        let _ = (group, plural, name);
        todo!()
    }
    /// `pods "x" already exists` (409 AlreadyExists).
    pub fn already_exists(group: &str, plural: &str, name: &str) -> ApiError {
        let _ = (group, plural, name);
        todo!()
    }
    /// `Operation cannot be fulfilled on pods "x": <why>` (409 Conflict).
    pub fn conflict(group: &str, plural: &str, name: &str, why: &str) -> ApiError {
        let _ = (group, plural, name, why);
        todo!()
    }
    /// `Pod "x" is invalid: <field>: <why>` (422), one cause per `(field, why)`.
    pub fn invalid(group: &str, kind: &str, name: &str, causes: &[(&str, &str)]) -> ApiError {
        let _ = (group, kind, name, causes);
        todo!()
    }
    pub fn bad_request(message: impl Into<String>) -> ApiError {
        let _ = message.into();
        todo!()
    }
    /// `pods "x" is forbidden: User "u" cannot <verb> resource "pods" ...` (403).
    pub fn forbidden(group: &str, plural: &str, name: &str, why: &str) -> ApiError {
        let _ = (group, plural, name, why);
        todo!()
    }
    pub fn unauthorized() -> ApiError {
        todo!()
    }
    pub fn method_not_supported(verb: &str, plural: &str) -> ApiError {
        let _ = (verb, plural);
        todo!()
    }
    /// `too old resource version: X (Y)` (410 Expired), as watch and list report it.
    pub fn expired(message: impl Into<String>) -> ApiError {
        let _ = message.into();
        todo!()
    }
    pub fn service_unavailable(message: impl Into<String>) -> ApiError {
        let _ = message.into();
        todo!()
    }
    pub fn unsupported_media_type(content_type: &str) -> ApiError {
        let _ = content_type;
        todo!()
    }
    pub fn not_acceptable(message: impl Into<String>) -> ApiError {
        let _ = message.into();
        todo!()
    }
    pub fn internal(message: impl Into<String>) -> ApiError {
        let _ = message.into();
        todo!()
    }
    pub fn timeout(message: impl Into<String>) -> ApiError {
        let _ = message.into();
        todo!()
    }
    /// The `Status` object (`kind: Status`, `apiVersion: v1`, `status: Failure`, ...).
    pub fn to_status(&self) -> Value {
        todo!()
    }
}

/// A `Status` with `status: Success` (e.g. the answer to deleting a namespace-less kind).
pub fn success(details: Option<Value>) -> Value {
    let _ = details;
    todo!()
}
