use proptest::prelude::*;

use super::*;
use crate::testing::{arb_frame, msg};

const MAX: usize = 1 << 20;

fn prefixed_stream(frames: &[Frame]) -> Vec<u8> {
    frames
        .iter()
        .flat_map(|f| encode_prefixed(f, MAX).unwrap())
        .collect()
}

fn drain(reader: &mut FrameReader) -> Result<Vec<Frame>, FrameError> {
    let mut out = Vec::new();
    while let Some(f) = reader.next_frame()? {
        out.push(f);
    }
    Ok(out)
}

#[test]
fn data_frame_round_trips_with_its_message() {
    let frame = Frame::Data {
        seq: 7,
        msg: Box::new(msg("pod/default/nginx", "12")),
    };
    assert_eq!(decode(&encode(&frame), MAX).unwrap(), frame);
}

#[test]
fn empty_input_is_an_error() {
    assert!(matches!(decode(&[], MAX), Err(FrameError::Empty)));
}

#[test]
fn unknown_format_byte_is_rejected() {
    let mut bytes = encode(&Frame::Ping { nonce: 1 });
    bytes[0] = 9;
    assert!(matches!(
        decode(&bytes, MAX),
        Err(FrameError::UnsupportedFormat { found: 9, .. })
    ));
}

#[test]
fn oversized_input_is_rejected_before_parsing() {
    let bytes = encode(&Frame::Close {
        reason: "x".repeat(100),
    });
    let err = decode(&bytes, 10).unwrap_err();
    assert!(matches!(err, FrameError::TooLarge { max: 10, .. }));
}

#[test]
fn trailing_bytes_are_rejected() {
    let mut bytes = encode(&Frame::Ping { nonce: 1 });
    bytes.push(0xc0);
    assert!(matches!(
        decode(&bytes, MAX),
        Err(FrameError::TrailingBytes { count: 1 })
    ));
}

#[test]
fn huge_declared_string_fails_fast() {
    // {"Close": [str32 of 2^32-1 bytes]} followed by three bytes.
    let mut bytes = vec![FRAME_FORMAT, 0x81, 0xa5, b'C', b'l', b'o', b's', b'e', 0x91];
    bytes.extend_from_slice(&[0xdb, 0xff, 0xff, 0xff, 0xff, b'a', b'b', b'c']);
    assert!(matches!(decode(&bytes, MAX), Err(FrameError::Malformed(_))));
}

#[test]
fn deeply_nested_input_is_rejected_without_deep_recursion() {
    // {"Hello": {"x": [[[[...]]]]}}: structs may arrive as maps, unknown keys are skipped.
    let mut bytes = vec![
        FRAME_FORMAT,
        0x81,
        0xa5,
        b'H',
        b'e',
        b'l',
        b'l',
        b'o',
        0x81,
        0xa1,
        b'x',
    ];
    bytes.extend(std::iter::repeat_n(0x91, 100_000));
    bytes.push(0x90);
    assert!(matches!(decode(&bytes, MAX), Err(FrameError::Malformed(_))));
}

#[test]
fn huge_declared_array_fails_fast() {
    // {"Ack": [0, array32 of 2^32-1 elements]} with nothing after it: must fail fast.
    let mut bytes = vec![FRAME_FORMAT, 0x81, 0xa3, b'A', b'c', b'k', 0x92, 0x00];
    bytes.extend_from_slice(&[0xdd, 0xff, 0xff, 0xff, 0xff]);
    assert!(matches!(decode(&bytes, MAX), Err(FrameError::Malformed(_))));
}

#[test]
fn encode_prefixed_refuses_frames_over_the_peer_limit() {
    let frame = Frame::Data {
        seq: 1,
        msg: Box::new(msg("pod/default/big", "1").with_content(vec![0; 4096])),
    };
    assert!(matches!(
        encode_prefixed(&frame, 1024),
        Err(FrameError::TooLarge { max: 1024, .. })
    ));
}

#[test]
fn reader_rejects_oversized_length_without_buffering_the_body() {
    let mut reader = FrameReader::new(1024);
    reader.push(&(1_000_000u32).to_be_bytes());
    reader.push(&[0u8; 4096]);
    assert_eq!(reader.buffered(), 0);
    assert!(matches!(
        reader.next_frame(),
        Err(FrameError::TooLarge {
            len: 1_000_000,
            max: 1024
        })
    ));
    assert!(matches!(reader.next_frame(), Err(FrameError::StreamFailed)));
}

#[test]
fn reader_yields_frames_before_a_later_oversized_one() {
    let mut bytes = prefixed_stream(&[Frame::Ping { nonce: 1 }]);
    bytes.extend_from_slice(&u32::MAX.to_be_bytes());
    let mut reader = FrameReader::new(1024);
    reader.push(&bytes);
    assert_eq!(reader.next_frame().unwrap(), Some(Frame::Ping { nonce: 1 }));
    assert!(reader.next_frame().is_err());
}

#[test]
fn reader_grows_its_buffer_no_faster_than_bytes_arrive() {
    let mut reader = FrameReader::new(1 << 30);
    reader.push(&(1u32 << 29).to_be_bytes());
    reader.push(&[0u8; 100]);
    assert_eq!(reader.buffered(), 100);
    let cap = reader.body.as_ref().unwrap().buf.capacity();
    assert!(cap <= 200, "capacity {cap} for 100 received bytes");
}

#[test]
fn zero_length_frame_is_an_empty_frame_error() {
    let mut reader = FrameReader::new(1024);
    reader.push(&[0, 0, 0, 0]);
    assert!(matches!(reader.next_frame(), Err(FrameError::Empty)));
}

#[test]
fn best_common_version_is_chosen() {
    assert_eq!(choose_version(&[1, 2, 3], &[3, 2]), Some(3));
    assert_eq!(choose_version(&[1], &[3, 2]), None);
}

#[test]
fn ack_covers_cumulative_and_ranges() {
    let ack = Ack {
        cumulative: 3,
        selective: vec![(5, 6)],
    };
    assert!(ack.covers(1) && ack.covers(3) && ack.covers(5) && ack.covers(6));
    assert!(!ack.covers(4) && !ack.covers(7));
}

proptest! {
    #[test]
    fn every_frame_kind_round_trips(frame in arb_frame()) {
        prop_assert_eq!(decode(&encode(&frame), MAX).unwrap(), frame);
    }

    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
        let _ = decode(&bytes, MAX);
        let mut with_format = vec![FRAME_FORMAT];
        with_format.extend_from_slice(&bytes);
        let _ = decode(&with_format, MAX);
    }

    #[test]
    fn truncated_frames_always_error(frame in arb_frame(), cut in any::<prop::sample::Index>()) {
        let bytes = encode(&frame);
        let cut = cut.index(bytes.len());
        prop_assert!(decode(&bytes[..cut], MAX).is_err());
    }

    #[test]
    fn corrupted_frames_never_panic(frame in arb_frame(), at in any::<prop::sample::Index>(), byte in any::<u8>()) {
        let mut bytes = encode(&frame);
        let at = at.index(bytes.len());
        bytes[at] = byte;
        let _ = decode(&bytes, MAX);
    }

    #[test]
    fn reader_reassembles_a_stream_split_anywhere(
        frames in proptest::collection::vec(arb_frame(), 0..8),
        cuts in proptest::collection::vec(any::<prop::sample::Index>(), 0..16),
    ) {
        let stream = prefixed_stream(&frames);
        let mut points: Vec<usize> = cuts.iter().map(|c| c.index(stream.len() + 1)).collect();
        points.push(0);
        points.push(stream.len());
        points.sort_unstable();
        let mut reader = FrameReader::new(MAX);
        let mut out = Vec::new();
        for w in points.windows(2) {
            reader.push(&stream[w[0]..w[1]]);
            out.extend(drain(&mut reader).unwrap());
        }
        prop_assert_eq!(out, frames);
        prop_assert_eq!(reader.buffered(), 0);
    }

    #[test]
    fn reader_never_panics_on_random_streams(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let mut reader = FrameReader::new(256);
        reader.push(&bytes);
        let _ = drain(&mut reader);
        prop_assert!(reader.buffered() <= bytes.len());
    }

    #[test]
    fn oversized_declared_length_is_rejected_without_buffering(len in 1025u32.., tail in 0usize..2048) {
        let mut reader = FrameReader::new(1024);
        reader.push(&len.to_be_bytes());
        reader.push(&vec![0u8; tail]);
        prop_assert_eq!(reader.buffered(), 0);
        let rejected = matches!(reader.next_frame(), Err(FrameError::TooLarge { .. }));
        prop_assert!(rejected);
    }
}

#[test]
fn data_frame_len_is_the_encoded_size_at_the_widest_seq() {
    for size in [0, 10, 300, 70_000] {
        let m = msg("default/pods/a", "7").with_content(vec![b'x'; size]);
        let widest = encode(&Frame::Data {
            seq: u64::MAX,
            msg: Box::new(m.clone()),
        });
        assert_eq!(data_frame_len(&m), widest.len());
        let first = encode(&Frame::Data {
            seq: 1,
            msg: Box::new(m.clone()),
        });
        assert!(data_frame_len(&m) >= first.len());
    }
}
