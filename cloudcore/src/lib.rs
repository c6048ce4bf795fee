//! cloudcore: the cloud daemon. It loads `cloudcore.yaml`, registers the enabled cloud modules
//! with beehive and serves the monitor endpoints. Modules join here as they are built (cloudhub,
//! edgecontroller, the embedded control plane); until then it runs the runtime and the monitor
//! listener only.
#![forbid(unsafe_code)]

mod config;

use std::net::SocketAddr;
use std::time::Duration;

use daemon::Core;
use daemon::cli::{Daemon, Stoppable, check_type};
use tokio_util::sync::CancellationToken;

pub use config::{API_VERSION, Config, KIND, Modules};

/// The daemon, as the shared command line sees it.
pub struct CloudCore;

/// A started cloudcore.
pub struct Running {
    core: Core,
}

/// Starts cloudcore: every enabled module and listener. Returns once all listeners are bound.
pub async fn start(config: Config, shutdown: CancellationToken) -> anyhow::Result<Running> {
    let runtime =
        beehive::Runtime::new().with_default_capacity(config.common_config.mailbox_size.get());
    let core = Core::start("cloudcore", &config.common_config, runtime, None, shutdown).await?;
    Ok(Running { core })
}

// === impl Running ===

impl Running {
    /// The bound monitor address, if the monitor server is enabled.
    pub fn monitor_addr(&self) -> Option<SocketAddr> {
        self.core.monitor_addr()
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
