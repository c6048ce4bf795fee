//! The ReplicaSet controller, as kube-controller-manager's: each ReplicaSet keeps
//! `spec.replicas` active pods it controls (created from its template with `generateName`
//! `<name>-` and a controller reference; the surplus deleted, the least valuable first: not
//! scheduled, then pending, not ready, most restarted, newest). Expectations keep a sync from
//! acting again before the watch showed the creates and deletes of the previous one, so a slow
//! watch never makes extra pods, and a controller restart relists before it acts. Status:
//! replicas, fullyLabeledReplicas, readyReplicas, availableReplicas (ready for
//! `minReadySeconds`), observedGeneration.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt as _;
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DeleteParams, PostParams, Preconditions};
use reconciler::{Action, Cache, Stores};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::events::{self, Recorder};
use crate::informer::{self, controller_of, controller_ref, key};

/// Controller name (events' source).
pub const NAME: &str = "replicaset-controller";
/// The most pods created or deleted in one sync (kube-controller-manager's burstReplicas).
const BURST: usize = 500;
/// Creates in flight at once within a slow-start batch: client-go multiplexes a batch over one
/// HTTP/2 connection; the `kube` client opens a connection per request in flight, and a batch
/// of hundreds would meet the API server's per-client cap on connections being set up.
const CREATES_IN_FLIGHT: usize = 16;
/// Expectations not met within this long are given up (a lost watch event).
const EXPECTATION_TTL: Duration = Duration::from_secs(300);

/// Creates and deletes a sync waits to see.
#[derive(Default)]
struct Expected {
    adds: i64,
    deletes: HashSet<String>,
    since: Option<Instant>,
}

type Expectations = Arc<Mutex<HashMap<String, Expected>>>;

/// Runs the controller until shutdown.
pub async fn run(stores: Stores, events: Recorder, shutdown: CancellationToken) {
    let client = stores.client().clone();
    let (tx, rx) = reconciler::queue();
    let expectations: Expectations = Arc::default();
    let sets = stores.keyed::<ReplicaSet>(&tx);
    let (queue, seen) = (tx.clone(), expectations.clone());
    let pods = stores.pods();
    pods.subscribe(move |c| {
        for pod in [Some(&c.now), c.before.as_ref()].into_iter().flatten() {
            let Some(owner) = controller_of(&**pod).filter(|o| o.kind == "ReplicaSet") else {
                continue;
            };
            let mut exp = seen.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(e) = exp.get_mut(&owner.uid) {
                if c.deleted || pod.metadata.deletion_timestamp.is_some() {
                    e.deletes.remove(&key(&**pod));
                } else if c.before.is_none() {
                    e.adds -= 1;
                }
            }
            let ns = pod.metadata.namespace.as_deref().unwrap_or_default();
            let _ = queue.send(format!("{ns}/{}", owner.name));
        }
    });
    let ctx = Context {
        client,
        sets,
        pods,
        expectations,
        events,
    };
    // Nothing is decided before both caches hold a full list.
    if !reconciler::wait_synced(&[&*ctx.sets, &*ctx.pods], &shutdown).await {
        return;
    }
    let ctx = Arc::new(ctx);
    reconciler::work(rx, "replicaset", shutdown, move |k| {
        let ctx = ctx.clone();
        async move { ctx.sync(&k).await }
    })
    .await;
}

struct Context {
    client: kube::Client,
    sets: Arc<Cache<ReplicaSet>>,
    pods: Arc<Cache<Pod>>,
    expectations: Expectations,
    events: Recorder,
}

// === impl Context ===

impl Context {
    async fn sync(&self, k: &str) -> Result<Action, kube::Error> {
        let Some(rs) = self.sets.get(k) else {
            return Ok(Action::AwaitChange);
        };
        let uid = rs.metadata.uid.clone().unwrap_or_default();
        let ns = rs.metadata.namespace.clone().unwrap_or_default();
        let owned: Vec<Arc<Pod>> = self.pods.owned_by(&uid);
        let active: Vec<Arc<Pod>> = owned.iter().filter(|p| is_active(p)).cloned().collect();
        let spec = rs.spec.clone().unwrap_or_default();
        let satisfied = self.satisfied(&uid);
        if rs.metadata.deletion_timestamp.is_none() && satisfied {
            let want = spec.replicas.unwrap_or(1).max(0) as usize;
            if active.len() < want {
                self.create(&rs, (want - active.len()).min(BURST)).await?;
            } else if active.len() > want {
                self.delete(&rs, &active, (active.len() - want).min(BURST))
                    .await?;
            }
        }
        let next = self.update_status(&rs, &active, &ns).await?;
        if !satisfied {
            // Looked at again once the expectations would expire, should the events they wait
            // for never come.
            return Ok(next.sooner(Action::requeue(EXPECTATION_TTL)));
        }
        Ok(next)
    }

    fn satisfied(&self, uid: &str) -> bool {
        let mut exp = self.expectations.lock().unwrap_or_else(|e| e.into_inner());
        match exp.get(uid) {
            Some(e) if e.adds > 0 || !e.deletes.is_empty() => {
                let expired = e.since.is_some_and(|s| s.elapsed() > EXPECTATION_TTL);
                if expired {
                    exp.remove(uid);
                }
                expired
            }
            _ => true,
        }
    }

    async fn create(&self, rs: &ReplicaSet, count: usize) -> Result<(), kube::Error> {
        let uid = rs.metadata.uid.clone().unwrap_or_default();
        let ns = rs.metadata.namespace.clone().unwrap_or_default();
        let name = rs.metadata.name.clone().unwrap_or_default();
        let template = rs
            .spec
            .as_ref()
            .map(|s| s.template.clone().unwrap_or_default())
            .unwrap_or_default();
        let tm = template.metadata.unwrap_or_default();
        let pod = Pod {
            metadata: ObjectMeta {
                generate_name: Some(format!("{name}-")),
                namespace: Some(ns.clone()),
                labels: tm.labels,
                annotations: tm.annotations,
                finalizers: tm.finalizers,
                owner_references: Some(vec![controller_ref(rs)]),
                ..ObjectMeta::default()
            },
            spec: template.spec,
            status: None,
        };
        {
            let mut exp = self.expectations.lock().unwrap_or_else(|e| e.into_inner());
            let e = exp.entry(uid.clone()).or_default();
            e.adds += count as i64;
            e.since = Some(Instant::now());
        }
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &ns);
        let pp = PostParams::default();
        // Slow start, as kube-controller-manager: 1, 2, 4, ... at once, stopping at an error.
        let (mut done, mut batch) = (0, 1);
        while done < count {
            let n = batch.min(count - done);
            let results: Vec<_> = futures::stream::iter(0..n)
                .map(|_| api.create(&pp, &pod))
                .buffer_unordered(CREATES_IN_FLIGHT)
                .collect()
                .await;
            let (mut failed, mut failures) = (None, 0);
            for r in results {
                match r {
                    Ok(p) => {
                        let created = p.metadata.name.unwrap_or_default();
                        self.events.normal(
                            rs,
                            "SuccessfulCreate",
                            &format!("Created pod: {created}"),
                        );
                    }
                    Err(e) => {
                        failures += 1;
                        failed = Some(e);
                    }
                }
            }
            if let Some(e) = failed {
                // What was not created will not be seen: the batches not tried and the
                // failures of this one (the sync is retried and creates them then).
                let skipped = (count - done - n) as i64 + failures;
                let mut exp = self.expectations.lock().unwrap_or_else(|e| e.into_inner());
                if let Some(x) = exp.get_mut(&uid) {
                    x.adds -= skipped;
                }
                self.events.warning(
                    rs,
                    "FailedCreate",
                    &format!("Error creating: {}", events::error_message(&e)),
                );
                return Err(e);
            }
            done += n;
            batch *= 2;
        }
        Ok(())
    }

    async fn delete(
        &self,
        rs: &ReplicaSet,
        active: &[Arc<Pod>],
        count: usize,
    ) -> Result<(), kube::Error> {
        let uid = rs.metadata.uid.clone().unwrap_or_default();
        let mut victims: Vec<&Arc<Pod>> = active.iter().collect();
        victims.sort_by_key(|p| deletion_rank(p));
        let victims = &victims[..count];
        {
            let mut exp = self.expectations.lock().unwrap_or_else(|e| e.into_inner());
            let e = exp.entry(uid).or_default();
            e.deletes.extend(victims.iter().map(|p| key(&***p)));
            e.since = Some(Instant::now());
        }
        for p in victims {
            let ns = p.metadata.namespace.as_deref().unwrap_or_default();
            let name = p.metadata.name.as_deref().unwrap_or_default();
            let api: Api<Pod> = Api::namespaced(self.client.clone(), ns);
            let params = DeleteParams {
                preconditions: Some(Preconditions {
                    uid: p.metadata.uid.clone(),
                    resource_version: None,
                }),
                ..DeleteParams::default()
            };
            match api.delete(name, &params).await {
                Ok(_) => {
                    self.events
                        .normal(rs, "SuccessfulDelete", &format!("Deleted pod: {name}"))
                }
                Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {
                    let mut exp = self.expectations.lock().unwrap_or_else(|e| e.into_inner());
                    if let Some(e) = exp.get_mut(rs.metadata.uid.as_deref().unwrap_or_default()) {
                        e.deletes.remove(&key(&***p));
                    }
                }
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    async fn update_status(
        &self,
        rs: &ReplicaSet,
        active: &[Arc<Pod>],
        ns: &str,
    ) -> Result<Action, kube::Error> {
        let spec = rs.spec.clone().unwrap_or_default();
        let template_labels = spec
            .template
            .as_ref()
            .and_then(|t| t.metadata.as_ref())
            .and_then(|m| m.labels.clone())
            .unwrap_or_default();
        let min_ready = i64::from(spec.min_ready_seconds.unwrap_or(0));
        let now = apimachinery::time::now_unix();
        let fully_labeled = active
            .iter()
            .filter(|p| {
                let labels = p.metadata.labels.clone().unwrap_or_default();
                template_labels
                    .iter()
                    .all(|(k, v)| labels.get(k) == Some(v))
            })
            .count();
        let ready: Vec<i64> = active.iter().filter_map(|p| ready_since(p)).collect();
        let available = ready
            .iter()
            .filter(|since| now - **since >= min_ready)
            .count();
        let status = json!({
            "replicas": active.len(),
            "fullyLabeledReplicas": fully_labeled,
            "readyReplicas": ready.len(),
            "availableReplicas": available,
            "observedGeneration": rs.metadata.generation,
        });
        let held = serde_json::to_value(rs.status.clone().unwrap_or_default()).unwrap_or_default();
        let unchanged = [
            "replicas",
            "fullyLabeledReplicas",
            "readyReplicas",
            "availableReplicas",
            "observedGeneration",
        ]
        .iter()
        .all(|f| held[f].as_i64().unwrap_or(0) == status[f].as_i64().unwrap_or(0));
        // Checked again when the next pod becomes available.
        let next = if min_ready > 0 && available < ready.len() {
            let wait = ready
                .iter()
                .map(|since| min_ready - (now - since))
                .filter(|w| *w > 0)
                .min()
                .unwrap_or(1);
            Action::requeue(Duration::from_secs(wait as u64))
        } else {
            Action::AwaitChange
        };
        if unchanged {
            return Ok(next);
        }
        let api: Api<ReplicaSet> = Api::namespaced(self.client.clone(), ns);
        let name = rs.metadata.name.as_deref().unwrap_or_default();
        informer::write_status(&api, name, status).await?;
        Ok(next)
    }
}

/// A pod counts: not being deleted, not finished.
pub fn is_active(p: &Pod) -> bool {
    let phase = p.status.as_ref().and_then(|s| s.phase.as_deref());
    p.metadata.deletion_timestamp.is_none() && !matches!(phase, Some("Succeeded" | "Failed"))
}

/// Since when (Unix seconds) the pod is Ready, if it is.
pub fn ready_since(p: &Pod) -> Option<i64> {
    let c = p
        .status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Ready" && c.status == "True")?;
    Some(
        c.last_transition_time
            .as_ref()
            .map(|t| t.0.as_second())
            .unwrap_or(0),
    )
}

/// The order pods are deleted in, lowest first: not scheduled, pending, not ready, more
/// restarts, newer.
fn deletion_rank(p: &Pod) -> (u8, u8, u8, std::cmp::Reverse<i32>, std::cmp::Reverse<i64>) {
    let bound = p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some();
    let phase = match p.status.as_ref().and_then(|s| s.phase.as_deref()) {
        Some("Pending") | None => 0,
        Some("Running") => 2,
        _ => 1,
    };
    let restarts = p
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .map_or(0, |cs| cs.iter().map(|c| c.restart_count).sum());
    let created = p
        .metadata
        .creation_timestamp
        .as_ref()
        .map_or(0, |t| t.0.as_second());
    (
        u8::from(bound),
        phase,
        u8::from(ready_since(p).is_some()),
        std::cmp::Reverse(restarts),
        std::cmp::Reverse(created),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str, node: Option<&str>, phase: &str, ready: bool, restarts: i32) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": name, "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"nodeName": node, "containers": []},
            "status": {"phase": phase,
                       "conditions": [{"type": "Ready", "status": if ready {"True"} else {"False"}}],
                       "containerStatuses": [{"name": "c", "image": "i", "imageID": "", "ready": ready, "restartCount": restarts}]},
        }))
        .unwrap()
    }

    #[test]
    fn the_least_valuable_pods_are_deleted_first() {
        let pods = [
            pod("running-ready", Some("n"), "Running", true, 0),
            pod("unscheduled", None, "Pending", false, 0),
            pod("running-unready", Some("n"), "Running", false, 0),
            pod("crashy", Some("n"), "Running", false, 5),
            pod("pending", Some("n"), "Pending", false, 0),
        ];
        let mut order: Vec<&Pod> = pods.iter().collect();
        order.sort_by_key(|p| deletion_rank(p));
        let names: Vec<&str> = order
            .iter()
            .map(|p| p.metadata.name.as_deref().unwrap())
            .collect();
        assert_eq!(
            names,
            [
                "unscheduled",
                "pending",
                "crashy",
                "running-unready",
                "running-ready"
            ]
        );
    }
}
