//! cloudhub opens streams to an edge's kubelet API over the node's own session, on both
//! transports, and refuses a node without a session at once; through the embedded API, a pod's
//! log request reaches the node (here one without edged, which says so).

use std::time::{Duration, Instant};

use bytes::Bytes;
use e2e::{Pki, Ports, edge, edge_config, k8s_cloud};
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, LogParams, PostParams};
use link::Transport;

const WAIT: Duration = Duration::from_secs(30);

/// `GET path` over a fresh tunnel stream to `node`: status and body.
async fn get_over_tunnel(cloud: &e2e::Cloud, node: &str, path: &str) -> (u16, String) {
    let stream = cloud
        .hub()
        .open_tunnel(node)
        .await
        .expect("a tunnel stream");
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(conn);
    let request = hyper::Request::get(path)
        .header("host", node)
        .body(Empty::<Bytes>::new())
        .unwrap();
    let answer = sender.send_request(request).await.unwrap();
    let status = answer.status().as_u16();
    let body = answer.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8_lossy(&body).into_owned())
}

async fn the_kubelet_api_of_an_edge_is_reached_over_its_session(transport: Transport) {
    let pki = Pki::new();
    let dir = tempfile::tempdir().unwrap();
    let cloud = k8s_cloud(&pki, Ports::default()).await;
    let config = edge_config(
        &pki.node("edge-1"),
        cloud.addr(transport),
        transport,
        &dir.path().join("edge.db"),
    );
    let edge = edge(config).await;
    edge.linked().await;

    // edged is off on this node: its kubelet API answers that it is not served, over the link.
    for _ in 0..3 {
        let (status, body) = get_over_tunnel(&cloud, "edge-1", "/healthz").await;
        assert_eq!(status, 501, "{body}");
        assert!(body.contains("modules.edged is disabled"), "{body}");
    }
    // Several at once, each its own stream.
    let answers =
        futures::future::join_all((0..8).map(|_| get_over_tunnel(&cloud, "edge-1", "/pods"))).await;
    assert!(answers.iter().all(|(s, _)| *s == 501), "{answers:?}");

    // A node with no session is refused at once, by name.
    let started = Instant::now();
    let refused = cloud.hub().open_tunnel("edge-2").await.err().unwrap();
    assert!(started.elapsed() < Duration::from_secs(1));
    assert!(matches!(
        refused,
        cloudhub::TunnelError::NotConnected { .. }
    ));
    assert!(refused.to_string().contains("edge-2"), "{refused}");

    // Through the embedded API: a pod's log request reaches the node and relays its answer.
    let pods: Api<Pod> = Api::namespaced(cloud.kube().await, "default");
    pods.create(&PostParams::default(), &e2e::plain_pod("web", "edge-1"))
        .await
        .unwrap();
    let err = pods.logs("web", &LogParams::default()).await.unwrap_err();
    assert!(
        err.to_string().contains("modules.edged is disabled"),
        "the node's answer is relayed: {err}"
    );

    // The node gone: its session is dropped and the stream refused at once.
    edge.stop().await;
    testkit::eventually("cloudhub sees the node gone", WAIT, || async {
        cloud.hub().node("edge-1").is_some_and(|n| !n.connected)
    })
    .await;
    let started = Instant::now();
    let refused = cloud.hub().open_tunnel("edge-1").await.err().unwrap();
    assert!(started.elapsed() < Duration::from_secs(1));
    assert!(matches!(
        refused,
        cloudhub::TunnelError::NotConnected { .. }
    ));
    cloud.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kubelet_api_of_an_edge_is_reached_over_its_websocket_session() {
    the_kubelet_api_of_an_edge_is_reached_over_its_session(Transport::WebSocket).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kubelet_api_of_an_edge_is_reached_over_its_quic_session() {
    the_kubelet_api_of_an_edge_is_reached_over_its_session(Transport::Quic).await;
}
