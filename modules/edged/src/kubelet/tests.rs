//! The kubelet API over edged running pods on the fake runtime (the crate's harness, real
//! time): logs from CRI files written by the test, the checks of every parameter, and the
//! upgrade proxying to a streaming server the test plays on loopback.

use std::time::Duration;

use axum::body::Body;
use http::{Request, StatusCode};
use http_body_util::BodyExt;
use kube::api::PostParams;
use testkit::eventually;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tower::ServiceExt;

use crate::tests::{Harness, IMAGE, harness_on, pod};

const WAIT: Duration = Duration::from_secs(10);

/// The harness with pod `web` (container `c`) running; returns the pod's uid.
async fn running_web() -> (Harness, String) {
    let h = harness_on(None).await;
    let created = h
        .pods
        .create(&PostParams::default(), &pod("web", IMAGE, "Always"))
        .await
        .unwrap();
    eventually("the container runs", WAIT, || async {
        h.rt.containers()
            .iter()
            .any(|c| c.2 == cri::api::ContainerState::ContainerRunning)
    })
    .await;
    let uid = created.metadata.uid.unwrap();
    (h, uid)
}

/// Writes `entries` as attempt `attempt`'s CRI log of container `c` of pod `web`.
fn write_log(h: &Harness, uid: &str, attempt: u32, entries: &str) -> std::path::PathBuf {
    let dir = h
        .shared
        .config
        .pod_logs_directory
        .join(format!("default_web_{uid}/c"));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!("{attempt}.log"));
    std::fs::write(&path, entries).unwrap();
    path
}

async fn get(h: &Harness, uri: &str) -> (StatusCode, String) {
    let router = super::router(h.shared.clone());
    let request = Request::get(uri).body(Body::empty()).unwrap();
    let response = router.oneshot(request).await.unwrap();
    let status = response.status();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8_lossy(&body).into_owned())
}

const LOG: &str = "\
2020-01-01T00:00:00.000000001Z stdout F one
2020-01-01T00:00:01Z stderr P tw
2020-01-01T00:00:02Z stdout F three
2020-01-01T00:00:03Z stderr F o
2099-01-01T00:00:00Z stdout F future
";

#[tokio::test]
async fn healthz_is_ok_and_pods_lists_the_pods_edged_runs() {
    let (h, uid) = running_web().await;
    assert_eq!(get(&h, "/healthz").await, (StatusCode::OK, "ok".into()));
    let (status, body) = get(&h, "/pods").await;
    assert_eq!(status, StatusCode::OK);
    let list: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(list["kind"], "PodList");
    assert_eq!(list["items"][0]["metadata"]["uid"], uid.as_str());
    assert_eq!(list["items"].as_array().unwrap().len(), 1);
}

#[tokio::test]
async fn stats_summary_and_resource_metrics_are_served_for_the_running_pod() {
    let (h, uid) = running_web().await;
    h.rt.set_usage(
        "c",
        cri::fake::Usage {
            cpu_core_nanos: 2_000_000_000,
            working_set_bytes: 3 << 20,
            ..Default::default()
        },
    );
    let (status, body) = get(&h, "/stats/summary").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let summary: serde_json::Value = serde_json::from_str(&body).unwrap();
    let pod = &summary["pods"][0];
    assert_eq!(pod["podRef"]["uid"], uid.as_str(), "{body}");
    assert_eq!(pod["containers"][0]["name"], "c");
    assert_eq!(pod["containers"][0]["memory"]["workingSetBytes"], 3 << 20);
    assert!(summary["node"]["nodeName"].is_string(), "{body}");
    let (status, text) = get(&h, "/metrics/resource").await;
    assert_eq!(status, StatusCode::OK);
    let sample = format!(
        "container_memory_working_set_bytes{{container=\"c\",namespace=\"default\",pod=\"web\"}} {}",
        3 << 20
    );
    assert!(text.contains(&sample), "{text}");
}

#[tokio::test]
async fn container_logs_decode_the_cri_file_under_every_parameter() {
    let (h, uid) = running_web().await;
    write_log(&h, &uid, 0, LOG);
    let base = "/containerLogs/default/web/c";
    let cases = [
        ("", "one\nthree\ntwo\nfuture\n"),
        ("?tailLines=2", "two\nfuture\n"),
        ("?tailLines=0", ""),
        ("?sinceTime=2020-01-01T00:00:02Z", "three\nfuture\n"),
        ("?sinceSeconds=60", "future\n"),
        ("?limitBytes=6", "one\nth"),
        (
            "?timestamps=true&tailLines=1&sinceTime=2020-01-01T00:00:03Z",
            "2099-01-01T00:00:00Z future\n",
        ),
        (
            "?timestamps=1&limitBytes=40",
            "2020-01-01T00:00:00.000000001Z one\n2020-",
        ),
    ];
    for (query, want) in cases {
        let (status, body) = get(&h, &format!("{base}{query}")).await;
        assert_eq!((status, body.as_str()), (StatusCode::OK, want), "{query}");
    }
}

#[tokio::test]
async fn follow_streams_lines_written_later_until_the_container_exits() {
    let (h, uid) = running_web().await;
    let path = write_log(&h, &uid, 0, "2020-01-01T00:00:00Z stdout F first\n");
    let router = super::router(h.shared.clone());
    let request = Request::get("/containerLogs/default/web/c?follow=true")
        .body(Body::empty())
        .unwrap();
    let response = router.oneshot(request).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let mut body = response.into_body();
    let mut next = async || {
        let frame = tokio::time::timeout(WAIT, body.frame())
            .await
            .expect("a frame in time");
        frame.map(|f| f.unwrap().into_data().unwrap())
    };
    assert_eq!(next().await.unwrap(), "first\n");
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap();
    std::io::Write::write_all(
        &mut file,
        b"2020-01-01T00:00:01Z stdout P sec\n2020-01-01T00:00:01Z stdout F ond\n",
    )
    .unwrap();
    assert_eq!(next().await.unwrap(), "second\n");
    assert_eq!(h.rt.exit("c", 0), 1);
    assert!(next().await.is_none(), "the stream ends with the container");
}

#[tokio::test]
async fn previous_reads_the_last_terminated_instance() {
    let (h, uid) = running_web().await;
    write_log(&h, &uid, 0, "2020-01-01T00:00:00Z stdout F zero\n");
    let (status, body) = get(&h, "/containerLogs/default/web/c?previous=true").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        body.contains("previous terminated container \"c\" in pod \"default/web\" not found"),
        "{body}"
    );
    assert_eq!(h.rt.exit("c", 1), 1);
    eventually("the container runs again", WAIT, || async {
        h.rt.containers()
            .iter()
            .any(|c| c.1 == 1 && c.2 == cri::api::ContainerState::ContainerRunning)
    })
    .await;
    write_log(&h, &uid, 1, "2020-01-01T00:00:05Z stdout F one\n");
    let previous = get(&h, "/containerLogs/default/web/c?previous=true").await;
    assert_eq!(previous, (StatusCode::OK, "zero\n".into()));
    let current = get(&h, "/containerLogs/default/web/c").await;
    assert_eq!(current, (StatusCode::OK, "one\n".into()));
}

#[tokio::test]
async fn bad_names_and_parameters_are_400_and_unknown_pods_404_naming_them() {
    let (h, _) = running_web().await;
    let cases = [
        (
            "/containerLogs/default/web/c?tailLines=x",
            400,
            "tailLines \"x\"",
        ),
        (
            "/containerLogs/default/web/c?limitBytes=0",
            400,
            "limitBytes",
        ),
        ("/containerLogs/default/Web/c", 400, "pod name \"Web\""),
        (
            "/containerLogs/default/web/c%2F..",
            400,
            "container name \"c/..\"",
        ),
        (
            "/containerLogs/default/nope/c",
            404,
            "pod \"default/nope\" does not exist",
        ),
        (
            "/containerLogs/default/web/x",
            404,
            "container \"x\" is not valid for pod \"default/web\"",
        ),
        ("/exec/default/web/c?stdout=1", 400, "at least one command"),
        (
            "/exec/default/web/c?command=ls",
            400,
            "stdin, stdout, stderr",
        ),
        ("/portForward/default/web?port=70000", 400, "port \"70000\""),
    ];
    for (uri, code, text) in cases {
        let (status, body) = get(&h, uri).await;
        assert_eq!(status.as_u16(), code, "{uri}: {body}");
        assert!(
            body.contains(text),
            "{uri}: {body:?} should contain {text:?}"
        );
    }
}

#[tokio::test]
async fn a_uid_that_is_not_the_running_pods_is_404() {
    let (h, uid) = running_web().await;
    h.rt.serve_streams("http://127.0.0.1:9");
    for uri in [
        "/exec/default/web/u-old/c?command=ls&stdout=1",
        "/attach/default/web/u-old/c?stdout=1",
        "/portForward/default/web/u-old",
    ] {
        let (status, body) = get(&h, uri).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{uri}: {body}");
        assert!(body.contains("uid \"u-old\""), "{body}");
    }
    assert_eq!(h.rt.count("Exec") + h.rt.count("Attach"), 0);
    // The right uid gets as far as the (absent) streaming server.
    let (status, body) = get(&h, &format!("/attach/default/web/{uid}/c?stdout=1")).await;
    assert_eq!(status, StatusCode::BAD_GATEWAY, "{body}");
    assert_eq!(h.rt.count("Attach"), 1);
}

/// A streaming server on loopback: answers one request with `answer`, sends the request's
/// head to the test, then echoes what it reads.
async fn streaming_server(
    answer: &'static str,
) -> (String, tokio::sync::oneshot::Receiver<String>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let (tx, rx) = tokio::sync::oneshot::channel();
    tokio::spawn(async move {
        let (mut conn, _) = listener.accept().await.unwrap();
        let head = read_head(&mut conn).await;
        let _ = tx.send(head);
        conn.write_all(answer.as_bytes()).await.unwrap();
        let mut buf = [0; 1024];
        while let Ok(n) = conn.read(&mut buf).await {
            if n == 0 || conn.write_all(&buf[..n]).await.is_err() {
                break;
            }
        }
    });
    (base, rx)
}

async fn read_head(conn: &mut TcpStream) -> String {
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        let mut byte = [0];
        if conn.read(&mut byte).await.unwrap() == 0 {
            break;
        }
        head.push(byte[0]);
    }
    String::from_utf8(head).unwrap()
}

/// The router served on loopback, as edgecore serves it on a tunnel stream.
async fn serve(h: &Harness) -> std::net::SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let router = super::router(h.shared.clone());
    tokio::spawn(async move { axum::serve(listener, router).await });
    addr
}

const SWITCH: &str = "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\n\
                      Upgrade: SPDY/3.1\r\nX-Stream-Protocol-Version: v4.channel.k8s.io\r\n\r\n";

#[tokio::test]
async fn exec_and_port_forward_are_proxied_to_the_streaming_url_and_joined_after_101() {
    let (h, uid) = running_web().await;
    let addr = serve(&h).await;
    let requests = [
        format!("/exec/default/web/{uid}/c?command=sh&command=-c&command=echo%20hi&stdout=1"),
        "/portForward/default/web?port=8080".to_string(),
    ];
    for (i, path) in requests.iter().enumerate() {
        let (base, head) = streaming_server(SWITCH).await;
        h.rt.serve_streams(&base);
        let mut conn = TcpStream::connect(addr).await.unwrap();
        let request = format!(
            "POST {path} HTTP/1.1\r\nHost: node\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\n\
             X-Stream-Protocol-Version: v4.channel.k8s.io\r\nAuthorization: Bearer s3cret\r\n\r\n"
        );
        conn.write_all(request.as_bytes()).await.unwrap();
        let answer = read_head(&mut conn).await;
        assert!(answer.starts_with("HTTP/1.1 101"), "{answer}");
        let lower = answer.to_ascii_lowercase();
        assert!(
            lower.contains("x-stream-protocol-version: v4.channel.k8s.io"),
            "{answer}"
        );
        let seen = head.await.unwrap();
        let kind = if i == 0 {
            "/exec/container"
        } else {
            "/portforward/sandbox"
        };
        assert!(seen.starts_with(&format!("POST {kind}")), "{seen}");
        let seen = seen.to_ascii_lowercase();
        assert!(seen.contains("upgrade: spdy/3.1"), "{seen}");
        assert!(
            seen.contains("x-stream-protocol-version: v4.channel.k8s.io"),
            "{seen}"
        );
        assert!(!seen.contains("s3cret"), "credentials stay here: {seen}");
        conn.write_all(b"ping").await.unwrap();
        let mut echoed = [0; 4];
        tokio::time::timeout(WAIT, conn.read_exact(&mut echoed))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(&echoed, b"ping");
    }
    let calls = h.rt.calls();
    assert!(
        calls
            .iter()
            .any(|c| c.starts_with("Exec container") && c.ends_with("sh -c echo hi"))
    );
    assert!(
        calls
            .iter()
            .any(|c| c.starts_with("PortForward sandbox") && c.ends_with(" 8080"))
    );
}

#[tokio::test]
async fn a_streaming_server_refusal_is_relayed_as_it_is() {
    let (h, _) = running_web().await;
    let (base, _head) =
        streaming_server("HTTP/1.1 403 Forbidden\r\nContent-Length: 7\r\n\r\nno way\n").await;
    h.rt.serve_streams(&base);
    let (status, body) = get(&h, "/attach/default/web/c?stdin=true&tty=true").await;
    assert_eq!((status, body.as_str()), (StatusCode::FORBIDDEN, "no way\n"));
}

#[tokio::test]
async fn attach_reaches_an_ephemeral_container_as_kubectl_debug_does() {
    let (h, _) = running_web().await;
    let debug = serde_json::json!({"spec": {"ephemeralContainers": [{
        "name": "debugger", "image": IMAGE, "targetContainerName": "c", "stdin": true, "tty": true,
    }]}});
    let patch = kube::api::Patch::Merge(&debug);
    h.pods
        .patch_subresource("ephemeralcontainers", "web", &Default::default(), &patch)
        .await
        .unwrap();
    eventually("the ephemeral container runs", WAIT, || async {
        let running = cri::api::ContainerState::ContainerRunning;
        h.rt.containers()
            .iter()
            .any(|c| c.0 == "debugger" && c.2 == running)
    })
    .await;
    let addr = serve(&h).await;
    let (base, head) = streaming_server(SWITCH).await;
    h.rt.serve_streams(&base);
    let mut conn = TcpStream::connect(addr).await.unwrap();
    let request = "POST /attach/default/web/debugger?stdin=1&stdout=1&tty=1 HTTP/1.1\r\n\
                   Host: node\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\n\r\n";
    conn.write_all(request.as_bytes()).await.unwrap();
    let answer = read_head(&mut conn).await;
    assert!(answer.starts_with("HTTP/1.1 101"), "{answer}");
    let id = h.rt.id_of("debugger").unwrap();
    assert!(
        head.await
            .unwrap()
            .starts_with(&format!("POST /attach/{id} "))
    );
}
