//! WebSocket over TLS over TCP: one frame per binary message.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use futures::stream::{SplitSink, SplitStream};
use futures::{SinkExt, StreamExt};
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Instant;
use tokio_rustls::{TlsAcceptor, TlsConnector, TlsStream};
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::error::{CapacityError, Error as WsError};
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::{Bytes, Message};
use wire::Frame;

use crate::conn::{SinkInner, StreamInner};
use crate::{ClientTls, Limits, LinkError, ServerTls};

/// The path the client asks for in the upgrade request (the server accepts any).
const PATH: &str = "/kubeedge/link";

/// Bytes read from the socket at a time, and the target size of the write buffer. Kept small:
/// cloudhub holds one pair per node and the read buffer is allocated whole at the upgrade. 8 KiB
/// rather than 32 took an idle session from 50.3 to 26.0 KiB, for about a tenth of the
/// throughput (still 130,000 acked messages a second; see BENCHMARKS.md).
const IO_BUFFER: usize = 8 * 1024;

type WsStream = WebSocketStream<TlsStream<TcpStream>>;

pub(crate) struct Listener {
    tcp: TcpListener,
    acceptor: TlsAcceptor,
}

pub(crate) struct Incoming {
    tcp: TcpStream,
    acceptor: TlsAcceptor,
}

pub(crate) struct Sink {
    inner: SplitSink<WsStream, Message>,
}

pub(crate) struct Stream {
    inner: SplitStream<WsStream>,
    max_frame: usize,
}

/// Dials `addr`: TCP, TLS (presenting the node certificate), then the WebSocket upgrade.
pub(crate) async fn connect(
    addr: SocketAddr,
    tls: &ClientTls,
    max_frame: usize,
) -> Result<(SinkInner, StreamInner), LinkError> {
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
        Some(ws_config(max_frame)),
    )
    .await
    .map_err(handshake_error)?;
    Ok(halves(ws, max_frame))
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
    /// TLS (the client certificate is checked here), then the WebSocket upgrade.
    pub(crate) async fn establish(
        self,
        limits: Limits,
    ) -> Result<(SinkInner, StreamInner, Option<CertificateDer<'static>>), LinkError> {
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
            Some(ws_config(limits.max_frame)),
        )
        .await
        .map_err(handshake_error)?;
        let (sink, stream) = halves(ws, limits.max_frame);
        Ok((sink, stream, peer_cert))
    }
}

// === impl Sink ===

impl Sink {
    /// Queues one frame; returns its encoded size.
    pub(crate) async fn feed(
        &mut self,
        frame: &Frame,
        max_frame: usize,
    ) -> Result<usize, LinkError> {
        let bytes = wire::encode(frame);
        let len = bytes.len();
        if len > max_frame {
            return Err(LinkError::Oversized {
                len: len as u64,
                max: max_frame,
            });
        }
        let message = Message::Binary(Bytes::from(bytes));
        self.inner.feed(message).await.map_err(connection_error)?;
        Ok(len)
    }

    pub(crate) async fn flush(&mut self) -> Result<(), LinkError> {
        self.inner.flush().await.map_err(connection_error)
    }

    /// The WebSocket close (when the connection still works, until `deadline`); the socket
    /// closes when both halves are gone.
    pub(crate) async fn shutdown(mut self, healthy: bool, deadline: Instant) {
        if !healthy {
            return;
        }
        if let Ok(Err(e)) = tokio::time::timeout_at(deadline, self.inner.close()).await {
            tracing::debug!(error = %e, "websocket close failed");
        }
    }
}

// === impl Stream ===

impl Stream {
    /// The next frame and its encoded size.
    pub(crate) async fn recv(&mut self) -> Result<Option<(Frame, usize)>, LinkError> {
        loop {
            let message = match self.inner.next().await {
                None => return Ok(None),
                Some(Ok(message)) => message,
                Some(Err(e)) => return Err(connection_error(e)),
            };
            match message {
                Message::Binary(bytes) => {
                    return Ok(Some((wire::decode(&bytes, self.max_frame)?, bytes.len())));
                }
                Message::Text(_) => return Err(LinkError::UnexpectedMessage { kind: "text" }),
                Message::Close(_) => return Ok(None),
                // Pings are answered by tungstenite itself; pongs and raw frames carry nothing.
                Message::Ping(_) | Message::Pong(_) | Message::Frame(_) => {}
            }
        }
    }
}

fn halves(ws: WsStream, max_frame: usize) -> (SinkInner, StreamInner) {
    let (sink, stream) = ws.split();
    (
        SinkInner::Ws(Sink { inner: sink }),
        StreamInner::Ws(Stream {
            inner: stream,
            max_frame,
        }),
    )
}

/// Limits checked from a message's header, before its body is read.
fn ws_config(max_frame: usize) -> WebSocketConfig {
    WebSocketConfig::default()
        .read_buffer_size(IO_BUFFER)
        .write_buffer_size(IO_BUFFER)
        .max_message_size(Some(max_frame))
        .max_frame_size(Some(max_frame))
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

fn connection_error(e: WsError) -> LinkError {
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
