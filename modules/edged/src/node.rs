//! The node's status and Lease, as the kubelet keeps them: the status computed every
//! `nodeStatusUpdateFrequency` and sent when it changed (at least every 5 minutes), the Lease
//! in `kube-node-lease` renewed every quarter of its duration. Both go through lwproxy, so
//! while the cloud is away they are stored at the edge and queued.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::Shared;

/// The status is sent at least this often even when nothing changed.
const STATUS_MAX_AGE: Duration = Duration::from_secs(300);
/// The kubelet version edged reports.
pub const KUBELET_VERSION: &str = "v1.33.0-kubeedge-rs";
/// Where node Leases live.
const LEASE_NAMESPACE: &str = "kube-node-lease";
/// How long a pressure condition holds after its signal was last past the threshold (the
/// kubelet's `evictionPressureTransitionPeriod`), so a value hovering at a threshold does not
/// flip the condition, and with it the status, on every tick.
const PRESSURE_TRANSITION_PERIOD: Duration = Duration::from_secs(300);

/// Runs the status and lease loops until shutdown.
pub async fn run(shared: Arc<Shared>, shutdown: CancellationToken) {
    let status_every = shared.config.node_status_update_frequency;
    let lease_every =
        Duration::from_secs(u64::from(shared.config.node_lease_duration_seconds).max(4) / 4);
    let mut status_tick = tokio::time::interval(status_every);
    let mut lease_tick = tokio::time::interval(lease_every);
    let mut node = NodeState {
        info: node_info(),
        ..NodeState::default()
    };
    loop {
        tokio::select! {
            biased;
            _ = shutdown.cancelled() => return,
            _ = status_tick.tick() => node.send_status(&shared).await,
            _ = lease_tick.tick() => node.renew_lease(&shared).await,
        }
    }
}

/// What the loops remember between ticks.
#[derive(Default)]
struct NodeState {
    /// The host's part of `nodeInfo`, read once.
    info: Value,
    /// Whether the kubelet's well-known labels and `nodeLabels` are on the Node.
    labelled: bool,
    /// The last status sent (without times) and when.
    sent: Option<(Value, Instant)>,
    /// Each condition's status and since when it holds.
    since: HashMap<String, (String, String)>,
    /// When each pressure signal was last past its threshold.
    pressure_seen: PressureSeen,
    /// The Lease as last written, renewed without reading it again.
    lease: Option<Lease>,
}

/// What the host reports on one tick: read by [`Host::measure`], judged by pure code.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct Host {
    /// `MemTotal` in KiB (0 when unknown).
    memory_kib: u64,
    /// `MemAvailable` in KiB.
    memory_available_kib: u64,
    /// The filesystem holding `rootDirectory` (the kubelet's nodefs).
    fs: Option<FsStats>,
    /// Tasks in use against the kernel's limit.
    tasks: Option<TaskStats>,
}

/// A filesystem's size and what is left of it, from statvfs(2).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct FsStats {
    /// Size in bytes.
    bytes: u64,
    /// Bytes an unprivileged process may still use.
    bytes_available: u64,
    /// Inodes in all (0 for filesystems without a fixed number).
    inodes: u64,
    /// Inodes free.
    inodes_free: u64,
}

/// Tasks (processes and threads: each takes a PID) against the most the kernel allows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct TaskStats {
    /// Tasks that exist now.
    running: u64,
    /// The lower of `kernel.pid_max` and `kernel.threads-max`.
    max: u64,
}

/// Which of the node's pressure conditions hold.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Pressure {
    memory: bool,
    disk: bool,
    pid: bool,
}

/// When each pressure signal was last seen past its threshold.
#[derive(Debug, Default)]
struct PressureSeen {
    memory: Option<Instant>,
    disk: Option<Instant>,
    pid: Option<Instant>,
}

// === impl NodeState ===

impl NodeState {
    async fn send_status(&mut self, shared: &Shared) {
        if !self.labelled {
            self.send_labels(shared).await;
        }
        let runtime = match shared.cri.version().await {
            Ok(v) => format!("{}://{}", v.runtime_name, v.runtime_version),
            Err(_) => String::new(),
        };
        let root = shared.config.root_directory.clone();
        let host = tokio::task::spawn_blocking(move || Host::measure(&root))
            .await
            .unwrap_or_default();
        let now = tokio::time::Instant::now().into_std();
        let pressure = self.pressure_seen.hold(host.pressure(), now);
        let status = node_status(shared, &self.info, &runtime, &host, pressure);
        let fresh = self
            .sent
            .as_ref()
            .is_some_and(|(s, at)| *s == status && at.elapsed() < STATUS_MAX_AGE);
        if fresh {
            return;
        }
        let mut body = status.clone();
        let now = apimachinery::time::now_rfc3339();
        stamp_conditions(&mut body, &mut self.since, &now);
        let api: Api<Node> = Api::all(shared.client.clone());
        let patch = Patch::Merge(json!({"status": body}));
        match api
            .patch_status(&shared.node, &PatchParams::default(), &patch)
            .await
        {
            Ok(_) => self.sent = Some((status, Instant::now())),
            Err(e) => {
                tracing::info!(node_id = %shared.node, error = %e, "node status not sent; retrying")
            }
        }
    }

    /// Puts the kubelet's well-known labels and `nodeLabels` on the Node (once it exists;
    /// retried with each status tick until it is done).
    async fn send_labels(&mut self, shared: &Shared) {
        let api: Api<Node> = Api::all(shared.client.clone());
        let labels = node_labels(&shared.node, &shared.config.node_labels);
        let patch = Patch::Merge(json!({"metadata": {"labels": labels}}));
        match api
            .patch(&shared.node, &PatchParams::default(), &patch)
            .await
        {
            Ok(_) => {
                tracing::info!(node_id = %shared.node, labels = ?labels, "node labels set");
                self.labelled = true;
            }
            Err(e) => {
                tracing::info!(node_id = %shared.node, error = %e, "node labels not set yet; retrying")
            }
        }
    }

    /// Renews the Lease from the copy last written (one request); reads it again, or creates
    /// it, only when there is no copy or the write failed.
    async fn renew_lease(&mut self, shared: &Shared) {
        let api: Api<Lease> = Api::namespaced(shared.client.clone(), LEASE_NAMESPACE);
        let now = apimachinery::time::now_rfc3339_micros();
        let duration = shared.config.node_lease_duration_seconds as i32;
        let held = match self.lease.take() {
            Some(lease) => Ok(Some(lease)),
            None => api.get_opt(&shared.node).await,
        };
        let result = match held {
            Ok(Some(mut lease)) => {
                let spec = lease.spec.get_or_insert_with(Default::default);
                spec.holder_identity = Some(shared.node.clone());
                spec.lease_duration_seconds = Some(duration);
                spec.renew_time = serde_json::from_value(json!(now)).ok();
                api.replace(&shared.node, &PostParams::default(), &lease)
                    .await
            }
            Ok(None) => {
                let lease = new_lease(&shared.node, duration, &now);
                api.create(&PostParams::default(), &lease).await
            }
            Err(e) => Err(e),
        };
        match result {
            Ok(lease) => self.lease = Some(lease),
            Err(e) => {
                tracing::info!(node_id = %shared.node, error = %e, "node lease not renewed; retrying")
            }
        }
    }
}

// === impl Host ===

impl Host {
    /// Reads /proc and statvfs(2) of `root`, or of its nearest existing ancestor while edged
    /// has not made it yet. What cannot be read is left unknown.
    fn measure(root: &Path) -> Host {
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
        let memory_kib = meminfo_kib(&meminfo, "MemTotal:").unwrap_or(0);
        Host {
            memory_kib,
            memory_available_kib: meminfo_kib(&meminfo, "MemAvailable:").unwrap_or(memory_kib),
            fs: fs_stats(root),
            tasks: task_stats(),
        }
    }

    /// The signals past the kubelet's default hard eviction thresholds; unknown ones are not.
    fn pressure(&self) -> Pressure {
        Pressure {
            memory: memory_pressure(self.memory_kib, self.memory_available_kib),
            disk: self.fs.is_some_and(|fs| fs.pressure()),
            pid: self.tasks.is_some_and(|t| t.pressure()),
        }
    }
}

// === impl FsStats ===

impl FsStats {
    /// `nodefs.available<10%` or `nodefs.inodesFree<5%`; the inode signal only where the
    /// filesystem has a fixed number of inodes.
    fn pressure(&self) -> bool {
        below(self.bytes_available, self.bytes, 10) || below(self.inodes_free, self.inodes, 5)
    }

    /// What pods may use: the size less the kubelet's reservation for its `nodefs.available`
    /// hard eviction threshold (10%), as the kubelet computes allocatable.
    fn allocatable(&self) -> u64 {
        self.bytes - percent_of(self.bytes, 10)
    }
}

// === impl TaskStats ===

impl TaskStats {
    /// `pid.available<10%`: fewer than a tenth of the PIDs the kernel allows are left.
    fn pressure(&self) -> bool {
        below(self.max.saturating_sub(self.running), self.max, 10)
    }
}

// === impl PressureSeen ===

impl PressureSeen {
    /// The conditions to report when `observed` holds at `now`: each one from the first tick
    /// its signal is past the threshold until [`PRESSURE_TRANSITION_PERIOD`] after the last.
    fn hold(&mut self, observed: Pressure, now: Instant) -> Pressure {
        Pressure {
            memory: held(&mut self.memory, observed.memory, now),
            disk: held(&mut self.disk, observed.disk, now),
            pid: held(&mut self.pid, observed.pid, now),
        }
    }
}

/// Whether a signal `observed` (or not) at `now` still holds, given when it was last `seen`.
fn held(seen: &mut Option<Instant>, observed: bool, now: Instant) -> bool {
    if observed {
        *seen = Some(now);
    }
    seen.is_some_and(|at| now.saturating_duration_since(at) < PRESSURE_TRANSITION_PERIOD)
}

/// Sets each condition's heartbeat to `now` and its transition time to when its status last
/// changed (now, for a condition new or changed since the last call).
fn stamp_conditions(status: &mut Value, since: &mut HashMap<String, (String, String)>, now: &str) {
    for c in status["conditions"].as_array_mut().into_iter().flatten() {
        let kind = c["type"].as_str().unwrap_or_default().to_string();
        let state = c["status"].as_str().unwrap_or_default().to_string();
        let held = since
            .entry(kind)
            .or_insert_with(|| (state.clone(), now.to_string()));
        if held.0 != state {
            *held = (state, now.to_string());
        }
        c["lastHeartbeatTime"] = json!(now);
        c["lastTransitionTime"] = json!(held.1);
    }
}

fn new_lease(node: &str, duration: i32, now: &str) -> Lease {
    let mut lease = Lease::default();
    lease.metadata.name = Some(node.to_string());
    lease.metadata.namespace = Some(LEASE_NAMESPACE.to_string());
    lease.spec = Some(LeaseSpec {
        holder_identity: Some(node.to_string()),
        lease_duration_seconds: Some(duration),
        renew_time: serde_json::from_value(json!(now)).ok(),
        ..LeaseSpec::default()
    });
    lease
}

/// The node's status, without heartbeat times.
fn node_status(
    shared: &Shared,
    info: &Value,
    runtime: &str,
    host: &Host,
    pressure: Pressure,
) -> Value {
    let mut node_info = info.clone();
    node_info["containerRuntimeVersion"] = json!(runtime);
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let (capacity, allocatable) = resources(cpus, host, shared.config.max_pods);
    json!({
        "conditions": conditions(pressure, !runtime.is_empty()),
        "capacity": capacity,
        "allocatable": allocatable,
        "addresses": [
            {"type": "InternalIP", "address": shared.host_ip},
            {"type": "Hostname", "address": shared.node},
        ],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
        "nodeInfo": node_info,
    })
}

/// Capacity and allocatable. Only sizes go in, never what is free, so they stay the same from
/// tick to tick and an unchanged status is not sent again.
/// The kubelet's default hard eviction threshold for memory (`memory.available<100Mi`), also
/// kept out of the node's allocatable memory.
const MEMORY_EVICTION_KIB: u64 = 100 * 1024;

fn resources(cpus: usize, host: &Host, max_pods: u32) -> (Value, Value) {
    let mut capacity = json!({
        "cpu": cpus.to_string(),
        "memory": format!("{}Ki", host.memory_kib),
        "pods": max_pods.to_string(),
    });
    let mut allocatable = capacity.clone();
    allocatable["memory"] = json!(format!(
        "{}Ki",
        host.memory_kib.saturating_sub(MEMORY_EVICTION_KIB)
    ));
    if let Some(fs) = host.fs {
        capacity["ephemeral-storage"] = json!(binary_quantity(fs.bytes));
        allocatable["ephemeral-storage"] = json!(binary_quantity(fs.allocatable()));
    }
    (capacity, allocatable)
}

/// The node's conditions, with the kubelet's reasons and messages.
fn conditions(pressure: Pressure, runtime_ok: bool) -> Value {
    type Said = (&'static str, &'static str);
    let condition = |kind: &str, holds: bool, when_true: Said, when_false: Said| {
        let (status, (reason, message)) = if holds {
            ("True", when_true)
        } else {
            ("False", when_false)
        };
        json!({"type": kind, "status": status, "reason": reason, "message": message})
    };
    json!([
        condition(
            "MemoryPressure",
            pressure.memory,
            (
                "KubeletHasInsufficientMemory",
                "kubelet has insufficient memory available"
            ),
            (
                "KubeletHasSufficientMemory",
                "kubelet has sufficient memory available"
            ),
        ),
        condition(
            "DiskPressure",
            pressure.disk,
            ("KubeletHasDiskPressure", "kubelet has disk pressure"),
            ("KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
        ),
        condition(
            "PIDPressure",
            pressure.pid,
            (
                "KubeletHasInsufficientPID",
                "kubelet has insufficient PID available"
            ),
            (
                "KubeletHasSufficientPID",
                "kubelet has sufficient PID available"
            ),
        ),
        condition(
            "Ready",
            runtime_ok,
            ("KubeletReady", "edged is posting ready status"),
            ("KubeletNotReady", "container runtime is down"),
        ),
    ])
}

/// Memory is short when less than 5% of it is available.
fn memory_pressure(total_kib: u64, available_kib: u64) -> bool {
    total_kib > 0 && available_kib < MEMORY_EVICTION_KIB
}

/// Whether `available` is under `percent` of `capacity`, the threshold truncated to a whole
/// unit as the kubelet does; never when the capacity is unknown (zero).
fn below(available: u64, capacity: u64, percent: u64) -> bool {
    capacity > 0 && available < percent_of(capacity, percent)
}

/// `percent` of `value`, rounded down.
fn percent_of(value: u64, percent: u64) -> u64 {
    (u128::from(value) * u128::from(percent) / 100) as u64
}

/// `bytes` as a Kubernetes quantity in the largest binary unit that holds it exactly
/// (`1536`, `4Ki`, `20Gi`), as the API writes it.
fn binary_quantity(bytes: u64) -> String {
    const UNITS: [&str; 7] = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"];
    let (mut value, mut unit) = (bytes, 0);
    while value != 0 && value % 1024 == 0 && unit + 1 < UNITS.len() {
        value /= 1024;
        unit += 1;
    }
    format!("{value}{}", UNITS[unit])
}

/// statvfs(2) of `path`, or of its nearest ancestor that exists.
fn fs_stats(path: &Path) -> Option<FsStats> {
    let dir = path
        .ancestors()
        .map(|p| {
            if p.as_os_str().is_empty() {
                Path::new(".")
            } else {
                p
            }
        })
        .find(|p| p.exists())?;
    let st = rustix::fs::statvfs(dir).ok()?;
    Some(FsStats {
        bytes: st.f_blocks.saturating_mul(st.f_frsize),
        bytes_available: st.f_bavail.saturating_mul(st.f_frsize),
        inodes: st.f_files,
        inodes_free: st.f_ffree,
    })
}

/// Tasks in use and the kernel's limit, read as the kubelet reads them: the limit is the lower
/// of `pid_max` and `threads-max`, the count is the total in /proc/loadavg (threads included,
/// since each takes a PID), or the processes in /proc when that cannot be read.
fn task_stats() -> Option<TaskStats> {
    let max = ["/proc/sys/kernel/pid_max", "/proc/sys/kernel/threads-max"]
        .iter()
        .filter_map(|p| read_trim(p).parse::<u64>().ok())
        .min()?;
    let running = std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|text| loadavg_tasks(&text))
        .or_else(count_processes)?;
    Some(TaskStats { running, max })
}

/// The total of tasks in /proc/loadavg's fourth field (`running/total`).
fn loadavg_tasks(text: &str) -> Option<u64> {
    let (_, total) = text.split_whitespace().nth(3)?.split_once('/')?;
    total.parse().ok()
}

/// The processes in /proc (its numeric entries).
fn count_processes() -> Option<u64> {
    let entries = std::fs::read_dir("/proc").ok()?;
    let numeric = |name: &std::ffi::OsStr| {
        name.to_str()
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
    };
    let count = entries
        .filter_map(Result::ok)
        .filter(|e| numeric(&e.file_name()))
        .count();
    Some(count as u64)
}

/// A field of /proc/meminfo's `text` (`MemTotal:`), in KiB.
fn meminfo_kib(text: &str, field: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with(field))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// The host's part of `nodeInfo` (it does not change while edgecore runs).
fn node_info() -> Value {
    json!({
        "machineID": read_trim("/etc/machine-id"),
        "systemUUID": read_trim("/sys/class/dmi/id/product_uuid"),
        "bootID": read_trim("/proc/sys/kernel/random/boot_id"),
        "kernelVersion": read_trim("/proc/sys/kernel/osrelease"),
        "osImage": os_image(),
        "kubeletVersion": KUBELET_VERSION,
        "kubeProxyVersion": "",
        "operatingSystem": "linux",
        "architecture": arch(),
    })
}

fn read_trim(path: &str) -> String {
    std::fs::read_to_string(path)
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

fn os_image() -> String {
    let text = std::fs::read_to_string("/etc/os-release").unwrap_or_default();
    text.lines()
        .find_map(|l| l.strip_prefix("PRETTY_NAME="))
        .map(|v| v.trim_matches('"').to_string())
        .unwrap_or_else(|| "Linux".into())
}

/// The labels a kubelet puts on its Node (`kubernetes.io/os`, `kubernetes.io/arch`,
/// `kubernetes.io/hostname` and their deprecated `beta.` forms), then `configured` over them:
/// upstream DaemonSets select `kubernetes.io/os: linux`.
fn node_labels(
    node: &str,
    configured: &std::collections::BTreeMap<String, String>,
) -> std::collections::BTreeMap<String, String> {
    let os = std::env::consts::OS;
    let mut labels: std::collections::BTreeMap<String, String> = [
        ("kubernetes.io/os", os),
        ("kubernetes.io/arch", arch()),
        ("kubernetes.io/hostname", node),
        ("beta.kubernetes.io/os", os),
        ("beta.kubernetes.io/arch", arch()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    labels.extend(configured.clone());
    labels
}

fn arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(ready: &str) -> Value {
        json!({"conditions": [{"type": "Ready", "status": ready}, {"type": "DiskPressure", "status": "False"}]})
    }

    #[test]
    fn a_condition_keeps_its_transition_time_until_its_status_changes() {
        let mut since = HashMap::new();
        let mut first = status("True");
        stamp_conditions(&mut first, &mut since, "t1");
        assert_eq!(first["conditions"][0]["lastTransitionTime"], "t1");
        let mut second = status("True");
        stamp_conditions(&mut second, &mut since, "t2");
        assert_eq!(second["conditions"][0]["lastTransitionTime"], "t1");
        assert_eq!(second["conditions"][0]["lastHeartbeatTime"], "t2");
        let mut third = status("False");
        stamp_conditions(&mut third, &mut since, "t3");
        assert_eq!(third["conditions"][0]["lastTransitionTime"], "t3");
        assert_eq!(third["conditions"][1]["lastTransitionTime"], "t1");
    }

    #[test]
    fn a_node_carries_the_kubelets_well_known_labels_under_its_configured_ones() {
        let configured = [
            ("site".to_owned(), "shop-1".to_owned()),
            ("kubernetes.io/hostname".to_owned(), "h1".to_owned()),
        ];
        let labels = node_labels("n1", &configured.into_iter().collect());
        assert_eq!(labels["kubernetes.io/os"], std::env::consts::OS);
        assert_eq!(labels["kubernetes.io/arch"], arch());
        assert_eq!(labels["beta.kubernetes.io/os"], std::env::consts::OS);
        assert_eq!(labels["site"], "shop-1");
        assert_eq!(
            labels["kubernetes.io/hostname"], "h1",
            "a configured label wins"
        );
        assert_eq!(
            node_labels("n1", &Default::default())["kubernetes.io/hostname"],
            "n1"
        );
    }

    const GI: u64 = 1024 * 1024 * 1024;

    fn fs(bytes: u64, bytes_available: u64, inodes: u64, inodes_free: u64) -> FsStats {
        FsStats {
            bytes,
            bytes_available,
            inodes,
            inodes_free,
        }
    }

    #[test]
    fn disk_pressure_starts_under_a_tenth_of_space_or_a_twentieth_of_inodes() {
        assert!(!fs(100 * GI, 10 * GI, 1000, 50).pressure());
        assert!(fs(100 * GI, 10 * GI - 1, 1000, 500).pressure());
        assert!(fs(100 * GI, 50 * GI, 1000, 49).pressure());
        assert!(
            !fs(100 * GI, 50 * GI, 0, 0).pressure(),
            "no fixed inode count"
        );
        assert!(!fs(0, 0, 0, 0).pressure(), "unknown size");
    }

    #[test]
    fn pid_pressure_starts_when_under_a_tenth_of_pids_are_left() {
        let tasks = |running, max| TaskStats { running, max };
        assert!(!tasks(900, 1000).pressure());
        assert!(tasks(901, 1000).pressure());
        assert!(tasks(5000, 1000).pressure());
        assert!(!tasks(10, 0).pressure(), "unknown limit");
    }

    #[test]
    fn memory_pressure_starts_under_100_mi_available() {
        assert!(!memory_pressure(8 << 20, 102_400));
        assert!(memory_pressure(8 << 20, 102_399));
        assert!(!memory_pressure(0, 0), "unknown");
    }

    #[test]
    fn an_unknown_host_is_under_no_pressure() {
        assert_eq!(Host::default().pressure(), Pressure::default());
        let host = Host {
            memory_kib: 1000,
            memory_available_kib: 10,
            fs: Some(fs(100, 1, 100, 100)),
            tasks: Some(TaskStats {
                running: 999,
                max: 1000,
            }),
        };
        let all = Pressure {
            memory: true,
            disk: true,
            pid: true,
        };
        assert_eq!(host.pressure(), all);
    }

    #[test]
    fn a_pressure_condition_holds_for_the_transition_period_after_its_signal_clears() {
        let start = Instant::now();
        let at = |secs| start + Duration::from_secs(secs);
        let disk = Pressure {
            disk: true,
            ..Pressure::default()
        };
        let none = Pressure::default();
        let mut seen = PressureSeen::default();
        assert_eq!(seen.hold(none, at(0)), none);
        assert_eq!(seen.hold(disk, at(10)), disk);
        assert_eq!(seen.hold(none, at(20)), disk);
        assert_eq!(seen.hold(disk, at(100)), disk);
        assert_eq!(
            seen.hold(none, at(399)),
            disk,
            "five minutes after the last sighting"
        );
        assert_eq!(seen.hold(none, at(400)), none);
        assert_eq!(seen.hold(disk, at(500)), disk);
    }

    #[test]
    fn ephemeral_storage_is_the_filesystem_size_less_the_eviction_reserve() {
        let mut host = Host {
            memory_kib: 204_800,
            fs: Some(fs(100 * GI, 40 * GI, 0, 0)),
            ..Host::default()
        };
        let (capacity, allocatable) = resources(4, &host, 110);
        assert_eq!(
            capacity,
            json!({"cpu": "4", "memory": "204800Ki", "pods": "110", "ephemeral-storage": "100Gi"})
        );
        assert_eq!(allocatable["ephemeral-storage"], "90Gi");
        assert_eq!(allocatable["memory"], "102400Ki", "100Mi kept for eviction");

        host.fs = Some(fs(10_000_000_000, 0, 0, 0));
        let (capacity_dec, allocatable_dec) = resources(4, &host, 110);
        assert_eq!(capacity_dec["ephemeral-storage"], "9765625Ki");
        assert_eq!(allocatable_dec["ephemeral-storage"], "9000000000");

        host.fs = Some(fs(100 * GI, 3 * GI, 0, 0));
        assert_eq!(
            resources(4, &host, 110).0,
            capacity,
            "free space is not reported"
        );
        host.fs = None;
        assert!(
            resources(4, &host, 110)
                .0
                .get("ephemeral-storage")
                .is_none()
        );
    }

    #[test]
    fn conditions_carry_the_kubelets_reasons() {
        let reasons = |pressure, ready| {
            let list = conditions(pressure, ready);
            let list = list.as_array().unwrap().clone();
            list.iter()
                .map(|c| {
                    format!(
                        "{} {} {}",
                        c["type"].as_str().unwrap(),
                        c["status"].as_str().unwrap(),
                        c["reason"].as_str().unwrap()
                    )
                })
                .collect::<Vec<_>>()
        };
        assert_eq!(
            reasons(Pressure::default(), true),
            [
                "MemoryPressure False KubeletHasSufficientMemory",
                "DiskPressure False KubeletHasNoDiskPressure",
                "PIDPressure False KubeletHasSufficientPID",
                "Ready True KubeletReady",
            ]
        );
        let all = Pressure {
            memory: true,
            disk: true,
            pid: true,
        };
        assert_eq!(
            reasons(all, false),
            [
                "MemoryPressure True KubeletHasInsufficientMemory",
                "DiskPressure True KubeletHasDiskPressure",
                "PIDPressure True KubeletHasInsufficientPID",
                "Ready False KubeletNotReady",
            ]
        );
        assert_eq!(
            conditions(all, true)[1]["message"],
            "kubelet has disk pressure"
        );
    }

    #[test]
    fn byte_counts_use_the_largest_exact_binary_unit() {
        assert_eq!(binary_quantity(0), "0");
        assert_eq!(binary_quantity(1536), "1536");
        assert_eq!(binary_quantity(4096), "4Ki");
        assert_eq!(binary_quantity(3 * 1024 * 1024 + 1024), "3073Ki");
        assert_eq!(binary_quantity(20 * GI), "20Gi");
    }

    #[test]
    fn proc_files_parse() {
        assert_eq!(loadavg_tasks("1.36 3.49 4.53 2/3518 3715089\n"), Some(3518));
        assert_eq!(loadavg_tasks("1.36 3.49"), None);
        assert_eq!(loadavg_tasks("1.36 3.49 4.53 2-3518 1"), None);
        let meminfo = "MemTotal:       16303488 kB\nMemFree:  100 kB\nMemAvailable:   8000000 kB\n";
        assert_eq!(meminfo_kib(meminfo, "MemTotal:"), Some(16303488));
        assert_eq!(meminfo_kib(meminfo, "MemAvailable:"), Some(8000000));
        assert_eq!(meminfo_kib(meminfo, "SwapTotal:"), None);
    }

    #[test]
    fn a_root_directory_not_made_yet_is_measured_on_its_nearest_ancestor() {
        let dir = tempfile::tempdir().unwrap();
        let here = fs_stats(dir.path()).expect("statvfs of a temp dir");
        let later = fs_stats(&dir.path().join("not/made/yet")).unwrap();
        assert!(here.bytes > 0);
        assert_eq!(later.bytes, here.bytes);
    }

    #[test]
    fn a_new_lease_names_its_holder_and_duration() {
        let lease = new_lease("n1", 40, "2026-11-25T12:00:00.000000Z");
        assert_eq!(lease.metadata.namespace.as_deref(), Some(LEASE_NAMESPACE));
        let spec = lease.spec.unwrap();
        assert_eq!(spec.holder_identity.as_deref(), Some("n1"));
        assert_eq!(spec.lease_duration_seconds, Some(40));
        assert!(spec.renew_time.is_some());
    }
}
