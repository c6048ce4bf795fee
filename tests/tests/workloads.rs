//! The embedded control plane's workload controllers: a real cloudcore; no kubelet runs, so
//! the test plays the kubelet through the API (sets pod status), the boundary the controllers
//! see.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use e2e::{Pki, Ports, k8s_cloud};
use futures::StreamExt;
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher::Event;
use serde_json::json;
use testkit::eventually;

const WAIT: Duration = Duration::from_secs(30);

async fn nodes(client: &kube::Client, names: &[&str]) {
    let api: Api<Node> = Api::all(client.clone());
    for name in names {
        let node: Node = serde_json::from_value(json!({
            "metadata": {"name": name},
            "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"},
                       "conditions": [{"type": "Ready", "status": "True"}]},
        }))
        .unwrap();
        api.create(&PostParams::default(), &node).await.unwrap();
    }
}

/// A Deployment of `replicas` pods that no node matches: they stay unscheduled, so deleting
/// them needs no kubelet.
fn unscheduled_deployment(name: &str, replicas: i32) -> k8s_openapi::api::apps::v1::Deployment {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                 "template": {"metadata": {"labels": {"app": name}},
                              "spec": {"nodeSelector": {"nowhere": "true"},
                                       "containers": [{"name": "c", "image": "registry.local/web:1"}]}}},
    }))
    .unwrap()
}

/// The pods a ReplicaSet controls, not being deleted.
async fn owned(pods: &Api<Pod>, uid: &str) -> Vec<Pod> {
    let list = pods.list(&ListParams::default()).await.unwrap();
    list.items
        .into_iter()
        .filter(|p| {
            p.metadata.deletion_timestamp.is_none()
                && p.metadata
                    .owner_references
                    .iter()
                    .flatten()
                    .any(|o| o.uid == uid && o.controller == Some(true))
        })
        .collect()
}

/// Plays the kubelet: every bound pod of `uid` is Running and Ready.
async fn run_pods(pods: &Api<Pod>, uid: &str) {
    for p in owned(pods, uid).await {
        if p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_none() {
            continue;
        }
        let status = json!({"status": {"phase": "Running", "conditions": [
            {"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}
        ]}});
        let name = p.metadata.name.unwrap();
        let _ = pods
            .patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
            .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replicaset_keeps_its_replicas_scales_and_replaces_a_deleted_pod() {
    let pki = Pki::new();
    let cloud = k8s_cloud(&pki, Ports::default()).await;
    let client = cloud.kube().await;
    nodes(&client, &["w1", "w2"]).await;
    let sets: Api<ReplicaSet> = Api::namespaced(client.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let rs: ReplicaSet = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}},
                              "spec": {"containers": [{"name": "c", "image": "registry.local/web:1"}]}}},
    }))
    .unwrap();
    let rs = sets.create(&PostParams::default(), &rs).await.unwrap();
    let uid = rs.metadata.uid.clone().unwrap();

    eventually("three pods are created and bound", WAIT, || async {
        let p = owned(&pods, &uid).await;
        p.len() == 3
            && p.iter().all(|p| {
                p.metadata
                    .name
                    .as_deref()
                    .unwrap_or_default()
                    .starts_with("web-")
                    && p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some()
            })
    })
    .await;
    eventually("the status counts them ready", WAIT, || async {
        run_pods(&pods, &uid).await;
        let s = sets.get("web").await.unwrap().status.unwrap_or_default();
        s.replicas == 3 && s.ready_replicas == Some(3) && s.available_replicas == Some(3)
    })
    .await;

    // A pod deleted: replaced.
    let victim = owned(&pods, &uid).await[0].metadata.name.clone().unwrap();
    pods.delete(&victim, &DeleteParams::default())
        .await
        .unwrap();
    eventually("a replacement is created", WAIT, || async {
        let p = owned(&pods, &uid).await;
        p.len() == 3
            && p.iter()
                .all(|p| p.metadata.name.as_deref() != Some(victim.as_str()))
    })
    .await;

    // Scaled down to one, then up to four.
    let scale = |n: i32| json!({"spec": {"replicas": n}});
    sets.patch("web", &PatchParams::default(), &Patch::Merge(&scale(1)))
        .await
        .unwrap();
    eventually("scaled down to one", WAIT, || async {
        owned(&pods, &uid).await.len() == 1
            && sets
                .get("web")
                .await
                .unwrap()
                .status
                .unwrap_or_default()
                .replicas
                == 1
    })
    .await;
    sets.patch("web", &PatchParams::default(), &Patch::Merge(&scale(4)))
        .await
        .unwrap();
    eventually("scaled up to four", WAIT, || async {
        owned(&pods, &uid).await.len() == 4
    })
    .await;
    cloud.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endpoint_slices_follow_pod_readiness_and_reach_the_edge() {
    let (pki, dir) = (Pki::new(), tempfile::tempdir().unwrap());
    let (cloud, edge) = e2e::linked_site(&pki, dir.path(), "edge-ep").await;
    let client = cloud.kube().await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let services: Api<k8s_openapi::api::core::v1::Service> =
        Api::namespaced(client.clone(), "default");
    let slices: Api<k8s_openapi::api::discovery::v1::EndpointSlice> =
        Api::namespaced(client.clone(), "default");
    let svc = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {"selector": {"app": "web"}, "ports": [{"name": "http", "port": 80, "targetPort": "http"}]},
    }))
    .unwrap();
    services.create(&PostParams::default(), &svc).await.unwrap();
    for (i, ip) in ["10.244.0.5", "10.244.0.6"].iter().enumerate() {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": format!("web-{i}"), "labels": {"app": "web"}},
            "spec": {"nodeName": "edge-ep", "containers": [{"name": "c", "image": "i",
                     "ports": [{"name": "http", "containerPort": 8080}]}]},
        }))
        .unwrap();
        pods.create(&PostParams::default(), &pod).await.unwrap();
        // The kubelet's report: running with an IP, only the first one ready.
        let ready = if i == 0 { "True" } else { "False" };
        let status = json!({"status": {"phase": "Running", "podIP": ip,
            "conditions": [{"type": "Ready", "status": ready}]}});
        pods.patch_status(
            &format!("web-{i}"),
            &PatchParams::default(),
            &Patch::Merge(&status),
        )
        .await
        .unwrap();
    }
    let ready_ips = |list: Vec<k8s_openapi::api::discovery::v1::EndpointSlice>| {
        let mut ips: Vec<(String, bool)> = list
            .iter()
            .flat_map(|s| s.endpoints.iter())
            .map(|e| {
                (
                    e.addresses[0].clone(),
                    e.conditions.as_ref().and_then(|c| c.ready) == Some(true),
                )
            })
            .collect();
        ips.sort();
        ips
    };
    let of_web = ListParams::default().labels("kubernetes.io/service-name=web");
    eventually(
        "the slice lists both pods, one ready, on port 8080",
        WAIT,
        || async {
            let list = slices.list(&of_web).await.unwrap().items;
            let port_ok = list.iter().all(|s| {
                s.ports
                    .as_ref()
                    .is_some_and(|p| p.len() == 1 && p[0].port == Some(8080))
            });
            port_ok
                && ready_ips(list)
                    == [
                        ("10.244.0.5".to_string(), true),
                        ("10.244.0.6".to_string(), false),
                    ]
        },
    )
    .await;
    // The second pod becomes ready: the slice follows.
    let status = json!({"status": {"conditions": [{"type": "Ready", "status": "True"}]}});
    pods.patch_status("web-1", &PatchParams::default(), &Patch::Merge(&status))
        .await
        .unwrap();
    eventually("both endpoints are ready", WAIT, || async {
        ready_ips(slices.list(&of_web).await.unwrap().items)
            .iter()
            .all(|e| e.1)
    })
    .await;
    let endpoints: Api<k8s_openapi::api::core::v1::Endpoints> =
        Api::namespaced(client.clone(), "default");
    eventually("the Endpoints object lists both as ready", WAIT, || async {
        endpoints
            .get_opt("web")
            .await
            .ok()
            .flatten()
            .is_some_and(|e| {
                e.subsets
                    .unwrap_or_default()
                    .iter()
                    .map(|s| s.addresses.clone().unwrap_or_default().len())
                    .sum::<usize>()
                    == 2
            })
    })
    .await;
    eventually("the edge holds the slice", WAIT, || async {
        edge.held()
            .await
            .keys()
            .any(|k| k.starts_with("endpointslices.discovery.k8s.io/default/web-"))
    })
    .await;
    edge.stop().await;
    cloud.stop().await;
}

/// The pods of Deployment-made ReplicaSets labelled `app=<app>`, not being deleted, with their
/// image and whether they are ready.
async fn app_pods(pods: &Api<Pod>, app: &str) -> Vec<(String, bool)> {
    let params = ListParams::default().labels(&format!("app={app}"));
    pods.list(&params)
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .map(|p| {
            let image = p.spec.as_ref().unwrap().containers[0]
                .image
                .clone()
                .unwrap_or_default();
            let ready = p
                .status
                .and_then(|s| s.conditions)
                .unwrap_or_default()
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == "True");
            (image, ready)
        })
        .collect()
}

/// Plays the kubelet for every bound pod labelled `app=<app>`: Running and Ready.
async fn run_app(pods: &Api<Pod>, app: &str) {
    let params = ListParams::default().labels(&format!("app={app}"));
    for p in pods.list(&params).await.unwrap().items {
        let bound = p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some();
        let ready = p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running");
        if bound && !ready && p.metadata.deletion_timestamp.is_none() {
            let status = json!({"status": {"phase": "Running", "conditions": [
                {"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}});
            let _ = pods
                .patch_status(
                    p.metadata.name.as_deref().unwrap(),
                    &PatchParams::default(),
                    &Patch::Merge(&status),
                )
                .await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deployment_rolls_out_within_its_surge_and_unavailability_and_rolls_back() {
    use k8s_openapi::api::apps::v1::Deployment;
    let pki = Pki::new();
    let cloud = k8s_cloud(&pki, Ports::default()).await;
    let client = cloud.kube().await;
    nodes(&client, &["d1", "d2"]).await;
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let d: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"}},
                 "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
                 "template": {"metadata": {"labels": {"app": "web"}},
                              "spec": {"containers": [{"name": "c", "image": "registry.local/web:1"}]}}},
    }))
    .unwrap();
    deployments
        .create(&PostParams::default(), &d)
        .await
        .unwrap();
    let done = |image: &'static str| {
        let (pods, deployments) = (pods.clone(), deployments.clone());
        async move {
            run_app(&pods, "web").await;
            let p = app_pods(&pods, "web").await;
            let s = deployments
                .get("web")
                .await
                .unwrap()
                .status
                .unwrap_or_default();
            p.len() == 3
                && p.iter().all(|(i, r)| i.ends_with(image) && *r)
                && s.updated_replicas == Some(3)
                && s.available_replicas == Some(3)
        }
    };
    eventually("three pods of web:1 run", WAIT, || done("web:1")).await;

    // A new image rolls out: never more than 4 pods, never fewer than 3 ready.
    let patch = json!({"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "registry.local/web:2"}]}}}});
    deployments
        .patch("web", &PatchParams::default(), &Patch::Strategic(&patch))
        .await
        .unwrap();
    eventually(
        "the rollout completes within its limits",
        Duration::from_secs(60),
        || async {
            let p = app_pods(&pods, "web").await;
            let ready = p.iter().filter(|(_, r)| *r).count();
            assert!(p.len() <= 4, "maxSurge 1: {p:?}");
            assert!(ready >= 3, "maxUnavailable 0: {p:?}");
            done("web:2").await
        },
    )
    .await;
    let d = deployments.get("web").await.unwrap();
    let revision =
        d.metadata.annotations.unwrap_or_default()["deployment.kubernetes.io/revision"].clone();
    assert_eq!(revision, "2");

    // kubectl rollout undo goes back to web:1.
    let kubeconfig = cloud.running.kubeconfig().unwrap().to_path_buf();
    if std::process::Command::new("kubectl")
        .arg("version")
        .arg("--client")
        .output()
        .is_ok()
    {
        let out = std::process::Command::new("kubectl")
            .args([
                "--kubeconfig",
                kubeconfig.to_str().unwrap(),
                "rollout",
                "undo",
                "deployment/web",
            ])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        eventually("rolled back to web:1", Duration::from_secs(60), || {
            done("web:1")
        })
        .await;
    } else {
        eprintln!("kubectl not found: rollout undo not tried");
    }
    cloud.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_the_only_deployment_collects_its_replicaset_and_pods() {
    use k8s_openapi::api::apps::v1::Deployment;
    let pki = Pki::new();
    let cloud = k8s_cloud(&pki, Ports::default()).await;
    let client = cloud.kube().await;
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), "default");
    let sets: Api<ReplicaSet> = Api::namespaced(client.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let only = unscheduled_deployment("a3", 1);
    deployments
        .create(&PostParams::default(), &only)
        .await
        .unwrap();
    let by = ListParams::default().labels("app=a3");
    eventually("a ReplicaSet and its pod", WAIT, || async {
        !sets.list(&by).await.unwrap().items.is_empty()
            && !pods.list(&by).await.unwrap().items.is_empty()
    })
    .await;
    // The last Deployment in the cluster: no object of the owner's kind is left to learn its
    // resource from.
    deployments
        .delete("a3", &DeleteParams::default())
        .await
        .unwrap();
    eventually("the ReplicaSet and the pod are collected", WAIT, || async {
        sets.list(&by).await.unwrap().items.is_empty()
            && pods.list(&by).await.unwrap().items.is_empty()
    })
    .await;
    cloud.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_deployment_cascades_in_the_background_foreground_or_orphans() {
    use k8s_openapi::api::apps::v1::Deployment;
    use kube::api::PropagationPolicy;
    let pki = Pki::new();
    let cloud = k8s_cloud(&pki, Ports::default()).await;
    let client = cloud.kube().await;
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), "default");
    let sets: Api<ReplicaSet> = Api::namespaced(client.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let make = |name: &str| unscheduled_deployment(name, 2);
    let count = |app: &'static str| {
        let (sets, pods) = (sets.clone(), pods.clone());
        async move {
            let by = ListParams::default().labels(&format!("app={app}"));
            let s = sets.list(&by).await.unwrap().items;
            let p = pods.list(&by).await.unwrap().items;
            (s, p)
        }
    };
    for name in ["bg", "orphaned", "fg"] {
        deployments
            .create(&PostParams::default(), &make(name))
            .await
            .unwrap();
    }
    for name in ["bg", "orphaned", "fg"] {
        eventually("a ReplicaSet and two pods", WAIT, || async {
            let (s, p) = count(name).await;
            s.len() == 1 && p.len() == 2
        })
        .await;
    }

    // Background (the default): the Deployment goes at once, its ReplicaSet and pods after.
    deployments
        .delete("bg", &DeleteParams::default())
        .await
        .unwrap();
    eventually(
        "background: ReplicaSet and pods collected",
        WAIT,
        || async {
            let (s, p) = count("bg").await;
            s.is_empty() && p.is_empty()
        },
    )
    .await;

    // Orphan: the ReplicaSet and pods stay, without the owner reference.
    deployments
        .delete(
            "orphaned",
            &DeleteParams {
                propagation_policy: Some(PropagationPolicy::Orphan),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    eventually(
        "orphan: the Deployment is gone, its ReplicaSet kept unowned",
        WAIT,
        || async {
            let (s, p) = count("orphaned").await;
            deployments.get_opt("orphaned").await.unwrap().is_none()
                && s.len() == 1
                && s[0]
                    .metadata
                    .owner_references
                    .as_ref()
                    .is_none_or(|o| o.is_empty())
                && p.len() == 2
        },
    )
    .await;

    // Foreground: the Deployment waits, marked, until its dependents are gone.
    deployments
        .delete(
            "fg",
            &DeleteParams {
                propagation_policy: Some(PropagationPolicy::Foreground),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let marked = deployments.get_opt("fg").await.unwrap();
    if let Some(d) = marked {
        assert!(d.metadata.deletion_timestamp.is_some());
    }
    eventually(
        "foreground: dependents first, then the Deployment",
        WAIT,
        || async {
            let (s, p) = count("fg").await;
            s.is_empty() && p.is_empty() && deployments.get_opt("fg").await.unwrap().is_none()
        },
    )
    .await;
    cloud.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_edge_node_is_tainted_and_keeps_its_pods() {
    use k8s_openapi::api::coordination::v1::Lease;
    let pki = Pki::new();
    let cloud = e2e::k8s_cloud_with(&pki, Ports::default(), |c| {
        c.modules.controllers.node_monitor_grace_period = Duration::from_secs(2);
    })
    .await;
    let client = cloud.kube().await;
    let nodes_api: Api<Node> = Api::all(client.clone());
    let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-node-lease");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let now = || k8s_openapi::jiff::Timestamp::now().to_string();
    let node: Node = serde_json::from_value(json!({
        "metadata": {"name": "site-7", "labels": {"node-role.kubernetes.io/edge": ""}},
        "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"},
                   "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                                   "lastHeartbeatTime": now()}]},
    }))
    .unwrap();
    nodes_api
        .create(&PostParams::default(), &node)
        .await
        .unwrap();
    let lease: Lease = serde_json::from_value(json!({
        "metadata": {"name": "site-7"},
        "spec": {"holderIdentity": "site-7", "leaseDurationSeconds": 40, "renewTime": now()},
    }))
    .unwrap();
    leases.create(&PostParams::default(), &lease).await.unwrap();
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "shop"},
        "spec": {"nodeName": "site-7", "containers": [{"name": "c", "image": "registry.local/shop:1"}]},
    }))
    .unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();

    // The site goes silent: Unknown and tainted; its pod stays where it is.
    let taints = |n: &Node| -> Vec<(String, String)> {
        let mut t: Vec<(String, String)> = n
            .spec
            .as_ref()
            .and_then(|s| s.taints.clone())
            .unwrap_or_default()
            .into_iter()
            .map(|t| (t.key, t.effect))
            .collect();
        t.sort();
        t
    };
    let ready = |n: &Node| {
        n.status
            .as_ref()
            .and_then(|s| s.conditions.clone())
            .unwrap_or_default()
            .into_iter()
            .find(|c| c.type_ == "Ready")
            .map(|c| c.status)
            .unwrap_or_default()
    };
    eventually(
        "the silent node is Unknown and tainted unreachable",
        WAIT,
        || async {
            let n = nodes_api.get("site-7").await.unwrap();
            ready(&n) == "Unknown"
                && taints(&n)
                    == [
                        (
                            "node.kubernetes.io/unreachable".to_string(),
                            "NoExecute".to_string(),
                        ),
                        (
                            "node.kubernetes.io/unreachable".to_string(),
                            "NoSchedule".to_string(),
                        ),
                    ]
        },
    )
    .await;
    let p = pods.get("shop").await.unwrap();
    assert!(p.metadata.deletion_timestamp.is_none(), "not evicted");
    assert_eq!(p.spec.unwrap().node_name.as_deref(), Some("site-7"));

    // The site is back: Ready, and the taints go.
    let lease_patch = json!({"spec": {"renewTime": now()}});
    leases
        .patch(
            "site-7",
            &PatchParams::default(),
            &Patch::Merge(&lease_patch),
        )
        .await
        .unwrap();
    let status = json!({"status": {"conditions": [{"type": "Ready", "status": "True",
        "reason": "KubeletReady", "lastHeartbeatTime": now()}]}});
    nodes_api
        .patch_status(
            "site-7",
            &PatchParams::default(),
            &Patch::Strategic(&status),
        )
        .await
        .unwrap();
    eventually("the node is untainted once Ready again", WAIT, || async {
        let n = nodes_api.get("site-7").await.unwrap();
        ready(&n) == "True" && taints(&n).is_empty()
    })
    .await;
    cloud.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_daemonset_runs_one_pod_per_edge_node_and_follows_the_nodes() {
    use k8s_openapi::api::apps::v1::DaemonSet;
    let pki = Pki::new();
    let cloud = k8s_cloud(&pki, Ports::default()).await;
    let client = cloud.kube().await;
    let nodes_api: Api<Node> = Api::all(client.clone());
    let node = |name: &str, edge: bool| -> Node {
        let labels = if edge {
            json!({"node-role.kubernetes.io/edge": ""})
        } else {
            json!({})
        };
        serde_json::from_value(json!({
            "metadata": {"name": name, "labels": labels},
            "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"},
                       "conditions": [{"type": "Ready", "status": "True"}]},
        }))
        .unwrap()
    };
    for (n, edge) in [("e1", true), ("e2", true), ("c1", false)] {
        nodes_api
            .create(&PostParams::default(), &node(n, edge))
            .await
            .unwrap();
    }
    let sets: Api<DaemonSet> = Api::namespaced(client.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let ds: DaemonSet = serde_json::from_value(json!({
        "metadata": {"name": "agent"},
        "spec": {"selector": {"matchLabels": {"app": "agent"}},
                 "template": {"metadata": {"labels": {"app": "agent"}},
                              "spec": {"nodeSelector": {"node-role.kubernetes.io/edge": ""},
                                       "containers": [{"name": "c", "image": "registry.local/agent:1"}]}}},
    }))
    .unwrap();
    sets.create(&PostParams::default(), &ds).await.unwrap();
    let placed = || {
        let pods = pods.clone();
        async move {
            let by = ListParams::default().labels("app=agent");
            let mut on: Vec<String> = pods
                .list(&by)
                .await
                .unwrap()
                .items
                .into_iter()
                .filter(|p| p.metadata.deletion_timestamp.is_none())
                .filter_map(|p| p.spec.and_then(|s| s.node_name))
                .collect();
            on.sort();
            on
        }
    };
    eventually("one pod on each edge node", WAIT, || async {
        placed().await == ["e1", "e2"]
    })
    .await;
    nodes_api
        .create(&PostParams::default(), &node("e3", true))
        .await
        .unwrap();
    eventually("a new edge node gets its pod", WAIT, || async {
        placed().await == ["e1", "e2", "e3"]
    })
    .await;
    let unlabel = json!({"metadata": {"labels": {"node-role.kubernetes.io/edge": null}}});
    nodes_api
        .patch("e1", &PatchParams::default(), &Patch::Merge(&unlabel))
        .await
        .unwrap();
    eventually("a node losing the label loses its pod", WAIT, || async {
        placed().await == ["e2", "e3"]
    })
    .await;
    eventually("the status counts the pods", WAIT, || async {
        let s = sets.get("agent").await.unwrap().status.unwrap_or_default();
        s.desired_number_scheduled == 2 && s.current_number_scheduled == 2
    })
    .await;
    cloud.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_with_three_completions_finishes_when_its_pods_succeed() {
    use k8s_openapi::api::batch::v1::Job;
    let pki = Pki::new();
    let cloud = k8s_cloud(&pki, Ports::default()).await;
    let client = cloud.kube().await;
    nodes(&client, &["j1"]).await;
    let jobs: Api<Job> = Api::namespaced(client.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let job: Job = serde_json::from_value(json!({
        "metadata": {"name": "batch"},
        "spec": {"completions": 3, "parallelism": 2,
                 "template": {"spec": {"restartPolicy": "Never",
                              "containers": [{"name": "c", "image": "registry.local/batch:1"}]}}},
    }))
    .unwrap();
    jobs.create(&PostParams::default(), &job).await.unwrap();
    let by = ListParams::default().labels("job-name=batch");
    // Plays the kubelet: every bound pod runs and succeeds; never more than 2 at once.
    eventually("the Job completes", WAIT, || async {
        let list = pods.list(&by).await.unwrap().items;
        let running = list
            .iter()
            .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) != Some("Succeeded"))
            .count();
        assert!(running <= 2, "parallelism 2: {running} running");
        for p in list {
            let bound = p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some();
            let done = p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Succeeded");
            if bound && !done {
                let status = json!({"status": {"phase": "Succeeded"}});
                let _ = pods
                    .patch_status(
                        p.metadata.name.as_deref().unwrap(),
                        &PatchParams::default(),
                        &Patch::Merge(&status),
                    )
                    .await;
            }
        }
        let s = jobs.get("batch").await.unwrap().status.unwrap_or_default();
        s.succeeded == Some(3)
            && s.conditions
                .unwrap_or_default()
                .iter()
                .any(|c| c.type_ == "Complete" && c.status == "True")
    })
    .await;
    let succeeded = pods.list(&by).await.unwrap().items.len();
    assert_eq!(succeeded, 3, "exactly three pods were made");
    cloud.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cronjob_creates_jobs_on_time_and_keeps_its_history_short() {
    use k8s_openapi::api::batch::v1::{CronJob, Job};
    let pki = Pki::new();
    let cloud = k8s_cloud(&pki, Ports::default()).await;
    let client = cloud.kube().await;
    nodes(&client, &["c1"]).await;
    let crons: Api<CronJob> = Api::namespaced(client.clone(), "default");
    let jobs: Api<Job> = Api::namespaced(client.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    // Every second (a leading seconds field, accepted as an extension): fast enough for a test.
    let cj: CronJob = serde_json::from_value(json!({
        "metadata": {"name": "tick"},
        "spec": {"schedule": "* * * * * *", "successfulJobsHistoryLimit": 2,
                 "jobTemplate": {"spec": {"template": {"spec": {"restartPolicy": "Never",
                     "containers": [{"name": "c", "image": "registry.local/tick:1"}]}}}}},
    }))
    .unwrap();
    crons.create(&PostParams::default(), &cj).await.unwrap();
    let names = std::sync::Arc::new(std::sync::Mutex::new(std::collections::BTreeSet::new()));
    eventually(
        "jobs come on schedule and finished ones are trimmed to two",
        WAIT,
        || {
            let (jobs, pods, seen) = (jobs.clone(), pods.clone(), names.clone());
            async move {
                // Plays the kubelet: the Jobs' bound pods succeed.
                for p in pods.list(&ListParams::default()).await.unwrap().items {
                    let bound = p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some();
                    if bound
                        && p.status.as_ref().and_then(|s| s.phase.as_deref()) != Some("Succeeded")
                    {
                        let status = json!({"status": {"phase": "Succeeded"}});
                        let _ = pods
                            .patch_status(
                                p.metadata.name.as_deref().unwrap(),
                                &PatchParams::default(),
                                &Patch::Merge(&status),
                            )
                            .await;
                    }
                }
                let list = jobs.list(&ListParams::default()).await.unwrap().items;
                for j in &list {
                    let owned = j
                        .metadata
                        .owner_references
                        .iter()
                        .flatten()
                        .any(|o| o.kind == "CronJob" && o.name == "tick");
                    assert!(owned, "{:?}", j.metadata.name);
                    seen.lock()
                        .unwrap()
                        .insert(j.metadata.name.clone().unwrap());
                }
                let complete = list
                    .iter()
                    .filter(|j| {
                        j.status
                            .as_ref()
                            .and_then(|s| s.conditions.as_ref())
                            .is_some_and(|cs| {
                                cs.iter()
                                    .any(|c| c.type_ == "Complete" && c.status == "True")
                            })
                    })
                    .count();
                let seen = seen.lock().unwrap().len();
                seen >= 4 && complete <= 2
            }
        },
    )
    .await;
    let status = crons.get("tick").await.unwrap().status.unwrap_or_default();
    assert!(status.last_schedule_time.is_some());
    cloud.stop().await;
}

/// The `Progressing` condition of Deployment `name`: status, reason, message.
async fn progressing(
    deployments: &Api<k8s_openapi::api::apps::v1::Deployment>,
    name: &str,
) -> Option<(String, String, String)> {
    let d = deployments.get(name).await.unwrap();
    let conditions = d.status.and_then(|s| s.conditions).unwrap_or_default();
    conditions
        .into_iter()
        .find(|c| c.type_ == "Progressing")
        .map(|c| {
            (
                c.status,
                c.reason.unwrap_or_default(),
                c.message.unwrap_or_default(),
            )
        })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deployment_past_its_progress_deadline_says_so_and_a_rollout_restart_rolls_out() {
    use k8s_openapi::api::apps::v1::Deployment;
    let pki = Pki::new();
    let cloud = k8s_cloud(&pki, Ports::default()).await;
    let client = cloud.kube().await;
    nodes(&client, &["g1"]).await;
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), "default");
    let sets: Api<ReplicaSet> = Api::namespaced(client.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let d: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "stuck"},
        "spec": {"replicas": 2, "progressDeadlineSeconds": 3,
                 "selector": {"matchLabels": {"app": "stuck"}},
                 "template": {"metadata": {"labels": {"app": "stuck"}},
                              "spec": {"containers": [{"name": "c", "image": "registry.local/stuck:1"}]}}},
    }))
    .unwrap();
    // Every Progressing reason the Deployment goes through, from a watch started first.
    let reasons = Arc::new(Mutex::new(Vec::<String>::new()));
    let listed = Arc::new(tokio::sync::Notify::new());
    let watch = tokio::spawn({
        let (api, reasons, listed) = (deployments.clone(), reasons.clone(), listed.clone());
        async move {
            let mut stream = kube::runtime::watcher(api, Default::default()).boxed();
            while let Some(event) = stream.next().await {
                let d = match event {
                    Ok(Event::InitDone) => {
                        listed.notify_one();
                        continue;
                    }
                    Ok(Event::Apply(d) | Event::InitApply(d)) => d,
                    _ => continue,
                };
                let conditions = d.status.and_then(|s| s.conditions).unwrap_or_default();
                let Some(c) = conditions.into_iter().find(|c| c.type_ == "Progressing") else {
                    continue;
                };
                let reason = c.reason.unwrap_or_default();
                let mut seen = reasons.lock().unwrap();
                if seen.last() != Some(&reason) {
                    seen.push(reason);
                }
            }
        }
    });
    listed.notified().await;
    deployments
        .create(&PostParams::default(), &d)
        .await
        .unwrap();

    // No kubelet makes the pods ready: past 3 seconds the rollout has failed.
    eventually("the deadline is exceeded", WAIT, || async {
        progressing(&deployments, "stuck")
            .await
            .is_some_and(|(s, r, m)| {
                s == "False"
                    && r == "ProgressDeadlineExceeded"
                    && m.ends_with("has timed out progressing.")
            })
    })
    .await;
    let seen = reasons.lock().unwrap().clone();
    assert_eq!(
        seen.first().map(String::as_str),
        Some("NewReplicaSetCreated"),
        "the new ReplicaSet starts the clock: {seen:?}"
    );
    let expected = [
        "NewReplicaSetCreated",
        "ReplicaSetUpdated",
        "ProgressDeadlineExceeded",
    ];
    assert!(
        seen.iter().all(|r| expected.contains(&r.as_str())),
        "{seen:?}"
    );
    let kubeconfig = cloud.running.kubeconfig().unwrap().to_path_buf();
    let kubectl = |args: &[&str]| {
        std::process::Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .args(args)
            .output()
            .unwrap()
    };
    let with_kubectl = e2e::recent_kubectl();
    if with_kubectl {
        let out = kubectl(&["rollout", "status", "deployment/stuck", "--timeout=20s"]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success());
        assert!(err.contains("exceeded its progress deadline"), "{err}");
    }

    // The pods become ready: the rollout completes after all.
    eventually("the new ReplicaSet is available", WAIT, || async {
        run_app(&pods, "stuck").await;
        progressing(&deployments, "stuck")
            .await
            .is_some_and(|(s, r, _)| s == "True" && r == "NewReplicaSetAvailable")
    })
    .await;

    // A restart is a template annotation: a new ReplicaSet takes over every pod.
    let first: Vec<String> = sets
        .list(&ListParams::default().labels("app=stuck"))
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|rs| rs.metadata.name.unwrap())
        .collect();
    assert_eq!(first.len(), 1);
    const RESTARTED: &str = "kubectl.kubernetes.io/restartedAt";
    if with_kubectl {
        let out = kubectl(&["rollout", "restart", "deployment/stuck"]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    } else {
        let patch = json!({"spec": {"template": {"metadata": {"annotations": {
            RESTARTED: "2026-01-01T00:00:00Z"}}}}});
        deployments
            .patch("stuck", &PatchParams::default(), &Patch::Strategic(&patch))
            .await
            .unwrap();
    }
    eventually("the restart rolls out", Duration::from_secs(60), || async {
        run_app(&pods, "stuck").await;
        let list = pods
            .list(&ListParams::default().labels("app=stuck"))
            .await
            .unwrap()
            .items;
        let live: Vec<&Pod> = list
            .iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .collect();
        let restarted = live.iter().all(|p| {
            p.metadata
                .annotations
                .as_ref()
                .is_some_and(|a| a.contains_key(RESTARTED))
        });
        let d = deployments.get("stuck").await.unwrap();
        let s = d.status.clone().unwrap_or_default();
        live.len() == 2
            && restarted
            && s.updated_replicas == Some(2)
            && s.available_replicas == Some(2)
            && d.metadata.annotations.unwrap_or_default()["deployment.kubernetes.io/revision"]
                == "2"
    })
    .await;
    eventually("the restart is complete", WAIT, || async {
        progressing(&deployments, "stuck")
            .await
            .is_some_and(|(s, r, _)| s == "True" && r == "NewReplicaSetAvailable")
    })
    .await;
    if with_kubectl {
        let out = kubectl(&["rollout", "status", "deployment/stuck", "--timeout=20s"]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    watch.abort();
    cloud.stop().await;
}

/// kube-controller-manager creates up to 500 pods in one sync, in slow-start batches of 1, 2,
/// 4, ... 256; the controller's client must not meet the API server's cap on connections being
/// set up from one address (64), or a batch fails half-way and the set stalls.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replicaset_of_six_hundred_creates_every_pod() {
    let pki = Pki::new();
    let cloud = k8s_cloud(&pki, Ports::default()).await;
    let client = cloud.kube().await;
    let sets: Api<ReplicaSet> = Api::namespaced(client.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let rs: ReplicaSet = serde_json::from_value(json!({
        "metadata": {"name": "many"},
        "spec": {"replicas": 600, "selector": {"matchLabels": {"app": "many"}},
                 "template": {"metadata": {"labels": {"app": "many"}},
                              "spec": {"containers": [{"name": "c", "image": "busybox"}]}}},
    }))
    .unwrap();
    let uid = sets
        .create(&PostParams::default(), &rs)
        .await
        .unwrap()
        .metadata
        .uid
        .unwrap();
    eventually("600 pods created", Duration::from_secs(90), || {
        let (pods, uid) = (pods.clone(), uid.clone());
        async move { owned(&pods, &uid).await.len() == 600 }
    })
    .await;
    cloud.stop().await;
}
