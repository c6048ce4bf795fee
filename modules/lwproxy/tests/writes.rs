//! Writes: forwarded to the cloud with resourceVersions translated while linked, stale ones
//! refused here, status applied locally and queued while offline, the rest refused with a 503.

mod support;

use std::time::Duration;

use apimachinery::ForwardedWrite;
use axum::http::{Request, StatusCode};
use beehive::Operation;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::{Value, json};

use support::{Answering, Edge, Node, pod};

/// The local revision lwproxy serves for a pod.
async fn local_rv(pods: &Api<Pod>, name: &str) -> String {
    let p = pods.get(name).await.expect("the pod is served");
    p.resource_version().expect("a resourceVersion")
}

fn api_error(e: kube::Error) -> Box<kube::core::Status> {
    match e {
        kube::Error::Api(status) => status,
        other => panic!("expected an API error, got {other:?}"),
    }
}

#[tokio::test]
async fn an_online_patch_goes_to_the_cloud_with_its_resource_version_and_comes_back_as_stored() {
    let node = Node::new();
    let edge = node.start(true).await;
    edge.downstream("pods", pod("p", "n1", "100")).await;
    let pods: Api<Pod> = Api::namespaced(edge.client(), "default");
    let local = local_rv(&pods, "p").await;
    assert_ne!(local, "100");

    let patch = json!({"metadata": {"resourceVersion": local}, "status": {"phase": "Running"}});
    let answered = pods
        .patch_status("p", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("the cloud's answer");
    assert_eq!(answered.annotations()["answered-by"], "cloud");
    // Stored at the edge with the cloud's version, answered at its local revision.
    let answered_rv = answered.resource_version().expect("a resourceVersion");
    assert_ne!(
        answered_rv, "9999",
        "the cloud's version never reaches a client"
    );
    assert_eq!(answered_rv, local_rv(&pods, "p").await);
    let key = objstore::ObjKey::new("pods", "default", "p");
    let held = edge.store.get(&key).await.expect("readable").expect("held");
    assert_eq!(held.resource_version, "9999");

    let received = edge.received();
    assert_eq!(received.len(), 1);
    let (msg, write) = (&received[0].msg, &received[0].write);
    assert_eq!(msg.router.operation, Operation::Patch);
    assert_eq!(msg.router.group, lwproxy::MESSAGE_GROUP);
    assert_eq!(msg.resource(), "default/pods/p");
    assert_eq!(
        support::request_line(write).1,
        "/api/v1/namespaces/default/pods/p/status"
    );
    assert_eq!(
        write.content_type.as_deref(),
        Some("application/merge-patch+json")
    );
    let body = write.body.as_ref().expect("the patch");
    assert_eq!(
        body["metadata"]["resourceVersion"], "100",
        "the cloud's version"
    );
    assert_eq!(body["status"]["phase"], "Running");
    edge.stop().await;
}

#[tokio::test]
async fn a_stale_resource_version_is_a_conflict_without_asking_the_cloud() {
    let node = Node::new();
    let edge = node.start(true).await;
    edge.downstream("pods", pod("p", "n1", "100")).await;
    let pods: Api<Pod> = Api::namespaced(edge.client(), "default");
    let mut stale = pods.get("p").await.expect("served");
    stale.metadata.resource_version = Some("12345".into());
    let e = api_error(
        pods.replace("p", &PostParams::default(), &stale)
            .await
            .unwrap_err(),
    );
    assert_eq!((e.code, e.reason.as_str()), (409, "Conflict"));
    assert!(
        e.message.contains("the object has been modified"),
        "{}",
        e.message
    );
    assert!(edge.received().is_empty(), "nothing was forwarded");
    edge.stop().await;
}

#[tokio::test]
async fn offline_a_pod_status_patch_is_stored_here_and_queued_for_the_cloud() {
    let node = Node::new();
    let edge = node.start(false).await;
    edge.downstream("pods", pod("p", "n1", "100")).await;
    let pods: Api<Pod> = Api::namespaced(edge.client(), "default");
    let before = local_rv(&pods, "p").await;

    let patch =
        json!({"metadata": {"uid": "uid-p"}, "status": {"phase": "Running", "podIP": "10.0.0.7"}});
    let patched = pods
        .patch_status("p", &PatchParams::default(), &Patch::Strategic(&patch))
        .await
        .expect("applied locally");
    let status = |p: &Pod| p.status.as_ref().and_then(|s| s.phase.clone());
    assert_eq!(status(&patched).as_deref(), Some("Running"));
    assert_ne!(patched.resource_version(), Some(before));
    let read = pods.get("p").await.expect("served");
    assert_eq!(status(&read).as_deref(), Some("Running"));
    assert_eq!(read.resource_version(), patched.resource_version());

    assert_eq!(edge.store.outbox_len().await.expect("outbox"), 1);
    let queued = edge.store.outbox_peek(1).await.expect("outbox");
    let msg = beehive::codec::decode(&queued[0].payload).expect("a queued message");
    assert_eq!(
        (msg.router.operation.clone(), msg.resource()),
        (Operation::Patch, "default/pods/p")
    );
    let write: ForwardedWrite = serde_json::from_slice(&msg.content).expect("an envelope");
    assert_eq!(
        support::request_line(&write),
        (
            "PATCH",
            "/api/v1/namespaces/default/pods/p/status".to_owned()
        )
    );
    assert_eq!(
        write.content_type.as_deref(),
        Some("application/merge-patch+json")
    );
    // What the client changed, unconditionally (no resourceVersion), and nothing else.
    let body = write.body.expect("the patch");
    assert_eq!(
        body.get("metadata"),
        None,
        "labels and annotations unchanged"
    );
    assert_eq!(body["status"]["phase"], "Running");
    assert_eq!(body["status"]["podIP"], "10.0.0.7");
    assert!(edge.received().is_empty());
    edge.stop().await;
}

#[tokio::test]
async fn offline_a_node_lease_is_created_and_renewed_locally() {
    let node = Node::new();
    let edge = node.start(false).await;
    let leases: Api<Lease> = Api::namespaced(edge.client(), "kube-node-lease");
    let lease: Lease = serde_json::from_value(json!({
        "metadata": {"name": "n1"},
        "spec": {"holderIdentity": "n1", "leaseDurationSeconds": 40},
    }))
    .expect("a lease");
    let mut created = leases
        .create(&PostParams::default(), &lease)
        .await
        .expect("created locally");
    created.spec.as_mut().expect("spec").lease_duration_seconds = Some(41);
    let renewed = leases
        .replace("n1", &PostParams::default(), &created)
        .await
        .expect("renewed with the version it got");
    assert_eq!(
        renewed.spec.and_then(|s| s.lease_duration_seconds),
        Some(41)
    );
    assert_eq!(
        edge.store.outbox_len().await.expect("outbox"),
        1,
        "coalesced"
    );
    edge.stop().await;
}

#[tokio::test]
async fn offline_a_pod_create_is_a_503_status_saying_the_cloud_is_unreachable() {
    let node = Node::new();
    let edge = node.start(true).await;
    edge.go_offline();
    let body = serde_json::to_vec(&pod("new", "n1", "")).expect("JSON");
    let request = Request::post("/api/v1/namespaces/default/pods")
        .header("content-type", "application/json")
        .body(kube::client::Body::from(body))
        .expect("a request");
    let response = edge.client().send(request).await.expect("an answer");
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    let bytes = response.into_body().collect_bytes().await.expect("a body");
    let status: Value = serde_json::from_slice(&bytes).expect("JSON");
    assert_eq!(status["kind"], "Status");
    assert_eq!(status["reason"], "ServiceUnavailable");
    let message = status["message"].as_str().unwrap_or_default();
    assert!(message.contains("the cloud is unreachable"), "{message}");
    assert!(edge.received().is_empty());
    // The refusal is counted (and logged) at the edge, where the kubelet's log was the only
    // trace before, and shows in the node's metrics.
    let refused = edge.proxy.refusals().by_code();
    assert_eq!(refused.get(&503), Some(&1), "{refused:?}");
    let mut registry = prometheus_client::registry::Registry::default();
    edge.proxy.register_metrics(&mut registry);
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).expect("encodes");
    assert!(
        text.contains("lwproxy_refused_requests_total{code=\"503\"} 1"),
        "{text}"
    );
    edge.stop().await;
}

#[tokio::test]
async fn offline_a_create_of_a_held_object_is_already_exists_as_the_api_would_answer() {
    let node = Node::new();
    node.seed(
        "nodes",
        json!({"apiVersion": "v1", "kind": "Node",
        "metadata": {"name": "n1", "uid": "u1", "resourceVersion": "7"}}),
    )
    .await;
    let edge = node.start(false).await;
    // A kubelet restarted while the cloud is away registers its Node first.
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(edge.client());
    let again = serde_json::from_value(json!({"metadata": {"name": "n1"}})).expect("a Node");
    let err = nodes
        .create(&PostParams::default(), &again)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, kube::Error::Api(s) if s.code == 409 && s.reason == "AlreadyExists"),
        "{err:?}"
    );
    // A Node this edge does not hold is still the offline 503.
    let other = serde_json::from_value(json!({"metadata": {"name": "n2"}})).expect("a Node");
    let err = nodes
        .create(&PostParams::default(), &other)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, kube::Error::Api(s) if s.code == 503),
        "{err:?}"
    );
    assert!(edge.received().is_empty());
    edge.stop().await;
}

#[tokio::test]
async fn the_clouds_refusal_comes_back_as_its_status() {
    let node = Node::new();
    let edge = node.start(true).await;
    edge.downstream("pods", pod("p", "n1", "100")).await;
    let pods: Api<Pod> = Api::namespaced(edge.client(), "default");
    let e = api_error(pods.delete("p", &Default::default()).await.unwrap_err());
    assert_eq!((e.code, e.reason.as_str()), (403, "Forbidden"));
    assert!(
        e.message.contains("may not delete this pod"),
        "{}",
        e.message
    );
    assert_eq!(support::request_line(&edge.received()[0].write).0, "DELETE");
    edge.stop().await;
}

#[tokio::test]
async fn when_edgehub_cannot_send_a_status_write_is_applied_locally_and_others_are_refused() {
    let node = Node::new();
    let edge = node.start(true).await;
    edge.downstream("pods", pod("p", "n1", "100")).await;
    edge.refuse_to_send();
    let pods: Api<Pod> = Api::namespaced(edge.client(), "default");
    let patch = json!({"status": {"phase": "Succeeded"}});
    let patched = pods
        .patch_status("p", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("applied locally");
    let phase = patched.status.and_then(|s| s.phase);
    assert_eq!(phase.as_deref(), Some("Succeeded"));
    assert_eq!(edge.store.outbox_len().await.expect("outbox"), 1);

    let refused = pods
        .create(
            &PostParams::default(),
            &serde_json::from_value(pod("q", "n1", "")).expect("a pod"),
        )
        .await;
    let e = api_error(refused.unwrap_err());
    assert_eq!((e.code, e.reason.as_str()), (503, "ServiceUnavailable"));
    assert!(e.message.contains("edgehub has no link"), "{}", e.message);
    edge.stop().await;
}

/// A create whose answer never comes: the cloud may still apply it, so the client gets
/// kube-apiserver's 504 `Timeout` saying so, not a 503 that invites a duplicate.
#[tokio::test]
async fn a_write_sent_without_an_answer_in_time_is_a_504_saying_it_may_still_complete() {
    let node = Node::new();
    let config = lwproxy::Config {
        forward_timeout: Duration::from_millis(300),
        ..Edge::config()
    };
    let edge = node.start_with(true, config).await;
    edge.answer(Answering::Never);
    let pods: Api<Pod> = Api::namespaced(edge.client(), "default");
    let new: Pod = serde_json::from_value(pod("q", "n1", "")).expect("a pod");
    let e = api_error(pods.create(&PostParams::default(), &new).await.unwrap_err());
    assert_eq!((e.code, e.reason.as_str()), (504, "Timeout"));
    assert!(
        e.message.starts_with(
            "Timeout: request did not complete within requested timeout - the cloud did not \
             answer within 300ms"
        ),
        "{}",
        e.message
    );
    assert!(e.message.contains("may still complete"), "{}", e.message);
    assert_eq!(edge.received().len(), 1, "the create was sent");

    edge.answer(Answering::LinkLost);
    let e = api_error(pods.create(&PostParams::default(), &new).await.unwrap_err());
    assert_eq!((e.code, e.reason.as_str()), (504, "Timeout"));
    assert!(e.message.contains(edgehub::LINK_LOST), "{}", e.message);
    assert!(e.message.contains("may still complete"), "{}", e.message);

    edge.go_offline();
    let e = api_error(pods.create(&PostParams::default(), &new).await.unwrap_err());
    assert_eq!((e.code, e.reason.as_str()), (503, "ServiceUnavailable"));
    assert_eq!(edge.received().len(), 2, "offline, nothing is sent");
    edge.stop().await;
}

#[tokio::test]
async fn an_offline_status_write_is_never_stored_without_the_message_that_sends_it() {
    // Nothing but lwproxy and the store: a write stored here must already carry its queued
    // message, whatever happens to the process (or to metamanager) after that.
    let node = Node::new();
    node.seed("pods", pod("p", "n1", "100")).await;
    let edge = node.start_without_metamanager().await;
    let pods: Api<Pod> = Api::namespaced(edge.client(), "default");
    let patch = json!({"status": {"phase": "Running"}});
    let answered = pods
        .patch_status("p", &PatchParams::default(), &Patch::Merge(&patch))
        .await;
    let key = objstore::ObjKey::new("pods", "default", "p");
    let held = edge.store.get(&key).await.unwrap().expect("held");
    let stored = held.field("status.phase") == Some("Running");
    let queued = edge.store.outbox_len().await.unwrap();
    assert_eq!(
        (stored, queued),
        (true, 1),
        "stored and queued together (answer: {answered:?})"
    );
    assert!(answered.is_ok());
    edge.stop().await;
}

#[test]
fn writes_go_to_the_module_edgehub_registers_as() {
    assert_eq!(lwproxy::HUB_MODULE, edgehub::NAME);
    assert_eq!(apimachinery::forward::LINK_LOST, edgehub::LINK_LOST);
}
