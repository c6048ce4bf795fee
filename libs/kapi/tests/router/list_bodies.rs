//! How list bodies are made: a damaged row in the store (not JSON, or JSON but not an object)
//! is left out of lists, in every form, instead of failing the whole list; a big JSON list is
//! streamed a frame at a time rather than built whole.

use axum::http::StatusCode;
use bytes::Bytes;
use objstore::{NewObject, ObjKey};
use serde_json::json;

use crate::support::{Harness, harness, object};

const LIST: &str = "/api/v1/namespaces/default/configmaps";
const TABLE: &str = "application/json;as=Table;v=v1;g=meta.k8s.io";
const METADATA: &str = "application/json;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io";
const PROTOBUF: &str = "application/vnd.kubernetes.protobuf";

async fn damage(h: &Harness, name: &str, value: &'static [u8]) {
    let key = ObjKey::new("configmaps", "default", name);
    let row = NewObject {
        uid: format!("uid-{name}"),
        resource_version: "1".into(),
        value: Bytes::from_static(value),
        ..NewObject::default()
    };
    h.store.put(key, row).await.expect("stored");
}

#[tokio::test]
async fn a_list_leaves_out_rows_that_are_not_json_objects_and_serves_the_rest() {
    let h = harness();
    for name in ["a", "z"] {
        let cm = object("default", name, json!({}), json!({"data": {"k": "v"}}));
        h.put("configmaps", cm).await;
    }
    damage(&h, "broken", b"{\"metadata\": {\"name\": \"broken\"").await;
    damage(&h, "array", b"[1, 2]").await;
    let skipped_before = kapi::bad_objects_skipped();

    let reply = h.get(LIST).await;
    assert_eq!(
        reply.status,
        StatusCode::OK,
        "{}",
        String::from_utf8_lossy(&reply.body)
    );
    let names: Vec<String> = reply.json()["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["metadata"]["name"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(names, ["a", "z"]);
    assert!(
        kapi::bad_objects_skipped() >= skipped_before + 2,
        "each is counted"
    );

    let table = h.get_with(LIST, TABLE).await;
    assert_eq!(table.status, StatusCode::OK);
    assert_eq!(table.json()["rows"].as_array().unwrap().len(), 2);
    let metadata = h.get_with(LIST, METADATA).await;
    assert_eq!(metadata.status, StatusCode::OK);
    assert_eq!(metadata.json()["items"].as_array().unwrap().len(), 2);
    let protobuf = h.get_with(LIST, PROTOBUF).await;
    assert_eq!(protobuf.status, StatusCode::OK);
    assert_eq!(protobuf.content_type(), PROTOBUF);

    // The damaged object itself cannot be served.
    let reply = h.get(&format!("{LIST}/broken")).await;
    assert_eq!(reply.status, StatusCode::INTERNAL_SERVER_ERROR);
}

#[tokio::test]
async fn a_big_json_list_is_streamed_in_frames_not_built_whole() {
    use http_body_util::BodyExt;
    use tower::ServiceExt;

    let h = harness();
    let value = "v".repeat(4 * 1024);
    for i in 0..100 {
        let cm = object(
            "default",
            &format!("cm-{i:03}"),
            json!({}),
            json!({"data": {"k": value}}),
        );
        h.put("configmaps", cm).await;
    }
    let req = crate::support::request(
        axum::http::Method::GET,
        LIST,
        &[],
        axum::body::Body::empty(),
    );
    let resp = h.router().oneshot(req).await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let mut body = resp.into_body();
    let (mut frames, mut largest, mut bytes) = (0, 0, Vec::new());
    while let Some(frame) = body.frame().await {
        let data = frame.unwrap().into_data().unwrap();
        frames += 1;
        largest = usize::max(largest, data.len());
        bytes.extend_from_slice(&data);
    }
    assert!(bytes.len() > 400 * 1024, "{} bytes", bytes.len());
    assert!(frames > 4, "{frames} frames");
    assert!(largest < 128 * 1024, "the largest frame is {largest} bytes");
    let list: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(list["kind"], "ConfigMapList");
    assert_eq!(list["items"].as_array().unwrap().len(), 100);
    assert_eq!(list["items"][99]["metadata"]["name"], "cm-099");
}
