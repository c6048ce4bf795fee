//! The embedded control plane with a node dialer, driven by kubectl over real TLS: `kubectl
//! logs` reads a pod's log from a stub kubelet reached through the dialer, and RBAC decides
//! before anything is dialed (a user who may read logs but not create `pods/exec` is refused
//! an exec with a 403, and the node is never dialed for it).

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use apiserver::{ApiServer, Config};
use axum::body::Body;
use axum::extract::Request;
use axum::http::StatusCode;
use axum::response::Response;
use kapi::nodes::{DialError, NodeDialer, NodeStream};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

const POD: &str = r#"{"apiVersion": "v1", "kind": "Pod",
  "metadata": {"name": "web", "namespace": "default"},
  "spec": {"nodeName": "edge-1", "containers": [{"name": "app", "image": "registry.local/app:1"}]}}"#;

/// A kubelet API on loopback answering `hello from <path>\n`, and an exec over WebSocket
/// (`v5.channel.k8s.io`) with `hello from exec\n` on stdout and a `Success` status; it
/// records the paths asked.
async fn stub_kubelet() -> (SocketAddr, Arc<Mutex<Vec<String>>>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind loopback");
    let addr = listener.local_addr().expect("an address");
    let seen = Arc::new(Mutex::new(Vec::new()));
    let record = seen.clone();
    let app = axum::Router::new().fallback(move |req: Request| {
        let record = record.clone();
        async move {
            record.lock().expect("lock").push(req.uri().to_string());
            if req.uri().path().starts_with("/exec/") {
                return websocket_exec(req);
            }
            Response::new(Body::from(format!("hello from {}\n", req.uri().path())))
        }
    });
    tokio::spawn(async move { axum::serve(listener, app).await });
    (addr, seen)
}

/// Accepts a WebSocket upgrade speaking `v5.channel.k8s.io`, writes one stdout frame and the
/// status frame, then closes.
fn websocket_exec(mut req: Request) -> Response {
    use base64::Engine;
    let key = req
        .headers()
        .get("sec-websocket-key")
        .map(|k| k.as_bytes().to_vec())
        .unwrap_or_default();
    let offered = req
        .headers()
        .get("sec-websocket-protocol")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    if key.is_empty() || !offered.contains("v5.channel.k8s.io") {
        let mut resp = Response::new(Body::from("a v5.channel.k8s.io WebSocket is needed"));
        *resp.status_mut() = StatusCode::BAD_REQUEST;
        return resp;
    }
    let mut digest = ring::digest::Context::new(&ring::digest::SHA1_FOR_LEGACY_USE_ONLY);
    digest.update(&key);
    digest.update(b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11");
    let accept = base64::engine::general_purpose::STANDARD.encode(digest.finish());
    let on_upgrade = hyper::upgrade::on(&mut req);
    tokio::spawn(async move {
        let Ok(upgraded) = on_upgrade.await else {
            return;
        };
        let mut io = hyper_util::rt::TokioIo::new(upgraded);
        let status = br#"{"metadata":{},"status":"Success"}"#;
        for (channel, payload) in [(1u8, &b"hello from exec\n"[..]), (3, &status[..])] {
            let mut frame = vec![0x82, u8::try_from(payload.len() + 1).expect("short")];
            frame.push(channel);
            frame.extend_from_slice(payload);
            if io.write_all(&frame).await.is_err() {
                return;
            }
        }
        let _ = io.write_all(&[0x88, 0x02, 0x03, 0xe8]).await;
        let mut rest = Vec::new();
        let wait = std::time::Duration::from_secs(5);
        let _ = tokio::time::timeout(wait, io.read_to_end(&mut rest)).await;
    });
    Response::builder()
        .status(StatusCode::SWITCHING_PROTOCOLS)
        .header("connection", "Upgrade")
        .header("upgrade", "websocket")
        .header("sec-websocket-accept", accept)
        .header("sec-websocket-protocol", "v5.channel.k8s.io")
        .body(Body::empty())
        .expect("a response")
}

/// Dials node `edge-1` by TCP to the stub kubelet, counting the dials.
struct TcpDialer {
    kubelet: SocketAddr,
    dials: AtomicUsize,
}

#[async_trait::async_trait]
impl NodeDialer for TcpDialer {
    async fn dial(&self, node: &str) -> Result<Box<dyn NodeStream>, DialError> {
        self.dials.fetch_add(1, Ordering::SeqCst);
        if node != "edge-1" {
            return Err(DialError::NotConnected {
                node: node.to_owned(),
            });
        }
        let tcp = tokio::net::TcpStream::connect(self.kubelet).await;
        let tcp = tcp.map_err(|e| DialError::Failed {
            node: node.to_owned(),
            reason: e.to_string(),
        })?;
        Ok(Box::new(tcp))
    }
}

/// The control plane on 127.0.0.1:0 in `dir`, reaching nodes through `dialer`; returns its
/// admin kubeconfig.
async fn control_plane(
    dir: &Path,
    dialer: Arc<dyn NodeDialer>,
    shutdown: CancellationToken,
) -> std::path::PathBuf {
    let config = Config {
        bind_address: SocketAddr::from(([127, 0, 0, 1], 0)),
        data_source: dir.join("apiserver.db"),
        tls_ca_file: dir.join("ca.crt"),
        tls_ca_key_file: dir.join("ca.key"),
        tls_cert_file: dir.join("server.crt"),
        tls_private_key_file: dir.join("server.key"),
        token_file: dir.join("admin.token"),
        admin_kubeconfig: dir.join("admin.kubeconfig"),
        ..Config::default()
    };
    let (module, handle) = ApiServer::bind(config).await.expect("bound");
    let mut runtime = beehive::Runtime::new();
    runtime.register(module.with_node_dialer(dialer));
    // The modules run on their own tasks until `shutdown`; the handle is not needed.
    drop(runtime.start(shutdown).expect("started"));
    handle.kubeconfig().to_path_buf()
}

/// kubectl with `kubeconfig`, on a blocking thread, `stdin` fed to it.
async fn kubectl(kubeconfig: &Path, args: &[&str], stdin: &str) -> Output {
    let (kubeconfig, stdin) = (kubeconfig.to_path_buf(), stdin.to_owned());
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    tokio::task::spawn_blocking(move || {
        use std::io::Write;
        let mut child = Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .args(&args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("kubectl runs");
        let mut input = child.stdin.take().expect("piped stdin");
        input
            .write_all(stdin.as_bytes())
            .expect("kubectl reads stdin");
        drop(input);
        child.wait_with_output().expect("kubectl finishes")
    })
    .await
    .expect("the kubectl thread")
}

async fn kubectl_ok(kubeconfig: &Path, args: &[&str], stdin: &str) -> String {
    let out = kubectl(kubeconfig, args, stdin).await;
    assert!(
        out.status.success(),
        "kubectl {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn no_kubectl() -> bool {
    let found = Command::new("kubectl")
        .args(["version", "--client"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        eprintln!("skipping: no kubectl on PATH");
    }
    !found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_logs_reads_the_pod_log_from_its_kubelet_through_the_dialer() {
    if no_kubectl() {
        return;
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let (kubelet, seen) = stub_kubelet().await;
    let dialer = Arc::new(TcpDialer {
        kubelet,
        dials: AtomicUsize::new(0),
    });
    let shutdown = CancellationToken::new();
    let admin = control_plane(dir.path(), dialer.clone(), shutdown.clone()).await;
    kubectl_ok(&admin, &["apply", "-f", "-"], POD).await;
    let log = kubectl_ok(&admin, &["logs", "web", "--tail=5"], "").await;
    assert_eq!(log, "hello from /containerLogs/default/web/app\n");
    assert_eq!(
        *seen.lock().expect("lock"),
        ["/containerLogs/default/web/app?tailLines=5"]
    );
    assert_eq!(dialer.dials.load(Ordering::SeqCst), 1);
    shutdown.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_who_may_read_logs_but_not_create_exec_gets_403_and_nothing_is_dialed() {
    if no_kubectl() {
        return;
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let (kubelet, seen) = stub_kubelet().await;
    let dialer = Arc::new(TcpDialer {
        kubelet,
        dials: AtomicUsize::new(0),
    });
    let shutdown = CancellationToken::new();
    let admin = control_plane(dir.path(), dialer.clone(), shutdown.clone()).await;
    kubectl_ok(&admin, &["apply", "-f", "-"], POD).await;
    kubectl_ok(&admin, &["create", "serviceaccount", "viewer"], "").await;
    let role = [
        "create",
        "role",
        "logs",
        "--verb=get",
        "--resource=pods,pods/log,pods/exec",
    ];
    kubectl_ok(&admin, &role, "").await;
    let binding = [
        "create",
        "rolebinding",
        "logs",
        "--role=logs",
        "--serviceaccount=default:viewer",
    ];
    kubectl_ok(&admin, &binding, "").await;
    let token = kubectl_ok(&admin, &["create", "token", "viewer"], "").await;
    let token = format!("--token={}", token.trim());

    let exec = kubectl(&admin, &[&token, "exec", "web", "--", "ls"], "").await;
    let stderr = String::from_utf8_lossy(&exec.stderr);
    assert!(!exec.status.success(), "exec was allowed");
    assert!(
        stderr.contains("Forbidden") || stderr.contains("forbidden"),
        "{stderr}"
    );
    assert!(stderr.contains("pods/exec"), "{stderr}");
    assert_eq!(dialer.dials.load(Ordering::SeqCst), 0);
    assert!(seen.lock().expect("lock").is_empty());

    let log = kubectl_ok(&admin, &[&token, "logs", "web"], "").await;
    assert_eq!(log, "hello from /containerLogs/default/web/app\n");
    assert_eq!(dialer.dials.load(Ordering::SeqCst), 1);
    shutdown.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_logs_and_exec_of_a_pod_on_a_node_not_connected_fail_at_once_naming_it() {
    if no_kubectl() {
        return;
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let (kubelet, _) = stub_kubelet().await;
    let dialer = Arc::new(TcpDialer {
        kubelet,
        dials: AtomicUsize::new(0),
    });
    let shutdown = CancellationToken::new();
    let admin = control_plane(dir.path(), dialer.clone(), shutdown.clone()).await;
    kubectl_ok(
        &admin,
        &["apply", "-f", "-"],
        &POD.replace("edge-1", "edge-2"),
    )
    .await;
    for args in [&["logs", "web"][..], &["exec", "web", "--", "ls"][..]] {
        let started = std::time::Instant::now();
        let out = kubectl(&admin, args, "").await;
        let elapsed = started.elapsed();
        let stderr = String::from_utf8_lossy(&out.stderr);
        println!("kubectl {args:?} in {elapsed:?}: {stderr}");
        assert!(!out.status.success());
        assert!(
            stderr.contains("node edge-2 is not connected to cloudcore"),
            "{stderr}"
        );
        assert!(elapsed < std::time::Duration::from_secs(2), "{elapsed:?}");
    }
    shutdown.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_exec_over_websocket_reaches_the_kubelet_by_pod_uid_and_prints_its_output() {
    if no_kubectl() {
        return;
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let (kubelet, seen) = stub_kubelet().await;
    let dialer = Arc::new(TcpDialer {
        kubelet,
        dials: AtomicUsize::new(0),
    });
    let shutdown = CancellationToken::new();
    let admin = control_plane(dir.path(), dialer.clone(), shutdown.clone()).await;
    kubectl_ok(&admin, &["apply", "-f", "-"], POD).await;
    let uid = kubectl_ok(
        &admin,
        &["get", "pod", "web", "-o", "jsonpath={.metadata.uid}"],
        "",
    )
    .await;
    let out = kubectl_ok(&admin, &["exec", "web", "--", "ls", "-l"], "").await;
    assert_eq!(out, "hello from exec\n");
    assert_eq!(
        *seen.lock().expect("lock"),
        [format!(
            "/exec/default/web/{uid}/app?command=ls&command=-l&error=1&output=1"
        )]
    );
    shutdown.cancel();
}
