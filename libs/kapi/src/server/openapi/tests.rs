use std::sync::Arc;
use std::time::Instant;

use apimachinery::ApiError;
use apimachinery::ResourceInfo;
use apimachinery::patch::PatchType;
use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use bytes::Bytes;
use http_body_util::BodyExt;
use objstore::{StoreConfig, Writer};
use prost::Message;
use serde_json::{Value, json};
use tower::ServiceExt;

use super::document::Model;
use super::{REF_V2, proto};
use crate::{Api, Backend, DeleteOptions, User, WriteRequest};

fn pods() -> Arc<ResourceInfo> {
    Arc::new(ResourceInfo::new("", "v1", "Pod", "pods", true))
}

fn widgets() -> Arc<ResourceInfo> {
    let mut r = ResourceInfo::new("example.com", "v1", "Widget", "widgets", true);
    r.custom = true;
    Arc::new(r)
}

fn widget_crd() -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": { "name": "widgets.example.com" },
        "spec": {
            "group": "example.com",
            "names": { "kind": "Widget", "plural": "widgets" },
            "scope": "Namespaced",
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "schema": { "openAPIV3Schema": {
                    "type": "object",
                    "properties": { "spec": {
                        "type": "object",
                        "description": "The widget's wishes.",
                        "properties": { "size": { "type": "integer", "description": "How big." } },
                    } },
                } },
            }],
        },
    })
}

fn model() -> Model {
    Model::new(&[pods(), widgets()], &[widget_crd()])
}

#[test]
fn pod_v3_schema_has_containers_with_merge_key_and_descriptions() {
    let v3 = model().v3();
    let doc = &v3["api/v1"];
    let schemas = &doc["components"]["schemas"];
    let pod = &schemas["io.k8s.api.core.v1.Pod"];
    assert_eq!(
        pod["x-kubernetes-group-version-kind"],
        json!([{ "group": "", "kind": "Pod", "version": "v1" }])
    );
    assert!(
        pod["description"]
            .as_str()
            .unwrap()
            .contains("collection of containers")
    );
    assert_eq!(
        pod["properties"]["spec"]["allOf"][0]["$ref"],
        "#/components/schemas/io.k8s.api.core.v1.PodSpec"
    );
    assert!(pod["properties"]["spec"]["description"].is_string());
    let containers = &schemas["io.k8s.api.core.v1.PodSpec"]["properties"]["containers"];
    assert_eq!(containers["x-kubernetes-patch-merge-key"], "name");
    assert_eq!(containers["x-kubernetes-patch-strategy"], "merge");
    assert_eq!(containers["x-kubernetes-list-type"], "map");
    assert_eq!(
        containers["items"]["$ref"],
        "#/components/schemas/io.k8s.api.core.v1.Container"
    );
    let image = &schemas["io.k8s.api.core.v1.Container"]["properties"]["image"];
    assert!(
        image["description"]
            .as_str()
            .unwrap()
            .contains("Container image name")
    );
    assert!(schemas["io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"].is_object());
    // Nothing in the document refers outside it.
    let text = doc.to_string();
    assert!(!text.contains(REF_V2), "v2 references in v3");
}

#[test]
fn v3_patch_operations_declare_field_validation_and_patch_types() {
    let v3 = model().v3();
    let pod = &v3["api/v1"]["paths"]["/api/v1/namespaces/{namespace}/pods/{name}"]["patch"];
    assert!(
        pod["parameters"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["name"] == "fieldValidation" && p["in"] == "query")
    );
    assert!(pod["requestBody"]["content"]["application/strategic-merge-patch+json"].is_object());
    let widget = &v3["apis/example.com/v1"]["paths"]["/apis/example.com/v1/namespaces/{namespace}/widgets/{name}"]
        ["patch"];
    assert_eq!(widget["x-kubernetes-group-version-kind"]["kind"], "Widget");
    assert!(widget["requestBody"]["content"]["application/strategic-merge-patch+json"].is_null());
}

#[test]
fn crd_schema_is_published_under_its_reversed_group_name() {
    let m = model();
    let v2 = m.v2();
    let widget = &v2["definitions"]["com.example.v1.Widget"];
    assert_eq!(
        widget["x-kubernetes-group-version-kind"],
        json!([{ "group": "example.com", "kind": "Widget", "version": "v1" }])
    );
    assert_eq!(
        widget["properties"]["spec"]["properties"]["size"]["description"],
        "How big."
    );
    assert_eq!(
        widget["properties"]["metadata"]["$ref"],
        "#/definitions/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
    );
    let v3 = m.v3();
    let schemas = &v3["apis/example.com/v1"]["components"]["schemas"];
    assert!(schemas["com.example.v1.Widget"].is_object());
    assert!(schemas["io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"].is_object());
    assert!(
        schemas["io.k8s.api.core.v1.Pod"].is_null(),
        "only what the group version needs"
    );
}

#[test]
fn crd_schemas_lose_in_v2_what_swagger_2_cannot_say() {
    let schema = json!({
        "type": "object",
        "properties": {
            "port": {
                "x-kubernetes-int-or-string": true,
                "anyOf": [{ "type": "integer" }, { "type": "string" }],
            },
            "note": { "type": "string", "nullable": true },
            "config": {
                "type": "object",
                "x-kubernetes-preserve-unknown-fields": true,
                "properties": { "a": { "type": "string" } },
            },
        },
    });
    let v2 = super::crd::to_v2(&schema);
    let props = &v2["properties"];
    assert_eq!(props["port"]["type"], "string");
    assert_eq!(props["port"]["format"], "int-or-string");
    assert!(props["port"]["anyOf"].is_null());
    assert!(props["note"]["nullable"].is_null());
    assert!(
        props["config"]["properties"].is_null(),
        "kept unknown fields stay open"
    );
    assert_eq!(
        props["config"]["x-kubernetes-preserve-unknown-fields"],
        true
    );
}

#[test]
fn unknown_fields_below_a_field_that_keeps_them_are_allowed() {
    let mut crd = widget_crd();
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["extra"] =
        json!({ "type": "object", "x-kubernetes-preserve-unknown-fields": true });
    let m = Model::new(&[widgets()], &[crd]);
    let root = json!({ "$ref": format!("{REF_V2}com.example.v1.Widget") });
    let widget = json!({
        "apiVersion": "example.com/v1", "kind": "Widget",
        "metadata": { "name": "w" },
        "spec": { "size": 1, "extra": { "anything": [1, 2] }, "colour": "red" },
    });
    let mut out = Vec::new();
    super::strict::walk_unknown(&m.definitions, &root, &widget, "", &mut out);
    assert_eq!(out, ["spec.colour"]);
}

#[test]
fn kinds_without_a_schema_get_an_open_one() {
    let odd = Arc::new(ResourceInfo::new(
        "odd.io", "v1", "Gadget", "gadgets", false,
    ));
    let v2 = Model::new(&[odd], &[]).v2();
    let gadget = &v2["definitions"]["io.odd.v1.Gadget"];
    assert_eq!(gadget["type"], "object");
    assert_eq!(
        gadget["x-kubernetes-group-version-kind"][0]["kind"],
        "Gadget"
    );
}

#[test]
fn protobuf_v2_decodes_to_the_same_definitions() {
    let v2 = model().v2();
    let bytes = proto::document(&v2).encode_to_vec();
    let decoded = proto::Document::decode(bytes.as_slice()).unwrap();
    assert_eq!(decoded.swagger, "2.0");
    let defs = decoded.definitions.unwrap().additional_properties;
    let names: Vec<&str> = defs.iter().map(|d| d.name.as_str()).collect();
    let json_names: Vec<&str> = v2["definitions"]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(names, json_names);
    let pod = defs
        .iter()
        .find(|d| d.name == "io.k8s.api.core.v1.Pod")
        .and_then(|d| d.value.as_ref())
        .unwrap();
    assert!(pod.description.contains("collection of containers"));
    let gvk = pod
        .vendor_extension
        .iter()
        .find(|e| e.name == "x-kubernetes-group-version-kind")
        .unwrap();
    let gvk: Value = serde_json::from_str(&gvk.value.as_ref().unwrap().yaml).unwrap();
    assert_eq!(gvk[0]["kind"], "Pod");
    let spec = &pod.properties.as_ref().unwrap().additional_properties;
    let spec = spec.iter().find(|p| p.name == "spec").unwrap();
    assert_eq!(
        spec.value.as_ref().unwrap()._ref,
        "#/definitions/io.k8s.api.core.v1.PodSpec"
    );
    let pod_spec = defs
        .iter()
        .find(|d| d.name == "io.k8s.api.core.v1.PodSpec")
        .and_then(|d| d.value.as_ref())
        .unwrap();
    let containers = pod_spec
        .properties
        .as_ref()
        .unwrap()
        .additional_properties
        .iter()
        .find(|p| p.name == "containers")
        .and_then(|p| p.value.as_ref())
        .unwrap();
    assert_eq!(containers.r#type.as_ref().unwrap().value, ["array"]);
    assert!(
        containers
            .vendor_extension
            .iter()
            .any(|e| e.name == "x-kubernetes-patch-merge-key"
                && e.value.as_ref().unwrap().yaml == "\"name\"")
    );
    let paths = decoded.paths.unwrap().path;
    let patch = paths
        .iter()
        .find(|p| p.name == "/api/v1/namespaces/{namespace}/pods/{name}")
        .and_then(|p| p.value.as_ref())
        .and_then(|p| p.patch.as_ref())
        .unwrap();
    assert_eq!(patch.operation_id, "patchCoreV1NamespacedPod");
}

#[test]
fn int_or_string_is_a_string_with_its_format_in_v2() {
    let v2 = model().v2();
    let ios = &v2["definitions"]["io.k8s.apimachinery.pkg.util.intstr.IntOrString"];
    assert_eq!(ios["type"], "string");
    assert_eq!(ios["format"], "int-or-string");
}

#[test]
fn unknown_fields_are_found_with_their_paths() {
    let m = model();
    let root = json!({ "$ref": format!("{REF_V2}io.k8s.api.core.v1.Pod") });
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": { "name": "p", "labels": { "a": "b" }, "bogus": 1 },
        "spec": { "containers": [{ "name": "c", "image": "i", "imagePolicy": "x" }] },
    });
    let mut out = Vec::new();
    super::strict::walk_unknown(&m.definitions, &root, &pod, "", &mut out);
    out.sort();
    assert_eq!(out, ["metadata.bogus", "spec.containers[0].imagePolicy"]);
}

#[test]
fn documents_build_in_reasonable_time_and_size() {
    let all: Vec<Arc<ResourceInfo>> = apimachinery::catalog::builtins()
        .into_iter()
        .map(Arc::new)
        .collect();
    let started = Instant::now();
    let m = Model::new(&all, &[]);
    let v2 = serde_json::to_vec(&m.v2()).unwrap();
    let proto = proto::document(&m.v2()).encode_to_vec();
    let v3: usize = m.v3().values().map(|d| d.to_string().len()).sum();
    let elapsed = started.elapsed();
    println!(
        "built in {elapsed:?}: v2 JSON {} bytes, v2 protobuf {} bytes, v3 total {v3} bytes",
        v2.len(),
        proto.len()
    );
    let missing: Vec<String> = m
        .kinds
        .iter()
        .filter(|(_, name)| m.definitions[name]["properties"].is_null())
        .map(|(r, _)| format!("{}/{} {}", r.group, r.version, r.kind))
        .collect();
    assert!(
        missing.is_empty(),
        "served without a generated schema: {missing:?}"
    );
    assert!(elapsed.as_secs() < 10, "{elapsed:?}");
}

// === over HTTP ===

/// Answers writes with the object sent (the strict check comes before the backend).
struct Echo;

#[async_trait::async_trait]
impl Backend for Echo {
    async fn create(&self, _: &WriteRequest<'_>, obj: Value) -> Result<Value, ApiError> {
        Ok(obj)
    }
    async fn update(&self, _: &WriteRequest<'_>, obj: Value) -> Result<Value, ApiError> {
        Ok(obj)
    }
    async fn patch(&self, _: &WriteRequest<'_>, _: PatchType, _: Bytes) -> Result<Value, ApiError> {
        Ok(json!({}))
    }
    async fn delete(
        &self,
        _: &WriteRequest<'_>,
        _: DeleteOptions,
    ) -> Result<(u16, Value), ApiError> {
        Ok((200, json!({})))
    }
}

fn api(dir: &tempfile::TempDir) -> Api {
    let store = Writer::open(dir.path().join("store.db"), StoreConfig::default()).unwrap();
    Api {
        registry: crate::Registry::new(apimachinery::catalog::builtins()),
        store: store.reader(),
        backend: Arc::new(Echo),
        version: json!({}),
        default_user: Some(User {
            name: "admin".into(),
            groups: vec!["system:masters".into()],
        }),
        authorizer: None,
    }
}

async fn send(api: &Api, req: Request<Body>) -> (StatusCode, axum::http::HeaderMap, Bytes) {
    let resp = crate::router(api.clone()).oneshot(req).await.unwrap();
    let (parts, body) = resp.into_parts();
    (
        parts.status,
        parts.headers,
        body.collect().await.unwrap().to_bytes(),
    )
}

fn get(uri: &str, headers: &[(header::HeaderName, &str)]) -> Request<Body> {
    let mut req = Request::get(uri);
    for (k, v) in headers {
        req = req.header(k, *v);
    }
    req.body(Body::empty()).unwrap()
}

#[tokio::test]
async fn v2_is_json_or_protobuf_by_accept_with_an_etag() {
    let dir = tempfile::tempdir().unwrap();
    let api = api(&dir);
    let (status, headers, body) = send(&api, get("/openapi/v2", &[])).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(headers[header::CONTENT_TYPE], "application/json");
    let doc: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(doc["swagger"], "2.0");
    assert!(doc["definitions"]["io.k8s.api.core.v1.Pod"].is_object());
    let etag = headers[header::ETAG].to_str().unwrap().to_owned();

    let accept = "application/com.github.proto-openapi.spec.v2@v1.0+protobuf";
    let (status, headers, body) = send(&api, get("/openapi/v2", &[(header::ACCEPT, accept)])).await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        headers[header::CONTENT_TYPE]
            .to_str()
            .unwrap()
            .contains("protobuf")
    );
    let decoded = proto::Document::decode(body).unwrap();
    assert_eq!(decoded.swagger, "2.0");

    assert_ne!(
        headers[header::ETAG],
        etag.as_str(),
        "each form has its own ETag"
    );

    let (status, _, body) = send(&api, get("/openapi/v2", &[(header::IF_NONE_MATCH, &etag)])).await;
    assert_eq!(status, StatusCode::NOT_MODIFIED);
    assert!(body.is_empty());
}

#[tokio::test]
async fn documents_are_gzipped_for_clients_that_take_it() {
    use std::io::Read;
    let dir = tempfile::tempdir().unwrap();
    let api = api(&dir);
    let (_, _, plain) = send(&api, get("/openapi/v2", &[])).await;
    let encodings = [(header::ACCEPT_ENCODING, "gzip")];
    let (status, headers, body) = send(&api, get("/openapi/v2", &encodings)).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(headers[header::CONTENT_ENCODING], "gzip");
    assert!(
        body.len() * 3 < plain.len(),
        "{} vs {}",
        body.len(),
        plain.len()
    );
    let mut unzipped = Vec::new();
    flate2::read::GzDecoder::new(&body[..])
        .read_to_end(&mut unzipped)
        .unwrap();
    assert_eq!(unzipped, plain);
    let refused = [(header::ACCEPT_ENCODING, "gzip;q=0, identity")];
    let (_, headers, _) = send(&api, get("/openapi/v2", &refused)).await;
    assert!(headers.get(header::CONTENT_ENCODING).is_none());
}

#[tokio::test]
async fn v3_urls_carry_a_hash_and_a_stale_one_is_redirected() {
    let dir = tempfile::tempdir().unwrap();
    let api = api(&dir);
    let (_, _, body) = send(&api, get("/openapi/v3", &[])).await;
    let root: Value = serde_json::from_slice(&body).unwrap();
    let url = root["paths"]["api/v1"]["serverRelativeURL"]
        .as_str()
        .unwrap()
        .to_owned();
    let (status, headers, body) = send(&api, get(&url, &[])).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(headers[header::CACHE_CONTROL], "public, immutable");
    let doc: Value = serde_json::from_slice(&body).unwrap();
    assert!(doc["components"]["schemas"]["io.k8s.api.core.v1.Pod"].is_object());
    let (status, headers, _) = send(&api, get("/openapi/v3/api/v1?hash=0", &[])).await;
    assert_eq!(status, StatusCode::MOVED_PERMANENTLY);
    assert_eq!(headers[header::LOCATION], url.as_str());
}

#[tokio::test]
async fn strict_field_validation_refuses_unknown_fields_naming_them() {
    let dir = tempfile::tempdir().unwrap();
    let api = api(&dir);
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": { "name": "p" },
        "spec": { "containers": [{ "name": "c", "image": "i", "imagePolicy": "x" }] },
    });
    let post = |query: &str| {
        Request::post(format!("/api/v1/namespaces/default/pods{query}"))
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from(pod.to_string()))
            .unwrap()
    };
    let (status, _, body) = send(&api, post("?fieldValidation=Strict")).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let status_body: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(status_body["reason"], "BadRequest");
    let message = status_body["message"].as_str().unwrap();
    assert!(
        message.contains(r#"unknown field "spec.containers[0].imagePolicy""#),
        "{message}"
    );
    let (status, _, _) = send(&api, post("")).await;
    assert_eq!(status, StatusCode::CREATED);

    let patch = Request::patch("/api/v1/namespaces/default/pods/p?fieldValidation=Strict")
        .header(header::CONTENT_TYPE, "application/strategic-merge-patch+json")
        .body(Body::from(
            json!({ "metadata": { "labels": { "a": "b" } }, "spec": { "$setElementOrder/containers": [], "nodeNme": "n" } }).to_string(),
        ))
        .unwrap();
    let (status, _, body) = send(&api, patch).await;
    assert_eq!(
        status,
        StatusCode::BAD_REQUEST,
        "{}",
        String::from_utf8_lossy(&body)
    );
    assert!(String::from_utf8_lossy(&body).contains("spec.nodeNme"));
}
