//! The proxy subresources through the router: without a proxy config (lwproxy) they answer as
//! an unreachable kubelet once the `name:port` is parsed; with one, nodes are proxied on their
//! own ports, the kubelet's port is still unreachable, and loopback pods are refused unless
//! allowed.

use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use http_body_util::BodyExt;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tower::ServiceExt;

use crate::support::{Harness, harness};

/// An HTTP server on 127.0.0.1:0 answering `hello <path>` once per connection.
async fn hello_server() -> u16 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            let mut head = Vec::new();
            let mut buf = [0u8; 512];
            while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                match conn.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => head.extend_from_slice(&buf[..n]),
                }
            }
            let head = String::from_utf8_lossy(&head).into_owned();
            let path = head.split(' ').nth(1).unwrap_or("").to_owned();
            let body = format!("hello {path}");
            let answer = format!(
                "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = conn.write_all(answer.as_bytes()).await;
        }
    });
    port
}

async fn placed_pod(h: &Harness, ip: &str) {
    h.put(
        "pods",
        json!({"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": "placed", "namespace": "default"},
               "spec": {"nodeName": "edge-1", "containers": [{"name": "c", "image": "nginx"}]},
               "status": {"podIP": ip}}),
    )
    .await;
}

async fn get(router: axum::Router, uri: &str) -> (StatusCode, Value, String) {
    let req = Request::get(uri).body(Body::empty()).unwrap();
    let resp = router.oneshot(req).await.unwrap();
    let status = resp.status();
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    let text = String::from_utf8_lossy(&body).into_owned();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::Null),
        text,
    )
}

fn proxying(h: &Harness, allow_loopback: bool) -> axum::Router {
    let config = kapi::ProxyConfig::new(Duration::from_millis(500), allow_loopback);
    kapi::with_proxy(h.router(), config)
}

#[tokio::test]
async fn without_a_proxy_config_a_pod_port_proxy_is_an_unreachable_kubelet_and_a_service_a_503() {
    let h = harness();
    placed_pod(&h, "10.244.0.9").await;
    let (status, body, _) = get(
        h.router(),
        "/api/v1/namespaces/default/pods/placed:8080/proxy/x",
    )
    .await;
    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR, "{body}");
    let message = body["message"].as_str().unwrap();
    assert!(
        message.starts_with("error dialing backend: ") && message.contains("\"edge-1\""),
        "{message}"
    );
    h.put(
        "services",
        json!({"apiVersion": "v1", "kind": "Service",
               "metadata": {"name": "web", "namespace": "default"}, "spec": {}}),
    )
    .await;
    let (status, body, _) = get(h.router(), "/api/v1/namespaces/default/services/web/proxy/").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    let (status, _, _) = get(
        h.router(),
        "/api/v1/namespaces/default/services/gone:80/proxy/",
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn nodes_are_proxied_on_their_own_ports_but_not_the_kubelets() {
    let h = harness();
    let port = hello_server().await;
    h.put(
        "nodes",
        json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "edge-1"},
               "status": {"addresses": [{"type": "Hostname", "address": "edge-1"},
                                        {"type": "InternalIP", "address": "127.0.0.1"}],
                          "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}}}}),
    )
    .await;
    let uri = format!("/api/v1/nodes/edge-1:{port}/proxy/metrics");
    let (status, _, text) = get(proxying(&h, true), &uri).await;
    assert_eq!((status, text.as_str()), (StatusCode::OK, "hello /metrics"));
    for kubelet in [
        "/api/v1/nodes/edge-1/proxy/pods",
        "/api/v1/nodes/edge-1:10250/proxy/pods",
    ] {
        let (status, body, _) = get(proxying(&h, true), kubelet).await;
        assert_eq!(
            status,
            StatusCode::INTERNAL_SERVER_ERROR,
            "{kubelet}: {body}"
        );
        assert!(
            body["message"].as_str().unwrap().contains("nodes/proxy"),
            "{body}"
        );
    }
}

#[tokio::test]
async fn a_loopback_pod_address_is_refused_unless_allowed() {
    let h = harness();
    let port = hello_server().await;
    placed_pod(&h, "127.0.0.1").await;
    let uri = format!("/api/v1/namespaces/default/pods/placed:{port}/proxy/x");
    let (status, body, _) = get(proxying(&h, false), &uri).await;
    assert_eq!(
        (status, body["message"].as_str()),
        (StatusCode::BAD_REQUEST, Some("address not allowed"))
    );
    let (status, _, text) = get(proxying(&h, true), &uri).await;
    assert_eq!((status, text.as_str()), (StatusCode::OK, "hello /x"));
}
