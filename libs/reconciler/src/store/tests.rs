use super::*;
use k8s_openapi::api::core::v1::Pod;
use serde_json::json;

fn pod(name: &str, rv: &str, owner: Option<&str>) -> Pod {
    let owners = owner.map(|uid| {
        json!([{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": format!("rs-{uid}"),
                "uid": uid, "controller": true}])
    });
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "ns", "resourceVersion": rv,
                     "ownerReferences": owners},
    }))
    .unwrap()
}

fn names(pods: Vec<Arc<Pod>>) -> Vec<String> {
    let mut names: Vec<String> = pods
        .iter()
        .map(|p| p.metadata.name.clone().unwrap())
        .collect();
    names.sort();
    names
}

/// What a subscriber saw: (name, deleted, had a before).
fn recorder(cache: &Cache<Pod>) -> Arc<Mutex<Vec<(String, bool, bool)>>> {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let into = seen.clone();
    cache.subscribe(move |c| {
        into.lock().unwrap().push((
            c.now.metadata.name.clone().unwrap(),
            c.deleted,
            c.before.is_some(),
        ))
    });
    seen
}

#[test]
fn owned_by_follows_controller_references_through_changes_and_deletes() {
    let cache = Cache::new(|p| p);
    cache.apply(Event::Apply(pod("a", "1", Some("u1"))));
    cache.apply(Event::Apply(pod("b", "1", Some("u1"))));
    cache.apply(Event::Apply(pod("c", "1", Some("u2"))));
    cache.apply(Event::Apply(pod("d", "1", None)));
    assert_eq!(names(cache.owned_by("u1")), ["a", "b"]);
    assert_eq!(names(cache.owned_by("u2")), ["c"]);

    // b is adopted by u2, then a goes, then c is orphaned.
    cache.apply(Event::Apply(pod("b", "2", Some("u2"))));
    cache.apply(Event::Delete(pod("a", "2", Some("u1"))));
    cache.apply(Event::Apply(pod("c", "2", None)));
    assert_eq!(names(cache.owned_by("u1")), Vec::<String>::new());
    assert_eq!(names(cache.owned_by("u2")), ["b"]);
    assert_eq!(cache.len(), 3);
}

#[test]
fn a_relist_tells_what_changed_and_what_went_and_rebuilds_the_index() {
    let cache = Cache::new(|p| p);
    cache.apply(Event::Apply(pod("same", "1", Some("u1"))));
    cache.apply(Event::Apply(pod("changed", "1", Some("u1"))));
    cache.apply(Event::Apply(pod("gone", "1", Some("u1"))));
    let seen = recorder(&cache);
    seen.lock().unwrap().clear();
    assert!(!cache.synced());

    cache.apply(Event::Init);
    cache.apply(Event::InitApply(pod("same", "1", Some("u1"))));
    cache.apply(Event::InitApply(pod("changed", "2", Some("u2"))));
    cache.apply(Event::InitApply(pod("new", "1", None)));
    // Nothing changes before the relist is complete.
    assert_eq!(cache.len(), 3);
    assert!(seen.lock().unwrap().is_empty());
    cache.apply(Event::InitDone);

    assert!(cache.synced());
    let mut seen = seen.lock().unwrap().clone();
    seen.sort();
    assert_eq!(
        seen,
        [
            ("changed".to_string(), false, true),
            ("gone".to_string(), true, false),
            ("new".to_string(), false, false),
        ]
    );
    assert_eq!(names(cache.owned_by("u1")), ["same"]);
    assert_eq!(names(cache.owned_by("u2")), ["changed"]);
}

#[test]
fn a_late_subscriber_is_told_of_every_object_held_then_of_changes() {
    let cache = Cache::new(|p| p);
    cache.apply(Event::Apply(pod("a", "1", None)));
    cache.apply(Event::Apply(pod("b", "1", None)));
    let seen = recorder(&cache);
    cache.apply(Event::Delete(pod("a", "2", None)));
    let mut seen = seen.lock().unwrap().clone();
    seen.sort();
    assert_eq!(
        seen,
        [
            ("a".to_string(), false, false),
            ("a".to_string(), true, true),
            ("b".to_string(), false, false),
        ]
    );
}

#[test]
fn every_object_is_kept_as_keep_leaves_it() {
    let cache: Cache<Pod> = Cache::new(|mut p| {
        p.metadata.owner_references = None;
        p
    });
    cache.apply(Event::Apply(pod("a", "1", Some("u1"))));
    assert!(
        cache
            .get("ns/a")
            .unwrap()
            .metadata
            .owner_references
            .is_none()
    );
    assert!(cache.owned_by("u1").is_empty());
}

#[tokio::test]
async fn keyed_and_owners_queue_the_object_and_its_controller() {
    let cache = Cache::new(|p| p);
    let (queue, mut rx) = crate::queue::queue();
    cache.keyed(&queue);
    cache.owners("ReplicaSet", &queue);
    cache.apply(Event::Apply(pod("a", "1", Some("u1"))));
    let mut sent = Vec::new();
    while let Ok((k, _)) = rx.rx.try_recv() {
        sent.push(k);
    }
    assert_eq!(sent, ["ns/a", "ns/rs-u1"]);
}

#[tokio::test]
async fn a_reflected_cache_is_a_ready_kube_store_with_a_trigger_stream() {
    use futures::StreamExt;
    use kube::runtime::reflector::ObjectRef;

    let cache = Arc::new(Cache::new(|p| p));
    cache.apply(Event::Init);
    cache.apply(Event::InitApply(pod("a", "1", None)));
    cache.apply(Event::InitDone);
    let (store, mut trigger) = cache.reflect();
    tokio::time::timeout(std::time::Duration::from_secs(1), store.wait_until_ready())
        .await
        .expect("ready: the cache had read a full list")
        .unwrap();
    assert!(store.get(&ObjectRef::new("a").within("ns")).is_some());

    cache.apply(Event::Apply(pod("b", "1", None)));
    cache.apply(Event::Delete(pod("a", "2", None)));
    let seen: Vec<String> = (&mut trigger)
        .take(3)
        .map(|p| p.unwrap().metadata.name.unwrap())
        .collect()
        .await;
    assert_eq!(seen, ["a", "b", "a"]);
    assert!(store.get(&ObjectRef::new("a").within("ns")).is_none());
    assert!(store.get(&ObjectRef::new("b").within("ns")).is_some());
}
