//! The kubelet API on a real private containerd (testkit's harness): edged runs a busybox pod,
//! and a WebSocket client speaking `v4.channel.k8s.io` (channel byte first: 1 stdout, 2 stderr,
//! 3 the status) execs in it and forwards a port through the router served on loopback, which
//! proxies to containerd's streaming server. The log written by containerd is read back too.
//! Fails, not skips, without containerd, runc, the CNI plugins or busybox-static (CI has them).

use std::sync::Arc;
use std::time::Duration;

use futures::{SinkExt, StreamExt};
use http::{HeaderValue, StatusCode};
use http_body_util::BodyExt;
use kube::api::PostParams;
use testkit::containerd::{BUSYBOX_IMAGE, Containerd, WAIT_FOR_TERM};
use testkit::eventually;
use tokio::net::{TcpListener, TcpStream};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tower::ServiceExt;

use crate::tests::{Harness, NODE, harness_on};

const WAIT: Duration = Duration::from_secs(60);

#[tokio::test]
async fn exec_and_port_forward_reach_a_real_container_through_the_router() {
    Containerd::available().expect("containerd, runc, CNI plugins and busybox-static");
    let containerd = Containerd::start().await.unwrap();
    let cri = containerd.connect().await.unwrap();
    let h = harness_on(Some(Arc::new(cri))).await;
    let script =
        format!("echo started; echo pong > /tmp/ping; httpd -f -p 8080 -h /tmp & {WAIT_FOR_TERM}");
    let pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"nodeName": NODE, "automountServiceAccountToken": false,
                 "containers": [{"name": "c", "image": BUSYBOX_IMAGE,
                                 "command": ["/bin/sh", "-c", script]}]},
    }))
    .unwrap();
    h.pods.create(&PostParams::default(), &pod).await.unwrap();
    eventually(
        "containerd's log of the container reads back",
        WAIT,
        || async { logs(&h).await == "started\n" },
    )
    .await;

    let addr = serve(&h).await;
    let query = "command=sh&command=-c&command=echo%20hi%3B%20exit%203&stdout=1&stderr=1";
    let started = std::time::Instant::now();
    let mut ws = websocket(addr, &format!("/exec/default/web/c?{query}")).await;
    let (mut stdout, mut status) = (Vec::new(), String::new());
    while let Some(message) = tokio::time::timeout(WAIT, ws.next()).await.unwrap() {
        let data = match message.unwrap() {
            Message::Binary(data) => data,
            Message::Close(_) => break,
            _ => continue,
        };
        match data.split_first() {
            Some((1, out)) => stdout.extend_from_slice(out),
            Some((3, json)) => status.push_str(&String::from_utf8_lossy(json)),
            _ => {}
        }
    }
    eprintln!("exec through the router took {:?}", started.elapsed());
    assert_eq!(String::from_utf8_lossy(&stdout), "hi\n");
    let status: serde_json::Value = serde_json::from_str(&status).unwrap();
    assert_eq!(status["reason"], "NonZeroExitCode", "{status}");
    assert_eq!(status["details"]["causes"][0]["message"], "3", "{status}");

    let mut ws = websocket(addr, "/portForward/default/web?port=8080").await;
    let request = b"GET /ping HTTP/1.0\r\n\r\n";
    let mut first = vec![0u8];
    first.extend_from_slice(request);
    ws.send(Message::Binary(first.into())).await.unwrap();
    let mut answer = Vec::new();
    // Each channel first carries its port (2 bytes, little-endian), then the data.
    let mut prefixed = false;
    while !String::from_utf8_lossy(&answer).contains("pong") {
        let message = tokio::time::timeout(WAIT, ws.next()).await.unwrap();
        let Some(Ok(Message::Binary(data))) = message else {
            panic!("port forward ended early: {message:?}, {answer:?}")
        };
        if let Some((0, bytes)) = data.split_first() {
            if !prefixed && bytes.len() >= 2 {
                assert_eq!(u16::from_le_bytes([bytes[0], bytes[1]]), 8080);
                prefixed = true;
                answer.extend_from_slice(&bytes[2..]);
            } else {
                answer.extend_from_slice(bytes);
            }
        }
    }
    assert!(prefixed, "the data channel named its port first");
    let answer = String::from_utf8_lossy(&answer);
    assert!(
        answer.starts_with("HTTP/1.") && answer.contains("200"),
        "{answer}"
    );
    drop(ws);
    drop(h);
    containerd.stop().await;
}

/// The container's log through the router, empty on any failure.
async fn logs(h: &Harness) -> String {
    let router = super::router(h.shared.clone());
    let request = http::Request::get("/containerLogs/default/web/c")
        .body(axum::body::Body::empty())
        .unwrap();
    let Ok(response) = router.oneshot(request).await;
    if response.status() != StatusCode::OK {
        return String::new();
    }
    let body = response.into_body().collect().await;
    body.map(|b| String::from_utf8_lossy(&b.to_bytes()).into_owned())
        .unwrap_or_default()
}

async fn serve(h: &Harness) -> std::net::SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let router = super::router(h.shared.clone());
    tokio::spawn(async move { axum::serve(listener, router).await });
    addr
}

/// A WebSocket to `path` on the router, speaking `v4.channel.k8s.io`.
async fn websocket(
    addr: std::net::SocketAddr,
    path: &str,
) -> tokio_tungstenite::WebSocketStream<TcpStream> {
    let mut request = format!("ws://{addr}{path}").into_client_request().unwrap();
    request.headers_mut().insert(
        "Sec-WebSocket-Protocol",
        HeaderValue::from_static("v4.channel.k8s.io"),
    );
    let stream = TcpStream::connect(addr).await.unwrap();
    let (ws, answer) = tokio_tungstenite::client_async(request, stream)
        .await
        .unwrap();
    assert_eq!(answer.status(), StatusCode::SWITCHING_PROTOCOLS);
    ws
}
