//! quickstart: a cloudcore and an edgecore on loopback, linked by mutual TLS, showing the
//! system's main job as built so far: what the cloud says a node should hold lands in the edge
//! store and stays readable while the cloud is away; statuses reported at the edge reach the
//! cloud, queued while it is away. The cloud side's desired state comes from the stand-in
//! controller (the Kubernetes-watching edgecontroller comes with the REST layer).

use std::time::{Duration, Instant};

use e2e::controller::Desired;
use e2e::{Pki, Ports, cloud, edge, edge_config};
use link::Transport;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let pki = Pki::new();
    let desired = Desired::new();
    let cloud1 = cloud(&pki, desired.clone(), Ports::default()).await;
    println!(
        "cloudcore: cloudhub on wss://{} and quic://{}",
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
    println!(
        "edgecore: node {node} (identity from its certificate), store {}",
        db.display()
    );

    for (i, name) in ["nginx", "redis", "postgres"].iter().enumerate() {
        desired.put_pod(node, name, 100 + i as u64).await;
    }
    wait("the pods reach the edge store", || async {
        edge.held().await == desired.expected(node)
    })
    .await?;
    println!("\nedge store after sync (key, cloud resourceVersion):");
    for (key, rv) in edge.held().await {
        println!("  {key:<28} {rv}");
    }

    report(&edge, "nginx", "Running").await?;
    wait("the status reaches the cloud", || async {
        desired
            .upstream()
            .iter()
            .any(|m| m.resource().ends_with("pods/nginx"))
    })
    .await?;
    println!("\nstatus of default/nginx reported at the edge reached the cloud");

    let ports = cloud1.ports();
    cloud1.stop().await;
    println!(
        "\ncloudcore stopped: the edge still serves {} objects from SQLite",
        edge.held().await.len()
    );
    report(&edge, "redis", "Pending").await?;
    report(&edge, "redis", "Running").await?;
    println!(
        "two statuses reported offline; outbox holds {} (coalesced)",
        edge.running.meta().store().outbox_len().await?
    );

    let cloud2 = cloud(&pki, desired.clone(), ports).await;
    wait("the outbox drains after reconnect", || async {
        edge.running.meta().store().outbox_len().await.unwrap_or(1) == 0
    })
    .await?;
    let c = cloud2.hub().node(node).unwrap_or_default();
    println!(
        "cloudcore restarted: node back (resynced by digest, {} objects re-sent), outbox drained",
        c.sent
    );
    edge.stop().await;
    cloud2.stop().await;
    Ok(())
}

async fn report(edge: &e2e::Edge, pod: &str, phase: &str) -> anyhow::Result<()> {
    let msg = beehive::Message::new()
        .route(
            "edged",
            "meta",
            format!("default/pods/{pod}"),
            beehive::Operation::Update,
        )
        .with_content(format!(r#"{{"status":{{"phase":"{phase}"}}}}"#));
    edge.running
        .context()
        .send_sync(metamanager::NAME, msg, Duration::from_secs(10))
        .await?;
    Ok(())
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
