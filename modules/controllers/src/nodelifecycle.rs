//! Node lifecycle for the edge, as kube-controller-manager's node lifecycle controller with
//! eviction off: a node whose kubelet stopped renewing its Lease (and posting its status) for
//! `nodeMonitorGracePeriod` gets its conditions set to `Unknown` (reason `NodeStatusUnknown`)
//! and the `node.kubernetes.io/unreachable` taints (`NoSchedule` and `NoExecute`); a node whose
//! kubelet reports Ready=False gets the `node.kubernetes.io/not-ready` taints. The taints go
//! when the node is Ready again. Pods on an unreachable node are **not** evicted: an edge site
//! cut off for hours keeps its pods, and they are not started twice when it returns.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Taint};
use kube::api::{Api, Patch, PatchParams};
use reconciler::{Cache, Stores};
use serde_json::json;
use tokio_util::sync::CancellationToken;

/// How often nodes are looked at (kube-controller-manager's `--node-monitor-period`).
const MONITOR_PERIOD: Duration = Duration::from_secs(5);
const UNREACHABLE: &str = "node.kubernetes.io/unreachable";
const NOT_READY: &str = "node.kubernetes.io/not-ready";
const CONDITIONS: [&str; 4] = ["Ready", "MemoryPressure", "DiskPressure", "PIDPressure"];

/// Runs the controller until shutdown; `grace` is how long a silent node stays Ready.
pub async fn run(stores: Stores, grace: Duration, shutdown: CancellationToken) {
    let client = stores.client().clone();
    let nodes = stores.cache::<Node>();
    let leases = stores.cache::<Lease>();
    let mut tick = tokio::time::interval(MONITOR_PERIOD.min(grace));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // When each node was first seen by this controller: a node is given the grace period from
    // then, not from a heartbeat written before a cloudcore restart.
    let mut first_seen: HashMap<String, i64> = HashMap::new();
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tick.tick() => {}
        }
        if !(nodes.synced() && leases.synced()) {
            continue;
        }
        let now = apimachinery::time::now_unix();
        for node in nodes.all() {
            let name = node.metadata.name.clone().unwrap_or_default();
            let seen = *first_seen.entry(name.clone()).or_insert(now);
            if let Err(e) = check(&client, &node, &leases, grace, now, seen).await {
                tracing::info!(node = %name, error = %e, "node lifecycle not updated; retrying");
            }
        }
    }
}

/// The last sign of life of a node: its Lease's renewal or its Ready heartbeat.
fn heartbeat(node: &Node, leases: &Cache<Lease>) -> Option<i64> {
    let name = node.metadata.name.as_deref().unwrap_or_default();
    let lease = leases
        .get(&format!("kube-node-lease/{name}"))
        .and_then(|l| l.spec.clone()?.renew_time)
        .map(|t| t.0.as_second());
    let ready = ready(node)
        .and_then(|c| c.last_heartbeat_time)
        .map(|t| t.0.as_second());
    lease.max(ready)
}

fn ready(node: &Node) -> Option<k8s_openapi::api::core::v1::NodeCondition> {
    node.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Ready")
        .cloned()
}

async fn check(
    client: &kube::Client,
    node: &Arc<Node>,
    leases: &Cache<Lease>,
    grace: Duration,
    now: i64,
    first_seen: i64,
) -> Result<(), kube::Error> {
    let api: Api<Node> = Api::all(client.clone());
    let name = node.metadata.name.clone().unwrap_or_default();
    let last = heartbeat(node, leases).unwrap_or(0).max(first_seen);
    let silent = now - last > grace.as_secs() as i64;
    let status = ready(node).map(|c| c.status).unwrap_or_default();
    if silent && status != "Unknown" && ready(node).is_some() {
        let stamp = apimachinery::time::now_rfc3339();
        let held = node
            .status
            .as_ref()
            .and_then(|s| s.conditions.clone())
            .unwrap_or_default();
        let conditions: Vec<_> = held
            .iter()
            .map(|c| {
                let mut v = serde_json::to_value(c).unwrap_or_default();
                if CONDITIONS.contains(&c.type_.as_str()) {
                    v["status"] = json!("Unknown");
                    v["reason"] = json!("NodeStatusUnknown");
                    v["message"] = json!("Kubelet stopped posting node status.");
                    v["lastTransitionTime"] = json!(stamp);
                }
                v
            })
            .collect();
        tracing::info!(node = %name, "node stopped renewing its lease: Ready=Unknown, tainted unreachable; its pods stay");
        let patch = json!({"status": {"conditions": conditions}});
        api.patch_status(&name, &PatchParams::default(), &Patch::Strategic(&patch))
            .await?;
    }
    // The taints follow the Ready condition (the one just written, or the kubelet's).
    let status = if silent {
        "Unknown".to_string()
    } else {
        status
    };
    let wanted: BTreeSet<&str> = match status.as_str() {
        "Unknown" if ready(node).is_some() => [UNREACHABLE].into(),
        "False" => [NOT_READY].into(),
        _ => BTreeSet::new(),
    };
    let taints = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default();
    let ours = |t: &Taint| t.key == UNREACHABLE || t.key == NOT_READY;
    let mut next: Vec<Taint> = taints
        .iter()
        .filter(|t| !ours(t) || wanted.contains(t.key.as_str()))
        .cloned()
        .collect();
    for key in &wanted {
        for effect in ["NoSchedule", "NoExecute"] {
            if !next.iter().any(|t| t.key == *key && t.effect == effect) {
                next.push(
                    serde_json::from_value(json!({
                        "key": key, "effect": effect,
                        "timeAdded": if effect == "NoExecute" { Some(apimachinery::time::now_rfc3339()) } else { None },
                    }))
                    .map_err(kube::Error::SerdeError)?,
                );
            }
        }
    }
    if next != taints {
        let patch = json!({"spec": {"taints": next}});
        api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
    }
    Ok(())
}
