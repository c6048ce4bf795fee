//! A client reads its own writes, in one resourceVersion space: a forwarded write's answer is
//! stored at the edge before the client gets it, and every answer carries local revisions.

mod support;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::api::PostParams;
use kube::{Api, ResourceExt};
use serde_json::json;

use support::{Node, connected};

fn lease(renew: &str) -> Lease {
    serde_json::from_value(json!({
        "metadata": {"name": "n1", "namespace": "kube-node-lease"},
        "spec": {"holderIdentity": "n1", "leaseDurationSeconds": 40, "renewTime": renew},
    }))
    .expect("a lease")
}

#[tokio::test]
async fn a_create_is_read_back_at_once_at_the_version_it_was_answered_with() {
    let node = Node::new();
    let edge = node.start(true).await;
    let pods: Api<Pod> = Api::namespaced(edge.client(), "default");
    let pod: Pod = serde_json::from_value(support::pod("web", "n1", "")).expect("a pod");
    let created = pods
        .create(&PostParams::default(), &pod)
        .await
        .expect("created in the cloud");
    let read = pods.get("web").await.expect("read back at once");
    assert_eq!(read.annotations()["answered-by"], "cloud");
    let rv = created.resource_version().expect("a resourceVersion");
    assert_eq!(read.resource_version(), Some(rv.clone()));
    assert_ne!(rv, "9999", "a local revision, not the cloud's version");

    // The answer's version is a precondition the edge understands: sent as the cloud's.
    pods.replace("web", &PostParams::default(), &created)
        .await
        .expect("updated");
    let received = edge.received();
    let update = &received.last().expect("two writes").write;
    assert_eq!(update.verb, "update");
    let body = update.body.as_ref().expect("the object");
    assert_eq!(body["metadata"]["resourceVersion"], "9999");
    edge.stop().await;
}

#[tokio::test]
async fn a_renewal_based_on_an_offline_answer_goes_through_once_the_cloud_echoed_it() {
    let node = Node::new();
    let edge = node.start(false).await;
    let leases: Api<Lease> = Api::namespaced(edge.client(), "kube-node-lease");
    let offline = leases
        .create(
            &PostParams::default(),
            &lease("2026-01-01T00:00:00.000000Z"),
        )
        .await
        .expect("created at the edge");

    // The link is back; the queued create reached the cloud, whose version comes down.
    edge.link.send_replace(connected());
    let mut echo = serde_json::to_value(&offline).expect("JSON");
    echo["metadata"]["uid"] = json!("u-cloud");
    echo["metadata"]["resourceVersion"] = json!("500");
    echo["metadata"]["creationTimestamp"] = json!("2026-01-01T00:00:01Z");
    edge.downstream("leases.coordination.k8s.io", echo).await;

    let mut renewed = offline.clone();
    renewed.spec.as_mut().expect("a spec").renew_time =
        serde_json::from_value(json!("2026-01-01T00:00:10.000000Z")).expect("a time");
    leases
        .replace("n1", &PostParams::default(), &renewed)
        .await
        .expect("the renewal is not a conflict");
    let received = edge.received();
    let body = received[0].write.body.as_ref().expect("the lease");
    assert_eq!(
        body["metadata"]["resourceVersion"], "500",
        "the cloud's version"
    );
    edge.stop().await;
}
