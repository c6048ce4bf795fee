//! link: the transports that carry [`wire::Frame`]s between cloudhub (server) and edgehub
//! (client), always over mutual TLS, and beside them the tunnel streams the cloud opens to a
//! node. cloudhub binds a [`Listener`] and hands each accepted [`Incoming`] to its own session
//! task, which finishes the handshakes with [`Incoming::establish`]; edgehub dials with
//! [`connect`]. Both get a [`Conn`], split into a [`FrameSink`] and a [`FrameStream`] that the
//! session drives independently.
//!
//! Every connection carries several byte streams; the frames travel on the first, which the
//! client opens. On it both ends first write [`QUIC_PREAMBLE`] (so each knows the other end
//! really serves the link), then frames follow, each preceded by its length (4 bytes
//! big-endian, see [`wire::FrameReader`]); a declared length above [`Limits::max_frame`] is
//! refused before any of its body is read. Two transports, one API ([`Transport`]):
//!
//! - **WebSocket over TLS** (KubeEdge's default, port 10000): TCP, rustls, a WebSocket upgrade,
//!   then the yamux stream multiplexer over the binary messages, read as one byte stream. A text
//!   message, a WebSocket message header above 64 KiB (refused from the header) or bytes that
//!   break yamux's protocol end the connection with an error.
//! - **QUIC** (port 10001), ALPN [`QUIC_ALPN`]: QUIC's own bidirectional streams.
//!
//! **Tunnel streams.** The server end opens byte streams to the client end with the
//! [`TunnelOpener`] from [`Conn::opener`] (a [`TunnelStream`] is tokio `AsyncRead + AsyncWrite`;
//! `shutdown()` half-closes it, dropping it before that resets it); the client end takes them
//! from the [`TunnelAcceptor`] of [`Conn::take_acceptor`]. Each starts with
//! [`TUNNEL_PREAMBLE`], written by the opener and stripped by the acceptor, so the client sees a
//! stream as soon as it is opened on either transport. The client can open no stream but the
//! frame stream: QUIC's stream limit forbids it, and on WebSocket the server resets any other
//! stream with a log line. At most [`MAX_TUNNEL_STREAMS`] are open at a time; `open` fails at
//! once past that ([`LinkError::TunnelLimit`]) or once the connection has ended
//! ([`LinkError::ConnectionEnded`]). Each stream's receive window is 256 KiB and the
//! connection's has room for all of them, so a tunnel whose reader stopped holds up neither the
//! frames nor the other tunnels. The connection lives as long as its frame halves: when both are
//! dropped or closed, its tunnel streams end with it.
//!
//! The server always requires a client certificate signed by its CA; the node name is read from
//! it ([`Conn::peer_node`], CN `system:node:<name>`, O `system:nodes`). The client checks the
//! server certificate against its CA and [`ClientTls::server_name`].
//!
//! Bounded everything: the handshakes run under [`Limits::handshake_timeout`], every write under
//! [`Limits::write_timeout`] (a peer that stops reading makes writes fail, it never blocks a
//! session forever), and buffers are bounded by the frame limit and by flow control. Bad bytes
//! from a peer are an error for that one connection, never a panic.
//!
//! Ending a connection: [`FrameSink::close`] sends a `Close` frame, then ends the frame stream
//! and closes the connection (WebSocket: yamux GoAway, then the WebSocket close message; QUIC:
//! `CONNECTION_CLOSE` once the peer has acknowledged everything), and the peer's
//! [`FrameStream::recv`] returns the `Close` frame and then `Ok(None)`. Liveness is the
//! session's business (`wire::Keepalive`); on QUIC the client additionally sends a keep-alive
//! after 20 s without sending anything, and both ends drop a connection that heard nothing for
//! 30 s. [`Listener::close`] stops accepting but leaves established connections alone.
//!
//! [`faultproxy`] is a TCP proxy that delays, blackholes and cuts connections, for tests and the
//! load generator.
#![forbid(unsafe_code)]

mod conn;
mod error;
pub mod faultproxy;
mod mux;
mod quic;
mod tunnel;
mod ws;
mod wsbytes;

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

pub use conn::{
    ByteCounters, Conn, FrameChannel, FrameSink, FrameStream, Incoming, Listener, QuicDialer,
    connect,
};
pub use error::{LinkError, UnknownTransport};
pub use tunnel::{MAX_TUNNEL_STREAMS, TUNNEL_PREAMBLE, TunnelAcceptor, TunnelOpener, TunnelStream};

/// ALPN protocol of the QUIC transport.
pub const QUIC_ALPN: &[u8] = b"kubeedge-rs/1";

/// The bytes each end writes first on the frame stream (both transports; the name is older than
/// the WebSocket transport's streams).
pub const QUIC_PREAMBLE: &[u8; 8] = b"KELINK\x00\x01";

/// KubeEdge's WebSocket port.
pub const DEFAULT_WEBSOCKET_PORT: u16 = 10000;

/// KubeEdge's QUIC port.
pub const DEFAULT_QUIC_PORT: u16 = 10001;

/// Which transport carries the frames.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Transport {
    /// WebSocket over TLS over TCP.
    WebSocket,
    /// QUIC (TLS 1.3 built in) over UDP.
    Quic,
}

/// What the server presents and whom it trusts. Client certificates are required.
#[derive(Clone)]
pub struct ServerTls {
    /// The CA that signs client (node) certificates.
    pub ca_pem: String,
    /// The server certificate chain.
    pub cert_pem: String,
    /// The server private key.
    pub key_pem: String,
}

/// What the client presents and whom it trusts.
#[derive(Clone)]
pub struct ClientTls {
    /// The CA that signed the server certificate.
    pub ca_pem: String,
    /// The node certificate chain.
    pub cert_pem: String,
    /// The node private key.
    pub key_pem: String,
    /// The name the server certificate must carry (DNS name or IP address).
    pub server_name: String,
}

/// Sizes and deadlines of one connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Largest encoded frame sent or accepted, in bytes. Default [`wire::DEFAULT_MAX_FRAME`].
    pub max_frame: usize,
    /// How long the TLS, WebSocket and QUIC handshakes may take together. Default 10 s.
    pub handshake_timeout: Duration,
    /// How long one write (a feed that has to write, or a flush) may take. Default 30 s.
    pub write_timeout: Duration,
}

// === impl Transport ===

impl Transport {
    /// KubeEdge's port for this transport.
    pub fn default_port(self) -> u16 {
        match self {
            Transport::WebSocket => DEFAULT_WEBSOCKET_PORT,
            Transport::Quic => DEFAULT_QUIC_PORT,
        }
    }

    /// The name used in configs and logs: `websocket` or `quic`.
    pub fn as_str(self) -> &'static str {
        match self {
            Transport::WebSocket => "websocket",
            Transport::Quic => "quic",
        }
    }
}

impl fmt::Display for Transport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Transport {
    type Err = UnknownTransport;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "websocket" | "ws" => Ok(Transport::WebSocket),
            "quic" => Ok(Transport::Quic),
            _ => Err(UnknownTransport(s.to_string())),
        }
    }
}

// === impl ServerTls ===

impl fmt::Debug for ServerTls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServerTls")
            .field("ca_pem", &self.ca_pem)
            .field("cert_pem", &self.cert_pem)
            .field("key_pem", &"<redacted>")
            .finish()
    }
}

// === impl ClientTls ===

impl fmt::Debug for ClientTls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientTls")
            .field("ca_pem", &self.ca_pem)
            .field("cert_pem", &self.cert_pem)
            .field("key_pem", &"<redacted>")
            .field("server_name", &self.server_name)
            .finish()
    }
}

// === impl Limits ===

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_frame: wire::DEFAULT_MAX_FRAME,
            handshake_timeout: Duration::from_secs(10),
            write_timeout: Duration::from_secs(30),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transport_names_parse_back() {
        for t in [Transport::WebSocket, Transport::Quic] {
            assert_eq!(t.to_string().parse::<Transport>().unwrap(), t);
        }
        assert!("carrier-pigeon".parse::<Transport>().is_err());
    }

    #[test]
    fn keys_are_not_printed_by_debug() {
        let tls = ClientTls {
            ca_pem: "ca".into(),
            cert_pem: "cert".into(),
            key_pem: "SECRET".into(),
            server_name: "localhost".into(),
        };
        assert!(!format!("{tls:?}").contains("SECRET"));
    }
}
