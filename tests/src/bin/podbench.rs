//! podbench: edged's pod start and memory on a real containerd. A cloudcore (embedded control
//! plane) runs in this process, edgecore with edged as a child process (the `e2e-edgecore`
//! binary beside this one), containerd privately (testkit's harness). Each round creates
//! `--pods` pods at once in the cloud and times each until the cloud's API shows it Running
//! and ready; then deletes them and waits until the runtime holds nothing. Reported: start
//! p50/p99/max per round, and the resident memory of edgecore idle (no pod) and with the pods,
//! containerd's and the shims' apart; and the CPU edgecore and containerd use while the pods
//! sit idle (`--idle-secs`). Needs root and containerd, runc, the CNI plugins and
//! busybox-static (as the edged tests do).
//!
//! `cargo build --release -p e2e --bin podbench --bin e2e-edgecore && target/release/podbench`

use std::collections::HashMap;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use clap::Parser;
use e2e::bench::{cpu_percent, percentile_ms, rss_kib, wait_node_ready};
use e2e::{Pki, Ports};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, PostParams};
use kube::runtime::watcher;
use serde_json::json;
use testkit::containerd::{BUSYBOX_IMAGE, Containerd, WAIT_FOR_TERM};

#[derive(Parser)]
struct Args {
    /// Pods created at once each round.
    #[arg(long, default_value_t = 20)]
    pods: usize,
    /// Rounds.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Instead: the runtime's own floor, the same pods started straight through CRI (sandbox,
    /// create, start) with no edgecore or cloud.
    #[arg(long)]
    cri_only: bool,
    /// Seconds each round holds its pods idle (all Running, nothing changing) while the CPU
    /// edgecore and containerd use is measured; 0: not measured.
    #[arg(long, default_value_t = 30)]
    idle_secs: u64,
}

const NODE: &str = "bench-edge";
const LIMIT: Duration = Duration::from_secs(120);

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    Containerd::available().map_err(anyhow::Error::msg)?;
    let containerd = Containerd::start().await?;
    let result = if args.cri_only {
        cri_floor(&args, &containerd).await
    } else {
        run(&args, &containerd).await
    };
    containerd.stop().await;
    result
}

async fn run(args: &Args, containerd: &Containerd) -> anyhow::Result<()> {
    let pki = Pki::new();
    let dir = tempfile::tempdir()?;
    let cloud = e2e::k8s_cloud(&pki, Ports::default()).await;
    let transport = link::Transport::WebSocket;
    let mut config = e2e::edge_config(
        &pki.node(NODE),
        cloud.addr(transport),
        transport,
        &dir.path().join("edge.db"),
    );
    let edged = &mut config.modules.edged;
    edged.enable = true;
    edged.remote_runtime_endpoint = containerd.endpoint();
    edged.root_directory = dir.path().join("kubelet");
    edged.static_pod_path = dir.path().join("manifests");
    edged.pod_logs_directory = dir.path().join("pod-logs");
    let bin = std::env::current_exe()?.with_file_name("e2e-edgecore");
    anyhow::ensure!(bin.exists(), "build e2e-edgecore too: {}", bin.display());
    let edgecore = e2e::spawn_edgecore(bin.to_str().context("path")?, &config, dir.path());
    let pid = edgecore.0.id();
    let client = cloud.kube().await;
    wait_node_ready(&client, NODE, LIMIT).await?;
    // Let start-up allocations settle before the idle figure.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let idle = rss_kib(pid)?;
    println!("edgecore rss idle (edged on, 0 pods): {:.1} MiB", mib(idle));
    let pods: Api<Pod> = Api::namespaced(client, "default");
    for round in 1..=args.rounds {
        let mut starts = start_round(&pods, args.pods, round).await?;
        starts.sort();
        let with_pods = rss_kib(pid)?;
        let (containerd_kib, shims_kib) = runtime_rss(containerd);
        println!(
            "round {round}: {} pods Running in the cloud's view: p50 {:.0} ms, p99 {:.0} ms, max {:.0} ms; edgecore rss {:.1} MiB; containerd {:.1} MiB, shims {:.1} MiB",
            starts.len(),
            percentile_ms(&starts, 0.5),
            percentile_ms(&starts, 0.99),
            percentile_ms(&starts, 1.0),
            mib(with_pods),
            mib(containerd_kib),
            mib(shims_kib),
        );
        if args.idle_secs > 0 {
            let period = Duration::from_secs(args.idle_secs);
            let (edge, runtime) = tokio::join!(
                cpu_percent(pid, period),
                cpu_percent(containerd.pid(), period)
            );
            println!(
                "round {round}: {} pods idle for {} s: edgecore {:.1} % of a core, containerd {:.1} %; edgecore rss {:.1} MiB",
                args.pods,
                args.idle_secs,
                edge?,
                runtime?,
                mib(rss_kib(pid)?),
            );
        }
        delete_round(&pods, containerd).await?;
    }
    drop(edgecore);
    cloud.stop().await;
    Ok(())
}

/// `--pods` sandboxes with one container each, started at once through CRI; the time of each
/// to its started container, per round.
async fn cri_floor(args: &Args, containerd: &Containerd) -> anyhow::Result<()> {
    use cri::api;
    let cri = containerd.connect().await?;
    let logs = tempfile::tempdir()?;
    for round in 1..=args.rounds {
        let starts = (0..args.pods).map(|i| {
            let (cri, logs) = (cri.clone(), logs.path().to_path_buf());
            async move {
                let name = format!("floor-{round}-{i}");
                let sandbox = api::PodSandboxConfig {
                    metadata: Some(api::PodSandboxMetadata {
                        uid: format!("uid-{name}"),
                        namespace: "default".into(),
                        name: name.clone(),
                        attempt: 0,
                    }),
                    hostname: name,
                    log_directory: logs.to_string_lossy().into_owned(),
                    linux: Some(api::LinuxPodSandboxConfig::default()),
                    ..Default::default()
                };
                let container = api::ContainerConfig {
                    metadata: Some(api::ContainerMetadata {
                        name: "c".into(),
                        attempt: 0,
                    }),
                    image: Some(api::ImageSpec {
                        image: BUSYBOX_IMAGE.into(),
                        ..Default::default()
                    }),
                    command: vec!["sh".into(), "-c".into(), WAIT_FOR_TERM.into()],
                    log_path: format!("c-{i}.log"),
                    ..Default::default()
                };
                let at = Instant::now();
                let id = cri.run_pod_sandbox(sandbox.clone(), "").await?;
                let c = cri.create_container(&id, container, sandbox).await?;
                cri.start_container(&c).await?;
                anyhow::Ok(at.elapsed())
            }
        });
        let mut times = futures::future::try_join_all(starts).await?;
        times.sort();
        println!(
            "cri floor round {round}: {} sandboxes+containers started at once: p50 {:.0} ms, p99 {:.0} ms, max {:.0} ms",
            times.len(),
            percentile_ms(&times, 0.5),
            percentile_ms(&times, 0.99),
            percentile_ms(&times, 1.0),
        );
        for c in cri.list_containers(None).await? {
            cri.stop_container(&c.id, 2).await?;
            cri.remove_container(&c.id).await?;
        }
        for b in cri.list_pod_sandboxes(None).await? {
            cri.stop_pod_sandbox(&b.id).await?;
            cri.remove_pod_sandbox(&b.id).await?;
        }
    }
    Ok(())
}

/// Creates `n` pods at once; returns each one's time from its create to Running and ready in
/// the cloud's API (seen by a watcher started before the creates).
async fn start_round(pods: &Api<Pod>, n: usize, round: usize) -> anyhow::Result<Vec<Duration>> {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let stream = watcher(pods.clone(), watcher::Config::default());
    let watch = tokio::spawn(async move {
        futures::pin_mut!(stream);
        while let Some(event) = stream.next().await {
            if let Ok(watcher::Event::Apply(p)) = event
                && running(&p)
            {
                let _ = tx.send((p.metadata.name.unwrap_or_default(), Instant::now()));
            }
        }
    });
    let mut created = HashMap::new();
    let creates = (0..n).map(|i| {
        let pods = pods.clone();
        async move {
            let name = format!("bench-{round}-{i}");
            let pod: Pod = serde_json::from_value(json!({
                "metadata": {"name": name},
                "spec": {"nodeName": NODE, "terminationGracePeriodSeconds": 5, "containers": [{
                    "name": "c", "image": BUSYBOX_IMAGE, "command": ["sh", "-c", WAIT_FOR_TERM],
                }]},
            }))?;
            let at = Instant::now();
            pods.create(&PostParams::default(), &pod).await?;
            anyhow::Ok((name, at))
        }
    });
    for done in futures::future::join_all(creates).await {
        let (name, at) = done?;
        created.insert(name, at);
    }
    let mut starts = HashMap::new();
    let deadline = tokio::time::Instant::now() + LIMIT;
    while starts.len() < n {
        let (name, at) = tokio::time::timeout_at(deadline, rx.recv())
            .await
            .context("pods not Running in time")?
            .context("the watcher ended")?;
        if let Some(created) = created.get(&name) {
            starts.entry(name).or_insert(at - *created);
        }
    }
    watch.abort();
    Ok(starts.into_values().collect())
}

fn running(p: &Pod) -> bool {
    let status = serde_json::to_value(&p.status).unwrap_or_default();
    status["phase"] == "Running" && status["containerStatuses"][0]["ready"] == true
}

/// Deletes every pod and waits until the cloud and the runtime hold none.
async fn delete_round(pods: &Api<Pod>, containerd: &Containerd) -> anyhow::Result<()> {
    let cri = containerd.connect().await?;
    pods.delete_collection(&DeleteParams::default(), &Default::default())
        .await?;
    let deadline = tokio::time::Instant::now() + LIMIT;
    loop {
        let left = pods.list(&Default::default()).await?.items.len();
        let boxes = cri.list_pod_sandboxes(None).await?.len();
        if left == 0 && boxes == 0 {
            return Ok(());
        }
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "{left} pods and {boxes} sandboxes left after the delete"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Resident memory of the harness's containerd and of its shims (KiB).
fn runtime_rss(containerd: &Containerd) -> (u64, u64) {
    let daemon = rss_kib(containerd.pid()).unwrap_or(0);
    let socket = containerd.socket().to_string_lossy().into_owned();
    let mut shims = 0;
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        let cmdline = String::from_utf8_lossy(&cmdline);
        if cmdline.contains("containerd-shim") && cmdline.contains(socket.as_str()) {
            shims += rss_kib(pid).unwrap_or(0);
        }
    }
    (daemon, shims)
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}
