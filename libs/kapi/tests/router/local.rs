//! The router over the real local backend: what kubectl and kubelet do, end to end.

use axum::http::{Method, StatusCode};
use serde_json::json;

use crate::support::local_harness;

const JSON: &str = "application/json";

#[tokio::test]
async fn create_watch_patch_bind_and_delete_a_pod() {
    let h = local_harness().await;
    let list = h.get("/api/v1/namespaces/default/pods").await.json();
    let rv = list["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_owned();
    let mut w = h
        .watch(
            &format!("/api/v1/namespaces/default/pods?watch=true&resourceVersion={rv}"),
            None,
        )
        .await;

    let pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "web", "labels": {"app": "web"}},
        "spec": {"containers": [{"name": "c", "image": "nginx"}]},
    });
    let reply = h
        .call(
            Method::POST,
            "/api/v1/namespaces/default/pods?fieldManager=kubectl-create&fieldValidation=Strict",
            JSON,
            pod,
        )
        .await;
    assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.json());
    let created = reply.json();
    assert!(created["metadata"]["uid"].is_string());
    let added = w.next().await.unwrap();
    assert_eq!(added["type"], "ADDED");
    assert_eq!(
        added["object"]["metadata"]["uid"],
        created["metadata"]["uid"]
    );

    let reply = h
        .call(
            Method::PATCH,
            "/api/v1/namespaces/default/pods/web",
            "application/strategic-merge-patch+json",
            json!({"metadata": {"labels": {"tier": "front"}}}),
        )
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.json());
    let modified = w.next().await.unwrap();
    assert_eq!(modified["type"], "MODIFIED");
    assert_eq!(modified["object"]["metadata"]["labels"]["tier"], "front");

    let binding = json!({
        "apiVersion": "v1", "kind": "Binding", "metadata": {"name": "web"},
        "target": {"apiVersion": "v1", "kind": "Node", "name": "edge-1"},
    });
    let reply = h
        .call(
            Method::POST,
            "/api/v1/namespaces/default/pods/web/binding",
            JSON,
            binding,
        )
        .await;
    assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.json());
    let bound = w.next().await.unwrap();
    assert_eq!(bound["object"]["spec"]["nodeName"], "edge-1");
    let on_node = h
        .get("/api/v1/pods?fieldSelector=spec.nodeName%3Dedge-1&labelSelector=tier")
        .await
        .json();
    assert_eq!(on_node["items"][0]["metadata"]["name"], "web");

    let reply = h
        .call(
            Method::DELETE,
            "/api/v1/namespaces/default/pods/web",
            JSON,
            json!({"gracePeriodSeconds": 0}),
        )
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.json());
    let deleted = w.next().await.unwrap();
    assert_eq!(deleted["type"], "DELETED");
    h.get("/api/v1/namespaces/default/pods/web")
        .await
        .assert_status(404, "NotFound");
}

#[tokio::test]
async fn custom_resources_appear_when_their_crd_is_created() {
    let h = local_harness().await;
    let crd = json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "gadgets.example.org"},
        "spec": {
            "group": "example.org", "scope": "Namespaced",
            "names": {"plural": "gadgets", "singular": "gadget", "kind": "Gadget", "listKind": "GadgetList"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}],
        },
    });
    let reply = h
        .call(
            Method::POST,
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
            JSON,
            crd,
        )
        .await;
    assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.json());
    let mut served = false;
    for _ in 0..100 {
        if h.get("/apis/example.org/v1").await.status == StatusCode::OK {
            served = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert!(served, "the CRD's group version is discovered");
    let reply = h
        .call(
            Method::POST,
            "/apis/example.org/v1/namespaces/default/gadgets",
            JSON,
            json!({"apiVersion": "example.org/v1", "kind": "Gadget", "metadata": {"name": "g1"}, "spec": {"x": 1}}),
        )
        .await;
    assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.json());
    let list = h.get("/apis/example.org/v1/gadgets").await.json();
    assert_eq!(list["kind"], "GadgetList");
    assert_eq!(list["items"][0]["spec"]["x"], 1);
    let root = h.get("/openapi/v3").await.json();
    assert!(root["paths"]["apis/example.org/v1"].is_object());
}

#[tokio::test]
async fn an_autoscaler_reads_and_writes_as_v1_and_v2_alike() {
    let h = local_harness().await;
    let v2 = "/apis/autoscaling/v2/namespaces/default/horizontalpodautoscalers";
    let v1 = "/apis/autoscaling/v1/namespaces/default/horizontalpodautoscalers";
    let hpa = json!({
        "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "web"},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
            "minReplicas": 1, "maxReplicas": 5,
            "metrics": [
                {"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 80}}},
                {"type": "Resource", "resource": {"name": "memory", "target": {"type": "AverageValue", "averageValue": "100Mi"}}}
            ]
        }
    });
    let created = h.call(Method::POST, v2, "application/json", hpa).await;
    assert_eq!(created.status.as_u16(), 201, "{}", created.json());

    // Read as v1: the CPU target in v1's field, in a get, a list and a watch.
    let old = h.get(&format!("{v1}/web")).await.json();
    assert_eq!(old["apiVersion"], "autoscaling/v1");
    assert_eq!(old["spec"]["targetCPUUtilizationPercentage"], 80, "{old}");
    assert!(old["spec"].get("metrics").is_none(), "{old}");
    let list = h.get(v1).await.json();
    assert_eq!(
        list["items"][0]["spec"]["targetCPUUtilizationPercentage"],
        80
    );
    let mut w = h.watch(&format!("{v1}?watch=true"), None).await;
    let event = w.next().await.unwrap();
    assert_eq!(
        event["object"]["spec"]["targetCPUUtilizationPercentage"],
        80
    );

    // A v1 client changes the target: v2 readers see it, and the memory metric survived.
    let patch = json!({"spec": {"targetCPUUtilizationPercentage": 60}});
    let patched = h
        .call(
            Method::PATCH,
            &format!("{v1}/web"),
            "application/merge-patch+json",
            patch,
        )
        .await;
    assert_eq!(patched.status.as_u16(), 200, "{}", patched.json());
    assert_eq!(patched.json()["spec"]["targetCPUUtilizationPercentage"], 60);
    let new = h.get(&format!("{v2}/web")).await.json();
    let metrics = new["spec"]["metrics"].as_array().unwrap();
    assert_eq!(metrics.len(), 2, "{new}");
    assert_eq!(
        metrics[0]["resource"]["target"]["averageUtilization"], 60,
        "{new}"
    );
    assert_eq!(metrics[1]["resource"]["name"], "memory", "{new}");
    assert!(new["metadata"].get("annotations").is_none(), "{new}");

    // In protobuf too: the v1 list and get of an object stored as v2 are converted.
    let pb = "application/vnd.kubernetes.protobuf";
    h.call(Method::PUT, &format!("{v2}/web"), "application/json", new)
        .await;
    let list = h.get_with(v1, pb).await;
    assert_eq!(list.content_type(), pb);
    let list = kpb::decode(&list.body).unwrap();
    assert_eq!(
        list["items"][0]["spec"]["targetCPUUtilizationPercentage"], 60,
        "{list}"
    );
    let one = kpb::decode(&h.get_with(&format!("{v1}/web"), pb).await.body).unwrap();
    assert_eq!(one["apiVersion"], "autoscaling/v1");
    assert_eq!(one["spec"]["targetCPUUtilizationPercentage"], 60, "{one}");
}
