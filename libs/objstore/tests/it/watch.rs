//! Watch: replay, live, expiry, lagging watchers, filter transitions.

use std::time::Duration;

use objstore::{
    EventKind, NewObject, ObjKey, StoreConfig, StoreError, WatchOptions, Watcher, Writer,
};
use proptest::prelude::*;
use testkit::eventually;

use crate::common::{DEADLINE, TempStore, next_event, pod, pod_key};

async fn put_n(store: &Writer, from: usize, to: usize) {
    for i in from..to {
        let name = format!("p{i}");
        store
            .put(pod_key("ns", &name), pod(&name, "n1", i as u64))
            .await
            .unwrap();
    }
}

async fn revisions(w: &mut Watcher, n: usize) -> Vec<u64> {
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        out.push(next_event(w).await.unwrap().revision);
    }
    out
}

#[tokio::test]
async fn watch_replays_history_then_continues_live() {
    let t = TempStore::new();
    put_n(&t.store, 0, 10).await;
    let mut w = t.store.watch(WatchOptions::from_revision(3)).unwrap();
    put_n(&t.store, 10, 15).await;
    assert_eq!(revisions(&mut w, 12).await, (4..=15).collect::<Vec<_>>());
    put_n(&t.store, 15, 16).await;
    let e = next_event(&mut w).await.unwrap();
    assert_eq!((e.revision, e.kind), (16, EventKind::Added));
    assert_eq!(e.object.key, pod_key("ns", "p15"));
}

#[tokio::test]
async fn watch_replays_across_a_restart() {
    let t = TempStore::new();
    put_n(&t.store, 0, 5).await;
    t.store.delete(&pod_key("ns", "p1")).await.unwrap();
    let t = t.reopen(StoreConfig::default());
    let mut w = t.store.watch(WatchOptions::from_revision(4)).unwrap();
    let e = next_event(&mut w).await.unwrap();
    assert_eq!((e.revision, e.kind), (5, EventKind::Added));
    let e = next_event(&mut w).await.unwrap();
    assert_eq!((e.revision, e.kind), (6, EventKind::Deleted));
    assert_eq!(e.object.key, pod_key("ns", "p1"));
    assert_eq!(e.object.revision, 6);
    assert_eq!(
        e.object.resource_version, "1",
        "deleted event carries the last state"
    );
}

#[tokio::test]
async fn modifications_and_deletes_have_their_kinds() {
    let t = TempStore::new();
    let mut w = t.store.watch(WatchOptions::from_revision(0)).unwrap();
    t.store
        .put(pod_key("ns", "a"), pod("a", "n1", 1))
        .await
        .unwrap();
    t.store
        .put(pod_key("ns", "a"), pod("a", "n1", 2))
        .await
        .unwrap();
    t.store.delete(&pod_key("ns", "a")).await.unwrap();
    let mut got = Vec::new();
    for _ in 0..3 {
        let e = next_event(&mut w).await.unwrap();
        got.push((e.revision, e.kind, e.object.resource_version.clone()));
    }
    assert_eq!(
        got,
        [
            (1, EventKind::Added, "1".to_owned()),
            (2, EventKind::Modified, "2".to_owned()),
            (3, EventKind::Deleted, "2".to_owned()),
        ]
    );
}

#[tokio::test]
async fn watching_from_a_compacted_revision_is_expired() {
    let t = TempStore::with(StoreConfig {
        retention: 10,
        ..StoreConfig::default()
    });
    put_n(&t.store, 0, 40).await;
    let compacted = t.store.compacted_revision();
    assert!(compacted >= 20, "compacted only up to {compacted}");
    let err = t.store.watch(WatchOptions::from_revision(1)).unwrap_err();
    assert!(matches!(err, StoreError::Expired { requested: 1, compacted: c } if c == compacted));
    assert!(err.is_expired());

    // From the floor itself everything after it is still there.
    let mut w = t
        .store
        .watch(WatchOptions::from_revision(compacted))
        .unwrap();
    let n = (40 - compacted) as usize;
    assert_eq!(
        revisions(&mut w, n).await,
        (compacted + 1..=40).collect::<Vec<_>>()
    );
}

#[tokio::test]
async fn compaction_is_persisted() {
    let config = StoreConfig {
        retention: 10,
        ..StoreConfig::default()
    };
    let t = TempStore::with(config.clone());
    put_n(&t.store, 0, 40).await;
    let compacted = t.store.compacted_revision();
    let t = t.reopen(config);
    assert_eq!(t.store.compacted_revision(), compacted);
    assert!(t.store.watch(WatchOptions::from_revision(1)).is_err());
}

#[tokio::test]
async fn a_slow_watcher_is_ended_and_the_writer_keeps_going() {
    let t = TempStore::new();
    let mut slow = t
        .store
        .watch(WatchOptions::from_revision(0).buffer(4))
        .unwrap();
    let mut fine = t
        .store
        .watch(WatchOptions::from_revision(0).buffer(1000))
        .unwrap();
    put_n(&t.store, 0, 100).await;
    assert_eq!(t.store.revision(), 100);
    assert_eq!(
        t.store.stats().watchers,
        1,
        "the lagging watcher was dropped"
    );

    assert_eq!(revisions(&mut slow, 4).await, vec![1, 2, 3, 4]);
    let err = next_event(&mut slow).await.unwrap_err();
    assert!(
        matches!(
            err,
            StoreError::WatcherLagged {
                buffer: 4,
                last_revision: 4
            }
        ),
        "{err:?}"
    );
    assert!(err.is_expired());
    assert!(slow.next().await.is_none());

    assert_eq!(
        revisions(&mut fine, 100).await,
        (1..=100).collect::<Vec<_>>()
    );
    // The lagged client resumes from the last revision it saw.
    let mut again = t.store.watch(WatchOptions::from_revision(4)).unwrap();
    assert_eq!(
        revisions(&mut again, 96).await,
        (5..=100).collect::<Vec<_>>()
    );
}

#[tokio::test]
async fn a_dropped_watcher_is_unregistered() {
    let t = TempStore::new();
    let w = t.store.watch(WatchOptions::from_revision(0)).unwrap();
    assert_eq!(t.store.stats().watchers, 1);
    drop(w);
    put_n(&t.store, 0, 1).await;
    assert_eq!(t.store.stats().watchers, 0);
}

fn labelled(app: &str, node: &str, rv: u64) -> NewObject {
    pod("a", node, rv).label("app", app)
}

async fn kinds(w: &mut Watcher, n: usize) -> Vec<(u64, EventKind)> {
    let mut out = Vec::new();
    for _ in 0..n {
        let e = next_event(w).await.unwrap();
        out.push((e.revision, e.kind));
    }
    out
}

/// rev 1 add (db) · 2 → web · 3 web again · 4 → db · 5 → web · 6 delete · 7 other object.
async fn label_story(store: &Writer) {
    let key = pod_key("ns", "a");
    store
        .put(key.clone(), labelled("db", "n1", 1))
        .await
        .unwrap();
    store
        .put(key.clone(), labelled("web", "n1", 2))
        .await
        .unwrap();
    store
        .put(key.clone(), labelled("web", "n1", 3))
        .await
        .unwrap();
    store
        .put(key.clone(), labelled("db", "n1", 4))
        .await
        .unwrap();
    store
        .put(key.clone(), labelled("web", "n2", 5))
        .await
        .unwrap();
    store.delete(&key).await.unwrap();
    store
        .put(pod_key("ns", "z"), labelled("db", "n1", 7))
        .await
        .unwrap();
}

const LABEL_STORY_WEB: [(u64, EventKind); 5] = [
    (2, EventKind::Added),
    (3, EventKind::Modified),
    (4, EventKind::Deleted),
    (5, EventKind::Added),
    (6, EventKind::Deleted),
];

#[tokio::test]
async fn filtered_watch_turns_selector_transitions_into_added_and_deleted() {
    let t = TempStore::new();
    let mut live = t
        .store
        .watch(WatchOptions::from_revision(0).label("app", "web"))
        .unwrap();
    let mut by_node = t
        .store
        .watch(WatchOptions::from_revision(0).field("spec.nodeName", "n1"))
        .unwrap();
    label_story(&t.store).await;
    assert_eq!(kinds(&mut live, 5).await, LABEL_STORY_WEB);
    // Replayed from the change log, the same transitions come out.
    let mut replayed = t
        .store
        .watch(WatchOptions::from_revision(0).label("app", "web"))
        .unwrap();
    assert_eq!(kinds(&mut replayed, 5).await, LABEL_STORY_WEB);
    // The node filter: on n1 for 1..4, moved to n2 at 5 (DELETED), z added at 7.
    let expected = [
        (1, EventKind::Added),
        (2, EventKind::Modified),
        (3, EventKind::Modified),
        (4, EventKind::Modified),
        (5, EventKind::Deleted),
        (7, EventKind::Added),
    ];
    assert_eq!(kinds(&mut by_node, 6).await, expected);
}

#[tokio::test]
async fn stop_matching_event_carries_the_new_state() {
    let t = TempStore::new();
    let mut w = t
        .store
        .watch(WatchOptions::from_revision(0).label("app", "web"))
        .unwrap();
    label_story(&t.store).await;
    let mut last = None;
    for _ in 0..3 {
        last = Some(next_event(&mut w).await.unwrap());
    }
    let e = last.unwrap();
    assert_eq!(e.kind, EventKind::Deleted);
    assert_eq!(e.object.labels.get("app").map(String::as_str), Some("db"));
    assert_eq!(e.object.resource_version, "4");
}

#[tokio::test]
async fn predicate_transitions_use_the_previous_labels() {
    let t = TempStore::new();
    let not_db = WatchOptions::from_revision(0)
        .predicate(|o| o.labels.get("app").is_some_and(|a| a != "db"));
    let mut w = t.store.watch(not_db.clone()).unwrap();
    label_story(&t.store).await;
    assert_eq!(kinds(&mut w, 5).await, LABEL_STORY_WEB);
    let mut replayed = t.store.watch(not_db).unwrap();
    assert_eq!(kinds(&mut replayed, 5).await, LABEL_STORY_WEB);
}

#[tokio::test]
async fn watch_can_be_limited_to_a_resource_and_namespace() {
    let t = TempStore::new();
    let mut w = t
        .store
        .watch(
            WatchOptions::from_revision(0)
                .resource("pods")
                .namespace("b"),
        )
        .unwrap();
    t.store
        .put(ObjKey::new("nodes", "", "n1"), NewObject::from_value("{}"))
        .await
        .unwrap();
    t.store
        .put(pod_key("a", "x"), pod("x", "n1", 1))
        .await
        .unwrap();
    t.store
        .put(pod_key("b", "y"), pod("y", "n1", 1))
        .await
        .unwrap();
    let e = next_event(&mut w).await.unwrap();
    assert_eq!((e.revision, e.object.key.clone()), (3, pod_key("b", "y")));
    let mut replayed = t
        .store
        .watch(
            WatchOptions::from_revision(0)
                .resource("pods")
                .namespace("b"),
        )
        .unwrap();
    assert_eq!(next_event(&mut replayed).await.unwrap().revision, 3);
}

#[tokio::test]
async fn watching_from_the_future_waits_for_that_revision() {
    let t = TempStore::new();
    let mut w = t.store.watch(WatchOptions::from_revision(5)).unwrap();
    put_n(&t.store, 0, 7).await;
    assert_eq!(revisions(&mut w, 2).await, vec![6, 7]);
}

#[tokio::test]
async fn a_long_history_is_replayed_in_pages() {
    let t = TempStore::new();
    let items: Vec<_> = (0..1500)
        .map(|i| {
            let name = format!("p{i}");
            (
                pod_key("ns", &name),
                move |_: Option<&objstore::StoredObject>, _| {
                    Ok::<_, ()>((objstore::Mutation::Put(pod(&name, "n1", 1)), ()))
                },
            )
        })
        .collect();
    t.store.mutate_many(items).await.unwrap();
    let mut w = t.store.watch(WatchOptions::from_revision(0)).unwrap();
    assert_eq!(
        revisions(&mut w, 1500).await,
        (1..=1500).collect::<Vec<_>>()
    );
}

#[tokio::test]
async fn a_watcher_ends_when_the_store_closes() {
    let t = TempStore::new();
    let mut w = t.store.watch(WatchOptions::from_revision(0)).unwrap();
    put_n(&t.store, 0, 1).await;
    let crate::common::TempStore { dir: _dir, store } = t;
    drop(store);
    assert_eq!(next_event(&mut w).await.unwrap().revision, 1);
    let end = tokio::time::timeout(Duration::from_secs(5), w.next())
        .await
        .unwrap();
    assert!(end.is_none());
}

#[tokio::test]
async fn a_reader_outlives_its_writer_and_its_watchers_end() {
    let t = TempStore::new();
    let reader = t.store.reader();
    let mut w = reader.watch(WatchOptions::from_revision(0)).unwrap();
    put_n(&t.store, 0, 2).await;
    let crate::common::TempStore { dir: _dir, store } = t;
    drop(store);
    assert_eq!(next_event(&mut w).await.unwrap().revision, 1);
    assert_eq!(next_event(&mut w).await.unwrap().revision, 2);
    let end = tokio::time::timeout(Duration::from_secs(5), w.next())
        .await
        .unwrap();
    assert!(end.is_none(), "no writer, no more events");
    assert!(matches!(
        reader.watch(WatchOptions::from_revision(0)),
        Err(StoreError::Closed)
    ));
    let held = reader.get(&pod_key("ns", "p1")).await.unwrap();
    assert_eq!(held.map(|o| o.revision), Some(2), "reads go on");
}

/// Writers and watchers that start at arbitrary moments and revisions: every watcher sees
/// exactly the revisions after its start, in order, once each.
async fn interleaving_case(writes: usize, starts: Vec<(usize, u64)>) {
    let t = TempStore::with(StoreConfig {
        synchronous: objstore::Synchronous::Normal,
        ..StoreConfig::default()
    });
    let writer = {
        let store = t.store.clone();
        tokio::spawn(async move { put_n(&store, 0, writes).await })
    };
    let mut watchers = Vec::new();
    for (delay, from) in starts {
        for _ in 0..delay {
            tokio::task::yield_now().await;
        }
        let from = from.min(t.store.revision());
        watchers.push((
            from,
            t.store.watch(WatchOptions::from_revision(from)).unwrap(),
        ));
    }
    writer.await.unwrap();
    let last = writes as u64;
    for (from, mut w) in watchers {
        let got = revisions(&mut w, (last - from) as usize).await;
        assert_eq!(got, (from + 1..=last).collect::<Vec<_>>());
    }
    eventually("store revision", DEADLINE, || async {
        t.store.revision() == last
    })
    .await;
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, ..ProptestConfig::default() })]

    #[test]
    fn watch_has_no_gap_or_duplicate_between_history_and_live(
        writes in 20usize..120,
        starts in prop::collection::vec((0usize..40, 0u64..150), 1..6),
    ) {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        rt.block_on(interleaving_case(writes, starts));
    }
}

#[tokio::test]
async fn a_follower_takes_changes_and_reads_everything_again_after_falling_behind() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    let t = TempStore::new();
    put_n(&t.store, 0, 3).await;
    let passes = Arc::new(AtomicUsize::new(0));
    let applied = Arc::new(AtomicUsize::new(0));
    // Changes wait at this gate, so that a burst makes the follower's watch fall behind.
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let follower = tokio::spawn({
        let (store, passes, applied, gate) = (
            t.store.clone(),
            passes.clone(),
            applied.clone(),
            gate.clone(),
        );
        async move {
            store
                .follow(
                    "test follower",
                    WatchOptions::from_revision(0).buffer(4),
                    Duration::from_millis(10),
                    || {
                        passes.fetch_add(1, Ordering::SeqCst);
                        std::future::ready(Ok(()))
                    },
                    |_| async {
                        gate.acquire().await.unwrap().forget();
                        applied.fetch_add(1, Ordering::SeqCst);
                    },
                )
                .await
        }
    });
    eventually("the first full pass", DEADLINE, || async {
        passes.load(Ordering::SeqCst) == 1
    })
    .await;
    // Changes before the pass are the pass's business: only later ones are applied.
    put_n(&t.store, 3, 4).await;
    gate.add_permits(1);
    eventually("the change applied", DEADLINE, || async {
        applied.load(Ordering::SeqCst) == 1
    })
    .await;
    assert_eq!(passes.load(Ordering::SeqCst), 1);

    put_n(&t.store, 4, 50).await;
    gate.add_permits(1000);
    eventually(
        "a second full pass after the watch fell behind",
        DEADLINE,
        || async { passes.load(Ordering::SeqCst) == 2 },
    )
    .await;
    follower.abort();
}
