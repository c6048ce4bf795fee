use std::time::{Duration, Instant};

use super::*;
use crate::testing::msg;

fn window(n: u32) -> SendWindow {
    SendWindow::new(WindowConfig {
        window: n,
        ..WindowConfig::default()
    })
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn drain(w: &mut SendWindow, now: Instant) -> Vec<Transmit> {
    std::iter::from_fn(|| w.poll_transmit(now)).collect()
}

fn ack(cumulative: u64, selective: &[(u64, u64)]) -> Ack {
    Ack {
        cumulative,
        selective: selective.to_vec(),
    }
}

#[test]
fn sequence_numbers_start_at_one_and_increase() {
    let mut w = window(8);
    let now = Instant::now();
    for i in 0..3 {
        w.push(msg(&format!("pod/default/p{i}"), "1")).unwrap();
    }
    let seqs: Vec<u64> = drain(&mut w, now).iter().map(|t| t.seq).collect();
    assert_eq!(seqs, [1, 2, 3]);
}

#[test]
fn full_window_hands_the_message_back() {
    let mut w = window(2);
    w.push(msg("a", "1")).unwrap();
    w.push(msg("b", "1")).unwrap();
    let refused = w.push(msg("c", "1")).unwrap_err();
    assert_eq!(refused.msg.resource(), "c");
}

#[test]
fn many_messages_fly_at_once_not_stop_and_wait() {
    let mut w = window(128);
    let now = Instant::now();
    for i in 0..128 {
        w.push(msg(&format!("k{i}"), "1")).unwrap();
    }
    assert_eq!(drain(&mut w, now).len(), 128);
    assert_eq!(w.in_flight(), 128);
}

#[test]
fn resend_after_ack_timeout_keeps_msg_id() {
    let mut w = window(8);
    let t0 = Instant::now();
    let m = msg("pod/default/nginx", "1");
    let id = m.id();
    w.push(m).unwrap();
    let first = w.poll_transmit(t0).unwrap();
    assert_eq!(w.poll_timeout(), Some(t0 + Duration::from_secs(1)));
    let again = w.poll_transmit(t0 + Duration::from_secs(1)).unwrap();
    assert_eq!((again.seq, again.attempt), (first.seq, 2));
    assert_eq!(again.msg.id(), id);
}

#[test]
fn no_retransmission_before_the_timeout() {
    let mut w = window(8);
    let t0 = Instant::now();
    w.push(msg("a", "1")).unwrap();
    w.poll_transmit(t0).unwrap();
    assert!(w.poll_transmit(t0 + ms(999)).is_none());
}

#[test]
fn retransmission_timeout_doubles_up_to_the_cap() {
    let mut w = SendWindow::new(WindowConfig {
        max_rto: Duration::from_secs(3),
        ..Default::default()
    });
    let mut now = Instant::now();
    w.push(msg("a", "1")).unwrap();
    w.poll_transmit(now).unwrap();
    let mut gaps = Vec::new();
    for _ in 0..4 {
        let due = w.poll_timeout().unwrap();
        gaps.push(due - now);
        now = due;
        w.poll_transmit(now).unwrap();
    }
    assert_eq!(gaps, [ms(1000), ms(2000), ms(3000), ms(3000)]);
}

#[test]
fn cumulative_ack_releases_messages_in_order() {
    let mut w = window(8);
    let now = Instant::now();
    for k in ["a", "b", "c"] {
        w.push(msg(k, "1")).unwrap();
    }
    drain(&mut w, now);
    let acked = w.on_ack(&ack(2, &[]), now + ms(10)).unwrap();
    let keys: Vec<&str> = acked.iter().map(|m| m.resource()).collect();
    assert_eq!(keys, ["a", "b"]);
    assert_eq!(w.in_flight(), 1);
}

#[test]
fn selective_ack_stops_retransmission_of_covered_messages() {
    let mut w = window(8);
    let t0 = Instant::now();
    for k in ["a", "b", "c", "d"] {
        w.push(msg(k, "1")).unwrap();
    }
    drain(&mut w, t0);
    w.on_ack(&ack(0, &[(2, 3)]), t0 + ms(10)).unwrap();
    let resent: Vec<u64> = drain(&mut w, t0 + Duration::from_secs(5))
        .iter()
        .map(|t| t.seq)
        .collect();
    assert_eq!(resent, [1, 4]);
}

#[test]
fn stale_ack_is_harmless() {
    let mut w = window(8);
    let now = Instant::now();
    w.push(msg("a", "1")).unwrap();
    w.push(msg("b", "1")).unwrap();
    drain(&mut w, now);
    assert_eq!(w.on_ack(&ack(2, &[]), now).unwrap().len(), 2);
    assert!(w.on_ack(&ack(1, &[]), now).unwrap().is_empty());
    assert!(w.is_empty());
}

#[test]
fn ack_beyond_what_was_sent_is_an_error() {
    let mut w = window(8);
    let now = Instant::now();
    w.push(msg("a", "1")).unwrap();
    w.push(msg("b", "1")).unwrap();
    w.poll_transmit(now).unwrap();
    assert_eq!(
        w.on_ack(&ack(2, &[]), now),
        Err(AckError::BeyondSent {
            seq: 2,
            highest_sent: 1
        })
    );
    assert_eq!(
        w.on_ack(&ack(0, &[(1, 5)]), now),
        Err(AckError::BeyondSent {
            seq: 5,
            highest_sent: 1
        })
    );
    assert_eq!(
        w.on_ack(&ack(0, &[(1, 0)]), now),
        Err(AckError::InvertedRange { start: 1, end: 0 })
    );
}

#[test]
fn too_many_ranges_is_an_error() {
    let mut w = window(8);
    let ranges: Vec<(u64, u64)> = (0..=MAX_ACK_RANGES as u64).map(|i| (i, i)).collect();
    let err = w.on_ack(&ack(0, &ranges), Instant::now()).unwrap_err();
    assert!(matches!(err, AckError::TooManyRanges { .. }));
}

#[test]
fn window_slides_only_past_the_lowest_unacked_seq() {
    let mut w = window(4);
    let now = Instant::now();
    for i in 0..4 {
        w.push(msg(&format!("k{i}"), "1")).unwrap();
    }
    drain(&mut w, now);
    // Seqs 2..=4 acked, 1 still missing: only one message is held, but seq 5 would stretch the
    // span past 4, so the window takes nothing more.
    w.on_ack(&ack(0, &[(2, 4)]), now).unwrap();
    assert_eq!(w.len(), 1);
    assert!(!w.has_room());
    assert!(w.push(msg("k4", "1")).is_err());
    w.on_ack(&ack(1, &[(2, 4)]), now).unwrap();
    w.push(msg("k4", "1")).unwrap();
    assert_eq!(w.poll_transmit(now).map(|t| t.seq), Some(5));
}

#[test]
fn peer_window_narrows_the_window() {
    let mut w = window(128);
    w.set_peer_window(16);
    assert_eq!(w.window(), 16);
    w.set_peer_window(1024);
    assert_eq!(w.window(), 128);
}

#[test]
fn rtt_samples_shape_the_timeout() {
    let mut w = window(8);
    let t0 = Instant::now();
    w.push(msg("a", "1")).unwrap();
    w.poll_transmit(t0).unwrap();
    w.on_ack(&ack(1, &[]), t0 + ms(50)).unwrap();
    assert_eq!(w.rtt().smoothed(), Some(ms(50)));
    // srtt 50 + 4 * rttvar 25 = 150, raised to the 200 ms floor.
    assert_eq!(w.rtt().rto(), ms(200));
}

#[test]
fn retransmitted_messages_give_no_rtt_sample() {
    let mut w = window(8);
    let t0 = Instant::now();
    w.push(msg("a", "1")).unwrap();
    w.poll_transmit(t0).unwrap();
    w.poll_transmit(t0 + Duration::from_secs(1)).unwrap();
    w.on_ack(&ack(1, &[]), t0 + Duration::from_secs(1) + ms(5))
        .unwrap();
    assert_eq!(w.rtt().smoothed(), None);
}

#[test]
fn new_session_resends_unacked_with_fresh_seqs_and_same_ids() {
    let mut w = window(8);
    let now = Instant::now();
    let msgs: Vec<Message> = ["a", "b", "c", "d"].iter().map(|k| msg(k, "1")).collect();
    let ids: Vec<_> = msgs.iter().map(Message::id).collect();
    for m in msgs {
        w.push(m).unwrap();
    }
    w.poll_transmit(now).unwrap();
    w.poll_transmit(now).unwrap();
    w.poll_transmit(now).unwrap();
    w.on_ack(&ack(0, &[(2, 2)]), now).unwrap();
    w.reset_for_new_session();
    let again = drain(&mut w, now);
    let seqs: Vec<u64> = again.iter().map(|t| t.seq).collect();
    let again_ids: Vec<_> = again.iter().map(|t| t.msg.id()).collect();
    assert_eq!(seqs, [1, 2, 3]);
    assert_eq!(again_ids, [ids[0], ids[2], ids[3]]);
    assert!(again.iter().all(|t| t.attempt == 1));
}

#[test]
fn take_unacked_empties_the_window() {
    let mut w = window(8);
    let now = Instant::now();
    w.push(msg("a", "1")).unwrap();
    w.push(msg("b", "1")).unwrap();
    w.poll_transmit(now).unwrap();
    let taken: Vec<String> = w
        .take_unacked()
        .iter()
        .map(|m| m.resource().to_owned())
        .collect();
    assert_eq!(taken, ["a", "b"]);
    assert!(w.is_empty());
    assert_eq!(w.poll_timeout(), None);
}

#[test]
fn oldest_unacked_age_tracks_the_first_transmission() {
    let mut w = window(8);
    let t0 = Instant::now();
    w.push(msg("a", "1")).unwrap();
    w.poll_transmit(t0).unwrap();
    w.poll_transmit(t0 + Duration::from_secs(1)).unwrap();
    assert_eq!(
        w.oldest_unacked_age(t0 + Duration::from_secs(2)),
        Some(Duration::from_secs(2))
    );
}
