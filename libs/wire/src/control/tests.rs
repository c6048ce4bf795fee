use beehive::{Message, Operation};
use proptest::prelude::*;

use super::*;
use crate::ObjectRef;
use crate::testing::assert_refused_by_name;

fn round_trip(ask: &ToController) -> ToController {
    ToController::from_message(&ask.to_message("cloudhub", "cloudhub")).unwrap()
}

#[test]
fn node_resources_parse_with_and_without_a_rest() {
    assert_eq!(
        NodeResource::parse("node/n1/default/pods/a"),
        Ok(NodeResource::new("n1", "default/pods/a"))
    );
    assert_eq!(NodeResource::parse("node/n1"), Ok(NodeResource::bare("n1")));
    assert_eq!(
        NodeResource::parse("node/n1/"),
        Ok(NodeResource::new("n1", ""))
    );
    assert_eq!(NodeResource::parse("node/n1").unwrap().rest(), "");
}

#[test]
fn node_resources_print_as_they_parse() {
    for s in [
        "node/n1",
        "node/n1/",
        "node/n1/digest",
        "node/n1/default/pods/a",
    ] {
        assert_eq!(NodeResource::parse(s).unwrap().to_string(), s);
    }
}

#[test]
fn a_resource_without_the_prefix_or_a_node_is_refused_by_name() {
    let bad = [
        "",
        "default/pods/a",
        "nodes/n1/digest",
        "node/",
        "node//digest",
        "node",
    ];
    let parse = |s: &str| NodeResource::parse(s).map(|_| ());
    assert_refused_by_name(&bad, parse, ResourceError::NotNodeScoped);
}

#[test]
fn downstream_objects_carry_the_message_resource_behind_the_node() {
    let pod = ObjectRef::new("pods", "default", "a");
    let resource = NodeResource::new("n1", &pod.message_resource()).to_string();
    assert_eq!(resource, "node/n1/default/pods/a");
    let parsed = NodeResource::parse(&resource).unwrap();
    assert_eq!(parsed.node, "n1");
    assert_eq!(ObjectRef::from_message_resource(parsed.rest()), Ok(pod));
}

#[test]
fn questions_and_events_keep_their_resources_and_operations() {
    let cases = [
        (
            ToController::Digest { node: "n1".into() },
            "node/n1/digest",
            Operation::Query,
        ),
        (
            ToController::Connected { node: "n1".into() },
            "node/n1",
            Operation::Connected,
        ),
        (
            ToController::Disconnected { node: "n1".into() },
            "node/n1",
            Operation::Disconnected,
        ),
    ];
    for (ask, resource, operation) in cases {
        let msg = ask.to_message("cloudhub", "cloudhub");
        assert_eq!(msg.resource(), resource);
        assert_eq!(msg.operation(), &operation);
        assert!(msg.content.is_empty());
        assert_eq!(msg.router.source, "cloudhub");
        assert_eq!(ToController::from_message(&msg), Ok(ask));
    }
}

#[test]
fn a_resync_question_carries_the_inventory_as_msgpack_pairs() {
    let held: Inventory = [("pods/default/a".to_owned(), "7".to_owned())].into();
    let ask = ToController::Resync {
        node: "n1".into(),
        held: held.clone(),
    };
    let msg = ask.to_message("cloudhub", "cloudhub");
    assert_eq!(msg.resource(), "node/n1/resync");
    assert_eq!(msg.operation(), &Operation::Query);
    let pairs = vec![("pods/default/a", "7")];
    assert_eq!(&msg.content[..], &rmp_serde::to_vec(&pairs).unwrap()[..]);
    assert_eq!(round_trip(&ask), ask);
}

#[test]
fn events_read_with_a_trailing_slash_too() {
    let msg = Message::new().route("cloudhub", "cloudhub", "node/n1/", Operation::Connected);
    assert_eq!(
        ToController::from_message(&msg),
        Ok(ToController::Connected { node: "n1".into() })
    );
}

#[test]
fn a_message_outside_the_protocol_is_refused_with_its_resource_and_operation() {
    let msg = Message::new().route(
        "cloudhub",
        "cloudhub",
        "node/n1/inventory",
        Operation::Query,
    );
    let err = ToController::from_message(&msg).unwrap_err();
    assert_eq!(
        err,
        ControlError::Unknown {
            resource: "node/n1/inventory".into(),
            operation: Operation::Query
        }
    );
    assert!(err.to_string().contains("\"node/n1/inventory\""), "{err}");
    assert!(err.to_string().contains("query"), "{err}");

    let msg = Message::new().route("cloudhub", "cloudhub", "n1/digest", Operation::Query);
    let err = ToController::from_message(&msg).unwrap_err();
    assert!(matches!(err, ControlError::NotNodeScoped { .. }), "{err}");
    assert!(err.to_string().contains("\"n1/digest\""), "{err}");
}

#[test]
fn a_resync_question_with_bad_content_is_refused() {
    let msg = Message::new()
        .route("cloudhub", "cloudhub", "node/n1/resync", Operation::Query)
        .with_content(&b"\xc1"[..]);
    let err = ToController::from_message(&msg).unwrap_err();
    assert!(matches!(err, ControlError::BadContent { .. }), "{err}");
    assert!(err.to_string().contains("\"node/n1/resync\""), "{err}");
}

#[test]
fn a_digest_answer_is_sixteen_big_endian_bytes() {
    let ask = ToController::Digest { node: "n1".into() }.to_message("cloudhub", "cloudhub");
    let digest = crate::digest([("pods/default/a", "1")]);
    let answer = digest_answer(&ask, "edgecontroller", digest);
    assert_eq!(&answer.content[..], &digest.to_bytes()[..]);
    assert_eq!(answer.parent_id(), Some(ask.id()));
    assert_eq!(read_digest_answer(&answer), Ok(digest));

    let short = ask.response("edgecontroller", vec![0u8; 15]);
    let err = read_digest_answer(&short).unwrap_err();
    assert!(err.to_string().contains("15 bytes"), "{err}");
    assert!(err.to_string().contains("\"node/n1/digest\""), "{err}");
}

#[test]
fn a_resync_answer_carries_the_messages() {
    let ask = ToController::Resync {
        node: "n1".into(),
        held: Inventory::new(),
    }
    .to_message("cloudhub", "cloudhub");
    let diff = vec![
        Message::new().route(
            "edgecontroller",
            "resource",
            "default/pods/a",
            Operation::Update,
        ),
        Message::new().route("edgecontroller", "resource", "/nodes/n1", Operation::Delete),
    ];
    let answer = resync_answer(&ask, "edgecontroller", &diff);
    assert_eq!(&answer.content[..], &rmp_serde::to_vec(&diff).unwrap()[..]);
    assert_eq!(read_resync_answer(&answer), Ok(diff));
    let bad = ask.response("edgecontroller", &b"\xc1"[..]);
    assert!(matches!(
        read_resync_answer(&bad),
        Err(ControlError::BadContent { .. })
    ));
}

proptest! {
    #[test]
    fn every_question_round_trips(
        node in "[a-z0-9][a-z0-9.-]{0,20}",
        held in proptest::collection::hash_map("[a-z]{1,8}/[a-z]{0,8}/[a-z]{1,8}", "[0-9]{1,6}", 0..10),
        which in 0..4u8,
    ) {
        let ask = match which {
            0 => ToController::Digest { node },
            1 => ToController::Resync { node, held },
            2 => ToController::Connected { node },
            _ => ToController::Disconnected { node },
        };
        prop_assert_eq!(round_trip(&ask), ask);
    }
}
