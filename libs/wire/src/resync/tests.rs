use super::*;
use crate::frame::{decode, encode};

fn entry(key: &str, rv: &str) -> InventoryEntry {
    InventoryEntry {
        key: key.into(),
        resource_version: rv.into(),
    }
}

fn inventory(pairs: &[(&str, &str)]) -> Inventory {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

#[test]
fn empty_inventory_is_one_last_frame() {
    assert_eq!(
        inventory_frames(Vec::new(), 1024),
        [Frame::Inventory {
            entries: vec![],
            last: true
        }]
    );
}

#[test]
fn chunks_fit_the_frame_limit_and_keep_every_entry() {
    let entries: Vec<InventoryEntry> = (0..1000)
        .map(|i| entry(&format!("pod/default/p{i:04}"), &i.to_string()))
        .collect();
    let frames = inventory_frames(entries.clone(), 1024);
    assert!(frames.len() > 1);
    let mut back = Vec::new();
    for (i, frame) in frames.iter().enumerate() {
        assert!(encode(frame).len() <= 1024, "chunk {i} too big");
        let Frame::Inventory { entries, last } = decode(&encode(frame), 1024).unwrap() else {
            panic!("not an inventory frame");
        };
        assert_eq!(last, i == frames.len() - 1);
        back.extend(entries);
    }
    assert_eq!(back, entries);
}

#[test]
fn collector_assembles_chunks() {
    let mut c = InventoryCollector::new(10);
    assert_eq!(c.on_chunk(vec![entry("a", "1")], false), Ok(None));
    let inv = c.on_chunk(vec![entry("b", "2")], true).unwrap().unwrap();
    assert_eq!(inv, inventory(&[("a", "1"), ("b", "2")]));
    assert_eq!(c.on_chunk(vec![], true), Err(InventoryError::AfterLast));
}

#[test]
fn collector_enforces_its_entry_limit() {
    let mut c = InventoryCollector::new(2);
    c.on_chunk(vec![entry("a", "1"), entry("b", "1")], false)
        .unwrap();
    assert_eq!(
        c.on_chunk(vec![entry("c", "1")], true),
        Err(InventoryError::TooManyEntries { max: 2 })
    );
}

#[test]
fn collector_rejects_duplicate_keys() {
    let mut c = InventoryCollector::new(10);
    let err = c
        .on_chunk(vec![entry("a", "1"), entry("a", "2")], true)
        .unwrap_err();
    assert_eq!(err, InventoryError::DuplicateKey { key: "a".into() });
}

#[test]
fn plan_sends_only_differences_deletes_included() {
    let held = inventory(&[("same", "1"), ("stale", "1"), ("gone", "3")]);
    let desired = [("same", "1"), ("stale", "2"), ("new", "1")];
    let plan = plan_resync(desired, &held);
    assert_eq!(plan.upserts, ["new", "stale"]);
    assert_eq!(plan.deletes, ["gone"]);
}

#[test]
fn plan_is_empty_when_edge_holds_exactly_the_desired_set() {
    let held = inventory(&[("a", "1"), ("b", "2")]);
    assert!(plan_resync([("b", "2"), ("a", "1")], &held).is_empty());
}

#[test]
fn resync_done_waits_for_every_difference_and_is_sent_once() {
    let plan = ResyncPlan {
        upserts: vec!["a".into(), "b".into()],
        deletes: vec!["c".into()],
    };
    let mut p = ResyncProgress::new(&plan);
    p.on_acked("a");
    p.on_acked("c");
    assert_eq!(p.poll_done(), None);
    p.on_acked("b");
    assert_eq!(
        p.poll_done(),
        Some(Frame::ResyncDone {
            upserts: 2,
            deletes: 1
        })
    );
    assert_eq!(p.poll_done(), None);
}

#[test]
fn empty_plan_is_done_at_once() {
    let mut p = ResyncProgress::new(&ResyncPlan::default());
    assert_eq!(
        p.poll_done(),
        Some(Frame::ResyncDone {
            upserts: 0,
            deletes: 0
        })
    );
}
