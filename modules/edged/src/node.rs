//! The node's status and Lease, as the kubelet keeps them: the status computed every
//! `nodeStatusUpdateFrequency` and sent when it changed (at least every 5 minutes), the Lease
//! in `kube-node-lease` renewed every quarter of its duration. Both go through lwproxy, so
//! while the cloud is away they are stored at the edge and queued.

use std::collections::HashMap;
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
    /// The last status sent (without times) and when.
    sent: Option<(Value, Instant)>,
    /// Each condition's status and since when it holds.
    since: HashMap<String, (String, String)>,
    /// The Lease as last written, renewed without reading it again.
    lease: Option<Lease>,
}

// === impl NodeState ===

impl NodeState {
    async fn send_status(&mut self, shared: &Shared) {
        let runtime = match shared.cri.version().await {
            Ok(v) => format!("{}://{}", v.runtime_name, v.runtime_version),
            Err(_) => String::new(),
        };
        let status = node_status(shared, &self.info, &runtime, !runtime.is_empty());
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
fn node_status(shared: &Shared, info: &Value, runtime: &str, runtime_ok: bool) -> Value {
    let mut node_info = info.clone();
    node_info["containerRuntimeVersion"] = json!(runtime);
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let memory = meminfo("MemTotal:").unwrap_or(0);
    let available = meminfo("MemAvailable:").unwrap_or(memory);
    let pods = shared.config.max_pods.to_string();
    let resources = json!({"cpu": cpus.to_string(), "memory": format!("{memory}Ki"), "pods": pods});
    let condition = |kind: &str, ok: bool, reason: &str, message: &str| json!({"type": kind, "status": if ok { "True" } else { "False" }, "reason": reason, "message": message});
    let low_memory = memory > 0 && available * 20 < memory;
    json!({
        "conditions": [
            condition("MemoryPressure", low_memory, if low_memory { "KubeletHasInsufficientMemory" } else { "KubeletHasSufficientMemory" }, "kubelet has sufficient memory available"),
            condition("DiskPressure", false, "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
            condition("PIDPressure", false, "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
            if runtime_ok {
                condition("Ready", true, "KubeletReady", "edged is posting ready status")
            } else {
                condition("Ready", false, "KubeletNotReady", "container runtime is down")
            },
        ],
        "capacity": resources,
        "allocatable": resources,
        "addresses": [
            {"type": "InternalIP", "address": shared.host_ip},
            {"type": "Hostname", "address": shared.node},
        ],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
        "nodeInfo": node_info,
    })
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

fn meminfo(field: &str) -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with(field))?;
    line.split_whitespace().nth(1)?.parse().ok()
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
    fn a_new_lease_names_its_holder_and_duration() {
        let lease = new_lease("n1", 40, "2026-11-25T12:00:00.000000Z");
        assert_eq!(lease.metadata.namespace.as_deref(), Some(LEASE_NAMESPACE));
        let spec = lease.spec.unwrap();
        assert_eq!(spec.holder_identity.as_deref(), Some("n1"));
        assert_eq!(spec.lease_duration_seconds, Some(40));
        assert!(spec.renew_time.is_some());
    }
}
