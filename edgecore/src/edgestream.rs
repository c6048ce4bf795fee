//! `modules.edgeStream`: on a node that runs a native kubelet instead of edged, each stream the
//! cloud opens to this node's kubelet API (logs, exec, attach, port-forward, stats) is joined
//! byte for byte with a new HTTPS connection to that kubelet on the node's loopback. edgecore
//! presents its client certificate and checks the kubelet's against a pinned CA (a kubelet's
//! serving certificate is often self-signed: pin that file). A kubelet that cannot be reached
//! gets the stream a `502` naming the endpoint.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use axum::http::StatusCode;
use axum::response::IntoResponse;
use rustls::pki_types::ServerName;
use serde::{Deserialize, Serialize};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_util::sync::CancellationToken;

/// How long connecting to the kubelet (TCP and TLS) may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// `modules.edgeStream`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct Config {
    /// Forward the cloud's kubelet API streams to a native kubelet. Default false (with
    /// `modules.edged` on, edged serves them; with neither, they are answered 501).
    pub enable: bool,
    /// The kubelet's HTTPS endpoint, on loopback only. Default `https://127.0.0.1:10250`.
    pub kubelet_endpoint: KubeletEndpoint,
    /// The CA (or the kubelet's self-signed certificate) the kubelet's serving certificate is
    /// checked against. Default `/var/lib/kubelet/pki/kubelet.crt` (the kubelet's self-signed
    /// one).
    pub tls_ca_file: PathBuf,
    /// The name the kubelet's certificate must hold. Default empty: the endpoint's host (a
    /// self-signed kubelet certificate holds the node's hostname: set it).
    pub server_name: String,
    /// The client certificate edgecore presents (the kubelet's `authentication.x509.clientCAFile`
    /// must have signed it). Default empty: none, for a kubelet that allows anonymous requests.
    pub tls_cert_file: PathBuf,
    /// Its private key. Default empty.
    pub tls_private_key_file: PathBuf,
}

/// A kubelet endpoint on loopback: `https://127.0.0.1:10250`, `https://[::1]:10250`,
/// `https://localhost:10250` (port 10250 when left out).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(try_from = "String", into = "String")]
#[schemars(with = "String")]
pub struct KubeletEndpoint {
    url: String,
    host: String,
    addr: SocketAddr,
}

/// Why the kubelet forward could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum ForwardError {
    /// A certificate or key file could not be read or used.
    #[error("modules.edgeStream.{key}")]
    Pki {
        key: &'static str,
        #[source]
        source: pki::PkiError,
    },
    /// `tlsCertFile` without `tlsPrivateKeyFile`, or the reverse.
    #[error("modules.edgeStream: tlsCertFile and tlsPrivateKeyFile are set together or not at all")]
    HalfIdentity,
    /// `serverName` is not a DNS name or an IP address.
    #[error("modules.edgeStream.serverName {0:?} is not a DNS name or an IP address")]
    ServerName(String),
}

/// Connects to the kubelet: its address and the TLS identity and trust.
pub(crate) struct Forward {
    endpoint: KubeletEndpoint,
    server_name: ServerName<'static>,
    tls: TlsConnector,
}

// === impl Config ===

impl Default for Config {
    fn default() -> Self {
        Config {
            enable: false,
            kubelet_endpoint: KubeletEndpoint::try_from("https://127.0.0.1:10250".to_owned())
                .expect("the default endpoint is on loopback"),
            tls_ca_file: "/var/lib/kubelet/pki/kubelet.crt".into(),
            server_name: String::new(),
            tls_cert_file: PathBuf::new(),
            tls_private_key_file: PathBuf::new(),
        }
    }
}

// === impl KubeletEndpoint ===

impl KubeletEndpoint {
    /// Where to connect.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl TryFrom<String> for KubeletEndpoint {
    type Error = String;

    fn try_from(url: String) -> Result<Self, String> {
        let refuse = |why: &str| {
            format!(
                "modules.edgeStream.kubeletEndpoint {url:?} {why}: an https URL on loopback, e.g. https://127.0.0.1:10250"
            )
        };
        let authority = url
            .strip_prefix("https://")
            .ok_or_else(|| refuse("is not https"))?
            .trim_end_matches('/');
        let (host, port) = match authority.rsplit_once(':') {
            Some((host, port)) if !host.ends_with(':') && !port.contains(']') => {
                let port = port.parse().map_err(|_| refuse("has no valid port"))?;
                (host, port)
            }
            _ => (authority, 10250),
        };
        let bare = host.trim_start_matches('[').trim_end_matches(']');
        let ip = match bare {
            "localhost" => IpAddr::from([127, 0, 0, 1]),
            _ => bare.parse().map_err(|_| refuse("names no IP address"))?,
        };
        if !ip.is_loopback() {
            return Err(refuse("is not on loopback"));
        }
        Ok(KubeletEndpoint {
            host: bare.to_owned(),
            addr: SocketAddr::new(ip, port),
            url,
        })
    }
}

impl From<KubeletEndpoint> for String {
    fn from(endpoint: KubeletEndpoint) -> String {
        endpoint.url
    }
}

impl std::fmt::Display for KubeletEndpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.url)
    }
}

// === impl Forward ===

impl Forward {
    /// Reads the files `config` names; errors name the key.
    pub(crate) fn new(config: &Config) -> Result<Forward, ForwardError> {
        let pki_err = |key| move |source| ForwardError::Pki { key, source };
        let ca = pki::read_ca_file(&config.tls_ca_file).map_err(pki_err("tlsCaFile"))?;
        let (cert, key) = (&config.tls_cert_file, &config.tls_private_key_file);
        let identity = match (cert.as_os_str().is_empty(), key.as_os_str().is_empty()) {
            (true, true) => None,
            (false, false) => Some((
                pki::read_cert_file(cert).map_err(pki_err("tlsCertFile"))?,
                pki::read_key_file(key).map_err(pki_err("tlsPrivateKeyFile"))?,
            )),
            _ => return Err(ForwardError::HalfIdentity),
        };
        let identity = identity.as_ref().map(|(c, k)| (c.as_str(), k.as_str()));
        let tls =
            pki::client_config(&ca, identity, &[b"http/1.1"]).map_err(pki_err("tlsCaFile"))?;
        let name = match config.server_name.as_str() {
            "" => config.kubelet_endpoint.host.clone(),
            name => name.to_owned(),
        };
        let server_name =
            ServerName::try_from(name.clone()).map_err(|_| ForwardError::ServerName(name))?;
        Ok(Forward {
            endpoint: config.kubelet_endpoint.clone(),
            server_name,
            tls: TlsConnector::from(Arc::new(tls)),
        })
    }

    /// Joins `stream` with a new connection to the kubelet until either ends or edgecore
    /// stops; a kubelet that cannot be reached is answered `502` on the stream.
    pub(crate) async fn join(&self, stream: link::TunnelStream, shutdown: CancellationToken) {
        let mut stream = stream;
        let mut kubelet = match tokio::time::timeout(CONNECT_TIMEOUT, self.connect()).await {
            Ok(Ok(kubelet)) => kubelet,
            Ok(Err(e)) => return self.unreachable(stream, e.to_string(), shutdown).await,
            Err(_) => {
                let why = format!("no TLS connection within {CONNECT_TIMEOUT:?}");
                return self.unreachable(stream, why, shutdown).await;
            }
        };
        tokio::select! {
            joined = tokio::io::copy_bidirectional(&mut stream, &mut kubelet) => {
                if let Err(e) = joined {
                    tracing::debug!(error = %e, "stream to the kubelet ended");
                }
            }
            _ = shutdown.cancelled() => {}
        }
    }

    async fn connect(&self) -> std::io::Result<tokio_rustls::client::TlsStream<TcpStream>> {
        let tcp = TcpStream::connect(self.endpoint.addr).await?;
        tcp.set_nodelay(true)?;
        self.tls.connect(self.server_name.clone(), tcp).await
    }

    /// Answers the stream's requests `502` naming the endpoint and `why`.
    async fn unreachable(&self, stream: link::TunnelStream, why: String, stop: CancellationToken) {
        tracing::warn!(endpoint = %self.endpoint, error = why, "the kubelet cannot be reached");
        let text = format!(
            "cannot reach the kubelet at {} (modules.edgeStream.kubeletEndpoint): {why}\n",
            self.endpoint
        );
        let router = axum::Router::new().fallback(move || {
            let text = text.clone();
            async move { (StatusCode::BAD_GATEWAY, text).into_response() }
        });
        crate::tunnels::serve(stream, router, stop).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn endpoint(url: &str) -> Result<KubeletEndpoint, String> {
        KubeletEndpoint::try_from(url.to_owned())
    }

    #[test]
    fn loopback_endpoints_are_accepted_with_their_port_or_10250() {
        let cases = [
            ("https://127.0.0.1:10250", "127.0.0.1:10250"),
            ("https://127.0.0.2:4443/", "127.0.0.2:4443"),
            ("https://[::1]:10250", "[::1]:10250"),
            ("https://localhost:9000", "127.0.0.1:9000"),
            ("https://127.0.0.1", "127.0.0.1:10250"),
            ("https://[::1]", "[::1]:10250"),
        ];
        for (url, addr) in cases {
            assert_eq!(endpoint(url).unwrap().addr().to_string(), addr, "{url}");
        }
    }

    #[test]
    fn an_endpoint_off_loopback_or_not_https_is_refused_naming_the_key() {
        for url in [
            "https://10.0.0.5:10250",
            "https://0.0.0.0:10250",
            "http://127.0.0.1:10250",
            "https://kubelet.example:10250",
            "https://127.0.0.1:port",
        ] {
            let err = endpoint(url).unwrap_err();
            assert!(err.contains("modules.edgeStream.kubeletEndpoint"), "{err}");
            assert!(err.contains(url), "{err}");
        }
    }

    #[test]
    fn edge_stream_beside_edged_is_refused_naming_both() {
        let mut config = crate::Config::default();
        config.modules.edge_stream.enable = true;
        config.modules.edged.enable = true;
        let err = crate::kubelet_forward(&config).err().unwrap().to_string();
        assert!(
            err.contains("modules.edgeStream") && err.contains("modules.edged"),
            "{err}"
        );
        config.modules.edge_stream.enable = false;
        assert!(crate::kubelet_forward(&config).unwrap().is_none());
    }

    #[test]
    fn a_missing_kubelet_ca_is_an_error_naming_the_key() {
        let dir = tempfile::tempdir().unwrap();
        let config = Config {
            enable: true,
            tls_ca_file: dir.path().join("missing.crt"),
            ..Config::default()
        };
        let err = Forward::new(&config).err().unwrap();
        let chain = beehive::ErrorChain(&err).to_string();
        assert!(chain.contains("modules.edgeStream.tlsCaFile"), "{chain}");
        assert!(chain.contains("missing.crt"), "{chain}");
    }

    #[test]
    fn an_endpoint_off_loopback_fails_the_config_parse() {
        let yaml = "enable: true\nkubeletEndpoint: https://192.0.2.5:10250\n";
        let err = serde_yaml_ng::from_str::<Config>(yaml)
            .unwrap_err()
            .to_string();
        assert!(err.contains("is not on loopback"), "{err}");
    }
}
