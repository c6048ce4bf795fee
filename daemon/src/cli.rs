//! The command line both daemons share: `--config`, `--defaultconfig`, `--minconfig`,
//! `--log-format`, then run until SIGINT/SIGTERM and shut down within a grace period.

use std::future::Future;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use clap::Parser;
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio_util::sync::CancellationToken;

use crate::{Core, LogFormat, OsEnv, init_logging, load_yaml, to_yaml};

/// A daemon the shared command line can run.
pub trait Daemon {
    /// Binary name, e.g. `cloudcore`.
    const NAME: &'static str;
    /// Where `--config` points by default.
    const DEFAULT_CONFIG: &'static str;
    /// Environment variable with the log filter, e.g. `CLOUDCORE_LOG`.
    const LOG_ENV: &'static str;
    /// Filter used when neither the variable nor `RUST_LOG` is set.
    const DEFAULT_LOG: &'static str;

    type Config: Serialize + DeserializeOwned + Default;
    /// A started daemon; the CLI keeps only its core, to stop it.
    type Running: Into<Core>;

    /// The smallest config that runs, as YAML (printed by `--minconfig`).
    fn minimal_config() -> String;

    /// Checks what parsing field by field cannot; the message is prefixed with the file path.
    fn check(config: &Self::Config) -> Result<(), String>;

    /// Starts everything; returns once the listeners are bound.
    fn start(
        config: Self::Config,
        shutdown: CancellationToken,
    ) -> impl Future<Output = anyhow::Result<Self::Running>> + Send;
}

#[derive(Parser, Debug)]
struct Args {
    /// Path of the YAML config file.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Print the full default config and exit.
    #[arg(long)]
    defaultconfig: bool,
    /// Print a minimal config and exit.
    #[arg(long)]
    minconfig: bool,
    /// Log output: text or json.
    #[arg(long, default_value = "text")]
    log_format: LogFormat,
}

/// Parses the command line and runs the daemon; the whole body of a `main.rs`.
pub fn main<D: Daemon>() -> ExitCode {
    let args = Args::parse();
    if args.defaultconfig {
        println!("{}", to_yaml(&D::Config::default()).trim_end());
        return ExitCode::SUCCESS;
    }
    if args.minconfig {
        println!("{}", D::minimal_config().trim_end());
        return ExitCode::SUCCESS;
    }
    init_logging(&OsEnv, D::LOG_ENV, D::DEFAULT_LOG, args.log_format);
    let path = args
        .config
        .unwrap_or_else(|| PathBuf::from(D::DEFAULT_CONFIG));
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("{}: cannot start the async runtime: {e}", D::NAME);
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run::<D>(path)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{}: {e:#}", D::NAME);
            ExitCode::FAILURE
        }
    }
}

async fn run<D: Daemon>(path: PathBuf) -> anyhow::Result<()> {
    let config: D::Config = load_yaml(&path)?;
    D::check(&config).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    let shutdown = CancellationToken::new();
    let core: Core = D::start(config, shutdown.clone())
        .await
        .with_context(|| format!("starting {} from {}", D::NAME, path.display()))?
        .into();
    tracing::info!(config = %path.display(), "{} started", D::NAME);
    crate::stop_signal().await;
    tracing::info!("stop signal received; shutting down");
    shutdown.cancel();
    let grace = core.grace_period();
    let stuck = core.stop().await;
    if !stuck.is_empty() {
        tracing::warn!(
            ?stuck,
            ?grace,
            "not everything stopped within the grace period"
        );
    }
    Ok(())
}

/// Checks the `apiVersion` and `kind` of a config file.
pub fn check_type(
    api_version: &str,
    kind: &str,
    expected_version: &str,
    expected_kind: &str,
) -> Result<(), String> {
    if api_version != expected_version {
        return Err(format!(
            "apiVersion is {api_version:?}, expected {expected_version:?}"
        ));
    }
    if kind != expected_kind {
        return Err(format!("kind is {kind:?}, expected {expected_kind:?}"));
    }
    Ok(())
}
