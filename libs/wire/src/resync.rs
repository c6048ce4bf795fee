//! Reconnect without relist: the inventory exchange and the diff.
//!
//! 1. The edge sends the [`Digest`](crate::Digest) of what it holds in `Hello`.
//! 2. The cloud compares it with the digest of what the node should hold. Equal: it sends
//!    `ResyncDone { 0, 0 }` and the resync is over.
//! 3. Otherwise the cloud sends `InventoryRequest`; the edge answers with its full inventory in
//!    `Inventory` chunks ([`inventory_frames`]), the last one flagged; the cloud collects them
//!    ([`InventoryCollector`]) under an entry limit.
//! 4. The cloud diffs ([`plan_resync`]) and queues only the differences: the current object for
//!    every key missing or at another resourceVersion, a delete for every key the edge holds but
//!    should not. They travel as ordinary `Data` frames through the keyed queue and window.
//! 5. When every difference has been acked ([`ResyncProgress`]), the cloud sends
//!    `ResyncDone { upserts, deletes }`: the edge store now holds what the cloud meant it to hold
//!    when the resync began. The edge uses it as its "synced" signal.
//!
//! Inventory keys are canonical object keys (`resource/namespace/name`, see
//! [`object_key`](crate::object_key)); a hub tracking resync progress through acks should use the
//! same key for the keyed queue.

use std::collections::{HashMap, HashSet};

use crate::error::InventoryError;
use crate::frame::{Frame, InventoryEntry};

/// Default most entries an inventory may hold.
pub const DEFAULT_MAX_INVENTORY: usize = 1 << 20;

/// Encoded bytes allowed per entry beyond its key and resourceVersion (array and string headers).
const ENTRY_OVERHEAD: usize = 12;

/// Encoded bytes of an `Inventory` frame beyond its entries (format byte, tag, headers).
const FRAME_OVERHEAD: usize = 32;

/// A complete inventory: key → resourceVersion.
pub type Inventory = HashMap<String, String>;

/// Collects `Inventory` chunks on the cloud side.
#[derive(Debug)]
pub struct InventoryCollector {
    entries: Inventory,
    max_entries: usize,
    complete: bool,
}

/// What differs between what a node holds and what it should hold.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ResyncPlan {
    /// Keys to send (missing at the edge, or held at another resourceVersion), sorted.
    pub upserts: Vec<String>,
    /// Keys to delete at the edge, sorted.
    pub deletes: Vec<String>,
}

/// Tracks the acks of a resync's differences and says when to send `ResyncDone`.
#[derive(Debug)]
pub struct ResyncProgress {
    waiting: HashSet<String>,
    upserts: u32,
    deletes: u32,
    announced: bool,
}

/// Splits an inventory into `Inventory` frames of at most about `max_frame` encoded bytes each.
/// Always yields at least one frame, and the last one has `last: true`.
pub fn inventory_frames(
    entries: impl IntoIterator<Item = InventoryEntry>,
    max_frame: usize,
) -> Vec<Frame> {
    let budget = max_frame.saturating_sub(FRAME_OVERHEAD).max(1);
    let mut frames = Vec::new();
    let mut chunk = Vec::new();
    let mut size = 0;
    for entry in entries {
        let len = entry.key.len() + entry.resource_version.len() + ENTRY_OVERHEAD;
        if !chunk.is_empty() && size + len > budget {
            frames.push(Frame::Inventory {
                entries: std::mem::take(&mut chunk),
                last: false,
            });
            size = 0;
        }
        size += len;
        chunk.push(entry);
    }
    frames.push(Frame::Inventory {
        entries: chunk,
        last: true,
    });
    frames
}

/// The differences between what the node should hold (`desired`, key → resourceVersion) and
/// what it holds (`held`).
pub fn plan_resync<K, V>(desired: impl IntoIterator<Item = (K, V)>, held: &Inventory) -> ResyncPlan
where
    K: AsRef<str>,
    V: AsRef<str>,
{
    let mut seen = HashSet::new();
    let mut plan = ResyncPlan::default();
    for (key, rv) in desired {
        let key = key.as_ref();
        if held.get(key).map(String::as_str) != Some(rv.as_ref()) {
            plan.upserts.push(key.to_owned());
        }
        seen.insert(key.to_owned());
    }
    plan.deletes = held
        .keys()
        .filter(|k| !seen.contains(*k))
        .cloned()
        .collect();
    plan.upserts.sort_unstable();
    plan.deletes.sort_unstable();
    plan
}

// === impl InventoryCollector ===

impl InventoryCollector {
    pub fn new(max_entries: usize) -> Self {
        InventoryCollector {
            entries: HashMap::new(),
            max_entries,
            complete: false,
        }
    }

    /// Takes one chunk; returns the whole inventory after the last one.
    pub fn on_chunk(
        &mut self,
        entries: Vec<InventoryEntry>,
        last: bool,
    ) -> Result<Option<Inventory>, InventoryError> {
        if self.complete {
            return Err(InventoryError::AfterLast);
        }
        if self.entries.len().saturating_add(entries.len()) > self.max_entries {
            return Err(InventoryError::TooManyEntries {
                max: self.max_entries,
            });
        }
        for InventoryEntry {
            key,
            resource_version,
        } in entries
        {
            if self.entries.contains_key(&key) {
                return Err(InventoryError::DuplicateKey { key });
            }
            self.entries.insert(key, resource_version);
        }
        self.complete = last;
        Ok(last.then(|| std::mem::take(&mut self.entries)))
    }
}

// === impl ResyncPlan ===

impl ResyncPlan {
    pub fn is_empty(&self) -> bool {
        self.upserts.is_empty() && self.deletes.is_empty()
    }
}

// === impl ResyncProgress ===

impl ResyncProgress {
    /// Starts tracking a plan whose differences were queued under their keys.
    pub fn new(plan: &ResyncPlan) -> Self {
        ResyncProgress {
            waiting: plan.upserts.iter().chain(&plan.deletes).cloned().collect(),
            upserts: saturating_u32(plan.upserts.len()),
            deletes: saturating_u32(plan.deletes.len()),
            announced: false,
        }
    }

    /// A key was acked (any version of it: a newer one may have replaced the planned one).
    pub fn on_acked(&mut self, key: &str) {
        self.waiting.remove(key);
    }

    /// `ResyncDone`, exactly once, as soon as every difference is acked.
    pub fn poll_done(&mut self) -> Option<Frame> {
        if self.announced || !self.waiting.is_empty() {
            return None;
        }
        self.announced = true;
        Some(Frame::ResyncDone {
            upserts: self.upserts,
            deletes: self.deletes,
        })
    }

    /// Differences not yet acked.
    pub fn remaining(&self) -> usize {
        self.waiting.len()
    }
}

fn saturating_u32(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests;
