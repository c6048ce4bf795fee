//! cloudStream: a kubelet-compatible HTTPS endpoint for a real cluster's kube-apiserver. The
//! API server reaches a node's kubelet at `<node address>:<kubelet port>`; pointed here (an
//! iptables DNAT rule from the nodes' addresses, or the Node's addresses and port), it sends
//! each kubelet request (`/containerLogs/...`, `/exec/...`, `/attach/...`,
//! `/portForward/...`, `/stats/summary`, `/metrics/resource`, `/pods`, ...) with `Host` naming
//! the address it dialed. The endpoint
//!
//! 1. admits only clients whose certificate `clientCAFile` signed (the TLS handshake refuses
//!    the rest) and, with `allowedCommonNames`, whose common name is listed (`403` otherwise);
//! 2. finds the node from `Host` among the Nodes' addresses ([`nodes`]);
//! 3. relays the request over a stream of that node's session with cloudhub, upgrades (SPDY,
//!    WebSocket) included, byte for byte ([`kapi::nodes::relay`], as the embedded API server
//!    does). A node that is not connected is a `503` naming it, at once.
//!
//! An egress selector's `HTTPConnect` tunnel (`CONNECT <node address>:<port>`) is served too:
//! the node is found from the CONNECT target, and inside the tunnel cloudcore is the kubelet
//! (the same serving certificate, client certificate and common name checked again).
//!
//! Errors are plain text, as a kubelet's are; kube-apiserver shows them to the user.

mod config;
mod nodes;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::request::Parts;
use axum::http::{Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use beehive::{Context, Mailbox, Module, ModuleError};
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use kapi::nodes::{DialError, NodeDialer, RelayError};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

pub use config::Config;
use nodes::{LookupError, NodeIndex};

/// The module's name.
pub const NAME: &str = "cloudStream";

const TEN_YEARS: Duration = Duration::from_secs(10 * 365 * 86400);
/// Time a client has for the TLS handshake inside a CONNECT tunnel.
const TUNNEL_HANDSHAKE: Duration = Duration::from_secs(10);

/// Why cloudStream could not start.
#[derive(Debug, thiserror::Error)]
pub enum StreamError {
    /// `clientCAFile` is empty.
    #[error(
        "modules.cloudStream.clientCAFile is required: the CA that signed kube-apiserver's kubelet client certificate"
    )]
    NoClientCa,
    /// A certificate or key could not be read, made or used.
    #[error("modules.cloudStream.{key}")]
    Pki {
        key: &'static str,
        #[source]
        source: pki::PkiError,
    },
    /// The listener could not be bound.
    #[error("binding modules.cloudStream on {addr}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
}

/// Why a request was refused before (or instead of) reaching a node.
#[derive(Debug, thiserror::Error)]
enum Refused {
    /// No verified client certificate (never with the TLS config used; kept as a guard).
    #[error("a client certificate signed by modules.cloudStream.clientCAFile is required")]
    NoCertificate,
    /// The certificate's common name is not allowed.
    #[error(
        "client certificate {cn:?} is not allowed: modules.cloudStream.allowedCommonNames lists the allowed common names"
    )]
    NotAllowed { cn: String },
    /// A `CONNECT` that cannot be upgraded.
    #[error("CONNECT needs HTTP/1.1")]
    ConnectNeedsHttp1,
    /// No usable `Host`.
    #[error("the request names no node address (Host {0:?})")]
    NoHost(String),
    /// No single node has the address.
    #[error(transparent)]
    Lookup(#[from] LookupError),
    /// The node's kubelet API could not be reached.
    #[error(transparent)]
    Relay(#[from] RelayError),
}

/// The module: the bound listener, served from `run`.
pub struct CloudStream {
    serving: Mutex<Option<Serving>>,
}

struct Serving {
    listener: TcpListener,
    tls: Arc<rustls::ServerConfig>,
    endpoint: Arc<Endpoint>,
    kube: kube::Client,
}

/// What the requests share.
struct Endpoint {
    dialer: Arc<dyn NodeDialer>,
    nodes: Arc<NodeIndex>,
    allowed: Vec<String>,
    /// For the TLS inside a CONNECT tunnel.
    tls: Arc<rustls::ServerConfig>,
    /// Ends the CONNECT tunnels (at shutdown).
    stop: CancellationToken,
}

/// The requests inside one CONNECT tunnel: all for `node`, from a client with `cn`.
struct Tunnel {
    endpoint: Arc<Endpoint>,
    node: String,
    cn: String,
}

// === impl CloudStream ===

impl CloudStream {
    /// Reads (or makes) the certificates and binds the listener: a bad setting fails the start.
    /// Nodes are looked up through `kube`, kubelet APIs reached through `dialer`.
    pub async fn bind(
        config: &Config,
        hub: &cloudhub::Config,
        dialer: Arc<dyn NodeDialer>,
        kube: kube::Client,
    ) -> Result<(CloudStream, SocketAddr), StreamError> {
        let tls = tls_config(config, hub)?;
        let addr = SocketAddr::new(config.address, config.stream_port);
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|source| StreamError::Bind { addr, source })?;
        let bound = listener
            .local_addr()
            .map_err(|source| StreamError::Bind { addr, source })?;
        let tls = Arc::new(tls);
        let endpoint = Arc::new(Endpoint {
            dialer,
            nodes: NodeIndex::new(),
            allowed: config.allowed_common_names.clone(),
            tls: tls.clone(),
            stop: CancellationToken::new(),
        });
        let serving = Serving {
            listener,
            tls,
            endpoint,
            kube,
        };
        let module = CloudStream {
            serving: Mutex::new(Some(serving)),
        };
        Ok((module, bound))
    }
}

#[async_trait::async_trait]
impl Module for CloudStream {
    fn name(&self) -> &str {
        NAME
    }

    fn group(&self) -> &str {
        NAME
    }

    async fn run(
        &self,
        _ctx: Context,
        _mailbox: &mut Mailbox,
        shutdown: CancellationToken,
    ) -> Result<(), ModuleError> {
        let Some(s) = self.serving.lock().expect("serving lock poisoned").take() else {
            return Err("the cloudStream listener was already used by an earlier run".into());
        };
        let tasks = TaskTracker::new();
        tasks.spawn(s.endpoint.nodes.clone().follow(s.kube, shutdown.clone()));
        let stop = s.endpoint.stop.clone();
        let app = Router::new().fallback(serve).with_state(s.endpoint);
        kapi::serve(
            s.listener,
            Some(s.tls),
            app,
            kapi::ServeConfig::default(),
            kapi::ServeStats::default(),
            shutdown,
            tasks.clone(),
        )
        .await;
        stop.cancel();
        tasks.close();
        if tokio::time::timeout(Duration::from_secs(5), tasks.wait())
            .await
            .is_err()
        {
            tracing::warn!("some cloudStream connections were still open at shutdown");
        }
        Ok(())
    }
}

// === impl Endpoint ===

impl Endpoint {
    /// Checks the client's common name (its certificate was verified at the handshake).
    fn check(
        &self,
        cert: Option<&rustls::pki_types::CertificateDer<'_>>,
    ) -> Result<String, Refused> {
        let cert = cert.ok_or(Refused::NoCertificate)?;
        let cn = pki::subject(cert).map(|(cn, _)| cn).unwrap_or_default();
        if !self.allowed.is_empty() && !self.allowed.contains(&cn) {
            return Err(Refused::NotAllowed { cn });
        }
        Ok(cn)
    }

    /// The node `authority` (a `Host` or a CONNECT target) names.
    async fn node(&self, authority: &str) -> Result<String, Refused> {
        let host = nodes::host_of(authority).ok_or_else(|| Refused::NoHost(authority.into()))?;
        Ok(self.nodes.lookup(host).await?)
    }

    /// Answers a CONNECT to a node's address `200` and serves the tunnel: TLS as that node's
    /// kubelet, then its requests relayed to the node.
    async fn connect(self: Arc<Self>, mut parts: Parts, cn: String) -> Result<Response, Refused> {
        let target = parts
            .uri
            .authority()
            .map(|a| a.to_string())
            .unwrap_or_default();
        let node = self.node(&target).await?;
        let upgrade = parts
            .extensions
            .remove::<hyper::upgrade::OnUpgrade>()
            .ok_or(Refused::ConnectNeedsHttp1)?;
        tokio::spawn(async move {
            let stop = self.stop.clone();
            let tunnel = self.serve_tunnel(upgrade, node.clone());
            tokio::select! {
                ended = tunnel => if let Err(e) = ended {
                    tracing::debug!(node_id = node, client = cn, error = %e, "CONNECT tunnel ended");
                },
                _ = stop.cancelled() => {}
            }
        });
        Ok(StatusCode::OK.into_response())
    }

    /// Serves a CONNECT tunnel to `node`: TLS as its kubelet (the client checked again), then
    /// HTTP/1.1 with upgrades, each request relayed to the node.
    async fn serve_tunnel(
        self: Arc<Self>,
        upgrade: hyper::upgrade::OnUpgrade,
        node: String,
    ) -> anyhow::Result<()> {
        let io = TokioIo::new(upgrade.await?);
        let acceptor = tokio_rustls::TlsAcceptor::from(self.tls.clone());
        let tls = tokio::time::timeout(TUNNEL_HANDSHAKE, acceptor.accept(io)).await??;
        let cert = tls.get_ref().1.peer_certificates().and_then(|c| c.first());
        let inner = match self.check(cert) {
            Ok(cn) => {
                let tunnel = Tunnel {
                    endpoint: self.clone(),
                    node,
                    cn,
                };
                Router::new()
                    .fallback(relay_in_tunnel)
                    .with_state(Arc::new(tunnel))
            }
            Err(refused) => {
                let text = format!("{refused}\n");
                Router::new().fallback(move || {
                    let text = text.clone();
                    async move { (StatusCode::FORBIDDEN, text) }
                })
            }
        };
        hyper::server::conn::http1::Builder::new()
            .serve_connection(TokioIo::new(tls), TowerToHyperService::new(inner))
            .with_upgrades()
            .await?;
        Ok(())
    }
}

/// One kubelet request: its client checked, then relayed to the node its `Host` names (or,
/// for a CONNECT, the tunnel served).
async fn serve(State(endpoint): State<Arc<Endpoint>>, request: Request) -> Response {
    let (parts, body): (Parts, Body) = request.into_parts();
    let cert = parts
        .extensions
        .get::<kapi::PeerCertificate>()
        .map(|c| &c.0);
    let cn = match endpoint.check(cert) {
        Ok(cn) => cn,
        Err(refused) => return refused.into_response(),
    };
    if parts.method == Method::CONNECT {
        return endpoint
            .connect(parts, cn)
            .await
            .unwrap_or_else(IntoResponse::into_response);
    }
    let authority = match parts.uri.authority() {
        Some(a) => a.as_str(),
        None => parts
            .headers
            .get(header::HOST)
            .and_then(|h| h.to_str().ok())
            .unwrap_or_default(),
    };
    match endpoint.node(authority).await {
        Ok(node) => relay(&endpoint, node, parts, body).await,
        Err(refused) => refused.into_response(),
    }
}

/// A request inside a CONNECT tunnel, for the tunnel's node.
async fn relay_in_tunnel(State(tunnel): State<Arc<Tunnel>>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    tracing::debug!(node_id = tunnel.node, client = tunnel.cn, path = %parts.uri, "kubelet request in a CONNECT tunnel");
    relay(&tunnel.endpoint, tunnel.node.clone(), parts, body).await
}

/// Relays a request to `node`'s kubelet API.
async fn relay(endpoint: &Endpoint, node: String, parts: Parts, body: Body) -> Response {
    let path = parts
        .uri
        .path_and_query()
        .map_or_else(|| "/".to_owned(), |p| p.as_str().to_owned());
    match kapi::nodes::relay(endpoint.dialer.as_ref(), &node, &path, parts, body).await {
        Ok(answer) => answer,
        Err(e) => {
            tracing::info!(node_id = node, error = %e, "kubelet request not relayed");
            Refused::from(e).into_response()
        }
    }
}

impl IntoResponse for Refused {
    fn into_response(self) -> Response {
        let status = match &self {
            Refused::NoCertificate => StatusCode::UNAUTHORIZED,
            Refused::NotAllowed { .. } => StatusCode::FORBIDDEN,
            Refused::ConnectNeedsHttp1 => StatusCode::BAD_REQUEST,
            Refused::NoHost(_) => StatusCode::BAD_REQUEST,
            Refused::Lookup(LookupError::Unknown { .. }) => StatusCode::NOT_FOUND,
            Refused::Lookup(LookupError::Ambiguous { .. }) => StatusCode::CONFLICT,
            Refused::Lookup(LookupError::NotSynced) => StatusCode::SERVICE_UNAVAILABLE,
            Refused::Relay(RelayError::Dial(DialError::NotConnected { .. })) => {
                StatusCode::SERVICE_UNAVAILABLE
            }
            Refused::Relay(RelayError::Dial(_) | RelayError::Http { .. }) => {
                StatusCode::BAD_GATEWAY
            }
            Refused::Relay(_) => StatusCode::BAD_REQUEST,
        };
        let text = format!("{}\n", beehive::ErrorChain(&self));
        let content_type = [(header::CONTENT_TYPE, "text/plain; charset=utf-8")];
        (status, content_type, text).into_response()
    }
}

/// The server config: the serving certificate (made by cloudhub's CA when missing), client
/// certificates required and verified against `clientCAFile`, HTTP/1.1 (upgrades need it).
fn tls_config(
    config: &Config,
    hub: &cloudhub::Config,
) -> Result<rustls::ServerConfig, StreamError> {
    if config.client_ca_file.as_os_str().is_empty() {
        return Err(StreamError::NoClientCa);
    }
    let pki_err = |key| move |source| StreamError::Pki { key, source };
    let client_ca = pki::read_ca_file(&config.client_ca_file).map_err(pki_err("clientCAFile"))?;
    let (cert, key) = (
        &config.tls_stream_cert_file,
        &config.tls_stream_private_key_file,
    );
    let served = if cert.exists() || key.exists() {
        pki::CertifiedKey {
            cert_pem: pki::read_cert_file(cert).map_err(pki_err("tlsStreamCertFile"))?,
            key_pem: pki::read_key_file(key).map_err(pki_err("tlsStreamPrivateKeyFile"))?,
        }
    } else {
        let made = issue(config, hub).map_err(pki_err("tlsStreamCertFile"))?;
        tracing::info!(cert = %cert.display(), "issued the cloudStream serving certificate with cloudhub's CA");
        made
    };
    pki::server_config(
        Some(&client_ca),
        &served.cert_pem,
        &served.key_pem,
        &[b"http/1.1"],
    )
    .map_err(pki_err("tlsStreamCertFile"))
}

/// A serving certificate from cloudhub's CA, written to the configured files.
fn issue(config: &Config, hub: &cloudhub::Config) -> Result<pki::CertifiedKey, pki::PkiError> {
    let ca = pki::Ca::from_pem(
        &pki::read_pem(&hub.tls_ca_file)?,
        &pki::read_pem(&hub.tls_ca_key_file)?,
    )?;
    let hosts = pki::server_hosts(
        or_else(&config.advertise_address, &hub.advertise_address),
        or_else(&config.dns_names, &hub.dns_names),
    );
    let made = ca.issue_server(&hosts, TEN_YEARS)?;
    pki::write_pem(&config.tls_stream_cert_file, &made.cert_pem)?;
    pki::write_pem(&config.tls_stream_private_key_file, &made.key_pem)?;
    Ok(made)
}

/// `own`, or `fallback` when `own` is empty.
fn or_else<'a, T>(own: &'a [T], fallback: &'a [T]) -> &'a [T] {
    if own.is_empty() { fallback } else { own }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn enabling_it_without_a_client_ca_fails_naming_the_key() {
        let err = tls_config(&Config::default(), &cloudhub::Config::default()).unwrap_err();
        assert!(matches!(err, StreamError::NoClientCa));
        assert!(err.to_string().contains("modules.cloudStream.clientCAFile"));
    }

    #[test]
    fn the_serving_certificate_is_issued_by_cloudhubs_ca_when_missing_and_kept() {
        let dir = tempfile::tempdir().unwrap();
        let path = |rel: &str| dir.path().join(rel);
        let ca = pki::Ca::generate("hub", TEN_YEARS).unwrap();
        pki::write_pem(&path("ca.crt"), ca.cert_pem()).unwrap();
        pki::write_pem(&path("ca.key"), &ca.key_pem()).unwrap();
        let hub = cloudhub::Config {
            tls_ca_file: path("ca.crt"),
            tls_ca_key_file: path("ca.key"),
            ..cloudhub::Config::default()
        };
        let config = Config {
            enable: true,
            client_ca_file: path("ca.crt"),
            tls_stream_cert_file: path("stream.crt"),
            tls_stream_private_key_file: path("stream.key"),
            ..Config::default()
        };
        tls_config(&config, &hub).unwrap();
        let made = std::fs::read_to_string(path("stream.crt")).unwrap();
        tls_config(&config, &hub).unwrap();
        assert_eq!(std::fs::read_to_string(path("stream.crt")).unwrap(), made);
        let missing_ca = Config {
            client_ca_file: path("nowhere.crt"),
            ..config
        };
        let err = tls_config(&missing_ca, &hub).unwrap_err();
        let chain = beehive::ErrorChain(&err).to_string();
        assert!(
            chain.contains("clientCAFile") && chain.contains("nowhere.crt"),
            "{chain}"
        );
    }
}
