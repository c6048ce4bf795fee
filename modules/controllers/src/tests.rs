//! The controllers together on one [`Stores`], against the real API layer over a temp store
//! (kapi's local backend), in process: they share one watch per resource and still do their
//! work.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, PostParams};
use serde_json::json;
use testkit::eventually;
use tokio_util::sync::CancellationToken;

use super::*;

/// Watch requests per path.
type Watches = Arc<Mutex<HashMap<String, usize>>>;

/// A client of an in-process API server that counts the watches opened through it.
async fn api(dir: &tempfile::TempDir) -> (kube::Client, Watches, Arc<objstore::Writer>) {
    let (api, store) = kapi::local::admin_api(&dir.path().join("store.db"))
        .await
        .unwrap();
    let watches: Watches = Arc::default();
    let counted = watches.clone();
    let router = kapi::router(api).layer(axum::middleware::from_fn(
        move |req: axum::extract::Request, next: axum::middleware::Next| {
            let watch = req.uri().query().is_some_and(|q| q.contains("watch=true"));
            if watch {
                let path = req.uri().path().to_string();
                *counted.lock().unwrap().entry(path).or_default() += 1;
            }
            next.run(req)
        },
    ));
    (kube::Client::new(router, "default"), watches, store)
}

#[tokio::test]
async fn the_scheduler_and_every_pod_reading_controller_share_one_pod_watch() {
    let dir = tempfile::tempdir().unwrap();
    let (client, watches, _store) = api(&dir).await;
    let shutdown = CancellationToken::new();
    let stores = Stores::new(client.clone(), shutdown.clone());
    let recorder = |component| {
        let (events, writer) = events::Recorder::new(client.clone(), component, shutdown.clone());
        stores.spawn(writer);
        events
    };
    let stop = shutdown.clone();
    stores.spawn(replicaset::run(
        stores.clone(),
        recorder(replicaset::NAME),
        stop.clone(),
    ));
    stores.spawn(job::run(stores.clone(), recorder(job::NAME), stop.clone()));
    stores.spawn(daemonset::run(
        stores.clone(),
        recorder(daemonset::NAME),
        stop.clone(),
    ));
    stores.spawn(statefulset::run(
        stores.clone(),
        recorder(statefulset::NAME),
        stop.clone(),
    ));
    stores.spawn(endpoints::run(stores.clone(), stop.clone()));
    let scheduler = scheduler::run(stores.clone(), 4, recorder(scheduler::NAME), stop.clone());
    stores.spawn(async move {
        let _ = scheduler.await;
    });

    let rs: ReplicaSet = serde_json::from_value(json!({
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}},
                              "spec": {"containers": [{"name": "c", "image": "app:1"}]}}},
    }))
    .unwrap();
    let sets: Api<ReplicaSet> = Api::namespaced(client.clone(), "default");
    sets.create(&PostParams::default(), &rs).await.unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    eventually("the replicaset's two pods", Duration::from_secs(10), || {
        let pods = pods.clone();
        async move { pods.list(&ListParams::default()).await.unwrap().items.len() == 2 }
    })
    .await;

    let watches = watches.lock().unwrap().clone();
    assert_eq!(watches.get("/api/v1/pods"), Some(&1), "{watches:?}");
    assert!(watches.values().all(|n| *n == 1), "{watches:?}");
    shutdown.cancel();
    tokio::time::timeout(Duration::from_secs(5), stores.stopped())
        .await
        .expect("every tracked task ends at shutdown");
}
