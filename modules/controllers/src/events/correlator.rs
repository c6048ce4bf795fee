//! What kube's event recorder does before it writes (client-go `EventCorrelator`), as pure
//! logic driven by an explicit `now`: similar events (same source, object, type and reason)
//! with more than [`AGGREGATE_MAX`] distinct messages in [`AGGREGATE_WINDOW`] become one
//! "(combined from similar events)" event; an event equal to one already written grows that
//! Event's `count` (a patch) instead of making a new one; and a token bucket per source and
//! object ([`SPAM_BURST`], one token per [`SPAM_REFILL`]) drops what is over.

use std::collections::{HashMap, HashSet};
use std::hash::Hash;
use std::time::Duration;

use tokio::time::Instant;

/// Distinct messages of similar events in one window before they are combined (kube's
/// `defaultAggregateMaxEvents`).
pub const AGGREGATE_MAX: usize = 10;
/// The window similar events are counted in (kube's `defaultAggregateIntervalInSeconds`).
pub const AGGREGATE_WINDOW: Duration = Duration::from_secs(600);
/// Events one source may write about one object at once (kube's `defaultSpamBurst`).
pub const SPAM_BURST: f64 = 25.0;
/// Time to earn one more event (kube's `defaultSpamQPS` of 1/300).
pub const SPAM_REFILL: Duration = Duration::from_secs(300);
/// Keys each cache remembers; the least recently used is forgotten past it (kube's
/// `maxLruCacheEntries`).
pub const CACHE_MAX: usize = 4096;
/// The prefix of a combined event's message.
pub const COMBINED: &str = "(combined from similar events): ";

/// An event as a controller reports it, before correlation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Draft {
    /// The reporting component (`replicaset-controller`).
    pub source: String,
    /// The object it is about: apiVersion, kind, namespace, name, uid.
    pub object: ObjectKey,
    /// `Normal` or `Warning`.
    pub type_: String,
    /// The reason (`FailedCreate`).
    pub reason: String,
    /// The message.
    pub message: String,
}

/// Who an event is about.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct ObjectKey {
    /// `apps/v1`.
    pub api_version: String,
    /// `ReplicaSet`.
    pub kind: String,
    /// Its namespace (empty for cluster-scoped objects).
    pub namespace: String,
    /// Its name.
    pub name: String,
    /// Its uid.
    pub uid: String,
}

/// What to write for one reported event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Nothing: over the spam limit for its object.
    Drop,
    /// A new Event `name` with this message and count 1.
    Create {
        /// The Event's name.
        name: String,
        /// Its message (combined or as reported).
        message: String,
    },
    /// The Event `name` seen before: its count is now `count`.
    Patch {
        /// The Event's name.
        name: String,
        /// Its message (combined or as reported).
        message: String,
        /// The new count.
        count: i32,
    },
}

/// The correlator's memory: bounded caches of what was written, similar events and buckets.
pub struct Correlator {
    seen: Lru<(Similar, String), Written>,
    similar: Lru<Similar, Group>,
    buckets: Lru<(String, ObjectKey), Bucket>,
    names: u64,
}

/// Events that aggregate: same source, object, type and reason.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Similar {
    source: String,
    object: ObjectKey,
    type_: String,
    reason: String,
}

/// An Event already written.
struct Written {
    name: String,
    count: i32,
}

/// Distinct messages of similar events since `since`.
struct Group {
    messages: HashSet<String>,
    last: Instant,
}

/// A token bucket.
struct Bucket {
    tokens: f64,
    at: Instant,
}

/// A map that forgets its least recently used keys past [`CACHE_MAX`].
struct Lru<K, V> {
    entries: HashMap<K, (V, u64)>,
    tick: u64,
}

// === impl Correlator ===

impl Default for Correlator {
    fn default() -> Self {
        Correlator::new(0)
    }
}

impl Correlator {
    /// A correlator whose Event names count up from `seed` (the recorder seeds it from the
    /// clock, so a restarted one does not reuse names).
    pub fn new(seed: u64) -> Correlator {
        Correlator {
            seen: Lru::default(),
            similar: Lru::default(),
            buckets: Lru::default(),
            names: seed,
        }
    }

    /// What to write for `draft`, reported at `now`.
    pub fn correlate(&mut self, draft: &Draft, now: Instant) -> Decision {
        if !self.take_token(draft, now) {
            return Decision::Drop;
        }
        let similar = Similar {
            source: draft.source.clone(),
            object: draft.object.clone(),
            type_: draft.type_.clone(),
            reason: draft.reason.clone(),
        };
        let (key, message) = self.aggregate(similar, &draft.message, now);
        if let Some(w) = self.seen.get_mut(&key) {
            w.count = w.count.saturating_add(1);
            return Decision::Patch {
                name: w.name.clone(),
                message,
                count: w.count,
            };
        }
        self.names = self.names.wrapping_add(1);
        let name = format!("{}.{:x}", draft.object.name, self.names);
        let written = Written {
            name: name.clone(),
            count: 1,
        };
        self.seen.insert(key, written);
        Decision::Create { name, message }
    }

    /// The Event `name` was not found when patched (deleted, or expired): the next equal
    /// event is created again.
    pub fn forget(&mut self, name: &str) {
        self.seen.entries.retain(|_, (w, _)| w.name != name);
    }

    /// The key an event is counted under, and its message: past [`AGGREGATE_MAX`] distinct
    /// messages, all similar events share one key and a combined message.
    fn aggregate(
        &mut self,
        similar: Similar,
        message: &str,
        now: Instant,
    ) -> ((Similar, String), String) {
        let group = self.similar.entry(similar.clone(), || Group {
            messages: HashSet::new(),
            last: now,
        });
        if now.saturating_duration_since(group.last) > AGGREGATE_WINDOW {
            group.messages.clear();
        }
        group.last = now;
        group.messages.insert(message.to_string());
        if group.messages.len() < AGGREGATE_MAX {
            return ((similar, message.to_string()), message.to_string());
        }
        // One key for all of them (the empty message cannot be a reported one's key as
        // long as it stays below the threshold, and never reaches here alone).
        let combined = format!("{COMBINED}{message}");
        ((similar, String::from("\0combined")), combined)
    }

    /// Whether the source may write about the object now (spends a token if so).
    fn take_token(&mut self, draft: &Draft, now: Instant) -> bool {
        let key = (draft.source.clone(), draft.object.clone());
        let bucket = self.buckets.entry(key, || Bucket {
            tokens: SPAM_BURST,
            at: now,
        });
        let earned =
            now.saturating_duration_since(bucket.at).as_secs_f64() / SPAM_REFILL.as_secs_f64();
        bucket.tokens = (bucket.tokens + earned).min(SPAM_BURST);
        bucket.at = now;
        if bucket.tokens < 1.0 {
            return false;
        }
        bucket.tokens -= 1.0;
        true
    }
}

// === impl Lru ===

impl<K, V> Default for Lru<K, V> {
    fn default() -> Self {
        Lru {
            entries: HashMap::new(),
            tick: 0,
        }
    }
}

impl<K: Eq + Hash + Clone, V> Lru<K, V> {
    fn get_mut(&mut self, key: &K) -> Option<&mut V> {
        self.tick += 1;
        let tick = self.tick;
        self.entries.get_mut(key).map(|(v, used)| {
            *used = tick;
            v
        })
    }

    fn insert(&mut self, key: K, value: V) {
        self.tick += 1;
        self.entries.insert(key, (value, self.tick));
        self.evict();
    }

    fn entry(&mut self, key: K, make: impl FnOnce() -> V) -> &mut V {
        if !self.entries.contains_key(&key) {
            self.insert(key.clone(), make());
        }
        self.tick += 1;
        let tick = self.tick;
        let (v, used) = self
            .entries
            .get_mut(&key)
            .expect("invariant: inserted just above, and eviction spares the newest key");
        *used = tick;
        v
    }

    fn evict(&mut self) {
        if self.entries.len() <= CACHE_MAX {
            return;
        }
        let oldest = self
            .entries
            .iter()
            .min_by_key(|(_, (_, used))| *used)
            .map(|(k, _)| k.clone());
        if let Some(k) = oldest {
            self.entries.remove(&k);
        }
    }
}

#[cfg(test)]
mod tests;
