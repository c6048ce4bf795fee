//! The StatefulSet controller, as kube-controller-manager's: pods with stable names
//! `<set>-<ordinal>` (labels `statefulset.kubernetes.io/pod-name`, `apps.kubernetes.io/pod-index`
//! and `controller-revision-hash`, hostname the pod's name, subdomain the set's service). With
//! `OrderedReady` (the default) an ordinal is created only once every lower one is Running and
//! Ready, and scaling down removes the highest ordinal first, one at a time; `Parallel` creates
//! and deletes them all at once. The template's revisions are ControllerRevisions
//! ([`crate::history`]): `RollingUpdate` replaces the pods of an older revision from the
//! highest ordinal down to `partition`, one at a time, each once the one before is Ready;
//! `OnDelete` waits for the user. A pod deleted (or failed) is made again under its name, from
//! the current revision below the partition and the update revision above. A set with
//! `volumeClaimTemplates` gets no pods: there is no storage yet, and a `FailedCreate` warning
//! says so. Status: the replica counts, revisions and `collisionCount` `kubectl rollout status`
//! reads.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::{ControllerRevision, StatefulSet};
use k8s_openapi::api::core::v1::{Pod, PodTemplateSpec};
use kube::api::{Api, DeleteParams, ObjectMeta, PostParams, Preconditions};
use reconciler::{Action, Cache, Queue, Stores};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::events::{self, Recorder};
use crate::history::{self, HASH_LABEL};
use crate::informer::{self, controller_ref, key};
use crate::replicaset::ready_since;

/// Controller name.
pub const NAME: &str = "statefulset-controller";
const POD_NAME_LABEL: &str = "statefulset.kubernetes.io/pod-name";
const POD_INDEX_LABEL: &str = "apps.kubernetes.io/pod-index";
/// A delete not yet seen in the watch counts as terminating for this long.
const DELETE_TTL: Duration = Duration::from_secs(30);

/// Runs the controller until shutdown.
pub async fn run(stores: Stores, events: Recorder, shutdown: CancellationToken) {
    let client = stores.client().clone();
    let (tx, rx) = reconciler::queue();
    let sets = stores.keyed::<StatefulSet>(&tx);
    let pods = stores.owned_pods("StatefulSet", &tx);
    let revisions = stores.cache::<ControllerRevision>();
    revisions.owners("StatefulSet", &tx);
    if !reconciler::wait_synced(&[&*sets, &*pods, &*revisions], &shutdown).await {
        return;
    }
    let ctx = Arc::new(Context {
        client,
        sets,
        pods,
        revisions,
        events,
        requeue: tx.clone(),
        deleting: Mutex::default(),
        refused: Mutex::default(),
    });
    reconciler::work(rx, "statefulset", shutdown, move |k| {
        let ctx = ctx.clone();
        async move { ctx.sync(&k).await.map(|()| Action::AwaitChange) }
    })
    .await;
}

struct Context {
    client: kube::Client,
    sets: Arc<Cache<StatefulSet>>,
    pods: Arc<Cache<Pod>>,
    revisions: Arc<Cache<ControllerRevision>>,
    events: Recorder,
    requeue: Queue,
    /// Pods deleted and not yet seen terminating, by uid.
    deleting: Mutex<HashMap<String, Instant>>,
    /// The generation of each set (by uid) already refused for its claim templates.
    refused: Mutex<HashMap<String, i64>>,
}

/// A set's pods as one sync sees them.
struct Pods {
    /// The ordinal the set starts at (`spec.ordinals.start`).
    start: i32,
    /// The pod of each wanted ordinal, from `start` on.
    replicas: Vec<Option<Arc<Pod>>>,
    /// Pods of ordinals beyond the wanted ones, lowest first.
    condemned: Vec<Arc<Pod>>,
}

/// The two revisions a sync works between.
struct Revisions {
    current: ControllerRevision,
    update: ControllerRevision,
}

// === impl Context ===

impl Context {
    async fn sync(&self, k: &str) -> Result<(), kube::Error> {
        let Some(set) = self.sets.get(k) else {
            return Ok(());
        };
        if set.metadata.deletion_timestamp.is_some() {
            return Ok(());
        }
        let spec = set.spec.clone().unwrap_or_default();
        if spec
            .volume_claim_templates
            .as_ref()
            .is_some_and(|v| !v.is_empty())
        {
            return self.refuse(&set).await;
        }
        let uid = set.metadata.uid.clone().unwrap_or_default();
        let owned_revisions = history::owned(&self.revisions, &uid);
        let (revisions, collisions) = self.revisions(&set, &owned_revisions).await?;
        let owned: Vec<Arc<Pod>> = self.pods.owned_by(&uid);
        let pods = Pods::of(&set, &owned);
        self.step(&set, &pods, &revisions).await?;
        self.update_status(&set, &owned, &revisions, collisions)
            .await?;
        let mut live: HashSet<String> = owned
            .iter()
            .filter_map(|p| p.metadata.labels.as_ref()?.get(HASH_LABEL).cloned())
            .collect();
        live.extend([&revisions.current, &revisions.update].map(|r| name_of(r).to_string()));
        let limit = spec.revision_history_limit.unwrap_or(10).max(0) as usize;
        history::truncate(&self.client, &owned_revisions, &live, limit).await
    }

    /// The update revision (the current template's, made if new) and the current one (the
    /// status names it; the update revision when it names none that exists).
    async fn revisions(
        &self,
        set: &StatefulSet,
        owned: &[Arc<ControllerRevision>],
    ) -> Result<(Revisions, i32), kube::Error> {
        let spec = set.spec.clone().unwrap_or_default();
        let status = set.status.clone().unwrap_or_default();
        let labels = spec
            .template
            .metadata
            .as_ref()
            .and_then(|m| m.labels.clone())
            .unwrap_or_default();
        let data = history::template_patch(&spec.template);
        let collisions = status.collision_count.unwrap_or(0);
        let (update, collisions) =
            history::ensure(&self.client, set, owned, data, labels, collisions).await?;
        let current = status
            .current_revision
            .as_deref()
            .filter(|c| *c != name_of(&update))
            .and_then(|c| owned.iter().find(|r| name_of(r) == c))
            .map(|r| (**r).clone())
            .unwrap_or_else(|| update.clone());
        Ok((Revisions { current, update }, collisions))
    }

    /// One pass as kube-controller-manager's: missing and failed replicas first (in ordinal
    /// order), then the condemned (highest first), then the rolling update; with
    /// `OrderedReady` it stops at the first pod not yet Running and Ready.
    async fn step(
        &self,
        set: &StatefulSet,
        pods: &Pods,
        revisions: &Revisions,
    ) -> Result<(), kube::Error> {
        let spec = set.spec.clone().unwrap_or_default();
        let ordered = spec.pod_management_policy.as_deref() != Some("Parallel");
        let min_ready = i64::from(spec.min_ready_seconds.unwrap_or(0));
        let now = apimachinery::time::now_unix();
        for (i, slot) in pods.replicas.iter().enumerate() {
            let ordinal = pods.start + i as i32;
            let Some(p) = slot else {
                let from = if self.below_partition(set, ordinal) {
                    &revisions.current
                } else {
                    &revisions.update
                };
                self.create(set, ordinal, from).await?;
                if ordered {
                    return Ok(());
                }
                continue;
            };
            if finished(p) && !self.terminating(p) {
                self.delete(set, p).await?;
                if ordered {
                    return Ok(());
                }
                continue;
            }
            if ordered && (!running_and_ready(p) || self.terminating(p)) {
                return Ok(());
            }
            if ordered && let Some(wait) = until_available(p, min_ready, now) {
                self.requeue
                    .later(&key(set), Duration::from_secs(wait as u64));
                return Ok(());
            }
        }
        let first_unhealthy = pods
            .replicas
            .iter()
            .flatten()
            .chain(&pods.condemned)
            .find(|p| !running_and_ready(p) || self.terminating(p))
            .and_then(|p| p.metadata.uid.clone());
        for p in pods.condemned.iter().rev() {
            if self.terminating(p) {
                if ordered {
                    return Ok(());
                }
                continue;
            }
            if ordered && !running_and_ready(p) && p.metadata.uid != first_unhealthy {
                return Ok(());
            }
            self.delete(set, p).await?;
            if ordered {
                return Ok(());
            }
        }
        self.roll(set, pods, revisions, min_ready, now).await
    }

    /// The rolling update: from the highest ordinal down to the partition, the first pod of
    /// another revision is deleted (made again by a later pass), waiting on any not healthy.
    async fn roll(
        &self,
        set: &StatefulSet,
        pods: &Pods,
        revisions: &Revisions,
        min_ready: i64,
        now: i64,
    ) -> Result<(), kube::Error> {
        let strategy = set
            .spec
            .as_ref()
            .and_then(|s| s.update_strategy.clone())
            .unwrap_or_default();
        if strategy.type_.as_deref() == Some("OnDelete") {
            return Ok(());
        }
        let partition = strategy
            .rolling_update
            .and_then(|r| r.partition)
            .unwrap_or(0)
            .max(0) as usize;
        let update = name_of(&revisions.update);
        for slot in pods.replicas.iter().skip(partition).rev() {
            let Some(p) = slot else {
                return Ok(());
            };
            if revision_of(p) != Some(update) && !self.terminating(p) {
                return self.delete(set, p).await;
            }
            let healthy = running_and_ready(p)
                && !self.terminating(p)
                && until_available(p, min_ready, now).is_none();
            if !healthy {
                return Ok(());
            }
        }
        Ok(())
    }

    /// Whether a new pod at `ordinal` is made from the current revision: below the partition of
    /// a rolling update.
    fn below_partition(&self, set: &StatefulSet, ordinal: i32) -> bool {
        let spec = set.spec.clone().unwrap_or_default();
        let start = spec.ordinals.and_then(|o| o.start).unwrap_or(0);
        let strategy = spec.update_strategy.unwrap_or_default();
        if strategy.type_.as_deref() == Some("OnDelete") {
            return false;
        }
        let partition = match strategy.rolling_update {
            Some(r) => r.partition.unwrap_or(0),
            None => set
                .status
                .as_ref()
                .and_then(|s| s.current_replicas)
                .unwrap_or(0),
        };
        ordinal < start + partition
    }

    /// Whether a pod is on its way out (marked, or deleted by this controller lately).
    fn terminating(&self, p: &Pod) -> bool {
        if p.metadata.deletion_timestamp.is_some() {
            return true;
        }
        let uid = p.metadata.uid.clone().unwrap_or_default();
        let mut deleting = self.deleting.lock().unwrap_or_else(|e| e.into_inner());
        deleting.retain(|_, at| at.elapsed() < DELETE_TTL);
        deleting.contains_key(&uid)
    }

    async fn create(
        &self,
        set: &StatefulSet,
        ordinal: i32,
        revision: &ControllerRevision,
    ) -> Result<(), kube::Error> {
        let template = history::template_of(revision)
            .unwrap_or_else(|| set.spec.clone().unwrap_or_default().template);
        let pod = pod_for(set, ordinal, name_of(revision), template);
        let pod_name = pod.metadata.name.clone().unwrap_or_default();
        let set_name = set.metadata.name.as_deref().unwrap_or_default();
        let api: Api<Pod> = Api::namespaced(
            self.client.clone(),
            set.metadata.namespace.as_deref().unwrap_or_default(),
        );
        match api.create(&PostParams::default(), &pod).await {
            Ok(_) => {
                let message = format!("create Pod {pod_name} in StatefulSet {set_name} successful");
                self.events.normal(set, "SuccessfulCreate", &message);
                Ok(())
            }
            // Made by a pass the watch has not shown yet, or the old one not gone yet: its
            // watch event brings the set back.
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
            Err(e) => {
                let message = format!(
                    "create Pod {pod_name} in StatefulSet {set_name} failed error: {}",
                    events::error_message(&e)
                );
                self.events.warning(set, "FailedCreate", &message);
                Err(e)
            }
        }
    }

    async fn delete(&self, set: &StatefulSet, p: &Pod) -> Result<(), kube::Error> {
        let pod_name = p.metadata.name.as_deref().unwrap_or_default();
        let set_name = set.metadata.name.as_deref().unwrap_or_default();
        let api: Api<Pod> = Api::namespaced(
            self.client.clone(),
            p.metadata.namespace.as_deref().unwrap_or_default(),
        );
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                uid: p.metadata.uid.clone(),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        self.deleting
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(p.metadata.uid.clone().unwrap_or_default(), Instant::now());
        match api.delete(pod_name, &params).await {
            Ok(_) => {
                let message = format!("delete Pod {pod_name} in StatefulSet {set_name} successful");
                self.events.normal(set, "SuccessfulDelete", &message);
                Ok(())
            }
            Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => Ok(()),
            Err(e) => {
                let message = format!(
                    "delete Pod {pod_name} in StatefulSet {set_name} failed error: {}",
                    events::error_message(&e)
                );
                self.events.warning(set, "FailedDelete", &message);
                Err(e)
            }
        }
    }

    /// A set with claim templates: a warning once per generation, no pods.
    async fn refuse(&self, set: &StatefulSet) -> Result<(), kube::Error> {
        let uid = set.metadata.uid.clone().unwrap_or_default();
        let generation = set.metadata.generation.unwrap_or(0);
        let before = self
            .refused
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(uid, generation);
        if before != Some(generation) {
            let name = set.metadata.name.as_deref().unwrap_or_default();
            let start = set
                .spec
                .as_ref()
                .and_then(|s| s.ordinals.as_ref())
                .and_then(|o| o.start)
                .unwrap_or(0);
            let message = format!(
                "create Pod {name}-{start} in StatefulSet {name} failed error: \
                 volumeClaimTemplates are not supported yet: this control plane has no storage \
                 to provision the claims"
            );
            self.events.warning(set, "FailedCreate", &message);
        }
        let observed = set.status.as_ref().and_then(|s| s.observed_generation);
        if observed == Some(generation) {
            return Ok(());
        }
        let api: Api<StatefulSet> = Api::namespaced(
            self.client.clone(),
            set.metadata.namespace.as_deref().unwrap_or_default(),
        );
        let status = json!({"observedGeneration": generation, "replicas": 0});
        let name = set.metadata.name.as_deref().unwrap_or_default();
        informer::write_status(&api, name, status).await
    }

    async fn update_status(
        &self,
        set: &StatefulSet,
        owned: &[Arc<Pod>],
        revisions: &Revisions,
        collisions: i32,
    ) -> Result<(), kube::Error> {
        let spec = set.spec.clone().unwrap_or_default();
        let want = spec.replicas.unwrap_or(1);
        let min_ready = i64::from(spec.min_ready_seconds.unwrap_or(0));
        let now = apimachinery::time::now_unix();
        let (current, update) = (name_of(&revisions.current), name_of(&revisions.update));
        let mut counts = Counts::default();
        for p in owned {
            let created = p.status.as_ref().and_then(|s| s.phase.as_ref()).is_some();
            counts.replicas += i32::from(created);
            if running_and_ready(p) {
                counts.ready += 1;
                counts.available += i32::from(until_available(p, min_ready, now).is_none());
            }
            if created && p.metadata.deletion_timestamp.is_none() {
                counts.current += i32::from(revision_of(p) == Some(current));
                counts.updated += i32::from(revision_of(p) == Some(update));
            }
        }
        let rolling = spec
            .update_strategy
            .as_ref()
            .and_then(|s| s.type_.as_deref())
            != Some("OnDelete");
        let mut current_revision = current;
        if rolling && counts.updated == want && counts.ready == want && counts.replicas == want {
            current_revision = update;
            counts.current = counts.updated;
        }
        let status = json!({
            "observedGeneration": set.metadata.generation,
            "replicas": counts.replicas,
            "readyReplicas": counts.ready,
            "currentReplicas": counts.current,
            "updatedReplicas": counts.updated,
            "availableReplicas": counts.available,
            "currentRevision": current_revision,
            "updateRevision": update,
            "collisionCount": collisions,
        });
        let held = serde_json::to_value(set.status.clone().unwrap_or_default()).unwrap_or_default();
        let unchanged = status
            .as_object()
            .into_iter()
            .flatten()
            .all(|(k, v)| held[k] == *v || (v == &json!(0) && held[k].is_null()));
        if unchanged {
            return Ok(());
        }
        let api: Api<StatefulSet> = Api::namespaced(
            self.client.clone(),
            set.metadata.namespace.as_deref().unwrap_or_default(),
        );
        let name = set.metadata.name.as_deref().unwrap_or_default();
        let version = set.metadata.resource_version.as_deref();
        informer::write_status_over(&api, name, version, status).await
    }
}

#[derive(Default)]
struct Counts {
    replicas: i32,
    ready: i32,
    available: i32,
    current: i32,
    updated: i32,
}

// === impl Pods ===

impl Pods {
    /// Sorts `owned` into the wanted ordinals and the condemned; pods whose name is not the
    /// set's name and an ordinal are left alone.
    fn of(set: &StatefulSet, owned: &[Arc<Pod>]) -> Pods {
        let spec = set.spec.clone().unwrap_or_default();
        let start = spec.ordinals.and_then(|o| o.start).unwrap_or(0).max(0);
        let want = spec.replicas.unwrap_or(1).max(0);
        let set_name = set.metadata.name.as_deref().unwrap_or_default();
        let mut replicas = vec![None; want as usize];
        let mut condemned: BTreeMap<i32, Arc<Pod>> = BTreeMap::new();
        for p in owned {
            let Some(ordinal) = ordinal_of(set_name, p) else {
                continue;
            };
            if (start..start + want).contains(&ordinal) {
                replicas[(ordinal - start) as usize] = Some(p.clone());
            } else {
                condemned.insert(ordinal, p.clone());
            }
        }
        Pods {
            start,
            replicas,
            condemned: condemned.into_values().collect(),
        }
    }
}

// === helpers ===

fn name_of(r: &ControllerRevision) -> &str {
    r.metadata.name.as_deref().unwrap_or_default()
}

/// The ordinal in a pod's name `<set>-<ordinal>`.
fn ordinal_of(set_name: &str, p: &Pod) -> Option<i32> {
    let name = p.metadata.name.as_deref()?;
    let digits = name.strip_prefix(set_name)?.strip_prefix('-')?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

fn revision_of(p: &Pod) -> Option<&str> {
    p.metadata
        .labels
        .as_ref()?
        .get(HASH_LABEL)
        .map(String::as_str)
}

fn finished(p: &Pod) -> bool {
    let phase = p.status.as_ref().and_then(|s| s.phase.as_deref());
    matches!(phase, Some("Succeeded" | "Failed"))
}

fn running_and_ready(p: &Pod) -> bool {
    let phase = p.status.as_ref().and_then(|s| s.phase.as_deref());
    phase == Some("Running") && ready_since(p).is_some()
}

/// Seconds until a ready pod has been ready for `min_ready` seconds; `None` once it has.
fn until_available(p: &Pod, min_ready: i64, now: i64) -> Option<i64> {
    if min_ready <= 0 {
        return None;
    }
    let since = ready_since(p)?;
    let left = since + min_ready - now;
    (left > 0).then_some(left)
}

/// The pod of `set` at `ordinal` from `template` (a revision's), labelled with `revision`.
fn pod_for(set: &StatefulSet, ordinal: i32, revision: &str, template: PodTemplateSpec) -> Pod {
    let set_name = set.metadata.name.clone().unwrap_or_default();
    let name = format!("{set_name}-{ordinal}");
    let tm = template.metadata.unwrap_or_default();
    let mut labels = tm.labels.unwrap_or_default();
    labels.insert(HASH_LABEL.into(), revision.into());
    labels.insert(POD_NAME_LABEL.into(), name.clone());
    labels.insert(POD_INDEX_LABEL.into(), ordinal.to_string());
    let mut spec = template.spec.unwrap_or_default();
    spec.hostname = Some(name.clone());
    spec.subdomain = set
        .spec
        .as_ref()
        .and_then(|s| s.service_name.clone())
        .filter(|s| !s.is_empty());
    Pod {
        metadata: ObjectMeta {
            name: Some(name),
            namespace: set.metadata.namespace.clone(),
            labels: Some(labels),
            annotations: tm.annotations,
            finalizers: tm.finalizers,
            owner_references: Some(vec![controller_ref(set)]),
            ..ObjectMeta::default()
        },
        spec: Some(spec),
        status: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(replicas: i32) -> StatefulSet {
        serde_json::from_value(json!({
            "metadata": {"name": "web", "namespace": "default", "uid": "u1"},
            "spec": {"replicas": replicas, "serviceName": "nginx",
                     "selector": {"matchLabels": {"app": "web"}},
                     "template": {"metadata": {"labels": {"app": "web"}},
                                  "spec": {"containers": [{"name": "c", "image": "web:1"}]}}},
        }))
        .unwrap()
    }

    fn pod(name: &str) -> Arc<Pod> {
        Arc::new(serde_json::from_value(json!({"metadata": {"name": name}})).unwrap())
    }

    #[test]
    fn pods_are_sorted_into_ordinals_and_the_condemned() {
        let owned = [
            pod("web-4"),
            pod("web-0"),
            pod("web-2"),
            pod("web-3"),
            pod("web-x"),
            pod("webby-1"),
        ];
        let pods = Pods::of(&set(3), &owned);
        let names = |ps: Vec<&Arc<Pod>>| -> Vec<String> {
            ps.iter()
                .map(|p| p.metadata.name.clone().unwrap())
                .collect()
        };
        assert_eq!(pods.replicas.len(), 3);
        assert!(pods.replicas[1].is_none());
        assert_eq!(
            names(pods.replicas.iter().flatten().collect()),
            ["web-0", "web-2"]
        );
        assert_eq!(names(pods.condemned.iter().collect()), ["web-3", "web-4"]);
    }

    #[test]
    fn a_pod_carries_its_identity_and_revision() {
        let s = set(1);
        let template = s.spec.clone().unwrap().template;
        let p = pod_for(&s, 2, "web-abc", template);
        let labels = p.metadata.labels.clone().unwrap();
        assert_eq!(p.metadata.name.as_deref(), Some("web-2"));
        assert_eq!(labels[HASH_LABEL], "web-abc");
        assert_eq!(labels[POD_NAME_LABEL], "web-2");
        assert_eq!(labels[POD_INDEX_LABEL], "2");
        assert_eq!(labels["app"], "web");
        let spec = p.spec.unwrap();
        assert_eq!(spec.hostname.as_deref(), Some("web-2"));
        assert_eq!(spec.subdomain.as_deref(), Some("nginx"));
        let owner = &p.metadata.owner_references.unwrap()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.controller),
            ("StatefulSet", Some(true))
        );
    }

    #[test]
    fn availability_waits_for_min_ready_seconds() {
        let p: Pod = serde_json::from_value(json!({
            "status": {"phase": "Running", "conditions": [
                {"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}]},
        }))
        .unwrap();
        let since = ready_since(&p).unwrap();
        assert!(running_and_ready(&p));
        assert_eq!(until_available(&p, 0, since), None);
        assert_eq!(until_available(&p, 10, since + 4), Some(6));
        assert_eq!(until_available(&p, 10, since + 10), None);
    }
}
