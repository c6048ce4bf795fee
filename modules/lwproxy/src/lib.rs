//! lwproxy: the edge's Kubernetes endpoint (default `http://127.0.0.1:10550`) for kubelet,
//! kube-proxy and kubectl on the node. Reads — discovery, get, list, watch, tables — are served
//! by the kapi REST layer straight from the edge store metamanager keeps, so they work offline
//! and resume from local resourceVersions. Writes are sent to the cloud: a request to edgehub
//! (group `resource`, resource `<namespace>/<store resource>/<name>`) carrying a
//! [`ForwardedWrite`](apimachinery::ForwardedWrite), answered by the cloud's
//! [`ForwardedReply`](apimachinery::ForwardedReply). While the link is down, pod and node
//! status and lease writes are applied to the store and queued for the cloud through
//! metamanager's outbox; a pod's service-account token request is answered with the token
//! the cloud last issued for it while that is valid ([`tokens`]); other writes get a 503. Loopback callers are trusted as a local admin
//! for reads; a loopback listener serves only requests naming a loopback host (DNS
//! rebinding, see [`host`]); forwarded writes carry checked names and are made in the cloud
//! with this node's rights, never more. A read of a kind the node rules never send the node
//! is not an empty list: lwproxy subscribes to it at the cloud first ([`subscribe`]). What it
//! serves of EndpointSlices and Endpoints is filtered for this node's site ([`closure`]).
#![forbid(unsafe_code)]

mod backend;
mod closure;
mod config;
mod crds;
mod echo;
mod envelope;
mod error;
mod host;
mod local;
mod refusals;
mod subscribe;
mod through;
mod tokens;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use beehive::{Context, Mailbox, Module, ModuleError};
use kapi::{Api, Registry, User};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::backend::Forwarder;
use crate::subscribe::Subscriptions;

pub use closure::{Closure, Place, Served};
pub use config::Config;
pub use error::LwProxyError;
pub use refusals::Refusals;

/// Module name.
pub const NAME: &str = "lwproxy";
/// The group of the write requests lwproxy sends (to edgehub, and queued through metamanager).
pub const MESSAGE_GROUP: &str = "resource";
/// Who a request without credentials is: loopback callers are the node's own components.
pub const LOCAL_ADMIN: &str = "system:admin";
/// The module forwarded writes go to (edgehub), which answers them with the cloud's reply or
/// refuses them (an `error` response; [`apimachinery::forward::LINK_LOST`] when the link
/// dropped after the write was handed over).
pub const HUB_MODULE: &str = "edgehub";

/// Whether the link to the cloud is up: writes are forwarded while it is, applied locally
/// (status and leases) or refused while it is not. The daemon maps its hub's state onto it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Link {
    /// Linked: writes are forwarded.
    Up,
    /// Not linked.
    #[default]
    Down,
}

/// How long open connections get to finish at shutdown.
const DRAIN: Duration = Duration::from_secs(5);

/// The lwproxy module: bound by [`LwProxy::bind`], serving once run.
pub struct LwProxy {
    config: Config,
    forwarder: Arc<Forwarder>,
    subscriptions: Arc<Subscriptions>,
    store: objstore::Store,
    registry: Registry,
    closure: Arc<closure::Closure>,
    serving: Mutex<Option<Serving>>,
}

/// What the first run takes to serve.
struct Serving {
    listener: TcpListener,
    tls: Option<Arc<rustls::ServerConfig>>,
    app: axum::Router,
    connections: kapi::ServeStats,
}

/// What the daemon and tests need to reach lwproxy.
#[derive(Clone, Debug)]
pub struct Handle {
    addr: SocketAddr,
    refusals: Refusals,
    tls: bool,
    connections: kapi::ServeStats,
    limiter: kapi::ClientLimiter,
    app: axum::Router,
    subscriptions: Arc<Subscriptions>,
    link: watch::Receiver<Link>,
}

// === impl LwProxy ===

impl LwProxy {
    /// Loads the TLS files (if any), serves the CRDs held in the store, and binds the listener,
    /// so the address is known (and taken) before the module runs. `link` says whether writes
    /// can be forwarded to the cloud.
    pub async fn bind(
        config: Config,
        meta: metamanager::Handle,
        link: watch::Receiver<Link>,
    ) -> Result<(LwProxy, Handle), LwProxyError> {
        let tls = tls_config(&config)?.map(Arc::new);
        let store = meta.store().clone();
        let registry = Registry::new(apimachinery::catalog::builtins());
        kapi::local::register_existing_crds(&store, &registry).await?;
        let subscriptions = Subscriptions::new(
            meta.clone(),
            link.clone(),
            registry.clone(),
            config.subscriptions(),
        );
        subscriptions.restore().await?;
        let forwarder = Forwarder::new(meta, link.clone(), config.forward_timeout);
        let api = Api {
            registry: registry.clone(),
            store: store.clone(),
            backend: forwarder.clone(),
            version: version(),
            default_user: Some(User {
                name: LOCAL_ADMIN.into(),
                groups: vec!["system:masters".into(), "system:authenticated".into()],
            }),
            // The store holds only what this node may read.
            authorizer: None,
        };
        let bind_error = |source| LwProxyError::Bind {
            addr: config.server,
            source,
        };
        let listener = TcpListener::bind(config.server).await.map_err(bind_error)?;
        let addr = listener.local_addr().map_err(bind_error)?;
        let closure = closure::Closure::new(store.clone());
        let app = closure::http::layer(closure.clone(), subscriptions.layer(kapi::router(api)));
        let limiter = kapi::ClientLimiter::new(config.client_limits());
        let refusals = Refusals::default();
        let handle = Handle {
            addr,
            refusals: refusals.clone(),
            tls: tls.is_some(),
            connections: kapi::ServeStats::default(),
            limiter: limiter.clone(),
            app: app.clone(),
            subscriptions: subscriptions.clone(),
            link: link.clone(),
        };
        tracing::info!(bound = %addr, url = %handle.url(), "lwproxy listening");
        // A loopback listener serves loopback names only (DNS rebinding); only what comes over
        // the socket is capped and checked: the in-process routes (`Handle::api`, edged) are
        // the node's own.
        let served = match addr.ip().is_loopback() {
            true => host::loopback_only(app),
            false => app,
        };
        let serving = Serving {
            listener,
            tls,
            app: refusals.layer(limiter.layer(served)),
            connections: handle.connections.clone(),
        };
        let proxy = LwProxy {
            config,
            forwarder,
            subscriptions,
            store,
            registry,
            closure,
            serving: Mutex::new(Some(serving)),
        };
        Ok((proxy, handle))
    }
}

#[beehive::async_trait]
impl Module for LwProxy {
    fn name(&self) -> &str {
        NAME
    }

    fn group(&self) -> &str {
        NAME
    }

    fn enabled(&self) -> bool {
        self.config.enable
    }

    async fn run(
        &self,
        ctx: Context,
        mailbox: &mut Mailbox,
        shutdown: CancellationToken,
    ) -> Result<(), ModuleError> {
        let taken = self
            .serving
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        let Some(s) = taken else {
            return Err("the lwproxy listener was already used by an earlier run".into());
        };
        self.subscriptions.attach(ctx.clone());
        self.forwarder.attach(ctx);
        let tasks = TaskTracker::new();
        tasks.spawn(self.subscriptions.clone().run(shutdown.clone()));
        let crds = crds::follow(self.store.clone(), self.registry.clone(), shutdown.clone());
        tasks.spawn(crds);
        tasks.spawn(self.closure.clone().follow(shutdown.clone()));
        let config = self.config.serve_config();
        let serving = kapi::serve(
            s.listener,
            s.tls,
            s.app,
            config,
            s.connections,
            shutdown.clone(),
            tasks.clone(),
        );
        tokio::pin!(serving);
        loop {
            tokio::select! {
                biased;
                _ = shutdown.cancelled() => break,
                () = &mut serving => break,
                m = mailbox.recv() => match m {
                    Some(m) => tracing::debug!(msg_id = %m.id(), operation = %m.operation(), resource = m.resource(), "message for lwproxy ignored"),
                    None => break,
                },
            }
        }
        tasks.close();
        if tokio::time::timeout(DRAIN, tasks.wait()).await.is_err() {
            tracing::warn!("some lwproxy connections were still open at shutdown");
        }
        Ok(())
    }
}

// === impl Handle ===

impl Handle {
    /// Whether writes are forwarded to the cloud (the link lwproxy follows).
    pub fn link(&self) -> watch::Receiver<Link> {
        self.link.clone()
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The counters of lwproxy's connections.
    pub fn connections(&self) -> &kapi::ServeStats {
        &self.connections
    }

    /// The per-client caps on watches and requests, with what they refused.
    pub fn client_limits(&self) -> &kapi::ClientLimiter {
        &self.limiter
    }

    /// What lwproxy refused its socket's clients (every answer of 400 or more), by code.
    pub fn refusals(&self) -> &Refusals {
        &self.refusals
    }

    /// Adds `lwproxy_refused_requests{code}` (read at scrape time) to `registry`.
    pub fn register_metrics(&self, registry: &mut prometheus_client::registry::Registry) {
        use prometheus_client::metrics::counter::Counter;
        use prometheus_client::metrics::family::Family;
        let refused = Family::<Vec<(String, String)>, Counter>::default();
        for (code, n) in self.refusals.by_code() {
            refused
                .get_or_create(&vec![("code".to_owned(), code.to_string())])
                .inc_by(n);
        }
        registry.register(
            "lwproxy_refused_requests",
            "Requests lwproxy answered with 400 or more, by code",
            refused,
        );
        use prometheus_client::metrics::gauge::Gauge;
        let subscriptions = Family::<Vec<(String, String)>, Gauge>::default();
        for (state, n) in self.subscriptions.counts() {
            subscriptions
                .get_or_create(&vec![("state".to_owned(), state.to_owned())])
                .set(i64::try_from(n).unwrap_or(i64::MAX));
        }
        registry.register(
            "lwproxy_subscriptions",
            "Kinds this node subscribed to (the node rules do not send them), by state",
            subscriptions,
        );
    }

    /// The endpoint's routes, to call in-process (edged does) as the local admin a loopback
    /// caller is: the same reads, forwarded writes and offline rules as over the socket.
    pub fn api(&self) -> axum::Router {
        self.app.clone()
    }

    /// Whether lwproxy serves HTTPS.
    pub fn tls(&self) -> bool {
        self.tls
    }

    /// The URL clients use (`http://127.0.0.1:10550`); an unspecified bind address is
    /// reached on loopback.
    pub fn url(&self) -> String {
        let scheme = if self.tls { "https" } else { "http" };
        let ip = match self.addr.ip() {
            IpAddr::V4(ip) if ip.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
            IpAddr::V6(ip) if ip.is_unspecified() => IpAddr::V6(Ipv6Addr::LOCALHOST),
            ip => ip,
        };
        format!("{scheme}://{}", SocketAddr::new(ip, self.addr.port()))
    }
}

/// The rustls config for `tlsCertFile`/`tlsPrivateKeyFile` (client certificates from
/// `tlsCaFile` accepted, never required), or `None` for plain HTTP.
fn tls_config(config: &Config) -> Result<Option<rustls::ServerConfig>, LwProxyError> {
    let cert = &config.tls_cert_file;
    let key = &config.tls_private_key_file;
    let ca = &config.tls_ca_file;
    let set = |p: &std::path::Path| !p.as_os_str().is_empty();
    match (set(cert), set(key)) {
        (false, false) if set(ca) => {
            return Err(LwProxyError::Config(
                "tlsCaFile is set but tlsCertFile and tlsPrivateKeyFile are not".into(),
            ));
        }
        (false, false) => return Ok(None),
        (true, true) => {}
        _ => {
            return Err(LwProxyError::Config(
                "tlsCertFile and tlsPrivateKeyFile must be set together".into(),
            ));
        }
    }
    let (cert_pem, key_pem) = (pki::read_pem(cert)?, pki::read_pem(key)?);
    let alpn: &[&[u8]] = &[b"h2", b"http/1.1"];
    let tls = if set(ca) {
        let ca_pem = pki::read_pem(ca)?;
        pki::server_config_optional_client(&ca_pem, &cert_pem, &key_pem, alpn)?
    } else {
        pki::server_config(None, &cert_pem, &key_pem, alpn)?
    };
    Ok(Some(tls))
}

/// The `/version` answer.
fn version() -> serde_json::Value {
    let arch = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    };
    serde_json::json!({
        "major": "1",
        "minor": "32",
        "gitVersion": "v1.32.0-kubeedge-rs",
        "gitCommit": "",
        "gitTreeState": "clean",
        "buildDate": "",
        "goVersion": "",
        "compiler": "rustc",
        "platform": format!("{}/{arch}", std::env::consts::OS),
    })
}
