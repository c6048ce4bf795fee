//! Proptest strategies and message builders shared by the unit tests.

use beehive::{Header, Message, MsgId, Operation, Router};
use bytes::Bytes;
use proptest::prelude::*;

use crate::digest::Digest;
use crate::error::ResourceError;
use crate::frame::{Ack, Frame, Hello, InventoryEntry, Limits, Resume, Welcome};

/// A message for `resource` with a fixed content, as a test would build it.
pub fn msg(resource: &str, rv: &str) -> Message {
    Message::new()
        .route("edgecontroller", "resource", resource, Operation::Update)
        .with_resource_version(rv)
        .with_content(format!("{resource}@{rv}"))
}

/// Checks that `parse` refuses every string in `bad` with `refusal(bad)`, whose text names it.
pub fn assert_refused_by_name<T: std::fmt::Debug>(
    bad: &[&str],
    parse: impl Fn(&str) -> Result<T, ResourceError>,
    refusal: fn(String) -> ResourceError,
) {
    for bad in bad {
        let err = parse(bad).unwrap_err();
        assert_eq!(err, refusal(bad.to_string()));
        assert!(err.to_string().contains(&format!("{bad:?}")), "{err}");
    }
}

pub fn arb_operation() -> impl Strategy<Value = Operation> {
    prop_oneof![
        Just(Operation::Insert),
        Just(Operation::Update),
        Just(Operation::Delete),
        Just(Operation::Response),
        "x-[a-z]{0,8}".prop_map(|s| Operation::Other(s.into())),
    ]
}

pub fn arb_message() -> impl Strategy<Value = Message> {
    (
        (
            any::<u128>(),
            proptest::option::of(any::<u128>()),
            any::<i64>(),
        ),
        (proptest::option::of("[0-9]{1,8}"), any::<bool>()),
        ("[a-z]{0,10}", "[a-z]{0,10}", "[a-z]{0,10}", "[a-z/]{0,24}"),
        arb_operation(),
        proptest::collection::vec(any::<u8>(), 0..64),
    )
        .prop_map(
            |((id, parent, ts), (rv, sync), (src, dst, group, res), op, content)| Message {
                header: Header {
                    id: MsgId::from_u128(id),
                    parent_id: parent.map(MsgId::from_u128),
                    timestamp: ts,
                    resource_version: rv.map(Into::into),
                    sync,
                },
                router: Router {
                    source: src.into(),
                    destination: dst.into(),
                    group: group.into(),
                    operation: op,
                    resource: res.into(),
                },
                content: Bytes::from(content),
            },
        )
}

fn arb_limits() -> impl Strategy<Value = Limits> {
    (any::<u32>(), any::<u32>()).prop_map(|(max_frame, recv_window)| Limits {
        max_frame,
        recv_window,
    })
}

fn arb_entry() -> impl Strategy<Value = InventoryEntry> {
    ("[a-z/]{0,24}", "[0-9]{0,8}").prop_map(|(key, resource_version)| InventoryEntry {
        key,
        resource_version,
    })
}

fn arb_hello() -> impl Strategy<Value = Hello> {
    (
        proptest::collection::vec(any::<u16>(), 0..4),
        "[a-z0-9-]{0,16}",
        any::<u128>(),
        arb_limits(),
        proptest::option::of(any::<u64>()),
    )
        .prop_map(|(versions, node_id, digest, limits, resume)| Hello {
            protocol_versions: versions,
            node_id,
            inventory_digest: Digest::from_u128(digest),
            limits,
            resume: resume.map(|session_id| Resume { session_id }),
        })
}

fn arb_ack() -> impl Strategy<Value = Ack> {
    (
        any::<u64>(),
        proptest::collection::vec((any::<u64>(), any::<u64>()), 0..8),
    )
        .prop_map(|(cumulative, selective)| Ack {
            cumulative,
            selective,
        })
}

/// Every frame kind, with arbitrary fields.
pub fn arb_frame() -> impl Strategy<Value = Frame> {
    prop_oneof![
        arb_hello().prop_map(Frame::Hello),
        (any::<u16>(), any::<u64>(), arb_limits()).prop_map(|(v, s, limits)| Frame::Welcome(
            Welcome {
                protocol_version: v,
                session_id: s,
                limits
            }
        )),
        (".{0,20}", proptest::option::of(any::<u32>())).prop_map(|(reason, retry_after_ms)| {
            Frame::Refuse {
                reason,
                retry_after_ms,
            }
        }),
        (any::<u64>(), arb_message()).prop_map(|(seq, msg)| Frame::Data {
            seq,
            msg: Box::new(msg)
        }),
        arb_ack().prop_map(Frame::Ack),
        any::<u64>().prop_map(|nonce| Frame::Ping { nonce }),
        any::<u64>().prop_map(|nonce| Frame::Pong { nonce }),
        Just(Frame::InventoryRequest),
        (proptest::collection::vec(arb_entry(), 0..6), any::<bool>())
            .prop_map(|(entries, last)| Frame::Inventory { entries, last }),
        (any::<u32>(), any::<u32>())
            .prop_map(|(upserts, deletes)| Frame::ResyncDone { upserts, deletes }),
        ".{0,20}".prop_map(|reason| Frame::Close { reason }),
    ]
}
