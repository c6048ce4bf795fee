//! The receiving half of a session: which data frames arrived, which the application has durably
//! processed, and when to ack. Pure logic: time is the `now` the caller passes in.
//!
//! The application sees each seq at most once per session: [`Receiver::on_data`] answers
//! [`Arrival::Accept`] the first time and [`Arrival::Duplicate`] after that. It may process
//! accepted frames in any order (different objects commit independently), and reports each
//! with [`Receiver::processed`] once the result is durable. Acks cover only processed seqs, so an
//! ack means "on disk". If the application gives up on a frame it calls [`Receiver::forget`] and
//! the sender's next retransmission is accepted again.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::error::RecvError;
use crate::frame::{Ack, MAX_ACK_RANGES};

/// Settings of a [`Receiver`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecvConfig {
    /// The receive window advertised to the peer: the highest acceptable seq is
    /// `cumulative + window`. Default 128.
    pub window: u32,
    /// Ack at once when this many frames were processed since the last ack. Default 16.
    pub ack_every: u32,
    /// Otherwise ack this long after the first unacked frame was processed. Default 10 ms.
    pub ack_delay: Duration,
}

/// Receive state of one session's sequence space.
#[derive(Debug)]
pub struct Receiver {
    config: RecvConfig,
    /// Every seq up to here is processed.
    cumulative: u64,
    /// Seqs above `cumulative` that arrived, and whether they are processed.
    slots: BTreeMap<u64, Slot>,
    /// Processed since the last ack was produced.
    unacked: u32,
    ack_deadline: Option<Instant>,
    stats: RecvStats,
}

/// What to do with an arriving data frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arrival {
    /// First arrival: hand the message to the application.
    Accept,
    /// Seen before (delivered or already processed): drop it.
    Duplicate,
}

/// Counters of a receiver since it was made.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RecvStats {
    /// Frames accepted.
    pub accepted: u64,
    /// Duplicate frames dropped.
    pub duplicates: u64,
    /// Acks produced.
    pub acks: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Slot {
    Delivered,
    Processed,
}

// === impl RecvConfig ===

impl Default for RecvConfig {
    fn default() -> Self {
        RecvConfig {
            window: 128,
            ack_every: 16,
            ack_delay: Duration::from_millis(10),
        }
    }
}

// === impl Receiver ===

impl Receiver {
    /// A receiver for a new session; a window of 0 is taken as 1.
    pub fn new(mut config: RecvConfig) -> Self {
        config.window = config.window.max(1);
        Receiver {
            config,
            cumulative: 0,
            slots: BTreeMap::new(),
            unacked: 0,
            ack_deadline: None,
            stats: RecvStats::default(),
        }
    }

    /// A data frame with `seq` arrived. Errors mean the peer broke the protocol.
    pub fn on_data(&mut self, seq: u64, now: Instant) -> Result<Arrival, RecvError> {
        if seq == 0 {
            return Err(RecvError::ZeroSeq);
        }
        let limit = self
            .cumulative
            .saturating_add(u64::from(self.config.window));
        if seq > limit {
            return Err(RecvError::BeyondWindow { seq, limit });
        }
        if seq <= self.cumulative || self.slots.get(&seq) == Some(&Slot::Processed) {
            // The peer resends what we processed: our ack was lost or late, send one now.
            self.ack_deadline = Some(now);
            return Ok(self.duplicate());
        }
        if self.slots.contains_key(&seq) {
            return Ok(self.duplicate());
        }
        self.slots.insert(seq, Slot::Delivered);
        self.stats.accepted += 1;
        Ok(Arrival::Accept)
    }

    /// The application durably processed `seq`; it will be covered by the next ack.
    pub fn processed(&mut self, seq: u64, now: Instant) -> Result<(), RecvError> {
        let slot = self.slots.get_mut(&seq).filter(|s| **s == Slot::Delivered);
        let slot = slot.ok_or(RecvError::NotPending { seq })?;
        *slot = Slot::Processed;
        self.advance_cumulative();
        self.unacked += 1;
        let due = if self.unacked >= self.config.ack_every {
            now
        } else {
            now + self.config.ack_delay
        };
        self.ack_deadline = Some(self.ack_deadline.map_or(due, |d| d.min(due)));
        Ok(())
    }

    /// The application could not process `seq`: forget it, so the sender's retransmission is
    /// accepted again.
    pub fn forget(&mut self, seq: u64) -> Result<(), RecvError> {
        match self.slots.get(&seq) {
            Some(Slot::Delivered) => {
                self.slots.remove(&seq);
                Ok(())
            }
            _ => Err(RecvError::NotPending { seq }),
        }
    }

    /// An ack if one is due at `now`; producing it resets the ack timer.
    pub fn poll_ack(&mut self, now: Instant) -> Option<Ack> {
        let due = self.ack_deadline.is_some_and(|d| d <= now);
        due.then(|| {
            self.ack_deadline = None;
            self.unacked = 0;
            self.stats.acks += 1;
            self.ack()
        })
    }

    /// When the next ack falls due, if one is pending.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.ack_deadline
    }

    /// The current ack, without touching the timer (e.g. to answer right away on shutdown).
    pub fn ack(&self) -> Ack {
        let mut selective: Vec<(u64, u64)> = Vec::new();
        let processed = self.slots.iter().filter(|(_, s)| **s == Slot::Processed);
        for (&seq, _) in processed {
            if let Some((_, end)) = selective.last_mut()
                && *end + 1 == seq
            {
                *end = seq;
            } else if selective.len() == MAX_ACK_RANGES {
                break;
            } else {
                selective.push((seq, seq));
            }
        }
        Ack {
            cumulative: self.cumulative,
            selective,
        }
    }

    /// Every seq up to this one is processed.
    pub fn cumulative(&self) -> u64 {
        self.cumulative
    }

    /// Frames accepted and not yet processed.
    pub fn pending(&self) -> usize {
        self.slots
            .values()
            .filter(|s| **s == Slot::Delivered)
            .count()
    }

    /// The receive window to advertise in `Hello`/`Welcome`.
    pub fn window(&self) -> u32 {
        self.config.window
    }

    pub fn stats(&self) -> RecvStats {
        self.stats
    }

    fn duplicate(&mut self) -> Arrival {
        self.stats.duplicates += 1;
        Arrival::Duplicate
    }

    fn advance_cumulative(&mut self) {
        while let Some(entry) = self.slots.first_entry()
            && *entry.key() == self.cumulative + 1
            && *entry.get() == Slot::Processed
        {
            entry.remove();
            self.cumulative += 1;
        }
    }
}

#[cfg(test)]
mod tests;
