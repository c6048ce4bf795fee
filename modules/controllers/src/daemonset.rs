//! The DaemonSet controller, as kube-controller-manager's: one pod per eligible node (its
//! labels match the template's node selector and required affinity, its `NoSchedule` and
//! `NoExecute` taints are tolerated, with the tolerations every daemon pod gets), made with a
//! required node affinity on the node's name so the scheduler binds it there; a node that
//! stops being eligible loses its pod, a new edge node gets one. Rolling updates replace pods
//! of an older template (`controller-revision-hash` label) at most `maxUnavailable` at a time,
//! the unavailable ones first; `OnDelete` waits for the user. Status carries the counts
//! `kubectl rollout status` reads.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DeleteParams, PostParams};
use reconciler::{Action, Cache, Stores};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::deployment::{scaled, template_hash};
use crate::events::Recorder;
use crate::informer::{self, controller_ref, key};
use crate::replicaset::{is_active, ready_since};
use crate::scheduler::fit::{self, NodeInfo};

/// Controller name.
pub const NAME: &str = "daemonset-controller";
const HASH_LABEL: &str = "controller-revision-hash";
/// A create not seen in the watch within this long may be made again.
const CREATE_TTL: Duration = Duration::from_secs(30);

/// The tolerations kube-controller-manager adds to every daemon pod.
fn daemon_tolerations(host_network: bool) -> Vec<serde_json::Value> {
    let mut t = vec![
        json!({"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"}),
        json!({"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute"}),
        json!({"key": "node.kubernetes.io/disk-pressure", "operator": "Exists", "effect": "NoSchedule"}),
        json!({"key": "node.kubernetes.io/memory-pressure", "operator": "Exists", "effect": "NoSchedule"}),
        json!({"key": "node.kubernetes.io/pid-pressure", "operator": "Exists", "effect": "NoSchedule"}),
        json!({"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"}),
    ];
    if host_network {
        t.push(json!({"key": "node.kubernetes.io/network-unavailable", "operator": "Exists", "effect": "NoSchedule"}));
    }
    t
}

/// Runs the controller until shutdown.
pub async fn run(stores: Stores, events: Recorder, shutdown: CancellationToken) {
    let client = stores.client().clone();
    let (tx, rx) = reconciler::queue();
    let sets = stores.keyed::<DaemonSet>(&tx);
    let pods = stores.owned_pods("DaemonSet", &tx);
    // A node change concerns every DaemonSet.
    let (queue, all) = (tx.clone(), sets.clone());
    let nodes = stores.cache::<Node>();
    nodes.subscribe(move |_| {
        for ds in all.all() {
            let _ = queue.send(key(&*ds));
        }
    });
    if !reconciler::wait_synced(&[&*sets, &*pods, &*nodes], &shutdown).await {
        return;
    }
    let ctx = Context {
        client,
        sets,
        pods,
        nodes,
        events,
        creating: Mutex::default(),
    };
    let ctx = Arc::new(ctx);
    reconciler::work(rx, "daemonset", shutdown, move |k| {
        let ctx = ctx.clone();
        async move { ctx.sync(&k).await.map(|()| Action::AwaitChange) }
    })
    .await;
}

struct Context {
    client: kube::Client,
    sets: Arc<Cache<DaemonSet>>,
    pods: Arc<Cache<Pod>>,
    nodes: Arc<Cache<Node>>,
    events: Recorder,
    /// Pods created and not seen yet, by (DaemonSet uid, node).
    creating: Mutex<HashMap<(String, String), Instant>>,
}

/// The node a daemon pod is for: its `nodeName`, else the node its required affinity names.
fn target_node(p: &Pod) -> Option<String> {
    let spec = p.spec.as_ref()?;
    if let Some(n) = spec.node_name.clone().filter(|n| !n.is_empty()) {
        return Some(n);
    }
    spec.affinity
        .as_ref()?
        .node_affinity
        .as_ref()?
        .required_during_scheduling_ignored_during_execution
        .as_ref()?
        .node_selector_terms
        .iter()
        .flat_map(|t| t.match_fields.iter().flatten())
        .find(|f| f.key == "metadata.name" && f.operator == "In")
        .and_then(|f| f.values.as_ref()?.first().cloned())
}

// === impl Context ===

impl Context {
    async fn sync(&self, k: &str) -> Result<(), kube::Error> {
        let Some(ds) = self.sets.get(k) else {
            return Ok(());
        };
        if ds.metadata.deletion_timestamp.is_some() {
            return Ok(());
        }
        let uid = ds.metadata.uid.clone().unwrap_or_default();
        let spec = ds.spec.clone().unwrap_or_default();
        let hash = template_hash(&spec.template);
        let template_pod = self.template_pod(&ds, &hash, None);
        let mut by_node: BTreeMap<String, Vec<Arc<Pod>>> = BTreeMap::new();
        for p in self.pods.owned_by(&uid) {
            if is_active(&p)
                && let Some(n) = target_node(&p)
            {
                by_node.entry(n).or_default().push(p);
            }
        }
        let nodes = self.nodes.all();
        let mut eligible = 0;
        let mut misscheduled = 0;
        let mut old_pods = Vec::new();
        let api: Api<Pod> = Api::namespaced(
            self.client.clone(),
            ds.metadata.namespace.as_deref().unwrap_or_default(),
        );
        let now = Instant::now();
        for node in &nodes {
            let name = node.metadata.name.clone().unwrap_or_default();
            let fits = should_run(&template_pod, node);
            let here = by_node.remove(&name).unwrap_or_default();
            if fits {
                eligible += 1;
                let key = (uid.clone(), name.clone());
                if here.is_empty() {
                    let recent = self
                        .creating
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .get(&key)
                        .is_some_and(|at| now.duration_since(*at) < CREATE_TTL);
                    if !recent {
                        self.create(&ds, &hash, &name).await?;
                        self.creating
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .insert(key, now);
                    }
                } else {
                    self.creating
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .remove(&key);
                    for extra in here.iter().skip(1) {
                        self.delete(&api, &ds, extra).await?;
                    }
                    let p = &here[0];
                    let current =
                        p.metadata.labels.as_ref().and_then(|l| l.get(HASH_LABEL)) == Some(&hash);
                    if !current {
                        old_pods.push(p.clone());
                    }
                }
            } else {
                misscheduled += usize::from(!here.is_empty());
                for p in &here {
                    self.delete(&api, &ds, p).await?;
                }
            }
        }
        // Pods for nodes that no longer exist.
        for (_, pods) in by_node {
            for p in &pods {
                self.delete(&api, &ds, p).await?;
            }
        }
        // Rolling update: at most maxUnavailable unavailable at a time, unavailable first.
        let strategy = spec.update_strategy.clone().unwrap_or_default();
        if strategy.type_.as_deref() != Some("OnDelete") && !old_pods.is_empty() {
            let max_unavailable = scaled(
                strategy
                    .rolling_update
                    .as_ref()
                    .and_then(|r| r.max_unavailable.as_ref()),
                eligible,
                "1",
                false,
            )
            .max(1);
            let unavailable = self
                .pods
                .owned_by(&uid)
                .into_iter()
                .filter(|p| !is_active(p) || ready_since(p).is_none())
                .count() as i32;
            let mut budget = (max_unavailable - unavailable).max(0);
            old_pods.sort_by_key(|p| ready_since(p).is_some());
            for p in old_pods {
                let not_ready = ready_since(&p).is_none();
                if not_ready || budget > 0 {
                    if !not_ready {
                        budget -= 1;
                    }
                    self.delete(&api, &ds, &p).await?;
                }
            }
        }
        self.update_status(&ds, &hash, eligible, misscheduled).await
    }

    /// The pod of `ds` for `node` (or, without a node, the template as the eligibility
    /// check sees it).
    fn template_pod(&self, ds: &DaemonSet, hash: &str, node: Option<&str>) -> Pod {
        let spec = ds.spec.clone().unwrap_or_default();
        let mut template = serde_json::to_value(&spec.template).unwrap_or_default();
        let mut pod_spec = template["spec"].take();
        let host_network = pod_spec["hostNetwork"].as_bool().unwrap_or(false);
        let mut tolerations = pod_spec["tolerations"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        for t in daemon_tolerations(host_network) {
            if !tolerations
                .iter()
                .any(|x| x["key"] == t["key"] && x["effect"] == t["effect"])
            {
                tolerations.push(t);
            }
        }
        pod_spec["tolerations"] = json!(tolerations);
        if let Some(node) = node {
            let term = json!({"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]});
            pod_spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] =
                json!({"nodeSelectorTerms": [term]});
        }
        let mut labels = template["metadata"]["labels"].take();
        if !labels.is_object() {
            labels = json!({});
        }
        labels[HASH_LABEL] = json!(hash);
        let name = ds.metadata.name.clone().unwrap_or_default();
        serde_json::from_value(json!({
            "metadata": {
                "generateName": format!("{name}-"),
                "namespace": ds.metadata.namespace,
                "labels": labels,
                "annotations": template["metadata"]["annotations"],
                "ownerReferences": [controller_ref(ds)],
            },
            "spec": pod_spec,
        }))
        .unwrap_or_default()
    }

    async fn create(&self, ds: &DaemonSet, hash: &str, node: &str) -> Result<(), kube::Error> {
        let pod = self.template_pod(ds, hash, Some(node));
        let api: Api<Pod> = Api::namespaced(
            self.client.clone(),
            ds.metadata.namespace.as_deref().unwrap_or_default(),
        );
        let created = api.create(&PostParams::default(), &pod).await?;
        let message = format!(
            "Created pod: {}",
            created.metadata.name.as_deref().unwrap_or_default()
        );
        self.events.normal(ds, "SuccessfulCreate", &message);
        Ok(())
    }

    async fn delete(&self, api: &Api<Pod>, ds: &DaemonSet, p: &Pod) -> Result<(), kube::Error> {
        let name = p.metadata.name.as_deref().unwrap_or_default();
        match api.delete(name, &DeleteParams::default()).await {
            Ok(_) => {
                self.events
                    .normal(ds, "SuccessfulDelete", &format!("Deleted pod: {name}"));
                Ok(())
            }
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
            Err(e) => Err(e),
        }
    }

    async fn update_status(
        &self,
        ds: &DaemonSet,
        hash: &str,
        desired: i32,
        misscheduled: usize,
    ) -> Result<(), kube::Error> {
        let uid = ds.metadata.uid.clone().unwrap_or_default();
        let pods: Vec<Arc<Pod>> = self
            .pods
            .owned_by(&uid)
            .into_iter()
            .filter(|p| is_active(p))
            .collect();
        let scheduled = pods
            .iter()
            .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some())
            .count();
        let ready = pods.iter().filter(|p| ready_since(p).is_some()).count();
        let updated = pods
            .iter()
            .filter(|p| {
                p.metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get(HASH_LABEL))
                    .map(String::as_str)
                    == Some(hash)
            })
            .count();
        let status = json!({
            "desiredNumberScheduled": desired,
            "currentNumberScheduled": scheduled,
            "numberMisscheduled": misscheduled,
            "numberReady": ready,
            "updatedNumberScheduled": updated,
            "numberAvailable": ready,
            "numberUnavailable": (desired as usize).saturating_sub(ready),
            "observedGeneration": ds.metadata.generation,
        });
        let held = serde_json::to_value(ds.status.clone().unwrap_or_default()).unwrap_or_default();
        let fields = [
            "desiredNumberScheduled",
            "currentNumberScheduled",
            "numberMisscheduled",
            "numberReady",
            "updatedNumberScheduled",
            "numberAvailable",
            "numberUnavailable",
            "observedGeneration",
        ];
        if fields
            .iter()
            .all(|f| held[f].as_i64().unwrap_or(0) == status[f].as_i64().unwrap_or(0))
        {
            return Ok(());
        }
        let api: Api<DaemonSet> = Api::namespaced(
            self.client.clone(),
            ds.metadata.namespace.as_deref().unwrap_or_default(),
        );
        informer::write_status(
            &api,
            ds.metadata.name.as_deref().unwrap_or_default(),
            status,
        )
        .await
    }
}

/// Whether a daemon pod should run on `node`: the selector and affinity match, the taints that
/// keep pods away are tolerated.
fn should_run(pod: &Pod, node: &Node) -> bool {
    let info = NodeInfo::of(node);
    if !fit::matches_selector(pod, &info) {
        return false;
    }
    let tolerations = pod
        .spec
        .as_ref()
        .and_then(|s| s.tolerations.clone())
        .unwrap_or_default();
    info.taints
        .iter()
        .filter(|t| matches!(t.effect.as_str(), "NoSchedule" | "NoExecute"))
        .all(|t| tolerations.iter().any(|tol| fit::tolerates(tol, t)))
}
