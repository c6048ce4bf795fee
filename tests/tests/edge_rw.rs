//! lwproxy as a kubelet uses it, against a real cloudcore (embedded control plane) and a real
//! edgecore on loopback: a client reads its own writes, and every answer carries the edge's
//! local resourceVersions, so renewing with the version of the last answer never conflicts,
//! across a reconnect too.

use std::time::Duration;

use e2e::{Cloud, Edge, Pki, k8s_cloud};
use k8s_openapi::api::coordination::v1::Lease;
use kube::ResourceExt;
use kube::api::{Api, PostParams};
use serde_json::json;
use testkit::eventually;

const WAIT: Duration = Duration::from_secs(30);
const LEASE_KEY: &str = "leases.coordination.k8s.io/kube-node-lease/edge-1";

async fn linked(edge: &Edge) {
    eventually("the edge is linked", WAIT, || async {
        matches!(
            *edge.running.hub().unwrap().state().borrow(),
            edgehub::LinkState::Connected { .. }
        )
    })
    .await;
}

/// Stops the cloud and waits until the edge sees its link down; returns the cloud's ports.
async fn take_cloud_away(cloud: Cloud, edge: &Edge) -> e2e::Ports {
    let ports = cloud.ports();
    cloud.stop().await;
    eventually("the edge notices the link is down", WAIT, || async {
        *edge.running.hub().unwrap().state().borrow() == edgehub::LinkState::Disconnected
    })
    .await;
    ports
}

/// The renewTime `second`s into 2026.
fn renew_time(second: u64) -> serde_json::Value {
    json!(format!("2026-01-01T00:00:{second:02}.000000Z"))
}

/// Renews `last` (the last answer) as a kubelet does: an update carrying its resourceVersion.
async fn renew(leases: &Api<Lease>, last: &Lease, second: u64) -> Lease {
    let mut next = last.clone();
    next.spec.as_mut().unwrap().renew_time =
        Some(serde_json::from_value(renew_time(second)).unwrap());
    let rv = last.resource_version();
    leases
        .replace("edge-1", &PostParams::default(), &next)
        .await
        .unwrap_or_else(|e| panic!("renewal {second} from resourceVersion {rv:?}: {e}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kubelet_reads_its_lease_back_and_renews_without_conflict_across_a_reconnect() {
    let (pki, dir) = (Pki::new(), tempfile::tempdir().unwrap());
    let (cloud, edge) = e2e::linked_site(&pki, dir.path(), "edge-1").await;
    linked(&edge).await;
    let leases: Api<Lease> = Api::namespaced(edge.lwproxy_client(), "kube-node-lease");
    let lease: Lease = serde_json::from_value(json!({"metadata": {"name": "edge-1"},
        "spec": {"holderIdentity": "edge-1", "leaseDurationSeconds": 40,
                 "renewTime": renew_time(0)}}))
    .unwrap();
    let mut last = leases
        .create(&PostParams::default(), &lease)
        .await
        .expect("created in the cloud");
    let read = leases.get("edge-1").await.expect("read back at once");
    assert_eq!(read.resource_version(), last.resource_version());
    for second in 1..=3 {
        last = renew(&leases, &last, second).await;
        let read = leases.get("edge-1").await.expect("served at the edge");
        assert_eq!(
            read.resource_version(),
            last.resource_version(),
            "the answer's version is the one a read returns"
        );
    }

    // The link goes down; the kubelet keeps renewing, answered here.
    let ports = take_cloud_away(cloud, &edge).await;
    for second in 4..=5 {
        last = renew(&leases, &last, second).await;
    }

    // The link is back: the queued renewal reaches the cloud and its version comes down.
    let cloud = k8s_cloud(&pki, ports).await;
    linked(&edge).await;
    let in_cloud: Api<Lease> = Api::namespaced(cloud.kube().await, "kube-node-lease");
    eventually("the offline renewal reaches the cloud", WAIT, || async {
        let lease = in_cloud.get("edge-1").await.unwrap();
        serde_json::to_value(lease.spec.unwrap().renew_time).unwrap() == renew_time(5)
    })
    .await;
    let cloud_rv = in_cloud.get("edge-1").await.unwrap().resource_version();
    eventually("the edge holds the cloud's version", WAIT, || async {
        edge.held().await.get(LEASE_KEY) == cloud_rv.as_ref()
    })
    .await;

    // The first renewal after the reconnect, from the last answer, is not a conflict.
    last = renew(&leases, &last, 6).await;
    let lease = in_cloud.get("edge-1").await.unwrap();
    assert_eq!(
        serde_json::to_value(lease.spec.unwrap().renew_time).unwrap(),
        renew_time(6)
    );
    let read = leases.get("edge-1").await.expect("served at the edge");
    assert_eq!(read.resource_version(), last.resource_version());
    edge.stop().await;
    cloud.stop().await;
}
