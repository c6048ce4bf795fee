//! edgedns: cluster DNS at the edge. Answers the cluster zone (`cluster.local`) on a
//! node-local address (NodeLocal DNSCache's `169.254.20.10:53` by default) from the Services
//! and EndpointSlices in the edge store, so names resolve with the cloud away; every other name
//! is forwarded to the node's resolvers with a bounded, TTL-respecting cache. It takes no
//! beehive messages: its input is the store's change log ([`follow`]), its output DNS answers
//! over UDP and TCP. The records are the Kubernetes DNS specification's ([`zone`]); the wire
//! format is hickory-dns's.
#![forbid(unsafe_code)]

mod config;
mod error;
mod follow;
mod forward;
mod objects;
mod server;
mod zone;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use beehive::{Context, Mailbox, Module, ModuleError};
use hickory_server::ServerFuture;
use tokio::net::{TcpListener, UdpSocket};
use tokio_util::sync::CancellationToken;

pub use config::{Config, DEFAULT_LISTEN};
pub use error::EdgeDnsError;

/// The module's name and group.
pub const NAME: &str = "edgedns";

/// The file the node's resolvers are read from when `upstreams` is empty.
const RESOLV_CONF: &str = "/etc/resolv.conf";

/// How long a TCP client may stay idle between queries.
const TCP_IDLE: Duration = Duration::from_secs(10);

/// The edgedns module: bound listeners waiting to serve.
pub struct EdgeDns {
    config: Config,
    store: objstore::Store,
    zone: follow::SharedZone,
    forwarder: Arc<forward::Forwarder>,
    sockets: Mutex<Option<(UdpSocket, TcpListener)>>,
}

/// What others learn of a bound edgedns.
#[derive(Clone, Debug)]
pub struct Handle {
    udp: SocketAddr,
    tcp: SocketAddr,
}

// === impl EdgeDns ===

impl EdgeDns {
    /// Checks the configuration, finds the upstream resolvers and binds UDP and TCP on
    /// `listenAddress` (port 0 picks one; TCP then takes UDP's port when it is free), reading
    /// the cluster zone from `store` once it runs.
    pub async fn bind(
        config: Config,
        store: objstore::Store,
    ) -> Result<(EdgeDns, Handle), EdgeDnsError> {
        let ttl = u32::try_from(config.ttl.as_secs()).unwrap_or(u32::MAX);
        let zone = zone::Zone::new(&config.cluster_domain, ttl).map_err(|reason| {
            EdgeDnsError::ClusterDomain {
                domain: config.cluster_domain.clone(),
                reason,
            }
        })?;
        let upstreams = upstreams(&config);
        let forwarder = Arc::new(forward::Forwarder::new(&config, &upstreams));
        let (udp, tcp) = bind_both(config.listen_address).await?;
        let handle = Handle {
            udp: udp
                .local_addr()
                .map_err(bind_error(config.listen_address))?,
            tcp: tcp
                .local_addr()
                .map_err(bind_error(config.listen_address))?,
        };
        tracing::info!(udp = %handle.udp, tcp = %handle.tcp, domain = %config.cluster_domain, ?upstreams, "edgedns listening");
        let dns = EdgeDns {
            config,
            store,
            zone: Arc::new(RwLock::new(zone)),
            forwarder,
            sockets: Mutex::new(Some((udp, tcp))),
        };
        Ok((dns, handle))
    }

    /// Follows the store and answers queries until `shutdown`.
    pub async fn serve(&self, shutdown: CancellationToken) -> Result<(), EdgeDnsError> {
        let taken = self
            .sockets
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        let Some((udp, tcp)) = taken else {
            return Err(EdgeDnsError::AlreadyServed);
        };
        let following = tokio::spawn(follow::follow(
            self.store.clone(),
            self.zone.clone(),
            shutdown.clone(),
        ));
        let mut server = ServerFuture::new(server::Handler {
            zone: self.zone.clone(),
            forwarder: self.forwarder.clone(),
        });
        server.register_socket(udp);
        server.register_listener(tcp, TCP_IDLE);
        shutdown.cancelled().await;
        if let Err(e) = server.shutdown_gracefully().await {
            tracing::debug!(error = %e, "edgedns listeners ended with an error");
        }
        following.abort();
        Ok(())
    }

    /// The configuration it runs with.
    pub fn config(&self) -> &Config {
        &self.config
    }
}

#[beehive::async_trait]
impl Module for EdgeDns {
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
        _ctx: Context,
        mailbox: &mut Mailbox,
        shutdown: CancellationToken,
    ) -> Result<(), ModuleError> {
        let serving = self.serve(shutdown.clone());
        tokio::pin!(serving);
        loop {
            tokio::select! {
                biased;
                served = &mut serving => return served.map_err(|e| e.to_string().into()),
                m = mailbox.recv() => match m {
                    Some(m) => tracing::debug!(msg_id = %m.id(), "message for edgedns ignored"),
                    None => return serving.await.map_err(|e| e.to_string().into()),
                },
            }
        }
    }
}

// === impl Handle ===

impl Handle {
    /// The bound UDP address.
    pub fn udp_addr(&self) -> SocketAddr {
        self.udp
    }

    /// The bound TCP address.
    pub fn tcp_addr(&self) -> SocketAddr {
        self.tcp
    }
}

/// The configured upstreams, or the node's resolv.conf ones; none (a warning) when neither
/// gives any: cluster names still resolve, others get SERVFAIL.
fn upstreams(config: &Config) -> Vec<SocketAddr> {
    if !config.upstreams.is_empty() {
        return config.upstreams.clone();
    }
    let read = std::fs::read_to_string(RESOLV_CONF)
        .map_err(|e| EdgeDnsError::Upstreams(format!("reading {RESOLV_CONF}: {e}")))
        .and_then(|text| forward::upstreams_from_resolv_conf(&text, config.listen_address));
    read.unwrap_or_else(|e| {
        tracing::warn!(error = %e, "edgedns forwards nothing: only the cluster zone is answered");
        Vec::new()
    })
}

/// UDP and TCP on the same address (with port 0, the port UDP got).
async fn bind_both(addr: SocketAddr) -> Result<(UdpSocket, TcpListener), EdgeDnsError> {
    let udp = UdpSocket::bind(addr).await.map_err(bind_error(addr))?;
    let port = udp.local_addr().map_err(bind_error(addr))?.port();
    let tcp = match TcpListener::bind(SocketAddr::new(addr.ip(), port)).await {
        Ok(tcp) => tcp,
        Err(_) if addr.port() == 0 => TcpListener::bind(addr).await.map_err(bind_error(addr))?,
        Err(e) => return Err(bind_error(addr)(e)),
    };
    Ok((udp, tcp))
}

fn bind_error(addr: SocketAddr) -> impl Fn(std::io::Error) -> EdgeDnsError {
    move |source| EdgeDnsError::Bind { addr, source }
}
