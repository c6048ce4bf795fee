//! What the controllers share: an informer (a kind's objects kept in memory by a watch, with
//! each change handed to a callback), label selector matching, and owner references.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Container, Pod, PodSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, OwnerReference};
use kube::Resource;
use kube::api::Api;
use kube::runtime::watcher::{self, Event};
use serde::de::DeserializeOwned;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// `namespace/name` (or `name` for a cluster-scoped object).
pub fn key<K: Resource>(obj: &K) -> String {
    let m = obj.meta();
    match m.namespace.as_deref() {
        Some(ns) if !ns.is_empty() => format!("{ns}/{}", m.name.as_deref().unwrap_or_default()),
        _ => m.name.clone().unwrap_or_default(),
    }
}

/// A kind's objects as the last watch events left them, by [`key`].
pub struct Cache<K> {
    objects: RwLock<HashMap<String, Arc<K>>>,
    /// A full list has been read.
    synced: AtomicBool,
}

/// A change the informer saw: the object now (or as it was when deleted) and before.
pub struct Change<K> {
    pub now: Arc<K>,
    pub before: Option<Arc<K>>,
    pub deleted: bool,
}

// === impl Cache ===

impl<K> Cache<K> {
    /// The object at `key`.
    pub fn get(&self, key: &str) -> Option<Arc<K>> {
        self.objects
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(key)
            .cloned()
    }

    /// Whether a full list has been read (before that, the cache is not the cluster).
    pub fn synced(&self) -> bool {
        self.synced.load(Ordering::Acquire)
    }

    /// Every object.
    pub fn all(&self) -> Vec<Arc<K>> {
        self.objects
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .cloned()
            .collect()
    }
}

/// Keeps `api`'s objects in a [`Cache`] and calls `on_change` for every change (after the
/// cache has it), until shutdown. A relist calls it for what changed and what went.
pub fn run<K, F>(
    api: Api<K>,
    on_change: F,
    shutdown: CancellationToken,
) -> (Arc<Cache<K>>, impl Future<Output = ()>)
where
    K: Resource<DynamicType = ()>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
    F: FnMut(Change<K>) + Send + 'static,
{
    run_slim(api, |k| k, on_change, shutdown)
}

/// Watches every `K` on a task of its own, each change queueing the object's key: how a
/// controller follows the objects it reconciles.
pub fn spawn_keyed<K>(
    client: &kube::Client,
    queue: &mpsc::UnboundedSender<String>,
    shutdown: &CancellationToken,
) -> Arc<Cache<K>>
where
    K: Resource<DynamicType = ()>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    let queue = queue.clone();
    let (cache, task) = run(
        Api::<K>::all(client.clone()),
        move |c| {
            let _ = queue.send(key(&*c.now));
        },
        shutdown.clone(),
    );
    tokio::spawn(task);
    cache
}

/// Watches every pod (slim) on a task of its own, each change queueing its controller when
/// that is of kind `owner`: how a controller follows the pods it owns.
pub fn spawn_owned_pods(
    client: &kube::Client,
    owner: &'static str,
    queue: &mpsc::UnboundedSender<String>,
    shutdown: &CancellationToken,
) -> Arc<Cache<Pod>> {
    let queue = queue.clone();
    let (cache, task) = run_slim(
        Api::<Pod>::all(client.clone()),
        slim_pod,
        move |c| queue_owner(&queue, owner, &c),
        shutdown.clone(),
    );
    tokio::spawn(task);
    cache
}

/// Like [`run`], keeping only what `slim` leaves of each object (a controller that reads a
/// few fields of many objects need not hold them whole).
pub fn run_slim<K, F>(
    api: Api<K>,
    slim: fn(K) -> K,
    mut on_change: F,
    shutdown: CancellationToken,
) -> (Arc<Cache<K>>, impl Future<Output = ()>)
where
    K: Resource<DynamicType = ()>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
    F: FnMut(Change<K>) + Send + 'static,
{
    let cache = Arc::new(Cache {
        objects: RwLock::new(HashMap::new()),
        synced: AtomicBool::new(false),
    });
    let held = cache.clone();
    let task = async move {
        let mut stream = watcher::watcher(api, Default::default()).boxed();
        let mut relisted: Option<HashMap<String, Arc<K>>> = None;
        loop {
            let event = tokio::select! {
                _ = shutdown.cancelled() => return,
                e = stream.next() => match e {
                    Some(Ok(e)) => e,
                    Some(Err(e)) => {
                        tracing::debug!(error = %e, "watch failed; the watcher retries");
                        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
                        continue;
                    }
                    None => return,
                },
            };
            match event {
                Event::Init => relisted = Some(HashMap::new()),
                Event::InitApply(obj) => {
                    if let Some(r) = relisted.as_mut() {
                        r.insert(key(&obj), Arc::new(slim(obj)));
                    }
                }
                Event::InitDone => {
                    let Some(fresh) = relisted.take() else {
                        continue;
                    };
                    let old = std::mem::replace(
                        &mut *held.objects.write().unwrap_or_else(|e| e.into_inner()),
                        fresh.clone(),
                    );
                    held.synced.store(true, Ordering::Release);
                    for (k, now) in &fresh {
                        let before = old.get(k).cloned();
                        let same = before.as_ref().is_some_and(|b| {
                            b.meta().resource_version == now.meta().resource_version
                        });
                        if !same {
                            on_change(Change {
                                now: now.clone(),
                                before,
                                deleted: false,
                            });
                        }
                    }
                    for (k, gone) in old {
                        if !fresh.contains_key(&k) {
                            on_change(Change {
                                now: gone,
                                before: None,
                                deleted: true,
                            });
                        }
                    }
                }
                Event::Apply(obj) => {
                    let now = Arc::new(slim(obj));
                    let before = held
                        .objects
                        .write()
                        .unwrap_or_else(|e| e.into_inner())
                        .insert(key(&*now), now.clone());
                    on_change(Change {
                        now,
                        before,
                        deleted: false,
                    });
                }
                Event::Delete(obj) => {
                    let obj = slim(obj);
                    let k = key(&obj);
                    let before = held
                        .objects
                        .write()
                        .unwrap_or_else(|e| e.into_inner())
                        .remove(&k);
                    on_change(Change {
                        now: Arc::new(obj),
                        before,
                        deleted: true,
                    });
                }
            }
        }
    };
    (cache, task)
}

/// A controller's work queue: runs `sync` for each key sent on `rx`, one at a time, a key sent
/// again while queued counted once; a failed sync is retried after a second (sent back on
/// `tx`). Returns at shutdown.
pub async fn work<F, Fut>(
    mut rx: mpsc::UnboundedReceiver<String>,
    tx: mpsc::UnboundedSender<String>,
    what: &'static str,
    shutdown: CancellationToken,
    mut sync: F,
) where
    F: FnMut(String) -> Fut,
    Fut: Future<Output = Result<(), kube::Error>>,
{
    let mut pending: VecDeque<String> = VecDeque::new();
    let mut queued: HashSet<String> = HashSet::new();
    loop {
        if pending.is_empty() {
            let next = tokio::select! {
                _ = shutdown.cancelled() => return,
                k = rx.recv() => match k { Some(k) => k, None => return },
            };
            if queued.insert(next.clone()) {
                pending.push_back(next);
            }
        }
        while let Ok(k) = rx.try_recv() {
            if queued.insert(k.clone()) {
                pending.push_back(k);
            }
        }
        let Some(k) = pending.pop_front() else {
            continue;
        };
        queued.remove(&k);
        if let Err(e) = sync(k.clone()).await {
            tracing::info!(object = %k, controller = what, error = %e, "sync failed; retrying");
            later(&tx, &k, std::time::Duration::from_secs(1));
        }
    }
}

/// Sends to `queue` the key of the `kind` controlling the object of `change` (now or before).
pub fn queue_owner<K: Resource>(
    queue: &mpsc::UnboundedSender<String>,
    kind: &str,
    change: &Change<K>,
) {
    for obj in [Some(&change.now), change.before.as_ref()]
        .into_iter()
        .flatten()
    {
        if let Some(o) = controller_of(&**obj).filter(|o| o.kind == kind) {
            let ns = obj.meta().namespace.as_deref().unwrap_or_default();
            let _ = queue.send(format!("{ns}/{}", o.name));
        }
    }
}

/// What the workload controllers read of a pod: its metadata (without managed fields), node,
/// node affinity and container ports, and its status without the container details.
pub fn slim_pod(mut p: Pod) -> Pod {
    p.metadata.managed_fields = None;
    if let Some(spec) = p.spec.take() {
        let containers = spec
            .containers
            .into_iter()
            .map(|c| Container {
                name: c.name,
                ports: c.ports,
                ..Container::default()
            })
            .collect();
        p.spec = Some(PodSpec {
            node_name: spec.node_name,
            affinity: spec.affinity,
            containers,
            ..PodSpec::default()
        });
    }
    if let Some(status) = p.status.as_mut() {
        for cs in status.container_statuses.iter_mut().flatten() {
            cs.last_state = None;
            cs.state = None;
            cs.image = String::new();
            cs.image_id = String::new();
        }
        status.init_container_statuses = None;
    }
    p
}

/// A cache that can say whether it holds a full list.
pub trait Synced {
    /// Whether a full list has been read.
    fn is_synced(&self) -> bool;
}

impl<K> Synced for Cache<K> {
    fn is_synced(&self) -> bool {
        self.synced()
    }
}

/// Waits until every cache holds a full list (nothing is decided before); false at shutdown.
pub async fn wait_synced(caches: &[&(dyn Synced + Sync)], shutdown: &CancellationToken) -> bool {
    while !caches.iter().all(|c| c.is_synced()) {
        tokio::select! {
            _ = shutdown.cancelled() => return false,
            _ = tokio::time::sleep(std::time::Duration::from_millis(50)) => {}
        }
    }
    true
}

/// Sends `key` to the work queue again after `after`.
pub fn later(tx: &mpsc::UnboundedSender<String>, key: &str, after: std::time::Duration) {
    let (tx, key) = (tx.clone(), key.to_string());
    tokio::spawn(async move {
        tokio::time::sleep(after).await;
        let _ = tx.send(key);
    });
}

/// A write's result, an object already gone counting as done.
pub fn ignore_gone(r: Result<(), kube::Error>) -> Result<(), kube::Error> {
    match r {
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        other => other,
    }
}

/// Merges `status` into the status of `name` (an object already gone counts as done).
pub async fn write_status<K>(
    api: &Api<K>,
    name: &str,
    status: serde_json::Value,
) -> Result<(), kube::Error>
where
    K: Clone + DeserializeOwned + std::fmt::Debug,
{
    write_status_over(api, name, None, status).await
}

/// Like [`write_status`], only over `resource_version` when given: a status decided on a copy
/// the object has moved on from is refused (409) and the sync runs again on the new one.
pub async fn write_status_over<K>(
    api: &Api<K>,
    name: &str,
    resource_version: Option<&str>,
    status: serde_json::Value,
) -> Result<(), kube::Error>
where
    K: Clone + DeserializeOwned + std::fmt::Debug,
{
    let mut body = serde_json::json!({ "status": status });
    if let Some(rv) = resource_version {
        body["metadata"] = serde_json::json!({ "resourceVersion": rv });
    }
    let patch = kube::api::Patch::Merge(body);
    let written = api
        .patch_status(name, &kube::api::PatchParams::default(), &patch)
        .await;
    ignore_gone(written.map(|_| ()))
}

/// Whether `labels` match `selector` (`matchLabels` and `matchExpressions`; an empty selector
/// matches everything).
pub fn selects(selector: &LabelSelector, labels: &BTreeMap<String, String>) -> bool {
    let equal = selector
        .match_labels
        .iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v));
    equal
        && selector.match_expressions.iter().flatten().all(|e| {
            let values = e.values.as_deref().unwrap_or_default();
            let value = labels.get(&e.key);
            match e.operator.as_str() {
                "In" => value.is_some_and(|v| values.contains(v)),
                "NotIn" => value.is_none_or(|v| !values.contains(v)),
                "Exists" => value.is_some(),
                "DoesNotExist" => value.is_none(),
                _ => false,
            }
        })
}

/// The controller reference of `obj`, if any.
pub fn controller_of<K: Resource>(obj: &K) -> Option<&OwnerReference> {
    obj.meta()
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true))
}

/// A controller reference to `owner`.
pub fn controller_ref<K: Resource<DynamicType = ()>>(owner: &K) -> OwnerReference {
    OwnerReference {
        api_version: K::api_version(&()).into_owned(),
        kind: K::kind(&()).into_owned(),
        name: owner.meta().name.clone().unwrap_or_default(),
        uid: owner.meta().uid.clone().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn selectors_match_labels_and_expressions() {
        let sel: LabelSelector = serde_json::from_value(json!({
            "matchLabels": {"app": "web"},
            "matchExpressions": [
                {"key": "tier", "operator": "In", "values": ["front", "edge"]},
                {"key": "canary", "operator": "DoesNotExist"},
            ],
        }))
        .unwrap();
        let labels = |v: serde_json::Value| -> BTreeMap<String, String> {
            serde_json::from_value(v).unwrap()
        };
        assert!(selects(
            &sel,
            &labels(json!({"app": "web", "tier": "edge"}))
        ));
        assert!(!selects(
            &sel,
            &labels(json!({"app": "web", "tier": "back"}))
        ));
        assert!(!selects(
            &sel,
            &labels(json!({"app": "web", "tier": "edge", "canary": "1"}))
        ));
        assert!(!selects(&sel, &labels(json!({"tier": "edge"}))));
        assert!(selects(&LabelSelector::default(), &labels(json!({}))));
    }
}
