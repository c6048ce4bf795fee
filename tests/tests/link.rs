//! The cloud–edge link end to end: real cloudcore and edgecore on loopback, mutual TLS, real
//! SQLite, over WebSocket and QUIC.

use std::collections::BTreeMap;
use std::time::Duration;

use e2e::controller::Desired;
use e2e::{Pki, Ports, cloud, edge, edge_config};
use link::Transport;
use testkit::eventually;

const CONVERGE: Duration = Duration::from_secs(60);

async fn converged(desired: &Desired, node: &str, edge: &e2e::Edge) -> bool {
    edge.held().await == desired.expected(node)
}

/// Every change of every object reaches the edge, and each object's versions are committed in
/// the order they were made.
async fn deliver_in_order(transport: Transport) {
    let pki = Pki::new();
    let cloud = cloud(&pki, Desired::new(), Ports::default()).await;
    let node = "edge-order";
    let files = pki.node(node);
    let db = pki.path("edge.db");
    let edge = edge(edge_config(&files, cloud.addr(transport), transport, &db)).await;
    for i in 0..10_000u64 {
        cloud
            .desired
            .put_pod(node, &format!("p{}", i % 5_000), 1_000 + i)
            .await;
    }
    eventually("10,000 changes reach the edge", CONVERGE, || {
        converged(&cloud.desired, node, &edge)
    })
    .await;
    // Replay the edge's change log: every committed version of every object, in commit order.
    let store = edge.running.meta().store();
    let mut changes = store
        .watch(objstore::WatchOptions::from_revision(0))
        .unwrap();
    let mut last: BTreeMap<String, u64> = BTreeMap::new();
    let revision = store.revision();
    while let Some(event) = changes.next().await {
        let event = event.unwrap();
        let rv: u64 = event.object.resource_version.parse().unwrap();
        if let Some(prev) = last.insert(event.object.key.name.clone(), rv) {
            assert!(
                rv > prev,
                "{} went from {prev} to {rv}",
                event.object.key.name
            );
        }
        if event.revision >= revision {
            break;
        }
    }
    assert_eq!(last.len(), 5_000);
    let counters = cloud.hub().node(node).unwrap();
    // Latest-wins coalescing may send fewer than 10,000 frames; each one carries a ~1 KiB pod.
    assert!(
        counters.sent >= 5_000,
        "every one of the 5,000 objects was sent"
    );
    assert!(
        counters.bytes_sent > counters.sent * 700,
        "{} bytes sent for {} objects of ~1 KiB",
        counters.bytes_sent,
        counters.sent
    );
    assert!(counters.bytes_received > 0, "acks and pings come back");
    assert!(
        counters.sent <= 10_000,
        "sent {} frames for 10,000 changes",
        counters.sent
    );
    edge.stop().await;
    cloud.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_changes_arrive_in_per_object_order_over_websocket() {
    deliver_in_order(Transport::WebSocket).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_changes_arrive_in_per_object_order_over_quic() {
    deliver_in_order(Transport::Quic).await;
}
