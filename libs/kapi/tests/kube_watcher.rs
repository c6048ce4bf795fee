//! The router served on loopback and driven by kube-rs' `watcher`: the initial list, an
//! update seen as an event, and a 410 on re-watch that leads to a relist.

mod support;

use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::watcher::{self, Event};
use kube::{Client, Config, ResourceExt};
use objstore::StoreConfig;
use serde_json::json;

use support::{harness_with, object, pod};

type Events = futures::stream::BoxStream<'static, Result<Event<Pod>, watcher::Error>>;

/// The next event that is not an error (errors are checked by the caller's expectations).
async fn next(events: &mut Events) -> Result<Event<Pod>, watcher::Error> {
    tokio::time::timeout(Duration::from_secs(10), events.next())
        .await
        .expect("a watcher event within 10 s")
        .expect("the watcher stream does not end")
}

fn name(p: &Pod) -> String {
    p.metadata.name.clone().unwrap_or_default()
}

/// `Init`, then one `InitApply` per pod, then `InitDone`; returns the pod names.
async fn initial_list(events: &mut Events) -> Vec<String> {
    loop {
        match next(events).await {
            Ok(Event::Init) => break,
            Ok(other) => panic!("expected Init, got {other:?}"),
            Err(_) => continue,
        }
    }
    let mut names = Vec::new();
    loop {
        match next(events)
            .await
            .expect("no error during the initial list")
        {
            Event::InitApply(p) => names.push(name(&p)),
            Event::InitDone => return names,
            other => panic!("unexpected {other:?} during the initial list"),
        }
    }
}

#[tokio::test]
async fn kube_watcher_lists_follows_updates_and_relists_after_410() {
    let h = harness_with(StoreConfig {
        retention: 4,
        ..StoreConfig::default()
    });
    h.put("pods", pod("default", "p1", "n1")).await;
    h.put("pods", pod("default", "p2", "n1")).await;
    h.put("pods", pod("elsewhere", "p9", "n1")).await;

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind loopback");
    let addr = listener.local_addr().expect("local addr");
    let server = tokio::spawn(axum::serve(listener, h.router()).into_future());

    let config = Config::new(format!("http://{addr}").parse().expect("a URI"));
    let client = Client::try_from(config).expect("a client");
    let pods: kube::Api<Pod> = kube::Api::namespaced(client, "default");
    // Short watches without bookmarks: every re-watch resumes from the last event's RV.
    let cfg = watcher::Config::default().timeout(1).disable_bookmarks();
    let mut events: Events = watcher::watcher(pods, cfg).boxed();

    assert_eq!(initial_list(&mut events).await, ["p1", "p2"]);

    let mut updated = pod("default", "p1", "n1");
    updated["metadata"]["labels"]["rev"] = json!("2");
    h.put("pods", updated).await;
    match next(&mut events).await.expect("an event") {
        Event::Apply(p) => {
            assert_eq!(name(&p), "p1");
            assert_eq!(p.labels().get("rev").map(String::as_str), Some("2"));
        }
        other => panic!("expected Apply, got {other:?}"),
    }

    // Unrelated writes push the change log past the watcher's last RV (p3's); when its 1 s
    // watch ends, the re-watch gets an in-stream 410 and the watcher relists.
    h.put("pods", pod("default", "p3", "n1")).await;
    for i in 0..20 {
        h.put(
            "configmaps",
            object("other", &format!("cm{i}"), json!({}), json!({})),
        )
        .await;
    }
    let mut saw_gone = false;
    let names = loop {
        match next(&mut events).await {
            Err(watcher::Error::WatchError(status)) => {
                assert_eq!(status.code, 410, "{status:?}");
                saw_gone = true;
            }
            Err(e) => panic!("unexpected watcher error {e:?}"),
            Ok(Event::Init) => {
                let mut names = Vec::new();
                loop {
                    match next(&mut events).await.expect("no error during the relist") {
                        Event::InitApply(p) => names.push(name(&p)),
                        Event::InitDone => break,
                        other => panic!("unexpected {other:?} during the relist"),
                    }
                }
                break names;
            }
            Ok(Event::Apply(p)) => assert_eq!(name(&p), "p3"),
            Ok(other) => panic!("unexpected {other:?}"),
        }
    };
    assert!(saw_gone, "the relist came from a 410");
    assert_eq!(names, ["p1", "p2", "p3"]);
    server.abort();
}
