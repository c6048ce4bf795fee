//! What every daemon runs under its modules: the beehive runtime, the monitor listener, one
//! shutdown token and a task tracker, configured by the `commonConfig` section.

use std::net::SocketAddr;
use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use beehive::{Context, ModuleState, Runtime};
use prometheus_client::registry::Registry;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::monitor::{self, Readiness, Refresh};

/// The `commonConfig` section.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct CommonConfig {
    /// Base directory (as `--root`, which wins): every path of this file that still has its
    /// default under `/etc/kubeedge`, `/var/lib/kubeedge`, `/var/lib/kubelet`, `/var/log/pods`
    /// or `/var/log/kubeedge` moves under it (`<root>/etc/kubeedge/...`). Default empty: none.
    pub root: PathBuf,
    /// Added to every port of this file that still has its default (as `--port-offset`,
    /// which wins), so that a second instance listens and dials beside the first. Default 0.
    pub port_offset: u16,
    /// Health and metrics listener.
    pub monitor_server: MonitorServer,
    /// How long modules get to stop after a stop signal. Default `10s`.
    #[serde(with = "crate::duration")]
    pub shutdown_grace_period: Duration,
    /// Capacity of each module's mailbox. Default 1024.
    pub mailbox_size: NonZeroUsize,
}

/// The `commonConfig.monitorServer` section.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct MonitorServer {
    /// Serve `/healthz`, `/readyz` and `/metrics`. Default true.
    pub enable: bool,
    /// Listen address. Default `127.0.0.1:9091` for cloudcore, `127.0.0.1:10352` for edgecore.
    pub bind_address: SocketAddr,
}

/// A running daemon core.
pub struct Core {
    runtime: beehive::Running,
    tasks: TaskTracker,
    shutdown: CancellationToken,
    grace: Duration,
    monitor_addr: Option<SocketAddr>,
}

/// Fills a metrics registry with a daemon's own metrics on each scrape.
pub type ExtraMetrics = Arc<dyn Fn(&mut Registry) + Send + Sync>;

/// What a daemon adds to the monitor server.
#[derive(Clone, Default)]
pub struct Probes {
    /// Its own metrics, filled on each scrape.
    pub metrics: Option<ExtraMetrics>,
    /// Awaited before each scrape, for values that take I/O to read.
    pub refresh: Option<Refresh>,
    /// The checks behind `/readyz`.
    pub readiness: Readiness,
}

// === impl CommonConfig ===

impl CommonConfig {
    /// Defaults with the given monitor address.
    pub fn with_monitor(bind_address: SocketAddr) -> Self {
        CommonConfig {
            root: PathBuf::new(),
            port_offset: 0,
            monitor_server: MonitorServer {
                enable: true,
                bind_address,
            },
            shutdown_grace_period: Duration::from_secs(10),
            mailbox_size: NonZeroUsize::new(beehive::DEFAULT_MAILBOX).expect("1024 is not zero"),
        }
    }
}

impl Default for CommonConfig {
    fn default() -> Self {
        Self::with_monitor(SocketAddr::from(([127, 0, 0, 1], 9091)))
    }
}

impl Default for MonitorServer {
    fn default() -> Self {
        CommonConfig::default().monitor_server
    }
}

// === impl Core ===

impl Core {
    /// Starts the modules registered in `runtime` and the monitor listener.
    pub async fn start(
        name: &'static str,
        common: &CommonConfig,
        runtime: Runtime,
        extra: Option<ExtraMetrics>,
        shutdown: CancellationToken,
    ) -> anyhow::Result<Core> {
        let probes = Probes {
            metrics: extra,
            ..Probes::default()
        };
        Self::start_with(name, common, runtime, probes, shutdown).await
    }

    /// Like [`Core::start`], with the daemon's metrics, scrape refresh and readiness checks.
    pub async fn start_with(
        name: &'static str,
        common: &CommonConfig,
        runtime: Runtime,
        probes: Probes,
        shutdown: CancellationToken,
    ) -> anyhow::Result<Core> {
        let Probes {
            metrics: extra,
            refresh,
            readiness,
        } = probes;
        let runtime = runtime.start(shutdown.clone())?;
        let tasks = TaskTracker::new();
        let monitor_addr = match common.monitor_server.enable {
            false => None,
            true => {
                let ctx = runtime.context();
                let collect: monitor::Collect = Arc::new(move |reg: &mut Registry| {
                    monitor::register_beehive(reg, ctx.stats());
                    if let Some(extra) = &extra {
                        extra(reg);
                    }
                });
                let addr = common.monitor_server.bind_address;
                let bound =
                    monitor::serve(addr, collect, refresh, readiness, shutdown.clone(), &tasks)
                        .await
                        .map_err(|e| {
                            anyhow::anyhow!("binding the monitor server on {addr}: {e}")
                        })?;
                tracing::info!(%bound, "{name} monitor server listening (/healthz, /readyz, /metrics)");
                Some(bound)
            }
        };
        tracing::info!(modules = ?runtime.modules(), "{name} modules started");
        Ok(Core {
            runtime,
            tasks,
            shutdown,
            grace: common.shutdown_grace_period,
            monitor_addr,
        })
    }

    /// Where the monitor server listens, if enabled.
    pub fn monitor_addr(&self) -> Option<SocketAddr> {
        self.monitor_addr
    }

    /// A context for sending into the module runtime.
    pub fn context(&self) -> Context {
        self.runtime.context()
    }

    /// The state of one module.
    pub fn module_state(&self, name: &str) -> Option<ModuleState> {
        self.runtime.state(name)
    }

    /// The tracker daemon tasks outside the modules should be spawned on.
    pub fn tasks(&self) -> &TaskTracker {
        &self.tasks
    }
}

impl Core {
    /// How long [`Core::stop`] may take.
    pub fn grace_period(&self) -> Duration {
        self.grace
    }

    /// Stops every module and listener within the grace period; names what did not stop.
    pub async fn stop(self) -> Vec<String> {
        self.shutdown.cancel();
        let report = self.runtime.shutdown(self.grace).await;
        self.tasks.close();
        let mut stuck: Vec<String> = report.timed_out.iter().map(|m| m.to_string()).collect();
        if tokio::time::timeout(self.grace, self.tasks.wait())
            .await
            .is_err()
        {
            stuck.push("listeners".into());
        }
        stuck
    }
}
