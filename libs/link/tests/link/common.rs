//! Certificates, connected pairs and raw (misbehaving) clients.

use std::future::Future;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use beehive::{Message, Operation};
use link::{ClientTls, Conn, Limits, LinkError, Listener, ServerTls, Transport};
use pki::{Ca, CertifiedKey};
use quinn::crypto::rustls::QuicClientConfig;
use rustls::pki_types::ServerName;
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;
use tokio_tungstenite::WebSocketStream;
use wire::{Ack, Frame, InventoryEntry};

/// The longest any single step of a test may take.
pub const PATIENCE: Duration = Duration::from_secs(10);

const VALIDITY: Duration = Duration::from_secs(3600);

/// Generates `mod <name> { over_websocket, over_quic }` calling `async fn <name>(Transport)`.
macro_rules! both_transports {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            #[tokio::test]
            async fn over_websocket() {
                $crate::common::within(super::$name(link::Transport::WebSocket)).await
            }

            #[tokio::test]
            async fn over_quic() {
                $crate::common::within(super::$name(link::Transport::Quic)).await
            }
        }
    )*};
}
pub(crate) use both_transports;

/// A CA with a server certificate for `localhost`/`127.0.0.1` and a node certificate `edge-1`.
pub struct Certs {
    pub ca: Ca,
    pub server: CertifiedKey,
    pub node: CertifiedKey,
}

/// A listener with one established connection, seen from both ends.
pub struct Pair {
    pub listener: Listener,
    pub server: Conn,
    pub client: Conn,
}

// === impl Certs ===

impl Certs {
    pub fn new() -> Certs {
        let ca = Ca::generate("link-test-ca", VALIDITY).unwrap();
        let hosts = ["localhost".to_string(), "127.0.0.1".to_string()];
        let server = ca.issue_server(&hosts, VALIDITY).unwrap();
        let node = ca.issue_node("edge-1", VALIDITY).unwrap();
        Certs { ca, server, node }
    }

    pub fn server_tls(&self) -> ServerTls {
        ServerTls {
            ca_pem: self.ca.cert_pem().to_string(),
            cert_pem: self.server.cert_pem.clone(),
            key_pem: self.server.key_pem.clone(),
        }
    }

    pub fn client_tls(&self) -> ClientTls {
        ClientTls {
            ca_pem: self.ca.cert_pem().to_string(),
            cert_pem: self.node.cert_pem.clone(),
            key_pem: self.node.key_pem.clone(),
            server_name: "localhost".to_string(),
        }
    }

    /// A raw rustls client config trusting this CA, with the node certificate or without any.
    pub fn raw_client_config(&self, with_cert: bool, alpn: &[&[u8]]) -> rustls::ClientConfig {
        let identity =
            with_cert.then_some((self.node.cert_pem.as_str(), self.node.key_pem.as_str()));
        pki::client_config(self.ca.cert_pem(), identity, alpn).unwrap()
    }
}

// === impl Pair ===

impl Pair {
    pub async fn new(transport: Transport) -> Pair {
        Pair::with_limits(transport, limits(), limits()).await
    }

    pub async fn with_limits(transport: Transport, server: Limits, client: Limits) -> Pair {
        let certs = Certs::new();
        let listener = listen(transport, &certs, server).await;
        let addr = listener.local_addr();
        let tls = certs.client_tls();
        let (server, client) = tokio::join!(
            accept_one(&listener),
            link::connect(transport, addr, &tls, client),
        );
        Pair {
            server: server.unwrap(),
            client: client.unwrap(),
            listener,
        }
    }
}

/// Test limits: default frame size, deadlines well inside [`PATIENCE`].
pub fn limits() -> Limits {
    Limits {
        handshake_timeout: Duration::from_secs(5),
        write_timeout: Duration::from_secs(5),
        ..Limits::default()
    }
}

pub async fn listen(transport: Transport, certs: &Certs, limits: Limits) -> Listener {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, 0));
    Listener::bind(transport, addr, &certs.server_tls(), limits)
        .await
        .unwrap()
}

/// Accepts the next connection and runs its handshakes.
pub async fn accept_one(listener: &Listener) -> Result<Conn, LinkError> {
    listener.accept().await?.establish().await
}

/// Runs `fut`, failing the test if it takes longer than twice [`PATIENCE`].
pub async fn within<T>(fut: impl Future<Output = T>) -> T {
    tokio::time::timeout(PATIENCE * 2, fut)
        .await
        .expect("test did not finish in time")
}

/// A data frame whose message carries `payload` bytes.
pub fn data(seq: u64, payload: usize) -> Frame {
    let msg = Message::new()
        .route("edgehub", "meta", "default/pod/nginx", Operation::Update)
        .with_content(vec![seq as u8; payload]);
    Frame::Data {
        seq,
        msg: Box::new(msg),
    }
}

/// One frame of most kinds, including a data frame with a 1 KiB payload.
pub fn sample_frames() -> Vec<Frame> {
    vec![
        Frame::Ping { nonce: 1 },
        Frame::Pong { nonce: 1 },
        Frame::Ack(Ack {
            cumulative: 5,
            selective: vec![(7, 9), (12, 12)],
        }),
        data(1, 1024),
        Frame::InventoryRequest,
        Frame::Inventory {
            entries: vec![InventoryEntry {
                key: "pods/default/nginx".into(),
                resource_version: "42".into(),
            }],
            last: true,
        },
        Frame::ResyncDone {
            upserts: 1,
            deletes: 2,
        },
        Frame::Refuse {
            reason: "overloaded".into(),
            retry_after_ms: Some(500),
        },
        Frame::Close {
            reason: "done".into(),
        },
    ]
}

pub type RawWs = WebSocketStream<TlsStream<TcpStream>>;

/// A WebSocket client that speaks TLS and WebSocket but nothing of the link.
pub async fn raw_ws(addr: SocketAddr, config: rustls::ClientConfig) -> anyhow::Result<RawWs> {
    let tcp = TcpStream::connect(addr).await?;
    let name = ServerName::try_from("localhost")?;
    let tls = TlsConnector::from(Arc::new(config))
        .connect(name, tcp)
        .await?;
    let (ws, _) = tokio_tungstenite::client_async("wss://localhost/", tls).await?;
    Ok(ws)
}

/// A QUIC client that opens the stream and writes `preamble`, and then whatever the test wants.
pub struct RawQuic {
    pub send: quinn::SendStream,
    pub recv: quinn::RecvStream,
    pub _conn: quinn::Connection,
    pub _endpoint: quinn::Endpoint,
}

pub async fn raw_quic(
    addr: SocketAddr,
    config: rustls::ClientConfig,
    preamble: &[u8],
) -> anyhow::Result<RawQuic> {
    let endpoint = quinn::Endpoint::client((Ipv4Addr::LOCALHOST, 0).into())?;
    let config = quinn::ClientConfig::new(Arc::new(QuicClientConfig::try_from(config)?));
    let conn = endpoint.connect_with(config, addr, "localhost")?.await?;
    let (mut send, recv) = conn.open_bi().await?;
    send.write_all(preamble).await?;
    Ok(RawQuic {
        send,
        recv,
        _conn: conn,
        _endpoint: endpoint,
    })
}
