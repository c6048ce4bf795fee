//! One session's rules, with no I/O: the endpoint both hubs (and the load generator's simulated
//! node) drive, as quinn-proto's `Connection` is to quinn.
//!
//! A [`Session`] joins the receiver, the keepalive and the resync of one connection after the
//! handshake. The shell that owns the socket and the clock does three things in a loop:
//!
//! 1. every frame read goes to [`Session::handle_frame`], then [`Session::poll_event`] until it
//!    is empty (new data to process, acks, inventory questions and answers);
//! 2. [`Session::poll_transmit`] until it is empty, writing each frame;
//! 3. wait for the next frame, a local event, or [`Session::poll_timeout`].
//!
//! The send side's queue and window ([`Outbound`]) are passed in rather than owned: the cloud's
//! per-node queue outlives its sessions (controllers push into it while the node is away), and a
//! new session takes it over ([`Session::finish`] hands the unacked messages back to it).
//!
//! Rules held here, and tested on a virtual clock in `tests/session.rs`:
//! - data from the queue is held back while an inventory is pending: part of what is queued may
//!   already be at the edge, and the inventory says which;
//! - `ResyncDone` goes out once every key of the resync plan is acked;
//! - acks cover only what the application reported processed ([`Session::processed`]);
//! - the peer is dead after the keepalive timeout of silence, and any frame counts as life;
//! - a `Ping` is answered with a `Pong` before any data, so a busy window cannot starve liveness;
//! - a queued message too large for the link is never sent: it comes out as
//!   [`Event::Oversized`] (poll events after transmitting too) and the session goes on.

use std::collections::VecDeque;
use std::time::Instant;

use beehive::Message;

use crate::error::SessionError;
use crate::frame::{Frame, InventoryEntry};
use crate::handshake::ResyncStart;
use crate::keepalive::{Keepalive, KeepaliveAction, KeepaliveConfig};
use crate::outbound::{Acked, Outbound, Oversized};
use crate::recv::{Arrival, Receiver, RecvConfig};
use crate::resync::{Inventory, InventoryCollector, ResyncPlan, ResyncProgress, inventory_frames};

/// Which end of the link a session is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// cloudhub: asks for inventories and plans resyncs.
    Cloud,
    /// edgehub: answers inventory requests.
    Edge,
}

/// Settings of a [`Session`].
#[derive(Clone, Debug)]
pub struct SessionConfig {
    pub recv: RecvConfig,
    pub keepalive: KeepaliveConfig,
    /// Most inventory entries accepted from the edge (cloud only).
    pub max_inventory: usize,
}

/// Something the application must act on.
#[derive(Debug)]
pub enum Event {
    /// A data message seen for the first time this session. Report it with
    /// [`Session::processed`] once its effect is durable, or [`Session::forget`] it to take the
    /// peer's retransmission again.
    Data { seq: u64, msg: Box<Message> },
    /// The peer acked these messages of the send queue.
    Acked(Vec<Acked>),
    /// Cloud: the edge's whole inventory arrived. Queue what differs, then call
    /// [`Session::resync_planned`]; queued data stays held back until then.
    Inventory(Inventory),
    /// Edge: the cloud asks what the edge holds; answer with [`Session::send_inventory`].
    InventoryRequested,
    /// Edge: the cloud's resync is complete.
    ResyncDone { upserts: u32, deletes: u32 },
    /// A queued message was dropped unsent: its frame exceeds the link's limit. Report it, and
    /// if it answers a request of the peer, answer that request with an error instead. For a
    /// resync it counts as delivered (the resync cannot bring it either).
    Oversized(Box<Oversized>),
}

/// Counters of one session, for the shells' metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SessionStats {
    /// Data frames sent the first time.
    pub sent: u64,
    /// Data frames sent again.
    pub retransmits: u64,
    /// Messages the peer acked.
    pub acked: u64,
    /// Data frames accepted.
    pub received: u64,
    /// Data frames dropped as duplicates.
    pub duplicates: u64,
    /// Queued messages dropped unsent because their frame exceeds the link's limit.
    pub oversized: u64,
}

/// The state of one session after the handshake. See the module docs.
#[derive(Debug)]
pub struct Session {
    role: Role,
    receiver: Receiver,
    keepalive: Keepalive,
    config: SessionConfig,
    /// Frames to send before any data: pongs, resync frames, inventory chunks, close.
    control: VecDeque<Frame>,
    events: VecDeque<Event>,
    /// Cloud: an inventory was asked and has not fully arrived.
    collector: Option<InventoryCollector>,
    /// Cloud: the inventory arrived and the application has not planned the resync yet.
    planning: bool,
    progress: Option<ResyncProgress>,
    /// `close` was called: only control frames go out from now on.
    closing: bool,
    stats: SessionStats,
    /// `stats` as of the last [`Session::take_stats`].
    taken: SessionStats,
}

// === impl SessionConfig ===

impl Default for SessionConfig {
    fn default() -> Self {
        SessionConfig {
            recv: RecvConfig::default(),
            keepalive: KeepaliveConfig::default(),
            max_inventory: crate::resync::DEFAULT_MAX_INVENTORY,
        }
    }
}

// === impl Session ===

impl Session {
    /// A session that starts at `now` (the keepalive counts silence from here).
    pub fn new(role: Role, config: SessionConfig, now: Instant) -> Self {
        Session {
            role,
            receiver: Receiver::new(config.recv.clone()),
            keepalive: Keepalive::new(config.keepalive.clone(), now),
            config,
            control: VecDeque::new(),
            events: VecDeque::new(),
            collector: None,
            planning: false,
            progress: None,
            closing: false,
            stats: SessionStats::default(),
            taken: SessionStats::default(),
        }
    }

    pub fn role(&self) -> Role {
        self.role
    }

    /// Takes one frame from the peer. An error ends the session (the peer broke the protocol,
    /// or closed).
    pub fn handle_frame(
        &mut self,
        frame: Frame,
        outbound: &mut Outbound,
        now: Instant,
    ) -> Result<(), SessionError> {
        self.keepalive.on_frame(now);
        match frame {
            Frame::Data { seq, msg } => self.on_data(seq, msg, now),
            Frame::Ack(ack) => {
                let acked = outbound.on_ack(&ack, now)?;
                self.on_acked(acked);
                Ok(())
            }
            Frame::Ping { nonce } => {
                self.control.push_back(Frame::Pong { nonce });
                Ok(())
            }
            Frame::Pong { nonce } => {
                self.keepalive.on_pong(nonce, now);
                Ok(())
            }
            Frame::Close { reason } => Err(SessionError::PeerClosed(reason)),
            Frame::Inventory { entries, last } if self.role == Role::Cloud => {
                self.on_inventory(entries, last)
            }
            Frame::InventoryRequest if self.role == Role::Edge => {
                self.events.push_back(Event::InventoryRequested);
                Ok(())
            }
            Frame::ResyncDone { upserts, deletes } if self.role == Role::Edge => {
                self.events
                    .push_back(Event::ResyncDone { upserts, deletes });
                Ok(())
            }
            other => Err(SessionError::Unexpected(other.kind())),
        }
    }

    /// The next thing the application must act on.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// The next frame to send at `now`, or `None` until [`Session::poll_timeout`] or the next
    /// input. `Err(PeerDead)` when the peer was silent for the keepalive timeout.
    pub fn poll_transmit(
        &mut self,
        outbound: &mut Outbound,
        now: Instant,
    ) -> Result<Option<Frame>, SessionError> {
        if let Some(frame) = self.control.pop_front() {
            return Ok(Some(frame));
        }
        if self.closing {
            // No more pings or data; a peer that never closes its side still times out.
            return match self.keepalive.poll(now) {
                KeepaliveAction::PeerDead => Err(SessionError::PeerDead),
                KeepaliveAction::Ping(_) | KeepaliveAction::Wait => Ok(None),
            };
        }
        let data = match self.holding_data() {
            true => None,
            false => outbound.poll_transmit(now),
        };
        self.on_oversized(outbound.take_oversized());
        if let Some(t) = data {
            if t.attempt > 1 {
                self.stats.retransmits += 1;
            } else {
                self.stats.sent += 1;
            }
            return Ok(Some(t.into_frame()));
        }
        if let Some(ack) = self.receiver.poll_ack(now) {
            return Ok(Some(Frame::Ack(ack)));
        }
        match self.keepalive.poll(now) {
            KeepaliveAction::Ping(nonce) => return Ok(Some(Frame::Ping { nonce })),
            KeepaliveAction::PeerDead => return Err(SessionError::PeerDead),
            KeepaliveAction::Wait => {}
        }
        if let Some(done) = self.progress.as_mut().and_then(ResyncProgress::poll_done) {
            self.progress = None;
            return Ok(Some(done));
        }
        Ok(None)
    }

    /// When [`Session::poll_transmit`] may have something again without any input.
    pub fn poll_timeout(&self, outbound: &Outbound) -> Instant {
        if self.closing {
            return self.keepalive.poll_timeout();
        }
        let data = if self.holding_data() {
            None
        } else {
            outbound.poll_timeout()
        };
        [data, self.receiver.poll_timeout()]
            .into_iter()
            .flatten()
            .fold(self.keepalive.poll_timeout(), Instant::min)
    }

    /// The message of `seq` is durably processed: it may be acked.
    pub fn processed(&mut self, seq: u64, now: Instant) -> Result<(), SessionError> {
        Ok(self.receiver.processed(seq, now)?)
    }

    /// The application gave up on `seq`: the peer's retransmission is taken again.
    pub fn forget(&mut self, seq: u64) {
        // A seq that is not waiting has nothing to forget.
        let _ = self.receiver.forget(seq);
    }

    /// Cloud: sends the answer to the hello's digest (`ResyncDone {0, 0}` when the edge is up
    /// to date, or `InventoryRequest`, holding data back until the resync is planned).
    pub fn start_resync(&mut self, start: ResyncStart) {
        if start == ResyncStart::NeedInventory {
            self.request_inventory();
        } else {
            self.control.push_back(start.frame());
        }
    }

    /// Cloud: asks the edge for its inventory again (the node's queue overflowed). Nothing
    /// happens while one is already on its way.
    pub fn request_inventory(&mut self) {
        if self.holding_data() {
            return;
        }
        self.collector = Some(InventoryCollector::new(self.config.max_inventory));
        self.control.push_back(ResyncStart::NeedInventory.frame());
    }

    /// Cloud: the differences the inventory showed are queued; `ResyncDone` follows once the
    /// edge acked every key of `plan`, and queued data flows again.
    pub fn resync_planned(&mut self, plan: &ResyncPlan) {
        self.planning = false;
        self.progress = Some(ResyncProgress::new(plan));
    }

    /// Cloud: an inventory is asked and not yet planned (queued data is held back).
    pub fn inventory_pending(&self) -> bool {
        self.holding_data()
    }

    /// Edge: answers an inventory request with what the edge holds, in chunks that fit the
    /// peer's largest frame.
    pub fn send_inventory(
        &mut self,
        entries: impl IntoIterator<Item = InventoryEntry>,
        peer_max_frame: usize,
    ) {
        self.control
            .extend(inventory_frames(entries, peer_max_frame));
    }

    /// Ends the session: a `Close` with `reason` is the last frame out (after any control
    /// frames already queued), no data follows.
    pub fn close(&mut self, reason: impl Into<String>) {
        if !self.closing {
            self.closing = true;
            self.control.push_back(Frame::Close {
                reason: reason.into(),
            });
        }
    }

    /// The session is over: the unacked messages go back to the front of their keys in the
    /// queue, to be sent in the next session with fresh seqs and their original ids.
    pub fn finish(self, outbound: &mut Outbound) -> SessionStats {
        outbound.reset_for_new_session();
        self.stats
    }

    pub fn stats(&self) -> SessionStats {
        self.stats
    }

    /// What was counted since the last call (all of it at the first), for shells that add the
    /// session's counters to longer-lived ones.
    pub fn take_stats(&mut self) -> SessionStats {
        let (now, was) = (self.stats, std::mem::replace(&mut self.taken, self.stats));
        SessionStats {
            sent: now.sent - was.sent,
            retransmits: now.retransmits - was.retransmits,
            acked: now.acked - was.acked,
            received: now.received - was.received,
            duplicates: now.duplicates - was.duplicates,
            oversized: now.oversized - was.oversized,
        }
    }

    /// The round trip measured by the last answered ping.
    pub fn rtt(&self) -> Option<std::time::Duration> {
        self.keepalive.rtt()
    }

    fn holding_data(&self) -> bool {
        self.collector.is_some() || self.planning
    }

    fn on_data(&mut self, seq: u64, msg: Box<Message>, now: Instant) -> Result<(), SessionError> {
        if self.receiver.on_data(seq, now)? == Arrival::Duplicate {
            self.stats.duplicates += 1;
            return Ok(());
        }
        self.stats.received += 1;
        self.events.push_back(Event::Data { seq, msg });
        Ok(())
    }

    fn on_acked(&mut self, acked: Vec<Acked>) {
        if acked.is_empty() {
            return;
        }
        self.stats.acked += acked.len() as u64;
        if let Some(progress) = &mut self.progress {
            for a in &acked {
                progress.on_acked(&a.key);
            }
        }
        self.events.push_back(Event::Acked(acked));
    }

    fn on_oversized(&mut self, dropped: Vec<Oversized>) {
        for o in dropped {
            self.stats.oversized += 1;
            if let Some(progress) = &mut self.progress {
                progress.on_acked(&o.key);
            }
            self.events.push_back(Event::Oversized(Box::new(o)));
        }
    }

    fn on_inventory(
        &mut self,
        entries: Vec<InventoryEntry>,
        last: bool,
    ) -> Result<(), SessionError> {
        let collector = self
            .collector
            .as_mut()
            .ok_or(SessionError::Unexpected("inventory"))?;
        if let Some(inventory) = collector.on_chunk(entries, last)? {
            self.collector = None;
            self.planning = true;
            self.events.push_back(Event::Inventory(inventory));
        }
        Ok(())
    }
}
