//! The command line both daemons share: `--config`, `--root`, `--port-offset`,
//! `--defaultconfig`, `--minconfig`, `--log-format`, `--version`, then run until SIGINT/SIGTERM
//! and shut down within a grace period.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context as _;
use clap::{CommandFactory, FromArgMatches, Parser};
use schemars::JsonSchema;
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio_util::sync::CancellationToken;

use crate::layout::Layout;
use crate::{Core, LogFormat, OsEnv, init_logging, load_yaml, to_commented_yaml};

/// A daemon the shared command line can run.
pub trait Daemon {
    /// Binary name, e.g. `cloudcore`.
    const NAME: &'static str;
    /// What `--version` prints after the name. Default: the workspace's version.
    const VERSION: &'static str = env!("CARGO_PKG_VERSION");
    /// Where `--config` points by default (under `--root` when given).
    const DEFAULT_CONFIG: &'static str;
    /// Environment variable with the log filter, e.g. `CLOUDCORE_LOG`.
    const LOG_ENV: &'static str;
    /// Filter used when neither the variable nor `RUST_LOG` is set.
    const DEFAULT_LOG: &'static str;

    /// The whole config file; its `///` docs are what `--defaultconfig` prints as comments.
    type Config: Serialize + DeserializeOwned + Default + JsonSchema;
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
    /// Path of the YAML config file (the help names the default).
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Base directory for this instance: every default path under /etc/kubeedge,
    /// /var/lib/kubeedge, /var/lib/kubelet, /var/log/pods and /var/log/kubeedge, the default
    /// --config included, moves under DIR (/etc/kubeedge/ca/rootCA.crt becomes
    /// DIR/etc/kubeedge/ca/rootCA.crt). Paths the config file sets to something else are kept.
    /// Overrides commonConfig.root.
    #[arg(long, value_name = "DIR")]
    root: Option<PathBuf>,
    /// Added to every default port this daemon listens on or dials, so that a second instance
    /// runs beside the first (ports the config file sets to something else are kept).
    /// Overrides commonConfig.portOffset.
    #[arg(long, value_name = "N")]
    port_offset: Option<u16>,
    /// Print the full default config, every option with its documentation, and exit (with
    /// --root and --port-offset applied).
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
    let args = parse_args::<D>();
    let root = match args.root.as_deref().map(std::path::absolute).transpose() {
        Ok(root) => root,
        Err(e) => {
            eprintln!("{}: --root: {e}", D::NAME);
            return ExitCode::FAILURE;
        }
    };
    let flags = Layout {
        root,
        port_offset: args.port_offset.unwrap_or_default(),
    };
    if args.defaultconfig {
        return match default_config::<D>(&flags) {
            Ok(text) => {
                println!("{}", text.trim_end());
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("{}: {e:#}", D::NAME);
                ExitCode::FAILURE
            }
        };
    }
    if args.minconfig {
        println!("{}", D::minimal_config().trim_end());
        return ExitCode::SUCCESS;
    }
    init_logging(&OsEnv, D::LOG_ENV, D::DEFAULT_LOG, args.log_format);
    let path = args
        .config
        .unwrap_or_else(|| flags.path(Path::new(D::DEFAULT_CONFIG)));
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("{}: cannot start the async runtime: {e}", D::NAME);
            return ExitCode::FAILURE;
        }
    };
    let flags = Flags {
        root: args.root.is_some(),
        port_offset: args.port_offset.is_some(),
        layout: flags,
    };
    match runtime.block_on(run::<D>(path, flags)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{}: {e:#}", D::NAME);
            ExitCode::FAILURE
        }
    }
}

/// The command line with the daemon's name, version and default config path filled in.
fn parse_args<D: Daemon>() -> Args {
    let command = Args::command()
        .name(D::NAME)
        .bin_name(D::NAME)
        .version(D::VERSION)
        .about(format!("{}, a daemon of kubeedge-rs", D::NAME))
        .mut_arg("config", |arg| {
            arg.help(format!(
                "Path of the YAML config file [default: {}, under --root when given]",
                D::DEFAULT_CONFIG
            ))
        })
        .after_help(format!(
            "Log filter: {} (else RUST_LOG). Print every option: --defaultconfig.",
            D::LOG_ENV
        ));
    let matches = command.get_matches();
    // Every argument clap just parsed is a field of `Args`.
    Args::from_arg_matches(&matches).unwrap_or_else(|e| e.exit())
}

/// `--root` and `--port-offset` as given on the command line.
struct Flags {
    root: bool,
    port_offset: bool,
    layout: Layout,
}

/// The defaults with `layout` applied and written down in the config, commented.
fn default_config<D: Daemon>(layout: &Layout) -> anyhow::Result<String> {
    let mut value = serde_yaml_ng::to_value(D::Config::default())?;
    if let Some(common) = value.get_mut("commonConfig") {
        if let Some(root) = &layout.root {
            common["root"] = root.to_string_lossy().into_owned().into();
        }
        common["portOffset"] = layout.port_offset.into();
    }
    let config: D::Config = layout.apply(serde_yaml_ng::from_value(value)?)?;
    Ok(to_commented_yaml(&config))
}

/// Reads the config and moves its default paths and ports: the flags win over
/// `commonConfig.root` and `commonConfig.portOffset`.
fn load<D: Daemon>(path: &Path, flags: Flags) -> anyhow::Result<D::Config> {
    let config: D::Config = load_yaml(path)?;
    let value = serde_yaml_ng::to_value(&config)?;
    let common = &value["commonConfig"];
    let mut layout = flags.layout;
    if !flags.root {
        layout.root = common["root"]
            .as_str()
            .filter(|r| !r.is_empty())
            .map(PathBuf::from);
    }
    if !flags.port_offset {
        layout.port_offset = common["portOffset"].as_u64().unwrap_or_default() as u16;
    }
    let config = layout
        .apply(config)
        .with_context(|| format!("{}", path.display()))?;
    if !layout.is_identity() {
        let root = layout.root.as_deref().unwrap_or(Path::new("/"));
        tracing::info!(
            root = %root.display(),
            port_offset = layout.port_offset,
            "default paths and ports moved"
        );
    }
    Ok(config)
}

async fn run<D: Daemon>(path: PathBuf, flags: Flags) -> anyhow::Result<()> {
    let config = load::<D>(&path, flags)?;
    D::check(&config).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    let shutdown = CancellationToken::new();
    let core: Core = D::start(config, shutdown.clone())
        .await
        .with_context(|| format!("starting {} from {}", D::NAME, path.display()))?
        .into();
    tracing::info!(config = %path.display(), version = D::VERSION, "{} started", D::NAME);
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
