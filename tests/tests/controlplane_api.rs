//! The embedded control plane through the `kube` crate: optimistic concurrency, graceful pod
//! deletion, node-scoped authorization, Status errors, and a watcher that survives a restart
//! of the control plane and relists after a 410.

use std::time::Duration;

use e2e::controller::Desired;
use e2e::{Pki, Ports, cloud, cloud_with};
use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::watcher;
use serde_json::json;
use testkit::eventually;

const WAIT: Duration = Duration::from_secs(30);

fn code_of<T: std::fmt::Debug>(r: Result<T, kube::Error>) -> u16 {
    match r {
        Err(kube::Error::Api(status)) => status.code,
        other => panic!("expected an API error, got {other:?}"),
    }
}

fn pod(name: &str, node: Option<&str>) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "busybox"}]},
    }))
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_resource_version_is_a_conflict() {
    let pki = Pki::new();
    let cloud = cloud(&pki, Desired::new(), Ports::default()).await;
    let cms: Api<ConfigMap> = Api::namespaced(cloud.kube().await, "default");
    let mut cm: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "c"}, "data": {"a": "1"}})).unwrap();
    let created = cms.create(&PostParams::default(), &cm).await.unwrap();
    cm.metadata.resource_version = created.metadata.resource_version.clone();
    cm.data = Some([("a".to_string(), "2".to_string())].into());
    cms.replace("c", &PostParams::default(), &cm).await.unwrap();
    cm.data = Some([("a".to_string(), "3".to_string())].into());
    let stale = cms.replace("c", &PostParams::default(), &cm).await;
    match stale {
        Err(kube::Error::Api(s)) => assert_eq!((s.code, s.reason.as_str()), (409, "Conflict")),
        other => panic!("a stale update was not refused: {other:?}"),
    }
    assert_eq!(cms.get("c").await.unwrap().data.unwrap()["a"], "2");
    cloud.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bound_pod_is_deleted_gracefully_then_for_good() {
    let pki = Pki::new();
    let cloud = cloud(&pki, Desired::new(), Ports::default()).await;
    let pods: Api<Pod> = Api::namespaced(cloud.kube().await, "default");
    let created = pods
        .create(&PostParams::default(), &pod("bound", Some("edge-1")))
        .await
        .unwrap();
    pods.delete("bound", &DeleteParams::default())
        .await
        .unwrap();
    let terminating = pods.get("bound").await.unwrap();
    assert!(
        terminating.metadata.deletion_timestamp.is_some(),
        "a bound pod waits for its kubelet"
    );
    assert_eq!(terminating.metadata.deletion_grace_period_seconds, Some(30));
    // What kubelet sends once the containers are gone.
    let uid = created.metadata.uid.clone();
    let last = DeleteParams {
        grace_period_seconds: Some(0),
        preconditions: Some(Preconditions {
            uid,
            resource_version: None,
        }),
        ..Default::default()
    };
    pods.delete("bound", &last).await.unwrap();
    assert_eq!(code_of(pods.get("bound").await), 404);
    cloud.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_writes_only_what_a_node_may() {
    let pki = Pki::new();
    let cloud = cloud(&pki, Desired::new(), Ports::default()).await;
    let admin = cloud.kube().await;
    for name in ["n1", "n2"] {
        let node: Node = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
        Api::<Node>::all(admin.clone())
            .create(&PostParams::default(), &node)
            .await
            .unwrap();
    }
    let pods: Api<Pod> = Api::namespaced(admin.clone(), "default");
    pods.create(&PostParams::default(), &pod("mine", Some("n1")))
        .await
        .unwrap();
    pods.create(&PostParams::default(), &pod("theirs", Some("n2")))
        .await
        .unwrap();

    let n1 = cloud.kube_as_node("n1").await;
    let nodes: Api<Node> = Api::all(n1.clone());
    let ready =
        Patch::Merge(json!({"status": {"conditions": [{"type": "Ready", "status": "True"}]}}));
    nodes
        .patch_status("n1", &PatchParams::default(), &ready)
        .await
        .unwrap();
    assert_eq!(
        code_of(
            nodes
                .patch_status("n2", &PatchParams::default(), &ready)
                .await
        ),
        403
    );
    let node_pods: Api<Pod> = Api::namespaced(n1.clone(), "default");
    let running = Patch::Merge(json!({"status": {"phase": "Running"}}));
    node_pods
        .patch_status("mine", &PatchParams::default(), &running)
        .await
        .unwrap();
    assert_eq!(
        code_of(
            node_pods
                .patch_status("theirs", &PatchParams::default(), &running)
                .await
        ),
        403
    );
    assert_eq!(
        code_of(
            node_pods
                .patch(
                    "mine",
                    &PatchParams::default(),
                    &Patch::Merge(json!({"metadata": {"labels": {"x": "y"}}}))
                )
                .await
        ),
        403
    );
    let leases: Api<Lease> = Api::namespaced(n1.clone(), "kube-node-lease");
    let lease = |name: &str| {
        serde_json::from_value::<Lease>(
            json!({"metadata": {"name": name}, "spec": {"holderIdentity": name}}),
        )
        .unwrap()
    };
    leases
        .create(&PostParams::default(), &lease("n1"))
        .await
        .unwrap();
    assert_eq!(
        code_of(leases.create(&PostParams::default(), &lease("n2")).await),
        403
    );
    let cms: Api<ConfigMap> = Api::namespaced(n1, "default");
    let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "x"}})).unwrap();
    assert_eq!(code_of(cms.create(&PostParams::default(), &cm).await), 403);
    let phase = pods
        .get("theirs")
        .await
        .unwrap()
        .status
        .and_then(|s| s.phase);
    assert_eq!(
        phase.as_deref(),
        Some("Pending"),
        "the refused write changed nothing"
    );
    cloud.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_get_the_right_status() {
    let pki = Pki::new();
    let cloud = cloud(&pki, Desired::new(), Ports::default()).await;
    let client = cloud.kube().await;
    let raw = |method: &str, uri: &str, body: &str| {
        http::Request::builder()
            .method(method)
            .uri(uri)
            .header("content-type", "application/json")
            .body(body.as_bytes().to_vec())
            .unwrap()
    };
    let status = |r: Result<String, kube::Error>| match r {
        Err(kube::Error::Api(s)) => (s.code, s.reason),
        other => panic!("expected a Status, got {other:?}"),
    };
    let unknown = client
        .request_text(raw("GET", "/api/v1/namespaces/default/frobs", ""))
        .await;
    assert_eq!(status(unknown), (404, "NotFound".into()));
    let malformed = client
        .request_text(raw(
            "POST",
            "/api/v1/namespaces/default/configmaps",
            "{not json",
        ))
        .await;
    assert_eq!(status(malformed), (400, "BadRequest".into()));
    let selector = client
        .request_text(raw("GET", "/api/v1/pods?labelSelector=a%20in%20(", ""))
        .await;
    assert_eq!(status(selector).0, 400);
    let field = client
        .request_text(raw(
            "GET",
            "/api/v1/pods?fieldSelector=spec.color%3Dred",
            "",
        ))
        .await;
    assert_eq!(status(field).0, 400);
    cloud.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watcher_resumes_across_a_restart_and_relists_after_a_410() {
    let pki = Pki::new();
    let desired = Desired::new();
    let short_log = |c: &mut cloudcore::Config| c.modules.api_server.change_log_retention = 50;
    let cloud1 = cloud_with(&pki, desired.clone(), Ports::default(), short_log).await;
    let client = cloud1.kube().await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let cm = |name: &str| {
        serde_json::from_value::<ConfigMap>(json!({"metadata": {"name": name}})).unwrap()
    };
    cms.create(&PostParams::default(), &cm("before"))
        .await
        .unwrap();

    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let inits = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let (seen2, inits2) = (seen.clone(), inits.clone());
    let watching = tokio::spawn(async move {
        let mut events = watcher(cms, watcher::Config::default()).boxed();
        while let Some(event) = events.next().await {
            match event {
                Ok(watcher::Event::Init) => {
                    inits2.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                }
                Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o)) => {
                    seen2.lock().unwrap().push(o.metadata.name.unwrap());
                }
                _ => {}
            }
        }
    });
    eventually("the initial list", WAIT, || {
        std::future::ready(seen.lock().unwrap().contains(&"before".to_string()))
    })
    .await;

    let ports = cloud1.ports();
    cloud1.stop().await;
    let cloud2 = cloud_with(&pki, desired.clone(), ports, short_log).await;
    let writer: Api<ConfigMap> = Api::namespaced(cloud2.kube().await, "default");
    writer
        .create(&PostParams::default(), &cm("after-restart"))
        .await
        .unwrap();
    eventually("the watcher resumes after the restart", WAIT, || {
        std::future::ready(seen.lock().unwrap().contains(&"after-restart".to_string()))
    })
    .await;
    let inits_before = inits.load(std::sync::atomic::Ordering::SeqCst);

    // Stop again; while the watcher cannot reach it (the control plane runs on another port),
    // move the log far past where the watcher was; then bring it back where the watcher looks.
    let ports = cloud2.ports();
    cloud2.stop().await;
    let elsewhere = cloud_with(&pki, desired.clone(), Ports::default(), short_log).await;
    let writer: Api<ConfigMap> = Api::namespaced(elsewhere.kube().await, "default");
    for i in 0..120 {
        writer
            .create(&PostParams::default(), &cm(&format!("churn-{i}")))
            .await
            .unwrap();
    }
    elsewhere.stop().await;
    let cloud3 = cloud_with(&pki, desired.clone(), ports, short_log).await;
    eventually(
        "the watcher relists after 410 and sees everything",
        WAIT,
        || {
            std::future::ready(
                seen.lock().unwrap().contains(&"churn-119".to_string())
                    && inits.load(std::sync::atomic::Ordering::SeqCst) > inits_before,
            )
        },
    )
    .await;
    watching.abort();
    cloud3.stop().await;
}
