//! Certificates, connected pairs and raw (misbehaving) clients.

use std::future::{Future, poll_fn};
use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use beehive::{Message, Operation};
use futures::{Sink, Stream};
use link::{ClientTls, Conn, Limits, LinkError, Listener, ServerTls, Transport};
use pki::{Ca, CertifiedKey};
use quinn::crypto::rustls::QuicClientConfig;
use rustls::pki_types::ServerName;
use tokio::io::{AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot};
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::{Bytes, Message as WsMessage};
use tokio_util::compat::{Compat, FuturesAsyncReadCompatExt};
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
    pub conn: quinn::Connection,
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
        conn,
        _endpoint: endpoint,
    })
}

/// A WebSocket client that speaks the multiplexer and the preamble itself, so a test can write
/// anything on the frame stream, open streams the link client never would, or send WebSocket
/// messages of its own between the multiplexer's.
pub struct RawMux {
    /// The frame stream, past the preambles.
    pub frames: Compat<yamux::Stream>,
    opens: mpsc::UnboundedSender<oneshot::Sender<yamux::Stream>>,
    ws: Arc<Mutex<RawWs>>,
}

/// The WebSocket's binary messages as a byte stream, shared with the test.
struct SharedWs {
    ws: Arc<Mutex<RawWs>>,
    unread: Bytes,
}

pub async fn raw_mux(addr: SocketAddr, config: rustls::ClientConfig) -> anyhow::Result<RawMux> {
    let ws = Arc::new(Mutex::new(raw_ws(addr, config).await?));
    let bytes = SharedWs {
        ws: ws.clone(),
        unread: Bytes::new(),
    };
    let conn = yamux::Connection::new(bytes, yamux::Config::default(), yamux::Mode::Client);
    let (opens, requests) = mpsc::unbounded_channel();
    tokio::spawn(drive_raw_mux(conn, requests));
    let mut raw = RawMux {
        frames: open_raw(&opens).await?,
        opens,
        ws,
    };
    raw.frames.write_all(link::QUIC_PREAMBLE).await?;
    raw.frames.flush().await?;
    let mut preamble = [0; 8];
    raw.frames.read_exact(&mut preamble).await?;
    anyhow::ensure!(
        &preamble == link::QUIC_PREAMBLE,
        "no preamble from the server"
    );
    Ok(raw)
}

impl RawMux {
    /// Opens another stream (the peer sees it with its first bytes).
    pub async fn open(&self) -> anyhow::Result<Compat<yamux::Stream>> {
        open_raw(&self.opens).await
    }

    /// Sends one WebSocket message outside the multiplexer.
    pub async fn send_message(&self, message: WsMessage) {
        let mut message = Some(message);
        poll_fn(|cx| {
            let mut ws = self.ws.lock().unwrap();
            ready!(Pin::new(&mut *ws).poll_ready(cx)).unwrap();
            if let Some(message) = message.take() {
                Pin::new(&mut *ws).start_send(message).unwrap();
            }
            Pin::new(&mut *ws).poll_flush(cx).map(Result::unwrap)
        })
        .await
    }

    /// Writes raw bytes on the TLS stream under the WebSocket.
    pub async fn send_raw(&self, bytes: &[u8]) {
        let mut written = 0;
        poll_fn(|cx| {
            let mut ws = self.ws.lock().unwrap();
            let tls = Pin::new(ws.get_mut());
            written += ready!(tls.poll_write(cx, &bytes[written..])).unwrap();
            if written < bytes.len() {
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
            Pin::new(ws.get_mut()).poll_flush(cx).map(Result::unwrap)
        })
        .await
    }
}

async fn open_raw(
    opens: &mpsc::UnboundedSender<oneshot::Sender<yamux::Stream>>,
) -> anyhow::Result<Compat<yamux::Stream>> {
    let (tx, rx) = oneshot::channel();
    opens.send(tx)?;
    Ok(rx.await?.compat())
}

/// Drives the raw client's multiplexer: opens what is asked, drops what the server opens.
async fn drive_raw_mux(
    mut conn: yamux::Connection<SharedWs>,
    mut requests: mpsc::UnboundedReceiver<oneshot::Sender<yamux::Stream>>,
) {
    let mut waiting: Option<oneshot::Sender<yamux::Stream>> = None;
    poll_fn(|cx| {
        loop {
            if waiting.is_none() {
                match requests.poll_recv(cx) {
                    Poll::Ready(Some(tx)) => waiting = Some(tx),
                    Poll::Ready(None) | Poll::Pending => {}
                }
            }
            let Some(tx) = waiting.take() else { break };
            match conn.poll_new_outbound(cx) {
                Poll::Ready(Ok(stream)) => {
                    let _ = tx.send(stream);
                }
                Poll::Ready(Err(_)) => return Poll::Ready(()),
                Poll::Pending => {
                    waiting = Some(tx);
                    break;
                }
            }
        }
        loop {
            match ready!(conn.poll_next_inbound(cx)) {
                Some(Ok(_stream)) => {}
                Some(Err(_)) | None => return Poll::Ready(()),
            }
        }
    })
    .await
}

impl futures::AsyncRead for SharedWs {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut [u8],
    ) -> Poll<io::Result<usize>> {
        while self.unread.is_empty() {
            let next = ready!(Pin::new(&mut *self.ws.lock().unwrap()).poll_next(cx));
            match next {
                Some(Ok(WsMessage::Binary(bytes))) => self.unread = bytes,
                Some(Ok(WsMessage::Close(_))) | None => return Poll::Ready(Ok(0)),
                Some(Ok(_)) => {}
                Some(Err(e)) => return Poll::Ready(Err(io::Error::other(e))),
            }
        }
        let n = buf.len().min(self.unread.len());
        buf[..n].copy_from_slice(&self.unread.split_to(n));
        Poll::Ready(Ok(n))
    }
}

impl futures::AsyncWrite for SharedWs {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let mut ws = self.ws.lock().unwrap();
        ready!(Pin::new(&mut *ws).poll_ready(cx)).map_err(io::Error::other)?;
        let message = WsMessage::Binary(Bytes::copy_from_slice(buf));
        Pin::new(&mut *ws)
            .start_send(message)
            .map_err(io::Error::other)?;
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let mut ws = self.ws.lock().unwrap();
        Pin::new(&mut *ws).poll_flush(cx).map_err(io::Error::other)
    }

    fn poll_close(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let mut ws = self.ws.lock().unwrap();
        Pin::new(&mut *ws).poll_close(cx).map_err(io::Error::other)
    }
}

/// Waits until `check` holds, polling every 10 ms, and fails the test after [`PATIENCE`].
pub async fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while !check() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "not within {PATIENCE:?}: {what}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
