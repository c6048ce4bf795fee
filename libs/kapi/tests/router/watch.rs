use std::time::Duration;

use axum::http::StatusCode;
use objstore::StoreConfig;
use serde_json::{Value, json};

use crate::support::{harness, harness_with, object, pod};

fn kind_and_name(event: &Value) -> (String, String) {
    (
        event["type"].as_str().unwrap().to_owned(),
        event["object"]["metadata"]["name"]
            .as_str()
            .unwrap_or("")
            .to_owned(),
    )
}

fn rv(event: &Value) -> u64 {
    event["object"]["metadata"]["resourceVersion"]
        .as_str()
        .expect("a resourceVersion")
        .parse()
        .expect("a number")
}

#[tokio::test]
async fn watch_without_resource_version_sends_state_then_changes() {
    let h = harness();
    h.put("pods", pod("a", "p1", "n1")).await;
    h.put("pods", pod("a", "p2", "n1")).await;
    let mut w = h.watch("/api/v1/namespaces/a/pods?watch=true", None).await;
    assert_eq!(w.status, StatusCode::OK);
    assert_eq!(w.headers["content-type"], "application/json");
    let initial = w.take(2).await;
    assert_eq!(
        initial.iter().map(kind_and_name).collect::<Vec<_>>(),
        [("ADDED".into(), "p1".into()), ("ADDED".into(), "p2".into())]
    );
    assert_eq!(initial[0]["object"]["kind"], "Pod");
    assert_eq!(initial[0]["object"]["apiVersion"], "v1");

    let mut changed = pod("a", "p1", "n2");
    changed["metadata"]["labels"]["x"] = json!("y");
    h.put("pods", changed).await;
    h.put("pods", pod("b", "other", "n1")).await;
    h.remove("pods", "a", "p2").await;
    let modified = w.next().await.unwrap();
    assert_eq!(kind_and_name(&modified), ("MODIFIED".into(), "p1".into()));
    assert_eq!(modified["object"]["spec"]["nodeName"], "n2");
    let deleted = w.next().await.unwrap();
    assert_eq!(kind_and_name(&deleted), ("DELETED".into(), "p2".into()));
    assert_eq!(
        rv(&deleted),
        h.store.revision(),
        "a deletion carries its own RV"
    );
}

#[tokio::test]
async fn watch_resumes_strictly_after_the_resource_version() {
    let h = harness();
    h.put("pods", pod("a", "p1", "n1")).await;
    let from = h.store.revision();
    h.put("pods", pod("a", "p2", "n1")).await;
    h.put("pods", pod("a", "p3", "n1")).await;
    let mut w = h
        .watch(
            &format!("/api/v1/namespaces/a/pods?watch=1&resourceVersion={from}"),
            None,
        )
        .await;
    let events = w.take(2).await;
    assert_eq!(
        events.iter().map(kind_and_name).collect::<Vec<_>>(),
        [("ADDED".into(), "p2".into()), ("ADDED".into(), "p3".into())]
    );
    assert!(rv(&events[0]) > from && rv(&events[1]) > rv(&events[0]));
}

#[tokio::test]
async fn too_old_resource_version_is_an_in_stream_410() {
    let h = harness_with(StoreConfig {
        retention: 2,
        ..StoreConfig::default()
    });
    for i in 0..10 {
        h.put("pods", pod("a", &format!("p{i}"), "n1")).await;
    }
    assert!(h.store.compacted_revision() > 1);
    let mut w = h
        .watch(
            "/api/v1/namespaces/a/pods?watch=true&resourceVersion=1",
            None,
        )
        .await;
    assert_eq!(w.status, StatusCode::OK);
    let error = w.next().await.unwrap();
    assert_eq!(error["type"], "ERROR");
    assert_eq!(error["object"]["kind"], "Status");
    assert_eq!(error["object"]["code"], 410);
    assert_eq!(error["object"]["reason"], "Expired");
    assert!(w.next().await.is_none(), "the stream ends after the error");
}

#[tokio::test]
async fn timeout_ends_the_stream_with_a_last_bookmark() {
    let h = harness();
    h.put("pods", pod("a", "p1", "n1")).await;
    let from = h.store.revision();
    let mut w = h
        .watch(
            &format!(
                "/api/v1/namespaces/a/pods?watch=true&resourceVersion={from}&allowWatchBookmarks=true&timeoutSeconds=1"
            ),
            None,
        )
        .await;
    h.put("configmaps", object("a", "cm", json!({}), json!({})))
        .await;
    let bookmark = w.next().await.unwrap();
    assert_eq!(bookmark["type"], "BOOKMARK");
    assert_eq!(bookmark["object"]["kind"], "Pod");
    assert_eq!(bookmark["object"]["apiVersion"], "v1");
    assert_eq!(
        rv(&bookmark),
        h.store.revision(),
        "a live watch's bookmark moves past unrelated changes"
    );
    assert!(w.next().await.is_none());

    let mut quiet = h
        .watch(
            "/api/v1/namespaces/a/pods?watch=true&resourceVersion=0&timeoutSeconds=1",
            None,
        )
        .await;
    let first = quiet.next().await.unwrap();
    assert_eq!(kind_and_name(&first), ("ADDED".into(), "p1".into()));
    assert!(quiet.next().await.is_none(), "no bookmark unless asked");
}

#[tokio::test]
async fn bookmarks_of_a_replaying_watch_claim_only_what_was_delivered() {
    let h = harness();
    h.put("pods", pod("a", "p1", "n1")).await;
    let from = h.store.revision();
    h.put("configmaps", object("a", "cm", json!({}), json!({})))
        .await;
    // Resuming from an older revision replays the change log; once the replay is read and
    // nothing it selected is left to deliver, the bookmark claims the revision it reached.
    let mut w = h
        .watch(
            &format!(
                "/api/v1/namespaces/a/pods?watch=true&resourceVersion={from}&allowWatchBookmarks=true&timeoutSeconds=1"
            ),
            None,
        )
        .await;
    let bookmark = w.next().await.unwrap();
    assert_eq!(bookmark["type"], "BOOKMARK");
    assert_eq!(rv(&bookmark), h.store.revision());

    // A live event proves the replay is over: later bookmarks use the store revision.
    let mut w = h
        .watch(
            &format!(
                "/api/v1/namespaces/a/pods?watch=true&resourceVersion={from}&allowWatchBookmarks=true&timeoutSeconds=1"
            ),
            None,
        )
        .await;
    h.put("pods", pod("a", "p2", "n1")).await;
    h.put("configmaps", object("a", "cm2", json!({}), json!({})))
        .await;
    assert_eq!(
        kind_and_name(&w.next().await.unwrap()),
        ("ADDED".into(), "p2".into())
    );
    let bookmark = w.next().await.unwrap();
    assert_eq!(bookmark["type"], "BOOKMARK");
    assert_eq!(rv(&bookmark), h.store.revision());
}

#[tokio::test]
async fn selectors_turn_transitions_into_added_and_deleted() {
    let h = harness();
    h.put("pods", pod("a", "p1", "n1")).await;
    let from = h.store.revision();
    let mut w = h
        .watch(
            &format!(
                "/api/v1/pods?watch=true&resourceVersion={from}&labelSelector=app%3Dweb&fieldSelector=spec.nodeName%3Dn1"
            ),
            None,
        )
        .await;
    let mut relabelled = pod("a", "p1", "n1");
    relabelled["metadata"]["labels"]["app"] = json!("db");
    h.put("pods", relabelled).await;
    h.put("pods", pod("a", "p1", "n1")).await;
    h.put("pods", pod("a", "p1", "n2")).await;
    h.put("pods", pod("b", "p5", "n2")).await;
    h.put("pods", pod("b", "p6", "n1")).await;
    let events = w.take(4).await;
    assert_eq!(
        events.iter().map(kind_and_name).collect::<Vec<_>>(),
        [
            ("DELETED".into(), "p1".into()),
            ("ADDED".into(), "p1".into()),
            ("DELETED".into(), "p1".into()),
            ("ADDED".into(), "p6".into()),
        ]
    );
    h.get("/api/v1/pods?watch=true&fieldSelector=spec.nope%3Dx")
        .await
        .assert_status(400, "BadRequest");
    let bad = h.get("/api/v1/pods?watch=true&labelSelector=a+in+(").await;
    bad.assert_status(400, "BadRequest");
}

#[tokio::test]
async fn streaming_list_ends_initial_events_with_an_annotated_bookmark() {
    let h = harness();
    h.put("pods", pod("a", "p1", "n1")).await;
    h.put("pods", pod("a", "p2", "n1")).await;
    let snapshot = h.store.revision();
    let mut w = h
        .watch(
            "/api/v1/namespaces/a/pods?watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true",
            None,
        )
        .await;
    let events = w.take(3).await;
    assert_eq!(kind_and_name(&events[0]), ("ADDED".into(), "p1".into()));
    assert_eq!(kind_and_name(&events[1]), ("ADDED".into(), "p2".into()));
    assert_eq!(events[2]["type"], "BOOKMARK");
    assert_eq!(
        events[2]["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"],
        "true"
    );
    assert_eq!(rv(&events[2]), snapshot);
    h.put("pods", pod("a", "p3", "n1")).await;
    assert_eq!(
        kind_and_name(&w.next().await.unwrap()),
        ("ADDED".into(), "p3".into())
    );

    let mut legacy = h
        .watch(
            "/api/v1/namespaces/a/pods?watch=true&allowWatchBookmarks=true",
            None,
        )
        .await;
    let events = legacy.take(4).await;
    assert_eq!(events[3]["type"], "BOOKMARK");
    assert_eq!(
        events[3]["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"],
        "true"
    );
    assert_eq!(rv(&events[3]), h.store.revision());

    h.get("/api/v1/pods?watch=true&sendInitialEvents=true")
        .await
        .assert_status(422, "Invalid");
    h.get("/api/v1/pods?watch=true&resourceVersionMatch=NotOlderThan&resourceVersion=1")
        .await
        .assert_status(422, "Invalid");
}

#[tokio::test]
async fn single_object_and_legacy_prefix_watches() {
    let h = harness();
    h.put("pods", pod("a", "p1", "n1")).await;
    h.put("pods", pod("a", "p2", "n1")).await;
    let mut one = h
        .watch("/api/v1/namespaces/a/pods/p2?watch=true", None)
        .await;
    assert_eq!(
        kind_and_name(&one.next().await.unwrap()),
        ("ADDED".into(), "p2".into())
    );
    let mut legacy = h.watch("/api/v1/watch/namespaces/a/pods", None).await;
    assert_eq!(legacy.take(2).await.len(), 2);
    h.put("pods", pod("a", "p1", "n3")).await;
    h.put("pods", pod("a", "p2", "n3")).await;
    assert_eq!(
        kind_and_name(&one.next().await.unwrap()),
        ("MODIFIED".into(), "p2".into())
    );
    h.get("/api/v1/namespaces/a/pods/p2?watch=true&fieldSelector=metadata.name%3Dp1")
        .await
        .assert_status(400, "BadRequest");
}

#[tokio::test]
async fn watch_events_carry_tables_when_asked() {
    let h = harness();
    h.put("pods", pod("a", "p1", "n1")).await;
    let mut w = h
        .watch(
            "/api/v1/namespaces/a/pods?watch=true",
            Some("application/json;as=Table;v=v1;g=meta.k8s.io,application/json"),
        )
        .await;
    let event = w.next().await.unwrap();
    assert_eq!(event["type"], "ADDED");
    assert_eq!(event["object"]["kind"], "Table");
    assert_eq!(event["object"]["rows"][0]["cells"][0], "p1");
}

#[tokio::test]
async fn a_resource_version_from_the_future_is_an_in_stream_410() {
    let h = harness();
    let future = h.store.revision() + 50;
    let mut w = h
        .watch(
            &format!("/api/v1/pods?watch=true&resourceVersion={future}"),
            None,
        )
        .await;
    let error = w
        .next_within(Duration::from_secs(10))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(error["type"], "ERROR");
    assert_eq!(error["object"]["code"], 410);
}

#[tokio::test]
async fn a_watch_with_a_negative_timeout_ends_at_once() {
    let h = harness();
    h.put("pods", pod("a", "p1", "n1")).await;
    let now = h.store.revision();
    let mut w = h
        .watch(
            &format!(
                "/api/v1/namespaces/a/pods?watch=true&resourceVersion={now}&timeoutSeconds=-5"
            ),
            None,
        )
        .await;
    let ended = w.next_within(std::time::Duration::from_secs(2)).await;
    assert_eq!(ended, Ok(None), "the watch did not end");
}

#[tokio::test]
async fn a_resumed_namespaced_field_selected_watch_bookmarks_past_unrelated_changes() {
    let h = harness();
    h.put("pods", pod("a", "p1", "n1")).await;
    let from = h.store.revision();
    // Changes after `from` that this watch does not select: another namespace, another node.
    h.put("pods", pod("b", "p2", "n1")).await;
    h.put("pods", pod("a", "p3", "n2")).await;
    let now = h.store.revision();
    assert!(now > from);
    let mut w = h
        .watch(
            &format!(
                "/api/v1/namespaces/a/pods?watch=true&resourceVersion={from}&fieldSelector=spec.nodeName%3Dn1&allowWatchBookmarks=true&timeoutSeconds=1"
            ),
            None,
        )
        .await;
    let bookmark = w.next().await.unwrap();
    assert_eq!(bookmark["type"], "BOOKMARK");
    assert_eq!(
        rv(&bookmark),
        now,
        "the replayed changes were all offered: the bookmark claims them"
    );
    assert!(w.next().await.is_none());
}
