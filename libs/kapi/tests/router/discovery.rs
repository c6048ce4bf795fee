use axum::body::Body;
use axum::http::{Method, StatusCode};
use serde_json::Value;

use crate::support::{harness, request, widgets};

const AGGREGATED: &str = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json";

fn find<'a>(list: &'a Value, key: &str, name: &str) -> &'a Value {
    list.as_array()
        .expect("an array")
        .iter()
        .find(|e| e[key] == name)
        .unwrap_or_else(|| panic!("no {name} in {list}"))
}

#[tokio::test]
async fn version_is_the_configured_answer() {
    let h = harness();
    let reply = h.get("/version").await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(reply.json()["gitVersion"], "v1.34.0-kapi");
}

#[tokio::test]
async fn legacy_discovery_lists_core_resources_and_subresources() {
    let h = harness();
    let api = h.get("/api").await.json();
    assert_eq!(api["kind"], "APIVersions");
    assert_eq!(api["versions"][0], "v1");

    let reply = h.get("/api/v1").await;
    assert_eq!(reply.content_type(), "application/json");
    let list = reply.json();
    assert_eq!(list["kind"], "APIResourceList");
    assert_eq!(list["groupVersion"], "v1");
    let resources = &list["resources"];
    let pods = find(resources, "name", "pods");
    assert_eq!(pods["namespaced"], true);
    assert_eq!(pods["kind"], "Pod");
    assert_eq!(pods["singularName"], "pod");
    assert_eq!(pods["shortNames"][0], "po");
    assert!(
        pods["verbs"]
            .as_array()
            .unwrap()
            .iter()
            .any(|v| v == "watch")
    );
    let status = find(resources, "name", "pods/status");
    assert_eq!(status["kind"], "Pod");
    assert_eq!(
        status["verbs"],
        serde_json::json!(["get", "patch", "update"])
    );
    let binding = find(resources, "name", "pods/binding");
    assert_eq!(binding["kind"], "Binding");
    assert_eq!(binding["verbs"], serde_json::json!(["create"]));
    assert_eq!(find(resources, "name", "nodes")["namespaced"], false);
}

#[tokio::test]
async fn group_list_and_group_versions_follow_the_registry() {
    let h = harness();
    let groups = h.get("/apis").await.json();
    assert_eq!(groups["kind"], "APIGroupList");
    let example = find(&groups["groups"], "name", "example.com");
    assert_eq!(
        example["preferredVersion"]["groupVersion"],
        "example.com/v1"
    );
    assert!(
        groups["groups"]
            .as_array()
            .unwrap()
            .iter()
            .all(|g| g["name"] != ""),
        "the core group is not in /apis"
    );
    let widgets_list = h.get("/apis/example.com/v1").await.json();
    assert_eq!(widgets_list["groupVersion"], "example.com/v1");
    find(&widgets_list["resources"], "name", "widgets");
    let group = h.get("/apis/example.com").await.json();
    assert_eq!(group["kind"], "APIGroup");

    // A second version becomes preferred; removing the CRD removes the group.
    let mut v2 = widgets();
    v2.version = "v2".into();
    h.registry.upsert(vec![v2]);
    let groups = h.get("/apis").await.json();
    let example = find(&groups["groups"], "name", "example.com");
    assert_eq!(example["preferredVersion"]["version"], "v2");
    assert_eq!(example["versions"].as_array().unwrap().len(), 2);

    h.registry.remove("example.com", "widgets");
    h.get("/apis/example.com/v1")
        .await
        .assert_status(404, "NotFound");
    h.get("/apis/example.com/v1/widgets")
        .await
        .assert_status(404, "NotFound");
    let groups = h.get("/apis").await.json();
    assert!(
        groups["groups"]
            .as_array()
            .unwrap()
            .iter()
            .all(|g| g["name"] != "example.com")
    );
}

#[tokio::test]
async fn aggregated_discovery_is_labelled_as_such() {
    let h = harness();
    let reply = h.get_with("/api", AGGREGATED).await;
    assert_eq!(
        reply.content_type(),
        "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
    );
    let doc = reply.json();
    assert_eq!(doc["kind"], "APIGroupDiscoveryList");
    let core = &doc["items"][0];
    assert_eq!(core["metadata"]["name"], "");
    let v1 = &core["versions"][0];
    assert_eq!(v1["version"], "v1");
    let pods = find(&v1["resources"], "resource", "pods");
    assert_eq!(pods["scope"], "Namespaced");
    assert_eq!(pods["responseKind"]["kind"], "Pod");
    let binding = find(&pods["subresources"], "subresource", "binding");
    assert_eq!(binding["responseKind"]["kind"], "Binding");

    let reply = h.get_with("/apis", AGGREGATED).await;
    let doc = reply.json();
    let items = doc["items"].as_array().unwrap();
    let example = items
        .iter()
        .find(|g| g["metadata"]["name"] == "example.com")
        .expect("the custom group");
    let widgets = find(&example["versions"][0]["resources"], "resource", "widgets");
    assert_eq!(widgets["shortNames"][0], "wd");
    assert!(items.iter().all(|g| g["metadata"]["name"] != ""));
}

#[tokio::test]
async fn openapi_v3_advertises_field_validation_on_patch() {
    let h = harness();
    let root = h.get("/openapi/v3").await.json();
    let url = root["paths"]["api/v1"]["serverRelativeURL"]
        .as_str()
        .expect("a URL for api/v1")
        .to_owned();
    assert!(url.starts_with("/openapi/v3/api/v1?hash="), "{url}");
    assert!(root["paths"]["apis/example.com/v1"].is_object());
    let doc = h.get(&url).await.json();
    let paths = doc["paths"].as_object().expect("paths");
    let patch_ops: Vec<&Value> = paths
        .values()
        .filter_map(|item| item.get("patch"))
        .filter(|op| {
            op["x-kubernetes-group-version-kind"]
                == serde_json::json!({"group": "", "version": "v1", "kind": "Pod"})
        })
        .collect();
    assert!(!patch_ops.is_empty(), "a PATCH operation for Pod");
    for op in patch_ops {
        let params = op["parameters"].as_array().unwrap();
        assert!(
            params
                .iter()
                .any(|p| p["name"] == "fieldValidation" && p["in"] == "query")
        );
    }
    h.get("/openapi/v3/apis/nothing.io/v1")
        .await
        .assert_status(404, "NotFound");
}

#[tokio::test]
async fn protobuf_only_accept_is_406_and_with_json_is_json() {
    let h = harness();
    h.get_with("/api/v1", "application/vnd.kubernetes.protobuf")
        .await
        .assert_status(406, "NotAcceptable");
    let reply = h
        .get_with(
            "/api/v1",
            "application/vnd.kubernetes.protobuf,application/json",
        )
        .await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(reply.content_type(), "application/json");
}

#[tokio::test]
async fn unknown_paths_and_methods_get_status_errors() {
    let h = harness();
    h.get("/nope").await.assert_status(404, "NotFound");
    h.get("/api/v1/nopes").await.assert_status(404, "NotFound");
    h.get("/api/v1/namespaces/a/nodes")
        .await
        .assert_status(404, "NotFound");
    h.get("/api/v1/pods/x").await.assert_status(404, "NotFound");
    h.get("/api/v1/namespaces/a/pods/x/nosuchsub")
        .await
        .assert_status(404, "NotFound");
    let reply = h
        .send(request(Method::POST, "/api", &[], Body::empty()))
        .await;
    reply.assert_status(405, "MethodNotAllowed");
    let reply = h
        .send(request(
            Method::PUT,
            "/api/v1/namespaces/a/pods",
            &[],
            Body::empty(),
        ))
        .await;
    reply.assert_status(405, "MethodNotAllowed");
}
