//! A small HTTPS client for the certificate service: one request per connection, HTTP/1.1,
//! rustls. [`unverified`] is only for the first download of the CA, which the caller then
//! checks against the hash in the token before trusting anything else from the server.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use http_body_util::{BodyExt as _, Full};
use hyper::body::Bytes;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, SignatureScheme};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

/// An answer.
#[derive(Debug)]
pub struct Response {
    pub status: u16,
    pub headers: http::HeaderMap,
    pub body: Vec<u8>,
}

/// A request that got no answer.
#[derive(Debug, thiserror::Error)]
pub enum HttpsError {
    /// `addr` is not `host:port`.
    #[error("{addr:?} is not host:port")]
    Address { addr: String },
    /// TCP failed: nothing listens there, or it cannot be reached.
    #[error("cannot reach {addr}: {source}")]
    Connect {
        addr: String,
        #[source]
        source: std::io::Error,
    },
    /// The server's certificate does not carry the name or address dialled.
    #[error(
        "the certificate {addr} presents is not valid for {host:?} (the address dialled): {detail}; dial a name or address in its SANs, or re-run `keadm init` with that --advertise-address"
    )]
    NameMismatch {
        addr: String,
        host: String,
        detail: String,
    },
    /// The server's certificate is not valid yet by this machine's clock.
    #[error("TLS with {addr} failed: {behind}")]
    ClockBehind {
        addr: String,
        behind: pki::ClockBehind,
    },
    /// The TLS handshake failed for another reason.
    #[error("TLS with {addr} failed: {source}")]
    Tls {
        addr: String,
        #[source]
        source: std::io::Error,
    },
    /// The HTTP exchange failed.
    #[error("HTTP exchange with {addr} failed: {source}")]
    Http {
        addr: String,
        #[source]
        source: hyper::Error,
    },
    /// No answer in time.
    #[error("{addr} did not answer within {after:?}")]
    Timeout { addr: String, after: Duration },
}

/// The server's time when it answered (its `Date` header), Unix seconds.
pub fn server_time(resp: &Response) -> Option<i64> {
    let date = resp.headers.get(http::header::DATE)?.to_str().ok()?;
    jiff::fmt::rfc2822::DateTimeParser::new()
        .parse_timestamp(date)
        .ok()
        .map(|t| t.as_second())
}

/// How far this clock (`local`, Unix seconds, read when the answer arrived) is ahead of the
/// server's (negative: behind), if the answer carries the server's time.
pub fn clock_skew(resp: &Response, local: i64) -> Option<i64> {
    server_time(resp).map(|server| local - server)
}

/// Splits `host:port` (`[v6]:port` too) and returns the host as a TLS server name.
pub fn host_of(addr: &str) -> Option<String> {
    let (host, port) = addr.rsplit_once(':')?;
    port.parse::<u16>().ok()?;
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    (!host.is_empty()).then(|| host.to_string())
}

/// Sends one request to `https://<addr><path>` and reads the whole answer.
pub async fn request(
    addr: &str,
    config: Arc<ClientConfig>,
    method: http::Method,
    path: &str,
    headers: &[(&str, String)],
    body: Vec<u8>,
    timeout: Duration,
) -> Result<Response, HttpsError> {
    let exchange = exchange(addr, config, method, path, headers, body);
    tokio::time::timeout(timeout, exchange)
        .await
        .unwrap_or_else(|_| {
            Err(HttpsError::Timeout {
                addr: addr.into(),
                after: timeout,
            })
        })
}

async fn exchange(
    addr: &str,
    config: Arc<ClientConfig>,
    method: http::Method,
    path: &str,
    headers: &[(&str, String)],
    body: Vec<u8>,
) -> Result<Response, HttpsError> {
    let host = host_of(addr).ok_or_else(|| HttpsError::Address { addr: addr.into() })?;
    let name = ServerName::try_from(host.clone())
        .map_err(|_| HttpsError::Address { addr: addr.into() })?;
    let tcp = TcpStream::connect(addr)
        .await
        .map_err(|source| HttpsError::Connect {
            addr: addr.into(),
            source,
        })?;
    let tls = TlsConnector::from(config)
        .connect(name, tcp)
        .await
        .map_err(|source| tls_error(addr, &host, source))?;
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tls))
            .await
            .map_err(|source| HttpsError::Http {
                addr: addr.into(),
                source,
            })?;
    let driver = tokio::spawn(async move {
        let _ = conn.await;
    });
    let mut req = http::Request::builder()
        .method(method)
        .uri(path)
        .header(http::header::HOST, addr);
    for (k, v) in headers {
        req = req.header(*k, v);
    }
    // The builder only fails on invalid header names or values, which callers do not pass.
    let req = req
        .body(Full::new(Bytes::from(body)))
        .expect("valid request parts");
    let answer = async {
        let resp = sender.send_request(req).await?;
        let (parts, body) = resp.into_parts();
        let body = body.collect().await?.to_bytes().to_vec();
        Ok::<_, hyper::Error>(Response {
            status: parts.status.as_u16(),
            headers: parts.headers,
            body,
        })
    }
    .await;
    driver.abort();
    answer.map_err(|source| HttpsError::Http {
        addr: addr.into(),
        source,
    })
}

fn tls_error(addr: &str, host: &str, source: std::io::Error) -> HttpsError {
    if let Some(behind) = pki::clock_behind(&source) {
        return HttpsError::ClockBehind {
            addr: addr.into(),
            behind,
        };
    }
    let mismatch = source
        .get_ref()
        .and_then(|e| e.downcast_ref::<rustls::Error>())
        .and_then(|e| match e {
            rustls::Error::InvalidCertificate(
                c @ (rustls::CertificateError::NotValidForName
                | rustls::CertificateError::NotValidForNameContext { .. }),
            ) => Some(format!("{c:?}")),
            _ => None,
        });
    match mismatch {
        Some(detail) => HttpsError::NameMismatch {
            addr: addr.into(),
            host: host.into(),
            detail,
        },
        None => HttpsError::Tls {
            addr: addr.into(),
            source,
        },
    }
}

/// A client config that trusts any server and keeps the chain it presented: only for the first
/// download of the CA, which the caller checks against the token's hash.
pub fn unverified() -> (Arc<ClientConfig>, Arc<Mutex<Vec<CertificateDer<'static>>>>) {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let chain = Arc::new(Mutex::new(Vec::new()));
    let verifier = Capture {
        provider: provider.clone(),
        chain: chain.clone(),
    };
    // The ring provider supports the default protocol versions.
    let config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("ring supports the default TLS versions")
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(verifier))
        .with_no_client_auth();
    (Arc::new(config), chain)
}

#[derive(Debug)]
struct Capture {
    provider: Arc<CryptoProvider>,
    chain: Arc<Mutex<Vec<CertificateDer<'static>>>>,
}

impl ServerCertVerifier for Capture {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let mut chain = self.chain.lock().unwrap_or_else(|p| p.into_inner());
        chain.clear();
        chain.push(end_entity.clone().into_owned());
        chain.extend(intermediates.iter().map(|c| c.clone().into_owned()));
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::{Response, clock_skew, host_of, server_time};

    #[test]
    fn the_server_time_is_read_from_the_date_header() {
        let mut headers = http::HeaderMap::new();
        headers.insert(
            http::header::DATE,
            "Thu, 01 Jan 1970 00:16:40 GMT".parse().unwrap(),
        );
        let resp = Response {
            status: 200,
            headers,
            body: Vec::new(),
        };
        assert_eq!(server_time(&resp), Some(1000));
        assert_eq!(clock_skew(&resp, 1400), Some(400));
        let bare = Response {
            status: 200,
            headers: http::HeaderMap::new(),
            body: Vec::new(),
        };
        assert_eq!(server_time(&bare), None);
    }

    #[test]
    fn the_host_of_an_address_is_its_name_or_ip() {
        assert_eq!(host_of("10.0.0.1:10002").as_deref(), Some("10.0.0.1"));
        assert_eq!(host_of("[::1]:10002").as_deref(), Some("::1"));
        assert_eq!(
            host_of("cloud.example:10002").as_deref(),
            Some("cloud.example")
        );
        assert_eq!(host_of("cloud.example"), None);
        assert_eq!(host_of(":10002"), None);
    }
}
