//! demo: the cloud-edge flow in one process, simulated: no containers, no root (the real thing
//! is `quickstart`). A cloudcore (embedded Kubernetes control plane, edgecontroller, cloudhub)
//! and an edgecore (edgehub, metamanager, lwproxy) linked by mutual TLS. Pods and a configmap
//! created through the Kubernetes API land in the edge's SQLite store and are served by lwproxy
//! to any Kubernetes client; a pod status written at the edge reaches the API. The cloud then
//! stops: the edge keeps serving, takes status writes and queues them, and delivers them when
//! the cloud is back.

use std::time::{Duration, Instant};

use anyhow::Context as _;
use e2e::{Pki, Ports, edge, edge_config, k8s_cloud};
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use link::Transport;
use serde_json::json;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let pki = Pki::new();
    let cloud1 = k8s_cloud(&pki, Ports::default()).await;
    let kubeconfig = cloud1.running.kubeconfig().context("embedded kubeconfig")?;
    println!(
        "cloudcore: Kubernetes API on https://{} (kubectl --kubeconfig {}), cloudhub on wss://{} and quic://{}",
        cloud1
            .running
            .api()
            .context("embedded control plane")?
            .addr(),
        kubeconfig.display(),
        cloud1.addr(Transport::WebSocket),
        cloud1.addr(Transport::Quic)
    );
    let node = "edge-node-1";
    let db = pki.path("edgecore.db");
    let edge = edge(edge_config(
        &pki.node(node),
        cloud1.addr(Transport::WebSocket),
        Transport::WebSocket,
        &db,
    ))
    .await;
    let lwproxy = edge.running.lwproxy().context("lwproxy runs")?.url();
    println!(
        "edgecore: node {node} (identity from its certificate), store {}, lwproxy on {lwproxy}",
        db.display()
    );

    let client = cloud1.kube().await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let cm = serde_json::from_value(
        json!({"metadata": {"name": "app-config"}, "data": {"mode": "edge"}}),
    )?;
    cms.create(&PostParams::default(), &cm).await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    for name in ["nginx", "redis", "postgres"] {
        pods.create(&PostParams::default(), &pod(name, node))
            .await?;
    }
    println!(
        "\ncreated through the Kubernetes API: configmap app-config, pods nginx, redis, postgres on {node}"
    );
    wait("the pods and their configmap reach the edge", || async {
        let held = edge.held().await;
        held.keys().filter(|k| k.starts_with("pods/")).count() == 3
            && held.contains_key("configmaps/default/app-config")
    })
    .await?;
    println!("edge store after sync (key, cloud resourceVersion):");
    for (key, rv) in edge.held().await {
        println!("  {key:<44} {rv}");
    }

    let at_edge: Api<Pod> = Api::namespaced(lwproxy_client(&lwproxy)?, "default");
    let names = |list: kube::core::ObjectList<Pod>| -> Vec<String> {
        list.items
            .into_iter()
            .filter_map(|p| p.metadata.name)
            .collect()
    };
    let on_node = ListParams::default().fields(&format!("spec.nodeName={node}"));
    println!(
        "\nlwproxy lists pods with spec.nodeName={node}: {:?}",
        names(at_edge.list(&on_node).await?)
    );
    set_phase(&at_edge, "nginx", "Running").await?;
    let phase = phase_of(&pods.get("nginx").await?);
    println!("status of nginx patched at the edge, forwarded: the API now says {phase}");

    let ports = cloud1.ports();
    cloud1.stop().await;
    println!(
        "\ncloudcore stopped: lwproxy still lists {:?}",
        names(at_edge.list(&on_node).await?)
    );
    set_phase(&at_edge, "redis", "Running").await?;
    println!(
        "status of redis patched offline: applied at the edge, outbox holds {}",
        edge.running.meta().store().outbox_len().await?
    );
    let refused = at_edge
        .create(&PostParams::default(), &pod("new", node))
        .await;
    if let Err(kube::Error::Api(status)) = refused {
        println!("creating a pod offline: {} {}", status.code, status.message);
    }

    let cloud2 = k8s_cloud(&pki, ports).await;
    let pods: Api<Pod> = Api::namespaced(cloud2.kube().await, "default");
    wait("the offline status reaches the API", || async {
        pods.get("redis")
            .await
            .is_ok_and(|p| phase_of(&p) == "Running")
    })
    .await?;
    let c = cloud2.hub().node(node).unwrap_or_default();
    println!(
        "\ncloudcore restarted: node back (resynced by digest; objects sent down since: {}), redis is {} in the API",
        c.sent,
        phase_of(&pods.get("redis").await?)
    );
    edge.stop().await;
    cloud2.stop().await;
    Ok(())
}

fn pod(name: &str, node: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            "nodeName": node,
            "containers": [{"name": name, "image": name, "envFrom": [{"configMapRef": {"name": "app-config"}}]}],
        },
    }))
    .expect("a valid pod")
}

fn lwproxy_client(url: &str) -> anyhow::Result<kube::Client> {
    let mut config = kube::Config::new(url.parse()?);
    config.default_retry = false;
    Ok(kube::Client::try_from(config)?)
}

async fn set_phase(pods: &Api<Pod>, name: &str, phase: &str) -> anyhow::Result<()> {
    let patch = json!({"status": {"phase": phase}});
    pods.patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    Ok(())
}

fn phase_of(pod: &Pod) -> String {
    let status = pod.status.as_ref();
    status
        .and_then(|s| s.phase.clone())
        .unwrap_or_else(|| "Pending".into())
}

async fn wait<F, Fut>(what: &str, mut done: F) -> anyhow::Result<()>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + Duration::from_secs(30);
    while !done().await {
        anyhow::ensure!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}
