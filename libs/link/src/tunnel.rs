//! Tunnel streams: byte streams the server end of a connection opens to the client end, beside
//! the frames and on the same connection (QUIC streams; yamux streams on WebSocket).
//!
//! The opener writes [`TUNNEL_PREAMBLE`] first, so the peer learns of the stream at once on both
//! transports (a QUIC stream is only seen by its peer with its first bytes), and the acceptor
//! checks and strips it.

use std::fmt;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use futures::FutureExt;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::sync::mpsc;
use tokio_util::compat::{Compat, FuturesAsyncReadCompatExt};

use crate::LinkError;
use crate::mux::Mux;

/// How many tunnel streams the server may have open on one connection at a time.
pub const MAX_TUNNEL_STREAMS: usize = 64;

/// The bytes the opener writes first on every tunnel stream (not part of what the stream
/// carries: the acceptor strips them).
pub const TUNNEL_PREAMBLE: &[u8; 4] = b"KET\x01";

/// A byte stream to the peer, opened by the server end of a connection. `shutdown()` ends its
/// write side (the peer reads the end of the stream and may still write back); dropping it
/// without a shutdown resets it, and dropping it after one stops reading.
pub struct TunnelStream {
    inner: TunnelInner,
    permit: Option<TunnelPermit>,
}

/// Opens [`TunnelStream`]s to the client end of a server-side connection. Clonable; stays usable
/// after [`Conn::split`](crate::Conn::split), until the connection ends.
#[derive(Clone)]
pub struct TunnelOpener {
    inner: OpenerInner,
    count: TunnelCount,
    write_timeout: Duration,
}

/// Receives the [`TunnelStream`]s the server opens, on a client-side connection.
pub struct TunnelAcceptor {
    inner: AcceptorInner,
    preamble_timeout: Duration,
}

enum TunnelInner {
    Quic {
        send: quinn::SendStream,
        recv: quinn::RecvStream,
        shut: bool,
    },
    Ws(Compat<yamux::Stream>),
}

#[derive(Clone)]
enum OpenerInner {
    Quic(quinn::Connection),
    Ws(Mux),
}

enum AcceptorInner {
    Quic(quinn::Connection),
    Ws(mpsc::Receiver<yamux::Stream>),
}

/// The number of tunnel streams open on one connection, against its limit.
#[derive(Clone)]
struct TunnelCount {
    open: Arc<AtomicUsize>,
    max: usize,
}

/// One tunnel stream's place in its [`TunnelCount`], given back on drop.
struct TunnelPermit(Arc<AtomicUsize>);

// === impl TunnelStream ===

impl TunnelStream {
    fn quic(send: quinn::SendStream, recv: quinn::RecvStream) -> TunnelStream {
        TunnelStream {
            inner: TunnelInner::Quic {
                send,
                recv,
                shut: false,
            },
            permit: None,
        }
    }

    fn ws(stream: yamux::Stream) -> TunnelStream {
        TunnelStream {
            inner: TunnelInner::Ws(stream.compat()),
            permit: None,
        }
    }

    /// Reads and checks the preamble the opener wrote.
    async fn expect_preamble(&mut self) -> Result<(), LinkError> {
        let mut got = [0; TUNNEL_PREAMBLE.len()];
        match self.read_exact(&mut got).await {
            Ok(_) if &got == TUNNEL_PREAMBLE => Ok(()),
            Ok(_) => Err(LinkError::Preamble),
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => Err(LinkError::Preamble),
            Err(e) => Err(LinkError::Io(e)),
        }
    }
}

impl AsyncRead for TunnelStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        match &mut self.inner {
            TunnelInner::Quic { recv, .. } => Pin::new(recv).poll_read(cx, buf),
            TunnelInner::Ws(stream) => Pin::new(stream).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for TunnelStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        match &mut self.inner {
            TunnelInner::Quic { send, .. } => AsyncWrite::poll_write(Pin::new(send), cx, buf),
            TunnelInner::Ws(stream) => Pin::new(stream).poll_write(cx, buf),
        }
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match &mut self.inner {
            TunnelInner::Quic { send, .. } => Pin::new(send).poll_flush(cx),
            TunnelInner::Ws(stream) => Pin::new(stream).poll_flush(cx),
        }
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match &mut self.inner {
            TunnelInner::Quic { send, shut, .. } => {
                *shut = true;
                Pin::new(send).poll_shutdown(cx)
            }
            TunnelInner::Ws(stream) => Pin::new(stream).poll_shutdown(cx),
        }
    }
}

impl Drop for TunnelStream {
    fn drop(&mut self) {
        // quinn finishes a dropped send stream; a tunnel dropped before its shutdown is cut
        // off instead, as yamux does, so the peer never takes a truncated stream for a whole one.
        if let TunnelInner::Quic {
            send, shut: false, ..
        } = &mut self.inner
        {
            let _ = send.reset(quinn::VarInt::from_u32(0));
        }
    }
}

impl fmt::Debug for TunnelStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let transport = match self.inner {
            TunnelInner::Quic { .. } => "quic",
            TunnelInner::Ws(_) => "websocket",
        };
        f.debug_struct("TunnelStream")
            .field("transport", &transport)
            .finish_non_exhaustive()
    }
}

// === impl TunnelOpener ===

impl TunnelOpener {
    pub(crate) fn quic(conn: quinn::Connection, write_timeout: Duration) -> TunnelOpener {
        TunnelOpener::new(OpenerInner::Quic(conn), write_timeout)
    }

    pub(crate) fn ws(mux: Mux, write_timeout: Duration) -> TunnelOpener {
        TunnelOpener::new(OpenerInner::Ws(mux), write_timeout)
    }

    fn new(inner: OpenerInner, write_timeout: Duration) -> TunnelOpener {
        TunnelOpener {
            inner,
            count: TunnelCount {
                open: Arc::default(),
                max: MAX_TUNNEL_STREAMS,
            },
            write_timeout,
        }
    }

    /// Opens a stream to the peer. Fails at once with [`LinkError::ConnectionEnded`] when the
    /// connection is gone and with [`LinkError::TunnelLimit`] when [`MAX_TUNNEL_STREAMS`] are
    /// open; never takes longer than the write timeout.
    pub async fn open(&self) -> Result<TunnelStream, LinkError> {
        let ended = match &self.inner {
            OpenerInner::Quic(conn) => conn.close_reason().is_some(),
            OpenerInner::Ws(mux) => mux.is_ended(),
        };
        if ended {
            return Err(LinkError::ConnectionEnded);
        }
        let permit = self.count.acquire()?;
        let after = self.write_timeout;
        let opening = async {
            let mut stream = match &self.inner {
                OpenerInner::Quic(conn) => open_quic(conn)?,
                OpenerInner::Ws(mux) => TunnelStream::ws(mux.open().await?),
            };
            stream.write_all(TUNNEL_PREAMBLE).await?;
            stream.flush().await?;
            Ok::<_, LinkError>(stream)
        };
        let mut stream = tokio::time::timeout(after, opening)
            .await
            .unwrap_or(Err(LinkError::WriteTimeout { after }))?;
        stream.permit = Some(permit);
        Ok(stream)
    }

    /// How many tunnel streams this opener has open now.
    pub fn open_streams(&self) -> usize {
        self.count.open.load(Ordering::Relaxed)
    }
}

impl fmt::Debug for TunnelOpener {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TunnelOpener")
            .field("open", &self.open_streams())
            .finish_non_exhaustive()
    }
}

/// A QUIC stream, if the peer's stream limit allows one now (quinn would wait for it).
fn open_quic(conn: &quinn::Connection) -> Result<TunnelStream, LinkError> {
    match conn.open_bi().now_or_never() {
        Some(Ok((send, recv))) => Ok(TunnelStream::quic(send, recv)),
        Some(Err(_)) => Err(LinkError::ConnectionEnded),
        None => Err(LinkError::TunnelLimit {
            max: MAX_TUNNEL_STREAMS,
        }),
    }
}

// === impl TunnelAcceptor ===

impl TunnelAcceptor {
    pub(crate) fn quic(conn: quinn::Connection, preamble_timeout: Duration) -> TunnelAcceptor {
        TunnelAcceptor {
            inner: AcceptorInner::Quic(conn),
            preamble_timeout,
        }
    }

    pub(crate) fn ws(
        streams: mpsc::Receiver<yamux::Stream>,
        preamble_timeout: Duration,
    ) -> TunnelAcceptor {
        TunnelAcceptor {
            inner: AcceptorInner::Ws(streams),
            preamble_timeout,
        }
    }

    /// The next stream the server opened; `None` once the connection has ended. A stream that
    /// does not start with [`TUNNEL_PREAMBLE`] is logged and reset.
    pub async fn accept(&mut self) -> Option<TunnelStream> {
        loop {
            let mut stream = match &mut self.inner {
                AcceptorInner::Quic(conn) => {
                    let (send, recv) = conn.accept_bi().await.ok()?;
                    TunnelStream::quic(send, recv)
                }
                AcceptorInner::Ws(streams) => TunnelStream::ws(streams.recv().await?),
            };
            let checked = tokio::time::timeout(self.preamble_timeout, stream.expect_preamble());
            match checked.await {
                Ok(Ok(())) => return Some(stream),
                Ok(Err(e)) => tracing::warn!(error = %e, "refused a tunnel stream"),
                Err(_) => tracing::warn!("refused a tunnel stream: no preamble in time"),
            }
        }
    }
}

impl Drop for TunnelAcceptor {
    /// Streams nobody will accept are refused: yamux resets them itself once their channel is
    /// gone; QUIC's are taken and dropped by a task until the connection ends (quinn would leave
    /// them waiting, and their opener with them).
    fn drop(&mut self) {
        let AcceptorInner::Quic(conn) = &self.inner else {
            return;
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let conn = conn.clone();
        runtime.spawn(async move {
            while let Ok(refused) = conn.accept_bi().await {
                drop(refused);
            }
        });
    }
}

impl fmt::Debug for TunnelAcceptor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TunnelAcceptor").finish_non_exhaustive()
    }
}

// === impl TunnelCount ===

impl TunnelCount {
    fn acquire(&self) -> Result<TunnelPermit, LinkError> {
        let max = self.max;
        self.open
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < max).then_some(n + 1)
            })
            .map_err(|_| LinkError::TunnelLimit { max })?;
        Ok(TunnelPermit(self.open.clone()))
    }
}

impl Drop for TunnelPermit {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_count_refuses_past_its_limit_and_takes_a_stream_back_on_drop() {
        let count = TunnelCount {
            open: Arc::default(),
            max: 2,
        };
        let first = count.acquire().unwrap();
        let _second = count.acquire().unwrap();
        assert!(matches!(
            count.acquire().err(),
            Some(LinkError::TunnelLimit { max: 2 })
        ));
        drop(first);
        assert!(count.acquire().is_ok());
    }
}
