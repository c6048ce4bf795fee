//! A cache of decoded objects, keyed by object row id and checked by revision.
//!
//! A revision names exactly one object state, so an entry can only ever be used for the row
//! that carries the same revision: a stale entry is a miss, never a wrong answer. The writer
//! installs every state it commits (after the commit) and drops deleted objects; readers add
//! what they had to decode. Lists and gets then mostly hand out shared `Arc`s instead of
//! decoding rows. The cache holds at most `capacity` objects; beyond that, new objects are
//! simply not cached.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use crate::object::StoredObject;

/// Decoded objects by row id.
pub(crate) struct ObjectCache {
    entries: Mutex<HashMap<i64, Arc<StoredObject>>>,
    capacity: usize,
}

/// What the writer tells the cache after a commit.
pub(crate) enum CacheUpdate {
    /// Row `id` now holds this state.
    Set(i64, Arc<StoredObject>),
    /// Row `id` was deleted.
    Remove(i64),
}

// === impl ObjectCache ===

impl ObjectCache {
    pub(crate) fn new(capacity: usize) -> Self {
        Self {
            entries: Mutex::new(HashMap::new()),
            capacity,
        }
    }

    /// The cached state of row `id`, if it is the one at `revision`.
    pub(crate) fn get(&self, id: i64, revision: u64) -> Option<Arc<StoredObject>> {
        let entries = self.lock();
        entries.get(&id).filter(|o| o.revision == revision).cloned()
    }

    /// Adds a state a reader decoded, unless a newer one is already there or the cache is full.
    pub(crate) fn offer(&self, id: i64, object: &Arc<StoredObject>) {
        let mut entries = self.lock();
        let full = entries.len() >= self.capacity;
        match entries.get_mut(&id) {
            Some(have) if have.revision < object.revision => *have = object.clone(),
            Some(_) => {}
            None if full => {}
            None => {
                entries.insert(id, object.clone());
            }
        }
    }

    /// Applies the writer's committed changes, in order.
    pub(crate) fn apply(&self, updates: Vec<CacheUpdate>) {
        if updates.is_empty() || self.capacity == 0 {
            return;
        }
        let mut entries = self.lock();
        for update in updates {
            match update {
                CacheUpdate::Set(id, object) => {
                    if entries.len() < self.capacity || entries.contains_key(&id) {
                        entries.insert(id, object);
                    }
                }
                CacheUpdate::Remove(id) => {
                    entries.remove(&id);
                }
            }
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<i64, Arc<StoredObject>>> {
        // Plain data, no user code runs under the lock.
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::object::ObjKey;

    fn obj(revision: u64) -> Arc<StoredObject> {
        Arc::new(StoredObject {
            key: ObjKey::new("pods", "ns", "a"),
            uid: String::new(),
            resource_version: String::new(),
            revision,
            labels: Default::default(),
            fields: Default::default(),
            value: Default::default(),
        })
    }

    #[test]
    fn an_entry_is_only_used_for_its_own_revision() {
        let cache = ObjectCache::new(10);
        cache.apply(vec![CacheUpdate::Set(1, obj(5))]);
        assert!(cache.get(1, 5).is_some());
        assert!(cache.get(1, 6).is_none());
        assert!(cache.get(2, 5).is_none());
    }

    #[test]
    fn readers_never_replace_a_newer_state() {
        let cache = ObjectCache::new(10);
        cache.apply(vec![CacheUpdate::Set(1, obj(7))]);
        cache.offer(1, &obj(5));
        assert!(cache.get(1, 7).is_some());
        cache.offer(1, &obj(9));
        assert!(cache.get(1, 9).is_some());
    }

    #[test]
    fn a_full_cache_takes_no_new_objects_but_updates_cached_ones() {
        let cache = ObjectCache::new(1);
        cache.apply(vec![
            CacheUpdate::Set(1, obj(1)),
            CacheUpdate::Set(2, obj(2)),
        ]);
        assert!(cache.get(2, 2).is_none());
        cache.offer(3, &obj(3));
        assert!(cache.get(3, 3).is_none());
        cache.apply(vec![CacheUpdate::Set(1, obj(4))]);
        assert!(cache.get(1, 4).is_some());
        cache.apply(vec![CacheUpdate::Remove(1)]);
        assert!(cache.get(1, 4).is_none());
    }
}
