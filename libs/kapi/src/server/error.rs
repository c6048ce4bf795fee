//! Errors leave as `Status` bodies; the few `ApiError`s apimachinery has no constructor for.

use apimachinery::ApiError;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use objstore::StoreError;

use super::render;

/// An [`ApiError`] on its way out as a `Status` body with its HTTP code.
pub(crate) struct ErrorResponse(pub(crate) ApiError);

/// How long a read waits for the store to reach a resourceVersion it has not seen yet.
pub(crate) const TOO_LARGE_WAIT_SECS: u64 = 3;

impl IntoResponse for ErrorResponse {
    fn into_response(self) -> Response {
        let code = StatusCode::from_u16(self.0.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let mut resp = render::json_response(code, &self.0.to_status());
        if code == StatusCode::TOO_MANY_REQUESTS || code == StatusCode::GATEWAY_TIMEOUT {
            resp.headers_mut()
                .insert("retry-after", axum::http::HeaderValue::from_static("1"));
        }
        resp
    }
}

/// `the server could not find the requested resource` (404), for paths naming nothing.
pub(crate) fn not_found_path() -> ApiError {
    ApiError::new(
        404,
        "NotFound",
        "the server could not find the requested resource",
    )
}

/// A store failure as the client should see it: a compacted revision or a lagging watcher is
/// `410 Expired`, anything else a 500.
pub(crate) fn from_store(e: StoreError) -> ApiError {
    if e.is_expired() {
        ApiError::expired(e.to_string())
    } else {
        tracing::warn!(error = %e, "object store failure");
        ApiError::internal(format!("object store: {e}"))
    }
}

/// An invalid `ListOptions` (422), as apiserver validates list and watch parameters.
pub(crate) fn invalid_list_options(field: &str, why: &str) -> ApiError {
    ApiError::invalid("meta.k8s.io", "ListOptions", "", &[(field, why)])
}

/// `413 Request Entity Too Large`.
pub(crate) fn body_too_large(limit: usize) -> ApiError {
    ApiError::new(
        413,
        "RequestEntityTooLarge",
        format!("the request body is larger than {limit} bytes"),
    )
}
