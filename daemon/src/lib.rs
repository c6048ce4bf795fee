//! daemon: what the cloudcore and edgecore binaries share and nothing else does: reading a YAML
//! config with errors that name the file, line and key; typed duration fields; environment
//! lookups through a trait tests can replace; logging set-up; waiting for a stop signal; where
//! default paths and ports move with `--root` and `--port-offset`.
#![forbid(unsafe_code)]

pub mod cli;
mod commented;
mod config;
pub mod core;
mod durations;
mod env;
pub mod layout;
mod logging;
pub mod monitor;

pub use crate::core::{CommonConfig, Core, MonitorServer, Probes};
pub use commented::to_commented_yaml;
pub use config::{ConfigError, load_yaml, parse_yaml, to_yaml};
pub use durations::duration;
pub use env::{Env, OsEnv};
pub use layout::Layout;
pub use logging::{LogFormat, init_logging};

/// Resolves when the process is asked to stop (SIGINT or SIGTERM; Ctrl-C elsewhere).
pub async fn stop_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let mut term = match signal(SignalKind::terminate()) {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(error = %e, "cannot listen for SIGTERM; only Ctrl-C stops the process");
                let _ = tokio::signal::ctrl_c().await;
                return;
            }
        };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
