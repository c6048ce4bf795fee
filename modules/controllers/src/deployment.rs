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
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::events::Recorder;
use crate::informer::{self, Cache, controller_of, controller_ref, key};

/// Controller name.
pub const NAME: &str = "deployment-controller";
const HASH_LABEL: &str = "pod-template-hash";
const REVISION: &str = "deployment.kubernetes.io/revision";
const DESIRED: &str = "deployment.kubernetes.io/desired-replicas";
const MAX: &str = "deployment.kubernetes.io/max-replicas";

/// Runs the controller until shutdown.
pub async fn run(client: kube::Client, events: Recorder, shutdown: CancellationToken) {
    let (tx, rx) = mpsc::unbounded_channel::<String>();
    let queue = tx.clone();
    let (deployments, d_task) = informer::run(
        Api::<Deployment>::all(client.clone()),
        move |c| {
            let _ = queue.send(key(&*c.now));
        },
        shutdown.clone(),
    );
    let queue = tx.clone();
    let (sets, s_task) = informer::run(
        Api::<ReplicaSet>::all(client.clone()),
        move |c| {
            for rs in [Some(&c.now), c.before.as_ref()].into_iter().flatten() {
                if let Some(o) = controller_of(&**rs).filter(|o| o.kind == "Deployment") {
                    let ns = rs.metadata.namespace.as_deref().unwrap_or_default();
                    let _ = queue.send(format!("{ns}/{}", o.name));
                }
            }
        },
        shutdown.clone(),
    );
    tokio::spawn(d_task);
    tokio::spawn(s_task);
    if !informer::wait_synced(&[&*deployments, &*sets], &shutdown).await {
        return;
    }
    let ctx = Context {
        client,
        deployments,
        sets,
        events,
    };
    let ctx = Arc::new(ctx);
    informer::work(rx, tx, "deployment", shutdown, move |k| {
        let ctx = ctx.clone();
        async move { ctx.sync(&k).await }
    })
    .await;
}

struct Context {
    client: kube::Client,
    deployments: Arc<Cache<Deployment>>,
    sets: Arc<Cache<ReplicaSet>>,
    events: Recorder,
}

/// The hash kube-controller-manager labels a template's pods with: FNV-1a over the template,
/// in its safe alphabet.
pub fn template_hash(template: &PodTemplateSpec) -> String {
    let bytes = serde_json::to_vec(template).unwrap_or_default();
    let mut h: u32 = 0x811c_9dc5;
    for b in bytes {
        h ^= u32::from(b);
        h = h.wrapping_mul(0x0100_0193);
    }
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut out = String::new();
    let mut n = u64::from(h);
    while n > 0 || out.is_empty() {
        out.push(ALPHABET[(n % ALPHABET.len() as u64) as usize] as char);
        n /= ALPHABET.len() as u64;
    }
    out
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
            .all()
            .into_iter()
            .filter(|rs| controller_of(&**rs).is_some_and(|o| o.uid == uid))
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
        } else if let Some(new) = &new {
            if recreate {
                self.recreate(&d, new, &old, want).await?;
            } else {
                self.roll(&d, new, &old, want).await?;
            }
            self.keep_revision(&d, new).await?;
        }
        self.cleanup(&d, &old, new.as_deref()).await?;
        self.update_status(&d, new.as_deref(), &owned).await
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

    /// The Deployment carries the revision of its current ReplicaSet.
    async fn keep_revision(&self, d: &Deployment, new: &ReplicaSet) -> Result<(), kube::Error> {
        let rev = revision(new).to_string();
        let held = d
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(REVISION))
            .cloned();
        if held.as_deref() == Some(rev.as_str()) {
            return Ok(());
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
        .map(|_| ())
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

    async fn update_status(
        &self,
        d: &Deployment,
        new: Option<&ReplicaSet>,
        owned: &[Arc<ReplicaSet>],
    ) -> Result<(), kube::Error> {
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
        let condition = |kind: &str, status: &str, reason: &str, message: String| {
            let prev = previous.get(kind);
            let same = prev.is_some_and(|p| p["status"] == status && p["reason"] == reason);
            let since = prev
                .filter(|p| p["status"] == status)
                .map(|p| p["lastTransitionTime"].clone())
                .unwrap_or_else(|| json!(now));
            let updated_at = if same {
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
        )];
        let rs_name = new
            .and_then(|n| n.metadata.name.clone())
            .unwrap_or_default();
        let (reason, message) = if spec.paused.unwrap_or(false) {
            ("DeploymentPaused", "Deployment is paused".to_string())
        } else if complete {
            (
                "NewReplicaSetAvailable",
                format!("ReplicaSet \"{rs_name}\" has successfully progressed."),
            )
        } else {
            (
                "ReplicaSetUpdated",
                format!("ReplicaSet \"{rs_name}\" is progressing."),
            )
        };
        let progressing = if spec.paused.unwrap_or(false) {
            "Unknown"
        } else {
            "True"
        };
        conditions.push(condition("Progressing", progressing, reason, message));
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
                    .is_some_and(|p| p["status"] == c["status"] && p["reason"] == c["reason"])
            });
        if same {
            return Ok(());
        }
        let api: Api<Deployment> = Api::namespaced(
            self.client.clone(),
            d.metadata.namespace.as_deref().unwrap_or_default(),
        );
        informer::write_status(&api, &name, status).await
    }
}

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
