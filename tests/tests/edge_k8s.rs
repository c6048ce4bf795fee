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
    let dir = tempfile::tempdir().unwrap();
    let (cloud, edge) = e2e::linked_site(&pki, dir.path(), "edge-1").await;
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

fn kubectl(server: &str, args: &[&str]) -> std::process::Command {
    let mut cmd = std::process::Command::new("kubectl");
    cmd.args(["--server", server, "--request-timeout", "20s"])
        .args(args)
        .stdin(std::process::Stdio::null());
    cmd
}

/// Runs kubectl against `server`, expects success, returns stdout.
fn kubectl_ok(server: &str, args: &[&str]) -> String {
    let out = kubectl(server, args)
        .output()
        .expect("kubectl is installed");
    assert!(
        out.status.success(),
        "kubectl {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn code_of<T: std::fmt::Debug>(r: Result<T, kube::Error>) -> (u16, String) {
    match r {
        Err(kube::Error::Api(status)) => (status.code, status.reason),
        other => panic!("expected an API error, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_and_a_kube_watcher_read_the_edge_through_lwproxy() {
    use futures::StreamExt;
    use k8s_openapi::api::core::v1::Service;
    use kube::runtime::watcher;

    let site = site().await;
    let cloud = site.cloud.kube().await;
    let edge_pods: Api<Pod> = Api::namespaced(site.edge.lwproxy_client(), "default");
    let stream = watcher(edge_pods, watcher::Config::default());
    futures::pin_mut!(stream);
    let pods: Api<Pod> = Api::namespaced(cloud.clone(), "default");
    pods.create(&PostParams::default(), &e2e::plain_pod("web", "edge-1"))
        .await
        .unwrap();
    let added = tokio::time::timeout(WAIT, async {
        while let Some(event) = stream.next().await {
            if let Ok(watcher::Event::Apply(p) | watcher::Event::InitApply(p)) = event
                && p.metadata.name.as_deref() == Some("web")
            {
                return p;
            }
        }
        panic!("the watch ended")
    })
    .await
    .expect("the watcher on lwproxy saw the pod within 30s");
    assert_eq!(added.spec.unwrap().node_name.as_deref(), Some("edge-1"));

    let services: Api<Service> = Api::namespaced(cloud.clone(), "default");
    let svc: Service = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {"ports": [{"port": 80}], "selector": {"app": "web"}},
    }))
    .unwrap();
    services.create(&PostParams::default(), &svc).await.unwrap();
    eventually("the service reaches the edge", WAIT, || async {
        site.edge.held().await.contains_key("services/default/web")
    })
    .await;

    let server = site.edge.running.lwproxy().unwrap().url();
    let out = kubectl_ok(&server, &["get", "nodes", "-o", "name"]);
    assert_eq!(out.trim(), "node/edge-1");
    let out = kubectl_ok(&server, &["get", "services", "-o", "name"]);
    assert!(out.lines().any(|l| l == "service/web"), "{out}");
    let out = kubectl_ok(&server, &["get", "pods"]);
    assert!(out.contains("web"), "{out}");

    // `get pods -w` prints the pods there are, then each change as it reaches the edge.
    let child = kubectl(&server, &["get", "pods", "-w", "-o", "name"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut guard = testkit::ChildGuard(child);
    let stdout = guard.0.stdout.take().unwrap();
    let (lines_tx, mut lines) = tokio::sync::mpsc::unbounded_channel();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            let _ = lines_tx.send(line);
        }
    });
    let mut next_line = async || {
        tokio::time::timeout(WAIT, lines.recv())
            .await
            .expect("kubectl printed a line within 30s")
            .expect("kubectl kept running")
    };
    assert_eq!(next_line().await, "pod/web");
    pods.create(&PostParams::default(), &e2e::plain_pod("second", "edge-1"))
        .await
        .unwrap();
    assert_eq!(next_line().await, "pod/second");
    drop(guard);
    site.edge.stop().await;
    site.cloud.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_edge_serves_while_cut_off_and_statuses_written_offline_reach_the_cloud() {
    let Site {
        _pki: pki,
        _dir: dir,
        cloud,
        edge: edge1,
    } = site().await;
    let pods: Api<Pod> = Api::namespaced(cloud.kube().await, "default");
    pods.create(&PostParams::default(), &e2e::plain_pod("web", "edge-1"))
        .await
        .unwrap();
    eventually("the pod reaches the edge", WAIT, || async {
        edge1.held().await.contains_key("pods/default/web")
    })
    .await;

    // Online: a status patch through lwproxy is applied by the API, whose answer comes back.
    let at_edge: Api<Pod> = Api::namespaced(edge1.lwproxy_client(), "default");
    let running = json!({"status": {"phase": "Running"}});
    let answered = at_edge
        .patch_status("web", &PatchParams::default(), &Patch::Merge(&running))
        .await
        .unwrap();
    assert_eq!(answered.status.unwrap().phase.as_deref(), Some("Running"));
    let in_cloud = pods.get("web").await.unwrap();
    assert_eq!(in_cloud.status.unwrap().phase.as_deref(), Some("Running"));

    // Cut off: the cloud stops. Lists and watches are still served from the edge store.
    let ports = cloud.ports();
    cloud.stop().await;
    eventually("the edge notices the link is down", WAIT, || async {
        *edge1.running.hub().unwrap().state().borrow() == edgehub::LinkState::Disconnected
    })
    .await;
    let listed = at_edge.list(&Default::default()).await.unwrap();
    assert_eq!(listed.items.len(), 1);
    let refused = at_edge
        .create(&PostParams::default(), &e2e::plain_pod("new", "edge-1"))
        .await;
    assert_eq!(code_of(refused), (503, "ServiceUnavailable".to_string()));

    // A status written while offline is applied at the edge and queued.
    let failed = json!({"status": {"phase": "Failed", "message": "written offline"}});
    at_edge
        .patch_status("web", &PatchParams::default(), &Patch::Merge(&failed))
        .await
        .unwrap();

    // edgecore restarts, still cut off: it serves what it held, with the offline status.
    let config = edge1.config();
    edge1.stop().await;
    let edge2 = edge(config).await;
    let at_edge: Api<Pod> = Api::namespaced(edge2.lwproxy_client(), "default");
    let held = at_edge.get("web").await.unwrap();
    assert_eq!(held.status.unwrap().phase.as_deref(), Some("Failed"));
    let (watched, _) = {
        use futures::StreamExt;
        use kube::runtime::watcher;
        let stream = watcher(at_edge.clone(), watcher::Config::default());
        futures::pin_mut!(stream);
        let mut seen = Vec::new();
        while let Some(Ok(event)) = stream.next().await {
            match event {
                watcher::Event::InitApply(p) => seen.push(p.metadata.name.unwrap()),
                watcher::Event::InitDone => break,
                _ => {}
            }
        }
        (seen, ())
    };
    assert_eq!(watched, ["web"]);

    // The cloud comes back: the queued status reaches it.
    let cloud = k8s_cloud(&pki, ports).await;
    let pods: Api<Pod> = Api::namespaced(cloud.kube().await, "default");
    eventually("the offline status reaches the cloud", WAIT, || async {
        let pod = pods.get("web").await.unwrap();
        pod.status.and_then(|s| s.phase).as_deref() == Some("Failed")
    })
    .await;
    edge2.stop().await;
    cloud.stop().await;
    drop(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_cannot_update_the_status_of_another_nodes_pod() {
    let site = site().await;
    let pods: Api<Pod> = Api::namespaced(site.cloud.kube().await, "default");
    pods.create(&PostParams::default(), &e2e::plain_pod("theirs", "edge-2"))
        .await
        .unwrap();
    let at_edge: Api<Pod> = Api::namespaced(site.edge.lwproxy_client(), "default");
    let patch = json!({"status": {"phase": "Failed"}});
    let refused = at_edge
        .patch_status("theirs", &PatchParams::default(), &Patch::Merge(&patch))
        .await;
    assert_eq!(code_of(refused), (403, "Forbidden".to_string()));
    let pod = pods.get("theirs").await.unwrap();
    assert_ne!(
        pod.status.and_then(|s| s.phase).as_deref(),
        Some("Failed"),
        "the refused status was not applied"
    );
    // The refusal is counted on cloudcore's /metrics.
    let mut registry = prometheus_client::registry::Registry::default();
    let controller = site.cloud.running.controller().unwrap();
    controller.register_metrics(&mut registry);
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
    assert!(
        text.contains("edgecontroller_refused_writes_total 1"),
        "{text}"
    );
    assert!(text.contains("edgecontroller_ready 1"), "{text}");
    site.edge.stop().await;
    site.cloud.stop().await;
}

/// The names of a list answer's items.
fn item_names(body: &str) -> Vec<String> {
    let list: serde_json::Value =
        serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {body}"));
    let mut names: Vec<String> = list["items"]
        .as_array()
        .unwrap_or_else(|| panic!("not a list: {body}"))
        .iter()
        .map(|i| i["metadata"]["name"].as_str().unwrap().to_owned())
        .collect();
    names.sort();
    names
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_requests_of_a_kubelet_and_kube_proxy_are_answered_by_lwproxy() {
    use k8s_openapi::api::coordination::v1::Lease;
    use kube::api::DynamicObject;

    let site = site().await;
    let cloud = site.cloud.kube().await;
    let apply = async |plural: &str, group_version: &str, value: serde_json::Value| {
        let (group, version) = group_version.split_once('/').unwrap_or(("", group_version));
        let kind = value["kind"].as_str().unwrap().to_owned();
        let ar = kube::core::ApiResource {
            group: group.into(),
            version: version.into(),
            api_version: group_version.into(),
            kind,
            plural: plural.into(),
        };
        let api: Api<DynamicObject> = Api::namespaced_with(cloud.clone(), "default", &ar);
        let obj: DynamicObject = serde_json::from_value(value).unwrap();
        api.create(&PostParams::default(), &obj).await.unwrap();
    };
    apply(
        "configmaps",
        "v1",
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg"}}),
    )
    .await;
    apply(
        "pods",
        "v1",
        serde_json::to_value(pod_mounting("web", "edge-1", "cfg")).unwrap(),
    )
    .await;
    apply(
        "pods",
        "v1",
        serde_json::to_value(e2e::plain_pod("elsewhere", "edge-2")).unwrap(),
    )
    .await;
    apply(
        "services",
        "v1",
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"},
        "spec": {"clusterIP": "10.96.0.20", "ports": [{"port": 80}]}}),
    )
    .await;
    apply(
        "services",
        "v1",
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "headless"},
        "spec": {"clusterIP": "None", "ports": [{"port": 80}]}}),
    )
    .await;
    apply(
        "services",
        "v1",
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "other-proxy",
        "labels": {"service.kubernetes.io/service-proxy-name": "x"}},
        "spec": {"clusterIP": "10.96.0.21", "ports": [{"port": 80}]}}),
    )
    .await;
    apply("endpointslices", "discovery.k8s.io/v1", json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": "web-1", "labels": {"kubernetes.io/service-name": "web"}},
        "addressType": "IPv4", "endpoints": [{"addresses": ["10.0.0.5"]}], "ports": [{"port": 80}]})).await;
    eventually("the objects reach the edge", WAIT, || async {
        let held = site.edge.held().await;
        [
            "pods/default/web",
            "configmaps/default/cfg",
            "services/default/web",
            "services/default/headless",
            "services/default/other-proxy",
            "endpointslices.discovery.k8s.io/default/web-1",
        ]
        .iter()
        .all(|k| held.contains_key(*k))
    })
    .await;

    let addr = site.edge.running.lwproxy().unwrap().addr();
    let proxy_labels = "labelSelector=%21service.kubernetes.io%2Fheadless%2C%21service.kubernetes.io%2Fservice-proxy-name";
    let lists: Vec<(String, Vec<&str>)> = vec![
        // kubelet
        ("/api/v1/nodes?fieldSelector=metadata.name%3Dedge-1&limit=500&resourceVersion=0".into(), vec!["edge-1"]),
        ("/api/v1/pods?fieldSelector=spec.nodeName%3Dedge-1&limit=500&resourceVersion=0".into(), vec!["web"]),
        ("/api/v1/services?fieldSelector=spec.clusterIP%21%3DNone&limit=500&resourceVersion=0".into(), vec!["kubernetes", "other-proxy", "web"]),
        ("/api/v1/namespaces/default/configmaps?fieldSelector=metadata.name%3Dcfg&limit=500&resourceVersion=0".into(), vec!["cfg"]),
        ("/apis/storage.k8s.io/v1/csidrivers?limit=500&resourceVersion=0".into(), vec![]),
        ("/apis/node.k8s.io/v1/runtimeclasses?limit=500&resourceVersion=0".into(), vec![]),
        // kube-proxy
        (format!("/api/v1/services?fieldSelector=spec.clusterIP%21%3DNone&{proxy_labels}&limit=500&resourceVersion=0"), vec!["kubernetes", "web"]),
        (format!("/apis/discovery.k8s.io/v1/endpointslices?{proxy_labels}&limit=500&resourceVersion=0"), vec!["kubernetes", "web-1"]),
    ];
    for (path, expected) in &lists {
        let (code, body) = testkit::http_get(addr, path).await.unwrap();
        assert_eq!(code, 200, "{path}: {body}");
        assert_eq!(item_names(&body), *expected, "{path}");
    }
    let (code, _) = testkit::http_get(
        addr,
        "/apis/storage.k8s.io/v1/csinodes/edge-1?resourceVersion=0",
    )
    .await
    .unwrap();
    assert_eq!(code, 404, "no CSINode yet");

    // The node's Lease: created through lwproxy (forwarded), then renewed; it comes back down.
    let leases: Api<Lease> = Api::namespaced(site.edge.lwproxy_client(), "kube-node-lease");
    let lease: Lease = serde_json::from_value(json!({"metadata": {"name": "edge-1"},
        "spec": {"holderIdentity": "edge-1", "leaseDurationSeconds": 40}}))
    .unwrap();
    leases.create(&PostParams::default(), &lease).await.unwrap();
    eventually("the lease reaches the edge", WAIT, || async {
        held_rv(
            &site.edge,
            "leases.coordination.k8s.io/kube-node-lease/edge-1",
        )
        .await
        .is_some()
    })
    .await;
    let mut held = leases.get("edge-1").await.unwrap();
    held.spec.as_mut().unwrap().lease_duration_seconds = Some(41);
    leases
        .replace("edge-1", &PostParams::default(), &held)
        .await
        .unwrap();
    let in_cloud: Api<Lease> = Api::namespaced(cloud.clone(), "kube-node-lease");
    assert_eq!(
        in_cloud
            .get("edge-1")
            .await
            .unwrap()
            .spec
            .unwrap()
            .lease_duration_seconds,
        Some(41)
    );

    // The pod watch a kubelet keeps, resumed from the list's resourceVersion, sees what follows.
    let (_, body) = testkit::http_get(
        addr,
        "/api/v1/pods?fieldSelector=spec.nodeName%3Dedge-1&limit=500&resourceVersion=0",
    )
    .await
    .unwrap();
    let rv: serde_json::Value = serde_json::from_str(&body).unwrap();
    let rv = rv["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_owned();
    let pods: Api<Pod> = Api::namespaced(cloud.clone(), "default");
    pods.create(&PostParams::default(), &e2e::plain_pod("second", "edge-1"))
        .await
        .unwrap();
    let watch = format!(
        "/api/v1/pods?allowWatchBookmarks=true&fieldSelector=spec.nodeName%3Dedge-1&resourceVersion={rv}&timeoutSeconds=2&watch=true"
    );
    let (code, body) = testkit::http_get(addr, &watch).await.unwrap();
    assert_eq!(code, 200, "{body}");
    assert!(
        body.contains("\"ADDED\"") && body.contains("\"second\""),
        "{body}"
    );
    assert!(
        !body.contains("\"web\""),
        "nothing from before the resourceVersion: {body}"
    );
    assert!(!body.contains("elsewhere"), "{body}");
    site.edge.stop().await;
    site.cloud.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_graceful_delete_is_finished_by_the_node_as_a_kubelet_does() {
    use kube::api::Preconditions;

    let site = site().await;
    let cloud = site.cloud.kube().await;
    let pods: Api<Pod> = Api::namespaced(cloud.clone(), "default");
    let created = pods
        .create(&PostParams::default(), &e2e::plain_pod("web", "edge-1"))
        .await
        .unwrap();
    let uid = created.metadata.uid.unwrap();
    let at_edge: Api<Pod> = Api::namespaced(site.edge.lwproxy_client(), "default");
    eventually("the pod reaches the edge", WAIT, || async {
        at_edge.get_opt("web").await.unwrap().is_some()
    })
    .await;

    // The node reports its own status (strategic merge patch, as a kubelet sends it).
    let nodes: Api<Node> = Api::all(site.edge.lwproxy_client());
    let ready = json!({"status": {"conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}]}});
    nodes
        .patch_status("edge-1", &PatchParams::default(), &Patch::Strategic(&ready))
        .await
        .unwrap();
    let in_cloud: Api<Node> = Api::all(cloud.clone());
    let conditions = in_cloud
        .get("edge-1")
        .await
        .unwrap()
        .status
        .unwrap()
        .conditions
        .unwrap();
    assert!(
        conditions
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True")
    );

    // An admin deletes the bound pod: it is only marked, and the mark reaches the edge.
    pods.delete("web", &DeleteParams::default()).await.unwrap();
    eventually("the deletion mark reaches the edge", WAIT, || async {
        let pod = at_edge.get("web").await.unwrap();
        pod.metadata.deletion_timestamp.is_some()
    })
    .await;
    // The node, its containers stopped, deletes it for good (grace 0, uid precondition).
    let finish = DeleteParams {
        grace_period_seconds: Some(0),
        preconditions: Some(Preconditions {
            uid: Some(uid),
            resource_version: None,
        }),
        ..Default::default()
    };
    at_edge.delete("web", &finish).await.unwrap();
    eventually(
        "the pod is gone in the cloud and at the edge",
        WAIT,
        || async {
            pods.get_opt("web").await.unwrap().is_none()
                && at_edge.get_opt("web").await.unwrap().is_none()
        },
    )
    .await;
    site.edge.stop().await;
    site.cloud.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscribed_custom_resource_and_its_crd_reach_the_edge_where_lwproxy_serves_it() {
    use kube::api::DynamicObject;
    use kube::core::ApiResource;

    let pki = Pki::new();
    let cloud = e2e::k8s_cloud_with(&pki, Ports::default(), |c| {
        c.modules.edge_controller.custom_resources =
            vec!["devices.kubeedge.io/v1beta1/devices/Device".into()];
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let transport = link::Transport::WebSocket;
    let edge = edge(edge_config(
        &pki.node("edge-1"),
        cloud.addr(transport),
        transport,
        &dir.path().join("edge.db"),
    ))
    .await;
    let client = cloud.kube().await;
    let crd_resource = ApiResource {
        group: "apiextensions.k8s.io".into(),
        version: "v1".into(),
        api_version: "apiextensions.k8s.io/v1".into(),
        kind: "CustomResourceDefinition".into(),
        plural: "customresourcedefinitions".into(),
    };
    let crd: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "devices.devices.kubeedge.io"},
        "spec": {
            "group": "devices.kubeedge.io", "scope": "Namespaced",
            "names": {"plural": "devices", "singular": "device", "kind": "Device", "listKind": "DeviceList"},
            "versions": [{"name": "v1beta1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}],
        },
    }))
    .unwrap();
    Api::<DynamicObject>::all_with(client.clone(), &crd_resource)
        .create(&PostParams::default(), &crd)
        .await
        .unwrap();
    let device_resource = ApiResource {
        group: "devices.kubeedge.io".into(),
        version: "v1beta1".into(),
        api_version: "devices.kubeedge.io/v1beta1".into(),
        kind: "Device".into(),
        plural: "devices".into(),
    };
    let devices =
        Api::<DynamicObject>::namespaced_with(client.clone(), "default", &device_resource);
    let device: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "devices.kubeedge.io/v1beta1", "kind": "Device",
        "metadata": {"name": "thermometer"}, "spec": {"protocol": "modbus"},
    }))
    .unwrap();
    // The CRD may take a moment to be served after its creation.
    eventually("the device is created", WAIT, || async {
        devices
            .create(&PostParams::default(), &device)
            .await
            .is_ok()
    })
    .await;
    let at_edge =
        Api::<DynamicObject>::namespaced_with(edge.lwproxy_client(), "default", &device_resource);
    eventually("lwproxy serves the device", WAIT, || async {
        at_edge
            .get("thermometer")
            .await
            .is_ok_and(|d| d.data["spec"]["protocol"] == "modbus")
    })
    .await;
    assert!(edge.held().await.contains_key(
        "customresourcedefinitions.apiextensions.k8s.io//devices.devices.kubeedge.io"
    ));
    edge.stop().await;
    cloud.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_cloud_restart_the_digests_agree_and_nothing_is_sent_again() {
    let Site {
        _pki: pki,
        _dir: dir,
        cloud,
        edge,
    } = site().await;
    let client = cloud.kube().await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    cms.create(&PostParams::default(), &configmap("cfg", "1"))
        .await
        .unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    for name in ["a", "b", "c"] {
        pods.create(&PostParams::default(), &pod_mounting(name, "edge-1", "cfg"))
            .await
            .unwrap();
    }
    eventually(
        "the edge holds its node, pods and configmap",
        WAIT,
        || async {
            let held = edge.held().await;
            held.keys().filter(|k| k.starts_with("pods/")).count() == 3
                && held.contains_key("configmaps/default/cfg")
                && held.contains_key("nodes//edge-1")
        },
    )
    .await;
    let before = edge.held().await;
    let ports = cloud.ports();
    cloud.stop().await;
    let connects = edge
        .running
        .hub()
        .unwrap()
        .stats()
        .connects
        .load(std::sync::atomic::Ordering::Relaxed);
    let cloud = k8s_cloud(&pki, ports).await;
    eventually("the edge is back", WAIT, || async {
        let stats = edge.running.hub().unwrap().stats();
        stats.connects.load(std::sync::atomic::Ordering::Relaxed) > connects
            && cloud.hub().node("edge-1").is_some_and(|c| c.connected)
    })
    .await;
    // edgecontroller's digest of what the node should hold equals the edge store's: the hello
    // matched, no inventory was asked for and nothing was sent.
    let counters = cloud.hub().node("edge-1").unwrap();
    assert_eq!((counters.sent, counters.resyncs), (0, 0), "{counters:?}");
    let inventories = edge
        .running
        .hub()
        .unwrap()
        .stats()
        .inventories
        .load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(inventories, 0);
    assert_eq!(edge.held().await, before);
    edge.stop().await;
    cloud.stop().await;
    drop(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_gets_service_account_tokens_for_its_own_pods_through_lwproxy() {
    use k8s_openapi::api::core::v1::ServiceAccount;

    let site = site().await;
    let cloud = site.cloud.kube().await;
    let pp = PostParams::default();
    let account = serde_json::from_value(json!({"metadata": {"name": "builder"}})).unwrap();
    Api::<ServiceAccount>::namespaced(cloud.clone(), "default")
        .create(&pp, &account)
        .await
        .unwrap();
    let pods: Api<Pod> = Api::namespaced(cloud.clone(), "default");
    let as_builder = |mut pod: Pod| {
        pod.spec.as_mut().unwrap().service_account_name = Some("builder".into());
        pod
    };
    let (mine, theirs) = (
        as_builder(e2e::plain_pod("web", "edge-1")),
        as_builder(e2e::plain_pod("other", "edge-2")),
    );
    let mine = pods.create(&pp, &mine).await.unwrap();
    let theirs = pods.create(&pp, &theirs).await.unwrap();
    let edge = site.edge.lwproxy_client();
    let at_edge: Api<Pod> = Api::namespaced(edge.clone(), "default");
    eventually("the pod reaches the edge", WAIT, || async {
        at_edge.get_opt("web").await.unwrap().is_some()
    })
    .await;
    let request = |pod: &Pod| {
        json!({
            "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
            "spec": {"audiences": [], "expirationSeconds": 3607, "boundObjectRef": {
                "kind": "Pod", "apiVersion": "v1", "name": pod.metadata.name, "uid": pod.metadata.uid,
            }},
        })
    };

    // As a kubelet asks for a projected token: POST .../serviceaccounts/builder/token.
    let post = http::Request::post("/api/v1/namespaces/default/serviceaccounts/builder/token")
        .header("content-type", "application/json")
        .body(kube::client::Body::from(
            request(&mine).to_string().into_bytes(),
        ))
        .unwrap();
    let response = edge.send(post).await.unwrap();
    let code = response.status().as_u16();
    let body = response.into_body().collect_bytes().await.unwrap();
    let issued: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(code, 201, "{issued}");
    assert_eq!(issued["kind"], "TokenRequest");
    assert_eq!(issued["spec"]["expirationSeconds"], 3607);
    let token = issued["status"]["token"].as_str().expect("a token");
    assert!(
        issued["status"]["expirationTimestamp"].is_string(),
        "{issued}"
    );

    // The cloud API takes the token as the account, which reads what RBAC grants it (`view`
    // in default).
    let view: k8s_openapi::api::rbac::v1::RoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "builder-views"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"},
        "subjects": [{"kind": "ServiceAccount", "name": "builder", "namespace": "default"}],
    }))
    .unwrap();
    Api::namespaced(cloud.clone(), "default")
        .create(&PostParams::default(), &view)
        .await
        .unwrap();
    let path = site.cloud.running.kubeconfig().unwrap();
    let kubeconfig = kube::config::Kubeconfig::read_from(path).unwrap();
    let mut config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .unwrap();
    config.auth_info.token = Some(token.to_owned().into());
    let as_account: Api<Pod> = Api::namespaced(kube::Client::try_from(config).unwrap(), "default");
    let listed = as_account.list(&Default::default()).await.unwrap();
    assert!(
        listed
            .items
            .iter()
            .any(|p| p.metadata.name.as_deref() == Some("web"))
    );

    // A token bound to another node's pod is refused (kube's TokenRequest call, this time).
    let accounts: Api<ServiceAccount> = Api::namespaced(edge, "default");
    let elsewhere = serde_json::from_value(request(&theirs)).unwrap();
    let refused = accounts
        .create_token_request("builder", &pp, &elsewhere)
        .await;
    assert_eq!(code_of(refused), (403, "Forbidden".to_string()));
    site.edge.stop().await;
    site.cloud.stop().await;
}

/// A mirror pod (a static pod's copy) bound to `edge-1` in `namespace`, with `spec` merged in.
fn mirror_pod(name: &str, namespace: &str, spec: serde_json::Value) -> Pod {
    let mut pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace,
                     "annotations": {"kubernetes.io/config.mirror": "static"}},
        "spec": {"nodeName": "edge-1", "containers": [{"name": "c", "image": "busybox"}]},
    });
    for (k, v) in spec.as_object().unwrap() {
        pod["spec"][k] = v.clone();
    }
    serde_json::from_value(pod).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mirror_pod_cannot_carry_a_secret_of_another_namespace_to_the_edge() {
    let site = site().await;
    let admin = site.cloud.kube().await;
    eventually("the edge holds its Node", WAIT, || async {
        held_rv(&site.edge, "nodes//edge-1").await.is_some()
    })
    .await;
    let vault: Secret =
        serde_json::from_value(json!({"metadata": {"name": "vault"}, "stringData": {"k": "v"}}))
            .unwrap();
    Api::<Secret>::namespaced(admin.clone(), "kube-system")
        .create(&PostParams::default(), &vault)
        .await
        .unwrap();

    // The attack: through lwproxy, a mirror pod bound to the node that mounts the secret.
    let at_edge: Api<Pod> = Api::namespaced(site.edge.lwproxy_client(), "kube-system");
    let stealing = mirror_pod(
        "steal",
        "kube-system",
        json!({"volumes": [{"name": "s", "secret": {"secretName": "vault"}}]}),
    );
    let refused = at_edge.create(&PostParams::default(), &stealing).await;
    let Err(kube::Error::Api(status)) = refused else {
        panic!("the mirror pod was not refused: {refused:?}");
    };
    assert_eq!((status.code, status.reason.as_str()), (403, "Forbidden"));
    assert_eq!(
        status.message,
        "pods \"steal\" is forbidden: node \"edge-1\" can not create pods that reference secrets"
    );
    let cloud_pods: Api<Pod> = Api::namespaced(admin, "kube-system");
    assert!(cloud_pods.get_opt("steal").await.unwrap().is_none());

    // A mirror pod that references nothing is still accepted, and reaches the edge; the
    // secret never did.
    let plain = mirror_pod("static-web", "kube-system", json!({}));
    at_edge
        .create(&PostParams::default(), &plain)
        .await
        .unwrap();
    eventually("the plain mirror pod is at the edge", WAIT, || async {
        held_rv(&site.edge, "pods/kube-system/static-web")
            .await
            .is_some()
    })
    .await;
    let held = site.edge.held().await;
    assert!(
        !held.contains_key("secrets/kube-system/vault"),
        "the secret reached the edge: {held:?}"
    );
    site.edge.stop().await;
    site.cloud.stop().await;
}
