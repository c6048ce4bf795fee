//! schedbench: the embedded control plane's scheduler. A real cloudcore (the `e2e-cloudcore`
//! binary beside this one) first runs with its controllers off while `--nodes` Ready nodes and
//! `--pods` pods that name no node are written; then it is restarted with the scheduler on,
//! and the time from the first bind to the last is measured through a watch (pods bound per
//! second), with cloudcore's resident memory at the end. With `--deployment`, no pods are
//! written up front: a Deployment of `--pods` replicas is created once the controllers run, and
//! the time from its creation to the last pod bound is measured (Deployment, ReplicaSet and
//! scheduler together).
//!
//! `cargo build --release -p e2e --bin schedbench --bin e2e-cloudcore && target/release/schedbench`
//! (`target/release/schedbench --deployment --pods 1000` for the Deployment)

use std::time::{Duration, Instant};

use anyhow::Context as _;
use clap::Parser;
use e2e::bench::rss_kib;
use e2e::{Pki, Ports};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, PostParams, WatchEvent, WatchParams};
use serde_json::json;

#[derive(Parser)]
struct Args {
    /// Nodes registered.
    #[arg(long, default_value_t = 1_000)]
    nodes: usize,
    /// Pods waiting for a node.
    #[arg(long, default_value_t = 10_000)]
    pods: usize,
    /// Writes in flight while setting up.
    #[arg(long, default_value_t = 32)]
    concurrency: usize,
    /// Create one Deployment of `--pods` replicas instead of pending pods.
    #[arg(long)]
    deployment: bool,
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let pki = Pki::new();
    let dir = tempfile::tempdir()?;
    let mut config = e2e::cloud_config(&pki, Ports::default());
    config.modules.cloud_hub.quic.enable = false;
    config.modules.controllers.enable = false;
    let cloud = start(&config, dir.path())?;
    let client = e2e::bench::connect(&pki.path("admin.kubeconfig")).await?;
    let nodes: Api<Node> = Api::all(client.clone());
    futures::stream::iter(0..args.nodes)
        .map(|i| {
            let nodes = nodes.clone();
            async move {
                let node: Node = serde_json::from_value(json!({
                    "metadata": {"name": format!("node-{i}"),
                                 "labels": {"node-role.kubernetes.io/edge": ""}},
                    "status": {
                        "allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110"},
                        "conditions": [{"type": "Ready", "status": "True"}],
                    },
                }))?;
                nodes.create(&PostParams::default(), &node).await?;
                anyhow::Ok(())
            }
        })
        .buffer_unordered(args.concurrency)
        .try_collect::<Vec<_>>()
        .await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let pending = if args.deployment { 0 } else { args.pods };
    futures::stream::iter(0..pending)
        .map(|i| {
            let pods = pods.clone();
            async move {
                let pod: Pod = serde_json::from_value(json!({
                    "metadata": {"name": format!("p-{i}")},
                    "spec": {"containers": [{"name": "c", "image": "registry.local/app:1",
                             "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}}}]},
                }))?;
                pods.create(&PostParams::default(), &pod).await?;
                anyhow::Ok(())
            }
        })
        .buffer_unordered(args.concurrency)
        .try_collect::<Vec<_>>()
        .await?;
    println!("{} nodes and {pending} pending pods written", args.nodes);
    drop(cloud);

    // Again, with the scheduler on.
    config.modules.controllers.enable = true;
    let cloud = start(&config, dir.path())?;
    let pid = cloud.0.id();
    let client = e2e::bench::connect(&pki.path("admin.kubeconfig")).await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    if args.deployment {
        let took = deployment(&client, &pods, args.pods).await?;
        report("deployment", "created to all bound", &args, took, pid)?;
        return Ok(());
    }
    let listed = pods.list(&Default::default()).await?;
    let mut bound = bound_count(&listed.items);
    let from = listed.metadata.resource_version.unwrap_or_default();
    let stream = pods.watch(&WatchParams::default(), &from).await?;
    let mut stream = std::pin::pin!(stream);
    let mut first = None;
    let mut seen = std::collections::HashSet::new();
    let deadline = Instant::now() + Duration::from_secs(600);
    while bound < args.pods {
        let next = tokio::time::timeout_at(deadline.into(), stream.next()).await;
        let Ok(Some(event)) = next else {
            anyhow::bail!("{bound} of {} pods bound before the deadline", args.pods);
        };
        if let WatchEvent::Modified(p) = event?
            && p.spec.and_then(|s| s.node_name).is_some()
            && seen.insert(p.metadata.name.unwrap_or_default())
        {
            first.get_or_insert_with(Instant::now);
            bound += 1;
        }
    }
    let first = first.context("no bind was seen")?;
    report(
        "scheduler",
        "from the first bind",
        &args,
        first.elapsed(),
        pid,
    )?;
    drop(cloud);
    Ok(())
}

/// Creates a Deployment of `replicas` and returns the time until every replica is bound,
/// counted from lists (the replicas come and go through several writers' watches).
async fn deployment(
    client: &kube::Client,
    pods: &Api<Pod>,
    replicas: usize,
) -> anyhow::Result<Duration> {
    let deployments: Api<k8s_openapi::api::apps::v1::Deployment> =
        Api::namespaced(client.clone(), "default");
    let deployment = serde_json::from_value(json!({
        "metadata": {"name": "bench"},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": "bench"}},
            "template": {
                "metadata": {"labels": {"app": "bench"}},
                "spec": {"containers": [{"name": "c", "image": "registry.local/app:1",
                         "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}}}]},
            },
        },
    }))?;
    let created = Instant::now();
    deployments
        .create(&PostParams::default(), &deployment)
        .await?;
    let deadline = created + Duration::from_secs(600);
    loop {
        let bound = bound_count(&pods.list(&Default::default()).await?.items);
        if bound >= replicas {
            return Ok(created.elapsed());
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "{bound} of {replicas} replicas bound before the deadline"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// How many of `pods` are bound to a node.
fn bound_count(pods: &[Pod]) -> usize {
    pods.iter()
        .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some())
        .count()
}

/// Prints one result line: pods bound per second and cloudcore's resident memory.
fn report(what: &str, span: &str, args: &Args, took: Duration, pid: u32) -> anyhow::Result<()> {
    println!(
        "{what}: {} pods onto {} nodes in {:.2} s {span}: {:.0} pods/s; cloudcore rss {:.1} MiB",
        args.pods,
        args.nodes,
        took.as_secs_f64(),
        args.pods as f64 / took.as_secs_f64(),
        rss_kib(pid)? as f64 / 1024.0
    );
    Ok(())
}

/// Runs cloudcore with `config` (written under `dir`) until the guard is dropped.
fn start(config: &cloudcore::Config, dir: &std::path::Path) -> anyhow::Result<testkit::ChildGuard> {
    let path = dir.join("cloudcore.yaml");
    std::fs::write(&path, daemon::to_yaml(config))?;
    let bin = std::env::current_exe()?
        .parent()
        .context("the benchmark's directory")?
        .join("e2e-cloudcore");
    let child = std::process::Command::new(&bin)
        .args(["--config", path.to_str().context("a UTF-8 path")?])
        .stderr(std::process::Stdio::null())
        .spawn()
        .with_context(|| {
            format!(
                "starting {} (build it with --bin e2e-cloudcore)",
                bin.display()
            )
        })?;
    Ok(testkit::ChildGuard(child))
}
