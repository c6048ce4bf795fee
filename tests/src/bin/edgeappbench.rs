//! edgeappbench: the EdgeApplication controller's reconcile throughput (issue 23). A real
//! cloudcore with the embedded control plane runs in this process; `--groups` fake nodes are
//! registered, one per group (`apps.kubeedge.io/belonging-to=g-<i>`), and a fake kubelet marks
//! each pod Ready once the scheduler binds it. Then one EdgeApplication of one Deployment
//! targeting every group is created, and the time until every copy exists, and until the
//! application's `status.workloadStatus` counts every copy `Available`, is measured.
//!
//! `cargo build --release -p e2e --bin edgeappbench && target/release/edgeappbench`

use std::time::{Duration, Instant};

use clap::Parser;
use e2e::{Pki, Ports};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams, PostParams,
};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::json;

#[derive(Parser)]
struct Args {
    /// Groups targeted (one node each).
    #[arg(long, default_value_t = 500)]
    groups: usize,
    /// Replicas per group's copy.
    #[arg(long, default_value_t = 1)]
    replicas: i64,
    /// Writes in flight while setting up.
    #[arg(long, default_value_t = 32)]
    concurrency: usize,
    /// Give up after this many seconds.
    #[arg(long, default_value_t = 120)]
    timeout: u64,
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let pki = Pki::new();
    let cloud = e2e::k8s_cloud_with(&pki, Ports::default(), |c| {
        c.modules.cloud_hub.quic.enable = false;
        // Fake nodes renew no Lease.
        c.modules.controllers.node_monitor_grace_period = Duration::from_secs(3600);
    })
    .await;
    let client = cloud.kube().await;
    register_nodes(&client, args.groups, args.concurrency).await?;
    tokio::spawn(fake_kubelet(client.clone()));
    let gvk = GroupVersionKind::gvk("apps.kubeedge.io", "v1alpha1", "EdgeApplication");
    let apps: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        "default",
        &ApiResource::from_gvk_with_plural(&gvk, "edgeapplications"),
    );
    while apps.list(&ListParams::default()).await.is_err() {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let groups: Vec<_> = (0..args.groups)
        .map(|i| json!({"name": format!("g-{i}"), "overriders": {"replicas": args.replicas}}))
        .collect();
    let app: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "apps.kubeedge.io/v1alpha1", "kind": "EdgeApplication",
        "metadata": {"name": "bench"},
        "spec": {
            "workloadTemplate": {"manifests": [
                {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "app"},
                 "spec": {"selector": {"matchLabels": {"app": "bench"}},
                   "template": {"metadata": {"labels": {"app": "bench"}},
                     "spec": {"containers": [{"name": "c", "image": "registry.local/app:1"}]}}}},
            ]},
            "workloadScope": {"targetNodeGroups": groups},
        },
    }))?;
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), "default");
    let start = Instant::now();
    apps.create(&PostParams::default(), &app).await?;
    let (mut created, mut reported, mut counted) = (None, None, None);
    while counted.is_none() || reported.is_none() {
        anyhow::ensure!(
            start.elapsed() < Duration::from_secs(args.timeout),
            "not done after {}s",
            args.timeout
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
        if created.is_none() {
            let n = deployments
                .list_metadata(&ListParams::default())
                .await?
                .items
                .len();
            if n >= args.groups {
                created = Some(start.elapsed());
            }
        }
        if reported.is_none() {
            let ds = deployments.list(&ListParams::default()).await?.items;
            let done = ds.iter().filter(|d| {
                let st = d.status.clone().unwrap_or_default();
                st.observed_generation >= d.metadata.generation
                    && st.available_replicas.unwrap_or(0) >= args.replicas as i32
            });
            if done.count() >= args.groups {
                reported = Some(start.elapsed());
            }
        }
        let status = apps.get("bench").await?.data["status"]["workloadStatus"].clone();
        let available = status
            .as_array()
            .into_iter()
            .flatten()
            .filter(|s| s["conditions"] == "Available")
            .count();
        if available >= args.groups && counted.is_none() {
            counted = Some(start.elapsed());
        }
    }
    let secs = |d: Option<Duration>| d.map_or(f64::NAN, |d| d.as_secs_f64());
    println!(
        "{} groups, {} replica(s) each: all Deployments created in {:.2} s, all reporting every replica available in {:.2} s, all counted Available in the EdgeApplication's status in {:.2} s",
        args.groups,
        args.replicas,
        secs(created),
        secs(reported),
        secs(counted)
    );
    cloud.stop().await;
    Ok(())
}

/// Registers one Ready node per group.
async fn register_nodes(
    client: &kube::Client,
    groups: usize,
    concurrency: usize,
) -> anyhow::Result<()> {
    let nodes: Api<Node> = Api::all(client.clone());
    futures::stream::iter(0..groups)
        .map(|i| {
            let nodes = nodes.clone();
            async move {
                let node: Node = serde_json::from_value(json!({
                    "metadata": {"name": format!("node-{i}"),
                                 "labels": {"apps.kubeedge.io/belonging-to": format!("g-{i}")}},
                    "status": {
                        "allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110"},
                        "conditions": [{"type": "Ready", "status": "True"}],
                    },
                }))?;
                nodes.create(&PostParams::default(), &node).await?;
                anyhow::Ok(())
            }
        })
        .buffer_unordered(concurrency)
        .try_collect::<Vec<_>>()
        .await?;
    Ok(())
}

/// Marks every bound pod Running and Ready, as its kubelet would.
async fn fake_kubelet(client: kube::Client) {
    let pods: Api<Pod> = Api::namespaced(client, "default");
    let ready = json!({"status": {"phase": "Running", "conditions": [
        {"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}});
    watcher(pods.clone(), watcher::Config::default())
        .default_backoff()
        .applied_objects()
        .filter_map(|p| async move { p.ok() })
        .filter(|p| {
            let bound = p.spec.as_ref().is_some_and(|s| s.node_name.is_some());
            let is_ready = p
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
            std::future::ready(bound && !is_ready)
        })
        .for_each_concurrent(16, |p| {
            let (pods, ready) = (pods.clone(), ready.clone());
            async move {
                let name = p.metadata.name.unwrap_or_default();
                let _ = pods
                    .patch_status(&name, &PatchParams::default(), &Patch::Merge(&ready))
                    .await;
            }
        })
        .await;
}
