//! The embedded control plane's event recorder as users see it: a ReplicaSet whose pods are
//! refused makes one `FailedCreate` Event whose count grows, with the API's message.

use std::time::Duration;

use e2e::{Pki, Ports, k8s_cloud};
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::Event;
use kube::api::{Api, ListParams, PostParams};
use serde_json::json;
use testkit::eventually;

const WAIT: Duration = Duration::from_secs(30);

/// The FailedCreate Events about the ReplicaSet `name`.
async fn failed_creates(events: &Api<Event>, name: &str) -> Vec<Event> {
    let list = events.list(&ListParams::default()).await.unwrap();
    list.items
        .into_iter()
        .filter(|e| {
            e.involved_object.kind.as_deref() == Some("ReplicaSet")
                && e.involved_object.name.as_deref() == Some(name)
                && e.reason.as_deref() == Some("FailedCreate")
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replicaset_whose_pods_are_refused_makes_one_event_that_counts_with_the_apis_message() {
    let pki = Pki::new();
    let cloud = k8s_cloud(&pki, Ports::default()).await;
    let client = cloud.kube().await;
    let sets: Api<ReplicaSet> = Api::namespaced(client.clone(), "default");
    let events: Api<Event> = Api::namespaced(client.clone(), "default");
    // Its pods name a ServiceAccount that does not exist: admission refuses every one.
    let rs: ReplicaSet = serde_json::from_value(json!({
        "metadata": {"name": "refused"},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "refused"}},
                 "template": {"metadata": {"labels": {"app": "refused"}},
                              "spec": {"serviceAccountName": "robot",
                                       "containers": [{"name": "c", "image": "registry.local/web:1"}]}}},
    }))
    .unwrap();
    sets.create(&PostParams::default(), &rs).await.unwrap();

    eventually("the refusal is counted on one event", WAIT, || async {
        let found = failed_creates(&events, "refused").await;
        found.len() == 1 && found[0].count.unwrap_or(0) > 2
    })
    .await;
    let found = failed_creates(&events, "refused").await;
    assert_eq!(found.len(), 1, "{found:#?}");
    let message = found[0].message.clone().unwrap_or_default();
    assert!(
        message.starts_with("Error creating: pods ")
            && message.contains("serviceaccount \"robot\" not found"),
        "{message}"
    );
    assert!(!message.contains("Status {"), "{message}");
    assert!(!message.contains("ApiError"), "{message}");
    cloud.stop().await;
}
