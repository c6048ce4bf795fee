//! The sending half of a session: sequence numbers, a sliding window of unacked messages,
//! per-message retransmission timers with exponential backoff, and an RTT estimator
//! (RFC 6298 with Karn's rule). Pure logic: time is the `now` the caller passes in.
//!
//! Sequence numbers are assigned when a message is first transmitted, not when it is pushed, so
//! after [`SendWindow::reset_for_new_session`] the unacked messages simply go out again, in the
//! same order, numbered from 1 in the new session.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::{Duration, Instant};

use beehive::Message;

use crate::error::{AckError, WindowFull};
use crate::frame::{Ack, Frame, MAX_ACK_RANGES};

/// Settings of a [`SendWindow`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WindowConfig {
    /// Most messages held (in flight or waiting for their first transmission), and the widest
    /// span of sequence numbers between the lowest unacked and the newest sent. Default 128.
    pub window: u32,
    /// Retransmission timeout before any RTT sample exists. Default 1 s (RFC 6298).
    pub initial_rto: Duration,
    /// Lower bound of the retransmission timeout. Default 200 ms.
    pub min_rto: Duration,
    /// Upper bound of the retransmission timeout, including backoff. Default 60 s.
    pub max_rto: Duration,
}

/// Messages in flight toward the peer, by sequence number.
#[derive(Debug)]
pub struct SendWindow {
    config: WindowConfig,
    /// Effective window: the smaller of ours and the peer's receive window.
    window: u64,
    next_seq: u64,
    highest_sent: u64,
    in_flight: BTreeMap<u64, Slot>,
    unsent: VecDeque<Message>,
    timers: BTreeSet<(Instant, u64)>,
    rtt: RttEstimator,
    stats: WindowStats,
}

/// One frame to put on the wire now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Transmit {
    pub seq: u64,
    pub msg: Message,
    /// 1 for the first transmission, 2 for the first retransmission, and so on.
    pub attempt: u32,
}

/// Counters of a window since it was made.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WindowStats {
    /// First transmissions.
    pub sent: u64,
    /// Retransmissions after a timeout.
    pub retransmitted: u64,
    /// Messages acked.
    pub acked: u64,
}

/// Smoothed round-trip time and the retransmission timeout derived from it (RFC 6298).
#[derive(Clone, Debug)]
pub struct RttEstimator {
    srtt: Option<Duration>,
    rttvar: Duration,
    initial: Duration,
    min: Duration,
    max: Duration,
}

#[derive(Debug)]
struct Slot {
    msg: Message,
    attempts: u32,
    rto: Duration,
    last_sent: Instant,
    first_sent: Instant,
    deadline: Instant,
}

// === impl WindowConfig ===

impl Default for WindowConfig {
    fn default() -> Self {
        WindowConfig {
            window: 128,
            initial_rto: Duration::from_secs(1),
            min_rto: Duration::from_millis(200),
            max_rto: Duration::from_secs(60),
        }
    }
}

// === impl SendWindow ===

impl SendWindow {
    pub fn new(config: WindowConfig) -> Self {
        SendWindow {
            window: u64::from(config.window.max(1)),
            rtt: RttEstimator::new(&config),
            config,
            next_seq: 1,
            highest_sent: 0,
            in_flight: BTreeMap::new(),
            unsent: VecDeque::new(),
            timers: BTreeSet::new(),
            stats: WindowStats::default(),
        }
    }

    /// Narrows the window to the peer's advertised receive window (from `Hello`/`Welcome`).
    pub fn set_peer_window(&mut self, recv_window: u32) {
        self.window = u64::from(self.config.window.min(recv_window).max(1));
    }

    /// The effective window.
    pub fn window(&self) -> u64 {
        self.window
    }

    /// True if [`push`](Self::push) would accept a message: fewer than `window` held, and the
    /// message could go out at once without stretching the sequence span past `window`. (A
    /// message is not taken early only to wait here, where a newer version could no longer
    /// replace it in the keyed queue.)
    pub fn has_room(&self) -> bool {
        let held = self.len() as u64;
        let span_end = self.next_seq + self.unsent.len() as u64;
        held < self.window && span_end < self.base() + self.window
    }

    /// Hands a message to the window; it goes out through [`poll_transmit`](Self::poll_transmit).
    /// A full window hands the message back.
    pub fn push(&mut self, msg: Message) -> Result<(), WindowFull> {
        if !self.has_room() {
            return Err(WindowFull { msg: Box::new(msg) });
        }
        self.unsent.push_back(msg);
        Ok(())
    }

    /// The next frame to send at `now`: a due retransmission first (oldest deadline first), then
    /// a new message if the sequence span allows. Call until it returns `None`.
    pub fn poll_transmit(&mut self, now: Instant) -> Option<Transmit> {
        if let Some(&(deadline, seq)) = self.timers.first()
            && deadline <= now
        {
            return Some(self.retransmit(seq, now));
        }
        if self.next_seq < self.base() + self.window && !self.unsent.is_empty() {
            return self.transmit_new(now);
        }
        None
    }

    /// When the next retransmission falls due. New messages are sent by
    /// [`poll_transmit`](Self::poll_transmit) right away and have no deadline.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.timers.first().map(|&(deadline, _)| deadline)
    }

    /// Applies an ack from the peer and returns the messages it newly acknowledges, in seq order
    /// for the cumulative part. Stale acks are harmless; acks for unsent seqs are errors.
    pub fn on_ack(&mut self, ack: &Ack, now: Instant) -> Result<Vec<Message>, AckError> {
        self.validate(ack)?;
        let mut settled = Settled::default();
        while let Some(entry) = self.in_flight.first_entry()
            && *entry.key() <= ack.cumulative
        {
            let (seq, slot) = entry.remove_entry();
            self.settle(seq, slot, now, &mut settled);
        }
        for &(start, end) in &ack.selective {
            let seqs: Vec<u64> = self.in_flight.range(start..=end).map(|(&s, _)| s).collect();
            for seq in seqs {
                let slot = self
                    .in_flight
                    .remove(&seq)
                    .expect("seq was just listed in in_flight");
                self.settle(seq, slot, now, &mut settled);
            }
        }
        if let Some(sample) = settled.rtt_sample {
            self.rtt.update(sample);
        }
        Ok(settled.msgs)
    }

    /// Ends the session: returns every message not yet acked (in flight in seq order, then the
    /// never-sent ones) and starts a fresh sequence space at 1.
    pub fn take_unacked(&mut self) -> Vec<Message> {
        let mut msgs: Vec<Message> = std::mem::take(&mut self.in_flight)
            .into_values()
            .map(|slot| slot.msg)
            .collect();
        msgs.extend(self.unsent.drain(..));
        self.timers.clear();
        self.next_seq = 1;
        self.highest_sent = 0;
        self.rtt = RttEstimator::new(&self.config);
        self.window = u64::from(self.config.window.max(1));
        msgs
    }

    /// Ends the session but keeps the unacked messages: they go out again in the same order with
    /// fresh sequence numbers from 1 and keep their message ids.
    pub fn reset_for_new_session(&mut self) {
        let msgs = self.take_unacked();
        self.unsent.extend(msgs);
    }

    /// Messages held: in flight plus waiting for their first transmission.
    pub fn len(&self) -> usize {
        self.in_flight.len() + self.unsent.len()
    }

    /// Messages sent and not acked.
    pub fn in_flight(&self) -> usize {
        self.in_flight.len()
    }

    /// True when every message pushed has been acked.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// How long the oldest unacked message has waited since its first transmission; a caller
    /// ends a session whose peer stops acking for too long.
    pub fn oldest_unacked_age(&self, now: Instant) -> Option<Duration> {
        self.in_flight
            .values()
            .map(|s| now.saturating_duration_since(s.first_sent))
            .max()
    }

    pub fn rtt(&self) -> &RttEstimator {
        &self.rtt
    }

    pub fn stats(&self) -> WindowStats {
        self.stats
    }

    /// The lowest seq not yet acked (or the next to assign): the window slides from here.
    fn base(&self) -> u64 {
        self.in_flight
            .first_key_value()
            .map_or(self.next_seq, |(&seq, _)| seq)
    }

    fn transmit_new(&mut self, now: Instant) -> Option<Transmit> {
        let msg = self.unsent.pop_front()?;
        let seq = self.next_seq;
        self.next_seq += 1;
        self.highest_sent = seq;
        let rto = self.rtt.rto();
        let slot = Slot {
            msg,
            attempts: 1,
            rto,
            last_sent: now,
            first_sent: now,
            deadline: now + rto,
        };
        self.timers.insert((slot.deadline, seq));
        let transmit = Transmit {
            seq,
            msg: slot.msg.clone(),
            attempt: 1,
        };
        self.in_flight.insert(seq, slot);
        self.stats.sent += 1;
        Some(transmit)
    }

    fn retransmit(&mut self, seq: u64, now: Instant) -> Transmit {
        let max_rto = self.config.max_rto;
        let slot = self
            .in_flight
            .get_mut(&seq)
            .expect("every timer belongs to an in-flight slot");
        self.timers.remove(&(slot.deadline, seq));
        slot.attempts += 1;
        slot.rto = (slot.rto * 2).min(max_rto);
        slot.last_sent = now;
        slot.deadline = now + slot.rto;
        self.timers.insert((slot.deadline, seq));
        self.stats.retransmitted += 1;
        Transmit {
            seq,
            msg: slot.msg.clone(),
            attempt: slot.attempts,
        }
    }

    fn validate(&self, ack: &Ack) -> Result<(), AckError> {
        if ack.selective.len() > MAX_ACK_RANGES {
            return Err(AckError::TooManyRanges {
                count: ack.selective.len(),
                max: MAX_ACK_RANGES,
            });
        }
        let beyond = |seq: u64| AckError::BeyondSent {
            seq,
            highest_sent: self.highest_sent,
        };
        if ack.cumulative > self.highest_sent {
            return Err(beyond(ack.cumulative));
        }
        for &(start, end) in &ack.selective {
            if start > end {
                return Err(AckError::InvertedRange { start, end });
            }
            if end > self.highest_sent {
                return Err(beyond(end));
            }
        }
        Ok(())
    }

    fn settle(&mut self, seq: u64, slot: Slot, now: Instant, settled: &mut Settled) {
        self.timers.remove(&(slot.deadline, seq));
        // Karn's rule: a retransmitted message gives no RTT sample, its ack is ambiguous. Of the
        // clean samples in one ack take the longest, the one the timeout must cover.
        if slot.attempts == 1 {
            let sample = now.saturating_duration_since(slot.last_sent);
            settled.rtt_sample = settled.rtt_sample.max(Some(sample));
        }
        self.stats.acked += 1;
        settled.msgs.push(slot.msg);
    }
}

#[derive(Default)]
struct Settled {
    msgs: Vec<Message>,
    rtt_sample: Option<Duration>,
}

// === impl Transmit ===

impl Transmit {
    /// The data frame carrying this transmission.
    pub fn into_frame(self) -> Frame {
        Frame::Data {
            seq: self.seq,
            msg: Box::new(self.msg),
        }
    }
}

// === impl RttEstimator ===

impl RttEstimator {
    /// Clock granularity term of RFC 6298.
    const GRANULARITY: Duration = Duration::from_millis(1);

    fn new(config: &WindowConfig) -> Self {
        RttEstimator {
            srtt: None,
            rttvar: Duration::ZERO,
            initial: config.initial_rto,
            min: config.min_rto,
            max: config.max_rto,
        }
    }

    /// Folds in one round-trip sample.
    pub fn update(&mut self, sample: Duration) {
        match self.srtt {
            None => {
                self.srtt = Some(sample);
                self.rttvar = sample / 2;
            }
            Some(srtt) => {
                self.rttvar = (self.rttvar * 3 + srtt.abs_diff(sample)) / 4;
                self.srtt = Some((srtt * 7 + sample) / 8);
            }
        }
    }

    /// The smoothed RTT, once a sample exists.
    pub fn smoothed(&self) -> Option<Duration> {
        self.srtt
    }

    /// The retransmission timeout for a first transmission.
    pub fn rto(&self) -> Duration {
        match self.srtt {
            None => self.initial,
            Some(srtt) => {
                (srtt + (self.rttvar * 4).max(Self::GRANULARITY)).clamp(self.min, self.max)
            }
        }
    }
}

#[cfg(test)]
mod tests;
