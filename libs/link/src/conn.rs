//! The transport-independent surface: listener, incoming connection, connection and its two
//! halves. Each forwards to the WebSocket or QUIC implementation and applies the deadlines.

use std::fmt;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use wire::Frame;

use crate::{
    ClientTls, Limits, LinkError, ServerTls, Transport, TunnelAcceptor, TunnelOpener, quic, ws,
};

/// A bound server socket: a TCP listener (WebSocket) or a QUIC endpoint.
pub struct Listener {
    inner: ListenerInner,
    local_addr: SocketAddr,
    limits: Limits,
    closed: CancellationToken,
}

/// A connection accepted by a [`Listener`] whose handshakes have not run yet.
pub struct Incoming {
    inner: IncomingInner,
    remote_addr: SocketAddr,
    limits: Limits,
}

/// An established, authenticated connection.
pub struct Conn {
    transport: Transport,
    remote_addr: SocketAddr,
    peer_node: Option<String>,
    peer_cert: Option<pki::Der<'static>>,
    sink: FrameSink,
    stream: FrameStream,
    bytes: ByteCounters,
    opener: Option<TunnelOpener>,
    acceptor: Option<TunnelAcceptor>,
}

/// The sending half of a [`Conn`].
pub struct FrameSink {
    inner: SinkInner,
    limits: Limits,
    failed: bool,
    bytes: ByteCounters,
}

/// The receiving half of a [`Conn`].
pub struct FrameStream {
    inner: StreamInner,
    state: StreamState,
    bytes: ByteCounters,
}

/// Frames read from a [`FrameStream`] by a task of its own ([`FrameStream::into_channel`]).
pub struct FrameChannel {
    // Boxed: tokio's channel allocates its slots 32 at a time up front, and a frame or error is
    // up to 96 bytes. One cloudhub holds a channel per node, most of them idle.
    rx: tokio::sync::mpsc::Receiver<Box<Result<Frame, LinkError>>>,
}

/// Encoded frame bytes sent and received on one connection, readable from anywhere (the
/// halves may live in different tasks).
#[derive(Clone, Debug, Default)]
pub struct ByteCounters {
    sent: Arc<AtomicU64>,
    received: Arc<AtomicU64>,
}

impl ByteCounters {
    /// Bytes of frames queued for sending (a frame counts once fed).
    pub fn sent(&self) -> u64 {
        self.sent.load(Ordering::Relaxed)
    }

    /// Bytes of frames received.
    pub fn received(&self) -> u64 {
        self.received.load(Ordering::Relaxed)
    }
}

enum ListenerInner {
    Ws(ws::Listener),
    Quic(quic::Listener),
}

enum IncomingInner {
    Ws(ws::Incoming),
    Quic(Box<quic::Incoming>),
}

pub(crate) enum SinkInner {
    Ws(ws::Sink),
    Quic(quic::Sink),
}

pub(crate) enum StreamInner {
    Ws(ws::Stream),
    Quic(Box<quic::Stream>),
}

/// What a transport's handshakes produce.
pub(crate) struct Parts {
    pub(crate) sink: SinkInner,
    pub(crate) stream: StreamInner,
    pub(crate) tunnels: Tunnels,
    pub(crate) peer_cert: Option<pki::Der<'static>>,
}

/// The tunnel end of a connection: the server opens, the client accepts.
pub(crate) enum Tunnels {
    Opener(TunnelOpener),
    Acceptor(TunnelAcceptor),
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum StreamState {
    Open,
    Ended,
    Failed,
}

/// Dials the server at `addr` and runs the handshakes under `limits.handshake_timeout`.
pub async fn connect(
    transport: Transport,
    addr: SocketAddr,
    tls: &ClientTls,
    limits: Limits,
) -> Result<Conn, LinkError> {
    let parts = handshake(limits.handshake_timeout, async {
        match transport {
            Transport::WebSocket => ws::connect(addr, tls, limits).await,
            Transport::Quic => quic::connect(addr, tls, limits).await,
        }
    })
    .await?;
    Ok(Conn::new(transport, addr, limits, parts))
}

/// Dials QUIC connections from one shared UDP socket, so one process can open thousands of
/// them (a load generator's simulated nodes) without a socket each.
#[derive(Clone, Debug)]
pub struct QuicDialer {
    endpoint: quinn::Endpoint,
}

impl QuicDialer {
    /// A dialer whose socket is bound to `local` (port 0: any).
    pub fn bind(local: SocketAddr) -> Result<QuicDialer, LinkError> {
        Ok(QuicDialer {
            endpoint: crate::quic::client_endpoint(local)?,
        })
    }

    /// Like [`connect`] with [`Transport::Quic`], from this dialer's socket.
    pub async fn connect(
        &self,
        addr: SocketAddr,
        tls: &ClientTls,
        limits: Limits,
    ) -> Result<Conn, LinkError> {
        let dial = crate::quic::connect_on(&self.endpoint, None, addr, tls, limits);
        let parts = handshake(limits.handshake_timeout, dial).await?;
        Ok(Conn::new(Transport::Quic, addr, limits, parts))
    }
}

// === impl Listener ===

impl Listener {
    /// Binds `addr` (port 0 picks a free port). Client certificates signed by `tls.ca_pem` are
    /// required of every client.
    pub async fn bind(
        transport: Transport,
        addr: SocketAddr,
        tls: &ServerTls,
        limits: Limits,
    ) -> Result<Listener, LinkError> {
        let inner = match transport {
            Transport::WebSocket => ListenerInner::Ws(ws::Listener::bind(addr, tls).await?),
            Transport::Quic => ListenerInner::Quic(quic::Listener::bind(addr, tls)?),
        };
        let local_addr = match &inner {
            ListenerInner::Ws(l) => l.local_addr(),
            ListenerInner::Quic(l) => l.local_addr(),
        }
        .map_err(|source| LinkError::Bind { addr, source })?;
        Ok(Listener {
            inner,
            local_addr,
            limits,
            closed: CancellationToken::new(),
        })
    }

    /// The address actually bound.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    pub fn transport(&self) -> Transport {
        match self.inner {
            ListenerInner::Ws(_) => Transport::WebSocket,
            ListenerInner::Quic(_) => Transport::Quic,
        }
    }

    /// The next incoming connection. Cheap: the handshakes run in [`Incoming::establish`], so a
    /// slow client never holds up the accept loop. An error concerns one connection attempt
    /// (keep accepting), except [`LinkError::Closed`] after [`close`](Listener::close).
    pub async fn accept(&self) -> Result<Incoming, LinkError> {
        let (inner, remote_addr) = tokio::select! {
            biased;
            _ = self.closed.cancelled() => return Err(LinkError::Closed),
            accepted = self.accept_inner() => accepted?,
        };
        Ok(Incoming {
            inner,
            remote_addr,
            limits: self.limits,
        })
    }

    /// Stops accepting: pending and later `accept` calls return [`LinkError::Closed`].
    /// Established connections are not affected.
    pub fn close(&self) {
        self.closed.cancel();
        if let ListenerInner::Quic(l) = &self.inner {
            l.close();
        }
    }

    async fn accept_inner(&self) -> Result<(IncomingInner, SocketAddr), LinkError> {
        match &self.inner {
            ListenerInner::Ws(l) => {
                let (incoming, addr) = l.accept().await?;
                Ok((IncomingInner::Ws(incoming), addr))
            }
            ListenerInner::Quic(l) => {
                let (incoming, addr) = l.accept().await?;
                Ok((IncomingInner::Quic(Box::new(incoming)), addr))
            }
        }
    }
}

impl fmt::Debug for Listener {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Listener")
            .field("transport", &self.transport())
            .field("local_addr", &self.local_addr)
            .finish_non_exhaustive()
    }
}

// === impl Incoming ===

impl Incoming {
    pub fn remote_addr(&self) -> SocketAddr {
        self.remote_addr
    }

    /// Turns the connection away without a handshake, so the client fails at once and backs
    /// off (QUIC: `CONNECTION_REFUSED`; WebSocket: the TCP connection is closed).
    pub fn refuse(self) {
        match self.inner {
            IncomingInner::Ws(i) => drop(i),
            IncomingInner::Quic(i) => i.refuse(),
        }
    }

    /// Finishes the TLS handshake (checking the client certificate) and the WebSocket upgrade or
    /// QUIC stream opening, all under `limits.handshake_timeout`.
    pub async fn establish(self) -> Result<Conn, LinkError> {
        let Incoming {
            inner,
            remote_addr,
            limits,
        } = self;
        // The handshakes' futures are boxed: they are big (the WebSocket upgrade's most of all)
        // and short-lived, and the future of a session that awaits this one lives as long as the
        // session does.
        let established = match inner {
            IncomingInner::Ws(i) => {
                handshake(limits.handshake_timeout, Box::pin(i.establish(limits)))
                    .await
                    .map(|conn| (Transport::WebSocket, conn))
            }
            IncomingInner::Quic(i) => {
                handshake(limits.handshake_timeout, Box::pin(i.establish(limits)))
                    .await
                    .map(|conn| (Transport::Quic, conn))
            }
        };
        let (transport, parts) = established?;
        Ok(Conn::new(transport, remote_addr, limits, parts))
    }
}

impl fmt::Debug for Incoming {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Incoming")
            .field("remote_addr", &self.remote_addr)
            .finish_non_exhaustive()
    }
}

// === impl Conn ===

impl Conn {
    fn new(transport: Transport, remote_addr: SocketAddr, limits: Limits, parts: Parts) -> Conn {
        let Parts {
            sink,
            stream,
            tunnels,
            peer_cert,
        } = parts;
        let (opener, acceptor) = match tunnels {
            Tunnels::Opener(opener) => (Some(opener), None),
            Tunnels::Acceptor(acceptor) => (None, Some(acceptor)),
        };
        let bytes = ByteCounters::default();
        Conn {
            transport,
            remote_addr,
            peer_node: peer_cert.as_ref().and_then(pki::node_name),
            peer_cert,
            sink: FrameSink {
                inner: sink,
                limits,
                failed: false,
                bytes: bytes.clone(),
            },
            stream: FrameStream {
                inner: stream,
                state: StreamState::Open,
                bytes: bytes.clone(),
            },
            bytes,
            opener,
            acceptor,
        }
    }

    /// Opens tunnel streams to the client (server-side connections; `None` on the client
    /// side). Take it before [`split`](Conn::split): it stays usable until the connection ends.
    pub fn opener(&self) -> Option<TunnelOpener> {
        self.opener.clone()
    }

    /// Receives the tunnel streams the server opens (client-side connections: `Some` the first
    /// time, `None` after, and always `None` on the server side). Take it before
    /// [`split`](Conn::split); when nobody took it, the server's streams are reset.
    pub fn take_acceptor(&mut self) -> Option<TunnelAcceptor> {
        self.acceptor.take()
    }

    /// The node name from the peer's client certificate (server side). `None` on the client
    /// side, or when the certificate is not a node certificate.
    pub fn peer_node(&self) -> Option<&str> {
        self.peer_node.as_deref()
    }

    /// The client certificate the peer presented (server side), as rustls verified it.
    pub fn peer_certificate(&self) -> Option<&pki::Der<'static>> {
        self.peer_cert.as_ref()
    }

    pub fn remote_addr(&self) -> SocketAddr {
        self.remote_addr
    }

    pub fn transport(&self) -> Transport {
        self.transport
    }

    /// The connection's byte counters (shared with both halves).
    pub fn bytes(&self) -> ByteCounters {
        self.bytes.clone()
    }

    /// The two halves, to be driven independently (e.g. from two tasks).
    pub fn split(self) -> (FrameSink, FrameStream) {
        (self.sink, self.stream)
    }
}

impl fmt::Debug for Conn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Conn")
            .field("transport", &self.transport)
            .field("remote_addr", &self.remote_addr)
            .field("peer_node", &self.peer_node)
            .finish_non_exhaustive()
    }
}

// === impl FrameSink ===

impl FrameSink {
    /// Queues a frame. It may sit in a buffer until [`flush`](FrameSink::flush); when the buffer
    /// is full the frame is written here, under the write timeout. A frame above the frame limit
    /// is refused with [`LinkError::Oversized`] and the sink stays usable.
    pub async fn feed(&mut self, frame: &Frame) -> Result<(), LinkError> {
        self.check_open()?;
        let after = self.limits.write_timeout;
        let max_frame = self.limits.max_frame;
        let result = bounded_write(after, async {
            match &mut self.inner {
                SinkInner::Ws(s) => s.feed(frame, max_frame).await,
                SinkInner::Quic(s) => s.feed(frame, max_frame).await,
            }
        })
        .await;
        let result = result.map(|len| {
            self.bytes.sent.fetch_add(len as u64, Ordering::Relaxed);
        });
        self.settle(result)
    }

    /// Writes out every buffered frame, under the write timeout.
    pub async fn flush(&mut self) -> Result<(), LinkError> {
        self.check_open()?;
        let result = bounded_write(self.limits.write_timeout, async {
            match &mut self.inner {
                SinkInner::Ws(s) => s.flush().await,
                SinkInner::Quic(s) => s.flush().await,
            }
        })
        .await;
        self.settle(result)
    }

    /// [`feed`](FrameSink::feed) then [`flush`](FrameSink::flush).
    pub async fn send(&mut self, frame: &Frame) -> Result<(), LinkError> {
        self.feed(frame).await?;
        self.flush().await
    }

    /// Sends `Close { reason }` and then the transport's own close if the connection still
    /// works, all within the write timeout, then shuts the connection down. Buffered frames go
    /// out before the `Close`.
    pub async fn close(mut self, reason: &str) {
        let deadline = Instant::now() + self.limits.write_timeout;
        let goodbye = Frame::Close {
            reason: reason.to_string(),
        };
        if !self.failed
            && let Err(e) = self.send(&goodbye).await
        {
            tracing::debug!(error = %e, "sending the close frame failed");
        }
        let healthy = !self.failed;
        match self.inner {
            SinkInner::Ws(s) => s.shutdown(healthy, deadline).await,
            SinkInner::Quic(s) => s.shutdown(reason, healthy, deadline).await,
        }
    }

    fn check_open(&self) -> Result<(), LinkError> {
        if self.failed {
            return Err(LinkError::Closed);
        }
        Ok(())
    }

    /// After a failed write the stream may hold half a frame: nothing more may be written.
    fn settle(&mut self, result: Result<(), LinkError>) -> Result<(), LinkError> {
        if let Err(e) = &result
            && !matches!(e, LinkError::Oversized { .. })
        {
            self.failed = true;
        }
        result
    }
}

// === impl FrameStream ===

impl FrameStream {
    /// The next frame; `Ok(None)` once the peer ended the connection cleanly. Garbage, an
    /// oversized frame, a text message, TLS and I/O errors are errors; after one, every call
    /// returns [`LinkError::Closed`].
    ///
    /// Cancel-safe: a future dropped before it completes loses nothing (bytes already read stay
    /// buffered for the next call), so it may be one branch of a `select!` loop.
    pub async fn recv(&mut self) -> Result<Option<Frame>, LinkError> {
        match self.state {
            StreamState::Open => {}
            StreamState::Ended => return Ok(None),
            StreamState::Failed => return Err(LinkError::Closed),
        }
        let result = match &mut self.inner {
            StreamInner::Ws(s) => s.recv().await,
            StreamInner::Quic(s) => s.recv().await,
        };
        let result = result.map(|next| {
            next.map(|(frame, len)| {
                self.bytes.received.fetch_add(len as u64, Ordering::Relaxed);
                frame
            })
        });
        match &result {
            Ok(Some(_)) => {}
            Ok(None) => self.state = StreamState::Ended,
            Err(_) => self.state = StreamState::Failed,
        }
        result
    }

    /// Reads in a task of its own and hands frames over a channel of `capacity`, so reading goes
    /// on while the owner is busy. The channel ends after a clean end of stream, or after the
    /// first error (which it carries).
    pub fn into_channel(mut self, capacity: usize) -> FrameChannel {
        let (tx, rx) = tokio::sync::mpsc::channel(capacity.max(1));
        tokio::spawn(async move {
            loop {
                // Stop as soon as the session dropped its end, so the connection closes with it.
                let next = tokio::select! {
                    _ = tx.closed() => return,
                    next = self.recv() => next,
                };
                let item = match next {
                    Ok(Some(frame)) => Ok(frame),
                    Ok(None) => return,
                    Err(e) => Err(e),
                };
                let failed = item.is_err();
                if tx.send(Box::new(item)).await.is_err() || failed {
                    return;
                }
            }
        });
        FrameChannel { rx }
    }
}

// === impl FrameChannel ===

impl FrameChannel {
    /// The next frame, or the error that ended the stream; `None` once it ended. Cancel-safe.
    pub async fn recv(&mut self) -> Option<Result<Frame, LinkError>> {
        self.rx.recv().await.map(|item| *item)
    }
}

impl fmt::Debug for FrameChannel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FrameChannel").finish_non_exhaustive()
    }
}

async fn handshake<T>(
    after: Duration,
    fut: impl Future<Output = Result<T, LinkError>>,
) -> Result<T, LinkError> {
    tokio::time::timeout(after, fut)
        .await
        .unwrap_or(Err(LinkError::HandshakeTimeout { after }))
}

async fn bounded_write<T>(
    after: Duration,
    fut: impl Future<Output = Result<T, LinkError>>,
) -> Result<T, LinkError> {
    tokio::time::timeout(after, fut)
        .await
        .unwrap_or(Err(LinkError::WriteTimeout { after }))
}
