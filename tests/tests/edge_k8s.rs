//! From Kubernetes to the edge and back: a real cloudcore (embedded control plane, cloudhub,
//! edgecontroller) and a real edgecore (metamanager, edgehub, lwproxy) on loopback.

use std::time::Duration;

use e2e::{Cloud, Edge, Pki, Ports, edge, edge_config, k8s_cloud};
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod, Secret};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;
use tempfile::TempDir;
use testkit::eventually;

const WAIT: Duration = Duration::from_secs(30);

struct Site {
    _pki: Pki,
    _dir: TempDir,
    cloud: Cloud,
    edge: Edge,
}

/// A cloud and edge node `edge-1` linked over WebSocket.
async fn site() -> Site {
    let pki = Pki::new();
    let cloud = k8s_cloud(&pki, Ports::default()).await;
    let dir = tempfile::tempdir().unwrap();
    let transport = link::Transport::WebSocket;
    let config = edge_config(
        &pki.node("edge-1"),
        cloud.addr(transport),
        transport,
        &dir.path().join("edge.db"),
    );
    let edge = edge(config).await;
    Site {
        _pki: pki,
        _dir: dir,
        cloud,
        edge,
    }
}

fn pod_mounting(name: &str, node: &str, configmap: &str) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "nodeName": node,
            "containers": [{"name": "c", "image": "busybox", "volumeMounts": [{"name": "cfg", "mountPath": "/cfg"}]}],
            "volumes": [{"name": "cfg", "configMap": {"name": configmap}}],
        },
    }))
    .unwrap()
}

fn configmap(name: &str, value: &str) -> ConfigMap {
    serde_json::from_value(json!({"metadata": {"name": name}, "data": {"v": value}})).unwrap()
}

async fn held_rv(edge: &Edge, key: &str) -> Option<String> {
    edge.held().await.get(key).cloned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_and_the_configmap_it_mounts_follow_it_to_the_edge_and_leave_with_it() {
    let site = site().await;
    let client = site.cloud.kube().await;
    let nodes: Api<Node> = Api::all(client.clone());
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let secrets: Api<Secret> = Api::namespaced(client.clone(), "default");

    // The node registered itself on first connect, with the edge label, and holds its Node.
    eventually("the edge node is registered", WAIT, || async {
        nodes.get_opt("edge-1").await.unwrap().is_some_and(|n| {
            n.metadata
                .labels
                .unwrap_or_default()
                .contains_key(edgecontroller::EDGE_LABEL)
        })
    })
    .await;
    eventually("the edge holds its Node", WAIT, || async {
        held_rv(&site.edge, "nodes//edge-1").await.is_some()
    })
    .await;

    let unused: Secret =
        serde_json::from_value(json!({"metadata": {"name": "unused"}, "stringData": {"k": "v"}}))
            .unwrap();
    secrets
        .create(&PostParams::default(), &unused)
        .await
        .unwrap();
    cms.create(&PostParams::default(), &configmap("cfg", "1"))
        .await
        .unwrap();
    let created = pods
        .create(
            &PostParams::default(),
            &pod_mounting("web", "edge-1", "cfg"),
        )
        .await
        .unwrap();
    let pod_rv = created.metadata.resource_version.unwrap();
    eventually(
        "the pod and its configmap are at the edge",
        WAIT,
        || async {
            let held = site.edge.held().await;
            held.get("pods/default/web") == Some(&pod_rv)
                && held.contains_key("configmaps/default/cfg")
        },
    )
    .await;

    // Editing the configmap reaches the edge.
    let patch = json!({"data": {"v": "2"}});
    let edited = cms
        .patch("cfg", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    let cm_rv = edited.metadata.resource_version.unwrap();
    eventually("the edited configmap is at the edge", WAIT, || async {
        held_rv(&site.edge, "configmaps/default/cfg").await.as_ref() == Some(&cm_rv)
    })
    .await;
    let stored = site
        .edge
        .running
        .meta()
        .store()
        .get(&objstore::ObjKey::new("configmaps", "default", "cfg"))
        .await
        .unwrap()
        .unwrap();
    let value: serde_json::Value = serde_json::from_slice(&stored.value).unwrap();
    assert_eq!(value["data"]["v"], "2");
    // Everything sent after the secret was created has arrived; the secret never did.
    assert!(
        !site
            .edge
            .held()
            .await
            .contains_key("secrets/default/unused")
    );

    // Deleting the pod deletes it at the edge, and the configmap no pod references goes too.
    pods.delete("web", &DeleteParams::default().grace_period(0))
        .await
        .unwrap();
    eventually("the pod and its configmap left the edge", WAIT, || async {
        let held = site.edge.held().await;
        !held.contains_key("pods/default/web") && !held.contains_key("configmaps/default/cfg")
    })
    .await;
    assert!(
        !site
            .edge
            .held()
            .await
            .contains_key("secrets/default/unused")
    );
    site.edge.stop().await;
    site.cloud.stop().await;
}
