//! Endless response bodies (watches) at shutdown. A watch body never ends on its own, so when
//! the server shuts down it is ended between two frames: each frame is whole event lines, so
//! an HTTP/1.1 client gets the chunked terminator (`0\r\n\r\n`) after a complete event and an
//! HTTP/2 client an END_STREAM, a normal end of stream after which it re-lists or re-watches,
//! never a connection cut inside a chunk.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use axum::body::Body;
use bytes::Bytes;
use http_body::Body as HttpBody;
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};

/// A response extension saying the body never ends on its own: [`crate::serve`] ends it at a
/// frame boundary when the server shuts down.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Endless;

/// A body that ends before its next frame once `shutdown` is cancelled.
pub(crate) struct Draining {
    body: Body,
    shutdown: Pin<Box<WaitForCancellationFutureOwned>>,
    ended: bool,
}

// === impl Draining ===

impl Draining {
    pub(crate) fn new(body: Body, shutdown: CancellationToken) -> Draining {
        Draining {
            body,
            shutdown: Box::pin(shutdown.cancelled_owned()),
            ended: false,
        }
    }
}

impl HttpBody for Draining {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, axum::Error>>> {
        // Checked before every frame, and registered while the body waits for its next one.
        if !self.ended && self.shutdown.as_mut().poll(cx).is_ready() {
            self.ended = true;
        }
        if self.ended {
            return Poll::Ready(None);
        }
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.ended || self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}
