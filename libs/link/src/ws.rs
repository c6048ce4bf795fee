//! WebSocket over TLS over TCP, multiplexed by yamux ([`crate::mux`]): the frames travel on the
//! first stream, opened by the client, length-prefixed as on QUIC after [`QUIC_PREAMBLE`] each
//! way; the server opens tunnel streams beside it.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;

use futures::io::{ReadHalf, WriteHalf};
use futures::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use tokio_rustls::{TlsAcceptor, TlsConnector, TlsStream};
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::error::{CapacityError, Error as WsError};
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use wire::{Frame, FrameReader};

use crate::conn::{Parts, SinkInner, StreamInner, Tunnels};
use crate::mux::{self, Inbound, Mux, SessionHandle};
use crate::quic::append_prefixed;
use crate::wsbytes::{self, Failure, WsBytes};
use crate::{
    ClientTls, Limits, LinkError, MAX_TUNNEL_STREAMS, QUIC_PREAMBLE, ServerTls, TunnelAcceptor,
    TunnelOpener,
};

/// The path the client asks for in the upgrade request (the server accepts any).
const PATH: &str = "/kubeedge/link";

/// The target size of the write buffer. Kept small: cloudhub holds one per node. 8 KiB rather
/// than 32 took an idle session from 50.3 to 26.0 KiB, for about a tenth of the throughput
/// (still 130,000 acked messages a second; see BENCHMARKS.md).
const WRITE_BUFFER: usize = 8 * 1024;

/// Bytes read from the socket at a time; the read buffer is allocated whole at the upgrade. 4 KiB
/// rather than 8 pays for the multiplexer's own state (an idle session: 31.2 KiB with 8 KiB and
/// the multiplexer, 28.2 KiB before it) at no throughput cost measured: the multiplexer's
/// messages are at most 16 KiB and most are far smaller.
const READ_BUFFER: usize = 4 * 1024;

/// Largest WebSocket message accepted: the multiplexer's writes are far smaller
/// ([`wsbytes::MAX_WRITE`] at most); the frame limit applies to the frames, from their length
/// prefix, on the frame stream.
const MAX_MESSAGE: usize = wsbytes::MAX_WRITE;

/// Buffered frame bytes after which `feed` writes them out.
const FLUSH_AT: usize = 64 * 1024;

/// A send buffer larger than this is released after the flush.
const KEEP_BUFFER: usize = 4 * 1024;

/// Bytes taken from the frame stream at a time (on the stack, during one poll).
const READ_CHUNK: usize = 16 * 1024;

pub(crate) type WsStream = WebSocketStream<TlsStream<TcpStream>>;

pub(crate) struct Listener {
    tcp: TcpListener,
    acceptor: TlsAcceptor,
}

pub(crate) struct Incoming {
    tcp: TcpStream,
    acceptor: TlsAcceptor,
}

pub(crate) struct Sink {
    send: WriteHalf<yamux::Stream>,
    buf: Vec<u8>,
    mux: Mux,
    _session: SessionHandle,
}

pub(crate) struct Stream {
    recv: ReadHalf<yamux::Stream>,
    reader: FrameReader,
    /// Bytes read and not yet accounted to a frame.
    read: usize,
    failure: Failure,
    _session: SessionHandle,
}

/// Dials `addr`: TCP, TLS (presenting the node certificate), the WebSocket upgrade, then the
/// frame stream.
pub(crate) async fn connect(
    addr: SocketAddr,
    tls: &ClientTls,
    limits: Limits,
) -> Result<Parts, LinkError> {
    let identity = Some((tls.cert_pem.as_str(), tls.key_pem.as_str()));
    let config = pki::client_config(&tls.ca_pem, identity, &[])?;
    let name = ServerName::try_from(tls.server_name.clone())
        .map_err(|_| LinkError::InvalidServerName(tls.server_name.clone()))?;
    let tcp = TcpStream::connect(addr)
        .await
        .map_err(|source| LinkError::Connect { addr, source })?;
    tcp.set_nodelay(true)?;
    let stream = TlsConnector::from(Arc::new(config))
        .connect(name, tcp)
        .await
        .map_err(LinkError::Tls)?;
    let url = format!("wss://{}{PATH}", authority(&tls.server_name, addr.port()));
    let (ws, _response) = tokio_tungstenite::client_async_with_config(
        url,
        TlsStream::Client(stream),
        Some(ws_config()),
    )
    .await
    .map_err(handshake_error)?;
    let failure = Failure::default();
    let (tunnels_tx, tunnels_rx) = mpsc::channel(MAX_TUNNEL_STREAMS);
    let (mux, session) = mux::spawn(
        WsBytes::new(ws, failure.clone()),
        failure.clone(),
        yamux::Mode::Client,
        Inbound::Tunnels(tunnels_tx),
        limits.write_timeout,
    );
    let mut frames = mux.open().await?;
    frames.write_all(QUIC_PREAMBLE).await?;
    frames.flush().await?;
    read_preamble(&mut frames, &failure).await?;
    let acceptor = TunnelAcceptor::ws(tunnels_rx, limits.handshake_timeout);
    Ok(parts(
        frames,
        mux,
        session,
        failure,
        limits,
        Tunnels::Acceptor(acceptor),
        None,
    ))
}

// === impl Listener ===

impl Listener {
    pub(crate) async fn bind(addr: SocketAddr, tls: &ServerTls) -> Result<Listener, LinkError> {
        let config = pki::server_config(Some(&tls.ca_pem), &tls.cert_pem, &tls.key_pem, &[])?;
        let tcp = TcpListener::bind(addr)
            .await
            .map_err(|source| LinkError::Bind { addr, source })?;
        Ok(Listener {
            tcp,
            acceptor: TlsAcceptor::from(Arc::new(config)),
        })
    }

    pub(crate) fn local_addr(&self) -> io::Result<SocketAddr> {
        self.tcp.local_addr()
    }

    pub(crate) async fn accept(&self) -> Result<(Incoming, SocketAddr), LinkError> {
        let (tcp, addr) = self.tcp.accept().await?;
        tcp.set_nodelay(true)?;
        let incoming = Incoming {
            tcp,
            acceptor: self.acceptor.clone(),
        };
        Ok((incoming, addr))
    }
}

// === impl Incoming ===

impl Incoming {
    /// TLS (the client certificate is checked here), the WebSocket upgrade, then the frame
    /// stream the client opens.
    pub(crate) async fn establish(self, limits: Limits) -> Result<Parts, LinkError> {
        let stream = self
            .acceptor
            .accept(self.tcp)
            .await
            .map_err(LinkError::Tls)?;
        let peer_cert = stream
            .get_ref()
            .1
            .peer_certificates()
            .and_then(|chain| chain.first())
            .map(|leaf| leaf.clone().into_owned());
        let ws = tokio_tungstenite::accept_async_with_config(
            TlsStream::Server(stream),
            Some(ws_config()),
        )
        .await
        .map_err(handshake_error)?;
        let failure = Failure::default();
        let (first_tx, first_rx) = oneshot::channel();
        let (mux, session) = mux::spawn(
            WsBytes::new(ws, failure.clone()),
            failure.clone(),
            yamux::Mode::Server,
            Inbound::FrameStream(Some(first_tx)),
            limits.write_timeout,
        );
        let Ok(mut frames) = first_rx.await else {
            return Err(failure.take().unwrap_or(LinkError::Closed));
        };
        read_preamble(&mut frames, &failure).await?;
        frames.write_all(QUIC_PREAMBLE).await?;
        frames.flush().await?;
        let opener = TunnelOpener::ws(mux.clone(), limits.write_timeout);
        Ok(parts(
            frames,
            mux,
            session,
            failure,
            limits,
            Tunnels::Opener(opener),
            peer_cert,
        ))
    }
}

// === impl Sink ===

impl Sink {
    /// Queues one frame; returns its encoded size, length prefix included.
    pub(crate) async fn feed(
        &mut self,
        frame: &Frame,
        max_frame: usize,
    ) -> Result<usize, LinkError> {
        let before = self.buf.len();
        append_prefixed(&mut self.buf, frame, max_frame)?;
        let len = self.buf.len() - before;
        if self.buf.len() >= FLUSH_AT {
            self.flush().await?;
        }
        Ok(len)
    }

    pub(crate) async fn flush(&mut self) -> Result<(), LinkError> {
        if !self.buf.is_empty() {
            self.send.write_all(&self.buf).await?;
            self.buf.clear();
            if self.buf.capacity() > KEEP_BUFFER {
                self.buf = Vec::new();
            }
        }
        self.send.flush().await?;
        Ok(())
    }

    /// Ends the frame stream and closes the connection in order (when it still works, until
    /// `deadline`): yamux GoAway, then the WebSocket close.
    pub(crate) async fn shutdown(mut self, healthy: bool, deadline: Instant) {
        if !healthy {
            return;
        }
        if let Ok(Err(e)) = tokio::time::timeout_at(deadline, self.send.close()).await {
            tracing::debug!(error = %e, "ending the frame stream failed");
        }
        self.mux.close(deadline).await;
    }
}

// === impl Stream ===

impl Stream {
    /// The next frame, and the bytes read since the previous one. Cancel-safe: bytes are moved
    /// into the frame reader in the same poll that reads them.
    pub(crate) async fn recv(&mut self) -> Result<Option<(Frame, usize)>, LinkError> {
        loop {
            if let Some(frame) = self.reader.next_frame()? {
                return Ok(Some((frame, std::mem::take(&mut self.read))));
            }
            let read = std::future::poll_fn(|cx| {
                let mut chunk = [0; READ_CHUNK];
                let n = match Pin::new(&mut self.recv).poll_read(cx, &mut chunk) {
                    Poll::Ready(Ok(n)) => n,
                    Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                    Poll::Pending => return Poll::Pending,
                };
                self.reader.push(&chunk[..n]);
                Poll::Ready(Ok(n))
            })
            .await;
            match read {
                Ok(0) => return self.end(),
                Ok(n) => self.read += n,
                Err(e) => return Err(self.failure.take().unwrap_or(LinkError::Io(e))),
            }
        }
    }

    /// The frame stream ended: because the connection failed, cleanly between frames, or
    /// inside one.
    fn end(&self) -> Result<Option<(Frame, usize)>, LinkError> {
        if let Some(e) = self.failure.take() {
            return Err(e);
        }
        match self.reader.buffered() {
            0 => Ok(None),
            buffered => Err(LinkError::Truncated { buffered }),
        }
    }
}

fn parts(
    frames: yamux::Stream,
    mux: Mux,
    session: SessionHandle,
    failure: Failure,
    limits: Limits,
    tunnels: Tunnels,
    peer_cert: Option<CertificateDer<'static>>,
) -> Parts {
    let (recv, send) = frames.split();
    let stream = Stream {
        recv,
        reader: FrameReader::new(limits.max_frame),
        read: 0,
        failure,
        _session: mux.session(),
    };
    let sink = Sink {
        send,
        buf: Vec::new(),
        mux,
        _session: session,
    };
    Parts {
        sink: SinkInner::Ws(sink),
        stream: StreamInner::Ws(stream),
        tunnels,
        peer_cert,
    }
}

/// Reads the peer's [`QUIC_PREAMBLE`] from the frame stream.
async fn read_preamble(frames: &mut yamux::Stream, failure: &Failure) -> Result<(), LinkError> {
    let mut got = [0; QUIC_PREAMBLE.len()];
    match frames.read_exact(&mut got).await {
        Ok(()) if &got == QUIC_PREAMBLE => Ok(()),
        Ok(()) => Err(LinkError::Preamble),
        Err(e) => Err(failure.take().unwrap_or(match e.kind() {
            io::ErrorKind::UnexpectedEof => LinkError::Preamble,
            _ => LinkError::Io(e),
        })),
    }
}

/// Limits checked from a message's header, before its body is read.
fn ws_config() -> WebSocketConfig {
    WebSocketConfig::default()
        .read_buffer_size(READ_BUFFER)
        .write_buffer_size(WRITE_BUFFER)
        .max_message_size(Some(MAX_MESSAGE))
        .max_frame_size(Some(MAX_MESSAGE))
}

/// `host:port` for the upgrade URL, with brackets around an IPv6 address.
fn authority(server_name: &str, port: u16) -> String {
    match server_name.parse::<IpAddr>() {
        Ok(IpAddr::V6(ip)) => format!("[{ip}]:{port}"),
        _ => format!("{server_name}:{port}"),
    }
}

fn handshake_error(e: WsError) -> LinkError {
    match e {
        WsError::Io(io) if is_tls(&io) => LinkError::Tls(io),
        other => LinkError::Handshake(other),
    }
}

pub(crate) fn connection_error(e: WsError) -> LinkError {
    match e {
        WsError::Capacity(CapacityError::MessageTooLong { size, max_size }) => {
            LinkError::Oversized {
                len: size as u64,
                max: max_size,
            }
        }
        WsError::Io(io) if is_tls(&io) => LinkError::Tls(io),
        WsError::Io(io) => LinkError::Io(io),
        WsError::ConnectionClosed | WsError::AlreadyClosed => LinkError::Closed,
        other => LinkError::WebSocket(other),
    }
}

/// tokio-rustls reports TLS failures as I/O errors wrapping a `rustls::Error`.
fn is_tls(e: &io::Error) -> bool {
    e.get_ref().is_some_and(|inner| inner.is::<rustls::Error>())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipv6_server_names_are_bracketed_in_the_url() {
        assert_eq!(authority("::1", 10000), "[::1]:10000");
        assert_eq!(authority("127.0.0.1", 10000), "127.0.0.1:10000");
        assert_eq!(authority("cloud.example", 10000), "cloud.example:10000");
    }

    #[test]
    fn an_oversized_message_maps_to_oversized() {
        let e = WsError::Capacity(CapacityError::MessageTooLong {
            size: 10,
            max_size: 5,
        });
        assert!(matches!(
            connection_error(e),
            LinkError::Oversized { len: 10, max: 5 }
        ));
    }
}
