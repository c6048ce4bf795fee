//! apibench: the embedded control plane's throughput and memory. A real cloudcore (the
//! `e2e-cloudcore` binary beside this one, every module on, the embedded control plane on
//! loopback HTTPS) runs as its own process; this process is its client through the `kube`
//! crate, as an operator or a controller would be. Measured, in order:
//! - creates: `--pods` pods with `--concurrency` requests in flight (per second, and each
//!   request's latency p50/p99);
//! - lists: every pod in one list, and the same in pages of 500;
//! - watch: a watch opened at the current revision, then `--watched` pods labelled; the time
//!   until the watch delivered every change (events per second);
//! - memory: cloudcore's resident memory idle, with the pods, and with `--others` more objects
//!   spread over other kinds (configmaps, secrets, services, and deployments when apps/v1 is
//!   served).
//!
//! `cargo build --release -p e2e --bin apibench --bin e2e-cloudcore && target/release/apibench`

use std::time::{Duration, Instant};

use anyhow::Context as _;
use clap::Parser;
use e2e::bench::{percentile_ms, rss_kib};
use e2e::{Pki, Ports};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams, WatchEvent};
use kube::discovery::ApiResource;
use serde_json::{Value, json};

#[derive(Parser)]
struct Args {
    /// Pods created.
    #[arg(long, default_value_t = 10_000)]
    pods: usize,
    /// Other objects created after the pods, spread over several kinds.
    #[arg(long, default_value_t = 10_000)]
    others: usize,
    /// Requests in flight during creates.
    #[arg(long, default_value_t = 32)]
    concurrency: usize,
    /// Pods changed while a watch counts the events.
    #[arg(long, default_value_t = 2_000)]
    watched: usize,
}

const NAMESPACE: &str = "bench";

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let pki = Pki::new();
    let dir = tempfile::tempdir()?;
    let mut config = e2e::cloud_config(&pki, Ports::default());
    config.modules.cloud_hub.quic.enable = false;
    let path = dir.path().join("cloudcore.yaml");
    std::fs::write(&path, daemon::to_yaml(&config))?;
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
    let pid = child.id();
    let _guard = testkit::ChildGuard(child);
    let client = e2e::bench::connect(&pki.path("admin.kubeconfig")).await?;
    let mib = |kib: u64| kib as f64 / 1024.0;
    println!("cloudcore rss idle: {:.1} MiB", mib(rss_kib(pid)?));

    let namespaces: Api<Namespace> = Api::all(client.clone());
    let ns = serde_json::from_value(json!({"metadata": {"name": NAMESPACE}}))?;
    namespaces.create(&PostParams::default(), &ns).await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);

    // Creates.
    let started = Instant::now();
    let mut latencies: Vec<Duration> = futures::stream::iter(0..args.pods)
        .map(|i| {
            let pods = pods.clone();
            async move {
                let pod: Pod = serde_json::from_value(pod(i))?;
                let t = Instant::now();
                pods.create(&PostParams::default(), &pod).await?;
                anyhow::Ok(t.elapsed())
            }
        })
        .buffer_unordered(args.concurrency)
        .try_collect()
        .await?;
    let took = started.elapsed();
    latencies.sort();
    println!(
        "create {} pods ({} in flight): {:.0}/s, latency p50 {:.1} ms p99 {:.1} ms",
        args.pods,
        args.concurrency,
        args.pods as f64 / took.as_secs_f64(),
        percentile_ms(&latencies, 0.5),
        percentile_ms(&latencies, 0.99)
    );
    println!(
        "cloudcore rss with {} pods: {:.1} MiB",
        args.pods,
        mib(rss_kib(pid)?)
    );

    // Lists.
    let t = Instant::now();
    let all = pods.list(&ListParams::default()).await?;
    let whole = t.elapsed();
    anyhow::ensure!(all.items.len() == args.pods, "listed {}", all.items.len());
    let t = Instant::now();
    let mut params = ListParams::default().limit(500);
    let mut paged = 0;
    loop {
        let page = pods.list(&params).await?;
        paged += page.items.len();
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(c) => params = params.continue_token(&c),
            None => break,
        }
    }
    anyhow::ensure!(paged == args.pods, "paged {paged}");
    println!(
        "list {} pods: {:.0} ms in one list, {:.0} ms in pages of 500",
        args.pods,
        whole.as_secs_f64() * 1e3,
        t.elapsed().as_secs_f64() * 1e3
    );

    // Watch.
    let from = all.metadata.resource_version.unwrap_or_default();
    let watched = args.watched.min(args.pods);
    let stream = pods
        .watch(&kube::api::WatchParams::default(), &from)
        .await?;
    let counting = tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        let mut seen = 0;
        while let Some(event) = stream.next().await {
            if let Ok(WatchEvent::Modified(_)) = event {
                seen += 1;
                if seen == watched {
                    return Instant::now();
                }
            }
        }
        Instant::now()
    });
    let t = Instant::now();
    futures::stream::iter(0..watched)
        .map(|i| {
            let pods = pods.clone();
            async move {
                let patch = json!({"metadata": {"labels": {"touched": "yes"}}});
                pods.patch(
                    &format!("p-{i}"),
                    &PatchParams::default(),
                    &Patch::Merge(&patch),
                )
                .await
            }
        })
        .buffer_unordered(args.concurrency)
        .try_collect::<Vec<_>>()
        .await?;
    let done = tokio::time::timeout(Duration::from_secs(300), counting).await??;
    let took = done.duration_since(t);
    println!(
        "watch: {watched} changes delivered in {:.0} ms ({:.0} events/s, writes included)",
        took.as_secs_f64() * 1e3,
        watched as f64 / took.as_secs_f64()
    );

    // Other kinds.
    let mut kinds = vec![
        ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&()),
        ApiResource::erase::<k8s_openapi::api::core::v1::Secret>(&()),
        ApiResource::erase::<k8s_openapi::api::core::v1::Service>(&()),
    ];
    let apps = ApiResource::erase::<k8s_openapi::api::apps::v1::Deployment>(&());
    let deployments: Api<DynamicObject> = Api::namespaced_with(client.clone(), NAMESPACE, &apps);
    if deployments
        .list(&ListParams::default().limit(1))
        .await
        .is_ok()
    {
        kinds.push(apps);
    }
    let t = Instant::now();
    let per_kind = args.others / kinds.len();
    for kind in &kinds {
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), NAMESPACE, kind);
        futures::stream::iter(0..per_kind)
            .map(|i| {
                let api = api.clone();
                let body = other(&kind.kind, i);
                async move {
                    let obj: DynamicObject = serde_json::from_value(body)?;
                    api.create(&PostParams::default(), &obj).await?;
                    anyhow::Ok(())
                }
            })
            .buffer_unordered(args.concurrency)
            .try_collect::<Vec<_>>()
            .await?;
    }
    let names: Vec<&str> = kinds.iter().map(|k| k.kind.as_str()).collect();
    println!(
        "create {} others ({}): {:.0}/s",
        per_kind * kinds.len(),
        names.join(", "),
        (per_kind * kinds.len()) as f64 / t.elapsed().as_secs_f64()
    );
    println!(
        "cloudcore rss with {} pods and {} others: {:.1} MiB",
        args.pods,
        per_kind * kinds.len(),
        mib(rss_kib(pid)?)
    );
    Ok(())
}

fn pod(i: usize) -> Value {
    json!({
        "metadata": {"name": format!("p-{i}"), "labels": {"app": format!("a{}", i % 50)}},
        "spec": {"containers": [{"name": "c", "image": "registry.local/app:1.0",
                 "ports": [{"containerPort": 8080}],
                 "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}]},
    })
}

fn other(kind: &str, i: usize) -> Value {
    let name = format!("o-{i}");
    match kind {
        "ConfigMap" => json!({"apiVersion": "v1", "kind": kind, "metadata": {"name": name},
                              "data": {"config.yaml": format!("key: value-{i}\nother: 42\n")}}),
        "Secret" => json!({"apiVersion": "v1", "kind": kind, "metadata": {"name": name},
                           "data": {"token": "c2VjcmV0LXZhbHVl"}}),
        "Service" => json!({"apiVersion": "v1", "kind": kind, "metadata": {"name": name},
                            "spec": {"selector": {"app": format!("a{}", i % 50)},
                                     "ports": [{"port": 80, "targetPort": 8080}]}}),
        _ => json!({"apiVersion": "apps/v1", "kind": kind, "metadata": {"name": name},
                    "spec": {"replicas": 0, "selector": {"matchLabels": {"app": name}},
                             "template": {"metadata": {"labels": {"app": name}},
                                          "spec": {"containers": [{"name": "c", "image": "registry.local/app:1.0"}]}}}}),
    }
}
