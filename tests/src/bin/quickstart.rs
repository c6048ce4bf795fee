//! quickstart: the whole system on this machine, for real. `keadm init`, then cloudcore with its
//! embedded Kubernetes control plane; `keadm gettoken`; two edge nodes joined with `keadm join`,
//! each with its own directories and a private containerd. A Deployment of a small web server
//! built here (no registry) runs on the edge nodes and answers on its pod IPs. Then the cloud
//! stops: the edge keeps serving, lists its pods through lwproxy and restarts a crashed
//! container; the cloud comes back and catches up.
//!
//! Needs root, containerd, runc, the CNI plugins and busybox-static (`quickstart.sh` installs
//! them and builds cloudcore, edgecore and keadm, which this program runs from its own
//! directory). Every file lives under one base directory; ports are free loopback ports, so it
//! can run next to other things. Everything is undone at the end, on failure and on Ctrl-C too.

use std::future::Future;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{ExitCode, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, anyhow, bail};
use clap::Parser;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, ListParams, PostParams};
use serde_json::json;
use testkit::containerd::Containerd;
use tokio::process::{Child, Command};

/// The edge nodes, joined in this order.
const NODES: [&str; 2] = ["edge-1", "edge-2"];
/// The web server's image, built here from the host's static busybox.
const IMAGE: &str = "quickstart/web:1";
/// The image's command: a page naming its pod (the pod's hostname) served on :8080. It exits 0
/// on SIGTERM, and with httpd's status when httpd dies (a crash).
const WEB: &str = "trap 'exit 0' TERM; mkdir -p /www; \
    echo \"hello from $(hostname)\" > /www/index.html; \
    httpd -f -p 8080 -h /www & echo $! > /tmp/httpd.pid; wait $!";
/// What crashes the web server: its httpd killed.
const CRASH: &str = "kill -9 $(cat /tmp/httpd.pid)";
const REPLICAS: usize = 3;
const NAMESPACE: &str = "default";

const POLL: Duration = Duration::from_millis(250);
const API_UP: Duration = Duration::from_secs(90);
const TOKEN: Duration = Duration::from_secs(30);
const KEADM: Duration = Duration::from_secs(150);
const NODES_READY: Duration = Duration::from_secs(90);
const PODS_READY: Duration = Duration::from_secs(180);
const PAGE: Duration = Duration::from_secs(30);
const LINK: Duration = Duration::from_secs(120);
const RESTART: Duration = Duration::from_secs(120);
const CATCH_UP: Duration = Duration::from_secs(120);
const STOP_GRACE: Duration = Duration::from_secs(20);

#[derive(Parser, Debug)]
#[command(
    name = "quickstart",
    about = "Run cloudcore and two edge nodes with real pods on this machine, then undo it all"
)]
struct Args {
    /// Base directory for every file (new or empty). Default: a new directory under $TMPDIR.
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Keep the base directory at the end (it is kept anyway when a step fails).
    #[arg(long)]
    keep: bool,
    /// Where cloudcore, edgecore and keadm are. Default: this program's directory.
    #[arg(long)]
    bin_dir: Option<PathBuf>,
}

/// What the run made, so that cleanup can undo it whatever step it stopped at.
struct Quickstart {
    base: PathBuf,
    bins: PathBuf,
    cloud_ports: CloudPorts,
    cloud: Option<Daemon>,
    edges: Vec<Edge>,
    /// The log to read if the current step fails.
    log: PathBuf,
}

struct CloudPorts {
    hub: u16,
    certs: u16,
    api: u16,
    monitor: u16,
}

/// One edge node: its directories, its loopback ports and its private containerd.
struct Edge {
    name: &'static str,
    dir: PathBuf,
    monitor: u16,
    lwproxy: u16,
    containerd: Option<Containerd>,
    /// Set before `keadm join` runs, so that an interrupted join is reset too.
    joined: bool,
}

/// A child daemon (cloudcore), in its own process group so that a Ctrl-C reaches only us and
/// cleanup stops it in order.
struct Daemon {
    child: Child,
}

/// One pod as `kubectl get pods -o wide` shows it.
#[derive(Clone, Debug)]
struct PodView {
    name: String,
    node: String,
    phase: String,
    ip: Option<IpAddr>,
    ready: usize,
    containers: usize,
    restarts: i32,
    container_id: Option<String>,
}

/// What a poll check found.
enum Check<T> {
    Done(T),
    NotYet(String),
}

fn main() -> ExitCode {
    let args = Args::parse();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("quickstart: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(quickstart(args))
}

async fn quickstart(args: Args) -> ExitCode {
    let started = Instant::now();
    let mut qs = match Quickstart::new(&args) {
        Ok(qs) => qs,
        Err(e) => {
            println!("quickstart: FAILED: {e:#}");
            return ExitCode::FAILURE;
        }
    };
    let outcome = tokio::select! {
        outcome = qs.run() => outcome,
        signal = interrupted() => Err(anyhow!("interrupted by {signal}")),
    };
    if let Err(e) = &outcome {
        println!("\n==> stopped: {e:#}");
    }
    let problems = qs.cleanup().await;
    let keep = args.keep || outcome.is_err() || !problems.is_empty();
    qs.remove_base(keep);
    let took = started.elapsed().as_secs();
    let took = format!("{}m{:02}s", took / 60, took % 60);
    match (outcome, problems.is_empty()) {
        (Ok(summary), true) => {
            println!("\nquickstart: OK in {took}: {summary}");
            ExitCode::SUCCESS
        }
        (Ok(_), false) => {
            println!(
                "\nquickstart: FAILED in {took}: cleanup left problems: {}",
                problems.join("; ")
            );
            ExitCode::FAILURE
        }
        (Err(e), _) => {
            qs.explain_failure();
            println!(
                "\nquickstart: FAILED in {took}: {e:#} (log: {})",
                qs.log.display()
            );
            ExitCode::FAILURE
        }
    }
}

/// The first of Ctrl-C, SIGTERM and SIGHUP.
async fn interrupted() -> &'static str {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut hup)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::hangup()),
    ) else {
        return std::future::pending().await;
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => "Ctrl-C",
        _ = term.recv() => "SIGTERM",
        _ = hup.recv() => "SIGHUP",
    }
}

// === impl Quickstart ===

impl Quickstart {
    fn new(args: &Args) -> anyhow::Result<Quickstart> {
        let bins = match &args.bin_dir {
            Some(dir) => dir.clone(),
            None => std::env::current_exe()?
                .parent()
                .context("this program's directory")?
                .to_path_buf(),
        };
        for bin in ["cloudcore", "edgecore", "keadm"] {
            let path = bins.join(bin);
            anyhow::ensure!(
                path.is_file(),
                "{} is missing: build it (./quickstart.sh does) or pass --bin-dir",
                path.display()
            );
        }
        Containerd::available().map_err(|why| {
            anyhow!("this machine cannot run the edge nodes' containerd ({why}); ./quickstart.sh installs what is missing")
        })?;
        let base = base_dir(args.dir.as_deref())?;
        let ports = free_ports(4 + 2 * NODES.len())?;
        let edges = NODES
            .iter()
            .enumerate()
            .map(|(i, name)| Edge {
                name,
                dir: base.join(name),
                monitor: ports[4 + 2 * i],
                lwproxy: ports[5 + 2 * i],
                containerd: None,
                joined: false,
            })
            .collect();
        Ok(Quickstart {
            log: base.join("cloud/cloudcore.log"),
            cloud_ports: CloudPorts {
                hub: ports[0],
                certs: ports[1],
                api: ports[2],
                monitor: ports[3],
            },
            base,
            bins,
            cloud: None,
            edges,
        })
    }

    /// Every step, in order; the summary line on success.
    async fn run(&mut self) -> anyhow::Result<String> {
        step(format!(
            "everything goes under {} (binaries from {})",
            self.base.display(),
            self.bins.display()
        ));
        self.init_cloud().await?;
        let client = self.start_cloud("starting cloudcore").await?;
        let token = self.token().await?;
        let image = self.build_image()?;
        for i in 0..self.edges.len() {
            self.start_runtime(i, &image).await?;
            self.join(i, &token).await?;
        }
        wait_nodes_ready(&client).await?;
        deploy(&client).await?;
        let pods = self.wait_pods_ready(&client).await?;
        self.show_pods(&client).await?;
        step("asking each pod for its page, from this host, on its pod IP");
        get_pages(&pods).await?;

        self.stop_cloud().await?;
        self.wait_links(false).await?;
        step("the edge keeps serving: asking each pod again");
        get_pages(&pods).await?;
        self.list_at_edges().await?;
        let crashed = self.crash_and_restart().await?;

        let client = self
            .start_cloud("the cloud comes back: starting cloudcore again (same config and data)")
            .await?;
        step("waiting for both nodes to link again (edgehub reconnects with back-off)");
        self.wait_links(true).await?;
        let caught_up = self.catch_up(&client, &crashed).await?;
        self.show_pods(&client).await?;
        Ok(format!(
            "cloudcore and {} edge nodes joined with keadm; {REPLICAS} web pods Running and serving; \
             with the cloud stopped the edge kept serving and restarted {}; the cloud caught up (restarts {})",
            self.edges.len(),
            crashed.name,
            caught_up.restarts
        ))
    }

    // --- the cloud ---

    fn cloud_dir(&self, sub: &str) -> PathBuf {
        self.base.join("cloud").join(sub)
    }

    fn kubeconfig(&self) -> PathBuf {
        self.cloud_dir("etc").join("admin.kubeconfig")
    }

    async fn init_cloud(&mut self) -> anyhow::Result<()> {
        let p = &self.cloud_ports;
        step(format!(
            "keadm init: a CA, cloudcore's certificate and cloudcore.yaml (cloudhub on 127.0.0.1:{}, certificates on :{}, Kubernetes API on :{})",
            p.hub, p.certs, p.api
        ));
        let sets = [
            "modules.cloudHub.websocket.address=127.0.0.1".to_string(),
            format!("modules.cloudHub.websocket.port={}", p.hub),
            "modules.cloudHub.https.address=127.0.0.1".to_string(),
            format!("modules.cloudHub.https.port={}", p.certs),
            format!("modules.apiServer.bindAddress=127.0.0.1:{}", p.api),
            format!(
                "commonConfig.monitorServer.bindAddress=127.0.0.1:{}",
                p.monitor
            ),
        ];
        let mut args = vec![
            "init".to_string(),
            "--config-dir".into(),
            path_arg(&self.cloud_dir("etc")),
            "--data-dir".into(),
            path_arg(&self.cloud_dir("var")),
            "--advertise-address".into(),
            "127.0.0.1".into(),
        ];
        for set in sets {
            args.extend(["--set".to_string(), set]);
        }
        self.keadm(&args, KEADM).await.map(drop)
    }

    /// Starts cloudcore from the config `keadm init` wrote and waits for its API.
    async fn start_cloud(&mut self, what: &str) -> anyhow::Result<kube::Client> {
        let config = self.cloud_dir("etc").join("config/cloudcore.yaml");
        self.log = self.cloud_dir("cloudcore.log");
        let cloud = Daemon::spawn(
            &self.bins.join("cloudcore"),
            &["--config".into(), path_arg(&config)],
            &self.log,
        )?;
        step(format!(
            "{what} (pid {}, log {}); waiting for its Kubernetes API",
            cloud.pid(),
            self.log.display()
        ));
        self.cloud = Some(cloud);
        let client = self.wait_api().await?;
        detail(format!(
            "API up on https://127.0.0.1:{}; kubectl --kubeconfig {}",
            self.cloud_ports.api,
            self.kubeconfig().display()
        ));
        Ok(client)
    }

    async fn wait_api(&mut self) -> anyhow::Result<kube::Client> {
        let kubeconfig = self.kubeconfig();
        let cloud = &mut self.cloud;
        poll("cloudcore's Kubernetes API", API_UP, move || {
            let exited = cloud.as_mut().and_then(Daemon::exited);
            let kubeconfig = kubeconfig.clone();
            async move {
                if let Some(status) = exited {
                    bail!("cloudcore exited ({status})");
                }
                if !kubeconfig.exists() {
                    return Ok(Check::NotYet(format!("no {} yet", kubeconfig.display())));
                }
                let client = admin_client(&kubeconfig).await?;
                Ok(match client.apiserver_version().await {
                    Ok(_) => Check::Done(client),
                    Err(e) => Check::NotYet(e.to_string()),
                })
            }
        })
        .await
    }

    async fn token(&mut self) -> anyhow::Result<String> {
        step("keadm gettoken: a bootstrap token for the edge nodes");
        let args = [
            "gettoken".to_string(),
            "--config-dir".into(),
            path_arg(&self.cloud_dir("etc")),
        ];
        // cloudcore publishes its CA shortly after its API is up.
        let deadline = Instant::now() + TOKEN;
        loop {
            match self.keadm(&args, TOKEN).await {
                Ok(out) => {
                    let token = out.trim().to_string();
                    let shown = token.rsplit_once('.').map_or("", |(head, _)| head);
                    detail(format!("token {shown}.<secret>"));
                    return Ok(token);
                }
                Err(e) if Instant::now() >= deadline => return Err(e),
                Err(_) => tokio::time::sleep(Duration::from_secs(1)).await,
            }
        }
    }

    /// SIGTERM to cloudcore, and wait for it to exit.
    async fn stop_cloud(&mut self) -> anyhow::Result<()> {
        step("stopping cloudcore (SIGTERM): the edge nodes are on their own now");
        let cloud = self.cloud.take().context("cloudcore is not running")?;
        let status = cloud.stop().await?;
        detail(format!("cloudcore exited ({status})"));
        Ok(())
    }

    // --- the edge nodes ---

    /// The web server's image archive, imported into each node's containerd.
    fn build_image(&self) -> anyhow::Result<PathBuf> {
        let archive = self.base.join("images/web.tar");
        std::fs::create_dir_all(self.base.join("images"))?;
        step(format!(
            "building image {IMAGE} from this host's busybox: serves a page naming its pod with `httpd -f -p 8080`"
        ));
        testkit::image::busybox_archive(&archive, IMAGE, &["/bin/sh", "-c", WEB])
            .with_context(|| format!("building {}", archive.display()))?;
        Ok(archive)
    }

    async fn start_runtime(&mut self, i: usize, image: &Path) -> anyhow::Result<()> {
        let name = self.edges[i].name;
        step(format!(
            "{name}: starting its own containerd (private root, CNI bridge and /24) and importing {IMAGE}"
        ));
        let containerd = Containerd::start()
            .await
            .with_context(|| format!("starting {name}'s containerd"))?;
        let (net, prefix) = containerd.subnet();
        detail(format!(
            "CRI {}, pods on bridge {} {net}/{prefix}",
            containerd.endpoint(),
            containerd.bridge()
        ));
        let edge = &mut self.edges[i];
        let started = edge.containerd.insert(containerd);
        started.import(image)?;
        let cri = started.connect().await?;
        anyhow::ensure!(
            cri.image_status(IMAGE).await?.is_some(),
            "{name}'s containerd does not list {IMAGE} after importing it"
        );
        Ok(())
    }

    async fn join(&mut self, i: usize, token: &str) -> anyhow::Result<()> {
        let hub = self.cloud_ports.hub;
        let certs = self.cloud_ports.certs;
        let edgecore = path_arg(&self.bins.join("edgecore"));
        let edge = &mut self.edges[i];
        let endpoint = edge
            .containerd
            .as_ref()
            .context("no containerd")?
            .endpoint();
        step(format!(
            "keadm join {} (labels site=shop-{}): certificate from the token, edgecore.yaml, edgecore started (lwproxy on 127.0.0.1:{})",
            edge.name,
            i + 1,
            edge.lwproxy
        ));
        #[rustfmt::skip]
        let args = vec![
            "join".to_string(),
            "--cloudcore-ipport".into(), format!("127.0.0.1:{hub}"),
            "--certport".into(), certs.to_string(),
            "--token".into(), token.to_string(),
            "--edgenode-name".into(), edge.name.to_string(),
            "--config-dir".into(), path_arg(&edge.etc()),
            "--data-dir".into(), path_arg(&edge.var()),
            "--remote-runtime-endpoint".into(), endpoint,
            "--edgecore-path".into(), edgecore,
            "--labels".into(), format!("site=shop-{}", i + 1),
            "--no-systemd".into(),
            "--set".into(), format!("commonConfig.monitorServer.bindAddress=127.0.0.1:{}", edge.monitor),
            "--set".into(), format!("modules.lwProxy.server=127.0.0.1:{}", edge.lwproxy),
        ];
        edge.joined = true;
        self.log = edge.kept_log();
        self.keadm(&args, KEADM).await?;
        let connected = edge_connected(self.edges[i].monitor).await;
        anyhow::ensure!(
            connected == Some(true),
            "{} did not link to cloudcore",
            self.edges[i].name
        );
        Ok(())
    }

    /// Waits until every node's edgecore reports its link `up` (or down) on /metrics.
    async fn wait_links(&self, up: bool) -> anyhow::Result<()> {
        let want = if up { "1" } else { "0" };
        for edge in &self.edges {
            let what = format!("{}'s link to be {}", edge.name, ["down", "up"][up as usize]);
            let monitor = edge.monitor;
            poll(&what, LINK, || async move {
                Ok(match edge_connected(monitor).await {
                    Some(c) if c == up => Check::Done(()),
                    other => Check::NotYet(format!("edgehub_connected {other:?}")),
                })
            })
            .await?;
            detail(format!(
                "{}: http://127.0.0.1:{monitor}/metrics says edgehub_connected {want}",
                edge.name
            ));
        }
        Ok(())
    }

    async fn wait_pods_ready(&mut self, client: &kube::Client) -> anyhow::Result<Vec<PodView>> {
        step(format!(
            "waiting for the {REPLICAS} pods: scheduled to the edge nodes, Running and Ready"
        ));
        let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
        poll("the web pods to be Running and Ready", PODS_READY, || {
            let pods = pods.clone();
            async move {
                let views = match web_pods(&pods).await {
                    Ok(v) => v,
                    Err(e) => return Ok(Check::NotYet(format!("{e:#}"))),
                };
                let ready = views.iter().filter(|p| p.serving()).count();
                Ok(match ready == REPLICAS && views.len() == REPLICAS {
                    true => Check::Done(views),
                    false => Check::NotYet(format!("{ready} of {} ready", views.len())),
                })
            }
        })
        .await
    }

    /// `kubectl get pods -o wide` when kubectl is there, else the same table from the API.
    async fn show_pods(&self, client: &kube::Client) -> anyhow::Result<()> {
        if on_path("kubectl") {
            let kubeconfig = path_arg(&self.kubeconfig());
            step("kubectl get pods -o wide");
            let out = Command::new("kubectl")
                .args(["--kubeconfig", &kubeconfig, "get", "pods", "-o", "wide"])
                .stdin(Stdio::null())
                .kill_on_drop(true)
                .output();
            let out = tokio::time::timeout(Duration::from_secs(30), out)
                .await
                .context("kubectl took over 30s")??;
            anyhow::ensure!(
                out.status.success(),
                "kubectl get pods failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            );
            detail(String::from_utf8_lossy(&out.stdout).trim_end());
            return Ok(());
        }
        step("the pods, as the Kubernetes API lists them (kubectl is not installed)");
        let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
        print_table(&web_pods(&pods).await?);
        Ok(())
    }

    /// Each node's lwproxy lists its pods from the edge store, with no cloud.
    async fn list_at_edges(&self) -> anyhow::Result<()> {
        for edge in &self.edges {
            step(format!(
                "{}'s lwproxy (http://127.0.0.1:{}), a Kubernetes endpoint served from the edge store, lists its pods",
                edge.name, edge.lwproxy
            ));
            print_table(&web_pods(&edge.pods()?).await?);
        }
        Ok(())
    }

    /// Kills the web server of one pod on the first node and waits for edged to restart it,
    /// as the node's lwproxy shows; the page answers again.
    async fn crash_and_restart(&mut self) -> anyhow::Result<PodView> {
        let edge = &self.edges[0];
        self.log = edge.kept_log();
        let at_edge = edge.pods()?;
        let views = web_pods(&at_edge).await?;
        let victim = views
            .into_iter()
            .find(|p| p.node == edge.name && p.container_id.is_some())
            .with_context(|| format!("no running web pod on {}", edge.name))?;
        let id = victim.container_id.clone().unwrap_or_default();
        step(format!(
            "crashing {}: killing its httpd through CRI exec on {}'s containerd (container {})",
            victim.name,
            edge.name,
            &id[..id.len().min(12)]
        ));
        let cri = edge
            .containerd
            .as_ref()
            .context("no containerd")?
            .connect()
            .await?;
        let cmd = vec!["/bin/sh".to_string(), "-c".into(), CRASH.into()];
        // The exec may end with an error: its container dies under it.
        let _ = cri.exec_sync(&id, cmd, 5).await;
        step("waiting for edged to restart it, with the cloud away (the lwproxy view)");
        let name = victim.name.clone();
        let before = victim.restarts;
        let restarted = poll("edged to restart the crashed container", RESTART, || {
            let (at_edge, name) = (at_edge.clone(), name.clone());
            async move {
                let views = web_pods(&at_edge).await?;
                let now = views.into_iter().find(|p| p.name == name);
                Ok(match now {
                    Some(p) if p.restarts > before && p.serving() => Check::Done(p),
                    Some(p) => Check::NotYet(format!("restarts {}, ready {}", p.restarts, p.ready)),
                    None => Check::NotYet(format!("{name} is not listed")),
                })
            }
        })
        .await?;
        print_table(std::slice::from_ref(&restarted));
        get_pages(std::slice::from_ref(&restarted)).await?;
        Ok(restarted)
    }

    /// The API learns what happened at the edge while the cloud was away.
    async fn catch_up(
        &mut self,
        client: &kube::Client,
        crashed: &PodView,
    ) -> anyhow::Result<PodView> {
        step(format!(
            "the API catches up: {}'s restart count, reported at the edge while the cloud was away",
            crashed.name
        ));
        let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
        let name = crashed.name.clone();
        let want = crashed.restarts;
        let seen = poll("the restart to reach the API", CATCH_UP, || {
            let (pods, name) = (pods.clone(), name.clone());
            async move {
                let pod = match pods.get(&name).await {
                    Ok(p) => PodView::of(&p),
                    Err(e) => return Ok(Check::NotYet(e.to_string())),
                };
                Ok(match pod.restarts >= want && pod.serving() {
                    true => Check::Done(pod),
                    false => Check::NotYet(format!("restarts {} in the API", pod.restarts)),
                })
            }
        })
        .await?;
        detail(format!(
            "the API says {} restarts {}",
            seen.name, seen.restarts
        ));
        Ok(seen)
    }

    // --- cleanup ---

    /// Undoes everything; returns what went wrong doing so.
    async fn cleanup(&mut self) -> Vec<String> {
        step("cleaning up: keadm reset on each node, cloudcore stopped, containerds stopped");
        let mut problems = Vec::new();
        for i in 0..self.edges.len() {
            if let Err(e) = self.reset(i).await {
                problems.push(format!("{}: {e:#}", self.edges[i].name));
            }
        }
        if let Some(cloud) = self.cloud.take()
            && let Err(e) = cloud.stop().await
        {
            problems.push(format!("stopping cloudcore: {e:#}"));
        }
        for edge in &mut self.edges {
            if let Some(containerd) = edge.containerd.take() {
                containerd.stop().await;
            }
        }
        for p in &problems {
            detail(format!("problem: {p}"));
        }
        problems
    }

    /// `keadm reset` of one node (stops edgecore, removes its pods and files), its log kept.
    async fn reset(&mut self, i: usize) -> anyhow::Result<()> {
        let edge = &mut self.edges[i];
        if !edge.joined {
            return Ok(());
        }
        let _ = std::fs::copy(edge.var().join("edgecore.log"), edge.kept_log());
        if let Some(containerd) = edge.containerd.as_mut() {
            revive(containerd).await;
        }
        #[rustfmt::skip]
        let args = [
            "reset".to_string(), "--force".into(),
            "--config-dir".into(), path_arg(&edge.etc()),
            "--data-dir".into(), path_arg(&edge.var()),
        ];
        detail(format!("keadm reset {}", edge.name));
        self.keadm(&args, Duration::from_secs(90)).await.map(drop)
    }

    fn remove_base(&self, keep: bool) {
        if keep {
            println!("    kept {}", self.base.display());
            return;
        }
        if let Err(e) = std::fs::remove_dir_all(&self.base) {
            println!("    could not remove {}: {e}", self.base.display());
        }
    }

    /// The end of the log of the step that failed.
    fn explain_failure(&self) {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        if lines.is_empty() {
            return;
        }
        println!("\nlast lines of {}:", self.log.display());
        for line in &lines[lines.len().saturating_sub(20)..] {
            println!("    {line}");
        }
    }

    /// Runs keadm, shows its progress lines, and returns its stdout.
    async fn keadm(&self, args: &[String], limit: Duration) -> anyhow::Result<String> {
        let out = Command::new(self.bins.join("keadm"))
            .args(args)
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .output();
        let out = tokio::time::timeout(limit, out)
            .await
            .map_err(|_| anyhow!("keadm {} took over {limit:?}", args[0]))?
            .context("running keadm")?;
        let stderr = String::from_utf8_lossy(&out.stderr);
        if !out.status.success() {
            detail(stderr.trim_end());
            bail!("keadm {} failed ({})", args[0], out.status);
        }
        for line in stderr.lines().filter(|l| l.starts_with("[keadm]")) {
            detail(line);
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }
}

// === impl Edge ===

impl Edge {
    fn etc(&self) -> PathBuf {
        self.dir.join("etc")
    }

    fn var(&self) -> PathBuf {
        self.dir.join("var")
    }

    /// Where edgecore's log is copied before `keadm reset` removes the data dir's.
    fn kept_log(&self) -> PathBuf {
        self.dir.join("edgecore.log")
    }

    /// The pods API of this node's lwproxy (plain HTTP on loopback, no credentials).
    fn pods(&self) -> anyhow::Result<Api<Pod>> {
        let url = format!("http://127.0.0.1:{}", self.lwproxy);
        let mut config = kube::Config::new(url.parse()?);
        config.default_retry = false;
        let client = kube::Client::try_from(config)?;
        Ok(Api::namespaced(client, NAMESPACE))
    }
}

// === impl Daemon ===

impl Daemon {
    fn spawn(program: &Path, args: &[String], log: &Path) -> anyhow::Result<Daemon> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .with_context(|| format!("opening {}", log.display()))?;
        let child = Command::new(program)
            .args(args)
            .stdin(Stdio::null())
            .stdout(file.try_clone()?)
            .stderr(file)
            .process_group(0)
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting {}", program.display()))?;
        Ok(Daemon { child })
    }

    fn pid(&self) -> u32 {
        self.child.id().unwrap_or(0)
    }

    fn exited(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// SIGTERM, then SIGKILL after [`STOP_GRACE`].
    async fn stop(mut self) -> anyhow::Result<ExitStatus> {
        if let Some(pid) = self
            .child
            .id()
            .and_then(|p| rustix::process::Pid::from_raw(p as i32))
        {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
        }
        match tokio::time::timeout(STOP_GRACE, self.child.wait()).await {
            Ok(status) => Ok(status?),
            Err(_) => {
                self.child.kill().await?;
                bail!("it ignored SIGTERM for {STOP_GRACE:?} and was killed")
            }
        }
    }
}

// === impl PodView ===

impl PodView {
    fn of(pod: &Pod) -> PodView {
        let status = pod.status.clone().unwrap_or_default();
        let containers = status.container_statuses.unwrap_or_default();
        PodView {
            name: pod.metadata.name.clone().unwrap_or_default(),
            node: pod
                .spec
                .as_ref()
                .and_then(|s| s.node_name.clone())
                .unwrap_or_default(),
            phase: status.phase.unwrap_or_else(|| "Pending".into()),
            ip: status.pod_ip.and_then(|ip| ip.parse().ok()),
            ready: containers.iter().filter(|c| c.ready).count(),
            containers: pod.spec.as_ref().map_or(0, |s| s.containers.len()),
            restarts: containers.iter().map(|c| c.restart_count).sum(),
            container_id: containers
                .first()
                .and_then(|c| c.container_id.as_deref())
                .map(|id| id.trim_start_matches("containerd://").to_string()),
        }
    }

    /// Running and Ready on an edge node, with an IP.
    fn serving(&self) -> bool {
        self.phase == "Running"
            && self.ready == self.containers
            && self.ip.is_some()
            && NODES.contains(&self.node.as_str())
    }

    fn row(&self) -> String {
        let ip = self.ip.map_or("<none>".to_string(), |ip| ip.to_string());
        format!(
            "{:<24} {:<6} {:<9} {:<9} {:<15} {}",
            self.name,
            format!("{}/{}", self.ready, self.containers),
            self.phase,
            self.restarts,
            ip,
            self.node
        )
    }
}

// === steps that need only the API ===

async fn wait_nodes_ready(client: &kube::Client) -> anyhow::Result<()> {
    step("waiting for both Nodes to be Ready (edged reports node status through the link)");
    let nodes: Api<Node> = Api::all(client.clone());
    for name in NODES {
        let labels = poll(&format!("Node {name} to be Ready"), NODES_READY, || {
            let nodes = nodes.clone();
            async move {
                let node = match nodes.get_opt(name).await {
                    Ok(Some(n)) => n,
                    Ok(None) => return Ok(Check::NotYet("not registered".into())),
                    Err(e) => return Ok(Check::NotYet(e.to_string())),
                };
                let ready = node
                    .status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
                Ok(match ready {
                    true => Check::Done(node.metadata.labels.unwrap_or_default()),
                    false => Check::NotYet("not Ready".into()),
                })
            }
        })
        .await?;
        let site = labels.get("site").map_or("", String::as_str);
        detail(format!("{name} Ready (site={site})"));
    }
    Ok(())
}

async fn deploy(client: &kube::Client) -> anyhow::Result<()> {
    step(format!(
        "applying Deployment web: {REPLICAS} replicas of {IMAGE} (imagePullPolicy: Never), readiness probe GET :8080/"
    ));
    let deployment: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {
            "replicas": REPLICAS,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{
                    "name": "web",
                    "image": IMAGE,
                    "imagePullPolicy": "Never",
                    "ports": [{"containerPort": 8080}],
                    "readinessProbe": {"httpGet": {"path": "/", "port": 8080}, "periodSeconds": 2},
                }]},
            },
        },
    }))?;
    let api: Api<Deployment> = Api::namespaced(client.clone(), NAMESPACE);
    api.create(&PostParams::default(), &deployment)
        .await
        .context("creating Deployment web")?;
    Ok(())
}

/// The web pods `pods` lists, by name.
async fn web_pods(pods: &Api<Pod>) -> anyhow::Result<Vec<PodView>> {
    let list = pods.list(&ListParams::default()).await?;
    let web = |p: &&Pod| {
        let labels = p.metadata.labels.as_ref();
        labels.and_then(|l| l.get("app")).map(String::as_str) == Some("web")
    };
    let mut views: Vec<PodView> = list.items.iter().filter(web).map(PodView::of).collect();
    views.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(views)
}

/// GETs each pod's page on its IP; each must name its pod.
async fn get_pages(pods: &[PodView]) -> anyhow::Result<()> {
    for pod in pods {
        let ip = pod.ip.with_context(|| format!("{} has no IP", pod.name))?;
        let addr = SocketAddr::new(ip, 8080);
        let what = format!("{} to answer on http://{addr}/", pod.name);
        let body = poll(&what, PAGE, || async move {
            Ok(match testkit::http_get(addr, "/").await {
                Ok((200, body)) => Check::Done(body),
                Ok((code, _)) => Check::NotYet(format!("HTTP {code}")),
                Err(e) => Check::NotYet(e.to_string()),
            })
        })
        .await?;
        let body = body.trim();
        anyhow::ensure!(
            body.contains(&pod.name),
            "{addr} answered {body:?}, not naming {}",
            pod.name
        );
        detail(format!("http://{addr}/ ({}): {body}", pod.node));
    }
    Ok(())
}

// === helpers ===

/// Polls `check` until it is done, failing at once on its error and after `limit` with its
/// last reason. Each check is bounded by what is left of `limit`.
async fn poll<T, F, Fut>(what: &str, limit: Duration, mut check: F) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = anyhow::Result<Check<T>>>,
{
    let deadline = Instant::now() + limit;
    loop {
        let left = deadline
            .saturating_duration_since(Instant::now())
            .max(Duration::from_secs(1));
        let last = match tokio::time::timeout(left, check()).await {
            Ok(Ok(Check::Done(value))) => return Ok(value),
            Ok(Ok(Check::NotYet(why))) => why,
            Ok(Err(e)) => return Err(e.context(format!("waiting for {what}"))),
            Err(_) => "no answer".to_string(),
        };
        if Instant::now() >= deadline {
            bail!(
                "timed out after {}s waiting for {what} (last: {last})",
                limit.as_secs()
            );
        }
        tokio::time::sleep(POLL).await;
    }
}

/// `edgehub_connected` on an edgecore's /metrics: `None` if it does not answer.
async fn edge_connected(monitor: u16) -> Option<bool> {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, monitor));
    let get = testkit::http_get(addr, "/metrics");
    let (_, text) = tokio::time::timeout(Duration::from_secs(2), get)
        .await
        .ok()?
        .ok()?;
    let value = text
        .lines()
        .find_map(|l| l.strip_prefix("edgehub_connected "))?;
    Some(value.trim() == "1")
}

async fn admin_client(kubeconfig: &Path) -> anyhow::Result<kube::Client> {
    let parsed = kube::config::Kubeconfig::read_from(kubeconfig)?;
    let config = kube::Config::from_custom_kubeconfig(parsed, &Default::default()).await?;
    Ok(kube::Client::try_from(config)?)
}

/// A containerd killed (by a Ctrl-C that reached it too) is started again on its root, so that
/// `keadm reset` can remove the pods over CRI.
async fn revive(containerd: &mut Containerd) {
    let answers = async {
        containerd
            .connect()
            .await?
            .status()
            .await
            .map_err(anyhow::Error::from)
    };
    if matches!(
        tokio::time::timeout(Duration::from_secs(5), answers).await,
        Ok(Ok(_))
    ) {
        return;
    }
    if let Err(e) = containerd.restart().await {
        detail(format!("restarting containerd for cleanup: {e:#}"));
    }
}

/// The base directory: the one given (new or empty), or a new one under $TMPDIR.
fn base_dir(given: Option<&Path>) -> anyhow::Result<PathBuf> {
    let dir = match given {
        Some(dir) => {
            let empty = std::fs::read_dir(dir).map_or(true, |mut d| d.next().is_none());
            anyhow::ensure!(empty, "--dir {} is not empty", dir.display());
            std::fs::create_dir_all(dir)?;
            dir.to_path_buf()
        }
        None => {
            let dir = std::env::temp_dir().join(format!("quickstart-{}", std::process::id()));
            std::fs::create_dir(&dir).with_context(|| format!("creating {}", dir.display()))?;
            dir
        }
    };
    std::fs::create_dir_all(dir.join("cloud"))?;
    Ok(dir.canonicalize()?)
}

/// `n` distinct loopback ports that were free a moment ago (bound to port 0, then released).
fn free_ports(n: usize) -> anyhow::Result<Vec<u16>> {
    let listeners = (0..n)
        .map(|_| TcpListener::bind((Ipv4Addr::LOCALHOST, 0)))
        .collect::<Result<Vec<_>, _>>()
        .context("finding free loopback ports")?;
    let ports = listeners
        .iter()
        .map(|l| l.local_addr().map(|a| a.port()))
        .collect::<Result<_, _>>()?;
    Ok(ports)
}

fn on_path(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(program).is_file()))
}

fn path_arg(path: &Path) -> String {
    path.display().to_string()
}

fn print_table(pods: &[PodView]) {
    detail(format!(
        "{:<24} {:<6} {:<9} {:<9} {:<15} NODE",
        "NAME", "READY", "STATUS", "RESTARTS", "IP"
    ));
    for pod in pods {
        detail(pod.row());
    }
}

/// One step, one line.
fn step(text: impl std::fmt::Display) {
    println!("==> {text}");
}

/// Indented lines under a step.
fn detail(text: impl std::fmt::Display) {
    for line in text.to_string().lines() {
        println!("    {line}");
    }
}
