use std::time::{Duration, Instant};

use beehive::Operation;

use super::*;
use crate::frame::Ack;
use crate::outbound::Outbound;
use crate::testing::msg;
use crate::window::WindowConfig;

fn delete(resource: &str) -> Message {
    Message::new().route("edgecontroller", "resource", resource, Operation::Delete)
}

fn rv(m: &Message) -> &str {
    m.header.resource_version.as_deref().unwrap_or("")
}

fn pop_key(q: &mut KeyedQueue) -> Option<String> {
    q.pop().map(|(k, _)| k)
}

#[test]
fn newer_version_replaces_pending_one_in_place() {
    let mut q = KeyedQueue::new(8);
    q.push("a", msg("a", "1")).unwrap();
    q.push("b", msg("b", "1")).unwrap();
    let pushed = q.push("a", msg("a", "2")).unwrap();
    assert!(matches!(pushed, Pushed::Replaced(old) if rv(&old) == "1"));
    assert_eq!(q.len(), 2);
    let (key, m) = q.pop().unwrap();
    assert_eq!((key.as_str(), rv(&m)), ("a", "2"));
    assert_eq!(pop_key(&mut q).as_deref(), Some("b"));
}

#[test]
fn delete_supersedes_pending_update() {
    let mut q = KeyedQueue::new(8);
    q.push("a", msg("a", "1")).unwrap();
    q.push("a", delete("a")).unwrap();
    let (_, m) = q.pop().unwrap();
    assert_eq!(m.router.operation, Operation::Delete);
    assert!(q.pop().is_none());
}

#[test]
fn full_queue_refuses_new_keys_and_hands_the_message_back() {
    let mut q = KeyedQueue::new(2);
    q.push("a", msg("a", "1")).unwrap();
    q.push("b", msg("b", "1")).unwrap();
    let err = q.push("c", msg("c", "1")).unwrap_err();
    assert_eq!((err.key.as_str(), err.capacity), ("c", 2));
    assert_eq!(err.msg.resource(), "c");
    assert_eq!(
        err.to_string(),
        "queue is full (2 keys pending), refused \"c\""
    );
}

#[test]
fn full_queue_still_accepts_newer_versions_of_pending_keys() {
    let mut q = KeyedQueue::new(1);
    q.push("a", msg("a", "1")).unwrap();
    assert!(matches!(
        q.push("a", msg("a", "2")),
        Ok(Pushed::Replaced(_))
    ));
}

#[test]
fn newer_version_waits_while_older_is_in_flight() {
    let mut q = KeyedQueue::new(8);
    q.push("a", msg("a", "1")).unwrap();
    let (_, v1) = q.pop().unwrap();
    q.push("a", msg("a", "2")).unwrap();
    q.push("b", msg("b", "1")).unwrap();
    assert_eq!(
        pop_key(&mut q).as_deref(),
        Some("b"),
        "a@2 must wait for a@1's ack"
    );
    assert!(q.pop().is_none());
    assert_eq!(q.acked(v1.id()).as_deref(), Some("a"));
    let (_, v2) = q.pop().unwrap();
    assert_eq!(rv(&v2), "2");
}

#[test]
fn waiting_version_keeps_its_place_in_line() {
    let mut q = KeyedQueue::new(8);
    q.push("a", msg("a", "1")).unwrap();
    let (_, v1) = q.pop().unwrap();
    q.push("a", msg("a", "2")).unwrap();
    q.push("b", msg("b", "1")).unwrap();
    q.acked(v1.id());
    assert_eq!(pop_key(&mut q).as_deref(), Some("a"));
    assert_eq!(pop_key(&mut q).as_deref(), Some("b"));
}

#[test]
fn requeued_messages_go_first_in_their_order() {
    let mut q = KeyedQueue::new(8);
    for k in ["a", "b", "c"] {
        q.push(k, msg(k, "1")).unwrap();
    }
    let a = q.pop().unwrap().1;
    let b = q.pop().unwrap().1;
    assert!(q.requeue(vec![a, b]).is_empty());
    let order: Vec<String> = std::iter::from_fn(|| pop_key(&mut q)).collect();
    assert_eq!(order, ["a", "b", "c"]);
}

#[test]
fn requeued_old_version_is_dropped_for_a_newer_pending_one() {
    let mut q = KeyedQueue::new(8);
    q.push("b", msg("b", "1")).unwrap();
    q.push("a", msg("a", "1")).unwrap();
    let b1 = q.pop().unwrap().1;
    q.push("b", msg("b", "2")).unwrap();
    q.requeue(vec![b1]);
    assert_eq!(q.len(), 2);
    let (key, m) = q.pop().unwrap();
    assert_eq!(
        (key.as_str(), rv(&m)),
        ("b", "2"),
        "newer version takes the old one's place"
    );
}

#[test]
fn requeue_returns_messages_it_never_handed_out() {
    let mut q = KeyedQueue::new(8);
    let stranger = msg("x", "1");
    assert_eq!(q.requeue(vec![stranger.clone()]), vec![stranger]);
}

#[test]
fn requeue_may_exceed_capacity_rather_than_drop() {
    let mut q = KeyedQueue::new(1);
    q.push("a", msg("a", "1")).unwrap();
    let a = q.pop().unwrap().1;
    q.push("b", msg("b", "1")).unwrap();
    q.requeue(vec![a]);
    assert_eq!(q.len(), 2);
}

fn outbound() -> Outbound {
    Outbound::new(
        64,
        WindowConfig {
            window: 8,
            ..WindowConfig::default()
        },
    )
}

#[test]
fn outbound_never_has_two_versions_of_a_key_in_flight() {
    let mut out = outbound();
    let now = Instant::now();
    out.push("a", msg("a", "1")).unwrap();
    let t1 = out.poll_transmit(now).unwrap();
    out.push("a", msg("a", "2")).unwrap();
    assert!(
        out.poll_transmit(now).is_none(),
        "a@2 must not fly while a@1 is unacked"
    );
    let acked = out
        .on_ack(
            &Ack {
                cumulative: t1.seq,
                selective: vec![],
            },
            now,
        )
        .unwrap();
    assert_eq!(acked[0].key, "a");
    let t2 = out.poll_transmit(now).unwrap();
    assert_eq!((t2.seq, rv(&t2.msg)), (2, "2"));
    out.on_ack(
        &Ack {
            cumulative: 2,
            selective: vec![],
        },
        now,
    )
    .unwrap();
    assert!(out.is_idle());
}

#[test]
fn outbound_coalesces_versions_queued_behind_an_in_flight_one() {
    let mut out = outbound();
    let now = Instant::now();
    out.push("a", msg("a", "1")).unwrap();
    out.poll_transmit(now).unwrap();
    for v in 2..=5 {
        out.push("a", msg("a", &v.to_string())).unwrap();
    }
    out.on_ack(
        &Ack {
            cumulative: 1,
            selective: vec![],
        },
        now,
    )
    .unwrap();
    let next = out.poll_transmit(now).unwrap();
    assert_eq!(rv(&next.msg), "5");
    assert!(out.poll_transmit(now).is_none());
}

#[test]
fn outbound_session_reset_resends_unacked_before_newer_keys() {
    let mut out = outbound();
    let now = Instant::now();
    out.push("a", msg("a", "1")).unwrap();
    out.push("b", msg("b", "1")).unwrap();
    out.poll_transmit(now).unwrap();
    out.poll_transmit(now).unwrap();
    out.push("c", msg("c", "1")).unwrap();
    out.push("a", msg("a", "2")).unwrap();
    out.reset_for_new_session();
    let later = now + Duration::from_secs(1);
    let sent: Vec<(u64, String, String)> = std::iter::from_fn(|| out.poll_transmit(later))
        .map(|t| (t.seq, t.msg.resource().to_owned(), rv(&t.msg).to_owned()))
        .collect();
    let expect = |s: u64, k: &str, v: &str| (s, k.to_owned(), v.to_owned());
    assert_eq!(
        sent,
        [
            expect(1, "a", "2"),
            expect(2, "b", "1"),
            expect(3, "c", "1")
        ]
    );
}

#[test]
fn outbound_respects_the_window_and_refills_as_acks_arrive() {
    let mut out = outbound();
    let now = Instant::now();
    for i in 0..20 {
        let k = format!("k{i}");
        out.push(k.clone(), msg(&k, "1")).unwrap();
    }
    assert_eq!(std::iter::from_fn(|| out.poll_transmit(now)).count(), 8);
    out.on_ack(
        &Ack {
            cumulative: 8,
            selective: vec![],
        },
        now,
    )
    .unwrap();
    assert_eq!(std::iter::from_fn(|| out.poll_transmit(now)).count(), 8);
    assert_eq!(out.queue().len(), 4);
}

#[test]
fn retain_drops_pending_messages_but_never_in_flight_ones() {
    let mut q = KeyedQueue::new(10);
    q.push("a", msg("a", "1")).unwrap();
    q.push("b", msg("b", "1")).unwrap();
    let (key, _) = q.pop().unwrap();
    assert_eq!(key, "a");
    q.push("a", msg("a", "2")).unwrap();
    q.push("c", msg("c", "1")).unwrap();
    q.retain(|key, _| key == "c");
    assert_eq!(q.len(), 1);
    assert!(q.is_in_flight("a"), "the in-flight version is untouched");
    assert_eq!(q.ids().count(), 1);
    assert_eq!(q.pop().map(|(k, _)| k).as_deref(), Some("c"));
    assert!(q.pop().is_none());
}

#[test]
fn the_version_in_flight_is_not_queued_a_second_time() {
    let mut q = KeyedQueue::new(8);
    q.push("a", msg("a", "5")).unwrap();
    let (_, sent) = q.pop().unwrap();
    assert_eq!(q.push("a", msg("a", "5")).unwrap(), Pushed::AlreadyInFlight);
    assert!(q.pending("a").is_none());
    // A newer version, or a delete, still waits behind the one in flight.
    assert_eq!(q.push("a", msg("a", "6")).unwrap(), Pushed::Queued);
    q.acked(sent.id());
    assert_eq!(rv(&q.pop().unwrap().1), "6");
    q.push("b", msg("b", "1")).unwrap();
    q.pop().unwrap();
    assert_eq!(q.push("b", delete("b")).unwrap(), Pushed::Queued);
}
