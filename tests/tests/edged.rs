//! edged on a real containerd: a real cloudcore (embedded control plane), a real edgecore with
//! edged, and a private containerd with CNI per test (testkit's harness). Needs root,
//! containerd, runc, the CNI plugins and busybox-static, as CI installs them.

use std::path::{Path, PathBuf};
use std::time::Duration;

use e2e::{Cloud, Edge, Pki, Ports, edge, edge_config, k8s_cloud};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::{Value, json};
use testkit::containerd::{BUSYBOX_IMAGE, Containerd};
use testkit::eventually;

const WAIT: Duration = Duration::from_secs(60);

struct Site {
    containerd: Containerd,
    cloud: Cloud,
    edge: Edge,
    dir: tempfile::TempDir,
}

fn edged_config(
    pki: &Pki,
    cloud: &Cloud,
    node: &str,
    dir: &Path,
    cri: &Containerd,
) -> edgecore::Config {
    let transport = link::Transport::WebSocket;
    let mut config = edge_config(
        &pki.node(node),
        cloud.addr(transport),
        transport,
        &dir.join("edge.db"),
    );
    let edged = &mut config.modules.edged;
    edged.enable = true;
    edged.remote_runtime_endpoint = cri.endpoint();
    edged.root_directory = dir.join("kubelet");
    edged.pod_logs_directory = dir.join("pod-logs");
    edged.relist_period = Duration::from_millis(300);
    edged.node_status_update_frequency = Duration::from_secs(1);
    config
}

async fn site(node: &str) -> (Pki, Site) {
    if let Err(why) = Containerd::available() {
        panic!("edged tests need a private containerd: {why}");
    }
    let containerd = Containerd::start().await.expect("containerd starts");
    let pki = Pki::new();
    let dir = tempfile::tempdir().unwrap();
    let cloud = k8s_cloud(&pki, Ports::default()).await;
    let edge = edge(edged_config(&pki, &cloud, node, dir.path(), &containerd)).await;
    (
        pki,
        Site {
            containerd,
            cloud,
            edge,
            dir,
        },
    )
}

fn pod(name: &str, node: &str, spec: Value) -> Pod {
    let mut spec = spec;
    spec["nodeName"] = json!(node);
    spec["terminationGracePeriodSeconds"] = json!(5);
    serde_json::from_value(
        json!({"metadata": {"name": name, "namespace": "default"}, "spec": spec}),
    )
    .unwrap()
}

fn busybox(name: &str, script: &str) -> Value {
    json!({"name": name, "image": BUSYBOX_IMAGE, "command": ["sh", "-c", script]})
}

async fn status(api: &Api<Pod>, name: &str) -> Value {
    match api.get_opt(name).await {
        Ok(Some(p)) => serde_json::to_value(p.status).unwrap_or_default(),
        _ => Value::Null,
    }
}

fn log_files(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            if e.path().is_dir() {
                stack.push(e.path());
            } else {
                out.push(e.path());
            }
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_runs_is_reachable_reports_running_and_is_removed_on_delete() {
    let (_pki, s) = site("edge-run").await;
    let pods: Api<Pod> = Api::namespaced(s.cloud.kube().await, "default");
    let web = busybox(
        "web",
        "echo hello-from-edged; echo ok > /tmp/index.html; exec httpd -f -p 8080 -h /tmp",
    );
    let mut p = pod("web", "edge-run", json!({"containers": [web]}));
    p.spec.as_mut().unwrap().containers[0].env = serde_json::from_value(json!([
        {"name": "MY_POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}
    ]))
    .unwrap();
    pods.create(&PostParams::default(), &p).await.unwrap();

    // Running in the cloud's view, with a pod IP from the harness's subnet.
    eventually("the pod is Running in the cloud", WAIT, || async {
        let st = status(&pods, "web").await;
        st["phase"] == "Running"
            && st["podIP"].is_string()
            && st["containerStatuses"][0]["ready"] == true
    })
    .await;
    let st = status(&pods, "web").await;
    let ip: std::net::Ipv4Addr = st["podIP"].as_str().unwrap().parse().unwrap();
    let (net, prefix) = s.containerd.subnet();
    let mask = u32::MAX << (32 - prefix);
    assert_eq!(
        u32::from(ip) & mask,
        u32::from(net),
        "{ip} in {net}/{prefix}"
    );
    let ready = st["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Ready")
        .unwrap()
        .clone();
    assert_eq!(ready["status"], "True");
    assert!(
        st["containerStatuses"][0]["containerID"]
            .as_str()
            .unwrap()
            .starts_with("containerd://")
    );

    // Its container really runs: its log is in the kubelet's layout, and the host reaches it.
    let logs = s.dir.path().join("pod-logs");
    eventually("the container's log holds its output", WAIT, || async {
        log_files(&logs).iter().any(|f| {
            let name = f.to_string_lossy();
            name.contains("default_web_")
                && name.ends_with("web/0.log")
                && std::fs::read_to_string(f)
                    .unwrap_or_default()
                    .contains("hello-from-edged")
        })
    })
    .await;
    let addr = std::net::SocketAddr::from((ip, 8080));
    eventually("the host reaches the pod's IP", WAIT, || async {
        testkit::http_get(addr, "/index.html")
            .await
            .is_ok_and(|(code, body)| code == 200 && body.contains("ok"))
    })
    .await;

    // The node reports itself Ready and renews its Lease.
    let nodes: Api<Node> = Api::all(s.cloud.kube().await);
    eventually("the node is Ready with edged's version", WAIT, || async {
        let Ok(Some(n)) = nodes.get_opt("edge-run").await else {
            return false;
        };
        let st = serde_json::to_value(n.status).unwrap_or_default();
        st["nodeInfo"]["kubeletVersion"] == edged::KUBELET_VERSION
            && st["conditions"].as_array().is_some_and(|cs| {
                cs.iter()
                    .any(|c| c["type"] == "Ready" && c["status"] == "True")
            })
    })
    .await;
    let leases: Api<Lease> = Api::namespaced(s.cloud.kube().await, "kube-node-lease");
    eventually("the node's Lease is renewed", WAIT, || async {
        leases
            .get_opt("edge-run")
            .await
            .ok()
            .flatten()
            .is_some_and(|l| l.spec.and_then(|s| s.renew_time).is_some())
    })
    .await;

    // Deleted in the cloud: stopped, the final delete goes up, and the runtime holds nothing.
    let uid = pods.get("web").await.unwrap().metadata.uid.unwrap();
    pods.delete("web", &DeleteParams::default()).await.unwrap();
    eventually("the pod is gone from the cloud", WAIT, || async {
        pods.get_opt("web").await.is_ok_and(|p| p.is_none())
    })
    .await;
    let cri = s.containerd.connect().await.unwrap();
    eventually("its sandbox and containers are removed", WAIT, || async {
        let boxes = cri.list_pod_sandboxes(None).await.unwrap();
        let containers = cri.list_containers(None).await.unwrap();
        !boxes
            .iter()
            .any(|b| b.metadata.as_ref().is_some_and(|m| m.uid == uid))
            && containers.is_empty()
    })
    .await;
    s.edge.stop().await;
    s.cloud.stop().await;
    s.containerd.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn init_containers_restart_policies_and_bad_input_behave_as_kubernetes_documents() {
    let (_pki, s) = site("edge-life").await;
    let pods: Api<Pod> = Api::namespaced(s.cloud.kube().await, "default");
    let node = "edge-life";
    let sleep = "trap 'exit 0' TERM; while true; do sleep 1 & wait; done";
    let create = |p: Pod| {
        let pods = pods.clone();
        async move { pods.create(&PostParams::default(), &p).await.unwrap() }
    };
    // Init containers run first, in order: the app sees what they wrote.
    let work = |mut c: Value| {
        c["volumeMounts"] = json!([{"name": "work", "mountPath": "/work"}]);
        c
    };
    create(pod("init", node, json!({
        "initContainers": [work(busybox("one", "echo one > /work/order")), work(busybox("two", "echo two >> /work/order"))],
        "containers": [work(busybox("app", &format!("cat /work/order; {sleep}")))],
        "volumes": [{"name": "work", "emptyDir": {}}],
    }))).await;
    // Exit 1 under Always: restarted with back-off.
    create(pod(
        "crash",
        node,
        json!({"containers": [busybox("c", "exit 1")]}),
    ))
    .await;
    // Never: Failed; OnFailure with exit 0: Succeeded.
    create(pod(
        "never",
        node,
        json!({"restartPolicy": "Never", "containers": [busybox("c", "exit 3")]}),
    ))
    .await;
    create(pod(
        "once",
        node,
        json!({"restartPolicy": "OnFailure", "containers": [busybox("c", "exit 0")]}),
    ))
    .await;
    // Bad input: an image that is not there, a configmap that does not exist.
    create(pod(
        "noimage",
        node,
        json!({"containers": [{"name": "c", "image": "registry.local/missing:1"}]}),
    ))
    .await;
    create(pod(
        "novolume",
        node,
        json!({
            "containers": [busybox("c", sleep)],
            "volumes": [{"name": "cfg", "configMap": {"name": "absent"}}],
        }),
    ))
    .await;

    eventually(
        "init containers ran in order before the app",
        WAIT,
        || async {
            let st = status(&pods, "init").await;
            st["phase"] == "Running"
                && st["initContainerStatuses"].as_array().is_some_and(|a| {
                    a.len() == 2 && a.iter().all(|c| c["state"]["terminated"]["exitCode"] == 0)
                })
        },
    )
    .await;
    eventually(
        "a crashing container restarts and backs off",
        WAIT,
        || async {
            let st = status(&pods, "crash").await;
            let c = &st["containerStatuses"][0];
            c["restartCount"].as_u64().unwrap_or(0) >= 1
                && c["lastState"]["terminated"]["exitCode"] == 1
                && c["state"]["waiting"]["reason"] == "CrashLoopBackOff"
        },
    )
    .await;
    eventually(
        "restartPolicy Never: Failed with the exit code",
        WAIT,
        || async {
            let st = status(&pods, "never").await;
            st["phase"] == "Failed"
                && st["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 3
        },
    )
    .await;
    eventually("OnFailure, exit 0: Succeeded", WAIT, || async {
        status(&pods, "once").await["phase"] == "Succeeded"
    })
    .await;
    eventually(
        "a missing image: ErrImagePull or ImagePullBackOff",
        WAIT,
        || async {
            let st = status(&pods, "noimage").await;
            let reason = &st["containerStatuses"][0]["state"]["waiting"]["reason"];
            st["phase"] == "Pending" && (reason == "ErrImagePull" || reason == "ImagePullBackOff")
        },
    )
    .await;
    eventually(
        "a missing configmap volume: a waiting reason naming it",
        WAIT,
        || async {
            let st = status(&pods, "novolume").await;
            let waiting = &st["containerStatuses"][0]["state"]["waiting"];
            waiting["message"]
                .as_str()
                .is_some_and(|m| m.contains("configmap \"absent\" not found"))
        },
    )
    .await;
    // Neither affected the others.
    assert_eq!(status(&pods, "init").await["phase"], "Running");
    s.edge.stop().await;
    s.cloud.stop().await;
    s.containerd.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_containerd_restart_recreates_nothing_and_a_dead_sandbox_is_replaced_counting_the_restart()
 {
    let (_pki, mut s) = site("edge-keep").await;
    let pods: Api<Pod> = Api::namespaced(s.cloud.kube().await, "default");
    let sleep = "trap 'exit 0' TERM; while true; do sleep 1 & wait; done";
    let p = pod(
        "keep",
        "edge-keep",
        json!({"containers": [busybox("c", sleep)]}),
    );
    pods.create(&PostParams::default(), &p).await.unwrap();
    let running =
        |st: &Value| st["phase"] == "Running" && st["containerStatuses"][0]["ready"] == true;
    eventually("the pod runs", WAIT, || async {
        running(&status(&pods, "keep").await)
    })
    .await;
    let first = status(&pods, "keep").await["containerStatuses"][0].clone();

    // containerd killed and started again: the container kept running, nothing is re-created.
    s.containerd.restart().await.unwrap();
    let cri = s.containerd.connect().await.unwrap();
    eventually(
        "the runtime lists the container running again",
        WAIT,
        || async {
            let listed = cri.list_containers(None).await.unwrap_or_default();
            listed.len() == 1
                && listed[0].state == cri::api::ContainerState::ContainerRunning as i32
        },
    )
    .await;
    let after = status(&pods, "keep").await["containerStatuses"][0].clone();
    assert_eq!(after["containerID"], first["containerID"]);
    assert_eq!(after["restartCount"], 0);

    // The sandbox dies under the pod (as in a reboot): a new sandbox, the restart counted. An
    // exact count of 1 also shows the containerd restart re-created nothing, however late.
    let sandboxes = cri.list_pod_sandboxes(None).await.unwrap();
    assert_eq!(sandboxes.len(), 1);
    cri.stop_pod_sandbox(&sandboxes[0].id).await.unwrap();
    eventually(
        "the pod runs again in a new sandbox, its restart counted",
        WAIT,
        || async {
            let st = status(&pods, "keep").await;
            let c = &st["containerStatuses"][0];
            running(&st) && c["restartCount"] == 1 && c["containerID"] != first["containerID"]
        },
    )
    .await;
    let boxes = cri.list_pod_sandboxes(None).await.unwrap();
    let attempts: Vec<u32> = boxes
        .iter()
        .filter_map(|b| b.metadata.as_ref())
        .map(|m| m.attempt)
        .collect();
    assert!(attempts.contains(&1), "a new sandbox attempt: {attempts:?}");
    s.edge.stop().await;
    s.cloud.stop().await;
    s.containerd.stop().await;
}
