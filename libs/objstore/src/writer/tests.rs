//! The writer after a failed batch: a full file (SQLite's `max_page_count`, which fails a write
//! with `SQLITE_FULL` exactly as a full disk does) and what happens once there is room again.

use std::convert::Infallible;

use bytes::Bytes;

use crate::{Mutation, NewObject, ObjKey, StoreConfig, StoreError, Writer};

fn store() -> (tempfile::TempDir, Writer) {
    let dir = tempfile::tempdir().unwrap();
    let store = Writer::open(dir.path().join("store.db"), StoreConfig::default()).unwrap();
    (dir, store)
}

fn key(i: usize) -> ObjKey {
    ObjKey::new("pods", "default", format!("p{i}"))
}

/// An object of about 8 KiB, so a few of them need new pages.
fn object(i: usize) -> NewObject {
    NewObject {
        uid: format!("u{i}"),
        resource_version: i.to_string(),
        labels: Default::default(),
        fields: Default::default(),
        value: Bytes::from(vec![b'x'; 8 * 1024]),
    }
}

/// Puts objects from `from` on until one fails; returns the index that failed.
async fn fill(store: &Writer, from: usize) -> (usize, StoreError) {
    for i in from..from + 10_000 {
        if let Err(e) = store.put(key(i), object(i)).await {
            return (i, e);
        }
    }
    panic!("10,000 objects fit under the page cap");
}

#[tokio::test]
async fn a_full_file_fails_writes_and_the_writer_takes_them_again_once_there_is_room() {
    let (_dir, store) = store();
    store.put(key(0), object(0)).await.unwrap();
    store.set_max_page_count(1).await.unwrap();
    let (failed, error) = fill(&store, 1).await;
    let chain = format!("{error}: {}", std::error::Error::source(&error).unwrap());
    assert!(chain.contains("full"), "{chain}");
    let revision = store.revision();
    assert!(
        store.write_failure().is_some(),
        "the failure is reported until a batch commits"
    );
    assert!(store.probe().await.is_err(), "a probe cannot write either");
    assert_eq!(
        store.get(&key(failed)).await.unwrap(),
        None,
        "nothing of it"
    );

    store.set_max_page_count(1 << 30).await.unwrap();
    store.probe().await.unwrap();
    assert!(store.write_failure().is_none());
    assert_eq!(store.revision(), revision, "a probe changes nothing");
    let stored = store.put(key(failed), object(failed)).await.unwrap();
    assert_eq!(stored.revision, revision + 1, "no revision was used up");
    let kept = store
        .mutate(key(0), |cur, _| {
            Ok::<_, Infallible>((Mutation::Keep, cur.map(|c| c.resource_version.clone())))
        })
        .await
        .unwrap();
    assert_eq!(kept.unwrap().output.as_deref(), Some("0"));
}

fn small(i: usize) -> NewObject {
    NewObject {
        value: Bytes::from_static(b"{}"),
        ..object(i)
    }
}

#[tokio::test]
async fn a_change_and_its_outbox_entry_commit_together() {
    let (_dir, store) = store();
    let queued = store
        .mutate_and_queue(key(1), |_, _| {
            let entry = crate::Enqueue {
                key: "update:p1".into(),
                payload: Bytes::from_static(b"sent later"),
            };
            Ok::<_, Infallible>((Mutation::Put(small(1)), (), Some(entry)))
        })
        .await
        .unwrap();
    let Ok((applied, id)) = queued;
    assert!(applied.object.is_some());
    let entries = store.outbox_peek(10).await.unwrap();
    assert_eq!(entries.len(), 1);
    assert_eq!(
        (Some(entries[0].id), &entries[0].payload[..]),
        (id, &b"sent later"[..])
    );

    // An outbox entry that does not fit fails the change with it.
    store.set_max_page_count(1).await.unwrap();
    let big = crate::Enqueue {
        key: "update:p2".into(),
        payload: Bytes::from(vec![b'x'; 256 * 1024]),
    };
    let failed = store
        .mutate_and_queue(key(2), move |_, _| {
            Ok::<_, Infallible>((Mutation::Put(small(2)), (), Some(big)))
        })
        .await;
    assert!(failed.is_err(), "the batch cannot commit");
    store.set_max_page_count(1 << 30).await.unwrap();
    assert!(
        store.get(&key(2)).await.unwrap().is_none(),
        "no change without its entry"
    );
    assert_eq!(store.outbox_len().await.unwrap(), 1);

    // A closure that refuses writes neither.
    let refused = store
        .mutate_and_queue(key(3), |_, _| Err::<(Mutation, (), _), _>("no"))
        .await
        .unwrap();
    assert!(refused.is_err());
    assert!(store.get(&key(3)).await.unwrap().is_none());
    assert_eq!(store.outbox_len().await.unwrap(), 1);
}

#[tokio::test]
async fn a_batch_that_writes_nothing_does_not_clear_the_write_failure() {
    let (_dir, store) = store();
    store.put(key(0), object(0)).await.unwrap();
    store.set_max_page_count(1).await.unwrap();
    fill(&store, 1).await;
    assert!(store.write_failure().is_some());

    // A read-only batch commits on a full disk: it proves nothing about writes.
    let kept = store
        .mutate(key(0), |_, _| Ok::<_, Infallible>((Mutation::Keep, ())))
        .await
        .unwrap();
    assert!(kept.is_ok());
    let refused = store
        .mutate(key(0), |_, _| Err::<(Mutation, ()), _>("no"))
        .await
        .unwrap();
    assert!(refused.is_err());
    store.outbox_ack(vec![12345]).await.unwrap();
    assert!(
        store.write_failure().is_some(),
        "still reported: nothing was written since"
    );

    store.set_max_page_count(1 << 30).await.unwrap();
    store.put(key(1), small(1)).await.unwrap();
    assert!(
        store.write_failure().is_none(),
        "a committed write clears it"
    );
}
