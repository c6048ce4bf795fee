//! edged on a real containerd: a real cloudcore (embedded control plane), a real edgecore with
//! edged, and a private containerd with CNI per test (testkit's harness). Needs root,
//! containerd, runc, the CNI plugins and busybox-static, as CI installs them.

use std::path::{Path, PathBuf};
use std::time::Duration;

use e2e::edged_site::{busybox, pod, site, status};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Event, Node, Pod, ServiceAccount};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde_json::{Value, json};
use testkit::containerd::BUSYBOX_IMAGE;
use testkit::eventually;

const WAIT: Duration = Duration::from_secs(60);

/// The messages of the events with `reason` about pod `pod`.
async fn event_messages(events: &Api<Event>, pod: &str, reason: &str) -> Vec<String> {
    let params =
        ListParams::default().fields(&format!("involvedObject.name={pod},reason={reason}"));
    match events.list(&params).await {
        Ok(list) => list.items.into_iter().filter_map(|e| e.message).collect(),
        Err(_) => vec![],
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
    // With the kubelet's well-known labels, which upstream DaemonSets select on.
    eventually(
        "the node has kubernetes.io/os and its hostname label",
        WAIT,
        || async {
            let Ok(Some(n)) = nodes.get_opt("edge-run").await else {
                return false;
            };
            let labels = n.metadata.labels.unwrap_or_default();
            labels.get("kubernetes.io/os").map(String::as_str) == Some("linux")
                && labels.get("kubernetes.io/hostname").map(String::as_str) == Some("edge-run")
                && labels.contains_key("kubernetes.io/arch")
        },
    )
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
    let events: Api<Event> = Api::namespaced(s.cloud.kube().await, "default");
    eventually(
        "the bad volume is told in a FailedMount event",
        WAIT,
        || async {
            event_messages(&events, "novolume", "FailedMount")
                .await
                .iter()
                .any(|m| m.contains("configmap \"absent\" not found"))
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probes_restart_an_unhealthy_container_and_readiness_drives_the_ready_condition() {
    let (_pki, s) = site("edge-probe").await;
    let pods: Api<Pod> = Api::namespaced(s.cloud.kube().await, "default");
    let period = |mut probe: Value| {
        probe["periodSeconds"] = json!(1);
        probe
    };
    // web: started once its port accepts connections, ready once its page answers over HTTP.
    let mut web = busybox(
        "web",
        "mkdir -p /www; echo ok > /www/ok; exec httpd -f -p 8080 -h /www",
    );
    web["ports"] = json!([{"name": "http", "containerPort": 8080}]);
    web["startupProbe"] = period(json!({"tcpSocket": {"port": 8080}}));
    web["readinessProbe"] = period(json!({"httpGet": {"path": "/ok", "port": "http"}}));
    // live: healthy for two seconds, then its liveness probe fails and it is killed.
    let mut live = busybox(
        "live",
        "touch /tmp/healthy; sleep 2; rm /tmp/healthy; sleep 3600",
    );
    live["livenessProbe"] = period(json!({
        "exec": {"command": ["cat", "/tmp/healthy"]},
        "failureThreshold": 1,
        "terminationGracePeriodSeconds": 1,
    }));
    // gate: ready only while /tmp/ready exists.
    let mut gate = busybox(
        "gate",
        "trap 'exit 0' TERM; while true; do sleep 1 & wait; done",
    );
    gate["readinessProbe"] = period(json!({"exec": {"command": ["test", "-f", "/tmp/ready"]}}));
    let p = pod(
        "probed",
        "edge-probe",
        json!({"containers": [web, live, gate]}),
    );
    pods.create(&PostParams::default(), &p).await.unwrap();

    let container = |st: &Value, name: &str| {
        st["containerStatuses"]
            .as_array()
            .and_then(|a| a.iter().find(|c| c["name"] == name).cloned())
            .unwrap_or_default()
    };
    let condition = |st: &Value, kind: &str| {
        st["conditions"]
            .as_array()
            .and_then(|a| a.iter().find(|c| c["type"] == kind).cloned())
            .unwrap_or_default()["status"]
            .clone()
    };
    eventually(
        "web passes its startup and readiness probes, gate is not ready, the pod is not Ready",
        WAIT,
        || async {
            let st = status(&pods, "probed").await;
            let (web, gate) = (container(&st, "web"), container(&st, "gate"));
            st["phase"] == "Running"
                && web["started"] == true
                && web["ready"] == true
                && gate["started"] == true
                && gate["ready"] == false
                && condition(&st, "Ready") == "False"
                && condition(&st, "ContainersReady") == "False"
        },
    )
    .await;
    eventually(
        "live is killed by its liveness probe and started again",
        WAIT,
        || async {
            let live = container(&status(&pods, "probed").await, "live");
            live["restartCount"].as_u64().unwrap_or(0) >= 1
                && live["lastState"]["terminated"].is_object()
        },
    )
    .await;
    let events: Api<Event> = Api::namespaced(s.cloud.kube().await, "default");
    eventually(
        "the failures are told in Unhealthy events",
        WAIT,
        || async {
            let messages = event_messages(&events, "probed", "Unhealthy").await;
            messages
                .iter()
                .any(|m| m.starts_with("Liveness probe failed"))
                && messages
                    .iter()
                    .any(|m| m.starts_with("Readiness probe failed"))
        },
    )
    .await;

    // gate's file appears: every container is ready, and so is the pod; it goes: not again.
    let gate_id = |st: &Value| {
        container(st, "gate")["containerID"]
            .as_str()
            .unwrap_or_default()
            .trim_start_matches("containerd://")
            .to_string()
    };
    let id = gate_id(&status(&pods, "probed").await);
    let cri = s.containerd.connect().await.unwrap();
    let run = |cmd: &[&str]| {
        let (cri, id) = (cri.clone(), id.clone());
        let cmd: Vec<String> = cmd.iter().map(|c| c.to_string()).collect();
        async move {
            let r = cri.exec_sync(&id, cmd, 5).await.unwrap();
            assert_eq!(r.exit_code, 0, "{}", String::from_utf8_lossy(&r.stderr));
        }
    };
    run(&["touch", "/tmp/ready"]).await;
    eventually("gate is ready, and the pod with it", WAIT, || async {
        let st = status(&pods, "probed").await;
        container(&st, "gate")["ready"] == true
            && container(&st, "web")["ready"] == true
            && condition(&st, "Ready") == "True"
    })
    .await;
    run(&["sh", "-c", "rm /tmp/ready"]).await;
    eventually(
        "gate fails readiness: the pod is not Ready",
        WAIT,
        || async {
            let st = status(&pods, "probed").await;
            container(&st, "gate")["ready"] == false
                && condition(&st, "Ready") == "False"
                && gate_id(&st) == id
        },
    )
    .await;
    s.edge.stop().await;
    s.cloud.stop().await;
    s.containerd.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_projected_token_is_issued_for_the_pod_and_post_start_hooks_run() {
    let (_pki, s) = site("edge-token").await;
    let client = s.cloud.kube().await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), "default");
    let account = serde_json::from_value(json!({"metadata": {"name": "builder"}})).unwrap();
    accounts
        .create(&PostParams::default(), &account)
        .await
        .unwrap();
    let sleep = "trap 'exit 0' TERM; while true; do sleep 1 & wait; done";
    // The token in a projected volume; a postStart hook that leaves a mark.
    let mut app = busybox("app", sleep);
    app["volumeMounts"] = json!([{"name": "api", "mountPath": "/var/run/secrets/tokens"}]);
    app["lifecycle"] =
        json!({"postStart": {"exec": {"command": ["sh", "-c", "echo hooked > /tmp/mark"]}}});
    let p = pod(
        "tokened",
        "edge-token",
        json!({
            "serviceAccountName": "builder",
            "containers": [app],
            "volumes": [{"name": "api", "projected": {"sources": [
                {"serviceAccountToken": {"path": "token", "expirationSeconds": 3600}},
            ]}}],
        }),
    );
    pods.create(&PostParams::default(), &p).await.unwrap();
    // A postStart hook that fails: the container is killed and started again.
    let mut bad = busybox("bad", sleep);
    bad["lifecycle"] = json!({"postStart": {"exec": {"command": ["sh", "-c", "exit 7"]}}});
    let p = pod("hookfail", "edge-token", json!({"containers": [bad]}));
    pods.create(&PostParams::default(), &p).await.unwrap();

    eventually("the pod with a token runs", WAIT, || async {
        let st = status(&pods, "tokened").await;
        st["phase"] == "Running" && st["containerStatuses"][0]["ready"] == true
    })
    .await;
    let st = status(&pods, "tokened").await;
    let id = st["containerStatuses"][0]["containerID"]
        .as_str()
        .unwrap()
        .trim_start_matches("containerd://")
        .to_string();
    let cri = s.containerd.connect().await.unwrap();
    let cat = |path: &str| {
        let (cri, id, path) = (cri.clone(), id.clone(), path.to_string());
        async move {
            let r = cri
                .exec_sync(&id, vec!["cat".into(), path], 5)
                .await
                .unwrap();
            assert_eq!(r.exit_code, 0, "{}", String::from_utf8_lossy(&r.stderr));
            String::from_utf8(r.stdout).unwrap()
        }
    };
    assert_eq!(cat("/tmp/mark").await.trim(), "hooked", "postStart ran");
    // The token was issued by the cloud for the pod's account: it authenticates there.
    let token = cat("/var/run/secrets/tokens/token").await;
    assert!(token.split('.').count() == 3, "a JWT: {token:?}");
    let as_pod = s.cloud.kube_with_token(token.trim()).await;
    let review: k8s_openapi::api::authentication::v1::SelfSubjectReview =
        serde_json::from_value(json!({})).unwrap();
    let me = Api::all(as_pod)
        .create(&PostParams::default(), &review)
        .await
        .expect("the pod's token authenticates to the API");
    let name = me.status.and_then(|s| s.user_info).and_then(|u| u.username);
    assert!(
        name.is_some_and(|n| n.starts_with("system:serviceaccount:default:")),
        "the token is the pod's account's"
    );

    let events: Api<Event> = Api::namespaced(client, "default");
    eventually(
        "the failed hook is told and the container started again",
        WAIT,
        || async {
            let st = status(&pods, "hookfail").await;
            let told = event_messages(&events, "hookfail", "FailedPostStartHook").await;
            st["containerStatuses"][0]["restartCount"]
                .as_u64()
                .unwrap_or(0)
                >= 1
                && told.iter().any(|m| m.contains("exited with 7"))
        },
    )
    .await;
    s.edge.stop().await;
    s.cloud.stop().await;
    s.containerd.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_static_pod_runs_from_its_manifest_with_a_mirror_pod_in_the_api() {
    let (_pki, s) = site("edge-static").await;
    let pods: Api<Pod> = Api::namespaced(s.cloud.kube().await, "default");
    let manifests = s.dir.path().join("manifests");
    std::fs::create_dir_all(&manifests).unwrap();
    let manifest = |word: &str| {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: agent\nspec:\n  terminationGracePeriodSeconds: 1\n  containers:\n  - name: c\n    image: {BUSYBOX_IMAGE}\n    command: [sh, -c, \"echo {word}; trap 'exit 0' TERM; while true; do sleep 1 & wait; done\"]\n"
        )
    };
    let file = manifests.join("agent.yaml");
    std::fs::write(&file, manifest("one")).unwrap();
    let mirror = |p: &Option<Pod>| {
        p.as_ref()
            .and_then(|p| p.metadata.annotations.as_ref())
            .and_then(|a| a.get("kubernetes.io/config.mirror").cloned())
    };
    let name = "agent-edge-static";
    eventually(
        "the static pod runs and its mirror pod shows it Running",
        WAIT,
        || async {
            let p = pods.get_opt(name).await.ok().flatten();
            let st = status(&pods, name).await;
            mirror(&p).is_some()
                && st["phase"] == "Running"
                && st["containerStatuses"][0]["ready"] == true
        },
    )
    .await;
    let first = pods.get(name).await.unwrap();
    let hash = mirror(&Some(first.clone())).unwrap();
    let owner = &first.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str()),
        ("Node", "edge-static")
    );
    let container = status(&pods, name).await["containerStatuses"][0]["containerID"].clone();

    // The mirror pod deleted in the API: it comes back; the static pod was not touched.
    pods.delete(name, &DeleteParams::default()).await.unwrap();
    eventually("the mirror pod is created again", WAIT, || async {
        let p = pods.get_opt(name).await.ok().flatten();
        p.as_ref()
            .is_some_and(|p| p.metadata.uid != first.metadata.uid)
            && status(&pods, name).await["containerStatuses"][0]["containerID"] == container
    })
    .await;

    // The manifest edited: the pod is replaced, and its mirror with it.
    std::fs::write(&file, manifest("two")).unwrap();
    eventually("an edited manifest replaces the pod", WAIT, || async {
        let p = pods.get_opt(name).await.ok().flatten();
        let st = status(&pods, name).await;
        mirror(&p).is_some_and(|h| h != hash)
            && st["containerStatuses"][0]["ready"] == true
            && st["containerStatuses"][0]["containerID"] != container
    })
    .await;

    // The manifest removed: the pod stops and its mirror is deleted.
    std::fs::remove_file(&file).unwrap();
    let cri = s.containerd.connect().await.unwrap();
    eventually("a removed manifest removes the pod", WAIT, || async {
        pods.get_opt(name).await.is_ok_and(|p| p.is_none())
            && cri
                .list_pod_sandboxes(None)
                .await
                .is_ok_and(|b| b.is_empty())
    })
    .await;
    s.edge.stop().await;
    s.cloud.stop().await;
    s.containerd.stop().await;
}
