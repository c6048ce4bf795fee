use proptest::prelude::*;

use super::*;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn receiver() -> Receiver {
    Receiver::new(RecvConfig {
        window: 8,
        ack_every: 3,
        ack_delay: ms(10),
    })
}

#[test]
fn first_arrival_is_accepted_and_repeats_are_duplicates() {
    let mut r = receiver();
    let now = Instant::now();
    assert_eq!(r.on_data(1, now), Ok(Arrival::Accept));
    assert_eq!(r.on_data(1, now), Ok(Arrival::Duplicate));
    r.processed(1, now).unwrap();
    assert_eq!(r.on_data(1, now), Ok(Arrival::Duplicate));
    assert_eq!(r.stats().duplicates, 2);
}

#[test]
fn acks_cover_only_processed_seqs() {
    let mut r = receiver();
    let now = Instant::now();
    for seq in 1..=3 {
        r.on_data(seq, now).unwrap();
    }
    r.processed(2, now).unwrap();
    assert_eq!(
        r.ack(),
        Ack {
            cumulative: 0,
            selective: vec![(2, 2)]
        }
    );
    r.processed(1, now).unwrap();
    assert_eq!(
        r.ack(),
        Ack {
            cumulative: 2,
            selective: vec![]
        }
    );
}

#[test]
fn selective_ranges_merge_adjacent_seqs() {
    let mut r = receiver();
    let now = Instant::now();
    for seq in [2, 3, 5, 6, 7] {
        r.on_data(seq, now).unwrap();
        r.processed(seq, now).unwrap();
    }
    assert_eq!(r.ack().selective, [(2, 3), (5, 7)]);
}

#[test]
fn selective_ranges_are_capped() {
    let mut r = Receiver::new(RecvConfig {
        window: 1024,
        ..RecvConfig::default()
    });
    let now = Instant::now();
    for seq in (2..400).step_by(2) {
        r.on_data(seq, now).unwrap();
        r.processed(seq, now).unwrap();
    }
    assert_eq!(r.ack().selective.len(), MAX_ACK_RANGES);
    assert_eq!(r.ack().selective[0], (2, 2));
}

#[test]
fn ack_waits_for_the_delay_or_for_enough_frames() {
    let mut r = receiver();
    let t0 = Instant::now();
    r.on_data(1, t0).unwrap();
    r.processed(1, t0).unwrap();
    assert_eq!(r.poll_timeout(), Some(t0 + ms(10)));
    assert!(r.poll_ack(t0 + ms(9)).is_none());
    assert_eq!(r.poll_ack(t0 + ms(10)).map(|a| a.cumulative), Some(1));
    for seq in 2..=4 {
        r.on_data(seq, t0).unwrap();
        r.processed(seq, t0).unwrap();
    }
    assert_eq!(r.poll_ack(t0).map(|a| a.cumulative), Some(4));
    assert_eq!(r.poll_timeout(), None);
}

#[test]
fn duplicate_of_processed_seq_triggers_an_immediate_ack() {
    let mut r = receiver();
    let t0 = Instant::now();
    r.on_data(1, t0).unwrap();
    r.processed(1, t0).unwrap();
    r.poll_ack(t0 + ms(10)).unwrap();
    r.on_data(1, t0 + ms(500)).unwrap();
    assert_eq!(r.poll_ack(t0 + ms(500)).map(|a| a.cumulative), Some(1));
}

#[test]
fn duplicate_of_unprocessed_seq_does_not_ack() {
    let mut r = receiver();
    let t0 = Instant::now();
    r.on_data(1, t0).unwrap();
    r.on_data(1, t0).unwrap();
    assert!(r.poll_ack(t0 + Duration::from_secs(1)).is_none());
}

#[test]
fn forgotten_seq_is_accepted_again() {
    let mut r = receiver();
    let now = Instant::now();
    r.on_data(1, now).unwrap();
    r.forget(1).unwrap();
    assert_eq!(r.on_data(1, now), Ok(Arrival::Accept));
}

#[test]
fn seq_beyond_the_window_is_a_protocol_error() {
    let mut r = receiver();
    let now = Instant::now();
    assert_eq!(
        r.on_data(9, now),
        Err(RecvError::BeyondWindow { seq: 9, limit: 8 })
    );
    assert_eq!(r.on_data(0, now), Err(RecvError::ZeroSeq));
}

proptest! {
    #[test]
    fn ack_covers_exactly_the_processed_seqs(
        order in proptest::sample::subsequence((1u64..=40).collect::<Vec<_>>(), 0..=40)
            .prop_shuffle(),
        processed_share in 0usize..=40,
    ) {
        let mut r = Receiver::new(RecvConfig { window: 64, ..RecvConfig::default() });
        let now = Instant::now();
        for &seq in &order {
            prop_assert_eq!(r.on_data(seq, now), Ok(Arrival::Accept));
            prop_assert_eq!(r.on_data(seq, now), Ok(Arrival::Duplicate));
        }
        let done: Vec<u64> = order.iter().copied().take(processed_share).collect();
        for &seq in &done {
            r.processed(seq, now).unwrap();
        }
        let ack = r.ack();
        for seq in 1..=40 {
            prop_assert_eq!(ack.covers(seq), done.contains(&seq), "seq {}", seq);
        }
    }
}

#[test]
fn processing_an_unknown_seq_is_an_error() {
    let mut r = receiver();
    let now = Instant::now();
    assert_eq!(r.processed(1, now), Err(RecvError::NotPending { seq: 1 }));
    r.on_data(1, now).unwrap();
    r.processed(1, now).unwrap();
    assert_eq!(r.processed(1, now), Err(RecvError::NotPending { seq: 1 }));
}
