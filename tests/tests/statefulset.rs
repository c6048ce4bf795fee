//! The StatefulSet controller of the embedded control plane: a real cloudcore; no kubelet runs,
//! so the test plays it through the API (pods Running and Ready, terminating pods finished),
//! the boundary the controller sees. kubectl is used where a recent one is found; every check
//! is also made through the kube crate.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use e2e::{Pki, Ports, k8s_cloud, kubectl_ok};
use k8s_openapi::api::apps::v1::{ControllerRevision, StatefulSet};
use k8s_openapi::api::core::v1::{Event, Pod};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use testkit::eventually;

const WAIT: Duration = Duration::from_secs(30);
const REVISION: &str = "controller-revision-hash";

/// A StatefulSet `web` of `replicas` pods labelled `app=web`, with `extra` merged into its spec.
/// The pods name their node (no scheduler needed; a delete waits for the kubelet, played by
/// [`kubelet`]).
fn web(replicas: i32, extra: Value) -> StatefulSet {
    let mut set = json!({
        "metadata": {"name": "web"},
        "spec": {"replicas": replicas, "serviceName": "web",
                 "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}},
                              "spec": {"nodeName": "edge-1",
                                       "containers": [{"name": "c", "image": "registry.local/web:1"}]}}},
    });
    for (k, v) in extra.as_object().unwrap() {
        set["spec"][k] = v.clone();
    }
    serde_json::from_value(set).unwrap()
}

/// The pods labelled `app=web`, by name.
async fn web_pods(pods: &Api<Pod>) -> BTreeMap<String, Pod> {
    let params = ListParams::default().labels("app=web");
    pods.list(&params)
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|p| (p.metadata.name.clone().unwrap(), p))
        .collect()
}

fn ready(p: &Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

fn terminating(p: &Pod) -> bool {
    p.metadata.deletion_timestamp.is_some()
}

fn image(p: &Pod) -> String {
    p.spec.as_ref().unwrap().containers[0]
        .image
        .clone()
        .unwrap_or_default()
}

fn revision(p: &Pod) -> String {
    p.metadata.labels.as_ref().unwrap()[REVISION].clone()
}

/// Plays the kubelet: finishes terminating pods (the final delete) and makes the pods `run`
/// names Running and Ready.
async fn kubelet(pods: &Api<Pod>, run: impl Fn(&str) -> bool) {
    for (name, p) in web_pods(pods).await {
        if terminating(&p) {
            let now = DeleteParams {
                grace_period_seconds: Some(0),
                ..DeleteParams::default()
            };
            let _ = pods.delete(&name, &now).await;
        } else if run(&name) && !ready(&p) {
            let status = json!({"status": {"phase": "Running", "conditions": [
                {"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}});
            let _ = pods
                .patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
                .await;
        }
    }
}

/// Waits until the controller has written a status for the set's current generation (it does
/// after each pass over the pods).
async fn observed(sets: &Api<StatefulSet>) -> StatefulSet {
    eventually("the status observes the generation", WAIT, || async {
        let set = sets.get("web").await.unwrap();
        let observed = set.status.as_ref().and_then(|s| s.observed_generation);
        observed.is_some() && observed == set.metadata.generation
    })
    .await;
    sets.get("web").await.unwrap()
}

/// The messages of the events `reason` about the set.
async fn events(client: &kube::Client, reason: &str) -> Vec<String> {
    let api: Api<Event> = Api::namespaced(client.clone(), "default");
    api.list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.involved_object.kind.as_deref() == Some("StatefulSet"))
        .filter(|e| e.reason.as_deref() == Some(reason))
        .filter_map(|e| e.message)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ordered_set_creates_each_pod_once_the_one_before_is_ready_and_scales_down_from_the_top()
{
    let pki = Pki::new();
    let cloud = k8s_cloud(&pki, Ports::default()).await;
    let client = cloud.kube().await;
    let sets: Api<StatefulSet> = Api::namespaced(client.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let set = sets
        .create(&PostParams::default(), &web(3, json!({})))
        .await
        .unwrap();
    let uid = set.metadata.uid.unwrap();

    // web-0 first, with its identity; nothing more while it is not ready.
    eventually("web-0 is created", WAIT, || async {
        web_pods(&pods).await.contains_key("web-0")
    })
    .await;
    let status = observed(&sets).await.status.unwrap();
    let all = web_pods(&pods).await;
    assert_eq!(all.keys().collect::<Vec<_>>(), ["web-0"], "one at a time");
    let web0 = &all["web-0"];
    let labels = web0.metadata.labels.as_ref().unwrap();
    assert_eq!(labels["statefulset.kubernetes.io/pod-name"], "web-0");
    assert_eq!(labels["apps.kubernetes.io/pod-index"], "0");
    assert_eq!(
        Some(&labels[REVISION]),
        status.update_revision.as_ref(),
        "the pod carries the update revision"
    );
    let owner = &web0.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.uid.as_str(), owner.controller),
        ("StatefulSet", uid.as_str(), Some(true))
    );
    let spec = web0.spec.as_ref().unwrap();
    assert_eq!(spec.hostname.as_deref(), Some("web-0"));
    assert_eq!(spec.subdomain.as_deref(), Some("web"));

    // Each ready pod lets the next one come, in order.
    for (ready_up_to, next) in [(0, "web-1"), (1, "web-2")] {
        kubelet(&pods, |n| n <= format!("web-{ready_up_to}").as_str()).await;
        eventually(&format!("{next} is created"), WAIT, || async {
            web_pods(&pods).await.contains_key(next)
        })
        .await;
        let all = web_pods(&pods).await;
        assert_eq!(all.len(), ready_up_to + 2, "only {next} is added: {all:?}");
    }
    eventually("three pods ready, the rollout complete", WAIT, || async {
        kubelet(&pods, |_| true).await;
        let s = sets.get("web").await.unwrap().status.unwrap_or_default();
        s.ready_replicas == Some(3)
            && s.available_replicas == Some(3)
            && s.current_replicas == Some(3)
            && s.updated_replicas == Some(3)
            && s.current_revision.is_some()
            && s.current_revision == s.update_revision
    })
    .await;
    let created = events(&client, "SuccessfulCreate").await;
    for n in 0..3 {
        let message = format!("create Pod web-{n} in StatefulSet web successful");
        assert!(created.contains(&message), "{created:?}");
    }
    if e2e::recent_kubectl() {
        let kubeconfig = cloud.running.kubeconfig().unwrap();
        let out = kubectl_ok(
            kubeconfig,
            &["rollout", "status", "statefulset/web", "--timeout=20s"],
        );
        assert!(out.contains("3 new pods have been updated"), "{out}");
        let out = kubectl_ok(kubeconfig, &["get", "statefulset", "web"]);
        assert!(out.contains("3/3"), "{out}");
    }

    // Scaled down to one: web-2 goes first, web-1 only once web-2 is gone.
    sets.patch(
        "web",
        &PatchParams::default(),
        &Patch::Merge(&json!({"spec": {"replicas": 1}})),
    )
    .await
    .unwrap();
    eventually("web-2 is terminating", WAIT, || async {
        web_pods(&pods).await.get("web-2").is_some_and(terminating)
    })
    .await;
    observed(&sets).await;
    let all = web_pods(&pods).await;
    assert!(!terminating(&all["web-1"]), "web-1 waits for web-2");
    eventually("web-1 goes after web-2", WAIT, || async {
        let all = web_pods(&pods).await;
        if all.get("web-1").is_some_and(terminating) {
            assert!(!all.contains_key("web-2"), "web-2 is gone first");
        }
        kubelet(&pods, |_| true).await;
        web_pods(&pods).await.keys().collect::<Vec<_>>() == ["web-0"]
    })
    .await;
    let deleted = events(&client, "SuccessfulDelete").await;
    assert!(
        deleted.contains(&"delete Pod web-2 in StatefulSet web successful".to_string()),
        "{deleted:?}"
    );
    eventually("the status counts one replica", WAIT, || async {
        let s = sets.get("web").await.unwrap().status.unwrap_or_default();
        s.replicas == 1 && s.ready_replicas == Some(1)
    })
    .await;
    cloud.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parallel_set_makes_all_pods_at_once_recreates_a_deleted_one_by_name_and_survives_a_restart()
 {
    let pki = Pki::new();
    let cloud = k8s_cloud(&pki, Ports::default()).await;
    let client = cloud.kube().await;
    let sets: Api<StatefulSet> = Api::namespaced(client.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let parallel = web(3, json!({"podManagementPolicy": "Parallel"}));
    sets.create(&PostParams::default(), &parallel)
        .await
        .unwrap();
    eventually("three pods at once, none ready", WAIT, || async {
        let all = web_pods(&pods).await;
        all.keys().collect::<Vec<_>>() == ["web-0", "web-1", "web-2"]
            && all.values().all(|p| !ready(p))
    })
    .await;
    eventually("all ready", WAIT, || async {
        kubelet(&pods, |_| true).await;
        let s = sets.get("web").await.unwrap().status.unwrap_or_default();
        s.ready_replicas == Some(3)
    })
    .await;

    // The control plane restarts: the same pods, none added.
    let uids = |all: BTreeMap<String, Pod>| -> BTreeMap<String, String> {
        all.into_iter()
            .map(|(n, p)| (n, p.metadata.uid.unwrap()))
            .collect()
    };
    let before = uids(web_pods(&pods).await);
    let ports = cloud.ports();
    cloud.stop().await;
    let cloud = k8s_cloud(&pki, ports).await;
    let client = cloud.kube().await;
    let sets: Api<StatefulSet> = Api::namespaced(client.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");

    // A deleted pod comes back under its name; the others are untouched.
    pods.delete("web-1", &DeleteParams::default())
        .await
        .unwrap();
    eventually("web-1 is made again", WAIT, || async {
        kubelet(&pods, |_| true).await;
        let now = uids(web_pods(&pods).await);
        now.len() == 3 && now.get("web-1").is_some_and(|u| *u != before["web-1"])
    })
    .await;
    observed(&sets).await;
    let now = uids(web_pods(&pods).await);
    assert_eq!(now.len(), 3, "no pod added: {now:?}");
    assert_eq!(now["web-0"], before["web-0"]);
    assert_eq!(now["web-2"], before["web-2"]);

    // Scaled down in parallel: both go at once.
    sets.patch(
        "web",
        &PatchParams::default(),
        &Patch::Merge(&json!({"spec": {"replicas": 1}})),
    )
    .await
    .unwrap();
    eventually("web-1 and web-2 are both terminating", WAIT, || async {
        let all = web_pods(&pods).await;
        ["web-1", "web-2"]
            .iter()
            .all(|n| all.get(*n).is_some_and(terminating))
    })
    .await;
    cloud.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_update_goes_from_the_highest_ordinal_down_to_the_partition_and_rolls_back() {
    let pki = Pki::new();
    let cloud = k8s_cloud(&pki, Ports::default()).await;
    let client = cloud.kube().await;
    let sets: Api<StatefulSet> = Api::namespaced(client.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let revisions: Api<ControllerRevision> = Api::namespaced(client.clone(), "default");
    let partitioned = web(
        3,
        json!({"updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"partition": 1}}}),
    );
    sets.create(&PostParams::default(), &partitioned)
        .await
        .unwrap();
    eventually("three pods of web:1 ready", WAIT, || async {
        kubelet(&pods, |_| true).await;
        let s = sets.get("web").await.unwrap().status.unwrap_or_default();
        s.ready_replicas == Some(3) && s.current_revision.is_some()
    })
    .await;
    let first = sets.get("web").await.unwrap().status.unwrap();
    let old_revision = first.current_revision.clone().unwrap();

    // web:2: web-2, then web-1, one at a time; web-0 stays below the partition.
    let image2 = json!({"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "registry.local/web:2"}]}}}});
    sets.patch("web", &PatchParams::default(), &Patch::Strategic(&image2))
        .await
        .unwrap();
    let order: Mutex<Vec<String>> = Mutex::default();
    eventually(
        "web-2 and web-1 run web:2",
        Duration::from_secs(60),
        || async {
            let all = web_pods(&pods).await;
            let down: Vec<&String> = all
                .iter()
                .filter(|(_, p)| terminating(p) || !ready(p))
                .map(|(n, _)| n)
                .collect();
            assert!(down.len() <= 1, "one pod at a time: {down:?}");
            for (name, p) in &all {
                let mut order = order.lock().unwrap();
                if image(p).ends_with("web:2") && !order.contains(name) {
                    order.push(name.clone());
                }
            }
            assert!(
                !all.get("web-0")
                    .is_some_and(|p| image(p).ends_with("web:2")),
                "web-0 is below the partition"
            );
            kubelet(&pods, |_| true).await;
            let s = sets.get("web").await.unwrap().status.unwrap_or_default();
            s.updated_replicas == Some(2) && s.ready_replicas == Some(3)
        },
    )
    .await;
    assert_eq!(
        *order.lock().unwrap(),
        ["web-2", "web-1"],
        "highest ordinal first"
    );
    let status = sets.get("web").await.unwrap().status.unwrap();
    assert_eq!(
        status.current_revision.as_deref(),
        Some(old_revision.as_str())
    );
    assert_eq!(status.current_replicas, Some(1));
    let new_revision = status.update_revision.clone().unwrap();
    assert_ne!(new_revision, old_revision);
    let all = web_pods(&pods).await;
    assert_eq!(revision(&all["web-0"]), old_revision);
    assert_eq!(revision(&all["web-2"]), new_revision);
    let kubeconfig = cloud.running.kubeconfig().unwrap().to_path_buf();
    let with_kubectl = e2e::recent_kubectl();
    if with_kubectl {
        let out = kubectl_ok(
            &kubeconfig,
            &["rollout", "status", "statefulset/web", "--timeout=20s"],
        );
        assert!(
            out.contains("partitioned roll out complete: 2 new pods have been updated"),
            "{out}"
        );
    }

    // A pod deleted below the partition comes back at the current revision.
    pods.delete("web-0", &DeleteParams::default())
        .await
        .unwrap();
    let old_uid = all["web-0"].metadata.uid.clone();
    eventually("web-0 is made again from web:1", WAIT, || async {
        kubelet(&pods, |_| true).await;
        web_pods(&pods)
            .await
            .get("web-0")
            .is_some_and(|p| p.metadata.uid != old_uid && ready(p))
    })
    .await;
    let all = web_pods(&pods).await;
    assert!(image(&all["web-0"]).ends_with("web:1"));
    assert_eq!(revision(&all["web-0"]), old_revision);

    // Partition 0: web-0 follows and the rollout completes.
    let whole = json!({"spec": {"updateStrategy": {"rollingUpdate": {"partition": 0}}}});
    sets.patch("web", &PatchParams::default(), &Patch::Merge(&whole))
        .await
        .unwrap();
    eventually("every pod runs web:2", Duration::from_secs(60), || async {
        kubelet(&pods, |_| true).await;
        let s = sets.get("web").await.unwrap().status.unwrap_or_default();
        s.current_revision.as_deref() == Some(new_revision.as_str())
            && s.current_replicas == Some(3)
            && s.updated_replicas == Some(3)
    })
    .await;
    assert!(
        web_pods(&pods)
            .await
            .values()
            .all(|p| image(p).ends_with("web:2"))
    );

    // Two revisions; the rollback renumbers the first as the third.
    let numbered = || async {
        let mut list: Vec<(i64, String)> = revisions
            .list(&ListParams::default().labels("app=web"))
            .await
            .unwrap()
            .items
            .into_iter()
            .map(|r| (r.revision, r.metadata.name.unwrap()))
            .collect();
        list.sort();
        list
    };
    assert_eq!(
        numbered().await,
        [(1, old_revision.clone()), (2, new_revision.clone())]
    );
    if with_kubectl {
        let out = kubectl_ok(&kubeconfig, &["rollout", "history", "statefulset/web"]);
        assert!(out.contains("REVISION") && out.contains('2'), "{out}");
        kubectl_ok(&kubeconfig, &["rollout", "undo", "statefulset/web"]);
    } else {
        // What `kubectl rollout undo` sends: the revision's data as a strategic merge patch.
        let data = revisions.get(&old_revision).await.unwrap().data.unwrap().0;
        sets.patch("web", &PatchParams::default(), &Patch::Strategic(&data))
            .await
            .unwrap();
    }
    eventually("rolled back to web:1", Duration::from_secs(60), || async {
        kubelet(&pods, |_| true).await;
        let s = sets.get("web").await.unwrap().status.unwrap_or_default();
        let all = web_pods(&pods).await;
        s.current_revision.as_deref() == Some(old_revision.as_str())
            && s.updated_replicas == Some(3)
            && all.len() == 3
            && all.values().all(|p| image(p).ends_with("web:1"))
    })
    .await;
    assert_eq!(
        numbered().await,
        [(2, new_revision.clone()), (3, old_revision.clone())]
    );
    cloud.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_set_with_volume_claim_templates_gets_no_pods_and_a_warning() {
    let pki = Pki::new();
    let cloud = k8s_cloud(&pki, Ports::default()).await;
    let client = cloud.kube().await;
    let sets: Api<StatefulSet> = Api::namespaced(client.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let claims = json!({"volumeClaimTemplates": [{
        "metadata": {"name": "data"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
    }]});
    sets.create(&PostParams::default(), &web(2, claims))
        .await
        .unwrap();
    eventually("a FailedCreate warning", WAIT, || async {
        events(&client, "FailedCreate")
            .await
            .iter()
            .any(|m| m.contains("volumeClaimTemplates are not supported yet"))
    })
    .await;
    let set = observed(&sets).await;
    assert_eq!(set.status.unwrap().replicas, 0);
    assert!(web_pods(&pods).await.is_empty(), "no pods");
    if e2e::recent_kubectl() {
        let kubeconfig = cloud.running.kubeconfig().unwrap();
        let out = kubectl_ok(kubeconfig, &["describe", "statefulset", "web"]);
        assert!(out.contains("FailedCreate"), "{out}");
    }
    cloud.stop().await;
}
