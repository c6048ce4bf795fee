//! Configmap updates to a node beside a `logs -f` of one of its pods writing fast (issue 27: the
//! updates' delivery time stays within 20 % of the figure without the log stream). Each round
//! writes `--updates` updates through the API (`--update-configmaps` configmaps that a pod on the
//! node references, one writer per configmap) and times from the first write until the edge's
//! lwproxy serves the last value of every configmap. Rounds alternate: alone, then beside a
//! followed log of a fresh pod writing 1 MiB every `--follow-pause-ms` ms (a new pod per round,
//! deleted after it, so no log rotates under the follow).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use futures::AsyncReadExt as _;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{Api, DeleteParams, LogParams, Patch, PatchParams, PostParams};
use serde_json::json;
use testkit::containerd::{BUSYBOX_IMAGE, WAIT_FOR_TERM};

use crate::{Args, LIMIT, MB, NODE, median};

/// How often the edge is asked whether the last values arrived.
const POLL: Duration = Duration::from_millis(2);

/// The figures: median delivery time alone and beside the log, and the log's pace.
pub async fn update_figures(
    args: &Args,
    cloud: &kube::Client,
    edge: &kube::Client,
) -> anyhow::Result<()> {
    let ns = "default";
    let cms: Api<ConfigMap> = Api::namespaced(cloud.clone(), ns);
    let at_edge: Api<ConfigMap> = Api::namespaced(edge.clone(), ns);
    let pods: Api<Pod> = Api::namespaced(cloud.clone(), ns);
    let names: Vec<String> = (0..args.update_configmaps)
        .map(|i| format!("cm-{i}"))
        .collect();
    for name in &names {
        let cm = json!({"metadata": {"name": name}, "data": {"v": "0"}});
        cms.create(&PostParams::default(), &serde_json::from_value(cm)?)
            .await?;
    }
    start_holder(&pods, &names).await?;
    let per_configmap = args.updates.div_ceil(args.update_configmaps.max(1)) as u64;
    let (mut alone, mut beside, mut paces) = (Vec::new(), Vec::new(), Vec::new());
    let mut base = 0;
    for round in 0..args.rounds {
        alone.push(deliver(&cms, &at_edge, &names, base, per_configmap).await?);
        base += per_configmap;
        let writer = format!("chatty-{round}");
        start_chatty(&pods, &writer, args.follow_pause_ms).await?;
        let read = Arc::new(AtomicU64::new(0));
        let follow = tokio::spawn(follow(pods.clone(), writer.clone(), read.clone()));
        let at = Instant::now();
        beside.push(deliver(&cms, &at_edge, &names, base, per_configmap).await?);
        paces.push(read.load(Ordering::Relaxed) as f64 / MB / at.elapsed().as_secs_f64());
        base += per_configmap;
        follow.abort();
        delete_pod(&pods, &writer).await?;
    }
    let (alone, beside) = (median(&mut alone), median(&mut beside));
    println!(
        "{} configmap updates ({} configmaps) delivered to the node: {:.2} s alone, {:.2} s beside a logs -f at {:.0} MB/s ({:+.0} %; medians of {})",
        per_configmap * names.len() as u64,
        names.len(),
        alone,
        beside,
        median(&mut paces),
        (beside / alone - 1.0) * 100.0,
        args.rounds,
    );
    Ok(())
}

/// Writes values `base+1..=base+n` to every configmap (one writer each, in order); seconds
/// from the first write until the edge serves the last value of each.
async fn deliver(
    cms: &Api<ConfigMap>,
    at_edge: &Api<ConfigMap>,
    names: &[String],
    base: u64,
    n: u64,
) -> anyhow::Result<f64> {
    let at = Instant::now();
    let writers = names.iter().map(|name| {
        let (cms, name) = (cms.clone(), name.clone());
        async move {
            for v in base + 1..=base + n {
                let patch = Patch::Merge(json!({"data": {"v": v.to_string()}}));
                cms.patch(&name, &PatchParams::default(), &patch).await?;
            }
            anyhow::Ok(())
        }
    });
    futures::future::try_join_all(writers).await?;
    let last = (base + n).to_string();
    let mut pending: Vec<&String> = names.iter().collect();
    while !pending.is_empty() {
        anyhow::ensure!(at.elapsed() < LIMIT, "the updates did not reach the node");
        let mut still = Vec::new();
        for name in pending {
            let held = at_edge.get_opt(name).await?;
            let value = held.as_ref().and_then(|cm| cm.data.as_ref()?.get("v"));
            if value != Some(&last) {
                still.push(name);
            }
        }
        pending = still;
        if !pending.is_empty() {
            tokio::time::sleep(POLL).await;
        }
    }
    Ok(at.elapsed().as_secs_f64())
}

/// A pod on the node referencing every configmap (so the node holds them), running.
async fn start_holder(pods: &Api<Pod>, names: &[String]) -> anyhow::Result<()> {
    let env_from: Vec<_> = names
        .iter()
        .map(|n| json!({"configMapRef": {"name": n}}))
        .collect();
    let pod = json!({
        "metadata": {"name": "holder"},
        "spec": {"nodeName": NODE, "terminationGracePeriodSeconds": 1, "containers": [{
            "name": "c", "image": BUSYBOX_IMAGE, "command": ["sh", "-c", WAIT_FOR_TERM],
            "envFrom": env_from,
        }]},
    });
    pods.create(&PostParams::default(), &serde_json::from_value(pod)?)
        .await?;
    wait_running(pods, "holder").await
}

/// A pod writing 1 MiB of log (1 KiB lines) every `pause_ms` ms, running.
async fn start_chatty(pods: &Api<Pod>, name: &str, pause_ms: u64) -> anyhow::Result<()> {
    let script = format!(
        "s=0123456789abcdef; for i in 1 2 3 4 5 6; do s=$s$s; done; \
         while true; do yes \"${{s%?}}\" | head -n 1024; usleep {}; done",
        pause_ms * 1000
    );
    let pod = json!({
        "metadata": {"name": name},
        "spec": {"nodeName": NODE, "terminationGracePeriodSeconds": 1, "containers": [{
            "name": "c", "image": BUSYBOX_IMAGE, "command": ["sh", "-c", script],
        }]},
    });
    pods.create(&PostParams::default(), &serde_json::from_value(pod)?)
        .await?;
    wait_running(pods, name).await
}

/// Follows `name`'s log from now on, counting the bytes read into `read`.
async fn follow(pods: Api<Pod>, name: String, read: Arc<AtomicU64>) -> anyhow::Result<()> {
    let params = LogParams {
        follow: true,
        since_seconds: Some(1),
        ..LogParams::default()
    };
    let stream = pods.log_stream(&name, &params).await?;
    let mut stream = std::pin::pin!(stream);
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = stream.read(&mut buf).await?;
        if n == 0 {
            return Ok(());
        }
        read.fetch_add(n as u64, Ordering::Relaxed);
    }
}

async fn wait_running(pods: &Api<Pod>, name: &str) -> anyhow::Result<()> {
    let deadline = Instant::now() + LIMIT;
    loop {
        let pod = pods.get(name).await?;
        let phase = pod.status.and_then(|s| s.phase);
        if phase.as_deref() == Some("Running") {
            return Ok(());
        }
        anyhow::ensure!(Instant::now() < deadline, "pod {name} did not start");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Deletes pod `name` and waits until it is gone.
async fn delete_pod(pods: &Api<Pod>, name: &str) -> anyhow::Result<()> {
    pods.delete(name, &DeleteParams::default()).await?;
    let deadline = Instant::now() + LIMIT;
    while pods.get_opt(name).await?.is_some() {
        anyhow::ensure!(Instant::now() < deadline, "pod {name} was not deleted");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(())
}

/// A `kube` client of the edge's lwproxy at `addr` (plain HTTP on loopback).
pub fn edge_client(addr: std::net::SocketAddr) -> anyhow::Result<kube::Client> {
    let config = kube::Config::new(format!("http://{addr}").parse().context("lwproxy URL")?);
    Ok(kube::Client::try_from(config)?)
}
