//! Write-through: the cloud's answer to a write a local client made (forwarded by lwproxy) is
//! applied to the edge store before the client gets it, so a client always reads its own
//! writes. The rule is the one a downstream object follows ([`crate::apply`]): the answer is
//! stored with its cloud resourceVersion, so when the same version arrives downstream later it
//! is already held and dropped, and a newer version held already is never replaced by the older
//! answer; a delete removes only the object it names, and not a newer version of it; and an
//! answer to a write of an existing object never brings back an object deleted meanwhile.

use std::convert::Infallible;
use std::sync::Arc;

use objstore::{ObjKey, StoredObject};
use serde_json::Value;

use crate::apply::{self, Outcome};
use crate::error::MetaError;
use crate::object::Parsed;
use crate::{Handle, uid_of};

/// What the cloud's answer to a forwarded write says the object is now.
#[derive(Clone, Debug, PartialEq)]
pub enum CloudAnswer {
    /// The object the write created (a `201` answer): its JSON, with its cloud
    /// resourceVersion. Stored whether or not anything is held.
    Created(Value),
    /// The object as the cloud holds it after a write to an existing object (an update or
    /// patch, or a delete that only marked it). Stored only over the object held: when none is,
    /// the object left the edge after the write was sent (its delete came downstream first),
    /// and the answer does not bring it back.
    Present(Value),
    /// The object is gone (a delete that removed it). `uid` and `resource_version` are those
    /// of its last state, empty when the answer did not carry them.
    Gone {
        uid: String,
        resource_version: String,
    },
}

/// The edge store after a write-through.
#[derive(Clone, Debug)]
pub struct WrittenThrough {
    /// What the store did with the answer.
    pub outcome: Outcome,
    /// The object held now (the answer, or a newer version held already); `None` when not held.
    pub object: Option<Arc<StoredObject>>,
    /// The local revision the answer stands at: the held object's, the revision of the local
    /// delete, or (nothing held, nothing changed) the store's current revision.
    pub revision: u64,
}

// === impl Handle ===

impl Handle {
    /// Applies the cloud's answer to a write forwarded for a local client (see the module doc)
    /// and returns what the store holds for `key` afterwards.
    pub async fn write_through(
        &self,
        key: ObjKey,
        answer: CloudAnswer,
    ) -> Result<WrittenThrough, MetaError> {
        let resource = key.resource.clone();
        let applied = self
            .writer()
            .mutate(key, move |current, revision| {
                Ok::<_, Infallible>(decide(current, answer, &resource, revision))
            })
            .await?;
        let Ok(applied) = applied;
        let revision = match (applied.revision, &applied.object) {
            (Some(changed), _) => changed,
            (None, Some(held)) => held.revision,
            (None, None) => self.store().revision(),
        };
        Ok(WrittenThrough {
            outcome: applied.output,
            object: applied.object,
            revision,
        })
    }
}

/// The store decision for `answer`, as for a downstream write.
fn decide(
    current: Option<&StoredObject>,
    answer: CloudAnswer,
    resource: &str,
    revision: u64,
) -> (objstore::Mutation, Outcome) {
    match answer {
        CloudAnswer::Present(_) if current.is_none() => {
            (objstore::Mutation::Keep, Outcome::Unchanged)
        }
        CloudAnswer::Created(value) | CloudAnswer::Present(value) => {
            let parsed = Parsed {
                uid: uid_of(&value),
                resource_version: value["metadata"]["resourceVersion"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
                value,
            };
            apply::upsert(current, parsed, resource, revision)
        }
        CloudAnswer::Gone {
            uid,
            resource_version,
        } => apply::delete(current, &uid, &resource_version),
    }
}

#[cfg(test)]
mod tests {
    use objstore::StoreConfig;
    use serde_json::json;

    use super::*;

    fn handle() -> (tempfile::TempDir, Handle) {
        let dir = tempfile::tempdir().unwrap();
        let store = objstore::Writer::open(dir.path().join("edge.db"), StoreConfig::default())
            .expect("the store opens");
        (dir, Handle::new(store))
    }

    fn key() -> ObjKey {
        ObjKey::new("pods", "default", "p")
    }

    fn pod(rv: &str, phase: &str) -> Value {
        json!({
            "metadata": {"name": "p", "namespace": "default", "uid": "u1", "resourceVersion": rv},
            "status": {"phase": phase},
        })
    }

    fn local_rv(obj: &StoredObject) -> String {
        let json: Value = serde_json::from_slice(&obj.value).unwrap();
        json["metadata"]["resourceVersion"]
            .as_str()
            .unwrap()
            .to_owned()
    }

    #[tokio::test]
    async fn an_answer_is_stored_with_its_cloud_version_and_a_local_revision() {
        let (_dir, h) = handle();
        let done = h
            .write_through(key(), CloudAnswer::Created(pod("100", "Pending")))
            .await
            .unwrap();
        assert_eq!(done.outcome, Outcome::Applied);
        let held = done.object.expect("held");
        assert_eq!(held.resource_version, "100");
        assert_eq!(done.revision, held.revision);
        assert_eq!(local_rv(&held), held.revision.to_string());
        // The same version arriving later changes nothing.
        let again = h
            .write_through(key(), CloudAnswer::Present(pod("100", "Pending")))
            .await
            .unwrap();
        assert_eq!(again.outcome, Outcome::Unchanged);
        assert_eq!(again.revision, held.revision);
    }

    #[tokio::test]
    async fn an_older_answer_never_replaces_a_newer_version_held() {
        let (_dir, h) = handle();
        h.write_through(key(), CloudAnswer::Created(pod("101", "Running")))
            .await
            .unwrap();
        let done = h
            .write_through(key(), CloudAnswer::Present(pod("100", "Pending")))
            .await
            .unwrap();
        assert_eq!(done.outcome, Outcome::Unchanged);
        let held = done.object.expect("still held");
        assert_eq!(held.resource_version, "101");
        let json: Value = serde_json::from_slice(&held.value).unwrap();
        assert_eq!(json["status"]["phase"], "Running");
    }

    #[tokio::test]
    async fn a_delete_answer_removes_the_object_unless_a_newer_one_is_held() {
        let (_dir, h) = handle();
        h.write_through(key(), CloudAnswer::Created(pod("100", "Pending")))
            .await
            .unwrap();
        let gone = |rv: &str| CloudAnswer::Gone {
            uid: "u1".into(),
            resource_version: rv.into(),
        };
        let done = h.write_through(key(), gone("99")).await.unwrap();
        assert_eq!(done.outcome, Outcome::Unchanged, "a newer version is held");
        let done = h.write_through(key(), gone("105")).await.unwrap();
        assert_eq!(done.outcome, Outcome::Removed);
        assert!(done.object.is_none());
        assert_eq!(done.revision, h.store().revision(), "the delete's revision");
        assert!(h.store().get(&key()).await.unwrap().is_none());
    }

    #[tokio::test]
    async fn an_answer_for_an_object_deleted_meanwhile_does_not_bring_it_back() {
        let (_dir, h) = handle();
        // The pod was deleted downstream before the answer to an update of it came back.
        let done = h
            .write_through(key(), CloudAnswer::Present(pod("100", "Running")))
            .await
            .unwrap();
        assert_eq!(done.outcome, Outcome::Unchanged);
        assert!(done.object.is_none());
        assert!(h.store().get(&key()).await.unwrap().is_none());
        // A create's answer is stored, held or not.
        let made = h
            .write_through(key(), CloudAnswer::Created(pod("101", "Pending")))
            .await
            .unwrap();
        assert_eq!(made.outcome, Outcome::Applied);
    }
}
