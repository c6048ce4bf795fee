use axum::http::StatusCode;
use serde_json::{Value, json};

use crate::support::{Harness, harness, object, pod};

const TABLE: &str = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json";

fn names(list: &Value) -> Vec<String> {
    list["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|i| {
            let m = &i["metadata"];
            match m["namespace"].as_str() {
                Some(ns) => format!("{ns}/{}", m["name"].as_str().unwrap()),
                None => m["name"].as_str().unwrap().to_owned(),
            }
        })
        .collect()
}

async fn seeded() -> Harness {
    let h = harness();
    h.put("pods", pod("b", "p2", "n1")).await;
    h.put("pods", pod("a", "p3", "n2")).await;
    h.put("pods", pod("a", "p1", "n1")).await;
    h.put(
        "pods",
        object(
            "a",
            "db",
            json!({"app": "db", "tier": "back"}),
            json!({"spec": {}}),
        ),
    )
    .await;
    h.put("nodes", object("", "n1", json!({}), json!({}))).await;
    h
}

#[tokio::test]
async fn lists_carry_kind_revision_and_ordered_items() {
    let h = seeded().await;
    let reply = h.get("/api/v1/namespaces/a/pods").await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(reply.content_type(), "application/json");
    let list = reply.json();
    assert_eq!(list["kind"], "PodList");
    assert_eq!(list["apiVersion"], "v1");
    assert_eq!(
        list["metadata"]["resourceVersion"],
        h.store.revision().to_string()
    );
    assert!(list["metadata"].get("continue").is_none());
    assert_eq!(names(&list), ["a/db", "a/p1", "a/p3"]);
    assert_eq!(list["items"][0]["kind"], "Pod");

    let all = h.get("/api/v1/pods").await.json();
    assert_eq!(names(&all), ["a/db", "a/p1", "a/p3", "b/p2"]);
    let nodes = h.get("/api/v1/nodes").await.json();
    assert_eq!(nodes["kind"], "NodeList");
    assert_eq!(names(&nodes), ["n1"]);
    let empty = h.get("/api/v1/namespaces/zzz/pods").await.json();
    assert_eq!(empty["items"], json!([]));
}

#[tokio::test]
async fn label_selectors_use_the_full_syntax() {
    let h = seeded().await;
    let select = |q: &str| {
        let uri = format!("/api/v1/pods?labelSelector={q}");
        let h = &h;
        async move { names(&h.get(&uri).await.json()) }
    };
    assert_eq!(select("app%3Dweb").await, ["a/p1", "a/p3", "b/p2"]);
    assert_eq!(select("app+in+(db,x)").await, ["a/db"]);
    assert_eq!(select("tier").await, ["a/db"]);
    assert_eq!(select("!tier").await, ["a/p1", "a/p3", "b/p2"]);
    assert_eq!(select("app!%3Dweb,tier+notin+(front)").await, ["a/db"]);
    h.get("/api/v1/pods?labelSelector=app+in+(")
        .await
        .assert_status(400, "BadRequest");
}

#[tokio::test]
async fn field_selectors_use_metadata_and_selectable_fields() {
    let h = seeded().await;
    let select = |q: &str| {
        let uri = format!("/api/v1/pods?fieldSelector={q}");
        let h = &h;
        async move { names(&h.get(&uri).await.json()) }
    };
    assert_eq!(select("spec.nodeName%3Dn1").await, ["a/p1", "b/p2"]);
    assert_eq!(select("spec.nodeName!%3Dn1").await, ["a/db", "a/p3"]);
    assert_eq!(select("metadata.name%3Dp2").await, ["b/p2"]);
    assert_eq!(
        select("metadata.namespace%3Da,spec.nodeName%3Dn1").await,
        ["a/p1"]
    );
    let body = h
        .get("/api/v1/pods?fieldSelector=spec.bogus%3Dx")
        .await
        .assert_status(400, "BadRequest");
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("field label not supported: spec.bogus"),
        "{body}"
    );
    h.get("/api/v1/nodes?fieldSelector=spec.nodeName%3Dn1")
        .await
        .assert_status(400, "BadRequest");
}

#[tokio::test]
async fn pages_share_one_resource_version_and_end_without_continue() {
    let h = seeded().await;
    let first = h.get("/api/v1/pods?limit=3").await.json();
    let rv = first["metadata"]["resourceVersion"].clone();
    assert_eq!(names(&first), ["a/db", "a/p1", "a/p3"]);
    let token = first["metadata"]["continue"]
        .as_str()
        .expect("a continue token")
        .to_owned();
    // Writes between pages do not change the reported revision.
    h.put("pods", pod("c", "p9", "n1")).await;
    let second = h
        .get(&format!("/api/v1/pods?limit=3&continue={token}"))
        .await
        .json();
    assert_eq!(second["metadata"]["resourceVersion"], rv);
    assert_eq!(names(&second), ["b/p2", "c/p9"]);
    assert!(second["metadata"].get("continue").is_none());

    h.get("/api/v1/pods?limit=3&continue=garbage!")
        .await
        .assert_status(400, "BadRequest");
    h.get(&format!(
        "/api/v1/pods?limit=3&continue={token}&resourceVersion=3"
    ))
    .await
    .assert_status(400, "BadRequest");
}

#[tokio::test]
async fn resource_version_match_rules() {
    let h = seeded().await;
    let now = h.store.revision();
    let exact = h
        .get(&format!(
            "/api/v1/pods?resourceVersion={now}&resourceVersionMatch=Exact"
        ))
        .await;
    assert_eq!(exact.status, StatusCode::OK);
    h.get("/api/v1/pods?resourceVersion=1&resourceVersionMatch=Exact")
        .await
        .assert_status(410, "Expired");
    // Legacy: resourceVersion with limit means Exact.
    h.get("/api/v1/pods?resourceVersion=1&limit=10")
        .await
        .assert_status(410, "Expired");
    let older = h.get("/api/v1/pods?resourceVersion=1").await;
    assert_eq!(older.status, StatusCode::OK, "not older than 1");
    h.get("/api/v1/pods?resourceVersionMatch=Exact")
        .await
        .assert_status(422, "Invalid");
    h.get("/api/v1/pods?resourceVersion=abc")
        .await
        .assert_status(400, "BadRequest");
    let body = h
        .get(&format!("/api/v1/pods?resourceVersion={}", now + 100))
        .await
        .assert_status(504, "Timeout");
    assert_eq!(
        body["details"]["causes"][0]["reason"],
        "ResourceVersionTooLarge"
    );
}

#[tokio::test]
async fn get_answers_the_object_or_not_found() {
    let h = seeded().await;
    let pod = h.get("/api/v1/namespaces/a/pods/p1").await;
    assert_eq!(pod.status, StatusCode::OK);
    let pod = pod.json();
    assert_eq!(pod["kind"], "Pod");
    assert_eq!(pod["spec"]["nodeName"], "n1");
    let status = h.get("/api/v1/namespaces/a/pods/p1/status").await.json();
    assert_eq!(status["metadata"]["name"], "p1");
    let body = h
        .get("/api/v1/namespaces/a/pods/nope")
        .await
        .assert_status(404, "NotFound");
    assert_eq!(body["message"], "pods \"nope\" not found");
    h.get("/api/v1/nodes/n1").await.json();
    h.get("/api/v1/namespaces/a/pods/p1/binding")
        .await
        .assert_status(405, "MethodNotAllowed");
}

#[tokio::test]
async fn tables_for_get_and_list() {
    let h = seeded().await;
    let table = h.get_with("/api/v1/namespaces/a/pods?limit=2", TABLE).await;
    assert_eq!(table.status, StatusCode::OK);
    let table = table.json();
    assert_eq!(table["kind"], "Table");
    assert_eq!(table["apiVersion"], "meta.k8s.io/v1");
    assert!(table["metadata"]["continue"].is_string());
    assert!(table["metadata"]["resourceVersion"].is_string());
    assert_eq!(table["rows"].as_array().unwrap().len(), 2);
    assert_eq!(table["columnDefinitions"][0]["name"], "Name");
    let row = &table["rows"][0];
    assert_eq!(row["cells"][0], "db");
    assert_eq!(row["object"]["kind"], "PartialObjectMetadata");
    assert_eq!(row["object"]["metadata"]["namespace"], "a");

    let one = h
        .get_with("/api/v1/namespaces/a/pods/p1?includeObject=Object", TABLE)
        .await
        .json();
    assert_eq!(one["kind"], "Table");
    assert_eq!(one["rows"].as_array().unwrap().len(), 1);
    assert_eq!(one["rows"][0]["object"]["kind"], "Pod");
}

#[tokio::test]
async fn metadata_only_lists() {
    let h = seeded().await;
    let list = h
        .get_with(
            "/api/v1/namespaces/a/pods",
            "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1",
        )
        .await
        .json();
    assert_eq!(list["kind"], "PartialObjectMetadataList");
    assert_eq!(list["items"][0]["kind"], "PartialObjectMetadata");
    assert_eq!(list["items"][0]["metadata"]["name"], "db");
    assert!(list["items"][0].get("spec").is_none());
}

#[tokio::test]
async fn custom_resources_list_like_builtins() {
    let h = harness();
    h.put(
        "widgets",
        object("a", "w1", json!({}), json!({"spec": {"size": 1}})),
    )
    .await;
    let list = h
        .get("/apis/example.com/v1/namespaces/a/widgets")
        .await
        .json();
    assert_eq!(list["kind"], "WidgetList");
    assert_eq!(list["apiVersion"], "example.com/v1");
    assert_eq!(list["items"][0]["kind"], "Widget");
    let w = h
        .get("/apis/example.com/v1/namespaces/a/widgets/w1")
        .await
        .json();
    assert_eq!(w["spec"]["size"], 1);
}

#[tokio::test]
async fn requests_without_a_user_are_401() {
    let mut h = harness();
    h.api.default_user = None;
    h.get("/api/v1/pods")
        .await
        .assert_status(401, "Unauthorized");
    let reply = h.get("/api/v1").await;
    assert_eq!(reply.status, StatusCode::OK, "discovery needs no user");
}
