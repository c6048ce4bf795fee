//! The garbage collector, as kube-controller-manager's: it watches the metadata of every
//! resource the API serves (found by discovery, again every minute and whenever a CRD changes) and keeps a
//! graph of owner references. A dependent whose owners are all gone is deleted (background);
//! one with other owners left loses the dangling reference. An owner being deleted in the
//! foreground (`foregroundDeletion` finalizer) has its dependents deleted first, then loses
//! the finalizer; one being orphaned (`orphan` finalizer) has its dependents' references to it
//! removed, then loses the finalizer. Nothing is decided before every watch holds a full list,
//! and an owner not seen is looked up by name before its dependents go. Owner kinds are known
//! from discovery, not from the objects in the graph, so the last object of a kind still has
//! its dependents collected; a dependent whose owner's kind is not known yet is looked at again.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PropagationPolicy};
use kube::core::PartialObjectMeta;
use kube::discovery::{ApiResource, Discovery, Scope, verbs};
use kube::runtime::watcher::{self, Event};
use serde_json::json;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// Controller name.
pub const NAME: &str = "garbage-collector";
const FOREGROUND: &str = "foregroundDeletion";
const ORPHAN: &str = "orphan";

/// One object in the graph.
#[derive(Clone, Debug)]
struct Node {
    resource: Arc<ApiResource>,
    namespaced: bool,
    namespace: Option<String>,
    name: String,
    owners: Vec<OwnerReference>,
    finalizers: Vec<String>,
    deleting: bool,
}

enum Seen {
    Applied(Arc<ApiResource>, bool, PartialObjectMeta<DynamicObject>),
    Deleted(PartialObjectMeta<DynamicObject>),
    Synced(String),
}

/// Runs the collector until shutdown.
pub async fn run(stores: reconciler::Stores, shutdown: CancellationToken) {
    let client = stores.client().clone();
    let (tx, mut rx) = mpsc::unbounded_channel::<Seen>();
    let mut watched: HashSet<String> = HashSet::new();
    let mut unsynced: HashSet<String> = HashSet::new();
    let mut graph = Graph::default();
    let mut discover = tokio::time::interval(Duration::from_secs(60));
    // A new or newly established CRD is discovered at once, not at the next minute.
    let crds_changed = Arc::new(tokio::sync::Notify::new());
    let notify = crds_changed.clone();
    stores
        .cache::<CustomResourceDefinition>()
        .subscribe(move |_| notify.notify_one());
    let mut work = tokio::time::interval(Duration::from_millis(200));
    work.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = crds_changed.notified() => discover.reset_immediately(),
            _ = discover.tick() => {
                match Discovery::new(client.clone()).run().await {
                    Ok(d) => {
                        for group in d.groups() {
                            for (ar, caps) in group.recommended_resources() {
                                let ok = [verbs::LIST, verbs::WATCH, verbs::DELETE]
                                    .iter()
                                    .all(|v| caps.supports_operation(v));
                                let id = format!("{}/{}", ar.api_version, ar.plural);
                                let namespaced = caps.scope == Scope::Namespaced;
                                let ar = Arc::new(ar);
                                graph.know(ar.clone(), namespaced);
                                if !ok || !watched.insert(id.clone()) {
                                    continue;
                                }
                                unsynced.insert(id.clone());
                                stores.spawn(watch(client.clone(), ar, namespaced, id, tx.clone(), shutdown.clone()));
                            }
                        }
                    }
                    Err(e) => tracing::info!(error = %e, "discovery failed; the collector retries"),
                }
            }
            seen = rx.recv() => match seen {
                Some(Seen::Applied(ar, namespaced, meta)) => graph.apply(ar, namespaced, meta),
                Some(Seen::Deleted(meta)) => graph.delete(meta),
                Some(Seen::Synced(id)) => { unsynced.remove(&id); }
                None => return,
            },
            _ = work.tick(), if unsynced.is_empty() && !watched.is_empty() => {
                graph.collect(&client).await;
            }
        }
    }
}

async fn watch(
    client: kube::Client,
    ar: Arc<ApiResource>,
    namespaced: bool,
    id: String,
    tx: mpsc::UnboundedSender<Seen>,
    shutdown: CancellationToken,
) {
    let api: Api<PartialObjectMeta<DynamicObject>> = Api::all_with(client, &*ar);
    let mut stream = watcher::watcher(api, Default::default()).boxed();
    loop {
        let event = tokio::select! {
            _ = shutdown.cancelled() => return,
            e = stream.next() => match e {
                Some(Ok(e)) => e,
                Some(Err(e)) => {
                    tracing::debug!(resource = %id, error = %e, "metadata watch failed; retrying");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    continue;
                }
                None => return,
            },
        };
        let sent = match event {
            Event::Apply(m) | Event::InitApply(m) => {
                tx.send(Seen::Applied(ar.clone(), namespaced, m))
            }
            Event::Delete(m) => tx.send(Seen::Deleted(m)),
            Event::InitDone => tx.send(Seen::Synced(id.clone())),
            Event::Init => Ok(()),
        };
        if sent.is_err() {
            return;
        }
    }
}

/// The owner graph and the work it gives.
#[derive(Default)]
struct Graph {
    nodes: HashMap<String, Node>,
    dependents: HashMap<String, BTreeSet<String>>,
    /// Dependents to look at: their owners may be gone.
    orphans: BTreeSet<String>,
    /// Owners being deleted with a finalizer this collector handles.
    finalizing: BTreeSet<String>,
    /// Every resource discovery listed, by (group, kind): its versions and scope.
    kinds: HashMap<(String, String), Vec<Served>>,
}

/// A resource discovery listed, and whether it is namespaced.
type Served = (Arc<ApiResource>, bool);

/// What the API says of an owner reference.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Owner {
    Exists,
    Gone,
    /// Its kind is not served (yet): nothing can be decided.
    UnknownKind,
}

// === impl Graph ===

impl Graph {
    /// Records a resource discovery listed.
    fn know(&mut self, ar: Arc<ApiResource>, namespaced: bool) {
        let versions = self
            .kinds
            .entry((ar.group.clone(), ar.kind.clone()))
            .or_default();
        if !versions
            .iter()
            .any(|(known, _)| known.version == ar.version)
        {
            versions.push((ar, namespaced));
        }
    }

    /// The resource of kind `kind` in `api_version`: that version if served, else another
    /// version of the same group and kind (an owner reference may name an older one).
    fn resource_of(&self, api_version: &str, kind: &str) -> Option<Served> {
        let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
        let versions = self.kinds.get(&(group.to_owned(), kind.to_owned()))?;
        let exact = versions.iter().find(|(ar, _)| ar.version == version);
        exact.or(versions.first()).cloned()
    }

    fn apply(
        &mut self,
        ar: Arc<ApiResource>,
        namespaced: bool,
        meta: PartialObjectMeta<DynamicObject>,
    ) {
        let m = meta.metadata;
        let Some(uid) = m.uid.clone() else { return };
        if let Some(old) = self.nodes.get(&uid) {
            for o in &old.owners {
                if let Some(d) = self.dependents.get_mut(&o.uid) {
                    d.remove(&uid);
                }
            }
        }
        let owners = m.owner_references.clone().unwrap_or_default();
        for o in &owners {
            self.dependents
                .entry(o.uid.clone())
                .or_default()
                .insert(uid.clone());
            if !self.nodes.contains_key(&o.uid) {
                self.orphans.insert(uid.clone());
            }
        }
        let finalizers = m.finalizers.clone().unwrap_or_default();
        let deleting = m.deletion_timestamp.is_some();
        if deleting && finalizers.iter().any(|f| f == FOREGROUND || f == ORPHAN) {
            self.finalizing.insert(uid.clone());
        }
        self.nodes.insert(
            uid,
            Node {
                resource: ar,
                namespaced,
                namespace: m.namespace,
                name: m.name.unwrap_or_default(),
                owners,
                finalizers,
                deleting,
            },
        );
    }

    fn delete(&mut self, meta: PartialObjectMeta<DynamicObject>) {
        let Some(uid) = meta.metadata.uid else { return };
        if let Some(old) = self.nodes.remove(&uid) {
            for o in &old.owners {
                if let Some(d) = self.dependents.get_mut(&o.uid) {
                    d.remove(&uid);
                }
                // An owner deleted in the foreground waits for its dependents: look again.
                if self
                    .nodes
                    .get(&o.uid)
                    .is_some_and(|n| n.deleting && n.finalizers.iter().any(|f| f == FOREGROUND))
                {
                    self.finalizing.insert(o.uid.clone());
                }
            }
        }
        for d in self.dependents.get(&uid).into_iter().flatten() {
            self.orphans.insert(d.clone());
        }
    }

    async fn collect(&mut self, client: &kube::Client) {
        let mut again = BTreeSet::new();
        for uid in std::mem::take(&mut self.orphans) {
            match self.settle_orphan(client, &uid).await {
                Ok(true) => {}
                Ok(false) => {
                    again.insert(uid);
                }
                Err(e) => {
                    tracing::info!(error = %e, "dependent not collected yet; retrying");
                    again.insert(uid);
                }
            }
        }
        self.orphans.extend(again);
        for uid in std::mem::take(&mut self.finalizing) {
            match self.finalize(client, &uid).await {
                Ok(true) => {}
                Ok(false) => {
                    self.finalizing.insert(uid);
                }
                Err(e) => {
                    tracing::info!(error = %e, "owner not finalized yet; retrying");
                    self.finalizing.insert(uid);
                }
            }
        }
    }

    /// A dependent some of whose owners may be gone: deleted when all are, else the dangling
    /// references removed. False when it must be looked at again (an owner of a kind not
    /// known yet).
    async fn settle_orphan(
        &mut self,
        client: &kube::Client,
        uid: &str,
    ) -> Result<bool, kube::Error> {
        let Some(node) = self.nodes.get(uid).cloned() else {
            return Ok(true);
        };
        let mut live = Vec::new();
        for o in &node.owners {
            let owner = match self.nodes.contains_key(&o.uid) {
                true => Owner::Exists,
                false => self.owner_exists(client, &node, o).await?,
            };
            match owner {
                Owner::Exists => live.push(o.clone()),
                Owner::Gone => {}
                Owner::UnknownKind => return Ok(false),
            }
        }
        if live.len() == node.owners.len() {
            return Ok(true);
        }
        let api = api_of(client, &node);
        if live.is_empty() {
            if node.deleting {
                return Ok(true);
            }
            tracing::info!(object = %node.name, kind = %node.resource.kind, "owner gone: deleting the dependent");
            let params = DeleteParams {
                propagation_policy: Some(PropagationPolicy::Background),
                preconditions: Some(kube::api::Preconditions {
                    uid: Some(uid.to_string()),
                    resource_version: None,
                }),
                ..DeleteParams::default()
            };
            ignore_gone_or_conflict(api.delete(&node.name, &params).await.map(|_| ()))?;
            return Ok(true);
        }
        let patch = json!({"metadata": {"ownerReferences": live}});
        ignore_gone_or_conflict(
            api.patch_metadata(&node.name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .map(|_| ()),
        )?;
        Ok(true)
    }

    /// Whether owner `o` of `node` exists, asked of the API (an owner not in the graph may be
    /// of a kind not watched yet, or its watch may lag).
    async fn owner_exists(
        &self,
        client: &kube::Client,
        node: &Node,
        o: &OwnerReference,
    ) -> Result<Owner, kube::Error> {
        let Some((ar, namespaced)) = self.resource_of(&o.api_version, &o.kind) else {
            return Ok(Owner::UnknownKind);
        };
        let api: Api<DynamicObject> = match (namespaced, &node.namespace) {
            (true, Some(ns)) => Api::namespaced_with(client.clone(), ns, &*ar),
            _ => Api::all_with(client.clone(), &*ar),
        };
        let found = api.get_metadata_opt(&o.name).await?;
        let same = found.is_some_and(|m| m.metadata.uid.as_deref() == Some(o.uid.as_str()));
        Ok(if same { Owner::Exists } else { Owner::Gone })
    }

    /// One step for an owner being deleted with a collector's finalizer; true when done.
    async fn finalize(&mut self, client: &kube::Client, uid: &str) -> Result<bool, kube::Error> {
        let Some(owner) = self.nodes.get(uid).cloned() else {
            return Ok(true);
        };
        let dependents: Vec<Node> = self
            .dependents
            .get(uid)
            .into_iter()
            .flatten()
            .filter_map(|d| self.nodes.get(d).cloned())
            .collect();
        let foreground = owner.finalizers.iter().any(|f| f == FOREGROUND);
        let orphan = owner.finalizers.iter().any(|f| f == ORPHAN);
        if orphan {
            for d in &dependents {
                let owners: Vec<&OwnerReference> =
                    d.owners.iter().filter(|o| o.uid != uid).collect();
                let patch = json!({"metadata": {"ownerReferences": owners}});
                ignore_gone_or_conflict(
                    api_of(client, d)
                        .patch_metadata(&d.name, &PatchParams::default(), &Patch::Merge(&patch))
                        .await
                        .map(|_| ()),
                )?;
            }
            self.remove_finalizer(client, &owner, ORPHAN).await?;
            return Ok(true);
        }
        if foreground {
            let blocking: Vec<&Node> = dependents
                .iter()
                .filter(|d| {
                    d.owners
                        .iter()
                        .any(|o| o.uid == uid && o.block_owner_deletion == Some(true))
                })
                .collect();
            for d in &dependents {
                if !d.deleting {
                    let params = DeleteParams {
                        propagation_policy: Some(PropagationPolicy::Foreground),
                        ..DeleteParams::default()
                    };
                    ignore_gone_or_conflict(
                        api_of(client, d).delete(&d.name, &params).await.map(|_| ()),
                    )?;
                }
            }
            if !blocking.is_empty() {
                return Ok(false);
            }
            self.remove_finalizer(client, &owner, FOREGROUND).await?;
        }
        Ok(true)
    }

    async fn remove_finalizer(
        &self,
        client: &kube::Client,
        owner: &Node,
        which: &str,
    ) -> Result<(), kube::Error> {
        let left: Vec<&String> = owner.finalizers.iter().filter(|f| *f != which).collect();
        let patch = json!({"metadata": {"finalizers": left}});
        ignore_gone_or_conflict(
            api_of(client, owner)
                .patch_metadata(&owner.name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .map(|_| ()),
        )
    }
}

fn api_of(client: &kube::Client, node: &Node) -> Api<DynamicObject> {
    match (&node.namespace, node.namespaced) {
        (Some(ns), true) => Api::namespaced_with(client.clone(), ns, &*node.resource),
        _ => Api::all_with(client.clone(), &*node.resource),
    }
}

/// A write whose object is gone (404) or changed under it (409): the next event decides again.
fn ignore_gone_or_conflict(r: Result<(), kube::Error>) -> Result<(), kube::Error> {
    match r {
        Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => Ok(()),
        other => other,
    }
}
