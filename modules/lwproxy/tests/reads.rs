//! Reads come from the edge store: kube-rs' watcher, the field selectors kubelet and
//! kube-proxy list with, a watch resumed from a local resourceVersion after a restart, custom
//! resources following the CRDs held, and HTTPS.

mod support;

use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::api::{ListParams, WatchEvent, WatchParams};
use kube::runtime::watcher::{self, Event};
use kube::{Api, ResourceExt};
use serde_json::{Value, json};
use testkit::eventually;

use support::{Edge, Node, WAIT, pod, service};

fn names<K: ResourceExt>(items: &[K]) -> Vec<String> {
    let mut names: Vec<String> = items.iter().map(|o| o.name_any()).collect();
    names.sort();
    names
}

#[tokio::test]
async fn a_watcher_sees_a_pod_the_cloud_sent_down() {
    let node = Node::new();
    let edge = node.start(true).await;
    edge.downstream("pods", pod("before", "n1", "10")).await;
    let pods: Api<Pod> = Api::namespaced(edge.client(), "default");
    let mut events = watcher::watcher(pods, watcher::Config::default()).boxed();
    let mut listed = Vec::new();
    loop {
        match tokio::time::timeout(WAIT, events.try_next()).await {
            Ok(Ok(Some(Event::InitApply(p)))) => listed.push(p.name_any()),
            Ok(Ok(Some(Event::InitDone))) => break,
            Ok(Ok(Some(_))) => {}
            other => panic!("expected the initial list, got {other:?}"),
        }
    }
    assert_eq!(listed, ["before"]);

    edge.downstream("pods", pod("web-1", "n1", "11")).await;
    let event = tokio::time::timeout(WAIT, events.try_next()).await;
    match event {
        Ok(Ok(Some(Event::Apply(p)))) => {
            assert_eq!(p.name_any(), "web-1");
            assert_ne!(
                p.resource_version().as_deref(),
                Some("11"),
                "local revisions are served"
            );
        }
        other => panic!("expected the new pod, got {other:?}"),
    }
    edge.stop().await;
}

#[tokio::test]
async fn lists_select_pods_by_node_and_services_with_a_cluster_ip() {
    let node = Node::new();
    let edge = node.start(false).await;
    edge.downstream("pods", pod("a", "n1", "1")).await;
    edge.downstream("pods", pod("b", "n2", "2")).await;
    edge.downstream("pods", pod("c", "n1", "3")).await;
    edge.downstream("services", service("kubernetes", "10.96.0.1", "4"))
        .await;
    edge.downstream("services", service("headless", "None", "5"))
        .await;

    let pods: Api<Pod> = Api::all(edge.client());
    let on_n1 = pods
        .list(&ListParams::default().fields("spec.nodeName=n1"))
        .await
        .expect("pods listed");
    assert_eq!(names(&on_n1.items), ["a", "c"]);

    let services: Api<Service> = Api::all(edge.client());
    let selected = ListParams::default()
        .fields("spec.clusterIP!=None")
        .labels("!service.kubernetes.io/headless,!service.kubernetes.io/service-proxy-name");
    let with_ip = services.list(&selected).await.expect("services listed");
    assert_eq!(names(&with_ip.items), ["kubernetes"]);
    edge.stop().await;
}

#[tokio::test]
async fn a_watch_resumes_from_a_local_version_after_the_store_is_reopened() {
    let node = Node::new();
    let edge = node.start(true).await;
    edge.downstream("pods", pod("old", "n1", "10")).await;
    let pods: Api<Pod> = Api::namespaced(edge.client(), "default");
    let listed = pods.list(&ListParams::default()).await.expect("listed");
    let rv = listed
        .metadata
        .resource_version
        .expect("a list resourceVersion");
    assert_eq!(names(&listed.items), ["old"]);
    edge.stop().await;

    let edge = node.start(true).await;
    edge.downstream("pods", pod("new", "n1", "11")).await;
    let pods: Api<Pod> = Api::namespaced(edge.client(), "default");
    let stream = pods
        .watch(&WatchParams::default().timeout(5), &rv)
        .await
        .expect("the watch starts");
    let mut stream = stream.boxed();
    let first = tokio::time::timeout(WAIT, stream.try_next()).await;
    match first {
        Ok(Ok(Some(WatchEvent::Added(p)))) => assert_eq!(p.name_any(), "new"),
        other => panic!("expected only what changed after {rv}, got {other:?}"),
    }
    edge.stop().await;
}

#[tokio::test]
async fn the_resources_of_a_crd_sent_down_are_served_until_it_is_deleted() {
    let node = Node::new();
    let edge = node.start(false).await;
    let crd = json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "gadgets.example.org", "uid": "uid-crd", "resourceVersion": "5"},
        "spec": {
            "group": "example.org", "scope": "Namespaced",
            "names": {"plural": "gadgets", "singular": "gadget", "kind": "Gadget", "listKind": "GadgetList"},
            "versions": [{"name": "v1", "served": true, "storage": true}],
        },
    });
    const CRDS: &str = "customresourcedefinitions.apiextensions.k8s.io";
    edge.downstream(CRDS, crd.clone()).await;
    let gadget = json!({
        "apiVersion": "example.org/v1", "kind": "Gadget",
        "metadata": {"name": "g1", "namespace": "default", "uid": "uid-g1", "resourceVersion": "6"},
        "spec": {"x": 1},
    });
    edge.downstream("gadgets.example.org", gadget).await;
    let addr = edge.proxy.addr();
    let status = |path: &'static str| async move {
        testkit::http_get(addr, path)
            .await
            .map(|(code, _)| code)
            .unwrap_or(0)
    };
    eventually("the CRD's group version is discovered", WAIT, || async {
        status("/apis/example.org/v1").await == 200
    })
    .await;
    let (code, body) = testkit::http_get(addr, "/apis/example.org/v1/namespaces/default/gadgets")
        .await
        .expect("an answer");
    let list: Value = serde_json::from_str(&body).expect("JSON");
    assert_eq!(
        (code, list["items"][0]["spec"]["x"].as_i64()),
        (200, Some(1))
    );

    edge.downstream_delete(CRDS, crd).await;
    eventually("the CRD's group version is gone", WAIT, || async {
        status("/apis/example.org/v1").await == 404
    })
    .await;
    edge.stop().await;
}

#[tokio::test]
async fn with_certificates_it_serves_https() {
    let node = Node::new();
    let ca = pki::Ca::generate("test-ca", Duration::from_secs(3600)).expect("a CA");
    let server = ca
        .issue_server(&["127.0.0.1".to_owned()], Duration::from_secs(3600))
        .expect("a server certificate");
    let (cert, key, client_ca) = (
        node.path().join("tls.crt"),
        node.path().join("tls.key"),
        node.path().join("ca.crt"),
    );
    pki::write_pem(&cert, &server.cert_pem).expect("written");
    pki::write_pem(&key, &server.key_pem).expect("written");
    pki::write_pem(&client_ca, ca.cert_pem()).expect("written");
    let config = lwproxy::Config {
        tls_cert_file: cert,
        tls_private_key_file: key,
        tls_ca_file: client_ca,
        ..Edge::config()
    };
    let edge = node.start_with(false, config).await;
    edge.downstream("pods", pod("a", "n1", "1")).await;
    let url = edge.proxy.url();
    assert!(url.starts_with("https://127.0.0.1:"), "{url}");

    let mut config = kube::Config::new(url.parse().expect("a URI"));
    config.root_cert = Some(vec![ca.cert_der().expect("DER").to_vec()]);
    let client = kube::Client::try_from(config).expect("a client");
    let pods: Api<Pod> = Api::namespaced(client, "default");
    let listed = pods
        .list(&ListParams::default())
        .await
        .expect("listed over TLS");
    assert_eq!(names(&listed.items), ["a"]);
    edge.stop().await;
}

/// kubelet and kube-proxy talk protobuf by default: a list and a watch in protobuf, decoded,
/// hold what the cloud sent down.
#[tokio::test]
async fn kubelet_lists_and_watches_in_protobuf() {
    use http_body_util::BodyExt as _;

    let node = Node::new();
    let edge = node.start(true).await;
    edge.downstream("pods", pod("before", "n1", "10")).await;
    let client = edge.client();
    let get = |uri: &str| {
        http::Request::builder()
            .uri(uri)
            .header(
                "accept",
                "application/vnd.kubernetes.protobuf,application/json",
            )
            .body(kube::client::Body::empty())
            .unwrap()
    };
    let resp = client
        .send(get("/api/v1/pods?fieldSelector=spec.nodeName%3Dn1"))
        .await
        .unwrap();
    assert_eq!(
        resp.headers()["content-type"],
        "application/vnd.kubernetes.protobuf"
    );
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    let list = kpb::decode(&body).unwrap();
    assert_eq!(list["kind"], "PodList");
    assert_eq!(list["items"][0]["metadata"]["name"], "before");
    let rv = list["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_owned();

    let resp = client
        .send(get(&format!(
            "/api/v1/pods?watch=true&resourceVersion={rv}"
        )))
        .await
        .unwrap();
    assert_eq!(
        resp.headers()["content-type"],
        "application/vnd.kubernetes.protobuf;stream=watch"
    );
    edge.downstream("pods", pod("web-1", "n1", "11")).await;
    let mut body = resp.into_body();
    let mut buf = Vec::new();
    let event = tokio::time::timeout(WAIT, async {
        loop {
            let frame = body.frame().await.unwrap().unwrap();
            buf.extend_from_slice(&frame.into_data().unwrap_or_default());
            let (mut events, _) = kpb::read_watch_frames(&buf).unwrap();
            if !events.is_empty() {
                return events.remove(0);
            }
        }
    })
    .await
    .expect("a protobuf watch event");
    assert_eq!(event.0, "ADDED");
    assert_eq!(event.1["metadata"]["name"], "web-1");
    edge.stop().await;
}
