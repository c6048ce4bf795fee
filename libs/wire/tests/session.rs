//! The session rules on a virtual clock: a cloud [`Session`] and an edge [`Session`], each with
//! its [`Outbound`], joined by an in-memory network with a fixed one-way delay. Every frame goes
//! through the real encoder and decoder; time is plain `Instant` arithmetic, no sleeping.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::time::{Duration, Instant};

use beehive::{Message, MsgId, Operation};
use wire::{
    DEFAULT_MAX_FRAME, Event, Frame, InventoryEntry, KeepaliveConfig, Outbound, ResyncPlan,
    ResyncStart, Role, Session, SessionConfig, SessionError, WindowConfig, decode, encode,
    object_key,
};

const DELAY: Duration = Duration::from_millis(20);

/// One end: its session, its send queue, and what its application saw.
struct End {
    session: Session,
    outbound: Outbound,
    /// Process data as soon as it arrives (the edge committing at once).
    auto_process: bool,
    /// Data delivered to the application and not yet reported processed, by seq.
    unprocessed: BTreeMap<u64, Message>,
    /// Every data message delivered, in order.
    delivered: Vec<Message>,
    /// The inventory this end answers with (edge), or the inventories it got (cloud).
    inventory: Vec<InventoryEntry>,
    inventories: Vec<wire::Inventory>,
    resync_done: Vec<(u32, u32)>,
    acked: Vec<MsgId>,
    /// Every frame this end sent, by kind, with the time.
    sent: Vec<(Instant, Frame)>,
    /// Messages the session dropped as too large for the link.
    oversized: Vec<wire::Oversized>,
    ended: Option<SessionError>,
}

struct Pair {
    now: Instant,
    cloud: End,
    edge: End,
    /// Frames on their way: (arrival, to the edge?, bytes), in send order.
    in_transit: VecDeque<(Instant, bool, Vec<u8>)>,
    /// Frames sent while the network is cut are lost.
    cut: bool,
    /// The largest frame the link carries: a bigger one ends its sender's session, as the real
    /// link's sink refuses it.
    max_frame: usize,
}

fn config() -> SessionConfig {
    SessionConfig {
        keepalive: KeepaliveConfig {
            interval: Duration::from_secs(15),
            timeout: Duration::from_secs(45),
        },
        ..SessionConfig::default()
    }
}

fn update(resource: &str, rv: u64) -> Message {
    Message::new()
        .route("edgecontroller", "resource", resource, Operation::Update)
        .with_resource_version(rv.to_string())
}

fn key(name: &str) -> String {
    object_key("pods", Some("default"), name)
}

// === impl End ===

impl End {
    fn new(role: Role, now: Instant) -> Self {
        End {
            session: Session::new(role, config(), now),
            outbound: Outbound::new(1000, WindowConfig::default()),
            auto_process: true,
            unprocessed: BTreeMap::new(),
            delivered: Vec::new(),
            inventory: Vec::new(),
            inventories: Vec::new(),
            resync_done: Vec::new(),
            acked: Vec::new(),
            sent: Vec::new(),
            oversized: Vec::new(),
            ended: None,
        }
    }

    fn push(&mut self, name: &str, rv: u64) -> MsgId {
        let msg = update(&format!("default/pods/{name}"), rv);
        let id = msg.id();
        self.outbound.push(key(name), msg).unwrap();
        id
    }

    fn receive(&mut self, frame: Frame, now: Instant) {
        if self.ended.is_some() {
            return;
        }
        if let Err(e) = self.session.handle_frame(frame, &mut self.outbound, now) {
            self.ended = Some(e);
            return;
        }
        self.events(now);
    }

    fn events(&mut self, now: Instant) {
        while let Some(event) = self.session.poll_event() {
            match event {
                Event::Data { seq, msg } => {
                    self.delivered.push((*msg).clone());
                    if self.auto_process {
                        self.session.processed(seq, now).unwrap();
                    } else {
                        self.unprocessed.insert(seq, *msg);
                    }
                }
                Event::Acked(acked) => self.acked.extend(acked.iter().map(|a| a.msg_id)),
                Event::Inventory(inventory) => self.inventories.push(inventory),
                Event::InventoryRequested => {
                    let entries = self.inventory.clone();
                    self.session.send_inventory(entries, DEFAULT_MAX_FRAME);
                }
                Event::ResyncDone { upserts, deletes } => self.resync_done.push((upserts, deletes)),
                Event::Oversized(o) => self.oversized.push(*o),
            }
        }
    }

    fn process_all(&mut self, now: Instant) {
        for seq in std::mem::take(&mut self.unprocessed).into_keys() {
            self.session.processed(seq, now).unwrap();
        }
    }

    fn sent_kinds(&self) -> Vec<&'static str> {
        self.sent.iter().map(|(_, f)| f.kind()).collect()
    }

    fn data_sent(&self) -> Vec<(u64, MsgId)> {
        self.sent
            .iter()
            .filter_map(|(_, f)| match f {
                Frame::Data { seq, msg } => Some((*seq, msg.id())),
                _ => None,
            })
            .collect()
    }
}

// === impl Pair ===

impl Pair {
    fn new() -> Self {
        let now = Instant::now();
        Pair {
            now,
            cloud: End::new(Role::Cloud, now),
            edge: End::new(Role::Edge, now),
            in_transit: VecDeque::new(),
            cut: false,
            max_frame: DEFAULT_MAX_FRAME,
        }
    }

    /// Sends what both ends have to send now, and delivers what is due.
    fn step(&mut self) {
        loop {
            self.transmit();
            let due = self
                .in_transit
                .front()
                .is_some_and(|(at, _, _)| *at <= self.now);
            if !due {
                break;
            }
            let (_, to_edge, bytes) = self.in_transit.pop_front().unwrap();
            let frame = decode(&bytes, self.max_frame).unwrap();
            let end = if to_edge {
                &mut self.edge
            } else {
                &mut self.cloud
            };
            end.receive(frame, self.now);
        }
    }

    fn transmit(&mut self) {
        for (to_edge, end) in [(true, &mut self.cloud), (false, &mut self.edge)] {
            while end.ended.is_none() {
                match end.session.poll_transmit(&mut end.outbound, self.now) {
                    Ok(Some(frame)) => {
                        let bytes = encode(&frame);
                        if bytes.len() > self.max_frame {
                            let why = format!("frame of {} bytes exceeds the limit", bytes.len());
                            end.ended = Some(SessionError::PeerClosed(why));
                            break;
                        }
                        end.sent.push((self.now, frame));
                        if !self.cut {
                            self.in_transit
                                .push_back((self.now + DELAY, to_edge, bytes));
                        }
                    }
                    Ok(None) => break,
                    Err(e) => end.ended = Some(e),
                }
            }
            end.events(self.now);
        }
    }

    fn next_time(&self) -> Instant {
        let mut next = self.in_transit.front().map(|(at, _, _)| *at);
        for end in [&self.cloud, &self.edge] {
            if end.ended.is_none() {
                let t = end.session.poll_timeout(&end.outbound);
                next = Some(next.map_or(t, |n: Instant| n.min(t)));
            }
        }
        next.expect("a live session always has a deadline")
    }

    /// Runs for `span` of virtual time.
    fn run_for(&mut self, span: Duration) {
        let end = self.now + span;
        loop {
            self.step();
            if self.cloud.ended.is_some() && self.edge.ended.is_some() {
                return;
            }
            let next = self.next_time().max(self.now);
            if next > end {
                self.now = end;
                self.step();
                return;
            }
            self.now = next;
        }
    }
}

#[test]
fn queued_data_waits_for_the_inventory_and_flows_once_the_resync_is_planned() {
    let mut p = Pair::new();
    p.cloud.push("a", 1);
    p.cloud.push("b", 2);
    p.edge.inventory = vec![InventoryEntry {
        key: key("a"),
        resource_version: "1".into(),
    }];
    p.cloud.session.start_resync(ResyncStart::NeedInventory);
    p.run_for(Duration::from_millis(200));

    assert_eq!(p.cloud.inventories.len(), 1, "the inventory arrived");
    assert!(p.cloud.session.inventory_pending());
    assert!(
        p.cloud.data_sent().is_empty(),
        "no data may go out before the resync is planned: {:?}",
        p.cloud.sent_kinds()
    );

    // The application drops what the edge holds and plans the rest.
    let inventory = p.cloud.inventories[0].clone();
    p.cloud.outbound.retain(|k, m| {
        inventory.get(k).map(String::as_str) != m.header.resource_version.as_deref()
    });
    p.cloud.session.resync_planned(&ResyncPlan {
        upserts: vec![key("b")],
        deletes: vec![],
    });
    p.run_for(Duration::from_millis(200));

    let names: Vec<_> = p
        .edge
        .delivered
        .iter()
        .map(|m| m.resource().to_owned())
        .collect();
    assert_eq!(names, ["default/pods/b"]);
    assert_eq!(p.edge.resync_done, [(1, 0)]);
    let kinds = p.cloud.sent_kinds();
    let data = kinds.iter().position(|k| *k == "data").unwrap();
    let done = kinds.iter().position(|k| *k == "resync_done").unwrap();
    assert!(
        data < done,
        "ResyncDone follows the data it covers: {kinds:?}"
    );
}

#[test]
fn resync_done_waits_until_every_planned_key_is_acked() {
    let mut p = Pair::new();
    p.edge.auto_process = false;
    p.cloud.session.start_resync(ResyncStart::NeedInventory);
    p.run_for(Duration::from_millis(100));
    p.cloud.push("a", 1);
    p.cloud.push("b", 1);
    p.cloud.session.resync_planned(&ResyncPlan {
        upserts: vec![key("a"), key("b")],
        deletes: vec![],
    });
    p.run_for(Duration::from_secs(2));
    assert_eq!(p.edge.delivered.len(), 2);
    assert!(
        p.edge.resync_done.is_empty(),
        "done announced before the edge committed"
    );
    p.edge.process_all(p.now);
    p.run_for(Duration::from_millis(200));
    assert_eq!(p.edge.resync_done, [(2, 0)]);
}

#[test]
fn acks_cover_only_what_the_application_processed() {
    let mut p = Pair::new();
    p.edge.auto_process = false;
    let id = p.cloud.push("a", 1);
    p.run_for(Duration::from_secs(5));
    assert_eq!(
        p.edge.delivered.len(),
        1,
        "retransmissions are not delivered twice"
    );
    assert!(p.cloud.acked.is_empty(), "acked before it was processed");
    assert!(
        p.cloud.session.stats().retransmits > 0,
        "the cloud keeps retransmitting while unacked"
    );
    assert!(p.edge.session.stats().duplicates > 0);

    p.edge.process_all(p.now);
    p.run_for(Duration::from_millis(200));
    assert_eq!(p.cloud.acked, [id]);
    assert!(p.cloud.outbound.is_idle());
}

#[test]
fn taken_stats_count_what_happened_since_the_last_take() {
    let mut p = Pair::new();
    p.cloud.push("a", 1);
    p.run_for(Duration::from_millis(200));
    let first = p.cloud.session.take_stats();
    assert_eq!((first.sent, first.acked), (1, 1));
    assert_eq!(p.cloud.session.take_stats(), wire::SessionStats::default());
    p.cloud.push("b", 2);
    p.run_for(Duration::from_millis(200));
    let second = p.cloud.session.take_stats();
    assert_eq!((second.sent, second.acked), (1, 1));
    assert_eq!(p.cloud.session.stats().sent, 2, "the totals are kept");
}

#[test]
fn a_silent_peer_is_dead_after_the_keepalive_timeout_on_both_ends() {
    let mut p = Pair::new();
    p.run_for(Duration::from_secs(600));
    assert!(
        p.cloud.ended.is_none() && p.edge.ended.is_none(),
        "pings keep an idle session alive"
    );
    assert!(p.cloud.session.rtt().is_some_and(|rtt| rtt == 2 * DELAY));

    let cut_at = p.now;
    p.cut = true;
    p.run_for(Duration::from_secs(120));
    assert_eq!(p.cloud.ended, Some(SessionError::PeerDead));
    assert_eq!(p.edge.ended, Some(SessionError::PeerDead));
    // Each end was last heard from just before the cut: dead 45 s after that, not later.
    let last_sent = |end: &End| end.sent.iter().map(|(t, _)| *t).max().unwrap();
    for end in [&p.cloud, &p.edge] {
        assert!(last_sent(end) <= cut_at + Duration::from_secs(45));
    }
}

#[test]
fn a_ping_is_answered_before_queued_data() {
    let mut p = Pair::new();
    for n in 0..50 {
        p.edge.push(&format!("p{n}"), 1);
    }
    p.edge.receive(Frame::Ping { nonce: 7 }, p.now);
    let first = p
        .edge
        .session
        .poll_transmit(&mut p.edge.outbound, p.now)
        .unwrap();
    assert_eq!(first, Some(Frame::Pong { nonce: 7 }));
}

#[test]
fn a_new_session_takes_over_the_queue_with_fresh_seqs_and_the_same_ids() {
    let mut p = Pair::new();
    p.edge.auto_process = false;
    let ids: Vec<_> = ["a", "b", "c"].iter().map(|n| p.cloud.push(n, 1)).collect();
    p.run_for(Duration::from_millis(100));
    // The edge commits only the first one before the link drops.
    let first = *p.edge.unprocessed.keys().next().unwrap();
    p.edge.session.processed(first, p.now).unwrap();
    p.run_for(Duration::from_millis(100));
    assert_eq!(p.cloud.acked, [ids[0]]);

    let old = std::mem::replace(
        &mut p.cloud.session,
        Session::new(Role::Cloud, config(), p.now),
    );
    old.finish(&mut p.cloud.outbound);
    p.in_transit.clear();
    p.cloud.sent.clear();
    p.edge.session = Session::new(Role::Edge, config(), p.now);
    p.edge.unprocessed.clear();
    p.edge.auto_process = true;
    p.run_for(Duration::from_millis(100));

    assert_eq!(p.cloud.data_sent(), [(1, ids[1]), (2, ids[2])]);
    assert!(p.cloud.outbound.is_idle());
}

#[test]
fn close_is_the_last_frame_and_ends_the_peer() {
    let mut p = Pair::new();
    p.cloud.push("a", 1);
    p.edge.receive(Frame::Ping { nonce: 1 }, p.now);
    p.edge.session.close("edgecore shutting down");
    p.edge.push("late", 1);
    p.run_for(Duration::from_millis(100));
    let kinds = p.edge.sent_kinds();
    assert_eq!(kinds.last(), Some(&"close"));
    assert!(!kinds.contains(&"data"), "no data after close: {kinds:?}");
    assert!(
        kinds.contains(&"pong"),
        "control frames queued before close still go"
    );
    assert_eq!(
        p.cloud.ended,
        Some(SessionError::PeerClosed("edgecore shutting down".into()))
    );
}

#[test]
fn frames_out_of_place_end_the_session() {
    let now = Instant::now();
    let mut ob = Outbound::new(10, WindowConfig::default());
    let cases: [(Role, Frame, &str); 4] = [
        (Role::Cloud, Frame::InventoryRequest, "inventory_request"),
        (
            Role::Cloud,
            Frame::Inventory {
                entries: vec![],
                last: true,
            },
            "inventory",
        ),
        (
            Role::Edge,
            Frame::Inventory {
                entries: vec![],
                last: true,
            },
            "inventory",
        ),
        (
            Role::Cloud,
            Frame::ResyncDone {
                upserts: 0,
                deletes: 0,
            },
            "resync_done",
        ),
    ];
    for (role, frame, kind) in cases {
        let mut s = Session::new(role, config(), now);
        assert_eq!(
            s.handle_frame(frame, &mut ob, now),
            Err(SessionError::Unexpected(kind)),
            "{role:?}"
        );
    }
    let mut s = Session::new(Role::Edge, config(), now);
    let err = s.handle_frame(
        Frame::Ack(wire::Ack {
            cumulative: 5,
            selective: vec![],
        }),
        &mut ob,
        now,
    );
    assert!(matches!(err, Err(SessionError::Ack(_))), "{err:?}");
}

#[test]
fn an_overflow_asks_for_one_inventory_at_a_time() {
    let now = Instant::now();
    let mut ob = Outbound::new(10, WindowConfig::default());
    let mut s = Session::new(Role::Cloud, config(), now);
    s.request_inventory();
    s.request_inventory();
    let mut frames = HashMap::new();
    while let Some(f) = s.poll_transmit(&mut ob, now).unwrap() {
        *frames.entry(f.kind()).or_insert(0) += 1;
    }
    assert_eq!(frames.get("inventory_request"), Some(&1));
}

/// A pair whose link carries frames of at most `max_frame` bytes, both ends knowing it.
fn pair_limited_to(max_frame: usize) -> Pair {
    let mut p = Pair::new();
    p.max_frame = max_frame;
    p.cloud.outbound.set_max_frame(max_frame);
    p.edge.outbound.set_max_frame(max_frame);
    p
}

fn big(resource: &str, rv: u64, size: usize) -> Message {
    update(resource, rv).with_content(vec![b'x'; size])
}

#[test]
fn an_object_too_large_for_the_link_is_dropped_and_the_session_goes_on() {
    let mut p = pair_limited_to(4096);
    let huge = big("default/pods/a", 1, 10_000);
    let huge_id = huge.id();
    p.cloud.outbound.push(key("a"), huge).unwrap();
    p.cloud.push("b", 1);
    p.run_for(Duration::from_secs(1));

    assert!(p.cloud.ended.is_none(), "{:?}", p.cloud.ended);
    assert!(p.edge.ended.is_none(), "{:?}", p.edge.ended);
    let names: Vec<_> = p.edge.delivered.iter().map(|m| m.resource()).collect();
    assert_eq!(names, ["default/pods/b"]);
    let [dropped] = p.cloud.oversized.as_slice() else {
        panic!("one message dropped: {:?}", p.cloud.oversized);
    };
    assert_eq!(
        (dropped.key.as_str(), dropped.msg.id()),
        (key("a").as_str(), huge_id)
    );
    assert!(dropped.len > 4096 && dropped.max == 4096, "{dropped:?}");
    assert_eq!(p.cloud.session.stats().oversized, 1);
    assert!(
        p.cloud.outbound.is_idle(),
        "nothing is left to wedge the queue"
    );

    // The object, fixed, goes out like any other.
    p.cloud.push("a", 2);
    p.run_for(Duration::from_secs(1));
    assert_eq!(p.edge.delivered.len(), 2);
    assert_eq!(p.edge.delivered[1].resource(), "default/pods/a");
}

#[test]
fn a_resync_is_done_even_when_a_planned_object_is_too_large() {
    let mut p = pair_limited_to(4096);
    p.cloud.session.start_resync(ResyncStart::NeedInventory);
    p.run_for(Duration::from_millis(100));
    p.cloud
        .outbound
        .push(key("a"), big("default/pods/a", 1, 10_000))
        .unwrap();
    p.cloud.push("b", 1);
    p.cloud.session.resync_planned(&ResyncPlan {
        upserts: vec![key("a"), key("b")],
        deletes: vec![],
    });
    p.run_for(Duration::from_secs(1));
    assert_eq!(p.edge.resync_done, [(2, 0)]);
    assert_eq!(p.cloud.oversized.len(), 1);
}

#[test]
fn an_upstream_item_too_large_for_the_link_is_handed_back_and_the_next_one_flows() {
    let mut p = pair_limited_to(4096);
    p.cloud.session.start_resync(ResyncStart::UpToDate);
    let request = big("default/pods/a", 1, 10_000);
    p.edge.outbound.push("req/1", request.clone()).unwrap();
    let status = update("default/pods/b", 1);
    p.edge.outbound.push("req/2", status.clone()).unwrap();
    p.run_for(Duration::from_secs(1));
    assert!(p.edge.ended.is_none() && p.cloud.ended.is_none());
    let dropped: Vec<_> = p.edge.oversized.iter().map(|o| o.msg.id()).collect();
    assert_eq!(dropped, [request.id()]);
    let ids: Vec<_> = p.cloud.delivered.iter().map(Message::id).collect();
    assert_eq!(ids, [status.id()]);
}
