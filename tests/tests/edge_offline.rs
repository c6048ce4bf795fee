//! Writes a node makes through lwproxy while the cloud is away, replayed when it is back: a
//! real cloudcore (embedded control plane) and a real edgecore on loopback.

use std::time::Duration;

use e2e::{Cloud, Edge, Pki, edge, edge_config, k8s_cloud};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;
use testkit::eventually;

const WAIT: Duration = Duration::from_secs(30);
const EDGECORE: &str = env!("CARGO_BIN_EXE_e2e-edgecore");

/// Stops the cloud and waits until the edge sees its link down; returns the cloud's ports.
async fn take_cloud_away(cloud: Cloud, edge: &Edge) -> e2e::Ports {
    let ports = cloud.ports();
    cloud.stop().await;
    eventually("the edge notices the link is down", WAIT, || async {
        *edge.running.hub().unwrap().state().borrow() == edgehub::LinkState::Disconnected
    })
    .await;
    ports
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_label_set_in_the_cloud_survives_a_status_the_node_wrote_offline() {
    let (pki, dir) = (Pki::new(), tempfile::tempdir().unwrap());
    let (cloud, edge1) = e2e::linked_site(&pki, dir.path(), "edge-1").await;
    let pods: Api<Pod> = Api::namespaced(cloud.kube().await, "default");
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "web", "labels": {"app": "web"}},
        "spec": {"nodeName": "edge-1", "containers": [{"name": "c", "image": "busybox"}]},
    }))
    .unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();
    eventually("the pod reaches the edge", WAIT, || async {
        edge1.held().await.contains_key("pods/default/web")
    })
    .await;

    // Offline, the node reports a status through lwproxy: applied here and queued.
    let ports = take_cloud_away(cloud, &edge1).await;
    let at_edge: Api<Pod> = Api::namespaced(edge1.lwproxy_client(), "default");
    let failed = json!({"status": {"phase": "Failed", "message": "written offline"}});
    at_edge
        .patch_status("web", &PatchParams::default(), &Patch::Merge(&failed))
        .await
        .expect("applied at the edge");
    let config = edge1.config();
    edge1.stop().await;

    // Meanwhile the pod is labelled in the cloud; then the node comes back.
    let cloud = k8s_cloud(&pki, ports).await;
    let pods: Api<Pod> = Api::namespaced(cloud.kube().await, "default");
    let label = json!({"metadata": {"labels": {"zone": "b"}}});
    pods.patch("web", &PatchParams::default(), &Patch::Merge(&label))
        .await
        .unwrap();
    let edge2 = edge(config).await;
    eventually("the offline status reaches the cloud", WAIT, || async {
        let pod = pods.get("web").await.unwrap();
        pod.status.and_then(|s| s.phase).as_deref() == Some("Failed")
    })
    .await;
    let pod = pods.get("web").await.unwrap();
    let labels = pod.metadata.labels.unwrap_or_default();
    assert_eq!(
        labels.get("zone").map(String::as_str),
        Some("b"),
        "the replayed status kept the cloud's label: {labels:?}"
    );
    assert_eq!(labels.get("app").map(String::as_str), Some("web"));
    assert_eq!(
        pod.status.unwrap().message.as_deref(),
        Some("written offline")
    );
    edge2.stop().await;
    cloud.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_created_offline_reaches_the_cloud_and_stays_at_the_edge() {
    let (pki, dir) = (Pki::new(), tempfile::tempdir().unwrap());
    let (cloud, edge) = e2e::linked_site(&pki, dir.path(), "edge-1").await;
    let ports = take_cloud_away(cloud, &edge).await;

    // A kubelet that starts while the cloud is away creates its Lease, then renews it.
    let leases: Api<Lease> = Api::namespaced(edge.lwproxy_client(), "kube-node-lease");
    let lease: Lease = serde_json::from_value(json!({"metadata": {"name": "edge-1"},
        "spec": {"holderIdentity": "edge-1", "leaseDurationSeconds": 40,
                 "renewTime": "2026-01-01T00:00:00.000000Z"}}))
    .unwrap();
    leases
        .create(&PostParams::default(), &lease)
        .await
        .expect("created at the edge");
    let renew = json!({"spec": {"renewTime": "2026-01-01T00:00:10.000000Z"}});
    leases
        .patch("edge-1", &PatchParams::default(), &Patch::Merge(&renew))
        .await
        .expect("renewed at the edge");

    let cloud = k8s_cloud(&pki, ports).await;
    let in_cloud: Api<Lease> = Api::namespaced(cloud.kube().await, "kube-node-lease");
    eventually("the lease reaches the cloud", WAIT, || async {
        in_cloud.get_opt("edge-1").await.unwrap().is_some()
    })
    .await;
    let spec = in_cloud.get("edge-1").await.unwrap().spec.unwrap();
    assert_eq!(spec.holder_identity.as_deref(), Some("edge-1"));
    assert_eq!(
        spec.renew_time.map(|t| t.0.as_second()),
        Some(1_767_225_610),
        "the latest renewal"
    );
    // The resync after reconnect did not take it away from the edge, and it comes back down
    // as the cloud's.
    eventually("the edge holds the cloud's lease", WAIT, || async {
        let key = "leases.coordination.k8s.io/kube-node-lease/edge-1";
        edge.held().await.get(key).is_some_and(|rv| !rv.is_empty())
    })
    .await;
    leases.get("edge-1").await.expect("served at the edge");
    edge.stop().await;
    cloud.stop().await;
}

/// Asks lwproxy for a token of `builder` bound to `pod`, as a kubelet does for a projected
/// volume; returns the HTTP code and the body.
async fn ask_token(edge: &kube::Client, pod: &Pod, audiences: &[&str]) -> (u16, serde_json::Value) {
    let request = json!({
        "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
        "spec": {"audiences": audiences, "expirationSeconds": 3607, "boundObjectRef": {
            "kind": "Pod", "apiVersion": "v1", "name": pod.metadata.name, "uid": pod.metadata.uid,
        }},
    });
    let post = http::Request::post("/api/v1/namespaces/default/serviceaccounts/builder/token")
        .header("content-type", "application/json")
        .body(kube::client::Body::from(request.to_string().into_bytes()))
        .unwrap();
    let response = edge.send(post).await.unwrap();
    let code = response.status().as_u16();
    let body = response.into_body().collect_bytes().await.unwrap();
    (code, serde_json::from_slice(&body).unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kubelet_restarted_offline_gets_the_tokens_the_cloud_issued_for_its_pods() {
    use k8s_openapi::api::core::v1::ServiceAccount;

    let (pki, dir) = (Pki::new(), tempfile::tempdir().unwrap());
    let (cloud, edge1) = e2e::linked_site(&pki, dir.path(), "edge-1").await;
    let pp = PostParams::default();
    let account = serde_json::from_value(json!({"metadata": {"name": "builder"}})).unwrap();
    Api::<ServiceAccount>::namespaced(cloud.kube().await, "default")
        .create(&pp, &account)
        .await
        .unwrap();
    let mut pod = e2e::plain_pod("web", "edge-1");
    pod.spec.as_mut().unwrap().service_account_name = Some("builder".into());
    let pods: Api<Pod> = Api::namespaced(cloud.kube().await, "default");
    let pod = pods.create(&pp, &pod).await.unwrap();
    eventually("the pod reaches the edge", WAIT, || async {
        edge1.held().await.contains_key("pods/default/web")
    })
    .await;
    let (code, issued) = ask_token(&edge1.lwproxy_client(), &pod, &[]).await;
    assert_eq!(code, 201, "{issued}");
    let token = issued["status"]["token"]
        .as_str()
        .expect("a token")
        .to_owned();

    // The cloud goes away and the node restarts: the kubelet asks again for the same token.
    let _ports = take_cloud_away(cloud, &edge1).await;
    let config = edge1.config();
    edge1.stop().await;
    let edge2 = edge(config).await;
    let client = edge2.lwproxy_client();
    let (code, kept) = ask_token(&client, &pod, &[]).await;
    assert_eq!(code, 201, "answered offline from the token kept: {kept}");
    assert_eq!(kept["status"]["token"], token.as_str());
    assert_eq!(
        kept["status"]["expirationTimestamp"],
        issued["status"]["expirationTimestamp"]
    );

    // A token never issued here (another audience) cannot be made offline.
    let (code, refused) = ask_token(&client, &pod, &["vault"]).await;
    assert_eq!(code, 503, "{refused}");
    let message = refused["message"].as_str().unwrap();
    assert!(
        message.contains("no token for these audiences"),
        "{message}"
    );
    // Nor one bound to a pod this node does not hold under that uid.
    let mut other = pod.clone();
    other.metadata.uid = Some("00000000-0000-0000-0000-000000000000".into());
    let (code, refused) = ask_token(&client, &other, &[]).await;
    assert_eq!(code, 503, "{refused}");
    edge2.stop().await;
}

/// A loopback port nothing listens on right now, for a child process's lwproxy.
fn unused_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

fn client_at(port: u16) -> kube::Client {
    let mut config = kube::Config::new(format!("http://127.0.0.1:{port}").parse().unwrap());
    config.default_retry = false;
    kube::Client::try_from(config).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_status_answered_offline_survives_a_sigkill_and_reaches_the_cloud() {
    let (pki, dir) = (Pki::new(), tempfile::tempdir().unwrap());
    let cloud = k8s_cloud(&pki, e2e::Ports::default()).await;
    let pods: Api<Pod> = Api::namespaced(cloud.kube().await, "default");
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {"nodeName": "edge-1", "containers": [{"name": "c", "image": "busybox"}]},
    }))
    .unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();
    let transport = link::Transport::WebSocket;
    let db = dir.path().join("edge.db");
    let mut config = edge_config(&pki.node("edge-1"), cloud.addr(transport), transport, &db);
    let port = unused_port();
    config.modules.lw_proxy.server = ([127, 0, 0, 1], port).into();
    let mut child = e2e::spawn_edgecore(EDGECORE, &config, dir.path());
    let at_edge: Api<Pod> = Api::namespaced(client_at(port), "default");
    eventually("the edge serves the pod", WAIT, || async {
        at_edge.get_opt("web").await.ok().flatten().is_some()
    })
    .await;

    // Cut off, the node reports a status; the process is killed as soon as it is answered.
    let ports = cloud.ports();
    cloud.stop().await;
    let failed = json!({"status": {"phase": "Failed", "message": "written offline"}});
    at_edge
        .patch_status("web", &PatchParams::default(), &Patch::Merge(&failed))
        .await
        .expect("applied at the edge");
    child.0.kill().unwrap();
    child.0.wait().unwrap();

    // On disk: the status and the message that sends it.
    {
        let store = objstore::Writer::open(&db, objstore::StoreConfig::default()).unwrap();
        let key = objstore::ObjKey::new("pods", "default", "web");
        let held = store.get(&key).await.unwrap().expect("held");
        assert_eq!(held.field("status.phase"), Some("Failed"));
        let queued = store.outbox_peek(10).await.unwrap();
        assert_eq!(queued.len(), 1, "{queued:?}");
        assert_eq!(queued[0].key, "patch:default/pods/web");
    }

    let cloud = k8s_cloud(&pki, ports).await;
    let _child = e2e::spawn_edgecore(EDGECORE, &config, dir.path());
    let pods: Api<Pod> = Api::namespaced(cloud.kube().await, "default");
    eventually("the status reaches the cloud", WAIT, || async {
        let pod = pods.get("web").await.unwrap();
        pod.status.and_then(|s| s.phase).as_deref() == Some("Failed")
    })
    .await;
    drop(_child);
    cloud.stop().await;
}
