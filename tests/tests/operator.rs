//! An operator runs the two daemons by hand: two cloud–edge pairs on one machine, each set
//! apart by nothing but `--root` and `--port-offset`. Each cloudcore makes its CA and server
//! certificate under its root, the node certificate goes where edgecore looks by default (not
//! over cloudhub's), and each edgecore's `/metrics` says whether it is linked, and to what.

use std::fs::File;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use testkit::{ChildGuard, http_get};

const CLOUDCORE: &str = env!("CARGO_BIN_EXE_e2e-cloudcore");
const EDGECORE: &str = env!("CARGO_BIN_EXE_e2e-edgecore");
const WAIT: Duration = Duration::from_secs(60);

/// One cloud–edge pair under its own root.
struct Instance {
    root: tempfile::TempDir,
    offset: u16,
    cloud: Option<ChildGuard>,
    edge: Option<ChildGuard>,
}

#[tokio::test]
async fn two_pairs_run_side_by_side_from_root_and_port_offset_alone() {
    // Offsets apart from each other, and keeping every port (6443 + o ... 10550 + o) below the
    // ephemeral range (32768 and up) that the other tests' port-0 listeners and connections
    // draw from, so that neither pair meets the other or a socket of another test.
    let base = 1_000 + (std::process::id() % 400) as u16 * 50;
    let mut a = Instance::new(base);
    let mut b = Instance::new(base + 25);
    for instance in [&mut a, &mut b] {
        instance.start_cloud().await;
    }
    for (instance, node) in [(&mut a, "node-a"), (&mut b, "node-b")] {
        instance.start_edge(node).await;
    }
    for instance in [&a, &b] {
        instance.wait_for_link(true).await;
        instance.check_files();
        let metrics = instance.metrics().await;
        let server = format!("127.0.0.1:{}", 10000 + instance.offset);
        assert!(
            metrics.contains(&format!("edgehub_server_info{{server=\"{server}\"}} 1")),
            "{metrics}"
        );
        assert!(metrics.contains("metamanager_outbox_depth "), "{metrics}");
        let synced = gauge(&metrics, "edgehub_last_sync_timestamp_seconds");
        assert!(synced > 1_600_000_000, "{metrics}");
    }
    // The first cloud stops: its edge says so, the other pair is not disturbed.
    drop(a.cloud.take());
    a.wait_for_link(false).await;
    let metrics = a.metrics().await;
    let server = format!("127.0.0.1:{}", 10000 + a.offset);
    assert!(
        metrics.contains(&format!("edgehub_server_info{{server=\"{server}\"}} 0")),
        "{metrics}"
    );
    assert!(has_line(&b.metrics().await, "edgehub_connected 1"));
    drop(b.edge.take());
    drop(a.edge.take());
}

/// The value of an unlabelled gauge.
fn gauge(metrics: &str, name: &str) -> i64 {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{name} ")))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {name} in {metrics}"))
}

// === impl Instance ===

impl Instance {
    fn new(offset: u16) -> Instance {
        Instance {
            root: tempfile::tempdir().unwrap(),
            offset,
            cloud: None,
            edge: None,
        }
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.root.path().join(rel)
    }

    /// Starts `bin` with no `--config`: its config is the minimal one, written where the
    /// default config path lands under the root.
    fn spawn(&self, bin: &str, name: &str) -> ChildGuard {
        let minimal = Command::new(bin).arg("--minconfig").output().unwrap();
        let config = self.path(&format!("etc/kubeedge/config/{name}.yaml"));
        std::fs::create_dir_all(config.parent().unwrap()).unwrap();
        std::fs::write(&config, minimal.stdout).unwrap();
        let log = File::create(self.path(&format!("{name}.log"))).unwrap();
        let child = Command::new(bin)
            .arg("--root")
            .arg(self.root.path())
            .args(["--port-offset", &self.offset.to_string()])
            .env("RUST_LOG", "info")
            .stderr(Stdio::from(log))
            .spawn()
            .unwrap();
        ChildGuard(child)
    }

    async fn start_cloud(&mut self) {
        self.cloud = Some(self.spawn(CLOUDCORE, "cloudcore"));
        let hub = SocketAddr::from(([127, 0, 0, 1], 10000 + self.offset));
        self.wait("cloudhub listens on 10000 + offset", || async move {
            tokio::net::TcpStream::connect(hub).await.is_ok()
        })
        .await;
    }

    /// Signs `node`'s certificate with the CA this instance's cloudcore made, puts it where
    /// edgecore looks by default, and starts edgecore.
    async fn start_edge(&mut self, node: &str) {
        let read = |rel: &str| std::fs::read_to_string(self.path(rel)).unwrap();
        let ca = pki::Ca::from_pem(
            &read("etc/kubeedge/ca/rootCA.crt"),
            &read("etc/kubeedge/ca/rootCA.key"),
        )
        .unwrap();
        let issued = ca.issue_node(node, Duration::from_secs(3600)).unwrap();
        let cert = self.path("etc/kubeedge/certs/edgecore.crt");
        pki::write_pem(&cert, &issued.cert_pem).unwrap();
        pki::write_pem(
            &self.path("etc/kubeedge/certs/edgecore.key"),
            &issued.key_pem,
        )
        .unwrap();
        self.edge = Some(self.spawn(EDGECORE, "edgecore"));
    }

    /// What cloudcore and edgecore wrote is under the root, apart from each other.
    fn check_files(&self) {
        for rel in [
            "etc/kubeedge/certs/server.crt",
            "etc/kubeedge/certs/edgecore.crt",
            "etc/kubeedge/admin.kubeconfig",
            "var/lib/kubeedge/apiserver.db",
            "var/lib/kubeedge/edgecore.db",
        ] {
            assert!(self.path(rel).exists(), "{rel} is not under the root");
        }
        let node_cert = std::fs::read(self.path("etc/kubeedge/certs/edgecore.crt")).unwrap();
        let hub_cert = std::fs::read(self.path("etc/kubeedge/certs/server.crt")).unwrap();
        assert_ne!(node_cert, hub_cert);
    }

    async fn metrics(&self) -> String {
        let monitor = SocketAddr::from(([127, 0, 0, 1], 10352 + self.offset));
        match http_get(monitor, "/metrics").await {
            Ok((200, body)) => body,
            other => panic!("edgecore /metrics: {other:?}\n{}", self.logs()),
        }
    }

    async fn wait_for_link(&self, up: bool) {
        let want = format!("edgehub_connected {}", u8::from(up));
        let monitor = SocketAddr::from(([127, 0, 0, 1], 10352 + self.offset));
        self.wait(&want.clone(), || {
            let want = want.clone();
            async move {
                let scraped = http_get(monitor, "/metrics").await;
                scraped.is_ok_and(|(_, body)| has_line(&body, &want))
            }
        })
        .await;
    }

    /// Polls `check` until it holds; panics with both daemons' logs after [`WAIT`].
    async fn wait<F, Fut>(&self, what: &str, mut check: F)
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = bool>,
    {
        let deadline = tokio::time::Instant::now() + WAIT;
        while !check().await {
            if tokio::time::Instant::now() > deadline {
                panic!("timed out waiting for: {what}\n{}", self.logs());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    fn logs(&self) -> String {
        let read = |name: &str| {
            let path = self.path(name);
            std::fs::read_to_string(&path).unwrap_or_default()
        };
        format!(
            "root {} offset {}\n--- cloudcore\n{}\n--- edgecore\n{}",
            Path::display(self.root.path()),
            self.offset,
            read("cloudcore.log"),
            read("edgecore.log")
        )
    }
}

/// Whether a scrape has `line` as a whole line (its `# HELP` text starts with a value too:
/// "edgehub_connected 1 while the node is linked ...").
fn has_line(metrics: &str, line: &str) -> bool {
    metrics.lines().any(|l| l == line)
}
