//! The WebSocket transport's stream multiplexer: a yamux connection over the WebSocket's binary
//! messages ([`WsBytes`]), driven by a task of its own.
//!
//! The client opens the first stream, which carries the frames; the server opens the tunnel
//! streams. The server refuses (resets, with a log line) every stream the client opens after
//! the first; the client hands the server's streams to its [`TunnelAcceptor`](crate::TunnelAcceptor),
//! or resets them when nobody takes them.
//!
//! Every stream's receive window is yamux's 256 KiB and never grows (the connection's window is
//! exactly that per stream), so a tunnel whose reader stopped holds at most 256 KiB at the
//! receiver, and the other streams, the frame stream among them, go on.
//!
//! The connection lives as long as the frame stream's two halves ([`SessionHandle`]s): when both
//! are gone, or on [`Mux::close`], the driver closes it (yamux GoAway, then the WebSocket close).

use std::collections::VecDeque;
use std::future::poll_fn;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use yamux::{ConnectionError, DEFAULT_CREDIT, Mode};

use crate::LinkError;
use crate::tunnel::MAX_TUNNEL_STREAMS;
use crate::wsbytes::{Failure, WsBytes};

/// yamux's own cap on the streams of one connection, both directions together: the frame stream,
/// the tunnels, and streams already closed at one end and not yet at the other. A peer that opens
/// more ends the connection, so it is well above what either end opens.
const MAX_STREAMS: usize = 2 * MAX_TUNNEL_STREAMS;
const _: () = assert!(MAX_STREAMS > MAX_TUNNEL_STREAMS + 1);

/// A handle on the multiplexer: opens streams, closes the connection. Clonable.
#[derive(Clone)]
pub(crate) struct Mux {
    shared: Arc<Shared>,
}

/// Keeps the connection open; the frame stream's sink and stream each hold one.
pub(crate) struct SessionHandle {
    shared: Arc<Shared>,
}

/// What the driver does with the streams the peer opens.
pub(crate) enum Inbound {
    /// Server: the first is the frame stream, any later one is refused.
    FrameStream(Option<oneshot::Sender<yamux::Stream>>),
    /// Client: each goes to the tunnel acceptor.
    Tunnels(mpsc::Sender<yamux::Stream>),
}

struct Shared {
    state: Mutex<State>,
    failure: Failure,
}

type OpenReply = oneshot::Sender<Result<yamux::Stream, LinkError>>;

#[derive(Default)]
struct State {
    opens: VecDeque<OpenReply>,
    close: Option<oneshot::Sender<()>>,
    close_requested: bool,
    sessions: usize,
    ended: bool,
    driver: Option<Waker>,
}

/// Why the driver stopped driving.
enum Stop {
    /// Close the connection in order.
    Close,
    /// The connection ended (with the error, if it failed).
    Lost(Option<ConnectionError>),
}

/// yamux's settings for both ends: [`MAX_STREAMS`], and a connection window of exactly the
/// default stream window per stream, so that no stream's window grows beyond 256 KiB.
pub(crate) fn config() -> yamux::Config {
    let mut config = yamux::Config::default();
    config
        .set_max_num_streams(MAX_STREAMS)
        .set_max_connection_receive_window(Some(MAX_STREAMS * DEFAULT_CREDIT as usize));
    config
}

/// Starts the multiplexer over `bytes` in a task of its own. `close_within` bounds the orderly
/// close.
pub(crate) fn spawn(
    bytes: WsBytes,
    failure: Failure,
    mode: Mode,
    inbound: Inbound,
    close_within: Duration,
) -> (Mux, SessionHandle) {
    let shared = Arc::new(Shared {
        state: Mutex::new(State {
            sessions: 1,
            ..State::default()
        }),
        failure,
    });
    // Boxed: an async fn's argument is kept beside the local it is moved into, and the
    // connection (the WebSocket and its TLS state) is big; one idle session paid for it twice.
    let conn = Box::new(yamux::Connection::new(bytes, config(), mode));
    tokio::spawn(drive(conn, shared.clone(), inbound, close_within));
    let session = SessionHandle {
        shared: shared.clone(),
    };
    (Mux { shared }, session)
}

// === impl Mux ===

impl Mux {
    /// A new outbound stream. The peer learns of it with its first bytes.
    pub(crate) async fn open(&self) -> Result<yamux::Stream, LinkError> {
        let (tx, rx) = oneshot::channel();
        {
            let mut state = self.shared.lock();
            if state.ended {
                return Err(LinkError::ConnectionEnded);
            }
            state.opens.push_back(tx);
            state.wake_driver();
        }
        rx.await.unwrap_or(Err(LinkError::ConnectionEnded))
    }

    /// Closes the connection in order (buffered stream data first, then yamux GoAway and the
    /// WebSocket close) and waits for it until `deadline`.
    pub(crate) async fn close(&self, deadline: Instant) {
        let (tx, rx) = oneshot::channel();
        {
            let mut state = self.shared.lock();
            if state.ended {
                return;
            }
            state.close_requested = true;
            state.close = Some(tx);
            state.wake_driver();
        }
        let _ = tokio::time::timeout_at(deadline, rx).await;
    }

    /// Whether the connection has ended.
    pub(crate) fn is_ended(&self) -> bool {
        self.shared.lock().ended
    }

    /// Another handle keeping the connection open.
    pub(crate) fn session(&self) -> SessionHandle {
        self.shared.lock().sessions += 1;
        SessionHandle {
            shared: self.shared.clone(),
        }
    }
}

// === impl SessionHandle ===

impl Drop for SessionHandle {
    fn drop(&mut self) {
        let mut state = self.shared.lock();
        state.sessions -= 1;
        if state.sessions == 0 {
            state.wake_driver();
        }
    }
}

// === impl Inbound ===

impl Inbound {
    fn take(&mut self, stream: yamux::Stream) {
        match self {
            Inbound::FrameStream(first) => match first.take() {
                Some(tx) => {
                    let _ = tx.send(stream);
                }
                None => tracing::warn!(
                    stream = %stream.id(),
                    "refused a stream the client opened: it may open the frame stream only"
                ),
            },
            Inbound::Tunnels(tx) => {
                if let Err(e) = tx.try_send(stream) {
                    tracing::debug!(reason = %e, "reset a tunnel stream nobody accepts");
                }
            }
        }
    }
}

// === impl Shared ===

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The driver stopped: fail waiting opens, answer the close.
    fn finish(&self) {
        let mut state = self.lock();
        state.ended = true;
        for reply in state.opens.drain(..) {
            let _ = reply.send(Err(LinkError::ConnectionEnded));
        }
        if let Some(tx) = state.close.take() {
            let _ = tx.send(());
        }
    }
}

impl State {
    fn wake_driver(&mut self) {
        if let Some(waker) = self.driver.take() {
            waker.wake();
        }
    }
}

async fn drive(
    mut conn: Box<yamux::Connection<WsBytes>>,
    shared: Arc<Shared>,
    mut inbound: Inbound,
    close_within: Duration,
) {
    let stop = poll_fn(|cx| poll_active(&mut conn, &shared, &mut inbound, cx)).await;
    match stop {
        Stop::Close => {
            let closing = poll_fn(|cx| conn.poll_close(cx));
            match tokio::time::timeout(close_within, closing).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => tracing::debug!(error = %e, "closing the multiplexer failed"),
                Err(_) => tracing::debug!("closing the multiplexer timed out"),
            }
        }
        Stop::Lost(None) => {}
        Stop::Lost(Some(e)) => {
            tracing::debug!(error = %e, "the multiplexer failed");
            // An I/O error was kept by the byte stream already, with its real cause.
            shared.failure.set(LinkError::Mux(e));
        }
    }
    shared.finish();
}

/// Serves open requests and the peer's new streams until the connection should close or ended.
fn poll_active(
    conn: &mut yamux::Connection<WsBytes>,
    shared: &Shared,
    inbound: &mut Inbound,
    cx: &mut Context<'_>,
) -> Poll<Stop> {
    {
        let mut state = shared.lock();
        if state.close_requested || state.sessions == 0 {
            return Poll::Ready(Stop::Close);
        }
        state.driver = Some(cx.waker().clone());
    }
    loop {
        let Some(reply) = shared.lock().opens.pop_front() else {
            break;
        };
        match conn.poll_new_outbound(cx) {
            Poll::Ready(result) => {
                let _ = reply.send(result.map_err(LinkError::Mux));
            }
            Poll::Pending => {
                shared.lock().opens.push_front(reply);
                break;
            }
        }
    }
    loop {
        match conn.poll_next_inbound(cx) {
            Poll::Ready(Some(Ok(stream))) => inbound.take(stream),
            Poll::Ready(Some(Err(e))) => return Poll::Ready(Stop::Lost(Some(e))),
            Poll::Ready(None) => return Poll::Ready(Stop::Lost(None)),
            Poll::Pending => return Poll::Pending,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn yamux_accepts_the_stream_and_window_limits() {
        // yamux asserts that the connection window leaves every stream its 256 KiB.
        let _ = config();
    }
}
