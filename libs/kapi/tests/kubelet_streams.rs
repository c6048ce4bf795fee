//! The kubelet streams over a node dialer, on real sockets: the API server (kapi's router
//! served on loopback) sends pods/log, exec, attach, portforward and nodes/proxy to a stub
//! kubelet reached through a test dialer, and a real HTTP/1.1 client does the upgrades.

#[path = "support/kubelet.rs"]
mod kubelet;
mod support;

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use apimachinery::ApiError;
use axum::body::Body;
use axum::http::{Method, Request, Response, StatusCode, header};
use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use kapi::nodes::NodeDialer;
use kapi::{Authorizer, ReadRequest, ServeConfig, ServeStats};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use kubelet::{NotConnected, StubKubelet};
use support::{Harness, harness};

const WAIT: Duration = Duration::from_secs(10);

/// The API server on loopback with `dialer`, over a store holding pod `default/web` (uid
/// `uid-1`, container `app`, on `edge-1`) and node `edge-1`.
struct Server {
    addr: SocketAddr,
    _h: Harness,
    shutdown: CancellationToken,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

async fn server(dialer: Arc<dyn NodeDialer>, authorizer: Option<Arc<dyn Authorizer>>) -> Server {
    let mut h = harness();
    h.api.authorizer = authorizer;
    h.put(
        "pods",
        json!({"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": "web", "namespace": "default", "uid": "uid-1"},
               "spec": {"nodeName": "edge-1", "containers": [{"name": "app", "image": "x"}]},
               "status": {"phase": "Running"}}),
    )
    .await;
    h.put(
        "nodes",
        json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "edge-1"}}),
    )
    .await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind loopback");
    let addr = listener.local_addr().expect("an address");
    let shutdown = CancellationToken::new();
    let app = kapi::nodes::with_node_dialer(h.router(), dialer);
    tokio::spawn(kapi::serve(
        listener,
        None,
        app,
        ServeConfig::default(),
        ServeStats::default(),
        shutdown.clone(),
        TaskTracker::new(),
    ));
    Server {
        addr,
        _h: h,
        shutdown,
    }
}

/// Sends `req` on a new HTTP/1.1 connection to `addr` (upgrades allowed).
async fn send(addr: SocketAddr, req: Request<Body>) -> Response<Incoming> {
    let tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tcp))
        .await
        .expect("handshake");
    tokio::spawn(conn.with_upgrades());
    tokio::time::timeout(WAIT, sender.send_request(req))
        .await
        .expect("an answer within the wait")
        .expect("an answer")
}

fn request(method: Method, uri: &str) -> axum::http::request::Builder {
    Request::builder()
        .method(method)
        .uri(uri)
        .header(header::HOST, "api")
        .header(header::AUTHORIZATION, "Bearer caller-secret")
}

fn upgrade(method: Method, uri: &str) -> Request<Body> {
    request(method, uri)
        .header(header::CONNECTION, "Upgrade")
        .header(header::UPGRADE, "SPDY/3.1")
        .header("x-stream-protocol-version", "v4.channel.k8s.io")
        .body(Body::empty())
        .expect("a request")
}

fn get(uri: &str) -> Request<Body> {
    request(Method::GET, uri)
        .body(Body::empty())
        .expect("a request")
}

async fn text(resp: Response<Incoming>) -> String {
    let body = tokio::time::timeout(WAIT, resp.into_body().collect())
        .await
        .expect("the body within the wait")
        .expect("a body")
        .to_bytes();
    String::from_utf8_lossy(&body).into_owned()
}

/// The next data frame of a streamed body.
async fn next_chunk(body: &mut Incoming) -> Bytes {
    loop {
        let frame = tokio::time::timeout(WAIT, body.frame())
            .await
            .expect("a frame within the wait")
            .expect("the stream is open")
            .expect("a frame");
        if let Ok(data) = frame.into_data() {
            return data;
        }
    }
}

const POD: &str = "/api/v1/namespaces/default/pods/web";

#[tokio::test]
async fn each_pod_stream_reaches_the_kubelet_path_kube_apiserver_builds_with_the_pod_uid() {
    let kubelet = StubKubelet::start().await;
    let s = server(kubelet.dialer("edge-1"), None).await;
    let resp = send(
        s.addr,
        get(&format!("{POD}/log?tailLines=2&timestamps=true")),
    )
    .await;
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(text(resp).await, "line 1\n");
    let uris = [
        (
            Method::POST,
            "exec?command=ls&command=-l&stdin=true&stdout=true",
        ),
        (
            Method::POST,
            "attach?container=app&stdout=true&stderr=true&tty=true",
        ),
        (Method::GET, "portforward?ports=8080"),
    ];
    for (method, uri) in uris {
        let resp = send(s.addr, upgrade(method, &format!("{POD}/{uri}"))).await;
        assert_eq!(resp.status(), StatusCode::SWITCHING_PROTOCOLS, "{uri}");
    }
    let node = "/api/v1/nodes/edge-1/proxy/stats/summary?only_cpu_and_memory=true";
    let resp = send(s.addr, get(node)).await;
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(
        text(resp).await,
        "kubelet /stats/summary?only_cpu_and_memory=true"
    );
    assert_eq!(
        kubelet.paths(),
        [
            "/containerLogs/default/web/app?tailLines=2&timestamps=true",
            "/exec/default/web/uid-1/app?command=ls&command=-l&input=1&output=1",
            "/attach/default/web/uid-1/app?error=1&output=1&tty=1",
            "/portForward/default/web/uid-1?port=8080",
            "/stats/summary?only_cpu_and_memory=true",
        ]
    );
    for seen in kubelet.seen() {
        assert!(
            seen.headers.get(header::AUTHORIZATION).is_none(),
            "the caller's credentials reached the kubelet at {}",
            seen.path
        );
        assert_eq!(seen.headers[header::HOST], "edge-1");
    }
}

#[tokio::test]
async fn a_followed_log_brings_a_line_written_while_the_request_is_open() {
    let kubelet = StubKubelet::start().await;
    let s = server(kubelet.dialer("edge-1"), None).await;
    let resp = send(s.addr, get(&format!("{POD}/log?follow=true"))).await;
    assert_eq!(resp.status(), StatusCode::OK);
    let mut body = resp.into_body();
    assert_eq!(next_chunk(&mut body).await, "line 1\n");
    kubelet.write_log("line 2\n").await;
    assert_eq!(next_chunk(&mut body).await, "line 2\n");
    kubelet.end_log();
    let rest = tokio::time::timeout(WAIT, body.collect())
        .await
        .expect("the end within the wait")
        .expect("a clean end");
    assert!(rest.to_bytes().is_empty());
    assert_eq!(
        kubelet.paths(),
        ["/containerLogs/default/web/app?follow=true"]
    );
}

#[tokio::test]
async fn an_exec_upgrade_carries_a_mebibyte_both_ways() {
    let kubelet = StubKubelet::start().await;
    let s = server(kubelet.dialer("edge-1"), None).await;
    let uri = format!("{POD}/exec?command=cat&stdin=true&stdout=true");
    let mut resp = send(s.addr, upgrade(Method::POST, &uri)).await;
    assert_eq!(resp.status(), StatusCode::SWITCHING_PROTOCOLS);
    assert_eq!(resp.headers()[header::UPGRADE], "SPDY/3.1");
    assert_eq!(
        resp.headers()["x-stream-protocol-version"],
        "v4.channel.k8s.io"
    );
    let upgraded = tokio::time::timeout(WAIT, hyper::upgrade::on(&mut resp))
        .await
        .expect("upgraded within the wait")
        .expect("upgraded");
    let (mut rd, mut wr) = tokio::io::split(TokioIo::new(upgraded));
    let sent: Vec<u8> = (0..1 << 20).map(|i: u32| (i % 251) as u8).collect();
    let started = Instant::now();
    let to_send = sent.clone();
    let writer = tokio::spawn(async move {
        wr.write_all(&to_send).await.expect("written");
        wr
    });
    let mut echoed = vec![0u8; sent.len()];
    tokio::time::timeout(WAIT, rd.read_exact(&mut echoed))
        .await
        .expect("the echo within the wait")
        .expect("echoed");
    let elapsed = started.elapsed();
    assert!(echoed == sent, "the echo differs from what was sent");
    let mut wr = writer.await.expect("the writer");
    wr.shutdown().await.expect("shut down");
    let mut tail = Vec::new();
    tokio::time::timeout(WAIT, rd.read_to_end(&mut tail))
        .await
        .expect("the stream ends after the client's end")
        .expect("a clean end");
    assert!(tail.is_empty());
    println!("1 MiB each way through an exec upgrade in {elapsed:?}");
}

#[tokio::test]
async fn a_refused_upgrade_is_relayed_with_the_kubelets_status_and_body() {
    let kubelet = StubKubelet::start().await;
    let s = server(kubelet.dialer("edge-1"), None).await;
    let uri = format!("{POD}/exec?command=fail&stdout=true");
    let resp = send(s.addr, upgrade(Method::POST, &uri)).await;
    assert_eq!(resp.status(), StatusCode::BAD_REQUEST);
    assert_eq!(text(resp).await, "container not found (\"nope\")");
}

#[tokio::test]
async fn a_node_that_hangs_up_mid_stream_ends_the_clients_stream() {
    let kubelet = StubKubelet::start().await;
    let s = server(kubelet.dialer("edge-1"), None).await;
    let uri = format!("{POD}/exec?command=hangup&stdin=true&stdout=true");
    let mut resp = send(s.addr, upgrade(Method::POST, &uri)).await;
    assert_eq!(resp.status(), StatusCode::SWITCHING_PROTOCOLS);
    let upgraded = hyper::upgrade::on(&mut resp).await.expect("upgraded");
    let mut io = TokioIo::new(upgraded);
    io.write_all(b"ping").await.expect("written");
    let mut seen = Vec::new();
    tokio::time::timeout(WAIT, io.read_to_end(&mut seen))
        .await
        .expect("the stream ends within the wait")
        .expect("a clean end");
    assert_eq!(seen, b"ping");
}

#[tokio::test]
async fn a_log_cut_by_the_node_mid_stream_ends_with_an_error_not_a_clean_end() {
    let kubelet = StubKubelet::start().await;
    let s = server(kubelet.dialer("edge-1"), None).await;
    let resp = send(s.addr, get(&format!("{POD}/log?previous=true"))).await;
    assert_eq!(resp.status(), StatusCode::OK);
    let mut body = resp.into_body();
    assert_eq!(next_chunk(&mut body).await, "line 1\n");
    kubelet.end_log();
    let end = tokio::time::timeout(WAIT, body.collect())
        .await
        .expect("the end within the wait");
    assert!(end.is_err(), "a cut log ended as if complete");
}

#[tokio::test]
async fn a_node_that_is_not_connected_is_a_503_at_once_naming_the_node() {
    let dialer = Arc::new(NotConnected::default());
    let s = server(dialer.clone(), None).await;
    let started = Instant::now();
    let log = send(s.addr, get(&format!("{POD}/log"))).await;
    let exec = send(
        s.addr,
        upgrade(Method::POST, &format!("{POD}/exec?command=ls&stdout=1")),
    )
    .await;
    let node = send(s.addr, get("/api/v1/nodes/edge-1/proxy/healthz")).await;
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    for resp in [log, exec, node] {
        assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE);
        let status: Value = serde_json::from_str(&text(resp).await).expect("a Status");
        assert_eq!(status["reason"], "ServiceUnavailable");
        assert_eq!(
            status["message"],
            "error dialing backend: node edge-1 is not connected to cloudcore"
        );
    }
    assert_eq!(dialer.dials.load(Ordering::SeqCst), 3);
}

/// Records the verbs asked about the streams and refuses one subresource.
struct Refusing {
    refused: &'static str,
    asked: Mutex<Vec<String>>,
}

#[async_trait::async_trait]
impl Authorizer for Refusing {
    async fn authorize_read(&self, req: &ReadRequest<'_>) -> Result<(), ApiError> {
        let sub = req.subresource.unwrap_or_default();
        if let Some(sub) = req.subresource {
            let asked = format!("{} {}/{sub}", req.verb, req.info.plural);
            self.asked.lock().expect("lock").push(asked);
        }
        if sub == self.refused {
            return Err(ApiError::forbidden("", "pods/exec", req.name, "refused"));
        }
        Ok(())
    }
}

#[tokio::test]
async fn a_user_without_the_verb_gets_403_and_nothing_is_dialed() {
    let kubelet = StubKubelet::start().await;
    let dialer = kubelet.dialer("edge-1");
    let authorizer = Arc::new(Refusing {
        refused: "exec",
        asked: Mutex::new(Vec::new()),
    });
    let s = server(dialer.clone(), Some(authorizer.clone())).await;
    let exec = format!("{POD}/exec?command=ls&stdout=1");
    let resp = send(s.addr, upgrade(Method::POST, &exec)).await;
    assert_eq!(resp.status(), StatusCode::FORBIDDEN);
    let resp = send(s.addr, upgrade(Method::GET, &exec)).await;
    assert_eq!(resp.status(), StatusCode::FORBIDDEN);
    assert_eq!(dialer.dials.load(Ordering::SeqCst), 0);
    assert!(kubelet.paths().is_empty());
    let resp = send(s.addr, get(&format!("{POD}/log"))).await;
    assert_eq!(resp.status(), StatusCode::OK);
    let resp = send(s.addr, upgrade(Method::GET, &format!("{POD}/portforward"))).await;
    assert_eq!(resp.status(), StatusCode::SWITCHING_PROTOCOLS);
    assert_eq!(
        *authorizer.asked.lock().expect("lock"),
        [
            "create pods/exec",
            "get pods/exec",
            "get pods/log",
            "get pods/portforward",
            "create pods/portforward",
        ]
    );
}
