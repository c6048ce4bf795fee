//! `keadm join`: one command from a token to a running edge node. Each step prints a line; each
//! failure says what to do. The CA is downloaded without trusting the server, then pinned by the
//! hash in the token: everything after (the CSR with the token, and edgehub's link) is verified
//! against that CA and the address dialled.

use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use bootstrap::https::{self, HttpsError};
use bootstrap::{Token, paths};
use clap::{Args, ValueEnum};

use crate::init::write_file;
use crate::{Dirs, step, yaml};

const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// How long `join` waits for the new node's link to come up before it gives up waiting.
const LINK_WAIT: Duration = Duration::from_secs(60);

#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum HubProtocol {
    Websocket,
    Quic,
}

#[derive(Args, Debug, Clone)]
pub struct JoinArgs {
    #[command(flatten)]
    pub dirs: Dirs,
    /// cloudcore's address and WebSocket port, as edge nodes reach it (HOST:10000).
    #[arg(long)]
    pub cloudcore_ipport: String,
    /// Bootstrap token from `keadm gettoken` (<ca-hash>.<id>.<secret>).
    #[arg(long)]
    pub token: String,
    /// This node's name. Default: the host name.
    #[arg(long)]
    pub edgenode_name: Option<String>,
    /// Port of cloudcore's certificate service.
    #[arg(long, default_value_t = 10002)]
    pub certport: u16,
    /// Port of cloudcore's QUIC listener (with --hub-protocol quic).
    #[arg(long, default_value_t = 10001)]
    pub quicport: u16,
    /// Transport of the link to cloudcore.
    #[arg(long, value_enum, default_value = "websocket")]
    pub hub_protocol: HubProtocol,
    /// The CRI runtime socket edged uses.
    #[arg(long, default_value = "unix:///run/containerd/containerd.sock")]
    pub remote_runtime_endpoint: String,
    /// Labels for the node, k=v comma separated.
    #[arg(long, value_delimiter = ',')]
    pub labels: Vec<String>,
    /// Set any key of edgecore.yaml, e.g. `--set modules.lwProxy.server=127.0.0.1:10551`.
    #[arg(long = "set", value_name = "KEY.PATH=VALUE")]
    pub sets: Vec<String>,
    /// The edgecore binary. Default: next to keadm, else on $PATH.
    #[arg(long)]
    pub edgecore_path: Option<PathBuf>,
    /// Run edgecore in the foreground (keadm becomes edgecore) instead of as a service.
    #[arg(long)]
    pub foreground: bool,
    /// Write everything but do not start edgecore.
    #[arg(long)]
    pub no_start: bool,
    /// Start edgecore as a detached process (pid file in the data dir) even when systemd runs:
    /// for several nodes on one machine, as the quickstart makes.
    #[arg(long)]
    pub no_systemd: bool,
}

/// The files `keadm join` makes.
pub struct EdgePaths {
    pub config: PathBuf,
    pub ca_cert: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
    pub database: PathBuf,
    pub pid: PathBuf,
    pub log: PathBuf,
    pub unit: PathBuf,
}

impl EdgePaths {
    pub fn new(dirs: &Dirs) -> EdgePaths {
        let (c, d) = (&dirs.config_dir, &dirs.data_dir);
        EdgePaths {
            config: c.join("config/edgecore.yaml"),
            ca_cert: c.join("ca/rootCA.crt"),
            cert: c.join("certs/edgecore.crt"),
            key: c.join("certs/edgecore.key"),
            database: d.join("edgecore.db"),
            pid: d.join("edgecore.pid"),
            log: d.join("edgecore.log"),
            unit: d.join("edgecore.unit"),
        }
    }
}

pub async fn run(args: &JoinArgs) -> anyhow::Result<()> {
    let paths = EdgePaths::new(&args.dirs);
    if paths.config.exists() {
        anyhow::bail!(
            "this machine has already joined: {} exists; run `keadm reset{}` first",
            paths.config.display(),
            dirs_flags(&args.dirs)
        );
    }
    let token = Token::parse(&args.token)?;
    let node = match &args.edgenode_name {
        Some(n) => n.clone(),
        None => hostname()?,
    };
    if !pki::valid_node_name(&node) {
        anyhow::bail!(
            "the node name {node:?} is not a valid Kubernetes node name (lowercase letters, digits, '-' and '.'); pass --edgenode-name"
        );
    }
    let host = https::host_of(&args.cloudcore_ipport).ok_or_else(|| {
        anyhow::anyhow!(
            "--cloudcore-ipport {:?} is not HOST:PORT",
            args.cloudcore_ipport
        )
    })?;
    let cert_addr = match host.contains(':') {
        true => format!("[{host}]:{}", args.certport),
        false => format!("{host}:{}", args.certport),
    };

    step(format!(
        "fetching the CA from https://{cert_addr}{}",
        paths::CA
    ));
    let (unverified, _) = https::unverified();
    let resp = https::request(
        &cert_addr,
        unverified,
        http::Method::GET,
        paths::CA,
        &[],
        Vec::new(),
        REQUEST_TIMEOUT,
    )
    .await
    .map_err(unreachable)?;
    if resp.status != 200 {
        anyhow::bail!("{cert_addr} answered {} for {}", resp.status, paths::CA);
    }
    let local = bootstrap::Timestamp::now().as_second();
    let skew = https::clock_skew(&resp, local);
    if let Some(skew) = skew.filter(|s| s.abs() >= 60) {
        step(format!("warning: {}", skew_text(skew, local)));
    }
    let ca_pem = String::from_utf8(resp.body).context("the CA is not text")?;
    let hash = bootstrap::ca_hash(&ca_pem).context("the CA cloudcore sent is unreadable")?;
    if hash != token.ca_hash {
        anyhow::bail!(
            "CA hash mismatch: the CA at {cert_addr} has SHA-256 {hash}, but the token expects {}; the token is for another cloud (or something is between you and it): get a token from this cloud with `keadm gettoken`",
            token.ca_hash
        );
    }
    step(format!(
        "the CA matches the token's hash ({}...)",
        &hash[..16]
    ));

    step(format!("requesting a certificate for node {node:?}"));
    let (csr, key) = pki::node_csr(&node)?;
    let tls = pki::client_config(&ca_pem, None, &[b"http/1.1"])?;
    let resp = https::request(
        &cert_addr,
        Arc::new(tls),
        http::Method::POST,
        paths::EDGE_CERT,
        &[
            ("authorization", format!("Bearer {token}")),
            ("content-type", "application/x-pem-file".into()),
        ],
        csr.into_bytes(),
        REQUEST_TIMEOUT,
    )
    .await
    .map_err(|e| match (&e, skew) {
        (HttpsError::ClockBehind { addr, .. }, Some(skew)) => anyhow::anyhow!(
            "TLS with {addr} failed: the cloud's certificate is not valid yet by this machine's clock: {}",
            skew_text(skew, bootstrap::Timestamp::now().as_second())
        ),
        _ => unreachable(e),
    })?;
    if resp.status != 200 {
        anyhow::bail!(
            "the certificate service refused to sign ({}): {}",
            resp.status,
            status_message(&resp.body)
        );
    }
    let cert_pem = String::from_utf8(resp.body).context("the certificate is not text")?;
    let (_, until) = pki::validity(&cert_pem)?;
    step(format!(
        "got the node certificate (CN system:node:{node}, valid until {})",
        bootstrap::Timestamp::from_second(until)
            .map(|t| t.to_string())
            .unwrap_or_else(|_| until.to_string())
    ));

    pki::write_pem(&paths.ca_cert, &ca_pem)?;
    pki::write_pem(&paths.key, &key)?;
    pki::write_pem(&paths.cert, &cert_pem)?;
    let text = edgecore_yaml(args, &paths, &node, &host)?;
    write_file(&paths.config, &text)?;
    step(format!(
        "wrote {} and the certificates in {}",
        paths.config.display(),
        paths.cert.parent().unwrap_or(Path::new("/")).display()
    ));
    start(args, &paths, &node)
}

/// edgecore.yaml for this node, checked by edgecore's own parser.
pub fn edgecore_yaml(
    args: &JoinArgs,
    paths: &EdgePaths,
    node: &str,
    host: &str,
) -> anyhow::Result<String> {
    let (c, d) = (&args.dirs.config_dir, &args.dirs.data_dir);
    let s = |p: &Path| p.display().to_string();
    let bracket = |port: u16| match host.contains(':') {
        true => format!("[{host}]:{port}"),
        false => format!("{host}:{port}"),
    };
    let mut labels = serde_json::Map::new();
    for label in args.labels.iter().filter(|l| !l.is_empty()) {
        let (k, v) = label.split_once('=').unwrap_or((label.as_str(), ""));
        labels.insert(k.to_string(), serde_json::Value::String(v.to_string()));
    }
    let tree = yaml::from_json(serde_json::json!({
        "apiVersion": edgecore::API_VERSION,
        "kind": edgecore::KIND,
        "database": { "dataSource": s(&paths.database) },
        "modules": {
            "edgeHub": {
                "nodeName": node,
                "tlsCaFile": s(&paths.ca_cert),
                "tlsCertFile": s(&paths.cert),
                "tlsPrivateKeyFile": s(&paths.key),
                "httpServer": format!("https://{}", bracket(args.certport)),
                "websocket": {
                    "enable": args.hub_protocol == HubProtocol::Websocket,
                    "server": args.cloudcore_ipport,
                },
                "quic": {
                    "enable": args.hub_protocol == HubProtocol::Quic,
                    "server": bracket(args.quicport),
                },
            },
            "edged": {
                "enable": true,
                "remoteRuntimeEndpoint": args.remote_runtime_endpoint,
                "rootDirectory": s(&d.join("kubelet")),
                "podLogsDirectory": s(&d.join("pods")),
                "staticPodPath": s(&c.join("manifests")),
                "nodeLabels": labels,
            },
        },
    }));
    yaml::config_file::<edgecore::Config>(
        tree,
        &args.sets,
        "edgecore configuration, written by keadm join; every option: edgecore --defaultconfig",
        &paths.config,
        "edgecore.yaml",
    )
}

/// Starts edgecore as the flags say.
fn start(args: &JoinArgs, paths: &EdgePaths, node: &str) -> anyhow::Result<()> {
    if args.no_start {
        step(format!(
            "not starting edgecore (--no-start); start it with: edgecore --config {}",
            paths.config.display()
        ));
        return Ok(());
    }
    let edgecore = edgecore_binary(args.edgecore_path.as_deref())?;
    if args.foreground {
        step(format!(
            "running edgecore in the foreground ({})",
            edgecore.display()
        ));
        let err = std::process::Command::new(&edgecore)
            .arg("--config")
            .arg(&paths.config)
            .exec();
        anyhow::bail!("cannot run {}: {err}", edgecore.display());
    }
    if !args.no_systemd && systemd_runs() {
        let unit = unit_name(&args.dirs, node);
        let file = PathBuf::from(format!("/etc/systemd/system/{unit}.service"));
        let text = format!(
            "[Unit]\nDescription=edgecore: KubeEdge edge node {node}\nAfter=network-online.target containerd.service\nWants=network-online.target\n\n[Service]\nExecStart={} --config {}\nRestart=always\nRestartSec=5\n\n[Install]\nWantedBy=multi-user.target\n",
            edgecore.display(),
            paths.config.display()
        );
        write_file(&file, &text)?;
        write_file(&paths.unit, &unit)?;
        systemctl(&["daemon-reload"])?;
        systemctl(&["enable", "--now", &unit])?;
        step(format!(
            "edgecore runs as systemd unit {unit} (journalctl -u {unit})"
        ));
        return wait_for_link(paths, None);
    }
    if let Some(dir) = paths.log.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&paths.log)
        .with_context(|| format!("opening {}", paths.log.display()))?;
    let child = std::process::Command::new(&edgecore)
        .arg("--config")
        .arg(&paths.config)
        .stdin(std::process::Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        // Its own process group: a Ctrl-C meant for keadm does not stop it.
        .process_group(0)
        .spawn()
        .with_context(|| format!("starting {}", edgecore.display()))?;
    write_file(&paths.pid, &child.id().to_string())?;
    step(format!(
        "edgecore started (pid {}, log {})",
        child.id(),
        paths.log.display()
    ));
    wait_for_link(paths, Some(child))
}

/// Waits until edgecore's monitor reports the link up.
fn wait_for_link(paths: &EdgePaths, mut child: Option<std::process::Child>) -> anyhow::Result<()> {
    let config: edgecore::Config = daemon::load_yaml(&paths.config)?;
    let monitor = &config.common_config.monitor_server;
    if !monitor.enable {
        step("the monitor server is disabled: not waiting for the link");
        return Ok(());
    }
    step("waiting for the link to cloudcore");
    let deadline = Instant::now() + LINK_WAIT;
    while Instant::now() < deadline {
        if let Some(c) = child.as_mut()
            && let Ok(Some(status)) = c.try_wait()
        {
            anyhow::bail!(
                "edgecore exited ({status}); its log {} ends with:\n{}",
                paths.log.display(),
                tail(&paths.log, 15)
            );
        }
        if metrics(monitor.bind_address)
            .is_some_and(|m| m.lines().any(|l| l.trim() == "edgehub_connected 1"))
        {
            step("this node is connected to cloudcore: joined");
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    step(format!(
        "edgecore runs but has not linked to cloudcore within {LINK_WAIT:?}; see {}",
        paths.log.display()
    ));
    Ok(())
}

fn metrics(addr: std::net::SocketAddr) -> Option<String> {
    let mut tcp = TcpStream::connect_timeout(&addr, Duration::from_secs(1)).ok()?;
    tcp.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    tcp.write_all(b"GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n")
        .ok()?;
    let mut text = String::new();
    tcp.read_to_string(&mut text).ok()?;
    Some(text)
}

fn tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// The systemd unit of this node: `edgecore`, or `edgecore-<node>` when the config dir is not
/// the default (several nodes on one machine).
fn unit_name(dirs: &Dirs, node: &str) -> String {
    match dirs.config_dir == Path::new(crate::CONFIG_DIR) {
        true => "edgecore".into(),
        false => format!("edgecore-{node}"),
    }
}

pub(crate) fn systemd_runs() -> bool {
    Path::new("/run/systemd/system").is_dir()
}

pub(crate) fn systemctl(args: &[&str]) -> anyhow::Result<()> {
    let status = std::process::Command::new("systemctl")
        .args(args)
        .status()
        .with_context(|| format!("running systemctl {}", args.join(" ")))?;
    anyhow::ensure!(
        status.success(),
        "systemctl {} failed: {status}",
        args.join(" ")
    );
    Ok(())
}

fn edgecore_binary(given: Option<&Path>) -> anyhow::Result<PathBuf> {
    if let Some(p) = given {
        anyhow::ensure!(
            p.is_file(),
            "--edgecore-path {} does not exist",
            p.display()
        );
        return Ok(p.to_path_buf());
    }
    let beside = std::env::current_exe()
        .ok()
        .and_then(|e| e.parent().map(|d| d.join("edgecore")));
    if let Some(p) = beside.filter(|p| p.is_file()) {
        return Ok(p);
    }
    let on_path = std::env::var_os("PATH")
        .map(|p| {
            std::env::split_paths(&p)
                .map(|d| d.join("edgecore"))
                .collect::<Vec<_>>()
        })
        .unwrap_or_default()
        .into_iter()
        .find(|p| p.is_file());
    on_path.ok_or_else(|| {
        anyhow::anyhow!("no edgecore binary next to keadm or on $PATH; pass --edgecore-path")
    })
}

fn hostname() -> anyhow::Result<String> {
    let name = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .context("reading the host name; pass --edgenode-name")?;
    Ok(name.trim().to_ascii_lowercase())
}

/// The `message` of a Kubernetes `Status` body, or the body itself.
fn status_message(body: &[u8]) -> String {
    serde_json::from_slice::<serde_json::Value>(body)
        .ok()
        .and_then(|v| v.get("message").and_then(|m| m.as_str()).map(String::from))
        .unwrap_or_else(|| String::from_utf8_lossy(body).into_owned())
}

/// The skew `skew` (this clock minus the cloud's, seconds) told with both clocks.
fn skew_text(skew: i64, local: i64) -> String {
    let way = if skew > 0 { "ahead of" } else { "behind" };
    let at = |secs: i64| {
        bootstrap::Timestamp::from_second(secs)
            .map(|t| t.to_string())
            .unwrap_or_else(|_| secs.to_string())
    };
    format!(
        "the edge clock is {} s {way} the cloud (edge: {}, cloud: {}); set this machine's time (NTP)",
        skew.abs(),
        at(local),
        at(local - skew)
    )
}

fn unreachable(e: HttpsError) -> anyhow::Error {
    match e {
        HttpsError::Connect { .. } | HttpsError::Timeout { .. } => anyhow::anyhow!(
            "{e}: is cloudcore running there, with its certificate service (modules.cloudHub.https) on that port, and is the port open?"
        ),
        e => e.into(),
    }
}

pub(crate) fn dirs_flags(dirs: &Dirs) -> String {
    let mut flags = String::new();
    if dirs.config_dir != Path::new(crate::CONFIG_DIR) {
        flags += &format!(" --config-dir {}", dirs.config_dir.display());
    }
    if dirs.data_dir != Path::new(crate::DATA_DIR) {
        flags += &format!(" --data-dir {}", dirs.data_dir.display());
    }
    flags
}
