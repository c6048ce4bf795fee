//! The upstream outbox: coalescing, acks, restart.

use bytes::Bytes;
use objstore::StoreConfig;

use crate::common::TempStore;

fn payloads(entries: &[objstore::OutboxEntry]) -> Vec<(&str, &[u8])> {
    entries
        .iter()
        .map(|e| (e.key.as_str(), &e.payload[..]))
        .collect()
}

#[tokio::test]
async fn a_newer_payload_replaces_an_unsent_one_and_keeps_its_place() {
    let t = TempStore::new();
    t.store
        .outbox_put("pod/a", Bytes::from("a1"))
        .await
        .unwrap();
    t.store
        .outbox_put("pod/b", Bytes::from("b1"))
        .await
        .unwrap();
    t.store
        .outbox_put("pod/a", Bytes::from("a2"))
        .await
        .unwrap();
    assert_eq!(t.store.outbox_len().await.unwrap(), 2);
    let entries = t.store.outbox_peek(10).await.unwrap();
    assert_eq!(
        payloads(&entries),
        [("pod/a", &b"a2"[..]), ("pod/b", &b"b1"[..])]
    );
    assert_eq!(
        payloads(&t.store.outbox_peek(1).await.unwrap()),
        [("pod/a", &b"a2"[..])]
    );
}

#[tokio::test]
async fn acking_a_replaced_payload_keeps_the_newer_one() {
    let t = TempStore::new();
    let old = t
        .store
        .outbox_put("pod/a", Bytes::from("a1"))
        .await
        .unwrap();
    let sent = t.store.outbox_peek(10).await.unwrap();
    assert_eq!(sent[0].id, old);
    let new = t
        .store
        .outbox_put("pod/a", Bytes::from("a2"))
        .await
        .unwrap();
    assert!(new > old);
    assert_eq!(t.store.outbox_ack(vec![old]).await.unwrap(), 0);
    assert_eq!(
        payloads(&t.store.outbox_peek(10).await.unwrap()),
        [("pod/a", &b"a2"[..])]
    );
    assert_eq!(t.store.outbox_ack(vec![new]).await.unwrap(), 1);
    assert_eq!(t.store.outbox_len().await.unwrap(), 0);
}

#[tokio::test]
async fn ack_removes_only_the_given_entries() {
    let t = TempStore::new();
    let mut ids = Vec::new();
    for i in 0..5 {
        ids.push(
            t.store
                .outbox_put(format!("k{i}"), Bytes::from(vec![i]))
                .await
                .unwrap(),
        );
    }
    assert_eq!(
        t.store.outbox_ack(vec![ids[0], ids[2], 999]).await.unwrap(),
        2
    );
    let keys: Vec<_> = t
        .store
        .outbox_peek(10)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.key)
        .collect();
    assert_eq!(keys, ["k1", "k3", "k4"]);
}

#[tokio::test]
async fn outbox_survives_restart_and_ids_are_never_reused() {
    let t = TempStore::new();
    t.store.outbox_put("a", Bytes::from("1")).await.unwrap();
    let b = t.store.outbox_put("b", Bytes::from("2")).await.unwrap();
    t.store.outbox_ack(vec![b]).await.unwrap();
    let t = t.reopen(StoreConfig::default());
    assert_eq!(
        payloads(&t.store.outbox_peek(10).await.unwrap()),
        [("a", &b"1"[..])]
    );
    let c = t.store.outbox_put("c", Bytes::from("3")).await.unwrap();
    assert!(c > b, "id {c} reused after {b}");
    // Outbox writes consume no object revisions.
    assert_eq!(t.store.revision(), 0);
}
