//! `metrics.k8s.io` and the HorizontalPodAutoscaler on the embedded control plane: the API
//! server and the controllers run as cloudcore runs them, the node's kubelet API is a stub
//! [`NodeDialer`] serving `/metrics/resource` text whose counters grow at rates the test sets
//! (so each scrape differs from the last), and kubectl reads the result (`kubectl top`).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use beehive::CancellationToken;
use e2e::{Pki, Ports, kubectl, kubectl_ok, kubectl_stdin};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::core::v1::{Node, Pod};
use kapi::nodes::{DialError, NodeDialer, NodeStream};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use testkit::eventually;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const WAIT: Duration = Duration::from_secs(30);
const NODE: &str = "edge-1";
const MI: u64 = 1024 * 1024;

/// A series: the node (`None`) or one container (namespace, pod, container).
type Series = Option<(String, String, String)>;

/// A kubelet's resource metrics, as counters growing at set rates.
#[derive(Default)]
struct Stub {
    state: Mutex<StubState>,
}

#[derive(Default)]
struct StubState {
    series: BTreeMap<Series, Counter>,
    /// Serve text that does not parse.
    broken: bool,
}

/// A cumulative CPU counter (core-seconds) and a working set.
struct Counter {
    base: f64,
    since_ms: i64,
    rate: f64,
    memory: u64,
}

impl Counter {
    fn at(&self, now: i64) -> f64 {
        self.base + self.rate * (now - self.since_ms) as f64 / 1000.0
    }
}

impl Stub {
    /// Sets a series' CPU rate (cores) and working set (bytes) from now on.
    fn set(&self, series: Option<(&str, &str, &str)>, rate: f64, memory: u64) {
        let key = series.map(|(a, b, c)| (a.to_owned(), b.to_owned(), c.to_owned()));
        let now = now_ms();
        let mut state = self.state.lock().unwrap();
        let counter = state.series.entry(key).or_insert(Counter {
            base: 0.0,
            since_ms: now,
            rate,
            memory,
        });
        counter.base = counter.at(now);
        counter.since_ms = now;
        counter.rate = rate;
        counter.memory = memory;
    }

    fn broken(&self, broken: bool) {
        self.state.lock().unwrap().broken = broken;
    }

    /// The `/metrics/resource` text now.
    fn body(&self) -> String {
        let state = self.state.lock().unwrap();
        if state.broken {
            return "node_cpu_usage_seconds_total{ 12\n".into();
        }
        let now = now_ms();
        let mut text = String::from("# TYPE node_cpu_usage_seconds_total counter\n");
        for (series, c) in &state.series {
            let (cpu, memory) = match series {
                None => (
                    "node_cpu_usage_seconds_total".to_string(),
                    "node_memory_working_set_bytes".to_string(),
                ),
                Some((ns, pod, container)) => {
                    let labels =
                        format!("{{container=\"{container}\",namespace=\"{ns}\",pod=\"{pod}\"}}");
                    (
                        format!("container_cpu_usage_seconds_total{labels}"),
                        format!("container_memory_working_set_bytes{labels}"),
                    )
                }
            };
            text.push_str(&format!(
                "{cpu} {} {now}\n{memory} {} {now}\n",
                c.at(now),
                c.memory
            ));
        }
        text
    }
}

#[async_trait::async_trait]
impl NodeDialer for Stub {
    async fn dial(&self, node: &str) -> Result<Box<dyn NodeStream>, DialError> {
        if node != NODE {
            return Err(DialError::NotConnected { node: node.into() });
        }
        let body = self.body();
        let (client, mut server) = tokio::io::duplex(1 << 16);
        tokio::spawn(async move {
            let mut head = Vec::new();
            let mut buf = [0u8; 1024];
            while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                match server.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => head.extend_from_slice(&buf[..n]),
                }
            }
            let ok = head.starts_with(b"GET /metrics/resource ");
            let (status, body) = if ok {
                ("200 OK", body)
            } else {
                ("404 Not Found", String::new())
            };
            let answer = format!(
                "HTTP/1.1 {status}\r\ncontent-type: text/plain\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = server.write_all(answer.as_bytes()).await;
            let _ = server.shutdown().await;
        });
        Ok(Box::new(client))
    }
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// The API server and the controllers, as cloudcore runs them, with `stub` as the way to nodes.
struct Plane {
    core: daemon::Core,
    shutdown: CancellationToken,
    kubeconfig: PathBuf,
    client: kube::Client,
    _pki: Pki,
}

async fn plane(stub: Arc<Stub>) -> Plane {
    let pki = Pki::new();
    let mut config = e2e::cloud_config(&pki, Ports::default());
    config.modules.api_server.metrics_server.metric_resolution = Duration::from_millis(300);
    config.modules.controllers.node_monitor_grace_period = Duration::from_secs(3600);
    let hpa = &mut config.modules.controllers.horizontal_pod_autoscaler;
    hpa.sync_period = Duration::from_millis(500);
    let (module, handle) = apiserver::ApiServer::bind(config.modules.api_server.clone())
        .await
        .unwrap();
    let kubeconfig = handle.kubeconfig().to_path_buf();
    let loaded = kube::config::Kubeconfig::read_from(&kubeconfig).unwrap();
    let client_config = kube::Config::from_custom_kubeconfig(loaded, &Default::default())
        .await
        .unwrap();
    let client = kube::Client::try_from(client_config).unwrap();
    let mut runtime = beehive::Runtime::new();
    runtime.register(module.with_node_dialer(stub));
    runtime.register(controllers::Controllers::new(
        config.modules.controllers.clone(),
        client.clone(),
    ));
    let shutdown = CancellationToken::new();
    let core = daemon::Core::start(
        "cloudcore",
        &config.common_config,
        runtime,
        None,
        shutdown.clone(),
    )
    .await
    .unwrap();
    Plane {
        core,
        shutdown,
        kubeconfig,
        client,
        _pki: pki,
    }
}

impl Plane {
    async fn ready_node(&self) {
        let node: Node = serde_json::from_value(json!({
            "metadata": {"name": NODE, "labels": {"node-role.kubernetes.io/edge": ""}},
            "status": {
                "capacity": {"cpu": "4", "memory": "8Gi", "pods": "110"},
                "allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"},
                "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
            },
        }))
        .unwrap();
        Api::<Node>::all(self.client.clone())
            .create(&PostParams::default(), &node)
            .await
            .unwrap();
    }

    async fn stop(self) {
        self.shutdown.cancel();
        self.core.stop().await;
    }
}

/// `kubectl top ...` rows as columns, when it succeeds.
fn top(kubeconfig: &std::path::Path, args: &[&str]) -> Option<Vec<Vec<String>>> {
    let mut all = vec!["top"];
    all.extend_from_slice(args);
    all.push("--no-headers");
    let out = kubectl(kubeconfig, &all);
    out.status.success().then(|| {
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| l.split_whitespace().map(String::from).collect())
            .collect()
    })
}

fn row(cols: &[&str]) -> Vec<String> {
    cols.iter().map(|c| c.to_string()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_top_shows_node_and_pod_usage_scraped_through_the_dialer() {
    let stub = Arc::new(Stub::default());
    stub.set(None, 0.25, 512 * MI);
    stub.set(Some(("default", "web-1", "app")), 0.1, 64 * MI);
    stub.set(Some(("default", "web-1", "sidecar")), 0.02, 16 * MI);
    stub.set(Some(("default", "db-1", "pg")), 0.05, 128 * MI);
    let plane = plane(stub.clone()).await;
    let kc = plane.kubeconfig.clone();
    plane.ready_node().await;
    let pods = Api::<Pod>::namespaced(plane.client.clone(), "default");
    for (name, app, containers) in [
        ("web-1", "web", vec!["app", "sidecar"]),
        ("db-1", "db", vec!["pg"]),
    ] {
        let containers: Vec<Value> = containers
            .iter()
            .map(|c| json!({"name": c, "image": "registry.local/app:1"}))
            .collect();
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": name, "labels": {"app": app}},
            "spec": {"nodeName": NODE, "containers": containers},
        }))
        .unwrap();
        pods.create(&PostParams::default(), &pod).await.unwrap();
    }

    // CPU(cores) CPU(%) MEMORY(bytes) MEMORY(%): 250m of 4 cores, 512Mi of 8Gi.
    let want = vec![row(&[NODE, "250m", "6%", "512Mi", "6%"])];
    eventually("kubectl top node shows the node's rates", WAIT, || async {
        top(&kc, &["node"]) == Some(want.clone())
    })
    .await;
    let want = vec![
        row(&["db-1", "50m", "128Mi"]),
        row(&["web-1", "120m", "80Mi"]),
    ];
    eventually("kubectl top pod shows each pod", WAIT, || async {
        top(&kc, &["pod", "-n", "default", "--sort-by=memory"]).map(|mut r| {
            r.sort();
            r
        }) == Some(want.clone())
    })
    .await;
    let containers = top(
        &kc,
        &["pod", "-n", "default", "-l", "app=web", "--containers"],
    )
    .unwrap();
    assert_eq!(
        containers,
        vec![
            row(&["web-1", "app", "100m", "64Mi"]),
            row(&["web-1", "sidecar", "20m", "16Mi"])
        ]
    );

    // The next scrapes see the new rate.
    stub.set(None, 1.5, 1024 * MI);
    let want = vec![row(&[NODE, "1500m", "37%", "1024Mi", "12%"])];
    eventually("kubectl top node follows the counters", WAIT, || async {
        top(&kc, &["node"]) == Some(want.clone())
    })
    .await;

    // Discovery shows the group as metrics-server registers it.
    let resources = kubectl_ok(
        &kc,
        &[
            "api-resources",
            "--api-group=metrics.k8s.io",
            "--no-headers",
        ],
    );
    let rows: Vec<Vec<&str>> = resources
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        rows,
        vec![
            vec!["nodes", "metrics.k8s.io/v1beta1", "false", "NodeMetrics"],
            vec!["pods", "metrics.k8s.io/v1beta1", "true", "PodMetrics"],
        ],
        "{resources}"
    );

    // Unknown objects are 404 Status answers.
    let missing = kubectl(
        &kc,
        &[
            "get",
            "--raw",
            "/apis/metrics.k8s.io/v1beta1/namespaces/default/pods/nope",
        ],
    );
    assert!(!missing.status.success());
    assert!(
        String::from_utf8_lossy(&missing.stderr).contains("NotFound"),
        "{missing:?}"
    );

    // RBAC: reading node metrics takes get/list on nodes.metrics.k8s.io.
    let raw = [
        "get",
        "--raw",
        "/apis/metrics.k8s.io/v1beta1/nodes",
        "--as=jane",
    ];
    let denied = kubectl(&kc, &raw);
    assert!(
        String::from_utf8_lossy(&denied.stderr).contains("Forbidden"),
        "{denied:?}"
    );
    let grant = r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: metrics-reader}
rules:
- {apiGroups: [metrics.k8s.io], resources: [nodes], verbs: [get, list]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: jane-reads-metrics}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: metrics-reader}
subjects:
- {apiGroup: rbac.authorization.k8s.io, kind: User, name: jane}
"#;
    let applied = kubectl_stdin(&kc, &["apply", "-f", "-"], grant);
    assert!(applied.status.success(), "{applied:?}");
    let listed = kubectl_ok(&kc, &raw);
    assert!(listed.contains("\"kind\":\"NodeMetricsList\""), "{listed}");

    // A node sending text that does not parse loses its metrics (its scrape fails, logged),
    // and gets them back once it answers properly again.
    let node_raw = ["get", "--raw", "/apis/metrics.k8s.io/v1beta1/nodes/edge-1"];
    stub.broken(true);
    eventually("the broken node's metrics expire", WAIT, || async {
        !kubectl(&kc, &node_raw).status.success()
    })
    .await;
    stub.broken(false);
    eventually("the node's metrics come back", WAIT, || async {
        kubectl(&kc, &node_raw).status.success()
    })
    .await;
    plane.stop().await;
}

/// Stands in for the kubelet of the Deployment's pods: marks each bound pod Running and Ready
/// and gives its container the CPU rate in `load` (cores).
async fn kubelet(
    client: kube::Client,
    stub: Arc<Stub>,
    load: Arc<Mutex<f64>>,
    stop: CancellationToken,
) {
    let pods = Api::<Pod>::namespaced(client, "default");
    let status = json!({"status": {
        "phase": "Running",
        "startTime": apimachinery::time::now_rfc3339(),
        "conditions": [{"type": "Ready", "status": "True"}],
    }});
    while !stop.is_cancelled() {
        let listed = pods.list(&ListParams::default().labels("app=web")).await;
        for pod in listed.map(|l| l.items).unwrap_or_default() {
            let name = pod.metadata.name.clone().unwrap_or_default();
            let bound = pod.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(NODE);
            let running = pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running");
            if bound && !running {
                let _ = pods
                    .patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
                    .await;
            }
            if bound {
                let rate = *load.lock().unwrap();
                let key = ("default", name.as_str(), "app");
                let same = stub
                    .state
                    .lock()
                    .unwrap()
                    .series
                    .get(&Some((key.0.into(), key.1.into(), key.2.into())))
                    .is_some_and(|c| c.rate == rate);
                if !same {
                    stub.set(Some(key), rate, 32 * MI);
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_hpa_scales_a_deployment_up_on_high_cpu_and_down_after_its_stabilization_window() {
    let stub = Arc::new(Stub::default());
    stub.set(None, 0.5, 512 * MI);
    let plane = plane(stub.clone()).await;
    plane.ready_node().await;
    let client = plane.client.clone();
    let deployment: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "app", "image": "registry.local/app:1",
                    "resources": {"requests": {"cpu": "100m"}}}]},
            },
        },
    }))
    .unwrap();
    let deployments = Api::<Deployment>::namespaced(client.clone(), "default");
    deployments
        .create(&PostParams::default(), &deployment)
        .await
        .unwrap();
    let hpa: HorizontalPodAutoscaler = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
            "minReplicas": 1,
            "maxReplicas": 3,
            "metrics": [{"type": "Resource", "resource": {"name": "cpu",
                "target": {"type": "Utilization", "averageUtilization": 50}}}],
            "behavior": {"scaleDown": {"stabilizationWindowSeconds": 3}},
        },
    }))
    .unwrap();
    let hpas = Api::<HorizontalPodAutoscaler>::namespaced(client.clone(), "default");
    hpas.create(&PostParams::default(), &hpa).await.unwrap();

    // Each pod uses 500m of its 100m request: 500% against 50%.
    let load = Arc::new(Mutex::new(0.5));
    let stop = CancellationToken::new();
    let started = std::time::Instant::now();
    tokio::spawn(kubelet(
        client.clone(),
        stub.clone(),
        load.clone(),
        stop.clone(),
    ));
    let replicas = || async {
        let d = deployments.get("web").await.unwrap();
        d.spec.and_then(|s| s.replicas).unwrap_or_default()
    };
    eventually(
        "the HPA scales web up to its maximum of 3",
        WAIT,
        || async { replicas().await == 3 },
    )
    .await;
    eprintln!("scaled up to 3 in {:?}", started.elapsed());
    let status = |hpa: &HorizontalPodAutoscaler| serde_json::to_value(hpa.status.clone()).unwrap();
    eventually(
        "the HPA reports 3 replicas, its metric and that it is limited",
        WAIT,
        || async {
            let s = status(&hpas.get("web").await.unwrap());
            let condition = |t: &str| {
                s["conditions"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .find(|c| c["type"] == t)
                    .cloned()
                    .unwrap_or_default()
            };
            s["desiredReplicas"] == 3
                && s["currentReplicas"] == 3
                && s["lastScaleTime"].is_string()
                && s["currentMetrics"][0]["resource"]["current"]["averageUtilization"].as_i64()
                    >= Some(400)
                && condition("ScalingActive")["reason"] == "ValidMetricFound"
                && condition("ScalingLimited")["status"] == "True"
                && condition("ScalingLimited")["reason"] == "TooManyReplicas"
        },
    )
    .await;
    let shown = kubectl_ok(&plane.kubeconfig, &["get", "hpa", "web", "--no-headers"]);
    assert!(
        shown.contains("Deployment/web") && shown.contains("/50%"),
        "{shown}"
    );

    // 10m of 100m: 10% against 50%. The scale-down waits out the 3 s window, saying so.
    *load.lock().unwrap() = 0.01;
    let lowered = std::time::Instant::now();
    let stabilized = AtomicBool::new(false);
    eventually(
        "the HPA scales web down to 1 after the window",
        WAIT,
        || async {
            let s = status(&hpas.get("web").await.unwrap());
            let held = s["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|c| c["reason"] == "ScaleDownStabilized");
            stabilized.fetch_or(held, Ordering::Relaxed);
            replicas().await == 1
        },
    )
    .await;
    eprintln!("scaled down to 1 in {:?} (3 s window)", lowered.elapsed());
    assert!(
        stabilized.load(Ordering::Relaxed),
        "the HPA held the scale-down within its stabilization window"
    );
    stop.cancel();
    plane.stop().await;
}
