//! The echo of a write lwproxy applied itself while offline. Such a write is answered at a new
//! local revision and queued for the cloud; when the link is back the cloud applies it and
//! sends the result down, which the store holds at yet another local revision. A client (a
//! kubelet renewing its Lease) then writes with the revision of its last answer, which is no
//! longer the one held, although the object says what the client last saw: only the cloud's
//! bookkeeping moved (resourceVersion, uid and creationTimestamp of an object created here,
//! managedFields). Refusing that with a 409 would make every kubelet re-read its Lease after
//! every reconnect; since the client cannot overwrite anything it has not seen, its
//! precondition is taken as naming the version held.
//!
//! [`Answered`] keeps, per object, the last answer of a write applied locally (a few objects:
//! the node's Lease, its Node and pods' status); a forwarded write of the object forgets it.

use std::collections::HashMap;
use std::sync::Mutex;

use objstore::{ObjKey, StoredObject};
use serde_json::Value;

/// Metadata the cloud sets or changes when it applies a write made here.
const BOOKKEEPING: [&str; 6] = [
    "resourceVersion",
    "uid",
    "creationTimestamp",
    "managedFields",
    "generation",
    "selfLink",
];

/// The last local answer per object: its local revision and the object answered.
#[derive(Debug, Default)]
pub(crate) struct Answered {
    by_key: Mutex<HashMap<ObjKey, (u64, Value)>>,
}

// === impl Answered ===

impl Answered {
    /// `stored` was answered for a write applied locally.
    pub(crate) fn record(&self, stored: &StoredObject) {
        let Ok(value) = serde_json::from_slice(&stored.value) else {
            return;
        };
        let mut map = self.by_key.lock().unwrap_or_else(|e| e.into_inner());
        map.insert(stored.key.clone(), (stored.revision, value));
    }

    /// A write of `key` went to the cloud: its answer replaces any local one.
    pub(crate) fn forget(&self, key: &ObjKey) {
        let mut map = self.by_key.lock().unwrap_or_else(|e| e.into_inner());
        map.remove(key);
    }

    /// The earlier local revision `held` stands for: the one of the last local answer for its
    /// key, when `held` says the same apart from the cloud's bookkeeping.
    pub(crate) fn alias(&self, held: &StoredObject) -> Option<u64> {
        let map = self.by_key.lock().unwrap_or_else(|e| e.into_inner());
        let (revision, answered) = map.get(&held.key)?;
        if *revision == held.revision {
            return None;
        }
        let held: Value = serde_json::from_slice(&held.value).ok()?;
        same_content(answered, &held).then_some(*revision)
    }
}

/// Whether `a` and `b` are the same object apart from [`BOOKKEEPING`] (and kind and
/// apiVersion, which the store may leave out).
pub(crate) fn same_content(a: &Value, b: &Value) -> bool {
    content(a) == content(b)
}

fn content(obj: &Value) -> Value {
    let mut obj = obj.clone();
    if let Some(map) = obj.as_object_mut() {
        map.remove("kind");
        map.remove("apiVersion");
    }
    if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        for field in BOOKKEEPING {
            meta.remove(field);
        }
    }
    obj
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn lease(rv: &str, uid: Option<&str>, renew: &str) -> Value {
        let mut meta = json!({"name": "n1", "namespace": "kube-node-lease", "resourceVersion": rv});
        if let Some(uid) = uid {
            meta["uid"] = json!(uid);
            meta["creationTimestamp"] = json!("2026-01-01T00:00:00Z");
        }
        json!({"metadata": meta, "spec": {"holderIdentity": "n1", "renewTime": renew}})
    }

    fn stored(revision: u64, value: &Value) -> StoredObject {
        StoredObject {
            key: ObjKey::new("leases.coordination.k8s.io", "kube-node-lease", "n1"),
            uid: String::new(),
            resource_version: String::new(),
            revision,
            labels: Default::default(),
            fields: Default::default(),
            value: serde_json::to_vec(value).unwrap().into(),
        }
    }

    #[test]
    fn the_cloud_echo_of_a_local_write_stands_for_its_answer() {
        let answered = Answered::default();
        answered.record(&stored(7, &lease("7", None, "t1")));
        let echo = stored(9, &lease("9", Some("u1"), "t1"));
        assert_eq!(answered.alias(&echo), Some(7));
    }

    #[test]
    fn a_change_the_client_has_not_seen_has_no_alias() {
        let answered = Answered::default();
        answered.record(&stored(7, &lease("7", None, "t1")));
        let changed = stored(9, &lease("9", Some("u1"), "t2"));
        assert_eq!(answered.alias(&changed), None);
        let same_revision = stored(7, &lease("7", None, "t1"));
        assert_eq!(answered.alias(&same_revision), None);
        answered.forget(&changed.key);
        assert_eq!(answered.alias(&stored(9, &lease("9", None, "t1"))), None);
    }
}
