//! `keadm gettoken` and `keadm token list|delete`: bootstrap tokens in the Kubernetes API
//! cloudcore uses (its embedded control plane's admin kubeconfig by default).

use std::path::PathBuf;

use anyhow::Context as _;
use bootstrap::{Timestamp, store};
use clap::{Args, Subcommand};

use crate::CONFIG_DIR;

#[derive(Args, Debug, Clone)]
pub struct KubeArgs {
    /// Kubeconfig of the Kubernetes API cloudcore uses. Default: the embedded control plane's
    /// admin kubeconfig (`<config-dir>/admin.kubeconfig`) if it exists, else $KUBECONFIG, else
    /// ~/.kube/config.
    #[arg(long)]
    pub kube_config: Option<PathBuf>,
    /// Configuration directory of `keadm init`.
    #[arg(long, default_value = CONFIG_DIR)]
    pub config_dir: PathBuf,
}

#[derive(Args, Debug, Clone)]
pub struct GettokenArgs {
    #[command(flatten)]
    pub kube: KubeArgs,
    /// How long the token is valid (`30m`, `24h`).
    #[arg(long, default_value = "24h", value_parser = parse_ttl)]
    pub ttl: std::time::Duration,
    /// A note shown by `keadm token list`.
    #[arg(long, default_value = "")]
    pub description: String,
}

#[derive(Subcommand, Debug, Clone)]
pub enum TokenCommand {
    /// List the tokens: id, expiry, state (valid, expired, revoked), description.
    List {
        #[command(flatten)]
        kube: KubeArgs,
    },
    /// Revoke a token (by id, or the whole token): joins with it are refused from now on.
    Delete {
        #[command(flatten)]
        kube: KubeArgs,
        /// Token id (the part after the CA hash), or the whole token.
        token: String,
    },
}

fn parse_ttl(s: &str) -> Result<std::time::Duration, String> {
    daemon::duration::parse(s)
}

pub(crate) async fn client(args: &KubeArgs) -> anyhow::Result<kube::Client> {
    let path = match &args.kube_config {
        Some(p) => p.clone(),
        None => {
            let admin = args.config_dir.join("admin.kubeconfig");
            match admin.exists() {
                true => admin,
                false => {
                    return kube::Client::try_default().await.context(
                        "no --kube-config, no admin.kubeconfig in the config dir, and no usable default kubeconfig",
                    );
                }
            }
        }
    };
    let what = || format!("reading kubeconfig {}", path.display());
    let kubeconfig = kube::config::Kubeconfig::read_from(&path).with_context(what)?;
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .with_context(what)?;
    kube::Client::try_from(config).with_context(what)
}

pub async fn gettoken(args: &GettokenArgs) -> anyhow::Result<()> {
    let token = issue(args).await?;
    println!("{token}");
    Ok(())
}

/// Issues a token (what `keadm gettoken` prints).
pub async fn issue(args: &GettokenArgs) -> anyhow::Result<bootstrap::Token> {
    let client = client(&args.kube).await?;
    let ca = store::read_ca(&client).await?.ok_or_else(|| {
        anyhow::anyhow!(
            "cloudcore has not published its CA (configmap {}/{}): is cloudcore running with this Kubernetes API?",
            store::NAMESPACE,
            store::CA_CONFIGMAP
        )
    })?;
    let hash = bootstrap::ca_hash(&ca).context("the published CA is unreadable")?;
    let (token, info) = store::create_token(&client, &hash, args.ttl, &args.description).await?;
    eprintln!("[keadm] token {} valid until {}", info.id, info.expires);
    Ok(token)
}

pub async fn token(command: &TokenCommand) -> anyhow::Result<()> {
    match command {
        TokenCommand::List { kube } => {
            let client = client(kube).await?;
            let now = Timestamp::now();
            println!("{:<8} {:<28} {:<8} DESCRIPTION", "ID", "EXPIRES", "STATE");
            for t in store::list_tokens(&client).await? {
                println!(
                    "{:<8} {:<28} {:<8} {}",
                    t.id,
                    t.expires.to_string(),
                    t.state(now),
                    t.description
                );
            }
            Ok(())
        }
        TokenCommand::Delete { kube, token } => {
            let id = match bootstrap::Credential::parse(token) {
                Ok(c) => c.id,
                Err(_) => token.clone(),
            };
            let client = client(kube).await?;
            store::revoke_token(&client, &id).await?;
            eprintln!("[keadm] token {id} revoked");
            Ok(())
        }
    }
}
