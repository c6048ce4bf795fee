//! An in-memory [`Runtime`] for unit tests of what drives a runtime (edged's pod workers): it
//! keeps sandboxes, containers and images as containerd would report them, answers `NotFound`
//! for what it does not hold, and lets a test make a container exit, a pull fail or an exec
//! answer. Times come from the clock it is given, so tests under tokio's paused time see them
//! advance with it. Every call is logged for assertions.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::CriError;
use crate::api::{self, ContainerState, PodSandboxState};
use crate::runtime::Runtime;

/// The clock a [`FakeRuntime`] stamps times with.
pub type Clock = Arc<dyn Fn() -> SystemTime + Send + Sync>;

/// An in-memory container runtime. Cheap to clone: clones share their state.
#[derive(Clone)]
pub struct FakeRuntime {
    inner: Arc<Mutex<State>>,
    clock: Clock,
}

#[derive(Default)]
struct State {
    next_id: u64,
    sandboxes: BTreeMap<String, Sandbox>,
    containers: BTreeMap<String, Container>,
    images: BTreeSet<String>,
    failing_pulls: BTreeMap<String, String>,
    exec_answers: HashMap<Vec<String>, (i32, Vec<u8>)>,
    streaming_url: Option<String>,
    stats: HashMap<String, Usage>,
    networks: HashMap<String, (u64, u64)>,
    sandbox_stats_error: Option<String>,
    calls: Vec<(String, i64)>,
}

/// What a container uses, as [`FakeRuntime::set_usage`] makes the runtime report it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    /// CPU time used so far, in nanoseconds (cumulative).
    pub cpu_core_nanos: u64,
    /// Memory working set in bytes.
    pub working_set_bytes: u64,
    /// Memory usage (working set and page cache) in bytes.
    pub usage_bytes: u64,
    /// Anonymous memory in bytes.
    pub rss_bytes: u64,
    /// Bytes of the container's writable layer.
    pub writable_layer_bytes: u64,
}

struct Sandbox {
    config: api::PodSandboxConfig,
    ready: bool,
    ip: String,
    created_at: i64,
}

struct Container {
    sandbox: String,
    config: api::ContainerConfig,
    state: ContainerState,
    created_at: i64,
    started_at: i64,
    finished_at: i64,
    exit_code: i32,
    reason: String,
}

// === impl FakeRuntime ===

impl Default for FakeRuntime {
    fn default() -> Self {
        FakeRuntime::new(Arc::new(SystemTime::now))
    }
}

impl FakeRuntime {
    /// An empty runtime stamping times from `clock`.
    pub fn new(clock: Clock) -> FakeRuntime {
        FakeRuntime {
            inner: Arc::default(),
            clock,
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // A test that panicked holding the lock has failed already.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn now(&self) -> i64 {
        let since = (self.clock)()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        i64::try_from(since.as_nanos()).unwrap_or(i64::MAX)
    }

    fn log(&self, call: String) -> MutexGuard<'_, State> {
        let now = self.now();
        let mut state = self.state();
        state.calls.push((call, now));
        state
    }

    /// Makes `image` present, as if pulled before.
    pub fn add_image(&self, image: &str) {
        self.state().images.insert(image.to_owned());
    }

    /// Makes pulls of `image` fail with `message` (until [`FakeRuntime::add_image`]).
    pub fn fail_pulls(&self, image: &str, message: &str) {
        let mut state = self.state();
        state.images.remove(image);
        state
            .failing_pulls
            .insert(image.to_owned(), message.to_owned());
    }

    /// Makes an exec of `cmd` answer `exit_code` with `stdout` (others answer 0, no output).
    pub fn answer_exec(&self, cmd: &[&str], exit_code: i32, stdout: &[u8]) {
        let cmd = cmd.iter().map(|s| s.to_string()).collect();
        self.state()
            .exec_answers
            .insert(cmd, (exit_code, stdout.to_vec()));
    }

    /// Makes `Exec`, `Attach` and `PortForward` answer URLs under `base` (`{base}/exec/{id}`,
    /// `{base}/attach/{id}`, `{base}/portforward/{sandbox}`); until then they fail with
    /// `Unavailable`, as a runtime without a streaming server does.
    pub fn serve_streams(&self, base: &str) {
        self.state().streaming_url = Some(base.trim_end_matches('/').to_owned());
    }

    /// Makes every container named `name` report `usage` in its stats (until set again);
    /// containers with none set report zero.
    pub fn set_usage(&self, name: &str, usage: Usage) {
        self.state().stats.insert(name.to_owned(), usage);
    }

    /// Makes the sandbox of pod `pod` report `rx`/`tx` bytes on its `eth0`.
    pub fn set_network(&self, pod: &str, rx: u64, tx: u64) {
        self.state().networks.insert(pod.to_owned(), (rx, tx));
    }

    /// Makes `ListPodSandboxStats` fail with `message`, as containerd 1.6 does for sandboxes
    /// without a cgroup parent.
    pub fn fail_sandbox_stats(&self, message: &str) {
        self.state().sandbox_stats_error = Some(message.to_owned());
    }

    /// Makes every running container named `name` exit with `code`; returns how many did.
    pub fn exit(&self, name: &str, code: i32) -> usize {
        let now = self.now();
        let mut state = self.state();
        let mut exited = 0;
        for c in state.containers.values_mut() {
            let named = c.config.metadata.as_ref().is_some_and(|m| m.name == name);
            if named && c.state == ContainerState::ContainerRunning {
                c.state = ContainerState::ContainerExited;
                c.exit_code = code;
                c.finished_at = now;
                c.reason = if code == 0 { "Completed" } else { "Error" }.into();
                exited += 1;
            }
        }
        exited
    }

    /// The calls made so far, as `Op arg`.
    pub fn calls(&self) -> Vec<String> {
        self.state().calls.iter().map(|c| c.0.clone()).collect()
    }

    /// How many calls of `op` were made.
    pub fn count(&self, op: &str) -> usize {
        self.times(op).len()
    }

    /// When each call of `op` was made, by the runtime's clock.
    pub fn times(&self, op: &str) -> Vec<SystemTime> {
        let prefix = format!("{op} ");
        let calls = &self.state().calls;
        let of_op = calls
            .iter()
            .filter(|c| c.0.starts_with(&prefix) || c.0 == op);
        let at = |nanos: i64| UNIX_EPOCH + std::time::Duration::from_nanos(nanos.max(0) as u64);
        of_op.map(|c| at(c.1)).collect()
    }

    /// `(name, attempt, state)` of every container, in creation order.
    pub fn containers(&self) -> Vec<(String, u32, ContainerState)> {
        let state = self.state();
        state
            .containers
            .values()
            .map(|c| {
                let meta = c.config.metadata.clone().unwrap_or_default();
                (meta.name, meta.attempt, c.state)
            })
            .collect()
    }

    /// The config the newest container named `name` was created with.
    pub fn config(&self, name: &str) -> Option<api::ContainerConfig> {
        let state = self.state();
        let mut named = state
            .containers
            .values()
            .filter(|c| c.config.metadata.as_ref().is_some_and(|m| m.name == name));
        named.next_back().map(|c| c.config.clone())
    }

    /// The runtime id of the newest container named `name`.
    pub fn id_of(&self, name: &str) -> Option<String> {
        let state = self.state();
        let mut named = state
            .containers
            .iter()
            .filter(|(_, c)| c.config.metadata.as_ref().is_some_and(|m| m.name == name));
        named.next_back().map(|(id, _)| id.clone())
    }

    fn next_id(state: &mut State, kind: &str) -> String {
        state.next_id += 1;
        format!("{kind}{:06}", state.next_id)
    }
}

fn not_found(op: &'static str, what: &str, id: &str) -> CriError {
    CriError::Call {
        op,
        source: tonic::Status::not_found(format!("{what} {id:?} not found")),
    }
}

fn value(value: u64) -> Option<api::UInt64Value> {
    Some(api::UInt64Value { value })
}

/// The stats CRI reports for container `id` using `u`, sampled at `now`.
fn container_stats(id: &str, c: &Container, u: Usage, now: i64) -> api::ContainerStats {
    api::ContainerStats {
        attributes: Some(api::ContainerAttributes {
            id: id.to_owned(),
            metadata: c.config.metadata.clone(),
            labels: c.config.labels.clone(),
            annotations: c.config.annotations.clone(),
        }),
        cpu: Some(cpu(u, now)),
        memory: Some(memory(u, now)),
        writable_layer: Some(api::FilesystemUsage {
            timestamp: now,
            fs_id: Some(api::FilesystemIdentifier {
                mountpoint: "/var/lib/containerd".into(),
            }),
            used_bytes: value(u.writable_layer_bytes),
            inodes_used: value(1),
        }),
        swap: None,
    }
}

fn cpu(u: Usage, now: i64) -> api::CpuUsage {
    api::CpuUsage {
        timestamp: now,
        usage_core_nano_seconds: value(u.cpu_core_nanos),
        usage_nano_cores: None,
    }
}

fn memory(u: Usage, now: i64) -> api::MemoryUsage {
    api::MemoryUsage {
        timestamp: now,
        working_set_bytes: value(u.working_set_bytes),
        usage_bytes: value(u.usage_bytes),
        rss_bytes: value(u.rss_bytes),
        ..Default::default()
    }
}

fn selected(labels: &HashMap<String, String>, selector: &HashMap<String, String>) -> bool {
    selector.iter().all(|(k, v)| labels.get(k) == Some(v))
}

impl State {
    fn running(&self, id: &str) -> bool {
        let c = self.containers.get(id);
        c.is_some_and(|c| c.state == ContainerState::ContainerRunning)
    }

    /// The streaming URL of `kind` for `id`, when `id` may stream and streams are served.
    fn stream_url(
        &self,
        op: &'static str,
        kind: &str,
        id: &str,
        live: bool,
    ) -> Result<String, CriError> {
        if !live {
            return Err(not_found(op, "running container or ready sandbox", id));
        }
        let Some(base) = &self.streaming_url else {
            return Err(CriError::Call {
                op,
                source: tonic::Status::unavailable("no streaming server"),
            });
        };
        Ok(format!("{base}/{kind}/{id}"))
    }
}

impl Sandbox {
    fn state(&self) -> i32 {
        match self.ready {
            true => PodSandboxState::SandboxReady as i32,
            false => PodSandboxState::SandboxNotready as i32,
        }
    }
}

#[async_trait::async_trait]
impl Runtime for FakeRuntime {
    async fn version(&self) -> Result<api::VersionResponse, CriError> {
        drop(self.log("Version".into()));
        Ok(api::VersionResponse {
            version: "0.1.0".into(),
            runtime_name: "fake".into(),
            runtime_version: "1.0".into(),
            runtime_api_version: "v1".into(),
        })
    }

    async fn run_pod_sandbox(
        &self,
        config: api::PodSandboxConfig,
        _runtime_handler: &str,
    ) -> Result<String, CriError> {
        let now = self.now();
        let name = config.metadata.clone().unwrap_or_default().name;
        let mut state = self.log(format!("RunPodSandbox {name}"));
        let id = FakeRuntime::next_id(&mut state, "sandbox");
        let ip = format!("10.88.0.{}", state.next_id % 250 + 2);
        let sandbox = Sandbox {
            config,
            ready: true,
            ip,
            created_at: now,
        };
        state.sandboxes.insert(id.clone(), sandbox);
        Ok(id)
    }

    async fn stop_pod_sandbox(&self, id: &str) -> Result<(), CriError> {
        let now = self.now();
        let mut state = self.log(format!("StopPodSandbox {id}"));
        let sandbox = state.sandboxes.get_mut(id);
        let sandbox = sandbox.ok_or_else(|| not_found("StopPodSandbox", "sandbox", id))?;
        sandbox.ready = false;
        for c in state.containers.values_mut().filter(|c| c.sandbox == id) {
            if c.state == ContainerState::ContainerRunning {
                c.state = ContainerState::ContainerExited;
                c.exit_code = 137;
                c.finished_at = now;
            }
        }
        Ok(())
    }

    async fn remove_pod_sandbox(&self, id: &str) -> Result<(), CriError> {
        let mut state = self.log(format!("RemovePodSandbox {id}"));
        state
            .sandboxes
            .remove(id)
            .ok_or_else(|| not_found("RemovePodSandbox", "sandbox", id))?;
        state.containers.retain(|_, c| c.sandbox != id);
        Ok(())
    }

    async fn pod_sandbox_status(&self, id: &str) -> Result<api::PodSandboxStatus, CriError> {
        let state = self.log(format!("PodSandboxStatus {id}"));
        let s = state.sandboxes.get(id);
        let s = s.ok_or_else(|| not_found("PodSandboxStatus", "sandbox", id))?;
        Ok(api::PodSandboxStatus {
            id: id.to_owned(),
            metadata: s.config.metadata.clone(),
            state: s.state(),
            created_at: s.created_at,
            network: Some(api::PodSandboxNetworkStatus {
                ip: s.ip.clone(),
                additional_ips: vec![],
            }),
            labels: s.config.labels.clone(),
            annotations: s.config.annotations.clone(),
            ..Default::default()
        })
    }

    async fn list_pod_sandboxes(
        &self,
        filter: Option<api::PodSandboxFilter>,
    ) -> Result<Vec<api::PodSandbox>, CriError> {
        let state = self.log("ListPodSandbox".into());
        let filter = filter.unwrap_or_default();
        let listed = state.sandboxes.iter().filter(|(id, s)| {
            (filter.id.is_empty() || filter.id == **id)
                && filter.state.as_ref().is_none_or(|v| v.state == s.state())
                && selected(&s.config.labels, &filter.label_selector)
        });
        Ok(listed
            .map(|(id, s)| api::PodSandbox {
                id: id.clone(),
                metadata: s.config.metadata.clone(),
                state: s.state(),
                created_at: s.created_at,
                labels: s.config.labels.clone(),
                annotations: s.config.annotations.clone(),
                runtime_handler: String::new(),
            })
            .collect())
    }

    async fn create_container(
        &self,
        sandbox_id: &str,
        config: api::ContainerConfig,
        _sandbox_config: api::PodSandboxConfig,
    ) -> Result<String, CriError> {
        let now = self.now();
        let name = config.metadata.clone().unwrap_or_default().name;
        let mut state = self.log(format!("CreateContainer {name}"));
        if !state.sandboxes.get(sandbox_id).is_some_and(|s| s.ready) {
            return Err(not_found("CreateContainer", "ready sandbox", sandbox_id));
        }
        let image = config.image.clone().unwrap_or_default().image;
        if !state.images.contains(&image) {
            return Err(not_found("CreateContainer", "image", &image));
        }
        let id = FakeRuntime::next_id(&mut state, "container");
        let container = Container {
            sandbox: sandbox_id.to_owned(),
            config,
            state: ContainerState::ContainerCreated,
            created_at: now,
            started_at: 0,
            finished_at: 0,
            exit_code: 0,
            reason: String::new(),
        };
        state.containers.insert(id.clone(), container);
        Ok(id)
    }

    async fn start_container(&self, id: &str) -> Result<(), CriError> {
        let now = self.now();
        let mut state = self.log(format!("StartContainer {id}"));
        let c = state.containers.get_mut(id);
        let c = c.ok_or_else(|| not_found("StartContainer", "container", id))?;
        if c.state != ContainerState::ContainerCreated {
            return Err(CriError::Call {
                op: "StartContainer",
                source: tonic::Status::failed_precondition("container is not in created state"),
            });
        }
        c.state = ContainerState::ContainerRunning;
        c.started_at = now;
        Ok(())
    }

    async fn stop_container(&self, id: &str, _timeout_secs: i64) -> Result<(), CriError> {
        let now = self.now();
        let mut state = self.log(format!("StopContainer {id}"));
        let c = state.containers.get_mut(id);
        let c = c.ok_or_else(|| not_found("StopContainer", "container", id))?;
        if c.state == ContainerState::ContainerRunning {
            c.state = ContainerState::ContainerExited;
            c.exit_code = 137;
            c.finished_at = now;
        }
        Ok(())
    }

    async fn remove_container(&self, id: &str) -> Result<(), CriError> {
        let mut state = self.log(format!("RemoveContainer {id}"));
        state
            .containers
            .remove(id)
            .ok_or_else(|| not_found("RemoveContainer", "container", id))?;
        Ok(())
    }

    async fn list_containers(
        &self,
        filter: Option<api::ContainerFilter>,
    ) -> Result<Vec<api::Container>, CriError> {
        let state = self.log("ListContainers".into());
        let filter = filter.unwrap_or_default();
        let listed = state.containers.iter().filter(|(id, c)| {
            (filter.id.is_empty() || filter.id == **id)
                && (filter.pod_sandbox_id.is_empty() || filter.pod_sandbox_id == c.sandbox)
                && filter
                    .state
                    .as_ref()
                    .is_none_or(|v| v.state == c.state as i32)
                && selected(&c.config.labels, &filter.label_selector)
        });
        Ok(listed
            .map(|(id, c)| api::Container {
                id: id.clone(),
                pod_sandbox_id: c.sandbox.clone(),
                metadata: c.config.metadata.clone(),
                image: c.config.image.clone(),
                image_ref: c.config.image.clone().unwrap_or_default().image,
                state: c.state as i32,
                created_at: c.created_at,
                labels: c.config.labels.clone(),
                annotations: c.config.annotations.clone(),
                image_id: String::new(),
            })
            .collect())
    }

    async fn container_status(&self, id: &str) -> Result<api::ContainerStatus, CriError> {
        let state = self.log(format!("ContainerStatus {id}"));
        let c = state.containers.get(id);
        let c = c.ok_or_else(|| not_found("ContainerStatus", "container", id))?;
        Ok(api::ContainerStatus {
            id: id.to_owned(),
            metadata: c.config.metadata.clone(),
            state: c.state as i32,
            created_at: c.created_at,
            started_at: c.started_at,
            finished_at: c.finished_at,
            exit_code: c.exit_code,
            image: c.config.image.clone(),
            image_ref: c.config.image.clone().unwrap_or_default().image,
            reason: c.reason.clone(),
            labels: c.config.labels.clone(),
            annotations: c.config.annotations.clone(),
            log_path: state
                .sandboxes
                .get(&c.sandbox)
                .map_or_else(String::new, |s| {
                    format!("{}/{}", s.config.log_directory, c.config.log_path)
                }),
            ..Default::default()
        })
    }

    async fn exec_sync(
        &self,
        id: &str,
        cmd: Vec<String>,
        _timeout_secs: i64,
    ) -> Result<api::ExecSyncResponse, CriError> {
        let state = self.log(format!("ExecSync {id} {}", cmd.join(" ")));
        let running = state.containers.get(id);
        if running.is_none_or(|c| c.state != ContainerState::ContainerRunning) {
            return Err(not_found("ExecSync", "running container", id));
        }
        let (exit_code, stdout) = state.exec_answers.get(&cmd).cloned().unwrap_or_default();
        Ok(api::ExecSyncResponse {
            stdout,
            stderr: vec![],
            exit_code,
        })
    }

    async fn exec(&self, request: api::ExecRequest) -> Result<String, CriError> {
        let id = &request.container_id;
        let state = self.log(format!("Exec {id} {}", request.cmd.join(" ")));
        state.stream_url("Exec", "exec", id, state.running(id))
    }

    async fn attach(&self, request: api::AttachRequest) -> Result<String, CriError> {
        let id = &request.container_id;
        let state = self.log(format!("Attach {id}"));
        state.stream_url("Attach", "attach", id, state.running(id))
    }

    async fn port_forward(&self, request: api::PortForwardRequest) -> Result<String, CriError> {
        let id = &request.pod_sandbox_id;
        let ports: Vec<String> = request.port.iter().map(|p| p.to_string()).collect();
        let state = self.log(format!("PortForward {id} {}", ports.join(",")));
        let ready = state.sandboxes.get(id).is_some_and(|s| s.ready);
        state.stream_url("PortForward", "portforward", id, ready)
    }

    async fn image_status(&self, image: &str) -> Result<Option<api::Image>, CriError> {
        let state = self.log(format!("ImageStatus {image}"));
        Ok(state.images.contains(image).then(|| api::Image {
            id: format!("sha256:{image}"),
            repo_tags: vec![image.to_owned()],
            ..Default::default()
        }))
    }

    async fn pull_image(
        &self,
        image: &str,
        _auth: Option<api::AuthConfig>,
        _sandbox_config: Option<api::PodSandboxConfig>,
    ) -> Result<String, CriError> {
        let mut state = self.log(format!("PullImage {image}"));
        if let Some(message) = state.failing_pulls.get(image) {
            return Err(CriError::Call {
                op: "PullImage",
                source: tonic::Status::unknown(message.clone()),
            });
        }
        state.images.insert(image.to_owned());
        Ok(format!("sha256:{image}"))
    }

    async fn list_container_stats(
        &self,
        filter: Option<api::ContainerStatsFilter>,
    ) -> Result<Vec<api::ContainerStats>, CriError> {
        let now = self.now();
        let state = self.log("ListContainerStats".into());
        let filter = filter.unwrap_or_default();
        let listed = state.containers.iter().filter(|(id, c)| {
            c.state == ContainerState::ContainerRunning
                && (filter.id.is_empty() || filter.id == **id)
                && (filter.pod_sandbox_id.is_empty() || filter.pod_sandbox_id == c.sandbox)
                && selected(&c.config.labels, &filter.label_selector)
        });
        Ok(listed
            .map(|(id, c)| {
                let name = c.config.metadata.as_ref().map(|m| m.name.as_str());
                let usage = state.stats.get(name.unwrap_or_default());
                container_stats(id, c, usage.copied().unwrap_or_default(), now)
            })
            .collect())
    }

    async fn list_pod_sandbox_stats(
        &self,
        filter: Option<api::PodSandboxStatsFilter>,
    ) -> Result<Vec<api::PodSandboxStats>, CriError> {
        let now = self.now();
        let state = self.log("ListPodSandboxStats".into());
        if let Some(message) = &state.sandbox_stats_error {
            return Err(CriError::Call {
                op: "ListPodSandboxStats",
                source: tonic::Status::unknown(message.clone()),
            });
        }
        let filter = filter.unwrap_or_default();
        let listed = state.sandboxes.iter().filter(|(id, s)| {
            s.ready
                && (filter.id.is_empty() || filter.id == **id)
                && selected(&s.config.labels, &filter.label_selector)
        });
        let mut all = Vec::new();
        for (id, s) in listed {
            let running = state
                .containers
                .iter()
                .filter(|(_, c)| c.sandbox == *id && c.state == ContainerState::ContainerRunning);
            let mut total = Usage::default();
            let mut containers = Vec::new();
            for (cid, c) in running {
                let name = c.config.metadata.as_ref().map(|m| m.name.as_str());
                let u = state.stats.get(name.unwrap_or_default()).copied();
                let u = u.unwrap_or_default();
                total.cpu_core_nanos += u.cpu_core_nanos;
                total.working_set_bytes += u.working_set_bytes;
                total.usage_bytes += u.usage_bytes;
                total.rss_bytes += u.rss_bytes;
                containers.push(container_stats(cid, c, u, now));
            }
            let pod = s.config.metadata.as_ref().map(|m| m.name.as_str());
            let network = state.networks.get(pod.unwrap_or_default()).map(|(rx, tx)| {
                let eth0 = api::NetworkInterfaceUsage {
                    name: "eth0".into(),
                    rx_bytes: value(*rx),
                    tx_bytes: value(*tx),
                    rx_errors: value(0),
                    tx_errors: value(0),
                };
                api::NetworkUsage {
                    timestamp: now,
                    default_interface: Some(eth0.clone()),
                    interfaces: vec![eth0],
                }
            });
            all.push(api::PodSandboxStats {
                attributes: Some(api::PodSandboxAttributes {
                    id: id.clone(),
                    metadata: s.config.metadata.clone(),
                    labels: s.config.labels.clone(),
                    annotations: s.config.annotations.clone(),
                }),
                linux: Some(api::LinuxPodSandboxStats {
                    cpu: Some(cpu(total, now)),
                    memory: Some(memory(total, now)),
                    network,
                    process: None,
                    containers,
                }),
                windows: None,
            });
        }
        Ok(all)
    }

    async fn reopen_container_log(&self, id: &str) -> Result<(), CriError> {
        let state = self.log(format!("ReopenContainerLog {id}"));
        let c = state.containers.get(id);
        let c = c.ok_or_else(|| not_found("ReopenContainerLog", "container", id))?;
        if c.state != ContainerState::ContainerRunning {
            return Err(CriError::Call {
                op: "ReopenContainerLog",
                source: tonic::Status::failed_precondition("container is not running"),
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sandbox_config(name: &str) -> api::PodSandboxConfig {
        api::PodSandboxConfig {
            metadata: Some(api::PodSandboxMetadata {
                name: name.into(),
                uid: "u1".into(),
                namespace: "default".into(),
                attempt: 0,
            }),
            labels: HashMap::from([("pod".into(), name.into())]),
            ..Default::default()
        }
    }

    fn container_config(name: &str, image: &str) -> api::ContainerConfig {
        api::ContainerConfig {
            metadata: Some(api::ContainerMetadata {
                name: name.into(),
                attempt: 0,
            }),
            image: Some(api::ImageSpec {
                image: image.into(),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[tokio::test]
    async fn a_container_runs_in_a_ready_sandbox_and_exits_when_told() {
        let rt = FakeRuntime::default();
        let sandbox = rt.run_pod_sandbox(sandbox_config("web"), "").await.unwrap();
        let config = container_config("c", "busybox");
        let missing = rt.create_container(&sandbox, config.clone(), Default::default());
        assert!(missing.await.unwrap_err().is_not_found(), "no image yet");
        rt.pull_image("busybox", None, None).await.unwrap();
        let id = rt
            .create_container(&sandbox, config, Default::default())
            .await
            .unwrap();
        rt.start_container(&id).await.unwrap();
        assert_eq!(rt.exit("c", 3), 1);
        let status = rt.container_status(&id).await.unwrap();
        assert_eq!(status.state, ContainerState::ContainerExited as i32);
        assert_eq!(status.exit_code, 3);
        let by_label = api::PodSandboxFilter {
            label_selector: HashMap::from([("pod".into(), "web".into())]),
            ..Default::default()
        };
        assert_eq!(
            rt.list_pod_sandboxes(Some(by_label)).await.unwrap().len(),
            1
        );
        rt.remove_pod_sandbox(&sandbox).await.unwrap();
        assert!(rt.container_status(&id).await.unwrap_err().is_not_found());
        assert_eq!(rt.count("PullImage"), 1);
    }

    #[tokio::test]
    async fn streaming_calls_answer_urls_only_for_running_containers_and_ready_sandboxes() {
        let rt = FakeRuntime::default();
        let sandbox = rt.run_pod_sandbox(sandbox_config("web"), "").await.unwrap();
        rt.add_image("busybox");
        let config = container_config("c", "busybox");
        let id = rt
            .create_container(&sandbox, config, Default::default())
            .await
            .unwrap();
        rt.start_container(&id).await.unwrap();
        let exec = api::ExecRequest {
            container_id: id.clone(),
            cmd: vec!["sh".into()],
            ..Default::default()
        };
        let unserved = rt.exec(exec.clone()).await.unwrap_err();
        assert_eq!(unserved.code(), Some(tonic::Code::Unavailable));
        rt.serve_streams("http://127.0.0.1:9/");
        let url = rt.exec(exec.clone()).await.unwrap();
        assert_eq!(url, format!("http://127.0.0.1:9/exec/{id}"));
        let forward = api::PortForwardRequest {
            pod_sandbox_id: sandbox.clone(),
            port: vec![80],
        };
        let url = rt.port_forward(forward).await.unwrap();
        assert_eq!(url, format!("http://127.0.0.1:9/portforward/{sandbox}"));
        rt.exit("c", 0);
        let attach = api::AttachRequest {
            container_id: id.clone(),
            ..Default::default()
        };
        assert!(rt.attach(attach).await.unwrap_err().is_not_found());
        assert!(rt.exec(exec).await.unwrap_err().is_not_found());
        assert!(rt.calls().contains(&format!("PortForward {sandbox} 80")));
    }

    #[tokio::test]
    async fn a_failing_pull_answers_its_message() {
        let rt = FakeRuntime::default();
        rt.fail_pulls("nope", "pull access denied");
        let err = rt.pull_image("nope", None, None).await.unwrap_err();
        assert!(err.to_string().contains("pull access denied"), "{err}");
        assert!(rt.image_status("nope").await.unwrap().is_none());
    }

    #[tokio::test]
    async fn stats_report_the_usage_set_and_a_log_reopens_only_while_running() {
        let rt = FakeRuntime::default();
        rt.add_image("busybox");
        let sandbox = rt.run_pod_sandbox(sandbox_config("web"), "").await.unwrap();
        let config = container_config("c", "busybox");
        let id = rt.create_container(&sandbox, config, Default::default());
        let id = id.await.unwrap();
        rt.start_container(&id).await.unwrap();
        let usage = Usage {
            cpu_core_nanos: 7,
            working_set_bytes: 5,
            ..Default::default()
        };
        rt.set_usage("c", usage);
        rt.set_network("web", 10, 20);
        let stats = rt.list_container_stats(None).await.unwrap();
        let cpu = stats[0].cpu.and_then(|c| c.usage_core_nano_seconds);
        assert_eq!(cpu.map(|v| v.value), Some(7));
        let pods = rt.list_pod_sandbox_stats(None).await.unwrap();
        let linux = pods[0].linux.clone().unwrap();
        let memory = linux.memory.and_then(|m| m.working_set_bytes);
        assert_eq!(memory.map(|v| v.value), Some(5));
        let rx = linux.network.unwrap().default_interface.unwrap().rx_bytes;
        assert_eq!(rx.map(|v| v.value), Some(10));
        rt.fail_sandbox_stats("cgroupPath is empty");
        assert!(rt.list_pod_sandbox_stats(None).await.is_err());

        rt.reopen_container_log(&id).await.unwrap();
        assert_eq!(rt.exit("c", 0), 1);
        let err = rt.reopen_container_log(&id).await.unwrap_err();
        assert_eq!(err.code(), Some(tonic::Code::FailedPrecondition));
        assert!(
            rt.reopen_container_log("nope")
                .await
                .unwrap_err()
                .is_not_found()
        );
    }
}
