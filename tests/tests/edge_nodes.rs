//! Who is an edge node: a node that holds an authenticated session is served, whatever labels
//! its Node carries (a kubelet may not set node-role labels on itself).

use std::time::Duration;

use e2e::Pki;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::json;
use testkit::eventually;

const WAIT: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_re_registered_through_lwproxy_without_the_edge_label_is_still_served() {
    let pki = Pki::new();
    let dir = tempfile::tempdir().unwrap();
    let (cloud, edge) = e2e::linked_site(&pki, dir.path(), "edge-1").await;
    let admin = cloud.kube().await;
    let nodes: Api<Node> = Api::all(admin.clone());
    eventually("the edge holds its Node", WAIT, || async {
        edge.held().await.contains_key("nodes//edge-1")
    })
    .await;

    // The Node is deleted in the cloud; the kubelet registers it again, with no node-role label.
    nodes
        .delete("edge-1", &DeleteParams::default())
        .await
        .unwrap();
    eventually("the Node is gone at the edge", WAIT, || async {
        !edge.held().await.contains_key("nodes//edge-1")
    })
    .await;
    let bare: Node = serde_json::from_value(
        json!({"metadata": {"name": "edge-1", "labels": {"kubernetes.io/hostname": "edge-1"}}}),
    )
    .unwrap();
    let at_edge: Api<Node> = Api::all(edge.lwproxy_client());
    at_edge.create(&PostParams::default(), &bare).await.unwrap();
    let labels = nodes.get("edge-1").await.unwrap().metadata.labels;
    assert!(
        !labels
            .unwrap_or_default()
            .contains_key(edgecontroller::EDGE_LABEL),
        "the test needs a Node without the edge label"
    );

    // A pod bound to it reaches the edge, and so does the new Node.
    let pods: Api<Pod> = Api::namespaced(admin, "default");
    let created = pods
        .create(&PostParams::default(), &e2e::plain_pod("web", "edge-1"))
        .await
        .unwrap();
    let rv = created.metadata.resource_version.unwrap();
    eventually("the pod and the Node reach the edge", WAIT, || async {
        let held = edge.held().await;
        held.get("pods/default/web") == Some(&rv) && held.contains_key("nodes//edge-1")
    })
    .await;
    edge.stop().await;
    cloud.stop().await;
}
