//! The built-in surface beyond plain objects, over the real local backend: the `scale`,
//! `approval` and `ephemeralcontainers` subresources, the kubelet streams answered without a
//! tunnel, the health endpoints, and their discovery data.

use axum::http::{Method, StatusCode};
use serde_json::{Value, json};

use crate::support::{Harness, local_harness};

const JSON: &str = "application/json";
const MERGE: &str = "application/merge-patch+json";
const DEPLOYMENTS: &str = "/apis/apps/v1/namespaces/default/deployments";

async fn create(h: &Harness, collection: &str, obj: Value) -> Value {
    let reply = h.call(Method::POST, collection, JSON, obj).await;
    assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.json());
    reply.json()
}

fn deployment(name: &str, replicas: i64) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                 "template": {"metadata": {"labels": {"app": name}},
                              "spec": {"containers": [{"name": "c", "image": "nginx"}]}}},
    })
}

fn text(body: &[u8]) -> &str {
    std::str::from_utf8(body).unwrap()
}

#[tokio::test]
async fn scale_reads_and_writes_the_parents_replicas() {
    let h = local_harness().await;
    let created = create(&h, DEPLOYMENTS, deployment("web", 2)).await;
    let scale = h.get(&format!("{DEPLOYMENTS}/web/scale")).await.json();
    assert_eq!(scale["kind"], "Scale");
    assert_eq!(scale["apiVersion"], "autoscaling/v1");
    assert_eq!(scale["metadata"]["uid"], created["metadata"]["uid"]);
    assert_eq!(scale["spec"]["replicas"], 2);
    assert_eq!(scale["status"]["selector"], "app=web");

    let reply = h
        .call(
            Method::PATCH,
            &format!("{DEPLOYMENTS}/web/scale"),
            MERGE,
            json!({"spec": {"replicas": 5}}),
        )
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.json());
    let scaled = reply.json();
    assert_eq!(scaled["kind"], "Scale");
    assert_eq!(scaled["spec"]["replicas"], 5);
    let parent = h.get(&format!("{DEPLOYMENTS}/web")).await.json();
    assert_eq!(parent["spec"]["replicas"], 5);
    assert_eq!(
        parent["metadata"]["resourceVersion"],
        scaled["metadata"]["resourceVersion"]
    );

    // PUT with the old resourceVersion is a conflict; with none it applies.
    let mut stale = scale.clone();
    stale["spec"]["replicas"] = json!(1);
    let reply = h
        .call(
            Method::PUT,
            &format!("{DEPLOYMENTS}/web/scale"),
            JSON,
            stale.clone(),
        )
        .await;
    reply.assert_status(409, "Conflict");
    stale["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("resourceVersion");
    let reply = h
        .call(
            Method::PUT,
            &format!("{DEPLOYMENTS}/web/scale"),
            JSON,
            stale.clone(),
        )
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.json());
    assert_eq!(reply.json()["spec"]["replicas"], 1);

    stale["spec"]["replicas"] = json!(-1);
    let reply = h
        .call(
            Method::PUT,
            &format!("{DEPLOYMENTS}/web/scale"),
            JSON,
            stale,
        )
        .await;
    let status = reply.assert_status(422, "Invalid");
    assert_eq!(
        status["details"]["causes"][0]["field"], "spec.replicas",
        "{status}"
    );

    let missing = h.get(&format!("{DEPLOYMENTS}/nope/scale")).await;
    missing.assert_status(404, "NotFound");
    // Daemon sets have no scale subresource.
    let ds = h
        .get("/apis/apps/v1/namespaces/default/daemonsets/web/scale")
        .await;
    assert_eq!(ds.status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn approval_writes_only_the_conditions() {
    let h = local_harness().await;
    let csrs = "/apis/certificates.k8s.io/v1/certificatesigningrequests";
    let csr = json!({
        "apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest",
        "metadata": {"name": "alice"},
        "spec": {"request": "LS0tLS1CRUdJTg==", "signerName": "kubernetes.io/kube-apiserver-client",
                 "usages": ["client auth"], "username": "alice"},
    });
    let mut created = create(&h, csrs, csr).await;
    // The requester, as the server recorded it (the authenticated user, not the body's).
    let requester = created["spec"]["username"].clone();
    assert!(requester.is_string(), "{created}");
    created["spec"]["username"] = json!("mallory");
    created["status"] = json!({"conditions": [{"type": "Approved", "status": "True",
                                               "reason": "KubectlApprove", "message": "ok"}]});
    let reply = h
        .call(
            Method::PUT,
            &format!("{csrs}/alice/approval"),
            JSON,
            created,
        )
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.json());
    let approved = h.get(&format!("{csrs}/alice")).await.json();
    let condition = &approved["status"]["conditions"][0];
    assert_eq!(condition["type"], "Approved");
    assert!(condition["lastUpdateTime"].is_string(), "{condition}");
    assert_eq!(
        approved["spec"]["username"], requester,
        "approval leaves the spec alone"
    );
    let table = h
        .get_with(csrs, "application/json;as=Table;v=v1;g=meta.k8s.io")
        .await
        .json();
    assert_eq!(table["rows"][0]["cells"][5], "Approved");

    // Denying an approved request, or dropping its approval, is refused.
    let mut both = approved.clone();
    both["status"]["conditions"]
        .as_array_mut()
        .unwrap()
        .push(json!({"type": "Denied", "status": "True"}));
    let reply = h
        .call(Method::PUT, &format!("{csrs}/alice/approval"), JSON, both)
        .await;
    reply.assert_status(422, "Invalid");
    let mut dropped = approved.clone();
    dropped["status"]["conditions"] = json!([]);
    let reply = h
        .call(
            Method::PUT,
            &format!("{csrs}/alice/approval"),
            JSON,
            dropped,
        )
        .await;
    reply.assert_status(422, "Invalid");

    // status writes the certificate but never the approval conditions.
    let mut issued = approved.clone();
    issued["status"] = json!({"certificate": "Y2VydA==", "conditions": [
        {"type": "Denied", "status": "True"}, {"type": "Failed", "status": "True"}]});
    let reply = h
        .call(Method::PUT, &format!("{csrs}/alice/status"), JSON, issued)
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.json());
    let stored = h.get(&format!("{csrs}/alice")).await.json();
    let kinds: Vec<&str> = stored["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["type"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["Approved", "Failed"], "{stored}");
    assert_eq!(stored["status"]["certificate"], "Y2VydA==");
}

#[tokio::test]
async fn ephemeral_containers_are_added_never_removed() {
    let h = local_harness().await;
    let pods = "/api/v1/namespaces/default/pods";
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web"},
                     "spec": {"containers": [{"name": "c", "image": "nginx"}]}});
    create(&h, pods, pod).await;
    let debug = json!({"name": "debugger", "image": "busybox", "targetContainerName": "c"});
    let reply = h
        .call(
            Method::PATCH,
            &format!("{pods}/web/ephemeralcontainers"),
            "application/strategic-merge-patch+json",
            json!({"spec": {"ephemeralContainers": [debug]}}),
        )
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.json());
    let read = h
        .get(&format!("{pods}/web/ephemeralcontainers"))
        .await
        .json();
    assert_eq!(read["kind"], "Pod");
    assert_eq!(read["spec"]["ephemeralContainers"][0]["name"], "debugger");

    let mut removed = read.clone();
    removed["spec"]["ephemeralContainers"] = json!([]);
    let reply = h
        .call(
            Method::PUT,
            &format!("{pods}/web/ephemeralcontainers"),
            JSON,
            removed,
        )
        .await;
    let status = reply.assert_status(422, "Invalid");
    assert!(
        status["message"]
            .as_str()
            .unwrap()
            .contains("may not be removed"),
        "{status}"
    );
}

#[tokio::test]
async fn kubelet_streams_answer_that_the_node_cannot_be_reached() {
    let h = local_harness().await;
    let pods = "/api/v1/namespaces/default/pods";
    let pod = |name: &str, node: Option<&str>| {
        let mut pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
                             "spec": {"containers": [{"name": "c", "image": "nginx"}]}});
        if let Some(node) = node {
            pod["spec"]["nodeName"] = json!(node);
        }
        pod
    };
    create(&h, pods, pod("pending", None)).await;
    create(&h, pods, pod("placed", Some("edge-1"))).await;

    let reply = h.get(&format!("{pods}/pending/log")).await;
    let status = reply.assert_status(400, "BadRequest");
    assert_eq!(
        status["message"],
        "pod pending does not have a host assigned"
    );

    for (method, sub) in [
        (Method::GET, "log"),
        (Method::POST, "exec"),
        (Method::GET, "portforward"),
    ] {
        let reply = h
            .call(
                method,
                &format!("{pods}/placed/{sub}?container=c"),
                JSON,
                json!({}),
            )
            .await;
        let status = reply.assert_status(500, "");
        let message = status["message"].as_str().unwrap();
        assert!(message.starts_with("error dialing backend: "), "{message}");
        assert!(message.contains("\"edge-1\""), "{message}");
    }
    let reply = h.get(&format!("{pods}/placed/log?container=other")).await;
    reply.assert_status(400, "BadRequest");
    h.get(&format!("{pods}/gone/log"))
        .await
        .assert_status(404, "NotFound");
    let put = h
        .call(Method::PUT, &format!("{pods}/placed/log"), JSON, json!({}))
        .await;
    put.assert_status(405, "MethodNotAllowed");

    h.get("/api/v1/nodes/edge-1/proxy/metrics")
        .await
        .assert_status(404, "NotFound");
    let node = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "edge-1"}});
    create(&h, "/api/v1/nodes", node).await;
    for path in [
        "/api/v1/nodes/edge-1/proxy",
        "/api/v1/nodes/edge-1/proxy/metrics",
    ] {
        let status = h.get(path).await.assert_status(500, "");
        let message = status["message"].as_str().unwrap();
        assert!(message.contains("nodes/proxy"), "{status}");
    }
}

#[tokio::test]
async fn a_binding_posted_to_the_collection_binds_the_pod_it_names() {
    let h = local_harness().await;
    let pods = "/api/v1/namespaces/default/pods";
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web"},
                     "spec": {"containers": [{"name": "c", "image": "nginx"}]}});
    create(&h, pods, pod).await;
    let bindings = "/api/v1/namespaces/default/bindings";
    let binding = json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "web"},
                         "target": {"apiVersion": "v1", "kind": "Node", "name": "edge-1"}});
    let reply = h.call(Method::POST, bindings, JSON, binding).await;
    assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.json());
    assert_eq!(reply.json()["status"], "Success");
    let bound = h.get(&format!("{pods}/web")).await.json();
    assert_eq!(bound["spec"]["nodeName"], "edge-1");
    let nameless = json!({"apiVersion": "v1", "kind": "Binding", "metadata": {},
                          "target": {"name": "edge-1"}});
    let reply = h.call(Method::POST, bindings, JSON, nameless).await;
    reply.assert_status(422, "Invalid");
    h.get(bindings).await.assert_status(405, "MethodNotAllowed");
}

#[tokio::test]
async fn health_endpoints_answer_like_kube_apiserver() {
    let h = local_harness().await;
    for path in [
        "/healthz",
        "/livez",
        "/readyz",
        "/livez/ping",
        "/readyz/etcd",
    ] {
        let reply = h.get(path).await;
        assert_eq!(reply.status, StatusCode::OK, "{path}");
        assert_eq!(text(&reply.body), "ok", "{path}");
        assert_eq!(reply.content_type(), "text/plain; charset=utf-8");
    }
    let verbose = h.get("/readyz?verbose").await;
    assert_eq!(
        text(&verbose.body),
        "[+]ping ok\n[+]log ok\n[+]etcd ok\n[+]etcd-readiness ok\n\
         [+]poststarthook/crd-informer-synced ok\nreadyz check passed\n"
    );
    let excluded = h.get("/livez?verbose&exclude=etcd&exclude=nope").await;
    let body = text(&excluded.body);
    assert!(body.contains("[+]etcd excluded: ok\n"), "{body}");
    assert!(body.contains("no matches for \"nope\""), "{body}");
    assert!(body.ends_with("livez check passed\n"), "{body}");
    assert_eq!(h.get("/readyz/nope").await.status, StatusCode::NOT_FOUND);
    assert_eq!(
        h.get("/livez/etcd-readiness").await.status,
        StatusCode::NOT_FOUND
    );
    let post = h.call(Method::POST, "/healthz", JSON, json!({})).await;
    assert_eq!(post.status, StatusCode::METHOD_NOT_ALLOWED);
}

#[tokio::test]
async fn discovery_lists_the_subresources_with_their_kinds() {
    let h = local_harness().await;
    let apps = h.get("/apis/apps/v1").await.json();
    let entry = |doc: &Value, name: &str| {
        doc["resources"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["name"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("{name} in {doc}"))
    };
    let scale = entry(&apps, "deployments/scale");
    assert_eq!(
        (
            scale["group"].clone(),
            scale["version"].clone(),
            scale["kind"].clone()
        ),
        (json!("autoscaling"), json!("v1"), json!("Scale"))
    );
    assert_eq!(entry(&apps, "deployments")["shortNames"], json!(["deploy"]));
    assert_eq!(entry(&apps, "deployments")["categories"], json!(["all"]));
    let core = h.get("/api/v1").await.json();
    assert_eq!(entry(&core, "pods/log")["verbs"], json!(["get"]));
    assert_eq!(entry(&core, "pods/exec")["verbs"], json!(["create", "get"]));
    assert_eq!(
        entry(&core, "pods/ephemeralcontainers")["verbs"],
        json!(["get", "patch", "update"])
    );
    assert_eq!(
        entry(&core, "replicationcontrollers/scale")["kind"],
        "Scale"
    );
    let csr = h.get("/apis/certificates.k8s.io/v1").await.json();
    assert_eq!(
        entry(&csr, "certificatesigningrequests/approval")["kind"],
        "CertificateSigningRequest"
    );
    let autoscaling = h.get("/apis/autoscaling").await.json();
    assert_eq!(autoscaling["preferredVersion"]["version"], "v2");
}
