//! Writes, revisions, group commit and lists.

use bytes::Bytes;
use objstore::{ListOptions, Mutation, NewObject, StoreConfig, StoreError};

use crate::common::{TempStore, pod, pod_key};

#[tokio::test]
async fn revision_is_monotonic_across_reopen() {
    let t = TempStore::new();
    for i in 0..3 {
        let o = t
            .store
            .put(pod_key("ns", &format!("p{i}")), pod("p", "n1", 1))
            .await
            .unwrap();
        assert_eq!(o.revision, i + 1);
    }
    t.store.delete(&pod_key("ns", "p0")).await.unwrap();
    assert_eq!(t.store.revision(), 4);

    let t = t.reopen(StoreConfig::default());
    assert_eq!(t.store.revision(), 4);
    // Deleting p2 and p1 (the newest objects) must not let revisions be reused.
    t.store.delete(&pod_key("ns", "p2")).await.unwrap();
    t.store.delete(&pod_key("ns", "p1")).await.unwrap();
    let t = t.reopen(StoreConfig::default());
    let o = t
        .store
        .put(pod_key("ns", "p9"), pod("p9", "n1", 1))
        .await
        .unwrap();
    assert_eq!(o.revision, 7);
}

#[tokio::test]
async fn keep_and_deleting_a_missing_object_consume_no_revision() {
    let t = TempStore::new();
    let kept = t
        .store
        .mutate(pod_key("ns", "a"), |cur, _| {
            Ok::<_, ()>((Mutation::Keep, cur.is_some()))
        })
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (kept.revision, kept.output, kept.object),
        (None, false, None)
    );
    assert_eq!(t.store.delete(&pod_key("ns", "a")).await.unwrap(), None);
    assert_eq!(t.store.revision(), 0);
    assert_eq!(t.store.stats().changes, 0);
}

#[tokio::test]
async fn closure_gets_the_revision_its_change_will_have() {
    let t = TempStore::new();
    t.store
        .put(pod_key("ns", "x"), pod("x", "n1", 1))
        .await
        .unwrap();
    let applied = t
        .store
        .mutate(pod_key("ns", "a"), |_, rev| {
            let obj = NewObject::from_value("{}").resource_version(rev.to_string());
            Ok::<_, ()>((Mutation::Put(obj), rev))
        })
        .await
        .unwrap()
        .unwrap();
    assert_eq!(applied.output, 2);
    assert_eq!(applied.revision, Some(2));
    assert_eq!(applied.object.unwrap().resource_version, "2");
}

#[tokio::test]
async fn closure_sees_writes_made_earlier_in_the_same_batch() {
    let t = TempStore::new();
    let key = pod_key("ns", "counter");
    let bump = |cur: Option<&objstore::StoredObject>, _| {
        let n: u64 = cur.map_or(0, |o| {
            std::str::from_utf8(&o.value).unwrap().parse().unwrap()
        });
        Ok::<_, ()>((Mutation::Put(NewObject::from_value((n + 1).to_string())), n))
    };
    let seen = t
        .store
        .mutate_many(vec![
            (key.clone(), bump),
            (key.clone(), bump),
            (key.clone(), bump),
        ])
        .await
        .unwrap();
    let seen: Vec<u64> = seen.into_iter().map(|r| r.unwrap().output).collect();
    assert_eq!(seen, vec![0, 1, 2]);

    // Many concurrent increments, group-committed together, must not lose any.
    let tasks: Vec<_> = (0..200)
        .map(|_| {
            let (store, key) = (t.store.clone(), key.clone());
            tokio::spawn(async move { store.mutate(key, bump).await.unwrap().unwrap() })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    let value = t.store.get(&key).await.unwrap().unwrap().value.clone();
    assert_eq!(value, Bytes::from("203"));
}

#[derive(Debug, PartialEq)]
struct Conflict {
    have: String,
}

#[tokio::test]
async fn optimistic_concurrency_refuses_a_stale_resource_version() {
    let t = TempStore::new();
    let key = pod_key("ns", "a");
    t.store.put(key.clone(), pod("a", "n1", 5)).await.unwrap();
    let update_from = |expected: &'static str| {
        move |cur: Option<&objstore::StoredObject>, _| {
            let have = cur.map(|o| o.resource_version.clone()).unwrap_or_default();
            if have != expected {
                return Err(Conflict { have });
            }
            Ok((Mutation::Put(pod("a", "n2", 6)), ()))
        }
    };
    let stale = t.store.mutate(key.clone(), update_from("4")).await.unwrap();
    assert_eq!(stale.unwrap_err(), Conflict { have: "5".into() });
    assert!(
        t.store
            .mutate(key.clone(), update_from("5"))
            .await
            .unwrap()
            .is_ok()
    );
    assert_eq!(
        t.store.get(&key).await.unwrap().unwrap().resource_version,
        "6"
    );
    assert_eq!(t.store.revision(), 2);
}

#[tokio::test]
async fn a_panicking_closure_rolls_back_its_whole_batch() {
    let t = TempStore::new();
    type F =
        Box<dyn FnOnce(Option<&objstore::StoredObject>, u64) -> Result<(Mutation, ()), ()> + Send>;
    let good: F = Box::new(|_, _| Ok((Mutation::Put(pod("a", "n1", 1)), ())));
    let bad: F = Box::new(|_, _| panic!("boom"));
    let result = t
        .store
        .mutate_many(vec![(pod_key("ns", "a"), good), (pod_key("ns", "b"), bad)])
        .await;
    assert!(
        matches!(result, Err(StoreError::MutatorPanicked)),
        "{result:?}"
    );
    assert!(t.store.get(&pod_key("ns", "a")).await.unwrap().is_none());
    assert_eq!(t.store.revision(), 0);
    // The writer survives and keeps serving.
    let o = t
        .store
        .put(pod_key("ns", "c"), pod("c", "n1", 1))
        .await
        .unwrap();
    assert_eq!(o.revision, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn group_commit_batches_concurrent_puts() {
    let t = TempStore::new();
    let before = t.store.stats();
    let tasks: Vec<_> = (0..1000)
        .map(|i| {
            let store = t.store.clone();
            tokio::spawn(async move {
                let name = format!("p{i}");
                store
                    .put(pod_key("ns", &name), pod(&name, "n1", 1))
                    .await
                    .unwrap();
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    let stats = t.store.stats();
    assert_eq!(stats.jobs - before.jobs, 1000);
    assert_eq!(t.store.revision(), 1000);
    let commits = stats.commits - before.commits;
    assert!(commits <= 200, "1000 puts took {commits} transactions");
}

async fn fill_pods(t: &TempStore) {
    for (ns, name, node, app) in [
        ("a", "p1", "n1", "web"),
        ("a", "p2", "n2", "web"),
        ("a", "p3", "n1", "db"),
        ("b", "p1", "n1", "web"),
        ("b", "p4", "n2", "db"),
        ("c", "p5", "n1", "web"),
    ] {
        let obj = pod(name, node, 1).label("app", app);
        t.store.put(pod_key(ns, name), obj).await.unwrap();
    }
    let node = NewObject::from_value("{}").field("spec.nodeName", "n1");
    t.store
        .put(objstore::ObjKey::new("nodes", "", "n1"), node)
        .await
        .unwrap();
}

fn names(r: &objstore::ListResult) -> Vec<String> {
    r.items
        .iter()
        .map(|o| format!("{}/{}", o.key.namespace, o.key.name))
        .collect()
}

#[tokio::test]
async fn list_filters_by_namespace_field_and_labels() {
    let t = TempStore::new();
    fill_pods(&t).await;
    let all = t.store.list(ListOptions::new("pods")).await.unwrap();
    assert_eq!(
        names(&all),
        ["a/p1", "a/p2", "a/p3", "b/p1", "b/p4", "c/p5"]
    );
    assert_eq!(all.revision, t.store.revision());

    let ns = t
        .store
        .list(ListOptions::new("pods").namespace("b"))
        .await
        .unwrap();
    assert_eq!(names(&ns), ["b/p1", "b/p4"]);

    let on_n1 = ListOptions::new("pods").field("spec.nodeName", "n1");
    assert_eq!(
        names(&t.store.list(on_n1.clone()).await.unwrap()),
        ["a/p1", "a/p3", "b/p1", "c/p5"]
    );
    let on_n1_in_a = on_n1.clone().namespace("a");
    assert_eq!(
        names(&t.store.list(on_n1_in_a).await.unwrap()),
        ["a/p1", "a/p3"]
    );

    let web_on_n1 = on_n1.label("app", "web");
    assert_eq!(
        names(&t.store.list(web_on_n1).await.unwrap()),
        ["a/p1", "b/p1", "c/p5"]
    );

    let by_name = ListOptions::new("pods").field("metadata.name", "p1");
    assert_eq!(
        names(&t.store.list(by_name).await.unwrap()),
        ["a/p1", "b/p1"]
    );

    let pred =
        ListOptions::new("pods").predicate(|o| o.labels.get("app").is_some_and(|a| a != "web"));
    assert_eq!(names(&t.store.list(pred).await.unwrap()), ["a/p3", "b/p4"]);
}

#[tokio::test]
async fn field_index_follows_updates_and_deletes() {
    let t = TempStore::new();
    fill_pods(&t).await;
    t.store
        .put(pod_key("a", "p1"), pod("p1", "n2", 2))
        .await
        .unwrap();
    t.store.delete(&pod_key("a", "p3")).await.unwrap();
    let on = |node: &str| ListOptions::new("pods").field("spec.nodeName", node);
    assert_eq!(
        names(&t.store.list(on("n1")).await.unwrap()),
        ["b/p1", "c/p5"]
    );
    assert_eq!(
        names(&t.store.list(on("n2")).await.unwrap()),
        ["a/p1", "a/p2", "b/p4"]
    );
}

#[tokio::test]
async fn list_pages_in_namespace_name_order() {
    let t = TempStore::new();
    fill_pods(&t).await;
    let mut seen = Vec::new();
    let mut opts = ListOptions::new("pods").label("app", "web").limit(2);
    loop {
        let page = t.store.list(opts.clone()).await.unwrap();
        assert!(page.items.len() <= 2);
        seen.extend(names(&page));
        match page.continue_after {
            Some((ns, name)) => opts = opts.continue_after(ns, name),
            None => break,
        }
    }
    assert_eq!(seen, ["a/p1", "a/p2", "b/p1", "c/p5"]);

    let paged_by_field = ListOptions::new("pods")
        .field("spec.nodeName", "n1")
        .continue_after("a", "p1");
    assert_eq!(
        names(&t.store.list(paged_by_field.limit(2)).await.unwrap()),
        ["a/p3", "b/p1"]
    );
}

#[tokio::test]
async fn get_returns_the_stored_record_verbatim() {
    let t = TempStore::new();
    let obj = pod("a", "n1", 9).label("app", "web");
    let value = obj.value.clone();
    t.store.put(pod_key("ns", "a"), obj).await.unwrap();
    let got = t.store.get(&pod_key("ns", "a")).await.unwrap().unwrap();
    assert_eq!(got.value, value);
    assert_eq!(got.uid, "uid-a");
    assert_eq!(got.resource_version, "9");
    assert_eq!(got.labels.get("app").map(String::as_str), Some("web"));
    assert_eq!(got.field("spec.nodeName"), Some("n1"));
    assert_eq!(got.field("metadata.namespace"), Some("ns"));
    assert!(t.store.get(&pod_key("ns", "b")).await.unwrap().is_none());
}

#[tokio::test]
async fn reads_never_serve_a_replaced_or_deleted_state() {
    let t = TempStore::new();
    let key = pod_key("ns", "a");
    t.store.put(key.clone(), pod("a", "n1", 1)).await.unwrap();
    let first = t.store.get(&key).await.unwrap().unwrap();
    t.store.put(key.clone(), pod("a", "n2", 2)).await.unwrap();
    let second = t.store.get(&key).await.unwrap().unwrap();
    assert_eq!(
        (
            first.resource_version.as_str(),
            second.resource_version.as_str()
        ),
        ("1", "2")
    );
    let listed = t.store.list(ListOptions::new("pods")).await.unwrap();
    assert_eq!(listed.items[0].resource_version, "2");
    t.store.delete(&key).await.unwrap();
    assert!(t.store.get(&key).await.unwrap().is_none());
    // Recreated under the same key: a new row, never the old cached state.
    t.store.put(key.clone(), pod("a", "n3", 3)).await.unwrap();
    assert_eq!(
        t.store.get(&key).await.unwrap().unwrap().resource_version,
        "3"
    );
    let t = t.reopen(StoreConfig::default());
    assert_eq!(
        t.store.get(&key).await.unwrap().unwrap().resource_version,
        "3"
    );
}

#[tokio::test]
async fn the_store_works_without_an_object_cache() {
    let t = TempStore::with(StoreConfig {
        cache_objects: 0,
        ..StoreConfig::default()
    });
    fill_pods(&t).await;
    t.store
        .put(pod_key("a", "p1"), pod("p1", "n2", 2))
        .await
        .unwrap();
    let on_n2 = ListOptions::new("pods").field("spec.nodeName", "n2");
    assert_eq!(
        names(&t.store.list(on_n2).await.unwrap()),
        ["a/p1", "a/p2", "b/p4"]
    );
}

#[tokio::test]
async fn delete_returns_the_last_state() {
    let t = TempStore::new();
    t.store
        .put(pod_key("ns", "a"), pod("a", "n1", 3))
        .await
        .unwrap();
    let last = t.store.delete(&pod_key("ns", "a")).await.unwrap().unwrap();
    assert_eq!(last.resource_version, "3");
    assert!(t.store.get(&pod_key("ns", "a")).await.unwrap().is_none());
    let all = t.store.list(ListOptions::new("pods")).await.unwrap();
    assert!(all.items.is_empty());
    assert_eq!(all.revision, 2);
}

#[tokio::test]
async fn dropping_every_handle_stops_the_writer_and_releases_the_file() {
    let t = TempStore::new();
    let clone = t.store.clone();
    clone
        .put(pod_key("ns", "a"), pod("a", "n1", 1))
        .await
        .unwrap();
    drop(clone);
    let t = t.reopen(StoreConfig::default());
    assert_eq!(t.store.revision(), 1);
    assert!(t.store.get(&pod_key("ns", "a")).await.unwrap().is_some());
}
