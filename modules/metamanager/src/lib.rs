//! metamanager: the edge store module, and the store's one writer. Downstream objects arrive
//! from edgehub as insert/update/delete messages on the [`Downstream`] queue, which only the
//! link holds; metamanager applies them to SQLite (idempotently: a duplicate or an older
//! version never overwrites a newer one, a delete must name the uid it removes) and only after
//! the transaction committed sends edgehub a response naming the message, which is what lets
//! edgehub ack to the cloud. Other modules send it queries (get or list) through its mailbox,
//! answered from the store, and upstream writes, which go into the outbox edgehub drains to the
//! cloud; whatever the mailbox brings is local, whichever module it names as its sender.
//! Readers that need more than queries (lwproxy, edgehub's resync) share the store through
//! [`Handle`], which gives out read handles only and does the few local writes others need
//! (lwproxy's offline status writes, edgehub's outbox acks) itself.
#![forbid(unsafe_code)]

mod apply;
mod config;
mod downstream;
mod error;
mod module;
pub mod object;
mod subscriptions;
mod through;

use std::convert::Infallible;
use std::sync::Arc;

use beehive::{ErrorChain, Message};
use objstore::{Digest, Enqueue, InventoryFilter, Mutation, ObjKey, Store, StoredObject, Writer};
use serde_json::Value;
use tokio::sync::Notify;

use crate::object::{Parsed, Target};

pub use apply::Outcome;
pub use config::{Config, DatabaseConfig};
pub use downstream::Downstream;
pub use error::MetaError;
pub use module::MetaManager;
pub use subscriptions::{RECORDS as SUBSCRIPTION_RECORDS, SubscriptionRecord};
pub use through::{CloudAnswer, WrittenThrough};

/// Module name.
pub const NAME: &str = "metamanager";
/// Module group.
pub const GROUP: &str = "meta";
/// edgehub's module name: commit reports of downstream writes go to it. Naming it as a
/// message's source grants nothing; the cloud's writes come only through [`Downstream`].
pub const HUB_MODULE: &str = "edgehub";

/// Shared access to the edge store: reads for everyone, and the few writes other modules make,
/// done here. The store's writer stays inside metamanager.
#[derive(Clone)]
pub struct Handle {
    writer: Arc<Writer>,
    outbox_changed: Arc<Notify>,
}

// === impl Handle ===

impl Handle {
    /// Takes the store's writer: from now on metamanager makes every write to it.
    pub fn new(writer: Writer) -> Self {
        Handle {
            writer: Arc::new(writer),
            outbox_changed: Arc::new(Notify::new()),
        }
    }

    /// The store, to read and watch (writes belong to metamanager).
    pub fn store(&self) -> &Store {
        &self.writer
    }

    /// A read handle on the store, to keep.
    pub fn reader(&self) -> Store {
        self.writer.reader()
    }

    /// The store's writer, for metamanager's own writes.
    pub(crate) fn writer(&self) -> &Writer {
        &self.writer
    }

    /// Removes the outbox entries the cloud acknowledged (ids of entries replaced meanwhile
    /// are ignored); returns how many were removed.
    pub async fn outbox_ack(&self, ids: Vec<u64>) -> Result<usize, MetaError> {
        Ok(self.writer.outbox_ack(ids).await?)
    }

    /// `Ok` while the edge store takes writes, else why not (for `/readyz`): the error of
    /// the last write, with its causes, until metamanager's retry or probe commits again.
    pub fn ready(&self) -> Result<(), String> {
        match self.writer.write_failure() {
            None => Ok(()),
            Some(e) => Err(format!("edge store cannot write: {}", ErrorChain(&e))),
        }
    }

    /// Resolves when something was added to the outbox since the last call.
    pub async fn outbox_changed(&self) {
        self.outbox_changed.notified().await
    }

    /// The digest of [`Handle::inventory`], for the reconnect resync.
    pub async fn digest(&self) -> Result<Digest, MetaError> {
        let held = self.inventory().await?;
        Ok(objstore::digest::of(
            held.iter().map(|(k, rv)| (k, rv.as_str())),
        ))
    }

    /// `(resource, namespace, name, cloud resourceVersion)` of everything held that came from
    /// the cloud. An object made on this node (a Lease a kubelet created offline) has no cloud
    /// resourceVersion until the cloud sends it back: it is left out, so the resync does not
    /// remove it as something the cloud does not have while its create is still queued.
    pub async fn inventory(&self) -> Result<Vec<(objstore::ObjKey, String)>, MetaError> {
        let mut held = self.writer.inventory(InventoryFilter::default()).await?;
        held.retain(|(_, rv)| !rv.is_empty());
        Ok(held)
    }

    /// Stores `value` as a change made on this node (lwproxy's offline status writes) and
    /// returns the object as stored. It gets a new local revision, which becomes its
    /// `metadata.resourceVersion`; the uid and cloud resourceVersion held for the object are
    /// kept (empty for an object the cloud never sent), so the cloud's next version of it still
    /// replaces the local one and the resync digest still names what the cloud sent.
    ///
    /// `based_on` is the local revision `value` was computed from, `None` when the object must
    /// not be held yet. If the held object is not at that revision any more (a downstream write
    /// came in between), nothing is stored and `Ok(None)` is returned: read again and retry.
    pub async fn put_local(
        &self,
        key: ObjKey,
        value: Value,
        based_on: Option<u64>,
    ) -> Result<Option<Arc<StoredObject>>, MetaError> {
        let resource = key.resource.clone();
        let applied = self
            .writer
            .mutate(key, move |current, revision| {
                match local_change(current, based_on, value, &resource, revision) {
                    Some(put) => Ok::<_, Infallible>((put, true)),
                    None => Ok((Mutation::Keep, false)),
                }
            })
            .await?;
        let Ok(applied) = applied;
        Ok(applied.object.filter(|_| applied.output))
    }

    /// [`Handle::put_local`] and, in the same store transaction, `upstream` queued for the
    /// cloud as metamanager queues an upstream write (coalesced with an unsent one for the same
    /// operation and resource): the edge never holds the change without the message that sends
    /// it, nor the reverse, whenever the process stops. Nothing is queued when nothing is
    /// stored (`Ok(None)`: the object changed since `based_on`).
    pub async fn put_local_and_queue(
        &self,
        key: ObjKey,
        value: Value,
        based_on: Option<u64>,
        upstream: &Message,
    ) -> Result<Option<Arc<StoredObject>>, MetaError> {
        let entry = outbox_entry(upstream)?;
        let resource = key.resource.clone();
        let applied = self
            .writer
            .mutate_and_queue(key, move |current, revision| {
                match local_change(current, based_on, value, &resource, revision) {
                    Some(put) => Ok::<_, Infallible>((put, true, Some(entry))),
                    None => Ok((Mutation::Keep, false, None)),
                }
            })
            .await?;
        let Ok((applied, queued)) = applied;
        if queued.is_some() {
            self.notify_outbox();
        }
        Ok(applied.object.filter(|_| applied.output))
    }

    pub(crate) fn notify_outbox(&self) {
        self.outbox_changed.notify_one();
    }
}

/// The put of a local change computed from revision `based_on`; `None` when the object is
/// not at that revision any more.
fn local_change(
    current: Option<&StoredObject>,
    based_on: Option<u64>,
    value: Value,
    resource: &str,
    revision: u64,
) -> Option<Mutation> {
    if current.map(|c| c.revision) != based_on {
        return None;
    }
    let (uid, cloud_rv) = match current {
        Some(held) => (held.uid.clone(), held.resource_version.clone()),
        None => (uid_of(&value), String::new()),
    };
    let parsed = Parsed {
        uid,
        resource_version: cloud_rv.clone(),
        value,
    };
    Some(Mutation::Put(
        parsed.into_new_object(resource, &cloud_rv, revision),
    ))
}

/// The outbox entry of an upstream write: keyed by operation and resource (so a newer write of
/// the same kind to the same object replaces an unsent one), the message made fire-and-forget
/// (the local sender has its answer; the cloud acks the queued copy without a reply).
pub(crate) fn outbox_entry(msg: &Message) -> Result<Enqueue, MetaError> {
    Target::parse(msg.resource())?;
    let mut queued = msg.clone();
    queued.header.sync = false;
    Ok(Enqueue {
        key: format!("{}:{}", msg.operation(), msg.resource()),
        payload: beehive::codec::encode(&queued).into(),
    })
}

fn uid_of(value: &Value) -> String {
    value["metadata"]["uid"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

#[cfg(test)]
mod tests {
    use objstore::StoreConfig;
    use serde_json::json;

    use super::*;
    use crate::apply::{Outcome, upsert};

    fn handle() -> (tempfile::TempDir, Handle) {
        let dir = tempfile::tempdir().unwrap();
        let writer = Writer::open(dir.path().join("edge.db"), StoreConfig::default()).unwrap();
        (dir, Handle::new(writer))
    }

    fn pod(rv: &str, phase: &str) -> Value {
        json!({
            "metadata": {"name": "p", "namespace": "default", "uid": "u1", "resourceVersion": rv},
            "spec": {"nodeName": "n1"},
            "status": {"phase": phase},
        })
    }

    /// Stores `obj` as the cloud's version, the way a downstream write does.
    async fn from_cloud(h: &Handle, obj: Value) -> Arc<StoredObject> {
        let bytes = serde_json::to_vec(&obj).unwrap();
        let parsed = Parsed::from_json("pods", &bytes).unwrap();
        let rv = parsed.resource_version.clone();
        let new = parsed.into_new_object("pods", &rv, h.store().revision() + 1);
        h.writer().put(key(), new).await.unwrap()
    }

    fn key() -> ObjKey {
        ObjKey::new("pods", "default", "p")
    }

    #[tokio::test]
    async fn a_local_change_gets_a_local_revision_and_keeps_the_cloud_version() {
        let (_dir, h) = handle();
        let held = from_cloud(&h, pod("100", "Pending")).await;
        let stored = h
            .put_local(key(), pod("100", "Running"), Some(held.revision))
            .await
            .unwrap()
            .expect("based on the held revision");
        assert!(stored.revision > held.revision);
        assert_eq!(
            (stored.uid.as_str(), stored.resource_version.as_str()),
            ("u1", "100")
        );
        assert_eq!(stored.field("status.phase"), Some("Running"));
        let json: Value = serde_json::from_slice(&stored.value).unwrap();
        assert_eq!(
            json["metadata"]["resourceVersion"],
            stored.revision.to_string()
        );
        // The cloud's next version replaces the local change; a repeat of the old one does not.
        assert_eq!(
            upsert(Some(&stored), parsed(pod("100", "Pending")), "pods", 9).1,
            Outcome::Unchanged
        );
        assert_eq!(
            upsert(Some(&stored), parsed(pod("101", "Running")), "pods", 9).1,
            Outcome::Applied
        );
    }

    #[tokio::test]
    async fn a_change_based_on_an_old_revision_stores_nothing() {
        let (_dir, h) = handle();
        let first = from_cloud(&h, pod("100", "Pending")).await;
        let second = from_cloud(&h, pod("101", "Pending")).await;
        let stale = h
            .put_local(key(), pod("", "Running"), Some(first.revision))
            .await;
        assert!(stale.unwrap().is_none());
        let absent = h.put_local(key(), pod("", "Running"), None).await;
        assert!(
            absent.unwrap().is_none(),
            "based on nothing, but the object is held"
        );
        let held = h.store().get(&key()).await.unwrap().unwrap();
        assert_eq!(held.revision, second.revision);
    }

    #[tokio::test]
    async fn an_object_the_cloud_never_sent_is_held_with_no_cloud_version() {
        let (_dir, h) = handle();
        let stored = h
            .put_local(key(), pod("", "Running"), None)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            (stored.uid.as_str(), stored.resource_version.as_str()),
            ("u1", "")
        );
        assert_eq!(
            upsert(Some(&stored), parsed(pod("7", "Running")), "pods", 9).1,
            Outcome::Applied
        );
    }

    fn status_message() -> Message {
        Message::new()
            .route(
                "lwproxy",
                "meta",
                "default/pods/p",
                beehive::Operation::Patch,
            )
            .with_content(b"{}".to_vec())
    }

    #[tokio::test]
    async fn a_local_change_and_its_upstream_message_are_stored_together_or_not_at_all() {
        let (_dir, h) = handle();
        let held = from_cloud(&h, pod("100", "Pending")).await;
        let mut msg = status_message();
        msg.header.sync = true;
        let stored = h
            .put_local_and_queue(key(), pod("100", "Running"), Some(held.revision), &msg)
            .await
            .unwrap()
            .expect("based on the held revision");
        let entries = h.store().outbox_peek(10).await.unwrap();
        assert_eq!(entries.len(), 1);
        assert_eq!(entries[0].key, "patch:default/pods/p");
        let queued: Message = beehive::codec::decode(&entries[0].payload).unwrap();
        assert!(!queued.header.sync, "the queued copy is fire-and-forget");
        assert_eq!(queued.resource(), "default/pods/p");
        assert_eq!(stored.field("status.phase"), Some("Running"));

        // Based on a revision that is gone: neither the object nor a message.
        let stale = h
            .put_local_and_queue(key(), pod("", "Failed"), Some(held.revision), &msg)
            .await
            .unwrap();
        assert!(stale.is_none());
        assert_eq!(h.store().outbox_peek(10).await.unwrap(), entries);
        let now = h.store().get(&key()).await.unwrap().unwrap();
        assert_eq!(now.field("status.phase"), Some("Running"));
    }

    #[tokio::test]
    async fn an_object_made_here_is_not_in_the_inventory_the_resync_compares() {
        let (_dir, h) = handle();
        let mut made_here = pod("", "Running");
        made_here["metadata"]["name"] = json!("q");
        let q = ObjKey::new("pods", "default", "q");
        h.put_local(q, made_here, None).await.unwrap().unwrap();
        assert!(h.inventory().await.unwrap().is_empty());
        assert!(h.digest().await.unwrap() == Digest::EMPTY);
        from_cloud(&h, pod("100", "Pending")).await;
        assert_eq!(h.inventory().await.unwrap(), [(key(), "100".to_owned())]);
    }

    fn parsed(obj: Value) -> Parsed {
        Parsed::from_json("pods", &serde_json::to_vec(&obj).unwrap()).unwrap()
    }
}
