use proptest::prelude::*;
use smol_str::SmolStr;

use super::*;
use crate::message::{MsgId, Operation};

fn operation() -> impl Strategy<Value = Operation> {
    prop_oneof![
        Just(Operation::Insert),
        Just(Operation::Update),
        Just(Operation::Delete),
        Just(Operation::Response),
        Just(Operation::Keepalive),
        "[a-z]{1,12}".prop_map(|s| Operation::parse(&s)),
    ]
}

fn message() -> impl Strategy<Value = Message> {
    (
        any::<u128>(),
        proptest::option::of(any::<u128>()),
        any::<i64>(),
        proptest::option::of("[0-9]{1,10}"),
        any::<bool>(),
        (
            "[a-z]{0,10}",
            "[a-z]{0,10}",
            "[a-z]{0,10}",
            operation(),
            "[ -~]{0,40}",
        ),
        proptest::collection::vec(any::<u8>(), 0..512),
    )
        .prop_map(
            |(id, parent, ts, rv, sync, (src, dst, grp, op, res), content)| {
                let mut m = Message::new()
                    .route(src, grp, res, op)
                    .to(dst)
                    .with_content(content);
                m.header.id = MsgId::from_u128(id);
                m.header.parent_id = parent.map(MsgId::from_u128);
                m.header.timestamp = ts;
                m.header.resource_version = rv.map(SmolStr::from);
                m.header.sync = sync;
                m
            },
        )
}

proptest! {
    #[test]
    fn every_message_round_trips(m in message()) {
        let bytes = encode(&m);
        prop_assert_eq!(decode(&bytes).unwrap(), m);
    }

    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
        let _ = decode(&bytes);
    }

    #[test]
    fn every_truncation_is_an_error(m in message(), cut in any::<prop::sample::Index>()) {
        let bytes = encode(&m);
        let at = cut.index(bytes.len());
        prop_assert!(decode(&bytes[..at]).is_err());
    }

    #[test]
    fn flipped_bytes_never_panic(m in message(), at in any::<prop::sample::Index>(), v in any::<u8>()) {
        let mut bytes = encode(&m);
        let i = at.index(bytes.len());
        bytes[i] = v;
        let _ = decode(&bytes);
    }
}

#[test]
fn an_unknown_version_is_refused_by_name() {
    let mut bytes = encode(&Message::new());
    bytes[0] = 9;
    let err = decode(&bytes).unwrap_err();
    assert!(matches!(
        err,
        DecodeError::UnsupportedVersion {
            found: 9,
            supported: 1
        }
    ));
    assert!(err.to_string().contains("version 9"), "{err}");
}

#[test]
fn empty_input_is_refused() {
    assert!(matches!(decode(&[]), Err(DecodeError::Empty)));
}

#[test]
fn trailing_bytes_are_refused() {
    let mut bytes = encode(&Message::new());
    bytes.push(0);
    assert!(matches!(
        decode(&bytes),
        Err(DecodeError::TrailingBytes { count: 1 })
    ));
}

#[test]
fn a_huge_declared_length_does_not_allocate_it() {
    // version, fixarray(3), then a header array claiming 2^32-1 elements.
    let bytes = [FORMAT_VERSION, 0x93, 0xdd, 0xff, 0xff, 0xff, 0xff];
    assert!(decode(&bytes).is_err());
}
