//! The node's status and Lease, as the kubelet keeps them: the status computed every
//! `nodeStatusUpdateFrequency` and sent when it changed (at least every 5 minutes), the Lease
//! in `kube-node-lease` renewed every quarter of its duration. Both go through lwproxy, so
//! while the cloud is away they are stored at the edge and queued.

use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::Shared;

/// The status is sent at least this often even when nothing changed.
const STATUS_MAX_AGE: Duration = Duration::from_secs(300);
/// The kubelet version edged reports.
pub const KUBELET_VERSION: &str = "v1.33.0-kubeedge-rs";

/// Runs the status and lease loops until shutdown.
pub async fn run(shared: Arc<Shared>, shutdown: CancellationToken) {
    let status_every = shared.config.node_status_update_frequency;
    let lease_every =
        Duration::from_secs(u64::from(shared.config.node_lease_duration_seconds).max(4) / 4);
    let mut status_tick = tokio::time::interval(status_every);
    let mut lease_tick = tokio::time::interval(lease_every);
    let mut sent: Option<(Value, Instant)> = None;
    loop {
        tokio::select! {
            biased;
            _ = shutdown.cancelled() => return,
            _ = status_tick.tick() => send_status(&shared, &mut sent).await,
            _ = lease_tick.tick() => renew_lease(&shared).await,
        }
    }
}

async fn send_status(shared: &Shared, sent: &mut Option<(Value, Instant)>) {
    let runtime = match shared.cri.version().await {
        Ok(v) => format!("{}://{}", v.runtime_name, v.runtime_version),
        Err(_) => String::new(),
    };
    let status = node_status(shared, &runtime, !runtime.is_empty());
    let fresh = sent
        .as_ref()
        .is_some_and(|(s, at)| *s == status && at.elapsed() < STATUS_MAX_AGE);
    if fresh {
        return;
    }
    let mut body = status.clone();
    let now = apimachinery::time::now_rfc3339();
    for c in body["conditions"].as_array_mut().into_iter().flatten() {
        c["lastHeartbeatTime"] = json!(now);
        c["lastTransitionTime"] = json!(now);
    }
    let api: Api<Node> = Api::all(shared.client.clone());
    let patch = Patch::Merge(json!({"status": body}));
    match api
        .patch_status(&shared.node, &PatchParams::default(), &patch)
        .await
    {
        Ok(_) => *sent = Some((status, Instant::now())),
        Err(e) => {
            tracing::info!(node_id = %shared.node, error = %e, "node status not sent; retrying")
        }
    }
}

/// The node's status, without heartbeat times.
fn node_status(shared: &Shared, runtime: &str, runtime_ok: bool) -> Value {
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
        "nodeInfo": {
            "machineID": read_trim("/etc/machine-id"),
            "systemUUID": read_trim("/sys/class/dmi/id/product_uuid"),
            "bootID": read_trim("/proc/sys/kernel/random/boot_id"),
            "kernelVersion": read_trim("/proc/sys/kernel/osrelease"),
            "osImage": os_image(),
            "containerRuntimeVersion": runtime,
            "kubeletVersion": KUBELET_VERSION,
            "kubeProxyVersion": "",
            "operatingSystem": "linux",
            "architecture": arch(),
        },
    })
}

async fn renew_lease(shared: &Shared) {
    let api: Api<Lease> = Api::namespaced(shared.client.clone(), "kube-node-lease");
    let now = apimachinery::time::now_rfc3339_micros();
    let duration = shared.config.node_lease_duration_seconds;
    let result = match api.get_opt(&shared.node).await {
        Ok(Some(mut lease)) => {
            let mut spec = lease.spec.take().unwrap_or_default();
            spec.holder_identity = Some(shared.node.clone());
            spec.lease_duration_seconds = Some(duration as i32);
            spec.renew_time = serde_json::from_value(json!(now)).ok();
            lease.spec = Some(spec);
            api.replace(&shared.node, &PostParams::default(), &lease)
                .await
                .map(drop)
        }
        Ok(None) => {
            let lease: Lease = match serde_json::from_value(json!({
                "metadata": {"name": shared.node, "namespace": "kube-node-lease"},
                "spec": {"holderIdentity": shared.node, "leaseDurationSeconds": duration, "renewTime": now},
            })) {
                Ok(l) => l,
                Err(e) => return tracing::warn!(error = %e, "lease body"),
            };
            api.create(&PostParams::default(), &lease).await.map(drop)
        }
        Err(e) => Err(e),
    };
    if let Err(e) = result {
        tracing::info!(node_id = %shared.node, error = %e, "node lease not renewed; retrying");
    }
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
