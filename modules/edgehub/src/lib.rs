//! edgehub: the edge end of the link. It dials one of the configured cloudhub endpoints with the
//! node's certificate (mutual TLS), says hello with the digest of the edge store, and then
//! carries messages both ways. Downstream objects go to metamanager and are acked to the cloud
//! only once metamanager answered that they committed. Upstream, it drains the persistent outbox
//! that metamanager fills (at `messageQPS`, acked entries removed) and forwards requests from
//! local modules, routing the cloud's replies back to the waiting module. When the link drops it
//! reconnects with exponential backoff and full jitter, so a cloud restart does not bring every
//! node back at once. The link state is published on a `watch` channel ([`Handle::state`]).
#![forbid(unsafe_code)]

mod config;
mod error;
mod metrics;
mod renew;
mod session;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use beehive::{Context, Mailbox, Message, Module, ModuleError, RestartPolicy};
use link::ClientTls;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

pub use config::{Config, Servers, Transport};
pub use error::HubError;

/// Module name.
pub const NAME: &str = metamanager::HUB_MODULE;
/// Module group.
pub const GROUP: &str = "hub";
/// The error a waiting request gets when the link drops before the cloud's reply: the request
/// may have been sent, so its outcome is unknown (unlike the other refusals, sent nothing).
pub const LINK_LOST: &str = apimachinery::forward::LINK_LOST;

/// Whether the edge is linked to the cloud.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LinkState {
    Disconnected,
    Connected { session_id: u64, server: String },
}

/// The edgehub module.
pub struct EdgeHub {
    config: Config,
    node: String,
    /// The node's TLS identity; swapped by a certificate renewal.
    tls: std::sync::RwLock<ClientTls>,
    /// Told when the certificate was renewed: the session ends and edgehub dials again.
    renewed: tokio::sync::Notify,
    meta: metamanager::Handle,
    /// The only way the cloud's objects reach the edge store.
    downstream: metamanager::Downstream,
    state: watch::Sender<LinkState>,
    stats: Arc<Stats>,
    /// The sessions' helper tasks (the forwarder to metamanager): a shutdown waits for them.
    tasks: TaskTracker,
    /// Serves the streams cloudhub opens to this node (none: they are closed at once).
    tunnels: Option<TunnelServer>,
}

/// What serves one stream cloudhub opened to this node (the kubelet API, in edgecore): it
/// must return at once, spawning whatever serves the stream.
pub type TunnelServer = Arc<dyn Fn(link::TunnelStream) + Send + Sync>;

/// A handle on edgehub for the daemon and tests.
#[derive(Clone)]
pub struct Handle {
    node: String,
    state: watch::Receiver<LinkState>,
    stats: Arc<Stats>,
    /// The configured cloudhub endpoints, for the metrics.
    servers: Vec<String>,
}

/// Counters since start.
#[derive(Debug, Default)]
pub struct Stats {
    pub connects: AtomicU64,
    pub downstream: AtomicU64,
    pub duplicates: AtomicU64,
    pub upstream_sent: AtomicU64,
    pub upstream_acked: AtomicU64,
    pub inventories: AtomicU64,
    /// Upstream messages dropped unsent because their frame exceeded the link's limit.
    pub upstream_oversized: AtomicU64,
    /// Unix seconds of the last session start or ack from the cloud (0: never).
    pub last_sync: AtomicU64,
    /// Certificate renewal requests sent.
    pub renewals: AtomicU64,
}

// === impl EdgeHub ===

impl EdgeHub {
    /// Reads the certificates and works out the node name.
    pub fn new(
        config: Config,
        meta: metamanager::Handle,
        downstream: metamanager::Downstream,
    ) -> Result<(EdgeHub, Handle), HubError> {
        let ca_pem = pki::read_ca_file(&config.tls_ca_file)?;
        let cert_pem = pki::read_cert_file(&config.tls_cert_file)?;
        let key_pem = pki::read_key_file(&config.tls_private_key_file)?;
        let certified = pki::node_name(&pki::first_cert(&cert_pem)?).ok_or_else(|| {
            HubError::Identity(format!(
                "{} is not a node certificate (CN system:node:<name>)",
                config.tls_cert_file.display()
            ))
        })?;
        if let Some(name) = config.node_name.as_ref().filter(|n| **n != certified) {
            return Err(HubError::Identity(format!(
                "modules.edgeHub.nodeName is {name:?} but the certificate is for {certified:?}"
            )));
        }
        if config.endpoints().1.is_empty() {
            return Err(HubError::NoServer);
        }
        let tls = ClientTls {
            ca_pem,
            cert_pem,
            key_pem,
            server_name: String::new(),
        };
        let (state, state_rx) = watch::channel(LinkState::Disconnected);
        let stats = Arc::new(Stats::default());
        let handle = Handle {
            node: certified.clone(),
            state: state_rx,
            stats: stats.clone(),
            servers: config.endpoints().1,
        };
        Ok((
            EdgeHub {
                config,
                node: certified,
                tls: std::sync::RwLock::new(tls),
                renewed: tokio::sync::Notify::new(),
                meta,
                downstream,
                state,
                stats,
                tasks: TaskTracker::new(),
                tunnels: None,
            },
            handle,
        ))
    }

    /// Serves the streams cloudhub opens to this node with `serve` (the kubelet API). Without
    /// it, they are closed as soon as they arrive.
    pub fn with_tunnels(mut self, serve: TunnelServer) -> Self {
        self.tunnels = Some(serve);
        self
    }

    /// This machine's clock, Unix seconds (moved by the test-only `clock_offset_secs`).
    fn local_now(&self) -> i64 {
        renew::unix_now() + self.config.clock_offset_secs
    }

    /// The node's current TLS identity.
    fn identity(&self) -> ClientTls {
        self.tls.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Takes a renewed certificate and key for the next connections.
    fn set_identity(&self, cert_pem: String, key_pem: String) {
        let mut tls = self.tls.write().unwrap_or_else(|p| p.into_inner());
        tls.cert_pem = cert_pem;
        tls.key_pem = key_pem;
    }

    /// The wait before connection attempt `attempt` (0: none): full jitter over an exponential
    /// ceiling.
    fn backoff(&self, attempt: u32) -> Duration {
        if attempt == 0 {
            return Duration::ZERO;
        }
        let ceiling =
            self.config.reconnect_base.as_secs_f64() * 2f64.powi(attempt.min(30) as i32 - 1);
        let ceiling = ceiling.min(self.config.reconnect_max.as_secs_f64());
        Duration::from_secs_f64(rand::random::<f64>() * ceiling)
    }

    /// Answers what arrives while there is no link.
    fn offline(&self, ctx: &Context, msg: Message) {
        if msg.header.sync {
            let resp = msg.error_response(
                NAME,
                "the cloud is unreachable: edgehub has no link to cloudhub",
            );
            let _ = ctx.respond(resp);
        } else {
            tracing::debug!(msg_id = %msg.id(), resource = msg.resource(), "no link; message not sent");
        }
    }
}

#[beehive::async_trait]
impl Module for EdgeHub {
    fn name(&self) -> &str {
        NAME
    }

    fn group(&self) -> &str {
        GROUP
    }

    fn enabled(&self) -> bool {
        self.config.enable
    }

    fn restart_policy(&self) -> RestartPolicy {
        RestartPolicy::on_failure()
    }

    async fn run(
        &self,
        ctx: Context,
        mailbox: &mut Mailbox,
        shutdown: CancellationToken,
    ) -> Result<(), ModuleError> {
        self.tasks.reopen();
        let serve = self.serve(ctx, mailbox, &shutdown);
        let ended = match self.config.rotate_certificates {
            true => {
                tokio::pin!(serve);
                tokio::select! {
                    ended = &mut serve => ended,
                    () = renew::run(self, &shutdown) => serve.await,
                }
            }
            false => serve.await,
        };
        self.tasks.close();
        self.tasks.wait().await;
        ended
    }
}

impl EdgeHub {
    /// Dials, runs sessions and reconnects until shutdown.
    async fn serve(
        &self,
        ctx: Context,
        mailbox: &mut Mailbox,
        shutdown: &CancellationToken,
    ) -> Result<(), ModuleError> {
        let (_, servers, _, _) = self.config.endpoints();
        let mut attempt = 0u32;
        for server in servers.iter().cycle() {
            let wait = self.backoff(attempt);
            let dial = async {
                tokio::time::sleep(wait).await;
                session::dial(self, server).await
            };
            tokio::pin!(dial);
            let dialled = loop {
                tokio::select! {
                    biased;
                    _ = shutdown.cancelled() => return Ok(()),
                    r = &mut dial => break r,
                    m = mailbox.recv() => match m {
                        Some(m) => self.offline(&ctx, m),
                        None => return Ok(()),
                    },
                }
            };
            let established = match dialled {
                Ok(e) => e,
                Err(e) => {
                    attempt += 1;
                    match pki::clock_behind(&e) {
                        Some(behind) => {
                            tracing::warn!(%server, attempt, error = %e, "cannot reach cloudhub: {behind}")
                        }
                        None => {
                            tracing::warn!(%server, attempt, error = %e, cause = ?std::error::Error::source(&e).map(|c| c.to_string()), "cannot reach cloudhub")
                        }
                    }
                    continue;
                }
            };
            self.stats.connects.fetch_add(1, Ordering::Relaxed);
            let ended = session::run(self, &ctx, mailbox, shutdown, established, server).await;
            self.state.send_replace(LinkState::Disconnected);
            match ended {
                Err(HubError::Shutdown) => {
                    tracing::info!(%server, "link to cloudhub closed: edgecore is stopping");
                    return Ok(());
                }
                Err(HubError::Store(e)) => return Err(e.into()),
                Err(HubError::Renewed) => {
                    tracing::info!(%server, "link to cloudhub closed to reconnect with the renewed certificate");
                    attempt = 0;
                    continue;
                }
                Err(e) => tracing::warn!(%server, error = %e, "link to cloudhub lost"),
                Ok(()) => tracing::info!(%server, "link to cloudhub closed by the cloud"),
            }
            // Come back after a jittered pause, so a cloud restart is not met by every node at once.
            attempt = 1;
        }
        Err(HubError::NoServer.into())
    }
}

// === impl Handle ===

impl Handle {
    /// The node name (from the certificate).
    pub fn node(&self) -> &str {
        &self.node
    }

    /// The link state, updated as it changes.
    pub fn state(&self) -> watch::Receiver<LinkState> {
        self.state.clone()
    }

    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// Adds the link metrics (`edgehub_connected`, `edgehub_server_info`,
    /// `edgehub_last_sync_timestamp_seconds`, `edgehub_connects`) to a scrape.
    pub fn register_metrics(&self, registry: &mut prometheus_client::registry::Registry) {
        metrics::register(registry, self);
    }
}
