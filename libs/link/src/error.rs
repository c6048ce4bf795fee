//! Link errors, named after the step that failed.

use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use wire::FrameError;

/// A transport could not be set up, or a connection failed or ended badly.
#[derive(Debug, thiserror::Error)]
pub enum LinkError {
    /// The listening socket could not be bound.
    #[error("binding {addr}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: io::Error,
    },
    /// The TLS configuration could not be built from the given certificates and keys.
    #[error("building the TLS configuration failed")]
    TlsConfig(#[from] pki::PkiError),
    /// The TLS configuration cannot serve QUIC (it lacks a TLS 1.3 cipher suite QUIC needs).
    #[error("the TLS configuration cannot be used for QUIC")]
    QuicConfig(#[from] quinn::crypto::rustls::NoInitialCipherSuite),
    /// The server name for certificate checks is not a valid DNS name or IP address.
    #[error("invalid server name {0:?}")]
    InvalidServerName(String),
    /// The TCP connection to the peer could not be opened.
    #[error("connecting to {addr}")]
    Connect {
        addr: SocketAddr,
        #[source]
        source: io::Error,
    },
    /// TLS failed: in the handshake (a certificate missing, untrusted or for another name) or
    /// later (a corrupt record, an alert from the peer).
    #[error("tls failed")]
    Tls(#[source] io::Error),
    /// The WebSocket upgrade failed.
    #[error("websocket handshake failed")]
    Handshake(#[source] tokio_tungstenite::tungstenite::Error),
    /// The QUIC stream did not open with the link preamble.
    #[error("the peer did not open the stream with the link preamble")]
    Preamble,
    /// The handshakes did not finish in time.
    #[error("handshake did not finish within {after:?}")]
    HandshakeTimeout { after: Duration },
    /// The peer's bytes are not a valid frame.
    #[error("invalid frame from the peer")]
    Frame(#[source] FrameError),
    /// A frame is larger than the limit, refused before its body was buffered.
    #[error("frame of {len} bytes exceeds the limit of {max} bytes")]
    Oversized { len: u64, max: usize },
    /// The peer sent a WebSocket message of a kind the link does not carry (text).
    #[error("unexpected {kind} websocket message")]
    UnexpectedMessage { kind: &'static str },
    /// The byte stream ended in the middle of a frame.
    #[error("stream ended inside a frame ({buffered} bytes buffered)")]
    Truncated { buffered: usize },
    /// A write could not complete in time: the peer is not reading or the path is dead.
    #[error("write did not complete within {after:?}")]
    WriteTimeout { after: Duration },
    /// The WebSocket connection failed.
    #[error("websocket connection failed")]
    WebSocket(#[source] tokio_tungstenite::tungstenite::Error),
    /// A socket operation failed.
    #[error("i/o error")]
    Io(#[from] io::Error),
    /// A QUIC connection could not be started.
    #[error("starting the quic connection failed")]
    QuicConnect(#[from] quinn::ConnectError),
    /// The QUIC connection failed or was closed by the peer with an error.
    #[error("quic connection failed")]
    Quic(#[from] quinn::ConnectionError),
    /// Reading the QUIC stream failed.
    #[error("reading the quic stream failed")]
    QuicRead(#[from] quinn::ReadError),
    /// Writing the QUIC stream failed.
    #[error("writing the quic stream failed")]
    QuicWrite(#[from] quinn::WriteError),
    /// The listener or connection is closed, or failed earlier.
    #[error("closed")]
    Closed,
    /// The connection has ended: no tunnel stream can be opened on it.
    #[error("the connection has ended")]
    ConnectionEnded,
    /// As many tunnel streams as the peer allows are open; one must close first.
    #[error("the limit of {max} open tunnel streams is reached")]
    TunnelLimit { max: usize },
    /// The stream multiplexer of the WebSocket transport failed (the peer broke its protocol).
    #[error("the websocket stream multiplexer failed")]
    Mux(#[source] yamux::ConnectionError),
}

/// A transport name that is neither `websocket` nor `quic`.
#[derive(Debug, thiserror::Error)]
#[error("unknown transport {0:?} (expected websocket or quic)")]
pub struct UnknownTransport(pub String);

// === impl LinkError ===

impl From<FrameError> for LinkError {
    fn from(e: FrameError) -> Self {
        match e {
            FrameError::TooLarge { len, max } => LinkError::Oversized { len, max },
            other => LinkError::Frame(other),
        }
    }
}
