//! The Deployment controller, as kube-controller-manager's, over ReplicaSets: the ReplicaSet of
//! the current template (named `<deployment>-<pod-template-hash>`, the hash label added to its
//! selector and pods) is created or found, and the replicas move to it: `RollingUpdate` within
//! `maxSurge` and `maxUnavailable` (counted on available replicas), `Recreate` by scaling the
//! old ones to zero first. Revisions are kept in `deployment.kubernetes.io/revision` annotations
//! (`kubectl rollout history|undo` read them), old ReplicaSets beyond `revisionHistoryLimit`
//! are deleted, a paused Deployment only scales, and the status carries the replica counts and
//! the `Available` and `Progressing` conditions `kubectl rollout status` waits for.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use reconciler::{Action, Cache, Queue, Stores};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::events::Recorder;
use crate::informer::{self, controller_ref, key};

/// Controller name.
pub const NAME: &str = "deployment-controller";
const HASH_LABEL: &str = "pod-template-hash";
const REVISION: &str = "deployment.kubernetes.io/revision";
const DESIRED: &str = "deployment.kubernetes.io/desired-replicas";
const MAX: &str = "deployment.kubernetes.io/max-replicas";

/// Runs the controller until shutdown.
pub async fn run(stores: Stores, events: Recorder, shutdown: CancellationToken) {
    let client = stores.client().clone();
    let (tx, rx) = reconciler::queue();
    let deployments = stores.keyed::<Deployment>(&tx);
    let sets = stores.cache::<ReplicaSet>();
    sets.owners("Deployment", &tx);
    if !reconciler::wait_synced(&[&*deployments, &*sets], &shutdown).await {
        return;
    }
    let ctx = Context {
        client,
        deployments,
        sets,
        events,
        requeue: tx.clone(),
    };
    let ctx = Arc::new(ctx);
    reconciler::work(rx, "deployment", shutdown, move |k| {
        let ctx = ctx.clone();
        async move { ctx.sync(&k).await.map(|()| Action::AwaitChange) }
    })
    .await;
}

struct Context {
    client: kube::Client,
    deployments: Arc<Cache<Deployment>>,
    sets: Arc<Cache<ReplicaSet>>,
    events: Recorder,
    /// The work queue, for a look again when the progress deadline runs out.
    requeue: Queue,
}

/// The hash kube-controller-manager labels a template's pods with: FNV-1a over the template,
/// in its safe alphabet.
pub fn template_hash(template: &PodTemplateSpec) -> String {
    crate::history::hash(&serde_json::to_vec(template).unwrap_or_default())
}

/// A template with the hash label taken out (what a ReplicaSet's template is compared on).
fn without_hash(t: &PodTemplateSpec) -> PodTemplateSpec {
    let mut t = t.clone();
    if let Some(labels) = t.metadata.as_mut().and_then(|m| m.labels.as_mut()) {
        labels.remove(HASH_LABEL);
    }
    t
}

/// `value` (a number or a percentage of `total`), rounded up or down.
pub fn scaled(value: Option<&IntOrString>, total: i32, default: &str, up: bool) -> i32 {
    let fallback = IntOrString::String(default.into());
    match value.unwrap_or(&fallback) {
        IntOrString::Int(n) => *n,
        IntOrString::String(s) => {
            let pct: f64 = s.trim_end_matches('%').parse().unwrap_or(0.0);
            let exact = f64::from(total) * pct / 100.0;
            if up {
                exact.ceil() as i32
            } else {
                exact.floor() as i32
            }
        }
    }
}

fn replicas(rs: &ReplicaSet) -> i32 {
    rs.spec.as_ref().and_then(|s| s.replicas).unwrap_or(0)
}

/// A ReplicaSet's available replicas, never more than it is asked to keep.
fn available(rs: &ReplicaSet) -> i32 {
    let available = rs
        .status
        .as_ref()
        .and_then(|s| s.available_replicas)
        .unwrap_or(0);
    available.min(replicas(rs))
}

/// Whether a ReplicaSet's status describes its current spec (its controller has seen the last
/// scale): decisions on availability wait for it.
fn settled(rs: &ReplicaSet) -> bool {
    let observed = rs
        .status
        .as_ref()
        .and_then(|s| s.observed_generation)
        .unwrap_or(0);
    observed >= rs.metadata.generation.unwrap_or(0)
}

fn revision(rs: &ReplicaSet) -> i64 {
    rs.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(REVISION))
        .and_then(|r| r.parse().ok())
        .unwrap_or(0)
}

// === impl Context ===

impl Context {
    async fn sync(&self, k: &str) -> Result<(), kube::Error> {
        let Some(d) = self.deployments.get(k) else {
            return Ok(());
        };
        if d.metadata.deletion_timestamp.is_some() {
            return Ok(());
        }
        let uid = d.metadata.uid.clone().unwrap_or_default();
        let spec = d.spec.clone().unwrap_or_default();
        let want = spec.replicas.unwrap_or(1).max(0);
        let mut owned: Vec<Arc<ReplicaSet>> = self
            .sets
            .owned_by(&uid)
            .into_iter()
            .filter(|rs| rs.metadata.deletion_timestamp.is_none())
            .collect();
        owned.sort_by_key(|rs| revision(rs));
        let template = spec.template.clone();
        let current = owned
            .iter()
            .find(|rs| {
                rs.spec
                    .as_ref()
                    .and_then(|s| s.template.as_ref())
                    .is_some_and(|t| without_hash(t) == template)
            })
            .cloned();
        let old: Vec<Arc<ReplicaSet>> = owned
            .iter()
            .filter(|rs| {
                current
                    .as_ref()
                    .is_none_or(|c| c.metadata.uid != rs.metadata.uid)
            })
            .cloned()
            .collect();
        let paused = spec.paused.unwrap_or(false);
        let strategy = spec.strategy.clone().unwrap_or_default();
        let recreate = strategy.type_.as_deref() == Some("Recreate");
        let created = current.is_none() && !paused;
        let new = match current {
            Some(rs) => Some(rs),
            None if paused => None,
            None => {
                let next = owned.iter().map(|rs| revision(rs)).max().unwrap_or(0) + 1;
                let initial = if recreate || !old.is_empty() { 0 } else { want };
                Some(Arc::new(self.create_rs(&d, next, initial).await?))
            }
        };
        if paused {
            // Only scaling: the newest ReplicaSet takes the difference.
            if let Some(rs) = new.as_ref().or(owned.last()) {
                let others: i32 = owned
                    .iter()
                    .filter(|o| o.metadata.uid != rs.metadata.uid)
                    .map(|o| replicas(o))
                    .sum();
                self.scale(&d, rs, (want - others).max(0)).await?;
            }
        }
        let mut version = d.metadata.resource_version.clone();
        if let Some(new) = new.as_ref().filter(|_| !paused) {
            if recreate {
                self.recreate(&d, new, &old, want).await?;
            } else {
                self.roll(&d, new, &old, want).await?;
            }
            if let Some(v) = self.keep_revision(&d, new).await? {
                version = Some(v);
            }
        }
        self.cleanup(&d, &old, new.as_deref()).await?;
        let seen = Seen {
            new: new.as_deref(),
            owned: &owned,
            created,
            version: version.as_deref(),
        };
        self.update_status(&d, seen).await
    }

    async fn create_rs(
        &self,
        d: &Deployment,
        revision: i64,
        count: i32,
    ) -> Result<ReplicaSet, kube::Error> {
        let ns = d.metadata.namespace.clone().unwrap_or_default();
        let name = d.metadata.name.clone().unwrap_or_default();
        let spec = d.spec.clone().unwrap_or_default();
        let hash = template_hash(&spec.template);
        let mut template = spec.template.clone();
        let tm = template.metadata.get_or_insert_with(Default::default);
        tm.labels
            .get_or_insert_with(Default::default)
            .insert(HASH_LABEL.into(), hash.clone());
        let mut selector = spec.selector.clone();
        selector
            .match_labels
            .get_or_insert_with(Default::default)
            .insert(HASH_LABEL.into(), hash.clone());
        let mut labels = template
            .metadata
            .as_ref()
            .and_then(|m| m.labels.clone())
            .unwrap_or_default();
        labels.insert(HASH_LABEL.into(), hash.clone());
        let max = want_plus_surge(d);
        let rs: ReplicaSet = serde_json::from_value(json!({
            "metadata": {
                "name": format!("{name}-{hash}"),
                "namespace": ns,
                "labels": labels,
                "annotations": {
                    REVISION: revision.to_string(),
                    DESIRED: spec.replicas.unwrap_or(1).to_string(),
                    MAX: max.to_string(),
                },
                "ownerReferences": [controller_ref(d)],
            },
            "spec": {
                "replicas": count,
                "minReadySeconds": spec.min_ready_seconds.unwrap_or(0),
                "selector": selector,
                "template": template,
            },
        }))
        .map_err(kube::Error::SerdeError)?;
        let api: Api<ReplicaSet> = Api::namespaced(self.client.clone(), &ns);
        match api.create(&PostParams::default(), &rs).await {
            Ok(created) => {
                let message = format!(
                    "Scaled up replica set {} to {count} from 0",
                    created.metadata.name.as_deref().unwrap_or_default()
                );
                self.events.normal(d, "ScalingReplicaSet", &message);
                Ok(created)
            }
            // Made by an earlier sync whose watch event has not arrived: use it.
            Err(kube::Error::Api(s)) if s.code == 409 => api.get(&format!("{name}-{hash}")).await,
            Err(e) => Err(e),
        }
    }

    async fn scale(&self, d: &Deployment, rs: &ReplicaSet, to: i32) -> Result<(), kube::Error> {
        let from = replicas(rs);
        if from == to {
            return Ok(());
        }
        let ns = rs.metadata.namespace.clone().unwrap_or_default();
        let name = rs.metadata.name.clone().unwrap_or_default();
        let api: Api<ReplicaSet> = Api::namespaced(self.client.clone(), &ns);
        let spec = d.spec.clone().unwrap_or_default();
        let patch = json!({
            "metadata": {"annotations": {
                DESIRED: spec.replicas.unwrap_or(1).to_string(),
                MAX: want_plus_surge(d).to_string(),
            }},
            "spec": {"replicas": to},
        });
        api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
        let verb = if to > from { "up" } else { "down" };
        let message = format!("Scaled {verb} replica set {name} to {to} from {from}");
        self.events.normal(d, "ScalingReplicaSet", &message);
        Ok(())
    }

    /// Old ReplicaSets to zero; the new one up once no old pod is left.
    async fn recreate(
        &self,
        d: &Deployment,
        new: &ReplicaSet,
        old: &[Arc<ReplicaSet>],
        want: i32,
    ) -> Result<(), kube::Error> {
        for rs in old {
            self.scale(d, rs, 0).await?;
        }
        let old_running: i32 = old
            .iter()
            .map(|rs| rs.status.as_ref().map_or(0, |s| s.replicas))
            .sum();
        let old_wanted: i32 = old.iter().map(|rs| replicas(rs)).sum();
        if old_running == 0 && old_wanted == 0 {
            self.scale(d, new, want).await?;
        }
        Ok(())
    }

    /// One step of a rolling update: scale the new ReplicaSet up within `maxSurge`, the old
    /// ones down within `maxUnavailable`.
    async fn roll(
        &self,
        d: &Deployment,
        new: &ReplicaSet,
        old: &[Arc<ReplicaSet>],
        want: i32,
    ) -> Result<(), kube::Error> {
        let ru = d
            .spec
            .as_ref()
            .and_then(|s| s.strategy.as_ref())
            .and_then(|s| s.rolling_update.clone())
            .unwrap_or_default();
        let mut surge = scaled(ru.max_surge.as_ref(), want, "25%", true);
        let unavailable = scaled(ru.max_unavailable.as_ref(), want, "25%", false);
        if surge == 0 && unavailable == 0 {
            surge = 1;
        }
        if !settled(new) || old.iter().any(|rs| !settled(rs)) {
            // A scale not yet seen by the ReplicaSet controller: its availability is stale.
            return Ok(());
        }
        let old_total: i32 = old.iter().map(|rs| replicas(rs)).sum();
        let total = old_total + replicas(new);
        // Up: the new one, as far as the surge allows.
        if replicas(new) < want {
            let room = (want + surge - total).max(0);
            let to = (replicas(new) + room).min(want);
            self.scale(d, new, to).await?;
        } else if replicas(new) > want {
            self.scale(d, new, want).await?;
        }
        if old_total == 0 {
            return Ok(());
        }
        // Down: old ones, keeping want - maxUnavailable available. First the old replicas
        // that are not available (they cost no availability), then available ones.
        let min_available = want - unavailable;
        let new_unavailable = (replicas(new) - available(new)).max(0);
        let mut budget = (total - min_available - new_unavailable).max(0);
        let mut now: Vec<i32> = old.iter().map(|rs| replicas(rs)).collect();
        for (i, rs) in old.iter().enumerate() {
            let unhealthy = (now[i] - available(rs)).max(0).min(budget);
            if unhealthy > 0 {
                now[i] -= unhealthy;
                budget -= unhealthy;
            }
        }
        let all_available: i32 = old.iter().map(|rs| available(rs)).sum::<i32>() + available(new);
        let mut removable = (all_available - min_available).max(0);
        for (i, rs) in old.iter().enumerate() {
            let cut = now[i].min(removable).min(available(rs));
            now[i] -= cut;
            removable -= cut;
        }
        for (i, rs) in old.iter().enumerate() {
            if now[i] != replicas(rs) {
                self.scale(d, rs, now[i]).await?;
            }
        }
        Ok(())
    }

    /// The Deployment carries the revision of its current ReplicaSet; the resourceVersion
    /// written, if it had to be.
    async fn keep_revision(
        &self,
        d: &Deployment,
        new: &ReplicaSet,
    ) -> Result<Option<String>, kube::Error> {
        let rev = revision(new).to_string();
        let held = d
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(REVISION))
            .cloned();
        if held.as_deref() == Some(rev.as_str()) {
            return Ok(None);
        }
        let api: Api<Deployment> = Api::namespaced(
            self.client.clone(),
            d.metadata.namespace.as_deref().unwrap_or_default(),
        );
        let patch = json!({"metadata": {"annotations": {REVISION: rev}}});
        api.patch(
            d.metadata.name.as_deref().unwrap_or_default(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
        .map(|d| d.metadata.resource_version)
    }

    /// Old ReplicaSets scaled to zero beyond `revisionHistoryLimit` are deleted, oldest first.
    async fn cleanup(
        &self,
        d: &Deployment,
        old: &[Arc<ReplicaSet>],
        new: Option<&ReplicaSet>,
    ) -> Result<(), kube::Error> {
        let limit = d
            .spec
            .as_ref()
            .and_then(|s| s.revision_history_limit)
            .unwrap_or(10)
            .max(0) as usize;
        let idle: Vec<&Arc<ReplicaSet>> = old
            .iter()
            .filter(|rs| replicas(rs) == 0 && rs.status.as_ref().is_none_or(|s| s.replicas == 0))
            .filter(|rs| new.is_none_or(|n| n.metadata.uid != rs.metadata.uid))
            .collect();
        if idle.len() <= limit {
            return Ok(());
        }
        for rs in &idle[..idle.len() - limit] {
            let api: Api<ReplicaSet> = Api::namespaced(
                self.client.clone(),
                rs.metadata.namespace.as_deref().unwrap_or_default(),
            );
            match api
                .delete(
                    rs.metadata.name.as_deref().unwrap_or_default(),
                    &DeleteParams::default(),
                )
                .await
            {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    async fn update_status(&self, d: &Deployment, seen: Seen<'_>) -> Result<(), kube::Error> {
        let Seen {
            new,
            owned,
            created,
            version,
        } = seen;
        let spec = d.spec.clone().unwrap_or_default();
        let want = spec.replicas.unwrap_or(1);
        let sum = |f: &dyn Fn(&ReplicaSet) -> i32| owned.iter().map(|rs| f(rs)).sum::<i32>();
        let replicas_now = sum(&|rs| rs.status.as_ref().map_or(0, |s| s.replicas));
        let ready = sum(&|rs| {
            rs.status
                .as_ref()
                .and_then(|s| s.ready_replicas)
                .unwrap_or(0)
        });
        let avail = sum(&available);
        let updated = new.map_or(0, |n| n.status.as_ref().map_or(0, |s| s.replicas));
        let ru = spec
            .strategy
            .as_ref()
            .and_then(|s| s.rolling_update.clone())
            .unwrap_or_default();
        let max_unavailable =
            if spec.strategy.as_ref().and_then(|s| s.type_.as_deref()) == Some("Recreate") {
                0
            } else {
                scaled(ru.max_unavailable.as_ref(), want, "25%", false)
            };
        let complete = new.is_some_and(|n| {
            replicas(n) == want && updated == want && available(n) == want && replicas_now == want
        });
        let previous: BTreeMap<String, Value> = d
            .status
            .as_ref()
            .and_then(|s| s.conditions.clone())
            .unwrap_or_default()
            .into_iter()
            .filter_map(|c| serde_json::to_value(&c).ok().map(|v| (c.type_.clone(), v)))
            .collect();
        let now = apimachinery::time::now_rfc3339();
        let condition = |kind: &str, status: &str, reason: &str, message: String, renew: bool| {
            let prev = previous.get(kind);
            let same = prev.is_some_and(|p| p["status"] == status && p["reason"] == reason);
            let since = prev
                .filter(|p| p["status"] == status)
                .map(|p| p["lastTransitionTime"].clone())
                .unwrap_or_else(|| json!(now));
            let updated_at = if same && !renew {
                prev.map(|p| p["lastUpdateTime"].clone())
                    .unwrap_or(json!(now))
            } else {
                json!(now)
            };
            json!({"type": kind, "status": status, "reason": reason, "message": message,
                   "lastTransitionTime": since, "lastUpdateTime": updated_at})
        };
        let name = d.metadata.name.clone().unwrap_or_default();
        let available_ok = avail >= want - max_unavailable;
        let mut conditions = vec![condition(
            "Available",
            if available_ok { "True" } else { "False" },
            if available_ok {
                "MinimumReplicasAvailable"
            } else {
                "MinimumReplicasUnavailable"
            },
            if available_ok {
                "Deployment has minimum availability.".into()
            } else {
                "Deployment does not have minimum availability.".into()
            },
            false,
        )];
        let held_status = d.status.clone().unwrap_or_default();
        let progressed = updated > held_status.updated_replicas.unwrap_or(0)
            || replicas_now - updated
                < held_status.replicas.unwrap_or(0) - held_status.updated_replicas.unwrap_or(0)
            || ready > held_status.ready_replicas.unwrap_or(0)
            || avail > held_status.available_replicas.unwrap_or(0);
        let epoch = apimachinery::time::now_unix();
        let rollout = Rollout {
            deployment: &name,
            new_rs: new.and_then(|n| n.metadata.name.as_deref()),
            paused: spec.paused.unwrap_or(false),
            created,
            complete,
            all_updated: replicas_now == updated,
            progressed,
            deadline: spec
                .progress_deadline_seconds
                .filter(|s| *s != i32::MAX)
                .map(i64::from),
            previous: previous.get("Progressing").map(|p| {
                let at = p["lastUpdateTime"].as_str().unwrap_or_default();
                (
                    p["status"].as_str().unwrap_or_default(),
                    p["reason"].as_str().unwrap_or_default(),
                    p["message"].as_str().unwrap_or_default(),
                    apimachinery::time::parse_rfc3339(at).unwrap_or(epoch),
                )
            }),
            now: epoch,
        };
        if let Some(p) = progress(&rollout) {
            if let Some(wait) = p.deadline_in {
                let after = std::time::Duration::from_secs(wait.max(0) as u64 + 1);
                self.requeue.later(&key(d), after);
            }
            conditions.push(condition(
                "Progressing",
                p.status,
                p.reason,
                p.message,
                p.renew,
            ));
        }
        let status = json!({
            "observedGeneration": d.metadata.generation,
            "replicas": replicas_now,
            "updatedReplicas": updated,
            "readyReplicas": ready,
            "availableReplicas": avail,
            "unavailableReplicas": (want - avail).max(0),
            "conditions": conditions,
        });
        let held = serde_json::to_value(d.status.clone().unwrap_or_default()).unwrap_or_default();
        let same = [
            "observedGeneration",
            "replicas",
            "updatedReplicas",
            "readyReplicas",
            "availableReplicas",
            "unavailableReplicas",
        ]
        .iter()
        .all(|f| held[f].as_i64().unwrap_or(0) == status[f].as_i64().unwrap_or(0))
            && conditions.iter().all(|c| {
                previous
                    .get(c["type"].as_str().unwrap_or_default())
                    .is_some_and(|p| {
                        p["status"] == c["status"]
                            && p["reason"] == c["reason"]
                            && p["lastUpdateTime"] == c["lastUpdateTime"]
                    })
            });
        if same {
            return Ok(());
        }
        let api: Api<Deployment> = Api::namespaced(
            self.client.clone(),
            d.metadata.namespace.as_deref().unwrap_or_default(),
        );
        informer::write_status_over(&api, &name, version, status).await
    }
}

/// What a sync saw and did that the status reports.
struct Seen<'a> {
    /// The ReplicaSet of the current template.
    new: Option<&'a ReplicaSet>,
    /// Every ReplicaSet the Deployment controls.
    owned: &'a [Arc<ReplicaSet>],
    /// The sync created `new`.
    created: bool,
    /// The Deployment's resourceVersion after the sync's own writes: the status is written
    /// over it.
    version: Option<&'a str>,
}

/// What `Progressing` is decided on, as kube-controller-manager's `syncRolloutStatus` sees it.
struct Rollout<'a> {
    deployment: &'a str,
    new_rs: Option<&'a str>,
    paused: bool,
    /// The new ReplicaSet was created by this sync.
    created: bool,
    /// Every replica is updated and available.
    complete: bool,
    /// As many replicas exist as are updated.
    all_updated: bool,
    /// More updated, ready or available replicas than the status held, or fewer old ones.
    progressed: bool,
    /// `progressDeadlineSeconds`, if there is a deadline.
    deadline: Option<i64>,
    /// The condition held: status, reason, message and last update (Unix seconds).
    previous: Option<(&'a str, &'a str, &'a str, i64)>,
    now: i64,
}

/// The `Progressing` condition a [`Rollout`] gets (none without a deadline).
#[derive(Debug, PartialEq)]
struct Progress {
    status: &'static str,
    reason: &'static str,
    message: String,
    /// Progress seen: `lastUpdateTime` moves on even when the reason stays.
    renew: bool,
    /// Seconds until the deadline passes, while it runs.
    deadline_in: Option<i64>,
}

/// Upstream's reasons: `NewReplicaSetCreated` and `FoundNewReplicaSet` start the clock,
/// `ReplicaSetUpdated` restarts it on progress, `NewReplicaSetAvailable` ends the rollout, and
/// `ProgressDeadlineExceeded` (False) is set once the clock passes the deadline.
fn progress(r: &Rollout) -> Option<Progress> {
    let deadline = r.deadline?;
    let set = |status, reason, message: String, renew| Progress {
        status,
        reason,
        message,
        renew,
        deadline_in: None,
    };
    if r.paused {
        return Some(set(
            "Unknown",
            "DeploymentPaused",
            "Deployment is paused".into(),
            false,
        ));
    }
    let about = |what: &str| match r.new_rs {
        Some(rs) => format!("ReplicaSet \"{rs}\" {what}"),
        None => format!("Deployment \"{}\" {what}", r.deployment),
    };
    let rs = r.new_rs.unwrap_or_default();
    // The condition the rollout starts from, and since when its clock runs.
    let (mut held, since) = match r.previous {
        _ if r.created => {
            let message = format!("Created new replica set \"{rs}\"");
            (set("True", "NewReplicaSetCreated", message, true), r.now)
        }
        None if r.new_rs.is_some() => {
            let message = format!("Found new replica set \"{rs}\"");
            (set("True", "FoundNewReplicaSet", message, true), r.now)
        }
        None => (
            set("True", "ReplicaSetUpdated", about("is progressing."), true),
            r.now,
        ),
        Some((_, "DeploymentPaused", _, _)) => {
            let message = "Deployment is resumed".to_string();
            (set("Unknown", "DeploymentResumed", message, true), r.now)
        }
        Some((status, reason, message, at)) => {
            let status = match status {
                "True" => "True",
                "False" => "False",
                _ => "Unknown",
            };
            let reason = REASONS
                .iter()
                .find(|k| **k == reason)
                .copied()
                .unwrap_or("ReplicaSetUpdated");
            (set(status, reason, message.to_string(), false), at)
        }
    };
    if r.all_updated && held.reason == "NewReplicaSetAvailable" {
        return Some(held);
    }
    if r.complete {
        let done = held.reason == "NewReplicaSetAvailable";
        return Some(set(
            "True",
            "NewReplicaSetAvailable",
            about("has successfully progressed."),
            !done,
        ));
    }
    if r.progressed {
        let mut p = set("True", "ReplicaSetUpdated", about("is progressing."), true);
        p.deadline_in = Some(deadline);
        return Some(p);
    }
    let timed_out = match held.reason {
        "NewReplicaSetAvailable" => false,
        "ProgressDeadlineExceeded" => true,
        _ => since + deadline < r.now,
    };
    if timed_out {
        return Some(set(
            "False",
            "ProgressDeadlineExceeded",
            about("has timed out progressing."),
            false,
        ));
    }
    if held.reason != "NewReplicaSetAvailable" {
        held.deadline_in = Some(since + deadline - r.now);
    }
    Some(held)
}

/// The `Progressing` reasons a held condition keeps.
const REASONS: [&str; 7] = [
    "NewReplicaSetCreated",
    "FoundNewReplicaSet",
    "ReplicaSetUpdated",
    "NewReplicaSetAvailable",
    "ProgressDeadlineExceeded",
    "DeploymentPaused",
    "DeploymentResumed",
];

fn want_plus_surge(d: &Deployment) -> i32 {
    let spec = d.spec.clone().unwrap_or_default();
    let want = spec.replicas.unwrap_or(1);
    let ru = spec
        .strategy
        .and_then(|s| s.rolling_update)
        .unwrap_or_default();
    want + scaled(ru.max_surge.as_ref(), want, "25%", true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn surge_rounds_up_and_unavailability_down() {
        let pct = IntOrString::String("25%".into());
        assert_eq!(scaled(Some(&pct), 10, "25%", true), 3);
        assert_eq!(scaled(Some(&pct), 10, "25%", false), 2);
        assert_eq!(scaled(Some(&IntOrString::Int(2)), 10, "25%", false), 2);
        assert_eq!(scaled(None, 4, "25%", true), 1);
        assert_eq!(scaled(None, 1, "25%", false), 0);
    }

    fn rollout() -> Rollout<'static> {
        Rollout {
            deployment: "web",
            new_rs: Some("web-abc"),
            paused: false,
            created: false,
            complete: false,
            all_updated: false,
            progressed: false,
            deadline: Some(3),
            previous: None,
            now: 1_000,
        }
    }

    #[test]
    fn progress_starts_with_the_new_replica_set_and_times_out_without_progress() {
        let created = progress(&Rollout {
            created: true,
            ..rollout()
        })
        .unwrap();
        assert_eq!(
            (created.status, created.reason),
            ("True", "NewReplicaSetCreated")
        );
        assert_eq!(created.message, "Created new replica set \"web-abc\"");
        assert_eq!(created.deadline_in, Some(3));
        let found = progress(&rollout()).unwrap();
        assert_eq!(found.reason, "FoundNewReplicaSet");
        let held = (
            "True",
            "NewReplicaSetCreated",
            "Created new replica set \"web-abc\"",
            1_000,
        );
        let waiting = progress(&Rollout {
            previous: Some(held),
            now: 1_002,
            ..rollout()
        })
        .unwrap();
        assert_eq!(
            (waiting.reason, waiting.renew, waiting.deadline_in),
            ("NewReplicaSetCreated", false, Some(1))
        );
        let late = progress(&Rollout {
            previous: Some(held),
            now: 1_004,
            ..rollout()
        })
        .unwrap();
        assert_eq!(
            (late.status, late.reason),
            ("False", "ProgressDeadlineExceeded")
        );
        assert_eq!(
            late.message,
            "ReplicaSet \"web-abc\" has timed out progressing."
        );
        let moving = progress(&Rollout {
            previous: Some(held),
            progressed: true,
            now: 1_004,
            ..rollout()
        })
        .unwrap();
        assert_eq!((moving.reason, moving.renew), ("ReplicaSetUpdated", true));
        let done = progress(&Rollout {
            previous: Some(held),
            complete: true,
            all_updated: true,
            now: 1_004,
            ..rollout()
        })
        .unwrap();
        assert_eq!(
            (done.status, done.reason),
            ("True", "NewReplicaSetAvailable")
        );
        assert_eq!(done.deadline_in, None);
        assert_eq!(
            progress(&Rollout {
                deadline: None,
                ..rollout()
            }),
            None
        );
    }

    #[test]
    fn a_finished_rollout_never_times_out_and_a_paused_one_says_so() {
        let held = (
            "True",
            "NewReplicaSetAvailable",
            "ReplicaSet \"web-abc\" has successfully progressed.",
            0,
        );
        let idle = progress(&Rollout {
            previous: Some(held),
            now: 100_000,
            ..rollout()
        })
        .unwrap();
        assert_eq!(
            (idle.reason, idle.deadline_in),
            ("NewReplicaSetAvailable", None)
        );
        let paused = progress(&Rollout {
            paused: true,
            ..rollout()
        })
        .unwrap();
        assert_eq!(
            (paused.status, paused.reason),
            ("Unknown", "DeploymentPaused")
        );
        let resumed = progress(&Rollout {
            previous: Some(("Unknown", "DeploymentPaused", "Deployment is paused", 0)),
            now: 100_000,
            ..rollout()
        })
        .unwrap();
        assert_eq!(
            (resumed.status, resumed.reason),
            ("Unknown", "DeploymentResumed")
        );
    }

    #[test]
    fn the_template_hash_is_stable_and_changes_with_the_template() {
        let t: PodTemplateSpec = serde_json::from_value(json!({
            "metadata": {"labels": {"app": "web"}},
            "spec": {"containers": [{"name": "c", "image": "web:1"}]},
        }))
        .unwrap();
        let mut t2 = t.clone();
        t2.spec.as_mut().unwrap().containers[0].image = Some("web:2".into());
        assert_eq!(template_hash(&t), template_hash(&t.clone()));
        assert_ne!(template_hash(&t), template_hash(&t2));
        assert!(
            template_hash(&t)
                .bytes()
                .all(|b| b"bcdfghjklmnpqrstvwxz2456789".contains(&b))
        );
    }
}
