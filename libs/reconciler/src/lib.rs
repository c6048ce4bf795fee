//! reconciler: the runtime the cloud controllers share (the embedded control plane's stand-ins
//! for kube-controller-manager in `controllers`, and the edge platform's own in `sites`). One
//! watch and one in-memory [`Cache`] per resource type for every controller of the process
//! ([`Stores`]), with an index of objects by controller owner; each controller's work queue
//! ([`Queue`], [`work`]) reconciles one key at a time, follows the [`Action`] it returns and
//! retries failures with an exponential [`Backoff`]; watch tasks are tracked and end at
//! shutdown. Caches hand out `Arc`s: an object is held once however many controllers read it.
//!
//! A module plugs in with the process's one [`Stores`] (cloudcore makes it and hands it to each
//! controller module), then either the same shape as `controllers`:
//! `let (tx, rx) = queue(); let groups = stores.keyed::<NodeGroup>(&tx);`, other caches
//! followed with [`Cache::subscribe`] / [`Cache::owners`], and
//! `work(rx, "nodegroup", shutdown, |key| async { ...; Ok(Action::AwaitChange) })`; or a
//! kube-runtime `Controller` over the shared watch: `let (store, trigger) =
//! stores.cache::<NodeGroup>().reflect(); Controller::for_stream(trigger, store)`.
#![forbid(unsafe_code)]

mod queue;
mod slim;
mod store;
mod stores;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::Resource;
use tokio_util::sync::CancellationToken;

pub use queue::{
    Action, Backoff, Closed, Queue, Receiver, WORKERS, WorkQueue, queue, work, work_with,
};
pub use slim::slim_pod;
pub use store::{Cache, Change, queue_owner};
pub use stores::{Stores, Watched};

/// `namespace/name` (or `name` for a cluster-scoped object): how caches and queues name objects.
pub fn key<K: Resource>(obj: &K) -> String {
    let m = obj.meta();
    match m.namespace.as_deref() {
        Some(ns) if !ns.is_empty() => format!("{ns}/{}", m.name.as_deref().unwrap_or_default()),
        _ => m.name.clone().unwrap_or_default(),
    }
}

/// The controller reference of `obj`, if any.
pub fn controller_of<K: Resource>(obj: &K) -> Option<&OwnerReference> {
    obj.meta()
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true))
}

/// A cache that can say whether it holds a full list.
pub trait Synced {
    /// Whether a full list has been read.
    fn is_synced(&self) -> bool;
}

impl<K: Resource> Synced for Cache<K> {
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
