//! `Status` errors with the code, reason, message and details kube-apiserver gives
//! (k8s.io/apimachinery `pkg/api/errors`).

use serde_json::{Map, Value, json};

use crate::patch::PatchError;

/// The reason kube-apiserver gives for an update against a stale `resourceVersion`; pass it as
/// `why` to [`ApiError::conflict`].
pub const OPTIMISTIC_LOCK_MSG: &str =
    "the object has been modified; please apply your changes to the latest version and try again";

/// The media types a PATCH of a built-in resource accepts.
pub const PATCH_MEDIA_TYPES: &[&str] = &[
    "application/json-patch+json",
    "application/merge-patch+json",
    "application/strategic-merge-patch+json",
];

/// The media types a create or update body may have.
pub const BODY_MEDIA_TYPES: &[&str] = &["application/json", "application/yaml"];

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

// === impl ApiError ===

impl ApiError {
    /// An error with no details.
    pub fn new(code: u16, reason: &str, message: impl Into<String>) -> ApiError {
        ApiError {
            code,
            reason: reason.to_owned(),
            message: message.into(),
            details: None,
        }
    }

    /// `pods "x" not found` (404).
    pub fn not_found(group: &str, plural: &str, name: &str) -> ApiError {
        let message = format!("{} {} not found", qualified(group, plural), go_quote(name));
        ApiError::new(404, "NotFound", message).with_details(resource_details(group, plural, name))
    }

    /// `pods "x" already exists` (409 AlreadyExists).
    pub fn already_exists(group: &str, plural: &str, name: &str) -> ApiError {
        let message = format!(
            "{} {} already exists",
            qualified(group, plural),
            go_quote(name)
        );
        ApiError::new(409, "AlreadyExists", message)
            .with_details(resource_details(group, plural, name))
    }

    /// `Operation cannot be fulfilled on pods "x": <why>` (409 Conflict). For a stale
    /// `resourceVersion`, `why` is [`OPTIMISTIC_LOCK_MSG`].
    pub fn conflict(group: &str, plural: &str, name: &str, why: &str) -> ApiError {
        let message = format!(
            "Operation cannot be fulfilled on {} {}: {why}",
            qualified(group, plural),
            go_quote(name)
        );
        ApiError::new(409, "Conflict", message).with_details(resource_details(group, plural, name))
    }

    /// `Pod "x" is invalid: <field>: <why>` (422), one cause per `(field, why)`. Several causes
    /// read `[f1: why1, f2: why2]`. The cause reason follows the text of `why`
    /// (`Required value` → `FieldValueRequired`, ..., else `FieldValueInvalid`).
    pub fn invalid(group: &str, kind: &str, name: &str, causes: &[(&str, &str)]) -> ApiError {
        let qualified_kind = qualified(group, kind);
        let errors: Vec<String> = causes.iter().map(|(f, why)| field_error(f, why)).collect();
        let message = match errors.as_slice() {
            [] => format!("{qualified_kind} {} is invalid", go_quote(name)),
            [one] => format!("{qualified_kind} {} is invalid: {one}", go_quote(name)),
            many => format!(
                "{qualified_kind} {} is invalid: [{}]",
                go_quote(name),
                many.join(", ")
            ),
        };
        let mut details = resource_details(group, kind, name);
        if !causes.is_empty() {
            let causes = causes
                .iter()
                .map(|(f, why)| invalid_cause(f, why))
                .collect();
            details.insert("causes".to_owned(), Value::Array(causes));
        }
        ApiError::new(422, "Invalid", message).with_details(details)
    }

    pub fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::new(400, "BadRequest", message)
    }

    /// `pods "x" is forbidden: User "u" cannot <verb> resource "pods" ...` (403); `why` is the
    /// part after the colon. Without a name: `pods is forbidden: <why>`.
    pub fn forbidden(group: &str, plural: &str, name: &str, why: &str) -> ApiError {
        let resource = qualified(group, plural);
        let message = if name.is_empty() {
            format!("{resource} is forbidden: {why}")
        } else {
            format!("{resource} {} is forbidden: {why}", go_quote(name))
        };
        ApiError::new(403, "Forbidden", message).with_details(resource_details(group, plural, name))
    }

    /// `Unauthorized` (401), as kube-apiserver answers a request that failed authentication.
    pub fn unauthorized() -> ApiError {
        ApiError::new(401, "Unauthorized", "Unauthorized")
    }

    /// `<verb> is not supported on resources of kind "pods"` (405 MethodNotAllowed).
    pub fn method_not_supported(verb: &str, plural: &str) -> ApiError {
        let message = format!(
            "{verb} is not supported on resources of kind {}",
            go_quote(plural)
        );
        let details = json!({ "kind": plural });
        ApiError::new(405, "MethodNotAllowed", message).with_details(details)
    }

    /// `too old resource version: X (Y)` (410 Expired), as watch and list report it.
    pub fn expired(message: impl Into<String>) -> ApiError {
        ApiError::new(410, "Expired", message)
    }

    /// `too old resource version: <requested> (<oldest>)` (410 Expired).
    pub fn too_old_resource_version(requested: u64, oldest: u64) -> ApiError {
        ApiError::expired(format!("too old resource version: {requested} ({oldest})"))
    }

    /// `Timeout: Too large resource version: N, current: M` (504 Timeout with cause
    /// `ResourceVersionTooLarge` and `retryAfterSeconds: 1`), for a replica behind the client.
    pub fn too_large_resource_version(requested: u64, current: u64) -> ApiError {
        let why = format!("Too large resource version: {requested}, current: {current}");
        let details = json!({
            "causes": [{ "reason": "ResourceVersionTooLarge", "message": why }],
            "retryAfterSeconds": 1,
        });
        ApiError::new(504, "Timeout", format!("Timeout: {why}")).with_details(details)
    }

    pub fn service_unavailable(message: impl Into<String>) -> ApiError {
        ApiError::new(503, "ServiceUnavailable", message)
    }

    /// 415 for a body of type `content_type` (`the body of the request was in an unknown
    /// format - accepted media types include: ...`), listing the patch types when
    /// `content_type` looks like a patch type, else the body types. Use
    /// [`ApiError::unsupported_media_type_accepting`] to give the list yourself.
    pub fn unsupported_media_type(content_type: &str) -> ApiError {
        let accepted = if content_type.contains("patch") {
            PATCH_MEDIA_TYPES
        } else {
            BODY_MEDIA_TYPES
        };
        ApiError::unsupported_media_type_accepting(accepted)
    }

    /// 415 naming the media types that are accepted.
    pub fn unsupported_media_type_accepting(accepted: &[&str]) -> ApiError {
        let message = format!(
            "the body of the request was in an unknown format - accepted media types include: {}",
            accepted.join(", ")
        );
        ApiError::new(415, "UnsupportedMediaType", message)
    }

    /// 406; kube-apiserver's message is `only the following media types are accepted: ...`.
    pub fn not_acceptable(message: impl Into<String>) -> ApiError {
        ApiError::new(406, "NotAcceptable", message)
    }

    /// `Internal error occurred: <message>` (500), with the message as the single cause.
    pub fn internal(message: impl Into<String>) -> ApiError {
        let message = message.into();
        let details = json!({ "causes": [{ "message": message }] });
        ApiError::new(
            500,
            "InternalError",
            format!("Internal error occurred: {message}"),
        )
        .with_details(details)
    }

    /// `Timeout: <message>` (504).
    pub fn timeout(message: impl Into<String>) -> ApiError {
        let message = message.into();
        let message = if message.starts_with("Timeout:") {
            message
        } else {
            format!("Timeout: {message}")
        };
        ApiError::new(504, "Timeout", message)
    }

    /// `Timeout: <message>` (504 Timeout) with `details.retryAfterSeconds` (left out when 0),
    /// as `NewTimeoutError` builds it. kube-apiserver answers a write that ran out of time with
    /// `request did not complete within requested timeout - <why>` and 0: the write may still
    /// complete, so a client reads before it retries.
    pub fn timeout_after(message: impl Into<String>, retry_after_seconds: u32) -> ApiError {
        let mut details = Map::new();
        if retry_after_seconds > 0 {
            details.insert("retryAfterSeconds".to_owned(), retry_after_seconds.into());
        }
        ApiError {
            details: Some(Value::Object(details)),
            ..ApiError::timeout(message)
        }
    }

    /// 429 with `retryAfterSeconds`.
    pub fn too_many_requests(message: impl Into<String>, retry_after_seconds: u32) -> ApiError {
        let details = json!({ "retryAfterSeconds": retry_after_seconds });
        ApiError::new(429, "TooManyRequests", message).with_details(details)
    }

    /// The `Status` object (`kind: Status`, `apiVersion: v1`, `status: Failure`, ...).
    pub fn to_status(&self) -> Value {
        let mut status = status_envelope("Failure");
        status.insert("message".to_owned(), Value::from(self.message.as_str()));
        status.insert("reason".to_owned(), Value::from(self.reason.as_str()));
        if let Some(details) = &self.details {
            status.insert("details".to_owned(), details.clone());
        }
        status.insert("code".to_owned(), Value::from(self.code));
        Value::Object(status)
    }

    fn with_details(mut self, details: impl Into<Value>) -> ApiError {
        self.details = Some(details.into());
        self
    }
}

impl From<PatchError> for ApiError {
    /// 415 `UnsupportedMediaType`, 400 `BadRequest`, 422 `Invalid` or 413
    /// `RequestEntityTooLarge`, with the patch error's message.
    fn from(err: PatchError) -> ApiError {
        match err {
            PatchError::Unsupported(m) => ApiError::new(415, "UnsupportedMediaType", m),
            PatchError::BadRequest(m) => ApiError::bad_request(m),
            PatchError::Invalid(m) => ApiError::new(422, "Invalid", m),
            PatchError::TooLarge(m) => ApiError::new(413, "RequestEntityTooLarge", m),
        }
    }
}

/// A `Status` with `status: Success` (e.g. the answer to deleting a namespace-less kind).
pub fn success(details: Option<Value>) -> Value {
    let mut status = status_envelope("Success");
    if let Some(details) = details {
        status.insert("details".to_owned(), details);
    }
    Value::Object(status)
}

fn status_envelope(status: &str) -> Map<String, Value> {
    let mut map = Map::new();
    map.insert("kind".to_owned(), Value::from("Status"));
    map.insert("apiVersion".to_owned(), Value::from("v1"));
    map.insert("metadata".to_owned(), Value::Object(Map::new()));
    map.insert("status".to_owned(), Value::from(status));
    map
}

/// `pods`, or `leases.coordination.k8s.io` outside the core group.
fn qualified(group: &str, name: &str) -> String {
    if group.is_empty() {
        name.to_owned()
    } else {
        format!("{name}.{group}")
    }
}

/// `details` with the non-empty ones of name, group and kind.
fn resource_details(group: &str, kind: &str, name: &str) -> Map<String, Value> {
    let mut details = Map::new();
    for (key, value) in [("name", name), ("group", group), ("kind", kind)] {
        if !value.is_empty() {
            details.insert(key.to_owned(), Value::from(value));
        }
    }
    details
}

fn field_error(field: &str, why: &str) -> String {
    if field.is_empty() {
        why.to_owned()
    } else {
        format!("{field}: {why}")
    }
}

fn invalid_cause(field: &str, why: &str) -> Value {
    let mut cause = Map::new();
    cause.insert("reason".to_owned(), Value::from(cause_reason(why)));
    cause.insert("message".to_owned(), Value::from(why));
    if !field.is_empty() {
        cause.insert("field".to_owned(), Value::from(field));
    }
    Value::Object(cause)
}

/// The `field.ErrorType` whose text `why` starts with.
fn cause_reason(why: &str) -> &'static str {
    const PREFIXES: &[(&str, &str)] = &[
        ("Required value", "FieldValueRequired"),
        ("Forbidden", "FieldValueForbidden"),
        ("Unsupported value", "FieldValueNotSupported"),
        ("Duplicate value", "FieldValueDuplicate"),
        ("Too long", "FieldValueTooLong"),
        ("Too many", "FieldValueTooMany"),
        ("Not found", "FieldValueNotFound"),
        ("Internal error", "InternalError"),
    ];
    PREFIXES
        .iter()
        .find(|(prefix, _)| why.starts_with(prefix))
        .map_or("FieldValueInvalid", |(_, reason)| reason)
}

/// Go's `%q` for the strings that occur in names and messages.
pub(crate) fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if c.is_control() => out.push_str(&format!("\\x{:02x}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests;
