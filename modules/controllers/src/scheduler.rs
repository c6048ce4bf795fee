//! The scheduler: binds pods that name no node (and name this scheduler, or none) through the
//! `binding` subresource, as kube-scheduler does. It follows nodes and pods through the
//! shared caches ([`reconciler::Stores`]; pods as `slim_pod` keeps them) and keeps what each
//! node holds (requests, host ports, pods per owner) from the bound pods; a pod it decided on
//! is counted on its node at once ("assumed") so the next decisions see it before the bind's
//! watch event arrives, and binds run concurrently (`bindConcurrency`).
//! A pod that fits nowhere gets `PodScheduled=False` (reason `Unschedulable`, kube-scheduler's
//! message) and a `FailedScheduling` event, and is tried again when a node changes or every
//! 30 seconds. Decisions are pure ([`fit`]).

pub mod fit;

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt as _;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, Patch, PatchParams, PostParams};
use reconciler::{Cache, Change, Stores};
use serde_json::json;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::events::Recorder;
use fit::{Misfit, NodeInfo, PodNeeds};

/// The scheduler's name, as pods name it in `spec.schedulerName`.
pub const NAME: &str = "default-scheduler";
/// Unschedulable pods are tried again at least this often.
const RETRY: Duration = Duration::from_secs(30);

/// The scheduler's view of the cluster.
#[derive(Default)]
struct State {
    nodes: BTreeMap<String, NodeInfo>,
    /// Pods placed on a node (bound, or assumed while their bind runs), by uid.
    placed: HashMap<String, (String, PodNeeds)>,
    /// Pods waiting for a node, in arrival order.
    queue: VecDeque<String>,
    pending: HashMap<String, Arc<Pod>>,
    /// Pods that fit nowhere, with the message they were given.
    unschedulable: HashMap<String, String>,
    /// Binds running.
    binding: usize,
    /// A counter that rotates ties between equally good nodes.
    turn: usize,
}

enum Bound {
    Done,
    Failed { uid: String, retry: bool },
}

/// Runs the scheduler until shutdown or until a watch fails for good.
pub async fn run(
    stores: Stores,
    concurrency: usize,
    events: Recorder,
    shutdown: CancellationToken,
) -> Result<(), kube::Error> {
    let mut nodes = follow(&stores.cache::<Node>());
    let mut pods = follow(&stores.pods());
    let (done_tx, mut done_rx) = mpsc::unbounded_channel();
    let (unschedulable, reports) = mpsc::unbounded_channel();
    stores.spawn(report_all(
        stores.client().clone(),
        events.clone(),
        reports,
        concurrency.max(1),
        shutdown.clone(),
    ));
    let mut state = State::default();
    let mut retry = tokio::time::interval(RETRY);
    retry.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let concurrency = concurrency.max(1);
    loop {
        state.schedule(&stores, concurrency, &done_tx, &events, &unschedulable);
        tokio::select! {
            biased;
            _ = shutdown.cancelled() => return Ok(()),
            Some(done) = done_rx.recv() => state.on_bound(done),
            change = nodes.recv() => match change {
                Some(c) => state.on_node(c),
                None => return Ok(()),
            },
            change = pods.recv() => match change {
                Some(c) => {
                    state.on_pod(c);
                    // Take what else arrived before deciding, so a burst is one batch.
                    while let Ok(c) = pods.try_recv() {
                        state.on_pod(c);
                    }
                }
                None => return Ok(()),
            },
            _ = retry.tick() => state.requeue_unschedulable(),
        }
    }
}

/// The changes of a shared cache, from the objects it holds on, as a channel.
fn follow<K: kube::Resource + Send + Sync + 'static>(
    cache: &Cache<K>,
) -> mpsc::UnboundedReceiver<Change<K>> {
    let (tx, rx) = mpsc::unbounded_channel();
    cache.subscribe(move |c| {
        let _ = tx.send(c.clone());
    });
    rx
}

/// Whether `pod` waits for this scheduler.
fn waits(pod: &Pod) -> bool {
    let spec = pod.spec.as_ref();
    let unbound = spec
        .and_then(|s| s.node_name.as_deref())
        .is_none_or(str::is_empty);
    let ours = spec
        .and_then(|s| s.scheduler_name.as_deref())
        .is_none_or(|n| n.is_empty() || n == NAME);
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    unbound
        && ours
        && pod.metadata.deletion_timestamp.is_none()
        && !matches!(phase, Some("Succeeded" | "Failed"))
}

/// Whether `pod` holds resources on its node.
fn holds(pod: &Pod) -> Option<&str> {
    let node = pod
        .spec
        .as_ref()?
        .node_name
        .as_deref()
        .filter(|n| !n.is_empty())?;
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    (!matches!(phase, Some("Succeeded" | "Failed"))).then_some(node)
}

// === impl State ===

impl State {
    fn on_node(&mut self, change: Change<Node>) {
        let node = change.now;
        match change.deleted {
            false => {
                let mut info = NodeInfo::of(&node);
                // What is placed stays: recount it on the new view of the node.
                for (node_name, needs) in self.placed.values() {
                    if *node_name == info.name {
                        info.place(needs, 1);
                    }
                }
                self.nodes.insert(info.name.clone(), info);
                self.requeue_unschedulable();
            }
            true => {
                if let Some(name) = &node.metadata.name {
                    self.nodes.remove(name);
                }
            }
        }
    }

    /// A pod changed (a relist tells what changed and what went, so nothing is missed).
    fn on_pod(&mut self, change: Change<Pod>) {
        if change.deleted {
            let uid = change.now.metadata.uid.clone().unwrap_or_default();
            self.unplace(&uid);
            self.forget(&uid);
        } else {
            self.apply_pod(change.now);
        }
    }

    fn apply_pod(&mut self, pod: Arc<Pod>) {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        if let Some(node) = holds(&pod) {
            let node = node.to_string();
            if self.placed.get(&uid).is_none_or(|(n, _)| *n != node) {
                self.unplace(&uid);
                self.place(&uid, &node, PodNeeds::of(&pod));
            }
            self.forget(&uid);
            return;
        }
        if waits(&pod) {
            // Unbound: an assumption made for it stays while its bind runs.
            let new = !self.pending.contains_key(&uid);
            self.pending.insert(uid.clone(), pod);
            if new {
                self.queue.push_back(uid);
            }
            return;
        }
        // Finished, being deleted, or another scheduler's.
        self.unplace(&uid);
        self.forget(&uid);
    }

    fn place(&mut self, uid: &str, node: &str, needs: PodNeeds) {
        if let Some(info) = self.nodes.get_mut(node) {
            info.place(&needs, 1);
        }
        self.placed
            .insert(uid.to_string(), (node.to_string(), needs));
    }

    fn unplace(&mut self, uid: &str) {
        if let Some((node, needs)) = self.placed.remove(uid)
            && let Some(info) = self.nodes.get_mut(&node)
        {
            info.place(&needs, -1);
        }
    }

    fn forget(&mut self, uid: &str) {
        self.pending.remove(uid);
        self.unschedulable.remove(uid);
    }

    fn requeue_unschedulable(&mut self) {
        for uid in self.unschedulable.keys() {
            if self.pending.contains_key(uid) && !self.queue.contains(uid) {
                self.queue.push_back(uid.clone());
            }
        }
    }

    fn on_bound(&mut self, done: Bound) {
        self.binding = self.binding.saturating_sub(1);
        if let Bound::Failed { uid, retry } = done {
            self.unplace(&uid);
            if retry && self.pending.contains_key(&uid) {
                self.queue.push_back(uid);
            } else {
                self.forget(&uid);
            }
        }
    }

    /// Decides for queued pods while binds may start.
    fn schedule(
        &mut self,
        stores: &Stores,
        concurrency: usize,
        done: &mpsc::UnboundedSender<Bound>,
        events: &Recorder,
        unschedulable: &mpsc::UnboundedSender<(Arc<Pod>, String)>,
    ) {
        while self.binding < concurrency {
            let Some(uid) = self.queue.pop_front() else {
                return;
            };
            let Some(pod) = self.pending.get(&uid).cloned() else {
                continue;
            };
            if self.placed.contains_key(&uid) {
                // Assumed already; its bind is running.
                continue;
            }
            let needs = PodNeeds::of(&pod);
            match self.choose(&pod, &needs) {
                Ok(node) => {
                    self.unschedulable.remove(&uid);
                    self.place(&uid, &node, needs);
                    self.binding += 1;
                    let (client, done, events) =
                        (stores.client().clone(), done.clone(), events.clone());
                    stores.spawn(async move {
                        let result = bind(&client, &pod, &node).await;
                        let uid = pod.metadata.uid.clone().unwrap_or_default();
                        let outcome = match result {
                            Ok(()) => {
                                let ns = pod.metadata.namespace.as_deref().unwrap_or_default();
                                let name = pod.metadata.name.as_deref().unwrap_or_default();
                                let message =
                                    format!("Successfully assigned {ns}/{name} to {node}");
                                events.normal(&*pod, "Scheduled", &message);
                                Bound::Done
                            }
                            Err(kube::Error::Api(s)) if matches!(s.code, 404 | 409) => {
                                Bound::Failed { uid, retry: false }
                            }
                            Err(e) => {
                                tracing::info!(error = %e, "bind failed; trying again");
                                Bound::Failed { uid, retry: true }
                            }
                        };
                        let _ = done.send(outcome);
                    });
                }
                Err(message) => {
                    let told = self.unschedulable.get(&uid) == Some(&message);
                    self.unschedulable.insert(uid, message.clone());
                    if !told {
                        let _ = unschedulable.send((pod, message));
                    }
                }
            }
        }
    }

    /// The best node for `pod`, or kube-scheduler's message on why there is none.
    fn choose(&mut self, pod: &Pod, needs: &PodNeeds) -> Result<String, String> {
        let mut feasible = Vec::new();
        let mut misfits: Vec<Misfit> = Vec::new();
        for info in self.nodes.values() {
            match fit::filter(pod, needs, info) {
                Ok(()) => feasible.push(info),
                Err(m) => misfits.push(m),
            }
        }
        if feasible.is_empty() {
            return Err(fit::unschedulable_message(self.nodes.len(), &misfits));
        }
        let max_owned = needs.owner.as_ref().map_or(0, |o| {
            feasible
                .iter()
                .map(|n| n.owners.get(o).copied().unwrap_or(0))
                .max()
                .unwrap_or(0)
        });
        let scored: Vec<(i64, &str)> = feasible
            .iter()
            .map(|n| (fit::score(pod, needs, n, max_owned), n.name.as_str()))
            .collect();
        let best = scored.iter().map(|s| s.0).max().unwrap_or(0);
        let ties: Vec<&str> = scored.iter().filter(|s| s.0 == best).map(|s| s.1).collect();
        self.turn = self.turn.wrapping_add(1);
        Ok(ties[self.turn % ties.len()].to_string())
    }
}

async fn bind(client: &kube::Client, pod: &Pod, node: &str) -> Result<(), kube::Error> {
    let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
    let name = pod.metadata.name.as_deref().unwrap_or_default();
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    let binding = json!({
        "apiVersion": "v1", "kind": "Binding",
        "metadata": {"name": name, "namespace": ns, "uid": pod.metadata.uid},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node},
    });
    api.create_subresource::<_, serde_json::Value>(
        "binding",
        name,
        &PostParams::default(),
        &binding,
    )
    .await
    .map(|_| ())
}

/// Reports each pod sent on `reports` unschedulable (its condition and an event), at most
/// `concurrency` at once: a burst of pods that fit nowhere must not become a burst of
/// connections to the API.
async fn report_all(
    client: kube::Client,
    events: Recorder,
    reports: mpsc::UnboundedReceiver<(Arc<Pod>, String)>,
    concurrency: usize,
    shutdown: CancellationToken,
) {
    let reports =
        futures::stream::unfold(
            reports,
            |mut rx| async move { rx.recv().await.map(|r| (r, rx)) },
        );
    let all = reports.for_each_concurrent(concurrency, |(pod, message)| {
        let (client, events) = (&client, &events);
        async move {
            report_unschedulable(client, &pod, &message).await;
            events.warning(&*pod, "FailedScheduling", &message);
        }
    });
    tokio::select! {
        _ = shutdown.cancelled() => {}
        _ = all => {}
    }
}

async fn report_unschedulable(client: &kube::Client, pod: &Pod, message: &str) {
    let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
    let name = pod.metadata.name.as_deref().unwrap_or_default();
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    let condition = json!({
        "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
        "message": message, "lastProbeTime": null,
        "lastTransitionTime": apimachinery::time::now_rfc3339(),
    });
    let patch = Patch::Strategic(json!({"status": {"conditions": [condition]}}));
    if let Err(e) = api
        .patch_status(name, &PatchParams::default(), &patch)
        .await
    {
        tracing::debug!(error = %e, pod = name, "PodScheduled condition not written");
    }
}
