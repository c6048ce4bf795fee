//! QUIC: one bidirectional stream opened by the client, both ends write [`QUIC_PREAMBLE`], then
//! length-prefixed frames. The server opens tunnel streams beside it (bidirectional streams too).
//!
//! Stream limits: the server lets the client open its one frame stream and no other; the client
//! lets the server open [`MAX_TUNNEL_STREAMS`]. Every stream's receive window is
//! [`STREAM_WINDOW`] and the connection's window has room for all of them at once, so a tunnel
//! whose reader stopped never holds up the frames.
//!
//! Packets are what a session costs: one cloudhub holds many thousands of connections on one
//! socket, and on loopback each datagram costs both ends a system call and a task wake-up. So
//! only the client sends QUIC keep-alives (the edge is the side behind a NAT); path MTU discovery
//! makes one probe instead of a binary search; and the server sends no TLS session tickets,
//! since no client resumes with them.

use std::io;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use quinn::crypto::rustls::{QuicClientConfig, QuicServerConfig};
use quinn::{
    Connection, ConnectionError, Endpoint, EndpointConfig, IdleTimeout, MtuDiscoveryConfig,
    ReadError, ReadExactError, RecvStream, SendStream, TransportConfig, VarInt,
};
use rustls::pki_types::CertificateDer;
use tokio::time::Instant;
use wire::{Frame, FrameReader, LENGTH_PREFIX_LEN};

use crate::conn::{Parts, SinkInner, StreamInner, Tunnels};
use crate::{
    ClientTls, Limits, LinkError, MAX_TUNNEL_STREAMS, QUIC_ALPN, QUIC_PREAMBLE, ServerTls,
    TunnelAcceptor, TunnelOpener,
};

/// The client pings the server when it sent nothing for this long, so NATs keep the path open.
/// The sessions' own pings (every 15 s by default, from both ends) keep it busier than that, so
/// with the default settings this never fires; it is the safety net below the idle timeout.
const KEEP_ALIVE: Duration = Duration::from_secs(20);

/// A connection that heard nothing (not even keep-alives) for this long is dead.
const IDLE_TIMEOUT: Duration = Duration::from_secs(30);

/// Buffered bytes after which `feed` writes them out.
const FLUSH_AT: usize = 64 * 1024;

/// A send buffer larger than this is released after the flush, so an idle connection holds no
/// buffer (memory per idle session matters when one cloudhub holds 100,000 of them).
const KEEP_BUFFER: usize = 4 * 1024;

/// Largest chunk taken from the stream at a time.
const READ_CHUNK: usize = 64 * 1024;

/// QUIC's minimum datagram size, quinn's starting MTU.
const INITIAL_MTU: u16 = 1200;

/// The one MTU probed after the handshake: a 1500-byte Ethernet path less IPv6 and UDP headers
/// (quinn's default upper bound).
const MTU_PROBE: u16 = 1452;

/// Socket buffer size asked for, each way (the kernel caps it at `net.core.rmem_max` and
/// `wmem_max`). One UDP socket carries every connection of an endpoint: with the default of about
/// 200 KiB, a burst of handshakes (10,000 nodes reconnecting after a restart) overflows it, and
/// each dropped Initial costs its connection a retransmission timeout of a second or more.
const SOCKET_BUFFER: usize = 8 << 20;

/// How many streams the client lets the server open at a time: more than the server's own
/// limit, [`MAX_TUNNEL_STREAMS`], because quinn announces freed streams to the peer only once an
/// eighth of the limit is free; with exactly 64 the server could be refused a stream with 56 open.
const PEER_STREAMS: u32 = MAX_TUNNEL_STREAMS as u32 + MAX_TUNNEL_STREAMS as u32 / 4;

/// The receive window of every stream, frame stream and tunnels alike: what a tunnel whose
/// reader stopped may leave buffered at the receiver.
const STREAM_WINDOW: u32 = 256 * 1024;

/// The connection's receive window: every stream's window at once (the frame stream and as many
/// tunnels as are allowed), so stalled tunnels cannot use up what the frame stream needs.
const CONNECTION_WINDOW: u32 = STREAM_WINDOW * (PEER_STREAMS + 1);

/// Application error code of an orderly close.
const CLOSE_NORMAL: u32 = 0;

/// Longest close reason put in the `CONNECTION_CLOSE` frame.
const MAX_CLOSE_REASON: usize = 128;

pub(crate) struct Listener {
    endpoint: Endpoint,
}

pub(crate) struct Incoming {
    incoming: quinn::Incoming,
}

pub(crate) struct Sink {
    send: SendStream,
    conn: Arc<CloseOnDrop>,
    buf: Vec<u8>,
    /// The client's own endpoint, kept as long as the connection.
    _endpoint: Option<Endpoint>,
}

pub(crate) struct Stream {
    recv: RecvStream,
    reader: FrameReader,
    /// Bytes read and not yet accounted to a frame.
    read: usize,
    _conn: Arc<CloseOnDrop>,
    _endpoint: Option<Endpoint>,
}

/// The connection, closed when the frame stream's two halves are gone (tunnel streams, the
/// opener and the acceptor hold it too, and must not keep it open on their own).
struct CloseOnDrop(Connection);

/// Which end of the connection a config or stream half is for.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Side {
    Client,
    Server,
}

/// Dials `addr` from a fresh client endpoint, opens the stream and swaps preambles.
pub(crate) async fn connect(
    addr: SocketAddr,
    tls: &ClientTls,
    limits: Limits,
) -> Result<Parts, LinkError> {
    let endpoint = client_endpoint(client_bind_addr(addr))?;
    connect_on(&endpoint, Some(endpoint.clone()), addr, tls, limits).await
}

/// A client endpoint bound to `local`.
pub(crate) fn client_endpoint(local: SocketAddr) -> Result<Endpoint, LinkError> {
    endpoint(local, EndpointConfig::default(), None)
}

/// Dials `addr` from `endpoint` (shared by many connections when `keep` is `None`), opens the
/// stream and swaps preambles.
pub(crate) async fn connect_on(
    endpoint: &Endpoint,
    keep: Option<Endpoint>,
    addr: SocketAddr,
    tls: &ClientTls,
    limits: Limits,
) -> Result<Parts, LinkError> {
    let identity = Some((tls.cert_pem.as_str(), tls.key_pem.as_str()));
    let crypto = pki::client_config(&tls.ca_pem, identity, &[QUIC_ALPN])?;
    let mut config = quinn::ClientConfig::new(Arc::new(QuicClientConfig::try_from(crypto)?));
    config.transport_config(Arc::new(transport_config(Side::Client)));
    let conn = endpoint
        .connect_with(config, addr, &tls.server_name)?
        .await?;
    let (mut send, mut recv) = conn.open_bi().await?;
    send.write_all(QUIC_PREAMBLE).await?;
    read_preamble(&mut recv).await?;
    let acceptor = TunnelAcceptor::quic(conn.clone(), limits.handshake_timeout);
    Ok(parts(
        conn,
        send,
        recv,
        limits.max_frame,
        keep,
        Tunnels::Acceptor(acceptor),
        None,
    ))
}

// === impl Listener ===

impl Listener {
    pub(crate) fn bind(addr: SocketAddr, tls: &ServerTls) -> Result<Listener, LinkError> {
        let mut crypto =
            pki::server_config(Some(&tls.ca_pem), &tls.cert_pem, &tls.key_pem, &[QUIC_ALPN])?;
        // Clients build a fresh TLS config per connection and never resume: tickets would only
        // cost bytes and packets.
        crypto.send_tls13_tickets = 0;
        let mut config =
            quinn::ServerConfig::with_crypto(Arc::new(QuicServerConfig::try_from(crypto)?));
        config.transport_config(Arc::new(transport_config(Side::Server)));
        let endpoint_config = EndpointConfig::new(Arc::new(reset_key(&tls.key_pem)));
        Ok(Listener {
            endpoint: endpoint(addr, endpoint_config, Some(config))?,
        })
    }

    pub(crate) fn local_addr(&self) -> io::Result<SocketAddr> {
        self.endpoint.local_addr()
    }

    pub(crate) async fn accept(&self) -> Result<(Incoming, SocketAddr), LinkError> {
        let incoming = self.endpoint.accept().await.ok_or(LinkError::Closed)?;
        let addr = incoming.remote_address();
        Ok((Incoming { incoming }, addr))
    }

    /// Refuses new connections; established ones keep the endpoint running.
    pub(crate) fn close(&self) {
        self.endpoint.set_server_config(None);
    }
}

// === impl Incoming ===

impl Incoming {
    pub(crate) fn refuse(self) {
        self.incoming.refuse();
    }

    /// The QUIC handshake (the client certificate is checked here), then the client's stream and
    /// the preambles.
    pub(crate) async fn establish(self, limits: Limits) -> Result<Parts, LinkError> {
        let conn = self.incoming.accept()?.await?;
        let peer_cert = peer_cert(&conn);
        let (mut send, mut recv) = conn.accept_bi().await?;
        read_preamble(&mut recv).await?;
        send.write_all(QUIC_PREAMBLE).await?;
        let opener = TunnelOpener::quic(conn.clone(), limits.write_timeout);
        Ok(parts(
            conn,
            send,
            recv,
            limits.max_frame,
            None,
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
        Ok(())
    }

    /// Finishes the stream and waits (until `deadline`) for the peer to acknowledge all of it,
    /// so closing the connection cannot discard data in flight, then closes the connection.
    pub(crate) async fn shutdown(mut self, reason: &str, healthy: bool, deadline: Instant) {
        if healthy {
            // Finishing twice is the only failure, and it is harmless.
            let _ = self.send.finish();
            let _ = tokio::time::timeout_at(deadline, self.send.stopped()).await;
        }
        let reason = &reason.as_bytes()[..reason.len().min(MAX_CLOSE_REASON)];
        self.conn.0.close(VarInt::from_u32(CLOSE_NORMAL), reason);
    }
}

// === impl Stream ===

impl Stream {
    /// The next frame, and the bytes read since the previous one. Cancel-safe: what was read
    /// is kept in the frame reader, and quinn's `read_chunk` is cancel-safe itself.
    pub(crate) async fn recv(&mut self) -> Result<Option<(Frame, usize)>, LinkError> {
        loop {
            if let Some(frame) = self.reader.next_frame()? {
                return Ok(Some((frame, std::mem::take(&mut self.read))));
            }
            match self.recv.read_chunk(READ_CHUNK, true).await {
                Ok(Some(chunk)) => {
                    self.read += chunk.bytes.len();
                    self.reader.push(&chunk.bytes);
                }
                Ok(None) => return self.end(),
                Err(ReadError::ConnectionLost(e)) if is_orderly(&e) => return self.end(),
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// The stream ended: cleanly between frames, or inside one.
    fn end(&self) -> Result<Option<(Frame, usize)>, LinkError> {
        match self.reader.buffered() {
            0 => Ok(None),
            buffered => Err(LinkError::Truncated { buffered }),
        }
    }
}

// === impl CloseOnDrop ===

impl Drop for CloseOnDrop {
    fn drop(&mut self) {
        self.0.close(VarInt::from_u32(CLOSE_NORMAL), b"");
    }
}

fn parts(
    conn: Connection,
    send: SendStream,
    recv: RecvStream,
    max_frame: usize,
    endpoint: Option<Endpoint>,
    tunnels: Tunnels,
    peer_cert: Option<CertificateDer<'static>>,
) -> Parts {
    let conn = Arc::new(CloseOnDrop(conn));
    let sink = Sink {
        send,
        conn: conn.clone(),
        buf: Vec::new(),
        _endpoint: endpoint.clone(),
    };
    let stream = Stream {
        recv,
        reader: FrameReader::new(max_frame),
        read: 0,
        _conn: conn,
        _endpoint: endpoint,
    };
    Parts {
        sink: SinkInner::Quic(sink),
        stream: StreamInner::Quic(Box::new(stream)),
        tunnels,
        peer_cert,
    }
}

/// Appends the 4-byte big-endian length and the frame to `buf`, or nothing if the frame is above
/// `max_frame` (the same framing as [`wire::encode_prefixed`], without a buffer per frame).
pub(crate) fn append_prefixed(
    buf: &mut Vec<u8>,
    frame: &Frame,
    max_frame: usize,
) -> Result<(), LinkError> {
    let start = buf.len();
    buf.extend_from_slice(&[0; LENGTH_PREFIX_LEN]);
    wire::encode_into(frame, buf);
    let len = buf.len() - start - LENGTH_PREFIX_LEN;
    let max = max_frame.min(u32::MAX as usize);
    let Some(prefix) = u32::try_from(len).ok().filter(|_| len <= max) else {
        buf.truncate(start);
        return Err(LinkError::Oversized {
            len: len as u64,
            max,
        });
    };
    buf[start..start + LENGTH_PREFIX_LEN].copy_from_slice(&prefix.to_be_bytes());
    Ok(())
}

async fn read_preamble(recv: &mut RecvStream) -> Result<(), LinkError> {
    let mut got = [0; QUIC_PREAMBLE.len()];
    match recv.read_exact(&mut got).await {
        Ok(()) if &got == QUIC_PREAMBLE => Ok(()),
        Ok(()) | Err(ReadExactError::FinishedEarly(_)) => Err(LinkError::Preamble),
        Err(ReadExactError::ReadError(e)) => Err(e.into()),
    }
}

/// An endpoint on a UDP socket bound to `addr` with [`SOCKET_BUFFER`]-sized buffers; a server
/// endpoint with `server`.
fn endpoint(
    addr: SocketAddr,
    config: EndpointConfig,
    server: Option<quinn::ServerConfig>,
) -> Result<Endpoint, LinkError> {
    let bind = |source| LinkError::Bind { addr, source };
    let socket = std::net::UdpSocket::bind(addr).map_err(bind)?;
    let sock = socket2::SockRef::from(&socket);
    sock.set_recv_buffer_size(SOCKET_BUFFER).map_err(bind)?;
    sock.set_send_buffer_size(SOCKET_BUFFER).map_err(bind)?;
    tracing::debug!(
        recv = sock.recv_buffer_size().unwrap_or(0),
        send = sock.send_buffer_size().unwrap_or(0),
        "QUIC socket buffers"
    );
    let runtime = Arc::new(quinn::TokioRuntime);
    Endpoint::new(config, server, socket, runtime).map_err(bind)
}

/// The key of the server's stateless resets, derived from its private key so that it outlives
/// the process (RFC 9000, 10.3). A node still on a connection of the process before a restart
/// sends to the new one, which answers with a reset the node recognises: it reconnects at once
/// instead of waiting for the idle timeout.
fn reset_key(server_key_pem: &str) -> ring::hmac::Key {
    let derive = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, server_key_pem.as_bytes());
    let key = ring::hmac::sign(&derive, b"kubeedge-rs link: QUIC stateless reset key");
    ring::hmac::Key::new(ring::hmac::HMAC_SHA256, key.as_ref())
}

/// Idle timeout, keep-alive (client only), streams (the server allows the client its one, the
/// client allows the server [`PEER_STREAMS`]), windows, and a single path MTU probe: straight to the largest size, kept if it
/// gets through (the binary search quinn does by default costs four probes and their acks, per
/// end and connection).
fn transport_config(side: Side) -> TransportConfig {
    let (keep_alive, bidi_streams) = match side {
        Side::Client => (Some(KEEP_ALIVE), PEER_STREAMS),
        Side::Server => (None, 1),
    };
    let mut mtu = MtuDiscoveryConfig::default();
    mtu.upper_bound(MTU_PROBE)
        .minimum_change(MTU_PROBE - INITIAL_MTU);
    let mut config = TransportConfig::default();
    config
        .keep_alive_interval(keep_alive)
        .max_idle_timeout(Some(idle_timeout()))
        .max_concurrent_bidi_streams(bidi_streams.into())
        .max_concurrent_uni_streams(0u8.into())
        .stream_receive_window(STREAM_WINDOW.into())
        .receive_window(CONNECTION_WINDOW.into())
        .mtu_discovery_config(Some(mtu));
    config
}

fn idle_timeout() -> IdleTimeout {
    // 30 s in milliseconds is far below the 2^62 limit of a QUIC varint.
    IdleTimeout::try_from(IDLE_TIMEOUT).expect("the idle timeout fits a varint")
}

/// The client certificate rustls verified during the handshake.
fn peer_cert(conn: &Connection) -> Option<CertificateDer<'static>> {
    let identity = conn.peer_identity()?;
    let chain = identity.downcast::<Vec<CertificateDer<'static>>>().ok()?;
    chain.into_iter().next()
}

/// The peer closed with the orderly code, or this end closed the connection itself.
fn is_orderly(e: &ConnectionError) -> bool {
    match e {
        ConnectionError::ApplicationClosed(close) => {
            close.error_code == VarInt::from_u32(CLOSE_NORMAL)
        }
        ConnectionError::LocallyClosed => true,
        _ => false,
    }
}

/// Loopback for a loopback server, otherwise any address, of the server's family.
fn client_bind_addr(server: SocketAddr) -> SocketAddr {
    let ip = match (server, server.ip().is_loopback()) {
        (SocketAddr::V4(_), true) => Ipv4Addr::LOCALHOST.into(),
        (SocketAddr::V4(_), false) => Ipv4Addr::UNSPECIFIED.into(),
        (SocketAddr::V6(_), true) => Ipv6Addr::LOCALHOST.into(),
        (SocketAddr::V6(_), false) => Ipv6Addr::UNSPECIFIED.into(),
    };
    SocketAddr::new(ip, 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn appended_frames_read_back_with_the_frame_reader() {
        let mut buf = Vec::new();
        append_prefixed(&mut buf, &Frame::Ping { nonce: 7 }, 1024).unwrap();
        append_prefixed(&mut buf, &Frame::Pong { nonce: 7 }, 1024).unwrap();
        let mut reader = FrameReader::new(1024);
        reader.push(&buf);
        assert_eq!(reader.next_frame().unwrap(), Some(Frame::Ping { nonce: 7 }));
        assert_eq!(reader.next_frame().unwrap(), Some(Frame::Pong { nonce: 7 }));
        assert_eq!(reader.next_frame().unwrap(), None);
    }

    #[test]
    fn an_oversized_frame_leaves_the_buffer_as_it_was() {
        let mut buf = Vec::new();
        append_prefixed(&mut buf, &Frame::Ping { nonce: 1 }, 1024).unwrap();
        let before = buf.clone();
        let big = Frame::Close {
            reason: "x".repeat(100),
        };
        let err = append_prefixed(&mut buf, &big, 50).unwrap_err();
        assert!(matches!(err, LinkError::Oversized { max: 50, .. }));
        assert_eq!(buf, before);
    }

    #[test]
    fn the_prefix_matches_wire_encode_prefixed() {
        let frame = Frame::Close {
            reason: "bye".into(),
        };
        let mut buf = Vec::new();
        append_prefixed(&mut buf, &frame, 1024).unwrap();
        assert_eq!(buf, wire::encode_prefixed(&frame, 1024).unwrap());
    }

    #[test]
    fn clients_bind_loopback_for_a_loopback_server() {
        let bind = client_bind_addr("127.0.0.1:10001".parse().unwrap());
        assert_eq!(bind, "127.0.0.1:0".parse().unwrap());
        let bind = client_bind_addr("[2001:db8::1]:10001".parse().unwrap());
        assert_eq!(bind, "[::]:0".parse().unwrap());
    }
}
