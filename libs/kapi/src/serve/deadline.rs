//! The time a request body may take to arrive (kube-apiserver bounds a request's read time the
//! same way): a body not read completely within it fails the handler's read, and the answer is
//! replaced by a `408` `Status` and the connection closed, so a client that sends its body a
//! byte at a time holds a connection for a bounded time only.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use apimachinery::ApiError;
use axum::body::{Body, HttpBody};
use axum::http::Version;
use axum::response::Response;
use bytes::Bytes;
use tokio::time::Sleep;

/// A request body that fails once its deadline passed before it ended.
pub(crate) struct Deadline {
    body: Body,
    sleep: Pin<Box<Sleep>>,
    timeout: Duration,
    expired: Arc<AtomicBool>,
}

/// Tells whether a request's [`Deadline`] passed.
#[derive(Clone, Debug, Default)]
pub(crate) struct Expired(Arc<AtomicBool>);

/// The error a [`Deadline`] body fails with.
#[derive(Debug, thiserror::Error)]
#[error("the request body was not read within {0:?}")]
pub(crate) struct BodyTimeout(Duration);

// === impl Deadline ===

impl Deadline {
    /// `body` with `timeout` from now; the returned flag is set when it passes.
    pub(crate) fn wrap(body: Body, timeout: Duration) -> (Body, Expired) {
        if body.is_end_stream() {
            return (body, Expired::default());
        }
        let expired = Expired::default();
        let timed = Deadline {
            body,
            sleep: Box::pin(tokio::time::sleep(timeout)),
            timeout,
            expired: Arc::clone(&expired.0),
        };
        (Body::new(timed), expired)
    }
}

impl HttpBody for Deadline {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, axum::Error>>> {
        // What already arrived is taken even after the deadline.
        if let Poll::Ready(frame) = Pin::new(&mut self.body).poll_frame(cx) {
            return Poll::Ready(frame);
        }
        if self.sleep.as_mut().poll(cx).is_pending() {
            return Poll::Pending;
        }
        self.expired.store(true, Ordering::Relaxed);
        Poll::Ready(Some(Err(axum::Error::new(BodyTimeout(self.timeout)))))
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

// === impl Expired ===

impl Expired {
    /// Whether the body's deadline passed before it ended.
    pub(crate) fn expired(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}

/// The `408` for a body not read within `timeout`; an HTTP/1 connection is closed after it.
pub(crate) fn request_timeout(timeout: Duration, version: Version) -> Response {
    let why = format!("the request body was not received within {timeout:?}");
    super::refusal(ApiError::new(408, "Timeout", why), version, true)
}
