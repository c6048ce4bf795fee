//! keadm: sets a cloud up and joins edge nodes to it, as KubeEdge's keadm does.
//! - `keadm init`: the CA, cloudcore's serving certificate and `cloudcore.yaml`.
//! - `keadm gettoken`, `keadm token list|delete`: bootstrap tokens, kept (hashed) in the
//!   Kubernetes API cloudcore uses.
//! - `keadm join`: fetches the CA (pinned by the token's hash), gets a node certificate for a
//!   new key, writes `edgecore.yaml` and the certificates, and starts edgecore.
//! - `keadm revoke NODE`: refuses every certificate issued for a node so far (its sessions and
//!   renewals), and deletes its join record and Node so the name may join again.
//! - `keadm reset`: stops edgecore, removes the pods edged made, its config, certificates and
//!   data.
//!
//! Every path derives from `--config-dir` and `--data-dir`, so several nodes can live on one
//! machine; `--set key.path=value` sets any key of the config file written.
#![forbid(unsafe_code)]

mod init;
mod join;
mod reset;
mod revoke;
mod tokens;
mod yaml;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

pub use init::InitArgs;
pub use join::JoinArgs;
pub use reset::ResetArgs;
pub use revoke::RevokeArgs;
pub use tokens::{GettokenArgs, TokenCommand, issue as issue_token};

/// Default configuration directory (KubeEdge's).
pub const CONFIG_DIR: &str = "/etc/kubeedge";
/// Default data directory (KubeEdge's).
pub const DATA_DIR: &str = "/var/lib/kubeedge";

#[derive(Parser, Debug)]
#[command(
    name = "keadm",
    version,
    about = "Set up a KubeEdge-style cloud and join edge nodes to it",
    long_about = None
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Create the CA, cloudcore's certificate and cloudcore.yaml (on the cloud machine).
    Init(InitArgs),
    /// Issue a bootstrap token for `keadm join` (prints it on stdout).
    Gettoken(GettokenArgs),
    /// List or revoke bootstrap tokens.
    Token {
        #[command(subcommand)]
        command: TokenCommand,
    },
    /// Join this machine to a cloud as an edge node, and start edgecore.
    Join(JoinArgs),
    /// Stop edgecore and remove what `keadm join` set up here.
    Reset(ResetArgs),
    /// Remove an edge node from the cloud for good: refuse its certificates (sessions and
    /// renewals), delete its join record and Node (on the cloud machine).
    Revoke(RevokeArgs),
}

/// Where files go.
#[derive(Args, Debug, Clone)]
pub struct Dirs {
    /// Configuration directory: config/, ca/, certs/ go under it.
    #[arg(long, default_value = CONFIG_DIR)]
    pub config_dir: PathBuf,
    /// Data directory: databases, pod volumes and logs go under it.
    #[arg(long, default_value = DATA_DIR)]
    pub data_dir: PathBuf,
}

/// The whole program.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("keadm: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("keadm: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Runs one command.
pub async fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Init(a) => init::run(&a),
        Command::Gettoken(a) => tokens::gettoken(&a).await,
        Command::Token { command } => tokens::token(&command).await,
        Command::Join(a) => join::run(&a).await,
        Command::Reset(a) => reset::run(&a).await,
        Command::Revoke(a) => revoke::run(&a).await,
    }
}

/// Progress, one line per step, on stderr (stdout carries only results such as a token).
pub(crate) fn step(text: impl std::fmt::Display) {
    eprintln!("[keadm] {text}");
}
