//! The per-node downstream queue, keyed by object: only the latest pending version of an object
//! waits to be sent.
//!
//! Rules:
//! - **Latest wins, in place.** A message for a key that is already pending replaces the pending
//!   one and keeps its place in line, so an object that changes often is not pushed back behind
//!   quieter ones forever. A delete is just the newest message for its key, so it supersedes
//!   whatever was pending for that key; a re-create after a pending delete supersedes the delete
//!   (it carries the whole new object).
//! - **One version in flight per key.** [`KeyedQueue::pop`] never hands out a key whose previous
//!   version is still unacked; the newer version waits, keeping its place, until
//!   [`KeyedQueue::acked`]. The sender therefore guarantees per-object order: the edge never
//!   holds two versions of one object at once, so it cannot apply them in the wrong order, even
//!   though it processes different objects concurrently and resourceVersions are opaque.
//! - **Bounded, never silent.** A new key beyond `capacity` is refused with [`QueueFull`], which
//!   hands the message back; replacing a pending key always succeeds. The caller counts the
//!   refusal and schedules a resync for the node. Messages returned by a dying session
//!   ([`KeyedQueue::requeue`]) are always taken back, even beyond capacity, since they were
//!   already admitted once.
//!
//! Keys are opaque strings chosen by the caller (e.g. `default/pod/nginx`). Ordering between
//! keys is pop order: oldest first-queued first.

use std::collections::{BTreeMap, HashMap};

use beehive::{Message, MsgId, Operation, SmolStr};

use crate::error::QueueFull;

/// The queue's maps hash every message's key several times on its way (queued, sent, acked):
/// foldhash rather than SipHash, seeded per map. The keys are the cloud's own object names.
type Map<K, V> = HashMap<K, V, foldhash::fast::RandomState>;

/// Pending messages for one node, at most one per key.
#[derive(Debug)]
pub struct KeyedQueue {
    capacity: usize,
    pending: Map<String, Pending>,
    /// Pending keys that may be sent now (not in flight), by place in line.
    ready: BTreeMap<i64, String>,
    /// Keys with a version in flight: that version's message id and resourceVersion.
    in_flight: Map<String, (MsgId, Option<SmolStr>)>,
    by_id: Map<MsgId, String>,
    next_back: i64,
    next_front: i64,
}

/// What [`KeyedQueue::push`] did.
#[derive(Debug, PartialEq, Eq)]
pub enum Pushed {
    /// The key was not pending; the message joined the back of the line.
    Queued,
    /// The key was pending; the message replaced this older one, in place.
    Replaced(Box<Message>),
    /// The same version of the key (same resourceVersion, not a delete) is in flight already and
    /// nothing newer is pending: the message was not queued, so it is not sent twice.
    AlreadyInFlight,
}

#[derive(Debug)]
struct Pending {
    msg: Message,
    place: i64,
}

// === impl KeyedQueue ===

impl KeyedQueue {
    /// A queue that holds at most `capacity` pending keys.
    pub fn new(capacity: usize) -> Self {
        KeyedQueue {
            capacity,
            pending: Map::default(),
            ready: BTreeMap::new(),
            in_flight: Map::default(),
            by_id: Map::default(),
            next_back: 0,
            next_front: -1,
        }
    }

    /// Queues `msg` as the latest version of `key`.
    pub fn push(&mut self, key: impl Into<String>, msg: Message) -> Result<Pushed, QueueFull> {
        let key = key.into();
        if self.same_version_in_flight(&key, &msg) && !self.pending.contains_key(&key) {
            return Ok(Pushed::AlreadyInFlight);
        }
        if let Some(p) = self.pending.get_mut(&key) {
            let old = std::mem::replace(&mut p.msg, msg);
            return Ok(Pushed::Replaced(Box::new(old)));
        }
        if self.pending.len() >= self.capacity {
            return Err(QueueFull {
                key,
                msg: Box::new(msg),
                capacity: self.capacity,
            });
        }
        let place = self.next_back;
        self.next_back += 1;
        self.insert(key, msg, place);
        Ok(Pushed::Queued)
    }

    /// The next message to send: the first in line whose key has nothing in flight. The key is
    /// in flight from now until [`acked`](Self::acked) or [`requeue`](Self::requeue).
    pub fn pop(&mut self) -> Option<(String, Message)> {
        let (_, key) = self.ready.pop_first()?;
        let Pending { msg, .. } = self.pending.remove(&key).expect("ready keys are pending");
        let rv = msg.header.resource_version.clone();
        self.in_flight.insert(key.clone(), (msg.id(), rv));
        self.by_id.insert(msg.id(), key.clone());
        Some((key, msg))
    }

    /// The message `id` (from [`pop`](Self::pop)) was acked: its key may send its next version.
    /// Returns the key, or `None` if the id is not in flight from this queue.
    pub fn acked(&mut self, id: MsgId) -> Option<String> {
        let key = self.release(id)?;
        if let Some(p) = self.pending.get(&key) {
            self.ready.insert(p.place, key.clone());
        }
        Some(key)
    }

    /// Takes back the unacked messages of a session that ended (from
    /// [`SendWindow::take_unacked`](crate::SendWindow::take_unacked), in seq order). They go to
    /// the front of the line in that order; one whose key has a newer pending version is dropped,
    /// and the newer version takes its place in line. Messages this queue did not hand out are
    /// returned.
    pub fn requeue(&mut self, msgs: Vec<Message>) -> Vec<Message> {
        let mut foreign = Vec::new();
        for msg in msgs.into_iter().rev() {
            let Some(key) = self.release(msg.id()) else {
                foreign.push(msg);
                continue;
            };
            let place = self.next_front;
            self.next_front -= 1;
            match self.pending.get_mut(&key) {
                Some(newer) => newer.place = place,
                None => {
                    self.pending.insert(key.clone(), Pending { msg, place });
                }
            }
            self.ready.insert(place, key);
        }
        foreign.reverse();
        foreign
    }

    /// The pending message for `key`, if any.
    pub fn pending(&self, key: &str) -> Option<&Message> {
        self.pending.get(key).map(|p| &p.msg)
    }

    /// Ids of the pending messages, in no particular order.
    pub fn ids(&self) -> impl Iterator<Item = MsgId> + '_ {
        self.pending.values().map(|p| p.msg.id())
    }

    /// Keeps only the pending messages for which `keep(key, msg)` is true (in-flight versions are
    /// not touched). Used after a resync, to drop what the peer already holds.
    pub fn retain(&mut self, mut keep: impl FnMut(&str, &Message) -> bool) {
        let ready = &mut self.ready;
        self.pending.retain(|key, p| {
            let kept = keep(key, &p.msg);
            if !kept {
                ready.remove(&p.place);
            }
            kept
        });
    }

    /// True if a version of `key` is in flight.
    pub fn is_in_flight(&self, key: &str) -> bool {
        self.in_flight.contains_key(key)
    }

    /// Pending keys (waiting to be sent, including those blocked behind an in-flight version).
    pub fn len(&self) -> usize {
        self.pending.len()
    }

    pub fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }

    /// Keys with a version in flight.
    pub fn in_flight_len(&self) -> usize {
        self.in_flight.len()
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    fn insert(&mut self, key: String, msg: Message, place: i64) {
        if !self.in_flight.contains_key(&key) {
            self.ready.insert(place, key.clone());
        }
        self.pending.insert(key, Pending { msg, place });
    }

    fn same_version_in_flight(&self, key: &str, msg: &Message) -> bool {
        let rv = msg.header.resource_version.as_ref();
        let sending = self.in_flight.get(key).and_then(|(_, v)| v.as_ref());
        msg.router.operation != Operation::Delete && rv.is_some() && sending == rv
    }

    fn release(&mut self, id: MsgId) -> Option<String> {
        let key = self.by_id.remove(&id)?;
        self.in_flight.remove(&key);
        Some(key)
    }
}

#[cfg(test)]
mod tests;
