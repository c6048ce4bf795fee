//! cloudcore: the cloud daemon. It loads `cloudcore.yaml`, registers the enabled cloud modules
//! with beehive and serves the monitor endpoints. Built so far: cloudhub (the cloud end of the
//! link). edgecontroller and the embedded control plane join as they are built; until then
//! [`start_with`] lets a caller add its own modules (tests use it for a stand-in controller).
#![forbid(unsafe_code)]

mod config;

use std::net::SocketAddr;
use std::time::Duration;

use std::sync::Arc;

use anyhow::Context as _;
use beehive::Module;
use cloudhub::CloudHub;
use daemon::Core;
use daemon::cli::{Daemon, Stoppable, check_type};
use daemon::core::ExtraMetrics;
use tokio_util::sync::CancellationToken;

pub use config::{API_VERSION, Config, KIND, Modules};

/// The daemon, as the shared command line sees it.
pub struct CloudCore;

/// A started cloudcore.
pub struct Running {
    core: Core,
    hub: Option<cloudhub::Handle>,
}

/// Starts cloudcore: every enabled module and listener. Returns once all listeners are bound.
pub async fn start(config: Config, shutdown: CancellationToken) -> anyhow::Result<Running> {
    start_with(config, shutdown, Vec::new()).await
}

/// Like [`start`], with extra modules registered beside the built-in ones.
pub async fn start_with(
    config: Config,
    shutdown: CancellationToken,
    extra: Vec<Arc<dyn Module>>,
) -> anyhow::Result<Running> {
    let capacity = config.common_config.mailbox_size.get();
    let mut runtime = beehive::Runtime::new().with_default_capacity(capacity);
    let mut hub = None;
    if config.modules.cloud_hub.enable {
        let (module, handle) = CloudHub::bind(config.modules.cloud_hub.clone(), shutdown.clone())
            .await
            .context("starting modules.cloudHub")?;
        runtime.register(module);
        hub = Some(handle);
    }
    for module in extra {
        runtime.register_with_capacity(module, capacity);
    }
    let metrics: Option<ExtraMetrics> = hub.clone().map(|h| {
        Arc::new(move |reg: &mut prometheus_client::registry::Registry| h.register_metrics(reg))
            as ExtraMetrics
    });
    let core = Core::start(
        "cloudcore",
        &config.common_config,
        runtime,
        metrics,
        shutdown,
    )
    .await?;
    Ok(Running { core, hub })
}

// === impl Running ===

impl Running {
    /// The bound monitor address, if the monitor server is enabled.
    pub fn monitor_addr(&self) -> Option<SocketAddr> {
        self.core.monitor_addr()
    }

    /// cloudhub's handle (bound addresses, CA, counters), if enabled.
    pub fn hub(&self) -> Option<&cloudhub::Handle> {
        self.hub.as_ref()
    }

    /// A context for sending into the module runtime.
    pub fn context(&self) -> beehive::Context {
        self.core.context()
    }
}

impl Stoppable for Running {
    fn grace_period(&self) -> Duration {
        self.core.grace_period()
    }

    async fn finished(&self) {
        self.core.finished().await
    }

    async fn stop(self) -> Vec<String> {
        self.core.stop().await
    }
}

// === impl CloudCore ===

impl Daemon for CloudCore {
    const NAME: &'static str = "cloudcore";
    const DEFAULT_CONFIG: &'static str = "/etc/kubeedge/config/cloudcore.yaml";
    const LOG_ENV: &'static str = "CLOUDCORE_LOG";
    const DEFAULT_LOG: &'static str = "warn,cloudcore=info,daemon=info";

    type Config = Config;
    type Running = Running;

    fn minimal_config() -> String {
        format!("apiVersion: {API_VERSION}\nkind: {KIND}\nmodules: {{}}\n")
    }

    fn check(config: &Config) -> Result<(), String> {
        check_type(&config.api_version, &config.kind, API_VERSION, KIND)
    }

    async fn start(config: Config, shutdown: CancellationToken) -> anyhow::Result<Running> {
        start(config, shutdown).await
    }
}
