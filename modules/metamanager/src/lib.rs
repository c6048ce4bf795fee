//! metamanager: the edge store module. Downstream objects arrive from edgehub as
//! insert/update/delete messages; metamanager applies them to SQLite (idempotently: a duplicate
//! or an older version never overwrites a newer one, a delete must name the uid it removes) and
//! only after the transaction committed sends edgehub a response naming the message, which is
//! what lets edgehub ack to the cloud. Other modules send it queries (get or list), answered from
//! the store, and upstream writes, which go into the outbox edgehub drains to the cloud. Readers
//! that need more than queries (lwproxy, edgehub's resync) share the store through [`Handle`].
#![forbid(unsafe_code)]

mod apply;
mod config;
mod error;
mod module;
pub mod object;

use std::sync::Arc;

use objstore::{Digest, InventoryFilter, Store};
use tokio::sync::Notify;

pub use config::{Config, DatabaseConfig};
pub use error::MetaError;
pub use module::MetaManager;

/// Module name.
pub const NAME: &str = "metamanager";
/// Module group.
pub const GROUP: &str = "meta";
/// Messages from this module are downstream (from the cloud); everything else is local.
pub const HUB_MODULE: &str = "edgehub";

/// Shared access to the edge store for modules that read it directly.
#[derive(Clone)]
pub struct Handle {
    store: Store,
    outbox_changed: Arc<Notify>,
}

// === impl Handle ===

impl Handle {
    pub fn new(store: Store) -> Self {
        Handle {
            store,
            outbox_changed: Arc::new(Notify::new()),
        }
    }

    /// The store (reads and watches; writes belong to metamanager).
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// Resolves when something was added to the outbox since the last call.
    pub async fn outbox_changed(&self) {
        self.outbox_changed.notified().await
    }

    /// The digest of what the node holds, for the reconnect resync.
    pub async fn digest(&self) -> Result<Digest, MetaError> {
        Ok(self.store.digest(InventoryFilter::default()).await?)
    }

    /// `(resource, namespace, name, cloud resourceVersion)` of everything held.
    pub async fn inventory(&self) -> Result<Vec<(objstore::ObjKey, String)>, MetaError> {
        Ok(self.store.inventory(InventoryFilter::default()).await?)
    }

    pub(crate) fn notify_outbox(&self) {
        self.outbox_changed.notify_one();
    }
}
