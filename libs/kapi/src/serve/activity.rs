//! What one connection is doing, for its timeouts and for eviction: the requests in flight
//! (counted from the request until its response body is dropped, so a watch stays in flight
//! for as long as it streams) and the bytes read while it waits for a request.
//!
//! The timeouts follow Go's `net/http` server (kube-apiserver's): a new connection has
//! `header` to send its first request head; after a response, a connection waits up to `idle`
//! for the first byte of its next request, which must then be complete within `header`. A
//! connection with a request in flight has no deadline. HTTP/2 connections read frames that are
//! not requests (pings, window updates), so they only have `idle` between requests. hyper's own
//! `header_read_timeout` is not used: it starts when the previous response ends, which would cut
//! every keep-alive connection after `header` rather than `idle`.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, HttpBody};
use bytes::Bytes;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::{Notify, watch};
use tokio::time::Instant;

/// The first bytes an HTTP/2 client sends.
const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n";

/// The shared state of one connection.
#[derive(Debug)]
pub(crate) struct Activity {
    in_flight: watch::Sender<usize>,
    /// Requests started.
    requests: AtomicU64,
    /// Reads that returned bytes.
    reads: AtomicU64,
    /// Set while the watchdog waits for the first byte of a request.
    awaiting_read: AtomicBool,
    read: Notify,
    /// The first bytes read were the HTTP/2 preface.
    h2: AtomicBool,
    /// Nothing was read yet.
    fresh: AtomicBool,
}

/// The deadlines of [`Activity::watchdog`].
#[derive(Clone, Copy, Debug)]
pub(crate) struct Timeouts {
    pub(crate) header: Duration,
    pub(crate) idle: Duration,
}

/// One request in flight; dropped with the response body.
#[derive(Debug)]
pub(crate) struct InFlight(Arc<Activity>);

/// A response body that holds `G` (a request in flight, a client's permit) until it is
/// dropped: whatever the guard releases on drop is held for as long as the response streams.
pub(crate) struct Guarded<G> {
    body: Body,
    _guard: G,
}

/// An I/O stream that tells its [`Activity`] when bytes arrive.
pub(crate) struct Watched<I> {
    io: I,
    activity: Arc<Activity>,
}

// === impl Activity ===

impl Activity {
    pub(crate) fn new() -> Arc<Activity> {
        Arc::new(Activity {
            in_flight: watch::Sender::new(0),
            requests: AtomicU64::new(0),
            reads: AtomicU64::new(0),
            awaiting_read: AtomicBool::new(false),
            read: Notify::new(),
            h2: AtomicBool::new(false),
            fresh: AtomicBool::new(true),
        })
    }

    /// Whether a request is in flight.
    pub(crate) fn busy(&self) -> bool {
        *self.in_flight.borrow() > 0
    }

    /// Counts a request in flight until the guard is dropped.
    pub(crate) fn start(self: &Arc<Self>) -> InFlight {
        self.requests.fetch_add(1, Ordering::Relaxed);
        self.in_flight.send_modify(|n| *n += 1);
        InFlight(Arc::clone(self))
    }

    /// Returns when the connection should be closed: it waited longer than its timeouts allow
    /// with no request in flight. Never returns while a request is in flight.
    pub(crate) async fn watchdog(&self, timeouts: Timeouts) {
        let mut in_flight = self.in_flight.subscribe();
        loop {
            // The sender lives in `self`: waiting cannot fail.
            let _ = in_flight.wait_for(|n| *n == 0).await;
            let expired = if self.requests.load(Ordering::Relaxed) == 0 {
                self.until_busy(&mut in_flight, Instant::now() + timeouts.header)
                    .await
            } else {
                self.between_requests(&mut in_flight, timeouts).await
            };
            if expired {
                return;
            }
        }
    }

    /// Waits for the next request after a response: `idle` for its first byte (HTTP/1), then
    /// `header` for the rest. True when a deadline passed first.
    async fn between_requests(
        &self,
        in_flight: &mut watch::Receiver<usize>,
        timeouts: Timeouts,
    ) -> bool {
        let idle_deadline = Instant::now() + timeouts.idle;
        if self.h2.load(Ordering::Relaxed) {
            return self.until_busy(in_flight, idle_deadline).await;
        }
        let reads = self.reads.load(Ordering::SeqCst);
        let notified = self.read.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        self.awaiting_read.store(true, Ordering::SeqCst);
        if self.reads.load(Ordering::SeqCst) == reads {
            tokio::select! {
                _ = tokio::time::sleep_until(idle_deadline) => return true,
                _ = in_flight.wait_for(|n| *n > 0) => return false,
                () = notified => {}
            }
        }
        self.awaiting_read.store(false, Ordering::SeqCst);
        self.until_busy(in_flight, Instant::now() + timeouts.header)
            .await
    }

    /// True if `deadline` passes before a request is in flight.
    async fn until_busy(&self, in_flight: &mut watch::Receiver<usize>, deadline: Instant) -> bool {
        tokio::select! {
            _ = tokio::time::sleep_until(deadline) => true,
            _ = in_flight.wait_for(|n| *n > 0) => false,
        }
    }

    fn on_read(&self, bytes: &[u8]) {
        if self.fresh.swap(false, Ordering::Relaxed) {
            let n = bytes.len().min(H2_PREFACE.len());
            self.h2
                .store(bytes[..n] == H2_PREFACE[..n], Ordering::Relaxed);
        }
        self.reads.fetch_add(1, Ordering::SeqCst);
        if self.awaiting_read.load(Ordering::Relaxed)
            && self.awaiting_read.swap(false, Ordering::SeqCst)
        {
            self.read.notify_waiters();
        }
    }
}

// === impl InFlight ===

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.send_modify(|n| *n -= 1);
    }
}

// === impl Guarded ===

impl<G: Send + Unpin + 'static> Guarded<G> {
    /// `body` as a response body that holds `guard` until it ends.
    pub(crate) fn body(body: Body, guard: G) -> Body {
        Body::new(Guarded {
            body,
            _guard: guard,
        })
    }
}

impl<G: Unpin> HttpBody for Guarded<G> {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

// === impl Watched ===

impl<I> Watched<I> {
    pub(crate) fn new(io: I, activity: Arc<Activity>) -> Watched<I> {
        Watched { io, activity }
    }
}

impl<I: AsyncRead + Unpin> AsyncRead for Watched<I> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.io).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.activity.on_read(&buf.filled()[before..]);
        }
        polled
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for Watched<I> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Timeouts = Timeouts {
        header: Duration::from_secs(32),
        idle: Duration::from_secs(90),
    };

    async fn expires_after(activity: &Activity) -> Duration {
        let start = Instant::now();
        activity.watchdog(T).await;
        start.elapsed()
    }

    #[tokio::test(start_paused = true)]
    async fn a_new_connection_gets_the_header_timeout() {
        let activity = Activity::new();
        assert_eq!(expires_after(&activity).await, T.header);
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_in_flight_has_no_deadline_and_then_idle_applies() {
        let activity = Activity::new();
        let guard = activity.start();
        let dog = tokio::spawn({
            let activity = Arc::clone(&activity);
            async move { expires_after(&activity).await }
        });
        tokio::time::sleep(Duration::from_secs(1000)).await;
        assert!(!dog.is_finished(), "cut while a request was in flight");
        drop(guard);
        assert_eq!(dog.await.unwrap(), Duration::from_secs(1000) + T.idle);
    }

    #[tokio::test(start_paused = true)]
    async fn the_first_byte_of_a_next_request_starts_the_header_timeout() {
        let activity = Activity::new();
        activity.on_read(b"GET / HTTP/1.1\r\n\r\n");
        drop(activity.start());
        let dog = tokio::spawn({
            let activity = Arc::clone(&activity);
            async move { expires_after(&activity).await }
        });
        tokio::time::sleep(Duration::from_secs(10)).await;
        activity.on_read(b"G");
        assert_eq!(dog.await.unwrap(), Duration::from_secs(10) + T.header);
    }

    #[tokio::test(start_paused = true)]
    async fn http2_frames_between_requests_do_not_shorten_the_idle_timeout() {
        let activity = Activity::new();
        activity.on_read(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n");
        drop(activity.start());
        let dog = tokio::spawn({
            let activity = Arc::clone(&activity);
            async move { expires_after(&activity).await }
        });
        tokio::time::sleep(Duration::from_secs(10)).await;
        activity.on_read(b"ping");
        assert_eq!(dog.await.unwrap(), T.idle);
    }
}
