//! The binary messages of a WebSocket seen as one byte stream, for the stream multiplexer: what
//! is written between two flushes becomes one binary message (yamux writes a frame's header and
//! body apart and flushes after each frame), reads run through the messages' payloads in order.
//!
//! Text messages end the byte stream with an error (the link never sends text); pings are
//! answered by tungstenite itself; a close message or the end of the connection is the end of
//! the byte stream. The first error is also kept in the [`Failure`] slot, so the frame reader
//! reports what really went wrong instead of the multiplexer's "connection closed".

use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, ready};

use futures::{AsyncRead, AsyncWrite, Sink, Stream};
use tokio_tungstenite::tungstenite::{Bytes, Error as WsError, Message};

use crate::LinkError;
use crate::ws::{WsStream, connection_error};

/// Largest payload sent as one message. The multiplexer flushes after each frame, a 12-byte
/// header and at most its split size (16 KiB), so this is rarely reached.
pub(crate) const MAX_WRITE: usize = 64 * 1024;

/// Where the first error of a connection is kept, shared by the byte stream, the multiplexer
/// driver and the frame reader.
#[derive(Clone, Default)]
pub(crate) struct Failure(Arc<Mutex<Option<LinkError>>>);

/// The byte stream over a WebSocket.
pub(crate) struct WsBytes {
    ws: WsStream,
    /// The part of the last binary message not read yet.
    unread: Bytes,
    /// Bytes written since the last message was sent (no allocation while idle).
    unsent: Vec<u8>,
    failure: Failure,
}

// === impl Failure ===

impl Failure {
    /// Keeps `e` unless an error is kept already.
    pub(crate) fn set(&self, e: LinkError) {
        let mut slot = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if slot.is_none() {
            *slot = Some(e);
        }
    }

    /// Takes the kept error, if any.
    pub(crate) fn take(&self) -> Option<LinkError> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).take()
    }

    /// Keeps `e` and returns an I/O error that says the same, for the multiplexer.
    fn fail(&self, e: LinkError) -> io::Error {
        let err = io::Error::other(e.to_string());
        self.set(e);
        err
    }
}

// === impl WsBytes ===

impl WsBytes {
    pub(crate) fn new(ws: WsStream, failure: Failure) -> WsBytes {
        WsBytes {
            ws,
            unread: Bytes::new(),
            unsent: Vec::new(),
            failure,
        }
    }

    /// Hands the unsent bytes to the WebSocket as one binary message.
    fn poll_send(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.unsent.is_empty() {
            return Poll::Ready(Ok(()));
        }
        if let Err(e) = ready!(Pin::new(&mut self.ws).poll_ready(cx)) {
            return Poll::Ready(Err(self.failure.fail(connection_error(e))));
        }
        let message = Message::Binary(Bytes::from(std::mem::take(&mut self.unsent)));
        if let Err(e) = Pin::new(&mut self.ws).start_send(message) {
            return Poll::Ready(Err(self.failure.fail(connection_error(e))));
        }
        Poll::Ready(Ok(()))
    }
}

impl AsyncRead for WsBytes {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut [u8],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        while this.unread.is_empty() {
            let message = match ready!(Pin::new(&mut this.ws).poll_next(cx)) {
                None => return Poll::Ready(Ok(0)),
                Some(Ok(message)) => message,
                Some(Err(e)) => return Poll::Ready(Err(this.failure.fail(connection_error(e)))),
            };
            match message {
                Message::Binary(bytes) => this.unread = bytes,
                Message::Text(_) => {
                    let e = LinkError::UnexpectedMessage { kind: "text" };
                    return Poll::Ready(Err(this.failure.fail(e)));
                }
                Message::Close(_) => return Poll::Ready(Ok(0)),
                Message::Ping(_) | Message::Pong(_) | Message::Frame(_) => {}
            }
        }
        let n = buf.len().min(this.unread.len());
        buf[..n].copy_from_slice(&this.unread[..n]);
        if n == this.unread.len() {
            // Even empty, the message's bytes keep the WebSocket's read buffer they were cut
            // from, and an idle connection would hold a second one.
            this.unread = Bytes::new();
        } else {
            this.unread = this.unread.slice(n..);
        }
        Poll::Ready(Ok(n))
    }
}

impl AsyncWrite for WsBytes {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        if this.unsent.len() >= MAX_WRITE {
            ready!(this.poll_send(cx))?;
        }
        let n = buf.len().min(MAX_WRITE - this.unsent.len());
        this.unsent.extend_from_slice(&buf[..n]);
        Poll::Ready(Ok(n))
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        ready!(this.poll_send(cx))?;
        let result = ready!(Pin::new(&mut this.ws).poll_flush(cx));
        Poll::Ready(result.map_err(|e| this.failure.fail(connection_error(e))))
    }

    /// The WebSocket close handshake's first half: our close message, flushed.
    fn poll_close(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        ready!(this.poll_send(cx))?;
        match ready!(Pin::new(&mut this.ws).poll_close(cx)) {
            Ok(()) => Poll::Ready(Ok(())),
            // Closing twice, or after the peer closed: nothing left to do.
            Err(WsError::ConnectionClosed | WsError::AlreadyClosed) => Poll::Ready(Ok(())),
            Err(e) => Poll::Ready(Err(this.failure.fail(connection_error(e)))),
        }
    }
}
