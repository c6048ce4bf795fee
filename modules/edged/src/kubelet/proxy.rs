//! The streaming half of exec, attach and portForward, as the kubelet does it by default: the
//! runtime answered a URL of its streaming server (plain HTTP on loopback); the client's
//! upgrade request (SPDY or WebSocket, whatever it speaks) is sent there with its upgrade
//! headers, the answer is relayed, and after a `101 Switching Protocols` the two upgraded
//! connections are joined byte for byte. Any other answer is relayed as it is.

use axum::body::Body;
use axum::extract::Request;
use axum::response::Response;
use http::{HeaderMap, HeaderName, StatusCode, Uri, header};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

/// How long connecting to the streaming server may take.
const CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// A step of the proxying that failed.
#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    /// The runtime's URL is not `http://host:port/path`.
    #[error("the runtime's streaming URL {0:?} is not an http URL")]
    BadUrl(String),
    /// The streaming server could not be reached.
    #[error("cannot reach the runtime's streaming server at {addr}")]
    Connect {
        addr: String,
        #[source]
        source: std::io::Error,
    },
    /// The HTTP exchange with the streaming server failed.
    #[error("the runtime's streaming server failed the request")]
    Http(#[source] hyper::Error),
}

/// Headers of the client's request that go to the streaming server.
fn forwarded(name: &HeaderName) -> bool {
    let name = name.as_str();
    matches!(name, "connection" | "upgrade" | "x-stream-protocol-version")
        || name.starts_with("sec-websocket-")
}

/// Sends `request` to `url` and relays the answer; after a 101 the connections are joined.
pub async fn proxy(mut request: Request, url: &str) -> Result<Response, ProxyError> {
    let uri: Uri = url.parse().map_err(|_| ProxyError::BadUrl(url.into()))?;
    let authority = match (uri.scheme_str(), uri.authority()) {
        (Some("http"), Some(a)) => a.clone(),
        _ => return Err(ProxyError::BadUrl(url.into())),
    };
    let addr = match authority.port_u16() {
        Some(_) => authority.as_str().to_owned(),
        None => format!("{}:80", authority.as_str()),
    };
    let stream = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(&addr))
        .await
        .unwrap_or_else(|_| Err(std::io::ErrorKind::TimedOut.into()))
        .map_err(|source| ProxyError::Connect {
            addr: addr.clone(),
            source,
        })?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(ProxyError::Http)?;
    tokio::spawn(async move {
        if let Err(e) = conn.with_upgrades().await {
            tracing::debug!(error = %e, "streaming server connection ended");
        }
    });
    let path = uri.path_and_query().map_or("/", |p| p.as_str());
    let mut upstream = http::Request::builder()
        .method(request.method().clone())
        .uri(path)
        .header(header::HOST, authority.as_str());
    for (name, value) in request.headers().iter().filter(|(n, _)| forwarded(n)) {
        upstream = upstream.header(name, value);
    }
    let upstream = upstream
        .body(Body::empty())
        .map_err(|_| ProxyError::BadUrl(url.into()))?;
    let mut answer = sender
        .send_request(upstream)
        .await
        .map_err(ProxyError::Http)?;
    if answer.status() != StatusCode::SWITCHING_PROTOCOLS {
        return Ok(answer.map(Body::new));
    }
    let client_side = hyper::upgrade::on(&mut request);
    let server_side = hyper::upgrade::on(&mut answer);
    tokio::spawn(async move {
        let (client, server) = match tokio::try_join!(client_side, server_side) {
            Ok(both) => both,
            Err(e) => {
                tracing::debug!(error = %e, "a streaming upgrade did not complete");
                return;
            }
        };
        let (mut client, mut server) = (TokioIo::new(client), TokioIo::new(server));
        match tokio::io::copy_bidirectional(&mut client, &mut server).await {
            Ok((up, down)) => tracing::debug!(up, down, "stream ended"),
            Err(e) => tracing::debug!(error = %e, "stream ended"),
        }
    });
    let mut response = Response::new(Body::empty());
    *response.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    *response.headers_mut() = std::mem::replace(answer.headers_mut(), HeaderMap::new());
    Ok(response)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_upgrade_headers_are_forwarded() {
        for name in [
            "connection",
            "upgrade",
            "sec-websocket-protocol",
            "sec-websocket-key",
            "x-stream-protocol-version",
        ] {
            assert!(forwarded(&HeaderName::from_static(name)), "{name}");
        }
        for name in ["authorization", "cookie", "x-remote-user", "host"] {
            assert!(!forwarded(&HeaderName::from_static(name)), "{name}");
        }
    }

    #[tokio::test]
    async fn a_url_that_is_not_http_is_refused() {
        for url in ["https://127.0.0.1:1/exec/x", "unix:///run/x", "not a url"] {
            let err = proxy(Request::new(Body::empty()), url).await.unwrap_err();
            assert!(matches!(err, ProxyError::BadUrl(_)), "{url}: {err}");
        }
    }
}
