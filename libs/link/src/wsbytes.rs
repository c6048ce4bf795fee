//! The binary messages of a WebSocket seen as one byte stream, for the stream multiplexer: each
//! write becomes a binary message, reads run through the messages' payloads in order.
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

/// Largest payload written as one message. The multiplexer writes a 12-byte header and then at
/// most its split size (16 KiB) at a time, so this is never reached in practice.
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
            failure,
        }
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
        buf[..n].copy_from_slice(&this.unread.split_to(n));
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
        if let Err(e) = ready!(Pin::new(&mut this.ws).poll_ready(cx)) {
            return Poll::Ready(Err(this.failure.fail(connection_error(e))));
        }
        let n = buf.len().min(MAX_WRITE);
        let message = Message::Binary(Bytes::copy_from_slice(&buf[..n]));
        if let Err(e) = Pin::new(&mut this.ws).start_send(message) {
            return Poll::Ready(Err(this.failure.fail(connection_error(e))));
        }
        Poll::Ready(Ok(n))
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        let result = ready!(Pin::new(&mut this.ws).poll_flush(cx));
        Poll::Ready(result.map_err(|e| this.failure.fail(connection_error(e))))
    }

    /// The WebSocket close handshake's first half: our close message, flushed.
    fn poll_close(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        match ready!(Pin::new(&mut this.ws).poll_close(cx)) {
            Ok(()) => Poll::Ready(Ok(())),
            // Closing twice, or after the peer closed: nothing left to do.
            Err(WsError::ConnectionClosed | WsError::AlreadyClosed) => Poll::Ready(Ok(())),
            Err(e) => Poll::Ready(Err(this.failure.fail(connection_error(e)))),
        }
    }
}
