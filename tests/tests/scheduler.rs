//! The embedded control plane's scheduler: a real cloudcore; nodes are written through the API
//! as their kubelets would register them, and pods through the API as users would.

use std::time::Duration;

use e2e::{Pki, Ports, k8s_cloud};
use k8s_openapi::api::core::v1::{Event, Node, Pod};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use testkit::eventually;

const WAIT: Duration = Duration::from_secs(30);

fn node(name: &str, labels: Value, cpu: &str) -> Node {
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": labels},
        "status": {
            "capacity": {"cpu": cpu, "memory": "8Gi", "pods": "110"},
            "allocatable": {"cpu": cpu, "memory": "8Gi", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
        },
    }))
    .unwrap()
}

/// A pod controlled by `owner` (the uid of an object that exists, so the garbage collector
/// keeps the pod: a ConfigMap here, since a ReplicaSet's controller would manage its pods).
fn pod(owner: &str, name: &str, spec: Value) -> Pod {
    let mut s = json!({"containers": [{"name": "c", "image": "registry.local/app:1",
        "resources": {"requests": {"cpu": "500m"}}}]});
    if let (Some(s), Value::Object(extra)) = (s.as_object_mut(), spec) {
        s.extend(extra);
    }
    serde_json::from_value(json!({"metadata": {"name": name, "namespace": "default",
        "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "web",
                             "uid": owner, "controller": true}]}, "spec": s}))
    .unwrap()
}

async fn node_of(pods: &Api<Pod>, name: &str) -> Option<String> {
    let p = pods.get_opt(name).await.ok().flatten()?;
    p.spec?.node_name
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_are_bound_spread_and_filtered_and_an_unschedulable_pod_waits_for_a_node() {
    let pki = Pki::new();
    let cloud = k8s_cloud(&pki, Ports::default()).await;
    let client = cloud.kube().await;
    let nodes: Api<Node> = Api::all(client.clone());
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let owner: k8s_openapi::api::core::v1::ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "web"}})).unwrap();
    let owner = Api::namespaced(client.clone(), "default")
        .create(&PostParams::default(), &owner)
        .await
        .unwrap();
    let owner = owner.metadata.uid.unwrap();
    for (name, zone) in [("n1", "a"), ("n2", "a"), ("n3", "b")] {
        let labels = json!({"zone": zone, "node-role.kubernetes.io/edge": ""});
        nodes
            .create(&PostParams::default(), &node(name, labels, "2"))
            .await
            .unwrap();
    }

    // A node selector: the pod lands in zone b. Once it is bound, the scheduler has seen
    // every node (they were created before n3, and its watch delivers them in order).
    pods.create(
        &PostParams::default(),
        &pod(
            &owner,
            "zoned",
            json!({"nodeSelector": {"zone": "b"}, "containers": [{"name": "c", "image": "i"}]}),
        ),
    )
    .await
    .unwrap();
    eventually("the zoned pod lands in zone b", WAIT, || async {
        node_of(&pods, "zoned").await.as_deref() == Some("n3")
    })
    .await;

    // Six pods of one owner: bound, two per node (spread), none over allocatable.
    for i in 0..6 {
        pods.create(
            &PostParams::default(),
            &pod(&owner, &format!("web-{i}"), json!({})),
        )
        .await
        .unwrap();
    }
    eventually("every pod is bound", WAIT, || async {
        let mut bound = 0;
        for i in 0..6 {
            bound += usize::from(node_of(&pods, &format!("web-{i}")).await.is_some());
        }
        bound == 6
    })
    .await;
    let mut per_node = std::collections::BTreeMap::new();
    for i in 0..6 {
        let n = node_of(&pods, &format!("web-{i}")).await.unwrap();
        *per_node.entry(n).or_insert(0) += 1;
    }
    assert_eq!(
        per_node.values().copied().collect::<Vec<_>>(),
        [2, 2, 2],
        "spread: {per_node:?}"
    );

    // Too big for any node (each has 2 CPUs, 1 of them taken): unschedulable, with
    // kube-scheduler's condition and event.
    let big = json!({"containers": [{"name": "c", "image": "i",
        "resources": {"requests": {"cpu": "1500m"}}}]});
    pods.create(&PostParams::default(), &pod(&owner, "big", big))
        .await
        .unwrap();
    eventually("the big pod is marked unschedulable", WAIT, || async {
        let Ok(Some(p)) = pods.get_opt("big").await else {
            return false;
        };
        let conds = p.status.and_then(|s| s.conditions).unwrap_or_default();
        conds.iter().any(|c| {
            c.type_ == "PodScheduled"
                && c.status == "False"
                && c.reason.as_deref() == Some("Unschedulable")
                && c.message.as_deref()
                    == Some(
                        "0/3 nodes are available: 3 Insufficient cpu. preemption: not attempted.",
                    )
        })
    })
    .await;
    let events: Api<Event> = Api::namespaced(client.clone(), "default");
    eventually("a FailedScheduling event is recorded", WAIT, || async {
        let params =
            ListParams::default().fields("involvedObject.name=big,reason=FailedScheduling");
        events.list(&params).await.is_ok_and(|l| {
            l.items.iter().any(|e| {
                e.source.as_ref().and_then(|s| s.component.as_deref()) == Some("default-scheduler")
            })
        })
    })
    .await;
    assert_eq!(node_of(&pods, "big").await, None);

    // A bigger node registers: the waiting pod goes there.
    nodes
        .create(
            &PostParams::default(),
            &node("n4", json!({"zone": "c"}), "4"),
        )
        .await
        .unwrap();
    eventually("the big pod is bound to the new node", WAIT, || async {
        node_of(&pods, "big").await.as_deref() == Some("n4")
    })
    .await;

    // A cordoned node takes nothing new.
    let cordon = json!({"spec": {"unschedulable": true}});
    for n in ["n1", "n2", "n3"] {
        nodes
            .patch(n, &PatchParams::default(), &Patch::Merge(&cordon))
            .await
            .unwrap();
    }
    pods.create(&PostParams::default(), &pod(&owner, "late", json!({})))
        .await
        .unwrap();
    eventually("the late pod avoids cordoned nodes", WAIT, || async {
        node_of(&pods, "late").await.as_deref() == Some("n4")
    })
    .await;
    cloud.stop().await;
}
