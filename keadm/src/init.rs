//! `keadm init`: everything cloudcore needs on first start, under `--config-dir` and
//! `--data-dir`. Running it again with the same flags changes nothing; with other flags it
//! refuses to overwrite unless `--force`.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context as _;
use clap::Args;

use crate::{Dirs, step, yaml};

const YEAR: Duration = Duration::from_secs(365 * 86400);

#[derive(Args, Debug, Clone)]
pub struct InitArgs {
    #[command(flatten)]
    pub dirs: Dirs,
    /// Addresses edge nodes dial cloudcore at (put in its certificate), comma separated.
    #[arg(long, value_delimiter = ',', default_value = "127.0.0.1")]
    pub advertise_address: Vec<IpAddr>,
    /// DNS names edge nodes dial cloudcore at (put in its certificate), comma separated.
    #[arg(long, value_delimiter = ',', default_value = "localhost")]
    pub dns_names: Vec<String>,
    /// Kubeconfig of a Kubernetes cluster to use; empty: cloudcore runs its embedded control
    /// plane.
    #[arg(long)]
    pub kube_config: Option<PathBuf>,
    /// Overwrite an existing cloudcore.yaml that differs, and make a new CA and certificate.
    #[arg(long)]
    pub force: bool,
    /// Set any key of cloudcore.yaml, e.g. `--set modules.cloudHub.quic.enable=true`.
    #[arg(long = "set", value_name = "KEY.PATH=VALUE")]
    pub sets: Vec<String>,
}

/// The files `keadm init` makes.
pub struct CloudPaths {
    pub config: PathBuf,
    pub ca_cert: PathBuf,
    pub ca_key: PathBuf,
    pub server_cert: PathBuf,
    pub server_key: PathBuf,
    pub admin_kubeconfig: PathBuf,
}

impl CloudPaths {
    pub fn new(config_dir: &Path) -> CloudPaths {
        CloudPaths {
            config: config_dir.join("config/cloudcore.yaml"),
            ca_cert: config_dir.join("ca/rootCA.crt"),
            ca_key: config_dir.join("ca/rootCA.key"),
            server_cert: config_dir.join("certs/server.crt"),
            server_key: config_dir.join("certs/server.key"),
            admin_kubeconfig: config_dir.join("admin.kubeconfig"),
        }
    }
}

pub fn run(args: &InitArgs) -> anyhow::Result<()> {
    let paths = CloudPaths::new(&args.dirs.config_dir);
    let text = cloudcore_yaml(args, &paths)?;
    let unchanged = match std::fs::read_to_string(&paths.config) {
        Ok(old) if old == text => true,
        Ok(_) if !args.force => anyhow::bail!(
            "{} exists with other settings; keadm init does not overwrite it without --force",
            paths.config.display()
        ),
        Ok(_) => false,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => false,
        Err(e) => return Err(e).with_context(|| format!("reading {}", paths.config.display())),
    };
    if unchanged && !args.force && paths.ca_cert.exists() && paths.server_cert.exists() {
        step(format!(
            "already initialised: {} is up to date; nothing changed",
            paths.config.display()
        ));
        next_steps(&paths, args);
        return Ok(());
    }
    let ca = match (paths.ca_cert.exists() || paths.ca_key.exists()) && !args.force {
        true => {
            step(format!("keeping the CA in {}", paths.ca_cert.display()));
            pki::Ca::from_pem(
                &pki::read_ca_file(&paths.ca_cert)?,
                &pki::read_key_file(&paths.ca_key)?,
            )
            .with_context(|| format!("reading the CA in {}", paths.ca_cert.display()))?
        }
        false => {
            let ca = pki::Ca::generate("KubeEdge", 10 * YEAR)?;
            pki::write_pem(&paths.ca_cert, ca.cert_pem())?;
            pki::write_pem(&paths.ca_key, &ca.key_pem())?;
            step(format!("created the CA: {}", paths.ca_cert.display()));
            ca
        }
    };
    let hosts = pki::server_hosts(&args.advertise_address, &args.dns_names);
    let server = ca.issue_server(&hosts, 10 * YEAR)?;
    pki::write_pem(&paths.server_cert, &server.cert_pem)?;
    pki::write_pem(&paths.server_key, &server.key_pem)?;
    step(format!(
        "issued cloudcore's certificate for {}: {}",
        hosts.join(", "),
        paths.server_cert.display()
    ));
    write_file(&paths.config, &text)?;
    step(format!("wrote {}", paths.config.display()));
    next_steps(&paths, args);
    Ok(())
}

/// cloudcore.yaml for these flags, checked by cloudcore's own parser.
pub fn cloudcore_yaml(args: &InitArgs, paths: &CloudPaths) -> anyhow::Result<String> {
    let (c, d) = (&args.dirs.config_dir, &args.dirs.data_dir);
    let s = |p: PathBuf| p.display().to_string();
    let tree = yaml::from_json(serde_json::json!({
        "apiVersion": cloudcore::API_VERSION,
        "kind": cloudcore::KIND,
        "kubeAPIConfig": { "kubeConfig": args.kube_config.clone().map(s).unwrap_or_default() },
        "modules": {
            "cloudHub": {
                "advertiseAddress": args.advertise_address.iter().map(|a| a.to_string()).collect::<Vec<_>>(),
                "dnsNames": args.dns_names,
                "tlsCAFile": s(paths.ca_cert.clone()),
                "tlsCAKeyFile": s(paths.ca_key.clone()),
                "tlsCertFile": s(paths.server_cert.clone()),
                "tlsPrivateKeyFile": s(paths.server_key.clone()),
            },
            "apiServer": {
                "dataSource": s(d.join("apiserver.db")),
                "tlsCAFile": s(c.join("apiserver/ca.crt")),
                "tlsCAKeyFile": s(c.join("apiserver/ca.key")),
                "tlsCertFile": s(c.join("apiserver/server.crt")),
                "tlsPrivateKeyFile": s(c.join("apiserver/server.key")),
                "tokenFile": s(c.join("apiserver/admin.token")),
                "adminKubeconfig": s(paths.admin_kubeconfig.clone()),
            },
        },
    }));
    yaml::config_file::<cloudcore::Config>(
        tree,
        &args.sets,
        "cloudcore configuration, written by keadm init; every option: cloudcore --defaultconfig",
        &paths.config,
        "cloudcore.yaml",
    )
}

fn next_steps(paths: &CloudPaths, args: &InitArgs) {
    let cloud = args
        .advertise_address
        .first()
        .map(|a| a.to_string())
        .unwrap_or_else(|| "<cloud address>".into());
    let hub = daemon::load_yaml::<cloudcore::Config>(&paths.config)
        .map(|c| c.modules.cloud_hub)
        .unwrap_or_default();
    let certport = match hub.https.port {
        10002 => String::new(),
        port => format!(" --certport {port}"),
    };
    let ws = hub.websocket.port;
    let kubeconfig = args
        .kube_config
        .as_ref()
        .unwrap_or(&paths.admin_kubeconfig)
        .display()
        .to_string();
    eprintln!(
        "\nNext steps:\n  1. start cloudcore:        cloudcore --config {}\n  2. get a token:            keadm gettoken --kube-config {kubeconfig}\n  3. on each edge machine:   keadm join --cloudcore-ipport {cloud}:{ws}{certport} --token <token>",
        paths.config.display()
    );
}

/// Writes a file, making its directory.
pub(crate) fn write_file(path: &Path, text: &str) -> anyhow::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
}
