//! The kinds this node subscribed to (see [`apimachinery::subscribe`]), kept in the edge store
//! so they survive restarts: one record per kind in the store's collection [`RECORDS`] (made
//! on this node, so it carries no cloud resourceVersion and is never part of the resync
//! inventory). The cloud's initial sync of a kind ([`Handle::sync_kind`]) stores its objects
//! as the cloud's versions, removes what the node held of the kind that the cloud no longer
//! has, and marks the record synced, in one transaction; dropping a subscription
//! ([`Handle::drop_subscription`]) removes the record and every object of the kind.

use std::collections::HashMap;
use std::convert::Infallible;

use apimachinery::subscribe::Subscription;
use objstore::{ListOptions, Mutation, ObjKey, StoredObject};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::apply;
use crate::error::MetaError;
use crate::object::Parsed;
use crate::{Handle, uid_of};

/// The store collection of the subscription records (served by no API).
pub const RECORDS: &str = "subscriptions.edge.kubeedge.io";

/// One subscribed kind as stored.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SubscriptionRecord {
    pub subscription: Subscription,
    /// Unix seconds of the last local read of the kind.
    pub last_use: u64,
    /// The cloud's initial sync of the kind was stored.
    pub synced: bool,
    /// Delivered whatever the node does: never dropped for idleness.
    pub pinned: bool,
}

type Decide =
    Box<dyn FnOnce(Option<&StoredObject>, u64) -> Result<(Mutation, ()), Infallible> + Send>;

// === impl Handle ===

impl Handle {
    /// Every subscription record held.
    pub async fn subscriptions(&self) -> Result<Vec<SubscriptionRecord>, MetaError> {
        let list = self.store().list(list_of(RECORDS)).await?;
        Ok(list
            .items
            .iter()
            .filter_map(|o| serde_json::from_slice::<Value>(&o.value).ok())
            .filter_map(|v| serde_json::from_value(v["record"].clone()).ok())
            .collect())
    }

    /// Stores `record` (replacing the one of its kind).
    pub async fn put_subscription(&self, record: &SubscriptionRecord) -> Result<(), MetaError> {
        let (key, put) = record_put(record);
        self.writer()
            .mutate(key, move |_, revision| {
                Ok::<_, Infallible>((put(revision), ()))
            })
            .await?
            .unwrap_or_else(|e| match e {});
        Ok(())
    }

    /// Stores the cloud's initial sync of a kind: `objects` as the cloud's versions (a newer
    /// version held already stays), what is held of the kind and not in `objects` removed
    /// (unless it changed since it was read), and `record` (marked synced), all in one
    /// transaction. Returns how many objects the kind holds now.
    pub async fn sync_kind(
        &self,
        record: &SubscriptionRecord,
        objects: Vec<Value>,
    ) -> Result<usize, MetaError> {
        let resource = record.subscription.store_resource();
        let held = self.store().list(list_of(&resource)).await?;
        let mut fresh: HashMap<ObjKey, Value> = HashMap::new();
        for obj in objects {
            let meta = &obj["metadata"];
            let text = |k: &str| meta[k].as_str().unwrap_or_default().to_owned();
            if text("name").is_empty() {
                continue;
            }
            fresh.insert(ObjKey::new(&resource, text("namespace"), text("name")), obj);
        }
        let count = fresh.len();
        let mut items: Vec<(ObjKey, Decide)> = Vec::new();
        for gone in held.items.iter().filter(|o| !fresh.contains_key(&o.key)) {
            let read_rv = gone.resource_version.clone();
            let decide: Decide = Box::new(move |current, _| {
                Ok(match current {
                    Some(c) if c.resource_version == read_rv => (Mutation::Delete, ()),
                    _ => (Mutation::Keep, ()),
                })
            });
            items.push((gone.key.clone(), decide));
        }
        for (key, value) in fresh {
            let resource = resource.clone();
            let decide: Decide = Box::new(move |current, revision| {
                let parsed = Parsed {
                    uid: uid_of(&value),
                    resource_version: value["metadata"]["resourceVersion"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned(),
                    value,
                };
                Ok((apply::upsert(current, parsed, &resource, revision).0, ()))
            });
            items.push((key, decide));
        }
        let mut synced = record.clone();
        synced.synced = true;
        let (key, put) = record_put(&synced);
        items.push((key, Box::new(move |_, revision| Ok((put(revision), ())))));
        self.writer().mutate_many(items).await?;
        Ok(count)
    }

    /// Removes the record of `subscription` and every object of its kind; returns how many
    /// objects were removed.
    pub async fn drop_subscription(&self, subscription: &Subscription) -> Result<usize, MetaError> {
        let resource = subscription.store_resource();
        let held = self.store().list(list_of(&resource)).await?;
        let removed = held.items.len();
        let mut items: Vec<(ObjKey, Decide)> = held
            .items
            .iter()
            .map(|o| {
                let decide: Decide = Box::new(|_, _| Ok((Mutation::Delete, ())));
                (o.key.clone(), decide)
            })
            .collect();
        let decide: Decide = Box::new(|_, _| Ok((Mutation::Delete, ())));
        items.push((record_key(subscription), decide));
        self.writer().mutate_many(items).await?;
        Ok(removed)
    }
}

fn list_of(resource: &str) -> ListOptions {
    ListOptions {
        resource: resource.to_owned(),
        ..Default::default()
    }
}

fn record_key(subscription: &Subscription) -> ObjKey {
    ObjKey::new(RECORDS, "", subscription.store_resource())
}

/// The key of `record` and the put that stores it at a revision.
fn record_put(record: &SubscriptionRecord) -> (ObjKey, impl FnOnce(u64) -> Mutation + use<>) {
    let key = record_key(&record.subscription);
    let value = serde_json::json!({
        "metadata": {"name": key.name},
        // A record is strings, numbers and flags: it always serializes.
        "record": serde_json::to_value(record).expect("a record serializes"),
    });
    let put = move |revision| {
        let parsed = Parsed {
            uid: String::new(),
            resource_version: String::new(),
            value,
        };
        Mutation::Put(parsed.into_new_object(RECORDS, "", revision))
    };
    (key, put)
}

#[cfg(test)]
mod tests {
    use objstore::{StoreConfig, Writer};
    use serde_json::json;

    use super::*;

    fn handle() -> (tempfile::TempDir, Handle) {
        let dir = tempfile::tempdir().unwrap();
        let writer = Writer::open(dir.path().join("edge.db"), StoreConfig::default()).unwrap();
        (dir, Handle::new(writer))
    }

    fn record() -> SubscriptionRecord {
        SubscriptionRecord {
            subscription: Subscription::new("networking.k8s.io", "v1", "networkpolicies").unwrap(),
            last_use: 100,
            synced: false,
            pinned: false,
        }
    }

    fn policy(name: &str, rv: &str) -> Value {
        json!({"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": {"name": name, "namespace": "default", "uid": name, "resourceVersion": rv}})
    }

    async fn names(h: &Handle) -> Vec<String> {
        let list = h
            .store()
            .list(list_of("networkpolicies.networking.k8s.io"))
            .await;
        list.unwrap()
            .items
            .iter()
            .map(|o| o.key.name.clone())
            .collect()
    }

    #[tokio::test]
    async fn a_sync_stores_the_kind_removes_what_the_cloud_lost_and_marks_the_record_synced() {
        let (_dir, h) = handle();
        h.put_subscription(&record()).await.unwrap();
        let n = h
            .sync_kind(&record(), vec![policy("a", "5"), policy("b", "6")])
            .await;
        assert_eq!(n.unwrap(), 2);
        assert_eq!(names(&h).await, ["a", "b"]);
        h.sync_kind(&record(), vec![policy("b", "7")])
            .await
            .unwrap();
        assert_eq!(names(&h).await, ["b"]);
        let records = h.subscriptions().await.unwrap();
        assert_eq!(records.len(), 1);
        assert!(records[0].synced);
        // The records and the kind's objects stay out of the resync inventory only if they
        // carry no cloud version: the objects do, the record does not.
        let inventory = h.inventory().await.unwrap();
        assert_eq!(inventory.len(), 1, "{inventory:?}");
    }

    #[tokio::test]
    async fn dropping_a_subscription_removes_its_record_and_every_object_of_the_kind() {
        let (_dir, h) = handle();
        h.sync_kind(&record(), vec![policy("a", "5")])
            .await
            .unwrap();
        let removed = h.drop_subscription(&record().subscription).await.unwrap();
        assert_eq!(removed, 1);
        assert!(names(&h).await.is_empty());
        assert!(h.subscriptions().await.unwrap().is_empty());
    }
}
