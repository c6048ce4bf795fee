//! Site-local services, filtered at the edge: what lwproxy serves of EndpointSlices and
//! Endpoints (list, get and watch, JSON and protobuf) shows each closed Service only the
//! endpoints its topology allows this node ([`filter`]: KubeEdge's `service-topology:
//! range-nodegroup`, OpenYurt's `topologyKeys`, Kubernetes' zone hints). The filter reads what
//! it needs from the edge store, so it holds while the cloud is away: this node's Node (its
//! `apps.kubeedge.io/belonging-to` group and its zone; the node rules deliver no other Node),
//! the NodeGroup it belongs to (edgecontroller sends it: its `status.nodeStatuses` are the
//! members) and the Services. Objects are rewritten on their way out ([`http`]); the store and
//! every resourceVersion stay as the cloud sent them.
//!
//! # Watches stay consistent
//!
//! When what the filter decides from changes (this node's group or zone, the group's members,
//! a Service's topology annotations), the content a watcher holds is stale although no object
//! of its watch changed. lwproxy then ends every open EndpointSlice and Endpoints watch, and
//! answers a watch that resumes from a resourceVersion older than the change (the epoch) with
//! a `410 Expired` ERROR event: client-go and kube-rs relist, and get the newly filtered
//! content. A change is noticed by a follower of the store and by every read that computes
//! the filter's inputs, whichever comes first; a stream checks the epoch before each event, so
//! no event filtered the new way goes out on a stream that started under the old one.

mod filter;
pub(crate) mod http;

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use apimachinery::sites;
use objstore::{Filter, ListOptions, ObjKey, StoreError, WatchOptions};
use serde_json::Value;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use filter::Mode;
pub use filter::Place;

/// The store collections the filter reads.
const NODES: &str = "nodes";
const SERVICES: &str = "services";
pub(crate) const ENDPOINT_SLICES: &str = "endpointslices.discovery.k8s.io";

/// How long a follower waits before reading the store again after its watch failed.
const FOLLOW_RETRY: Duration = Duration::from_secs(1);

/// The filter's inputs as last computed, and the epoch. edgedns calls it too: a closed headless
/// Service's DNS answers list the endpoints lwproxy would show.
pub struct Closure {
    store: objstore::Store,
    tracked: Mutex<Tracked>,
    epoch: watch::Sender<u64>,
}

/// What the filter last decided from: a change to any of it moves the epoch.
#[derive(Default)]
struct Tracked {
    /// The store revisions of this node's Node and NodeGroup the place was read at, and it.
    place: Option<((u64, u64), Place)>,
    /// Each Service's mode as last used.
    modes: HashMap<(String, String), Mode>,
}

/// Which object kind a response carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Served {
    EndpointSlices,
    Endpoints,
}

// === impl Closure ===

impl Closure {
    pub fn new(store: objstore::Store) -> Arc<Closure> {
        Arc::new(Closure {
            store,
            tracked: Mutex::default(),
            epoch: watch::Sender::new(0),
        })
    }

    /// The current epoch: a watch resuming from before it relists.
    pub(crate) fn epoch(&self) -> u64 {
        *self.epoch.borrow()
    }

    /// Follows the epoch's moves.
    pub fn epochs(&self) -> watch::Receiver<u64> {
        self.epoch.subscribe()
    }

    /// Trims `obj` (an EndpointSlice or Endpoints, as JSON) to what this node is shown; true
    /// when something was removed. `place` is where this node stands, read once per answer.
    pub async fn filter(
        &self,
        served: Served,
        obj: &mut Value,
        place: &mut Option<Place>,
    ) -> Result<bool, StoreError> {
        let meta = &obj["metadata"];
        let namespace = meta["namespace"].as_str().unwrap_or("").to_owned();
        let service = match served {
            Served::EndpointSlices => meta["labels"][sites::SERVICE_NAME_LABEL].as_str(),
            Served::Endpoints => meta["name"].as_str(),
        };
        let Some(service) = service.filter(|s| !s.is_empty()).map(str::to_owned) else {
            return Ok(false);
        };
        let mode = self.mode(&namespace, &service).await?;
        if mode == Mode::Open {
            return Ok(false);
        }
        let place = match place {
            Some(place) => place,
            None => place.insert(self.place().await?),
        };
        Ok(match served {
            Served::EndpointSlices => {
                let hinted =
                    mode == Mode::Hints && self.hinted(&namespace, &service, place).await?;
                filter::endpoint_slice(obj, mode, place, hinted)
            }
            Served::Endpoints => filter::endpoints(obj, mode, place),
        })
    }

    /// Re-reads every input the filter used (before a watch starts or hands out a bookmark).
    pub(crate) async fn refresh(&self) -> Result<(), StoreError> {
        self.place().await?;
        let services: Vec<(String, String)> = self.lock().modes.keys().cloned().collect();
        for (namespace, name) in services {
            self.mode(&namespace, &name).await?;
        }
        Ok(())
    }

    /// Keeps the epoch up to date with the store's Nodes, NodeGroups and Services until
    /// `shutdown`, so that idle watches end when their content goes stale.
    pub async fn follow(self: Arc<Self>, shutdown: CancellationToken) {
        let one = |resource: &'static str| {
            let this = self.clone();
            async move {
                let opts = WatchOptions::from_revision(0).resource(resource);
                let pass = || async { this.refresh().await };
                let apply = |event: objstore::WatchEvent| {
                    let this = this.clone();
                    async move {
                        if let Err(e) = this.changed(&event.object.key).await {
                            tracing::warn!(error = %e, "reading the site filter's inputs failed");
                        }
                    }
                };
                this.store
                    .follow("closure filter", opts, FOLLOW_RETRY, pass, apply)
                    .await
            }
        };
        tokio::select! {
            _ = shutdown.cancelled() => {}
            _ = futures::future::join3(
                one(NODES),
                one(sites::NODE_GROUP_RESOURCE),
                one(SERVICES),
            ) => {}
        }
    }

    /// Object `key` (a Node, NodeGroup or Service) changed in the store: what the filter
    /// decided from it is checked again.
    async fn changed(&self, key: &ObjKey) -> Result<(), StoreError> {
        if key.resource != SERVICES {
            return self.place().await.map(|_| ());
        }
        let id = (key.namespace.clone(), key.name.clone());
        if self.lock().modes.contains_key(&id) {
            self.mode(&key.namespace, &key.name).await?;
        }
        Ok(())
    }

    /// The mode of Service `namespace/name` as the store holds it now.
    async fn mode(&self, namespace: &str, name: &str) -> Result<Mode, StoreError> {
        let key = ObjKey::new(SERVICES, namespace, name);
        let svc = self.store.get(&key).await?;
        let mode = match &svc {
            Some(svc) => filter::mode(&serde_json::from_slice(&svc.value).unwrap_or_default()),
            None => Mode::Open,
        };
        let id = (namespace.to_owned(), name.to_owned());
        let previous = self.lock().modes.insert(id, mode);
        if previous.is_some_and(|p| p != mode) {
            self.advance(svc.map_or(0, |s| s.revision));
        }
        Ok(mode)
    }

    /// Where this node stands now (see the module doc).
    async fn place(&self) -> Result<Place, StoreError> {
        let nodes = self
            .store
            .list(ListOptions {
                resource: NODES.into(),
                limit: Some(2),
                ..ListOptions::default()
            })
            .await?;
        // The node rules send a node its own Node only.
        let [node] = nodes.items.as_slice() else {
            return Ok(Place::default());
        };
        let group_name = node
            .labels
            .get(sites::BELONGING_TO)
            .filter(|g| !g.is_empty());
        let group = match group_name {
            Some(g) => {
                let key = ObjKey::new(sites::NODE_GROUP_RESOURCE, "", g);
                self.store.get(&key).await?
            }
            None => None,
        };
        let revisions = (node.revision, group.as_ref().map_or(0, |g| g.revision));
        if let Some((at, place)) = &self.lock().place
            && *at == revisions
        {
            return Ok(place.clone());
        }
        let place = Place {
            node: node.key.name.clone(),
            zone: node.labels.get(sites::ZONE_LABEL).cloned(),
            members: group.map(|g| members(&serde_json::from_slice(&g.value).unwrap_or_default())),
        };
        let previous = self.lock().place.replace((revisions, place.clone()));
        if previous.is_some_and(|(_, p)| p != place) {
            self.advance(revisions.0.max(revisions.1));
        }
        Ok(place)
    }

    /// Whether zone hints apply to Service `namespace/name` for this node (from all its slices).
    async fn hinted(&self, namespace: &str, name: &str, place: &Place) -> Result<bool, StoreError> {
        if place.zone.is_none() {
            return Ok(false);
        }
        let mut filter = Filter {
            namespace: Some(namespace.to_owned()),
            ..Filter::default()
        };
        filter
            .labels
            .insert(sites::SERVICE_NAME_LABEL.to_owned(), name.to_owned());
        let slices = self
            .store
            .list(ListOptions {
                resource: ENDPOINT_SLICES.into(),
                filter,
                ..ListOptions::default()
            })
            .await?;
        let slices: Vec<Value> = slices
            .items
            .iter()
            .filter_map(|s| serde_json::from_slice(&s.value).ok())
            .collect();
        let endpoints = slices
            .iter()
            .flat_map(|s| s["endpoints"].as_array().into_iter().flatten());
        Ok(filter::hints_apply(place.zone.as_deref(), endpoints))
    }

    /// The inputs changed, as read from objects at revision `seen` (or older): watches that
    /// started before now are stale. A read can see a commit before the store's revision
    /// counter says so; the epoch is never below what was read.
    fn advance(&self, seen: u64) {
        let now = self.store.revision().max(seen);
        self.epoch.send_if_modified(|epoch| {
            let moved = now > *epoch;
            *epoch = (*epoch).max(now);
            moved
        });
        tracing::info!(
            epoch = now,
            "the site filter's inputs changed; endpoint watches restart"
        );
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Tracked> {
        self.tracked.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The members of a NodeGroup: `status.nodeStatuses[].nodeName` whose selection succeeded.
fn members(group: &Value) -> BTreeSet<String> {
    group["status"]["nodeStatuses"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|s| {
            s["selectionStatus"]
                .as_str()
                .is_none_or(|s| s == "Succeeded")
        })
        .filter_map(|s| s["nodeName"].as_str().map(str::to_owned))
        .collect()
}
