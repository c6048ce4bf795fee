//! edged's pod workers against an in-memory runtime ([`cri::fake::FakeRuntime`]) and the real
//! API layer over a temp store (kapi's local backend), under tokio's paused time: the
//! kubelet's pod-worker behaviour (start, restart with back-off, pull back-off, removal)
//! without containerd, in milliseconds.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use cri::api::ContainerState;
use cri::fake::FakeRuntime;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::json;
use testkit::eventually;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::*;

/// Virtual time: the runtime advances it whenever every task waits (on the store's threads
/// too), so bounds are generous; what is asserted is what the clock shows.
const WAIT: Duration = Duration::from_secs(900);
pub(crate) const NODE: &str = "edge-1";
pub(crate) const IMAGE: &str = "registry.local/busybox:1.36";

pub(crate) struct Harness {
    pub(crate) rt: FakeRuntime,
    /// edged's state, as the kubelet API reads it.
    pub(crate) shared: Arc<Shared>,
    /// While false, status writes to the API hang (a half-open link).
    statuses_flow: watch::Sender<bool>,
    clock: clock::Clock,
    pub(crate) pods: Api<Pod>,
    shutdown: CancellationToken,
    _store: Arc<objstore::Writer>,
    _dir: tempfile::TempDir,
}

/// edged's supervisor running on a fake runtime, with the API and store it reads and writes.
async fn harness() -> Harness {
    harness_on(None).await
}

/// edged's supervisor on `runtime` (the harness's fake runtime when `None`).
pub(crate) async fn harness_on(runtime: Option<Arc<dyn cri::Runtime>>) -> Harness {
    let dir = tempfile::tempdir().unwrap();
    let (api, store) = kapi::local::admin_api(&dir.path().join("store.db"))
        .await
        .unwrap();
    let (statuses_flow, gate) = watch::channel(true);
    let router = kapi::router(api).layer(axum::middleware::from_fn(
        move |req: axum::extract::Request, next: axum::middleware::Next| {
            let mut gate = gate.clone();
            async move {
                if req.uri().path().ends_with("/status") {
                    // Closed: the write waits as long as the gate stays closed.
                    let _ = gate.wait_for(|open| *open).await;
                }
                next.run(req).await
            }
        },
    ));
    let client = kube::Client::new(router, "default");
    let clock = clock::Clock::following_tokio();
    let rt = FakeRuntime::new(clock.as_fn());
    rt.add_image(IMAGE);
    let config = Config {
        root_directory: dir.path().join("kubelet"),
        pod_logs_directory: dir.path().join("logs"),
        static_pod_path: std::path::PathBuf::new(),
        ..Default::default()
    };
    let (_, link) = watch::channel(lwproxy::Link::Up);
    let runtime: Arc<dyn cri::Runtime> = runtime.unwrap_or_else(|| Arc::new(rt.clone()));
    let shared = Shared::new(
        config,
        NODE.into(),
        runtime,
        clock.clone(),
        store.reader(),
        client.clone(),
        link,
    );
    let shutdown = CancellationToken::new();
    let shared = Arc::new(shared);
    tokio::spawn(supervise(shared.clone(), shutdown.clone()));
    Harness {
        rt,
        shared,
        statuses_flow,
        clock,
        pods: Api::namespaced(client, "default"),
        shutdown,
        _store: store,
        _dir: dir,
    }
}

pub(crate) fn pod(name: &str, image: &str, restart: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"nodeName": NODE, "restartPolicy": restart, "automountServiceAccountToken": false,
                 "containers": [{"name": "c", "image": image}]},
    }))
    .unwrap()
}

/// Waits for `check` on the API, a virtual second between tries, for at most 30 real
/// seconds. Virtual time jumps to the next timer whenever every task waits on the store's
/// threads, so a wait on the API is bounded by the real clock, not the virtual one.
async fn tries<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while std::time::Instant::now() < deadline {
        if check().await {
            return;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    panic!("not seen within 30 s: {what}");
}

impl Harness {
    /// The container status of `c` in pod `name` as the API holds it.
    async fn status(&self, name: &str) -> Option<k8s_openapi::api::core::v1::ContainerStatus> {
        let pod = self.pods.get(name).await.ok()?;
        pod.status?.container_statuses?.into_iter().next()
    }

    fn running(&self) -> Vec<(String, u32)> {
        let containers = self.rt.containers().into_iter();
        let running = containers.filter(|c| c.2 == ContainerState::ContainerRunning);
        running.map(|(name, attempt, _)| (name, attempt)).collect()
    }
}

impl Drop for Harness {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

#[tokio::test(start_paused = true)]
async fn a_pod_bound_here_gets_a_sandbox_and_a_running_container_reported_ready() {
    let h = harness().await;
    h.pods
        .create(&PostParams::default(), &pod("web", IMAGE, "Always"))
        .await
        .unwrap();
    eventually("the container runs", WAIT, || async {
        h.running() == [("c".to_string(), 0)]
    })
    .await;
    tries("the API shows it running and ready", || async {
        h.status("web")
            .await
            .is_some_and(|s| s.ready && s.state.is_some_and(|st| st.running.is_some()))
    })
    .await;
    let pod = h.pods.get("web").await.unwrap();
    let status = pod.status.unwrap();
    assert_eq!(status.phase.as_deref(), Some("Running"));
    assert!(status.pod_ip.is_some_and(|ip| ip.starts_with("10.88.0.")));
    assert_eq!(h.rt.count("RunPodSandbox"), 1);
    assert_eq!(
        h.rt.count("PullImage"),
        0,
        "IfNotPresent: the image is there"
    );
}

#[tokio::test(start_paused = true)]
async fn a_container_that_exits_is_restarted_after_a_growing_back_off() {
    let h = harness().await;
    h.pods
        .create(&PostParams::default(), &pod("crash", IMAGE, "Always"))
        .await
        .unwrap();
    eventually("the container runs", WAIT, || async {
        h.running().len() == 1
    })
    .await;

    let mut exits: Vec<SystemTime> = Vec::new();
    let mut starts: Vec<SystemTime> = Vec::new();
    for attempt in 1..=4u32 {
        assert_eq!(h.rt.exit("c", 1), 1);
        exits.push(h.clock.now());
        eventually("the container runs again", WAIT, || async {
            h.running() == [("c".to_string(), attempt)]
        })
        .await;
        starts.push(h.clock.now());
    }
    // The kubelet's crash-loop back-off: the first restart at once, then 10 s, 20 s, 40 s.
    for (i, min) in [0u64, 10, 20, 40].into_iter().enumerate() {
        let waited = starts[i].duration_since(exits[i]).unwrap();
        assert!(
            waited >= Duration::from_secs(min),
            "restart {i} after {waited:?}, not {min} s"
        );
    }
    tries("the API counts the restarts", || async {
        h.status("crash")
            .await
            .is_some_and(|s| s.restart_count == 4)
    })
    .await;
}

#[tokio::test(start_paused = true)]
async fn a_failing_pull_is_reported_and_retried_with_a_back_off() {
    let h = harness().await;
    h.rt.fail_pulls("registry.local/missing:1", "pull access denied");
    h.pods
        .create(
            &PostParams::default(),
            &pod("nopull", "registry.local/missing:1", "Always"),
        )
        .await
        .unwrap();
    tries("the API shows the pull failing", || async {
        let waiting = h.status("nopull").await.and_then(|s| s.state?.waiting);
        waiting.is_some_and(|w| {
            matches!(
                w.reason.as_deref(),
                Some("ErrImagePull" | "ImagePullBackOff")
            ) && w.message.is_some_and(|m| m.contains("pull access denied"))
        })
    })
    .await;
    eventually("the pull is tried again", WAIT, || async {
        h.rt.count("PullImage") >= 2
    })
    .await;
    let pulls = h.rt.times("PullImage");
    let waited = pulls[1].duration_since(pulls[0]).unwrap();
    assert!(
        waited >= Duration::from_secs(10),
        "the second pull {waited:?} after the first"
    );
    h.rt.add_image("registry.local/missing:1");
    eventually(
        "the container runs once the image is there",
        WAIT,
        || async { h.running().len() == 1 },
    )
    .await;
}

#[tokio::test(start_paused = true)]
async fn a_deleted_pod_has_its_containers_stopped_and_its_sandbox_removed() {
    let h = harness().await;
    h.pods
        .create(&PostParams::default(), &pod("gone", IMAGE, "Always"))
        .await
        .unwrap();
    eventually("the container runs", WAIT, || async {
        h.running().len() == 1
    })
    .await;
    h.pods
        .delete("gone", &DeleteParams::default())
        .await
        .unwrap();
    tries("the pod is removed from the API", || async {
        h.pods.get_opt("gone").await.unwrap().is_none()
    })
    .await;
    eventually("nothing of it is left in the runtime", WAIT, || async {
        h.rt.containers().is_empty() && h.rt.count("RemovePodSandbox") == 1
    })
    .await;
    assert!(h.rt.count("StopContainer") >= 1);
}

#[tokio::test(start_paused = true)]
async fn a_status_write_that_hangs_does_not_hold_back_a_restart() {
    let h = harness().await;
    h.pods
        .create(&PostParams::default(), &pod("stuck", IMAGE, "Always"))
        .await
        .unwrap();
    tries("the API shows it running", || async {
        h.status("stuck")
            .await
            .is_some_and(|s| s.state.is_some_and(|st| st.running.is_some()))
    })
    .await;

    // The link goes half-open: status writes get no answer. The container crashes twice.
    h.statuses_flow.send_replace(false);
    for attempt in 1..=2u32 {
        assert_eq!(h.rt.exit("c", 1), 1);
        eventually("the container is restarted all the same", WAIT, || async {
            h.running() == [("c".to_string(), attempt)]
        })
        .await;
    }

    // Once writes flow again, the latest status is what the API gets.
    h.statuses_flow.send_replace(true);
    tries("the API catches up with the restarts", || async {
        h.status("stuck")
            .await
            .is_some_and(|s| s.restart_count == 2)
    })
    .await;
}

#[tokio::test(start_paused = true)]
async fn an_ephemeral_container_starts_once_in_the_targets_pid_namespace_and_is_reported() {
    let h = harness().await;
    h.pods
        .create(&PostParams::default(), &pod("web", IMAGE, "Always"))
        .await
        .unwrap();
    eventually("the container runs", WAIT, || async {
        h.running() == [("c".to_string(), 0)]
    })
    .await;
    let debug = json!({"spec": {"ephemeralContainers": [{
        "name": "debugger", "image": IMAGE, "targetContainerName": "c",
        "stdin": true, "tty": true,
    }]}});
    let patch = kube::api::Patch::Merge(&debug);
    let params = kube::api::PatchParams::default();
    h.pods
        .patch_subresource("ephemeralcontainers", "web", &params, &patch)
        .await
        .unwrap();
    eventually("the ephemeral container runs", WAIT, || async {
        h.running().contains(&("debugger".to_string(), 0))
    })
    .await;
    let config = h.rt.config("debugger").unwrap();
    let namespaces = config
        .linux
        .unwrap()
        .security_context
        .unwrap()
        .namespace_options;
    let namespaces = namespaces.unwrap();
    assert_eq!(namespaces.pid, cri::api::NamespaceMode::Target as i32);
    assert_eq!(Some(namespaces.target_id), h.rt.id_of("c"));
    assert!(config.stdin && config.tty);
    tries("the API shows the ephemeral container running", || async {
        let pod = h.pods.get("web").await.ok();
        let statuses = pod.and_then(|p| p.status?.ephemeral_container_statuses);
        statuses.is_some_and(|s| {
            s.len() == 1
                && s[0].name == "debugger"
                && !s[0].ready
                && s[0].state.as_ref().is_some_and(|st| st.running.is_some())
        })
    })
    .await;

    assert_eq!(h.rt.exit("debugger", 0), 1);
    tokio::time::sleep(Duration::from_secs(120)).await;
    let debuggers: Vec<_> = (h.rt.containers().into_iter())
        .filter(|c| c.0 == "debugger")
        .collect();
    assert_eq!(debuggers.len(), 1, "never restarted: {debuggers:?}");
    assert!(
        h.running().contains(&("c".to_string(), 0)),
        "the pod runs on"
    );
}

#[tokio::test(start_paused = true)]
async fn a_running_containers_log_over_the_limit_is_rotated_by_the_supervisor() {
    let h = harness().await;
    h.pods
        .create(&PostParams::default(), &pod("chatty", IMAGE, "Always"))
        .await
        .unwrap();
    eventually("the container runs", WAIT, || async {
        h.running().len() == 1
    })
    .await;
    use cri::Runtime as _;
    let id = h.rt.list_containers(None).await.unwrap()[0].id.clone();
    let log = std::path::PathBuf::from(h.rt.container_status(&id).await.unwrap().log_path);
    // The runtime makes the container's log directory and file: here the test does.
    std::fs::create_dir_all(log.parent().unwrap()).unwrap();
    // containerLogMaxSize's default, 10Mi.
    std::fs::write(&log, vec![b'x'; 10 * 1024 * 1024]).unwrap();
    let dir = log.parent().unwrap().to_path_buf();
    eventually("the log is rotated", WAIT, || {
        let names: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        std::future::ready(names.iter().any(|n| n.starts_with("0.log.")))
    })
    .await;
    assert!(!log.exists(), "renamed for the runtime to reopen");
    assert!(h.rt.count("ReopenContainerLog") >= 1);
}
