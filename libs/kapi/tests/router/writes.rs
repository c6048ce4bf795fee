use axum::body::Body;
use axum::http::{Method, StatusCode};
use serde_json::json;

use crate::support::{harness, object, pod, request};

const JSON: &str = "application/json";

#[tokio::test]
async fn create_fills_in_type_and_namespace_and_answers_201() {
    let h = harness();
    let body = json!({"metadata": {"name": "p1"}, "spec": {"nodeName": "n1"}});
    let reply = h
        .call(
            Method::POST,
            "/api/v1/namespaces/a/pods?fieldManager=kubectl-create&fieldValidation=Strict",
            JSON,
            body,
        )
        .await;
    assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.json());
    let created = reply.json();
    assert_eq!(created["kind"], "Pod");
    assert_eq!(created["apiVersion"], "v1");
    assert_eq!(created["metadata"]["namespace"], "a");
    assert_eq!(
        created["metadata"]["resourceVersion"],
        h.store.revision().to_string()
    );
    let got = h.get("/api/v1/namespaces/a/pods/p1").await.json();
    assert_eq!(got["spec"]["nodeName"], "n1");

    h.call(
        Method::POST,
        "/api/v1/namespaces/a/pods",
        JSON,
        pod("a", "p1", "n1"),
    )
    .await
    .assert_status(409, "AlreadyExists");
}

#[tokio::test]
async fn bad_bodies_are_refused_before_the_backend() {
    let h = harness();
    let uri = "/api/v1/namespaces/a/pods";
    h.call(Method::POST, uri, JSON, pod("b", "p1", "n1"))
        .await
        .assert_status(400, "BadRequest");
    let mut wrong_kind = pod("a", "p1", "n1");
    wrong_kind["kind"] = json!("Node");
    h.call(Method::POST, uri, JSON, wrong_kind)
        .await
        .assert_status(400, "BadRequest");
    let mut wrong_version = pod("a", "p1", "n1");
    wrong_version["apiVersion"] = json!("v2");
    h.call(Method::POST, uri, JSON, wrong_version)
        .await
        .assert_status(400, "BadRequest");
    let reply = h
        .send(request(
            Method::POST,
            uri,
            &[("content-type", JSON)],
            Body::from("{not json"),
        ))
        .await;
    reply.assert_status(400, "BadRequest");
    h.call(Method::POST, uri, JSON, json!([1, 2]))
        .await
        .assert_status(400, "BadRequest");
    let body = h
        .call(Method::POST, uri, "application/yaml", pod("a", "p1", "n1"))
        .await
        .assert_status(415, "UnsupportedMediaType");
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("application/json")
    );
    // JSON labelled as protobuf does not decode: 400, naming the missing magic.
    let body = h
        .call(
            Method::POST,
            uri,
            "application/vnd.kubernetes.protobuf",
            pod("a", "p1", "n1"),
        )
        .await
        .assert_status(400, "BadRequest");
    assert!(
        body["message"].as_str().unwrap().contains("k8s\\0"),
        "{body}"
    );
    h.call(
        Method::POST,
        &format!("{uri}?fieldValidation=Sloppy"),
        JSON,
        pod("a", "p1", "n1"),
    )
    .await
    .assert_status(400, "BadRequest");
    h.call(Method::POST, "/api/v1/pods", JSON, pod("a", "p1", "n1"))
        .await
        .assert_status(405, "MethodNotAllowed");
    h.get("/api/v1/namespaces/a/pods/p1")
        .await
        .assert_status(404, "NotFound");
}

#[tokio::test]
async fn dry_run_reaches_the_backend() {
    let h = harness();
    let reply = h
        .call(
            Method::POST,
            "/api/v1/namespaces/a/pods?dryRun=All",
            JSON,
            pod("a", "p1", "n1"),
        )
        .await;
    assert_eq!(reply.status, StatusCode::CREATED);
    h.get("/api/v1/namespaces/a/pods/p1")
        .await
        .assert_status(404, "NotFound");
    h.call(
        Method::POST,
        "/api/v1/namespaces/a/pods?dryRun=Some",
        JSON,
        pod("a", "p1", "n1"),
    )
    .await
    .assert_status(400, "BadRequest");
}

#[tokio::test]
async fn update_checks_the_name_and_patch_the_content_type() {
    let h = harness();
    h.put("pods", pod("a", "p1", "n1")).await;
    let uri = "/api/v1/namespaces/a/pods/p1";
    h.call(Method::PUT, uri, JSON, pod("a", "p2", "n1"))
        .await
        .assert_status(400, "BadRequest");
    let reply = h.call(Method::PUT, uri, JSON, pod("a", "p1", "n2")).await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(reply.json()["spec"]["nodeName"], "n2");

    let reply = h
        .call(
            Method::PATCH,
            uri,
            "application/merge-patch+json",
            json!({"metadata": {"labels": {"x": "y"}}}),
        )
        .await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(reply.json()["metadata"]["labels"]["x"], "y");
    h.call(Method::PATCH, uri, "text/plain", json!({}))
        .await
        .assert_status(415, "UnsupportedMediaType");
    let reply = h
        .send(request(Method::PATCH, uri, &[], Body::from("{}")))
        .await;
    reply.assert_status(415, "UnsupportedMediaType");

    let status = h
        .call(
            Method::PATCH,
            &format!("{uri}/status"),
            "application/merge-patch+json",
            json!({"status": {"phase": "Running"}}),
        )
        .await;
    assert_eq!(status.status, StatusCode::OK);
    assert_eq!(status.json()["status"]["phase"], "Running");
}

#[tokio::test]
async fn delete_and_delete_collection() {
    let h = harness();
    h.put("pods", pod("a", "p1", "n1")).await;
    h.put("pods", pod("a", "p2", "n1")).await;
    h.put(
        "pods",
        object("a", "keep", json!({"app": "db"}), json!({"spec": {}})),
    )
    .await;
    let reply = h
        .call(
            Method::DELETE,
            "/api/v1/namespaces/a/pods/p1",
            JSON,
            json!({"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0}),
        )
        .await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(reply.json()["metadata"]["name"], "p1");
    h.get("/api/v1/namespaces/a/pods/p1")
        .await
        .assert_status(404, "NotFound");
    h.call(
        Method::DELETE,
        "/api/v1/namespaces/a/pods/p2?propagationPolicy=Sometimes",
        JSON,
        json!({}),
    )
    .await
    .assert_status(422, "Invalid");
    let reply = h
        .send(request(
            Method::DELETE,
            "/api/v1/namespaces/a/pods/p2",
            &[("content-type", "application/vnd.kubernetes.protobuf")],
            Body::from("k8s\0..."),
        ))
        .await;
    reply.assert_status(400, "BadRequest");

    let reply = h
        .send(request(
            Method::DELETE,
            "/api/v1/namespaces/a/pods?labelSelector=app%3Dweb",
            &[],
            Body::empty(),
        ))
        .await;
    assert_eq!(reply.status, StatusCode::OK);
    let list = reply.json();
    assert_eq!(list["kind"], "PodList");
    assert_eq!(list["items"][0]["metadata"]["name"], "p2");
    assert_eq!(list["items"].as_array().unwrap().len(), 1);
    let left = h.get("/api/v1/namespaces/a/pods").await.json();
    assert_eq!(left["items"][0]["metadata"]["name"], "keep");
    assert_eq!(left["items"].as_array().unwrap().len(), 1);
}

#[tokio::test]
async fn binding_is_a_subresource_create() {
    let h = harness();
    h.put("pods", pod("a", "p1", "")).await;
    let binding = json!({
        "apiVersion": "v1", "kind": "Binding",
        "metadata": {"name": "p1"},
        "target": {"apiVersion": "v1", "kind": "Node", "name": "n7"},
    });
    let reply = h
        .call(
            Method::POST,
            "/api/v1/namespaces/a/pods/p1/binding",
            JSON,
            binding,
        )
        .await;
    assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.json());
    assert_eq!(reply.json()["status"], "Success");
    let got = h.get("/api/v1/namespaces/a/pods/p1").await.json();
    assert_eq!(got["spec"]["nodeName"], "n7");
    h.call(
        Method::PUT,
        "/api/v1/namespaces/a/pods/p1/binding",
        JSON,
        json!({}),
    )
    .await
    .assert_status(405, "MethodNotAllowed");
}

#[tokio::test]
async fn writes_without_a_user_are_401() {
    let mut h = harness();
    h.api.default_user = None;
    h.call(
        Method::POST,
        "/api/v1/namespaces/a/pods",
        JSON,
        pod("a", "p1", "n1"),
    )
    .await
    .assert_status(401, "Unauthorized");
    let mut req = request(
        Method::POST,
        "/api/v1/namespaces/a/pods",
        &[("content-type", JSON)],
        Body::from(pod("a", "p1", "n1").to_string()),
    );
    req.extensions_mut().insert(kapi::User {
        name: "system:node:n1".into(),
        groups: vec!["system:nodes".into()],
    });
    let reply = h.send(req).await;
    assert_eq!(reply.status, StatusCode::CREATED);
}
