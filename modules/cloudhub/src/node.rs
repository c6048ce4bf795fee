//! Per-node state that outlives sessions: the downstream queue and window, the live session,
//! and counters.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use beehive::Message;
use dashmap::DashMap;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use wire::{Outbound, QueueFull, WindowConfig};

/// Every node cloudhub has heard of, connected or not.
pub(crate) struct Nodes {
    map: DashMap<String, Arc<NodeSlot>>,
    queue_capacity: usize,
    window: WindowConfig,
}

/// One node.
pub(crate) struct NodeSlot {
    pub name: String,
    /// Queue plus window of downstream messages (std mutex: held for short, non-async steps).
    pub outbound: Mutex<Outbound>,
    /// Woken when something was queued.
    pub wake: Notify,
    /// Held by the node's live session for its whole life, so a replacement waits for the old
    /// session to hand its unacked messages back to the queue.
    pub live: tokio::sync::Mutex<()>,
    /// The live session's id and its cancel token.
    pub current: Mutex<Option<(u64, CancellationToken)>>,
    /// Set when the queue overflowed: the session resyncs the node by inventory.
    pub overflowed: AtomicBool,
    pub connected: AtomicBool,
    pub stats: NodeStats,
    /// Byte counters of the live session.
    pub live_bytes: Mutex<Option<link::ByteCounters>>,
    /// Replies to the node's requests that found its queue full, oldest first: they join the
    /// queue as soon as it has room (a reply is never dropped; a resync would not restore it).
    pub held_replies: Mutex<VecDeque<(String, Message)>>,
    /// The live session's id and what opens streams to the node's kubelet API over it.
    pub tunnels: Mutex<Option<(u64, link::TunnelOpener)>>,
}

/// Counters of one node.
#[derive(Default)]
pub(crate) struct NodeStats {
    pub sent: AtomicU64,
    pub retransmits: AtomicU64,
    pub acked: AtomicU64,
    pub dropped: AtomicU64,
    /// Messages dropped unsent because their frame exceeded the link's limit.
    pub oversized: AtomicU64,
    pub resyncs: AtomicU64,
    pub upstream: AtomicU64,
    /// Frame bytes of sessions that ended (the live session's are in `live_bytes`).
    pub bytes_sent: AtomicU64,
    pub bytes_received: AtomicU64,
}

// === impl Nodes ===

impl Nodes {
    pub fn new(queue_capacity: usize, window: WindowConfig) -> Self {
        Nodes {
            map: DashMap::new(),
            queue_capacity,
            window,
        }
    }

    /// The slot of `node`, made on first use.
    pub fn slot(&self, node: &str) -> Arc<NodeSlot> {
        if let Some(slot) = self.map.get(node) {
            return slot.clone();
        }
        self.map
            .entry(node.to_string())
            .or_insert_with(|| {
                Arc::new(NodeSlot::new(
                    node,
                    self.queue_capacity,
                    self.window.clone(),
                ))
            })
            .clone()
    }

    pub fn get(&self, node: &str) -> Option<Arc<NodeSlot>> {
        self.map.get(node).map(|s| s.clone())
    }

    pub fn all(&self) -> Vec<Arc<NodeSlot>> {
        self.map.iter().map(|e| e.value().clone()).collect()
    }

    /// Queues a reply for `node` under `key`, after the replies already held; one that finds
    /// the queue full is held until it has room (see [`NodeSlot::held_replies`]). Returns how
    /// many replies are held now.
    pub fn push_reply(&self, node: &str, key: String, msg: Message) -> usize {
        let slot = self.slot(node);
        let mut held = slot.held_replies.lock().expect("replies lock poisoned");
        held.push_back((key, msg));
        slot.admit(&mut held);
        slot.wake.notify_one();
        held.len()
    }

    /// Queues a downstream message for `node` under `key` and wakes its session.
    pub fn push(&self, node: &str, key: String, msg: Message) -> Result<(), QueueFull> {
        let slot = self.slot(node);
        let pushed = slot
            .outbound
            .lock()
            .expect("outbound lock poisoned")
            .push(key, msg);
        match pushed {
            Ok(_) => {
                slot.wake.notify_one();
                Ok(())
            }
            Err(full) => {
                slot.stats.dropped.fetch_add(1, Ordering::Relaxed);
                slot.overflowed.store(true, Ordering::Release);
                slot.wake.notify_one();
                Err(full)
            }
        }
    }
}

// === impl NodeSlot ===

impl NodeSlot {
    fn new(name: &str, queue_capacity: usize, window: WindowConfig) -> Self {
        NodeSlot {
            name: name.to_string(),
            outbound: Mutex::new(Outbound::new(queue_capacity, window)),
            wake: Notify::new(),
            live: tokio::sync::Mutex::new(()),
            current: Mutex::new(None),
            overflowed: AtomicBool::new(false),
            connected: AtomicBool::new(false),
            stats: NodeStats::default(),
            live_bytes: Mutex::new(None),
            held_replies: Mutex::new(VecDeque::new()),
            tunnels: Mutex::new(None),
        }
    }

    /// Moves held replies into the queue while it has room; true if any moved.
    pub fn admit_held_replies(&self) -> bool {
        let mut held = self.held_replies.lock().expect("replies lock poisoned");
        self.admit(&mut held)
    }

    fn admit(&self, held: &mut VecDeque<(String, Message)>) -> bool {
        if held.is_empty() {
            return false;
        }
        let mut ob = self.outbound.lock().expect("outbound lock poisoned");
        let mut moved = false;
        while let Some((key, msg)) = held.pop_front() {
            if let Err(full) = ob.push(key, msg) {
                held.push_front((full.key, *full.msg));
                break;
            }
            moved = true;
        }
        moved
    }

    /// Frame bytes sent and received over all sessions, the live one included.
    pub fn bytes(&self) -> (u64, u64) {
        let live = self.live_bytes.lock().expect("bytes lock poisoned");
        let (s, r) = live.as_ref().map_or((0, 0), |b| (b.sent(), b.received()));
        (
            self.stats.bytes_sent.load(Ordering::Relaxed) + s,
            self.stats.bytes_received.load(Ordering::Relaxed) + r,
        )
    }

    /// The live session ended: its bytes join the totals.
    pub fn retire_bytes(&self) {
        if let Some(b) = self.live_bytes.lock().expect("bytes lock poisoned").take() {
            self.stats.bytes_sent.fetch_add(b.sent(), Ordering::Relaxed);
            self.stats
                .bytes_received
                .fetch_add(b.received(), Ordering::Relaxed);
        }
    }

    /// Queued plus in-flight downstream messages.
    pub fn depth(&self) -> (usize, usize) {
        let ob = self.outbound.lock().expect("outbound lock poisoned");
        (ob.queue().len(), ob.window().len())
    }
}
