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
use kapi::nodes::{DialError, NodeDialer, NodeStream};
use tokio_util::sync::CancellationToken;

const POD: &str = r#"{"apiVersion": "v1", "kind": "Pod",
  "metadata": {"name": "web", "namespace": "default"},
  "spec": {"nodeName": "edge-1", "containers": [{"name": "app", "image": "registry.local/app:1"}]}}"#;

/// A kubelet API on loopback answering `hello from <path>\n`, recording the paths asked.
async fn stub_kubelet() -> (SocketAddr, Arc<Mutex<Vec<String>>>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind loopback");
    let addr = listener.local_addr().expect("an address");
    let seen = Arc::new(Mutex::new(Vec::new()));
    let record = seen.clone();
    let app = axum::Router::new().fallback(move |uri: axum::http::Uri| {
        let record = record.clone();
        async move {
            record.lock().expect("lock").push(uri.to_string());
            format!("hello from {}\n", uri.path())
        }
    });
    tokio::spawn(async move { axum::serve(listener, app).await });
    (addr, seen)
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
