//! One direction's sending side, assembled: a [`KeyedQueue`] feeding a [`SendWindow`]. This is
//! what a hub keeps per node; it outlives sessions.

use std::time::Instant;

use beehive::{Message, MsgId};

use crate::error::{AckError, QueueFull};
use crate::frame::{Ack, DEFAULT_MAX_FRAME, data_frame_len};
use crate::queue::{KeyedQueue, Pushed};
use crate::window::{SendWindow, Transmit, WindowConfig};

/// Keyed queue plus send window for one peer.
///
/// A message whose `Data` frame would exceed the largest frame the link carries
/// ([`Outbound::set_max_frame`]) never enters the window: sending it would end the session, and
/// the next session would meet it again. It leaves the queue as if acked (its key's next version
/// may go) and waits in [`Outbound::take_oversized`] for the application, which reports it (and
/// answers a request it was the reply to).
#[derive(Debug)]
pub struct Outbound {
    queue: KeyedQueue,
    window: SendWindow,
    max_frame: usize,
    oversized: Vec<Oversized>,
}

/// A message dropped from the queue because its frame exceeds the link's limit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Oversized {
    /// Its queue key.
    pub key: String,
    /// The message, handed back.
    pub msg: Message,
    /// Its encoded `Data` frame size, in bytes.
    pub len: usize,
    /// The largest frame the link carries, in bytes.
    pub max: usize,
}

/// A message the peer acked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Acked {
    pub key: String,
    pub msg_id: MsgId,
}

// === impl Outbound ===

impl Outbound {
    pub fn new(queue_capacity: usize, window: WindowConfig) -> Self {
        Outbound {
            queue: KeyedQueue::new(queue_capacity),
            window: SendWindow::new(window),
            max_frame: DEFAULT_MAX_FRAME,
            oversized: Vec::new(),
        }
    }

    /// The largest encoded frame the link carries now: the smaller of this end's and the peer's
    /// limits. Default [`DEFAULT_MAX_FRAME`].
    pub fn set_max_frame(&mut self, max_frame: usize) {
        self.max_frame = max_frame;
    }

    /// Messages dropped as too large since the last call, oldest first.
    pub fn take_oversized(&mut self) -> Vec<Oversized> {
        std::mem::take(&mut self.oversized)
    }

    /// Queues `msg` as the latest version of `key` (see [`KeyedQueue::push`]).
    pub fn push(&mut self, key: impl Into<String>, msg: Message) -> Result<Pushed, QueueFull> {
        self.queue.push(key, msg)
    }

    /// The next frame to send at `now`: moves queued messages into the window while it has room,
    /// then asks the window. Call until it returns `None`.
    pub fn poll_transmit(&mut self, now: Instant) -> Option<Transmit> {
        self.fill();
        self.window.poll_transmit(now)
    }

    /// When the next retransmission falls due.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.window.poll_timeout()
    }

    /// Applies the peer's ack; returns what it newly acknowledged.
    pub fn on_ack(&mut self, ack: &Ack, now: Instant) -> Result<Vec<Acked>, AckError> {
        let msgs = self.window.on_ack(ack, now)?;
        let acked = msgs.iter().filter_map(|m| {
            let key = self.queue.acked(m.id())?;
            Some(Acked {
                key,
                msg_id: m.id(),
            })
        });
        Ok(acked.collect())
    }

    /// The session ended: unacked messages go back to the front of the queue (where a newer
    /// version of the same key supersedes them) and the next session numbers from 1.
    pub fn reset_for_new_session(&mut self) {
        let unacked = self.window.take_unacked();
        let foreign = self.queue.requeue(unacked);
        debug_assert!(
            foreign.is_empty(),
            "every message in the window came from the queue"
        );
    }

    /// Keeps only the queued (not in-flight) messages for which `keep(key, msg)` is true.
    pub fn retain(&mut self, keep: impl FnMut(&str, &Message) -> bool) {
        self.queue.retain(keep);
    }

    /// Narrows the window to the peer's receive window.
    pub fn set_peer_window(&mut self, recv_window: u32) {
        self.window.set_peer_window(recv_window);
    }

    /// True when nothing is queued and everything sent is acked.
    pub fn is_idle(&self) -> bool {
        self.queue.is_empty() && self.window.is_empty()
    }

    pub fn queue(&self) -> &KeyedQueue {
        &self.queue
    }

    pub fn window(&self) -> &SendWindow {
        &self.window
    }

    fn fill(&mut self) {
        while self.window.has_room() {
            let Some((key, msg)) = self.queue.pop() else {
                break;
            };
            let len = data_frame_len(&msg);
            if len > self.max_frame {
                self.queue.acked(msg.id());
                let max = self.max_frame;
                self.oversized.push(Oversized { key, msg, len, max });
                continue;
            }
            self.window
                .push(msg)
                .expect("has_room was checked just before");
        }
    }
}
