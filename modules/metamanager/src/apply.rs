//! The decisions metamanager makes inside the store's transaction, kept free of I/O.

use objstore::{Mutation, StoredObject};

use crate::object::{Parsed, is_newer};

/// What happened to one downstream message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Stored (created or replaced).
    Applied,
    /// Deleted.
    Removed,
    /// Nothing to do: a duplicate, an older version, or a delete of something not held.
    Unchanged,
}

/// Upsert unless what is held is the same or a newer version.
pub fn upsert(
    current: Option<&StoredObject>,
    incoming: Parsed,
    resource: &str,
    revision: u64,
) -> (Mutation, Outcome) {
    let rv = incoming.resource_version.clone();
    if current.is_some_and(|cur| !is_newer(&rv, &cur.resource_version)) {
        return (Mutation::Keep, Outcome::Unchanged);
    }
    (
        Mutation::Put(incoming.into_new_object(resource, &rv, revision)),
        Outcome::Applied,
    )
}

/// Delete only the object the cloud deleted: same uid (when the delete names one), and not a
/// newer version than the deletion's.
pub fn delete(current: Option<&StoredObject>, uid: &str, rv: &str) -> (Mutation, Outcome) {
    let Some(cur) = current else {
        return (Mutation::Keep, Outcome::Unchanged);
    };
    let other_object = !uid.is_empty() && cur.uid != uid;
    let newer_held = !rv.is_empty() && is_newer(&cur.resource_version, rv);
    if other_object || newer_held {
        return (Mutation::Keep, Outcome::Unchanged);
    }
    (Mutation::Delete, Outcome::Removed)
}

#[cfg(test)]
mod tests {
    use objstore::ObjKey;

    use super::*;

    fn held(uid: &str, rv: &str) -> StoredObject {
        StoredObject {
            key: ObjKey::new("pods", "default", "p"),
            uid: uid.into(),
            resource_version: rv.into(),
            revision: 1,
            labels: Default::default(),
            fields: Default::default(),
            value: Default::default(),
        }
    }

    fn incoming(uid: &str, rv: &str) -> Parsed {
        let json = format!(r#"{{"metadata":{{"uid":"{uid}","resourceVersion":"{rv}"}}}}"#);
        Parsed::from_json("pods", json.as_bytes()).unwrap()
    }

    #[test]
    fn a_duplicate_or_older_version_never_overwrites_a_newer_one() {
        let cur = held("u1", "10");
        assert_eq!(
            upsert(Some(&cur), incoming("u1", "10"), "pods", 5).1,
            Outcome::Unchanged
        );
        assert_eq!(
            upsert(Some(&cur), incoming("u1", "9"), "pods", 5).1,
            Outcome::Unchanged
        );
        assert_eq!(
            upsert(Some(&cur), incoming("u1", "11"), "pods", 5).1,
            Outcome::Applied
        );
        assert_eq!(
            upsert(None, incoming("u1", "1"), "pods", 5).1,
            Outcome::Applied
        );
    }

    #[test]
    fn a_stale_delete_cannot_remove_a_recreated_object() {
        let recreated = held("u2", "20");
        assert_eq!(
            delete(Some(&recreated), "u1", "15"),
            (Mutation::Keep, Outcome::Unchanged)
        );
        assert_eq!(
            delete(Some(&recreated), "u2", "15"),
            (Mutation::Keep, Outcome::Unchanged)
        );
        assert_eq!(
            delete(Some(&recreated), "u2", "21"),
            (Mutation::Delete, Outcome::Removed)
        );
        assert_eq!(
            delete(Some(&recreated), "", ""),
            (Mutation::Delete, Outcome::Removed)
        );
        assert_eq!(
            delete(None, "u2", "21"),
            (Mutation::Keep, Outcome::Unchanged)
        );
    }
}
