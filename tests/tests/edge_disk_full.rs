//! A full disk at the edge, for real: the edge store lives on a small tmpfs, a filler file takes
//! the rest of it, and a cloudcore keeps sending. While SQLite cannot write, nothing is acked
//! that is not on disk and `/readyz` says why; once the filler is gone the edge catches up by
//! itself, with no restart. Needs root (CI runs as root) to mount the tmpfs.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use e2e::controller::Desired;
use e2e::{Pki, Ports, cloud, edge, edge_config};
use link::Transport;
use serde_json::json;
use testkit::{eventually, http_get};

/// The tmpfs: room for the store's first pages and its WAL, little more.
const TMPFS_SIZE: &str = "8m";
/// Pods sent while the disk is full, about 8 KiB each: more than any free space SQLite kept.
const PODS: u64 = 200;
const NODE: &str = "edge-disk";

/// A tmpfs mounted on a temp dir, unmounted (and the dir removed) when dropped.
struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    fn mount(size: &str) -> Tmpfs {
        let dir = tempfile::tempdir().unwrap();
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .output();
        match out {
            Ok(out) if out.status.success() => Tmpfs { dir },
            Ok(out) => panic!(
                "this test needs root and tmpfs: `mount -t tmpfs` failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ),
            Err(e) => panic!("this test needs root and tmpfs: cannot run mount: {e}"),
        }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let unmounted = Command::new("umount").arg(self.dir.path()).status();
        if !unmounted.is_ok_and(|s| s.success()) {
            // Something still holds a file open: detach it so the mount never outlives us.
            let _ = Command::new("umount")
                .arg("-l")
                .arg(self.dir.path())
                .status();
        }
    }
}

/// Writes zeros to `path` until the file system refuses (ENOSPC); returns the bytes written.
fn fill(path: &Path) -> u64 {
    let mut file = std::fs::File::create(path).unwrap();
    let chunk = vec![0u8; 16 * 1024];
    let mut written = 0u64;
    loop {
        match file.write(&chunk) {
            Ok(0) => break,
            Ok(n) => written += n as u64,
            Err(e) if e.raw_os_error() == Some(28) => break, // ENOSPC
            Err(e) => panic!("filling {}: {e}", path.display()),
        }
    }
    // Small writes may still fit in the last partial page.
    while file.write(&[0u8; 512]).is_ok_and(|n| n > 0) {
        written += 512;
    }
    written
}

fn big_pod(name: &str, rv: u64) -> Vec<u8> {
    let obj = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": name, "namespace": "default", "uid": format!("uid-{name}"),
            "resourceVersion": rv.to_string(),
            "annotations": {"filler": "x".repeat(8 * 1024)},
        },
        "spec": {"nodeName": NODE},
    });
    serde_json::to_vec(&obj).unwrap()
}

async fn readyz(addr: std::net::SocketAddr) -> (u16, String) {
    http_get(addr, "/readyz").await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_holds_acks_reports_not_ready_and_recovers_once_space_is_freed() {
    let tmpfs = Tmpfs::mount(TMPFS_SIZE);
    let pki = Pki::new();
    let cloud = cloud(&pki, Desired::new(), Ports::default()).await;
    let db: PathBuf = tmpfs.path().join("edge.db");
    let mut config = edge_config(
        &pki.node(NODE),
        cloud.addr(Transport::WebSocket),
        Transport::WebSocket,
        &db,
    );
    config.common_config.monitor_server.enable = true;
    config.common_config.monitor_server.bind_address = ([127, 0, 0, 1], 0).into();
    let edge = edge(config).await;
    let monitor = edge.running.monitor_addr().unwrap();

    for i in 0..10 {
        cloud
            .desired
            .put_pod(NODE, &format!("small-{i}"), 100 + i)
            .await;
    }
    eventually(
        "the first pods reach the edge",
        Duration::from_secs(30),
        || async { edge.held().await == cloud.desired.expected(NODE) },
    )
    .await;
    assert_eq!(readyz(monitor).await.0, 200);
    eventually(
        "the first pods are acked",
        Duration::from_secs(10),
        || async { cloud.hub().node(NODE).unwrap().in_flight == 0 },
    )
    .await;
    let acked_before = cloud.hub().node(NODE).unwrap().acked;

    let filler = tmpfs.path().join("filler");
    fill(&filler);
    let names: Vec<String> = (0..PODS).map(|i| format!("big-{i}")).collect();
    for (i, name) in names.iter().enumerate() {
        let rv = 1_000 + i as u64;
        cloud
            .desired
            .put_object(NODE, name, rv, big_pod(name, rv))
            .await;
    }
    eventually(
        "/readyz reports the edge store cannot write",
        Duration::from_secs(30),
        || async { readyz(monitor).await.0 == 503 },
    )
    .await;
    let (_, body) = readyz(monitor).await;
    assert!(
        body.contains("[-]edge-store failed: edge store cannot write") && body.contains("full"),
        "{body}"
    );
    // Nothing is acked that is not on disk: read the acks first, then what is stored.
    let acked = cloud.hub().node(NODE).unwrap().acked - acked_before;
    let held = edge.held().await;
    let stored = names
        .iter()
        .filter(|n| held.contains_key(&wire::object_key("pods", Some("default"), n)))
        .count() as u64;
    assert!(stored < PODS, "the full disk stopped some writes");
    assert!(acked <= stored, "{acked} big pods acked, {stored} stored");

    std::fs::remove_file(&filler).unwrap();
    eventually(
        "the edge catches up by itself once space is freed",
        Duration::from_secs(10),
        || async { edge.held().await == cloud.desired.expected(NODE) },
    )
    .await;
    eventually("/readyz is ready again", Duration::from_secs(5), || async {
        readyz(monitor).await.0 == 200
    })
    .await;
    eventually(
        "every message is acked",
        Duration::from_secs(10),
        || async {
            let node = cloud.hub().node(NODE).unwrap();
            node.in_flight == 0 && node.queued == 0
        },
    )
    .await;
    assert!(
        matches!(
            edge.running.module_state(metamanager::NAME),
            Some(beehive::ModuleState::Running { starts: 1 })
        ),
        "metamanager never restarted"
    );
    edge.stop().await;
    cloud.stop().await;
    drop(tmpfs);
}
