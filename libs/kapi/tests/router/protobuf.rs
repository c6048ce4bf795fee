//! Kubernetes' protobuf encoding end to end with the local backend: what kubelet, kube-proxy
//! and client-go typed clients (kubectl's imperative commands) send and prefer by default.

use axum::body::Body;
use axum::http::Method;
use serde_json::{Value, json};

use crate::support::*;

const PB: &str = "application/vnd.kubernetes.protobuf";
/// kubelet's Accept.
const PB_THEN_JSON: &str = "application/vnd.kubernetes.protobuf,application/json";

fn pb_pod(ns: &str, name: &str) -> Vec<u8> {
    let mut p = pod(ns, name, "n1");
    p["apiVersion"] = json!("v1");
    p["kind"] = json!("Pod");
    kpb::encode(p).unwrap()
}

async fn send_pb(h: &Harness, method: Method, uri: &str, body: Vec<u8>) -> Reply {
    h.send(request(
        method,
        uri,
        &[("content-type", PB), ("accept", PB_THEN_JSON)],
        Body::from(body),
    ))
    .await
}

fn decoded(reply: &Reply) -> Value {
    assert_eq!(
        reply.content_type(),
        PB,
        "{}",
        String::from_utf8_lossy(&reply.body)
    );
    kpb::decode(&reply.body).expect("a protobuf body")
}

#[tokio::test]
async fn protobuf_create_get_list_and_delete_of_a_pod() {
    let h = local_harness().await;
    let created = send_pb(
        &h,
        Method::POST,
        "/api/v1/namespaces/default/pods",
        pb_pod("default", "p1"),
    )
    .await;
    assert_eq!(created.status.as_u16(), 201);
    let created = decoded(&created);
    assert_eq!(created["metadata"]["name"], "p1");
    assert!(created["metadata"]["uid"].is_string(), "{created}");
    // Defaulting ran on the decoded object, as for JSON.
    assert_eq!(created["spec"]["restartPolicy"], "Always", "{created}");

    // The same object in both encodings.
    let got = h
        .get_with("/api/v1/namespaces/default/pods/p1", PB_THEN_JSON)
        .await;
    let got = decoded(&got);
    let json = h.get("/api/v1/namespaces/default/pods/p1").await.json();
    assert_eq!(got, json);

    let list = h
        .get_with("/api/v1/namespaces/default/pods", PB_THEN_JSON)
        .await;
    let list = decoded(&list);
    assert_eq!(list["kind"], "PodList");
    assert_eq!(list["items"].as_array().unwrap().len(), 1);
    assert!(list["metadata"]["resourceVersion"].is_string());

    // client-go sends DeleteOptions in protobuf too, under the resource's group version.
    let opts =
        kpb::encode(json!({"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0}))
            .unwrap();
    let deleted = send_pb(
        &h,
        Method::DELETE,
        "/api/v1/namespaces/default/pods/p1",
        opts,
    )
    .await;
    assert_eq!(deleted.status.as_u16(), 200, "{:?}", deleted.body);
    h.get("/api/v1/namespaces/default/pods/p1")
        .await
        .assert_status(404, "NotFound");
}

#[tokio::test]
async fn a_protobuf_watch_is_length_prefixed_frames() {
    let h = local_harness().await;
    send_pb(
        &h,
        Method::POST,
        "/api/v1/namespaces/default/pods",
        pb_pod("default", "p1"),
    )
    .await;
    let mut w = h
        .watch(
            "/api/v1/namespaces/default/pods?watch=true",
            Some(PB_THEN_JSON),
        )
        .await;
    assert_eq!(w.status.as_u16(), 200);
    assert_eq!(
        w.headers["content-type"],
        "application/vnd.kubernetes.protobuf;stream=watch"
    );
    let (kind, obj) = w.next_frame().await.unwrap();
    assert_eq!(
        (kind.as_str(), obj["metadata"]["name"].as_str()),
        ("ADDED", Some("p1"))
    );
    // A JSON write shows up in the protobuf stream.
    h.call(
        Method::POST,
        "/api/v1/namespaces/default/pods",
        "application/json",
        pod("default", "p2", "n1"),
    )
    .await;
    let (kind, obj) = w.next_frame().await.unwrap();
    assert_eq!(
        (kind.as_str(), obj["metadata"]["name"].as_str()),
        ("ADDED", Some("p2"))
    );
    assert_eq!(obj["kind"], "Pod");
}

#[tokio::test]
async fn kinds_without_a_protobuf_form_answer_in_json_or_refuse_clearly() {
    let h = local_harness().await;
    // kube-proxy's Accept: protobuf first, then anything.
    let cm = h
        .get_with(
            "/api/v1/namespaces/default/configmaps",
            "application/vnd.kubernetes.protobuf, */*",
        )
        .await;
    assert_eq!(cm.content_type(), PB);
    // Discovery stays JSON.
    let d = h.get_with("/api/v1", PB_THEN_JSON).await;
    assert_eq!(d.content_type(), "application/json");
    // A namespace created in protobuf; a body of a kind with no protobuf form is 415.
    let ns =
        kpb::encode(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team"}}))
            .unwrap();
    assert_eq!(
        send_pb(&h, Method::POST, "/api/v1/namespaces", ns)
            .await
            .status
            .as_u16(),
        201
    );
    let mut body = kpb::MAGIC.to_vec();
    body.extend_from_slice(&[0x0a, 0x15, 0x0a, 0x0e]);
    body.extend_from_slice(b"example.com/v1");
    body.extend_from_slice(&[0x12, 0x03]);
    body.extend_from_slice(b"Foo");
    let reply = send_pb(
        &h,
        Method::POST,
        "/api/v1/namespaces/default/configmaps",
        body,
    )
    .await;
    let status = reply.assert_status(415, "UnsupportedMediaType");
    assert!(
        status["message"]
            .as_str()
            .unwrap()
            .contains("Foo (example.com/v1) has no protobuf form"),
        "{status}"
    );
}

#[tokio::test]
async fn an_object_its_type_cannot_read_is_answered_in_json() {
    let h = harness();
    // Stored as it is (the test backend validates nothing): no k8s-openapi Pod reads it.
    let mut odd = pod("a", "odd", "n1");
    odd["spec"]["containers"] = json!("not a list");
    h.put("pods", odd).await;
    let got = h
        .get_with("/api/v1/namespaces/a/pods/odd", PB_THEN_JSON)
        .await;
    assert_eq!(got.status.as_u16(), 200);
    assert_eq!(got.content_type(), "application/json");
    assert_eq!(got.json()["spec"]["containers"], "not a list");
    let list = h.get_with("/api/v1/namespaces/a/pods", PB_THEN_JSON).await;
    assert_eq!(list.status.as_u16(), 200);
    assert_eq!(list.content_type(), "application/json");
}
