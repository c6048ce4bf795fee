//! edged's autonomy on a real containerd: pods keep running while the cloud is away, across a
//! restart of edgecore and of containerd, and the cloud finds them as they were when it is
//! back; a configMap edited in the cloud reaches the files of a running container. A real
//! cloudcore (embedded control plane), a real edgecore with edged, and a private containerd
//! with CNI per test (testkit's harness). Needs root, containerd, runc, the CNI plugins and
//! busybox-static, as CI installs them.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;

use e2e::Edge;
use e2e::edged_site::{Site, busybox, pod, site, status};
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use testkit::containerd::WAIT_FOR_TERM;
use testkit::eventually;

const WAIT: Duration = Duration::from_secs(60);
/// The label edged puts on a pod's sandboxes and containers (the kubelet's).
const POD_UID: &str = "io.kubernetes.pod.uid";

/// What the runtime holds for one pod: `(id, ready)` of its sandboxes and `(id, running)` of
/// its containers, sorted.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Held {
    sandboxes: Vec<(String, bool)>,
    containers: Vec<(String, bool)>,
}

/// What the runtime holds for pod `uid`; `None` while the runtime does not answer.
async fn held(cri: &cri::Cri, uid: &str) -> Option<Held> {
    use cri::api;
    let selector = HashMap::from([(POD_UID.to_string(), uid.to_string())]);
    let sandboxes = cri
        .list_pod_sandboxes(Some(api::PodSandboxFilter {
            label_selector: selector.clone(),
            ..Default::default()
        }))
        .await
        .ok()?;
    let containers = cri
        .list_containers(Some(api::ContainerFilter {
            label_selector: selector,
            ..Default::default()
        }))
        .await
        .ok()?;
    let ready = api::PodSandboxState::SandboxReady as i32;
    let running = api::ContainerState::ContainerRunning as i32;
    let mut held = Held {
        sandboxes: sandboxes
            .into_iter()
            .map(|s| (s.id, s.state == ready))
            .collect(),
        containers: containers
            .into_iter()
            .map(|c| (c.id, c.state == running))
            .collect(),
    };
    held.sandboxes.sort();
    held.containers.sort();
    Some(held)
}

/// A pod as it first ran: its uid, what the runtime held for it, and its container's status.
struct Recorded {
    name: &'static str,
    uid: String,
    held: Held,
    container_id: Value,
    restart_count: Value,
}

impl Recorded {
    /// Whether `st` (a status, in any view) shows the pod running in the very same container.
    fn runs_unchanged_in(&self, st: &Value) -> bool {
        let c = &st["containerStatuses"][0];
        st["phase"] == "Running"
            && c["ready"] == true
            && c["state"]["running"].is_object()
            && c["containerID"] == self.container_id
            && c["restartCount"] == self.restart_count
    }
}

fn running_and_ready(st: &Value) -> bool {
    st["phase"] == "Running"
        && st["podIP"].is_string()
        && st["containerStatuses"][0]["ready"] == true
}

/// Whether the runtime holds exactly what it held for each pod at first.
async fn unchanged(cri: &cri::Cri, recorded: &[Recorded]) -> bool {
    for r in recorded {
        if held(cri, &r.uid).await.as_ref() != Some(&r.held) {
            return false;
        }
    }
    true
}

/// Whether the edge's link to the cloud is up.
fn linked(edge: &Edge) -> bool {
    matches!(
        *edge.running.hub().unwrap().state().borrow(),
        edgehub::LinkState::Connected { .. }
    )
}

/// Whether the httpd at `addr` serves the page the pod wrote.
async fn serves(addr: SocketAddr) -> bool {
    testkit::http_get(addr, "/index.html")
        .await
        .is_ok_and(|(code, body)| code == 200 && body.contains("ok"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn offline_pods_survive_edgecore_and_containerd_restarts_and_the_cloud_finds_them_unchanged()
{
    let node = "edge-auto";
    let (pki, s) = site(node).await;
    let Site {
        mut containerd,
        cloud,
        edge,
        dir: _dir,
    } = s;
    let pods: Api<Pod> = Api::namespaced(cloud.kube().await, "default");
    let web = busybox(
        "web",
        "echo ok > /tmp/index.html; exec httpd -f -p 8080 -h /tmp",
    );
    let tick = busybox("tick", WAIT_FOR_TERM);
    for p in [
        pod("web", node, json!({"containers": [web]})),
        pod(
            "tick",
            node,
            json!({"restartPolicy": "Always", "containers": [tick]}),
        ),
    ] {
        pods.create(&PostParams::default(), &p).await.unwrap();
    }
    eventually("both pods are Running in the cloud", WAIT, || async {
        running_and_ready(&status(&pods, "web").await)
            && running_and_ready(&status(&pods, "tick").await)
    })
    .await;

    // What runs: one ready sandbox and one running container per pod, the ones the status names.
    let cri = containerd.connect().await.unwrap();
    let mut recorded = Vec::new();
    for name in ["web", "tick"] {
        let p = pods.get(name).await.unwrap();
        let uid = p.metadata.uid.unwrap();
        let st = serde_json::to_value(p.status).unwrap();
        let held = held(&cri, &uid).await.expect("the runtime answers");
        assert_eq!(held.sandboxes.len(), 1, "{name}: {held:?}");
        assert_eq!(held.containers.len(), 1, "{name}: {held:?}");
        assert!(
            held.sandboxes[0].1 && held.containers[0].1,
            "{name}: {held:?}"
        );
        let c = &st["containerStatuses"][0];
        assert_eq!(
            c["containerID"],
            format!("containerd://{}", held.containers[0].0),
            "{name}"
        );
        assert_eq!(c["restartCount"], 0, "{name}");
        recorded.push(Recorded {
            name,
            uid,
            held,
            container_id: c["containerID"].clone(),
            restart_count: c["restartCount"].clone(),
        });
    }
    let ip: std::net::Ipv4Addr = status(&pods, "web").await["podIP"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let addr = SocketAddr::from((ip, 8080));
    eventually("the host reaches the web pod", WAIT, || serves(addr)).await;

    // The cloud goes away: the pods keep running.
    let ports = cloud.ports();
    cloud.stop().await;
    eventually("the edge notices the link is down", WAIT, || async {
        !linked(&edge)
    })
    .await;
    assert!(
        unchanged(&cri, &recorded).await,
        "the pods kept running as they were when the cloud went away"
    );
    assert!(serves(addr).await, "the web pod still answers offline");

    // edgecore restarts from its store with the cloud still away, then containerd restarts.
    let config = edge.config();
    edge.stop().await;
    assert!(
        unchanged(&cri, &recorded).await,
        "stopping edgecore stopped nothing"
    );
    let edge = e2e::edge(config).await;
    let at_edge: Api<Pod> = Api::namespaced(edge.lwproxy_client(), "default");
    containerd.restart().await.unwrap();
    let cri = containerd.connect().await.unwrap();
    eventually(
        "the same sandboxes and containers run again, nothing re-created",
        WAIT,
        || unchanged(&cri, &recorded),
    )
    .await;
    eventually("the web pod answers again", WAIT, || serves(addr)).await;
    eventually(
        "the edge's own view shows the pods Running in the same containers",
        WAIT,
        || async {
            let mut all = true;
            for r in &recorded {
                all &= r.runs_unchanged_in(&status(&at_edge, r.name).await);
            }
            all
        },
    )
    .await;
    assert!(!linked(&edge), "all of that happened with no cloud");

    // The cloud is back: it finds the very same pods, running in the very same containers.
    let cloud = e2e::k8s_cloud(&pki, ports).await;
    let pods: Api<Pod> = Api::namespaced(cloud.kube().await, "default");
    eventually("the edge reconnects", WAIT, || async { linked(&edge) }).await;
    eventually(
        "the cloud shows both pods Running in the same containers",
        WAIT,
        || async {
            let mut all = true;
            for r in &recorded {
                all &= r.runs_unchanged_in(&status(&pods, r.name).await);
            }
            all
        },
    )
    .await;
    for r in &recorded {
        let uid = pods.get(r.name).await.unwrap().metadata.uid;
        assert_eq!(
            uid.as_deref(),
            Some(r.uid.as_str()),
            "{}: the same pod",
            r.name
        );
    }

    // A pod update from the cloud after the reconnect reaches edged and re-creates nothing.
    let label = json!({"metadata": {"labels": {"seen": "again"}}});
    let patched = pods
        .patch("tick", &PatchParams::default(), &Patch::Merge(&label))
        .await
        .unwrap();
    let rv = patched.metadata.resource_version.unwrap();
    eventually("the edge store holds the update", WAIT, || async {
        edge.held().await.get("pods/default/tick") == Some(&rv)
    })
    .await;
    assert!(
        unchanged(&cri, &recorded).await,
        "the runtime still runs only the first sandboxes and containers"
    );
    for r in &recorded {
        let st = status(&pods, r.name).await;
        assert!(r.runs_unchanged_in(&st), "{}: {st}", r.name);
    }
    edge.stop().await;
    cloud.stop().await;
    containerd.stop().await;
}

/// `cat path` in container `id`: its output, or `None` if the exec failed.
async fn cat(cri: &cri::Cri, id: &str, path: &str) -> Option<String> {
    let out = cri
        .exec_sync(id, vec!["cat".into(), path.into()], 5)
        .await
        .ok()?;
    (out.exit_code == 0).then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mounted_configmap_file_changes_in_the_running_container_when_the_configmap_is_edited() {
    let node = "edge-cfg";
    let (_pki, s) = site(node).await;
    let kube = s.cloud.kube().await;
    let configmaps: Api<ConfigMap> = Api::namespaced(kube.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(kube, "default");
    let cm: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "cfg", "namespace": "default"},
        "data": {"greeting": "hello"},
    }))
    .unwrap();
    configmaps
        .create(&PostParams::default(), &cm)
        .await
        .unwrap();
    let mut served = busybox("web", "exec httpd -f -p 8080 -h /etc/cfg");
    served["volumeMounts"] = json!([{"name": "cfg", "mountPath": "/etc/cfg"}]);
    let p = pod(
        "cfgweb",
        node,
        json!({
            "containers": [served],
            "volumes": [{"name": "cfg", "configMap": {"name": "cfg"}}],
        }),
    );
    pods.create(&PostParams::default(), &p).await.unwrap();
    eventually("the pod is Running in the cloud", WAIT, || async {
        running_and_ready(&status(&pods, "cfgweb").await)
    })
    .await;
    let first = status(&pods, "cfgweb").await["containerStatuses"][0].clone();
    let id = first["containerID"]
        .as_str()
        .and_then(|c| c.strip_prefix("containerd://"))
        .unwrap()
        .to_string();
    let cri = s.containerd.connect().await.unwrap();
    assert_eq!(
        cat(&cri, &id, "/etc/cfg/greeting").await.as_deref(),
        Some("hello"),
        "the container reads the configmap's value"
    );
    let ip: std::net::Ipv4Addr = status(&pods, "cfgweb").await["podIP"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let addr = SocketAddr::from((ip, 8080));
    let greets = |word: &'static str| async move {
        testkit::http_get(addr, "/greeting")
            .await
            .is_ok_and(|(code, body)| code == 200 && body == word)
    };
    eventually("the container serves the file", WAIT, || greets("hello")).await;

    // Edited in the cloud: the file changes under the running container.
    let edit = json!({"data": {"greeting": "bonjour"}});
    configmaps
        .patch("cfg", &PatchParams::default(), &Patch::Merge(&edit))
        .await
        .unwrap();
    eventually("the container reads the new value", WAIT, || async {
        cat(&cri, &id, "/etc/cfg/greeting").await.as_deref() == Some("bonjour")
    })
    .await;
    eventually("the container serves the new value", WAIT, || {
        greets("bonjour")
    })
    .await;

    // The same container: not restarted, not re-created.
    let now = status(&pods, "cfgweb").await;
    let c = &now["containerStatuses"][0];
    assert_eq!(c["containerID"], first["containerID"], "{now}");
    assert_eq!(c["restartCount"], 0, "{now}");
    let uid = pods.get("cfgweb").await.unwrap().metadata.uid.unwrap();
    let held = held(&cri, &uid).await.unwrap();
    assert_eq!(held.containers, vec![(id, true)], "{held:?}");
    assert_eq!(held.sandboxes.len(), 1, "{held:?}");
    s.edge.stop().await;
    s.cloud.stop().await;
    s.containerd.stop().await;
}
