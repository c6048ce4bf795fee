//! Kubernetes' protobuf encoding against the embedded control plane, as the clients that use
//! it by default do: kubectl's imperative commands (client-go typed clients, which send
//! protobuf bodies since 1.32), and raw requests through the `kube` crate's client for the
//! core kinds (create, get, list, watch), the way kubelet and kube-proxy talk.

use std::path::Path;
use std::time::Duration;

use e2e::controller::Desired;
use e2e::{Pki, Ports, cloud, kubectl, kubectl_ok as ok};
use http::{Method, Request};
use serde_json::{Value, json};
use testkit::eventually;

const WAIT: Duration = Duration::from_secs(20);
const PB: &str = "application/vnd.kubernetes.protobuf";
/// kubelet's Accept when it talks protobuf.
const PB_THEN_JSON: &str = "application/vnd.kubernetes.protobuf,application/json";

fn get_json(kubeconfig: &Path, args: &[&str]) -> Value {
    let mut args = args.to_vec();
    args.extend(["-o", "json"]);
    serde_json::from_str(&ok(kubeconfig, &args)).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_imperative_commands_work_unchanged() {
    if !e2e::recent_kubectl() {
        return;
    }
    let pki = Pki::new();
    let cloud = cloud(&pki, Desired::new(), Ports::default()).await;
    let kc = cloud.running.kubeconfig().unwrap().to_path_buf();

    let out = ok(
        &kc,
        &[
            "create",
            "configmap",
            "settings",
            "--from-literal=mode=edge",
            "--from-literal=level=3",
        ],
    );
    assert!(out.contains("configmap/settings created"), "{out}");
    let cm = get_json(&kc, &["get", "configmap", "settings"]);
    assert_eq!(cm["data"], json!({"mode": "edge", "level": "3"}), "{cm}");

    let out = ok(
        &kc,
        &[
            "create",
            "secret",
            "generic",
            "token",
            "--from-literal=key=s3cret",
        ],
    );
    assert!(out.contains("secret/token created"), "{out}");
    let secret = get_json(&kc, &["get", "secret", "token"]);
    assert_eq!(secret["data"]["key"], "czNjcmV0", "{secret}");

    let out = ok(
        &kc,
        &[
            "create",
            "deployment",
            "web",
            "--image=nginx:1.27",
            "--replicas=2",
            "--port=80",
        ],
    );
    assert!(out.contains("deployment.apps/web created"), "{out}");
    let d = get_json(&kc, &["get", "deployment", "web"]);
    assert_eq!(d["spec"]["replicas"], 2, "{d}");
    assert_eq!(
        d["spec"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"],
        80
    );
    // Defaulting ran on the decoded body, and Go's zero values did not come through as data.
    assert_eq!(d["spec"]["strategy"]["type"], "RollingUpdate", "{d}");
    assert!(d["metadata"].get("generateName").is_none(), "{d}");

    let out = ok(
        &kc,
        &[
            "expose",
            "deployment",
            "web",
            "--port=8080",
            "--target-port=80",
        ],
    );
    assert!(out.contains("service/web exposed"), "{out}");
    let svc = get_json(&kc, &["get", "service", "web"]);
    assert!(
        svc["spec"]["clusterIP"]
            .as_str()
            .is_some_and(|ip| !ip.is_empty()),
        "{svc}"
    );
    assert_eq!(svc["spec"]["ports"][0]["targetPort"], 80, "{svc}");
    assert_eq!(svc["spec"]["selector"], json!({"app": "web"}), "{svc}");

    let out = ok(
        &kc,
        &[
            "run",
            "solo",
            "--image=busybox:1.36",
            "--restart=Never",
            "--",
            "sleep",
            "3600",
        ],
    );
    assert!(out.contains("pod/solo created"), "{out}");
    let pod = get_json(&kc, &["get", "pod", "solo"]);
    assert_eq!(pod["spec"]["restartPolicy"], "Never", "{pod}");
    assert_eq!(
        pod["spec"]["containers"][0]["args"],
        json!(["sleep", "3600"]),
        "{pod}"
    );

    // kubectl create job --from a CronJob, scale and delete send protobuf bodies too.
    let out = ok(
        &kc,
        &[
            "create",
            "cronjob",
            "nightly",
            "--image=busybox:1.36",
            "--schedule=0 3 * * *",
        ],
    );
    assert!(out.contains("cronjob.batch/nightly created"), "{out}");
    let out = ok(&kc, &["create", "job", "now", "--from=cronjob/nightly"]);
    assert!(out.contains("job.batch/now created"), "{out}");
    let job = get_json(&kc, &["get", "job", "now"]);
    assert_eq!(
        job["metadata"]["ownerReferences"][0]["kind"], "CronJob",
        "{job}"
    );

    let out = ok(&kc, &["delete", "configmap", "settings"]);
    assert!(out.contains("deleted"), "{out}");
    let gone = kubectl(&kc, &["get", "configmap", "settings"]);
    assert!(!gone.status.success());
    let out = ok(
        &kc,
        &["delete", "pod", "solo", "--grace-period=0", "--force"],
    );
    assert!(out.contains("deleted"), "{out}");
    eventually("the forced delete removes the pod", WAIT, || {
        std::future::ready(!kubectl(&kc, &["get", "pod", "solo"]).status.success())
    })
    .await;
    cloud.stop().await;
}

/// Sends one request through the `kube` client (its TLS and credentials) and returns the
/// status, content type and body.
async fn call(
    client: &kube::Client,
    method: Method,
    uri: &str,
    body: Option<Vec<u8>>,
) -> (u16, String, Vec<u8>) {
    let mut req = Request::builder()
        .method(method)
        .uri(uri)
        .header("accept", PB_THEN_JSON);
    if body.is_some() {
        req = req.header("content-type", PB);
    }
    let req = req.body(body.unwrap_or_default()).unwrap();
    let resp = client
        .send(req.map(kube::client::Body::from))
        .await
        .unwrap();
    let status = resp.status().as_u16();
    let ct = resp.headers()["content-type"].to_str().unwrap().to_owned();
    let body = http_body_util::BodyExt::collect(resp.into_body())
        .await
        .unwrap()
        .to_bytes();
    (status, ct, body.to_vec())
}

fn decoded((status, ct, body): &(u16, String, Vec<u8>), want: u16) -> Value {
    assert_eq!(*status, want, "{}", String::from_utf8_lossy(body));
    assert_eq!(ct, PB, "{}", String::from_utf8_lossy(body));
    kpb::decode(body).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kube_client_creates_gets_lists_and_watches_core_kinds_in_protobuf() {
    let pki = Pki::new();
    let cloud = cloud(&pki, Desired::new(), Ports::default()).await;
    let client = cloud.kube().await;

    // A watch opened first, in protobuf, sees what is created next.
    let req = Request::builder()
        .uri("/api/v1/namespaces/default/configmaps?watch=true&allowWatchBookmarks=true")
        .header("accept", PB_THEN_JSON)
        .body(kube::client::Body::empty())
        .unwrap();
    let resp = client.send(req).await.unwrap();
    assert_eq!(
        resp.headers()["content-type"],
        "application/vnd.kubernetes.protobuf;stream=watch"
    );
    let (events_tx, mut events_rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut body = resp.into_body();
        let mut buf = Vec::new();
        while let Some(Ok(frame)) = http_body_util::BodyExt::frame(&mut body).await {
            if let Ok(data) = frame.into_data() {
                buf.extend_from_slice(&data);
            }
            let (events, used) = kpb::read_watch_frames(&buf).expect("protobuf frames");
            buf.drain(..used);
            for e in events {
                let _ = events_tx.send(e);
            }
        }
    });

    let kinds = [
        (
            "/api/v1/namespaces/default/configmaps",
            json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "cfg", "labels": {"tier": "edge"}}, "data": {"a": "1"}}),
        ),
        (
            "/api/v1/namespaces/default/secrets",
            json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "sec"}, "type": "Opaque", "data": {"k": "AAEC"}}),
        ),
        (
            "/api/v1/namespaces/default/services",
            json!({"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "svc"}, "spec": {"selector": {"app": "web"},
            "ports": [{"port": 80, "targetPort": "http"}]}}),
        ),
        (
            "/api/v1/namespaces/default/pods",
            json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "pod"}, "spec": {"containers": [{"name": "c", "image": "nginx:1.27",
            "readinessProbe": {"httpGet": {"path": "/", "port": 80}}}]}}),
        ),
        (
            "/api/v1/nodes",
            json!({"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": "edge-pb", "labels": {"node-role.kubernetes.io/edge": ""}},
            "status": {"capacity": {"cpu": "2", "memory": "4Gi"}}}),
        ),
    ];
    for (collection, object) in &kinds {
        let name = object["metadata"]["name"].as_str().unwrap();
        let body = kpb::encode(object.clone()).unwrap();
        let created = decoded(
            &call(&client, Method::POST, collection, Some(body)).await,
            201,
        );
        assert_eq!(created["metadata"]["name"], name);
        assert!(created["metadata"]["uid"].is_string(), "{created}");
        let got = decoded(
            &call(&client, Method::GET, &format!("{collection}/{name}"), None).await,
            200,
        );
        // (The scheduler may have written the pod's status in between.)
        assert_eq!(got["metadata"]["uid"], created["metadata"]["uid"]);
        assert_eq!(got["spec"], created["spec"]);
        let list = decoded(&call(&client, Method::GET, collection, None).await, 200);
        assert_eq!(
            list["kind"],
            format!("{}List", object["kind"].as_str().unwrap())
        );
        assert!(
            list["items"]
                .as_array()
                .unwrap()
                .iter()
                .any(|i| i["metadata"]["name"] == name),
            "{list}"
        );
    }
    // What the server did with the decoded bodies: it allocated and defaulted as for JSON.
    let svc = decoded(
        &call(
            &client,
            Method::GET,
            "/api/v1/namespaces/default/services/svc",
            None,
        )
        .await,
        200,
    );
    assert!(
        svc["spec"]["clusterIP"]
            .as_str()
            .is_some_and(|ip| ip.contains('.')),
        "{svc}"
    );
    assert_eq!(svc["spec"]["ports"][0]["targetPort"], "http", "{svc}");
    let secret = decoded(
        &call(
            &client,
            Method::GET,
            "/api/v1/namespaces/default/secrets/sec",
            None,
        )
        .await,
        200,
    );
    assert_eq!(secret["data"]["k"], "AAEC");
    let pod = decoded(
        &call(
            &client,
            Method::GET,
            "/api/v1/namespaces/default/pods/pod",
            None,
        )
        .await,
        200,
    );
    assert_eq!(
        pod["spec"]["containers"][0]["readinessProbe"]["httpGet"]["port"], 80,
        "{pod}"
    );
    assert_eq!(pod["spec"]["dnsPolicy"], "ClusterFirst", "{pod}");

    let mut seen = Vec::new();
    eventually("the protobuf watch shows the new config map", WAIT, || {
        while let Ok((kind, obj)) = events_rx.try_recv() {
            seen.push(format!(
                "{kind} {}",
                obj["metadata"]["name"].as_str().unwrap_or("")
            ));
        }
        std::future::ready(seen.iter().any(|s| s == "ADDED cfg"))
    })
    .await;

    // An update (PUT) in protobuf, then the watch sees it.
    let mut cm = decoded(
        &call(
            &client,
            Method::GET,
            "/api/v1/namespaces/default/configmaps/cfg",
            None,
        )
        .await,
        200,
    );
    cm["data"]["a"] = json!("2");
    let updated = decoded(
        &call(
            &client,
            Method::PUT,
            "/api/v1/namespaces/default/configmaps/cfg",
            Some(kpb::encode(cm).unwrap()),
        )
        .await,
        200,
    );
    assert_eq!(updated["data"]["a"], "2");
    eventually("the protobuf watch shows the update", WAIT, || {
        while let Ok((kind, obj)) = events_rx.try_recv() {
            seen.push(format!(
                "{kind} {} {}",
                obj["metadata"]["name"].as_str().unwrap_or(""),
                obj["data"]["a"]
            ));
        }
        std::future::ready(seen.iter().any(|s| s == "MODIFIED cfg \"2\""))
    })
    .await;
    cloud.stop().await;
}
