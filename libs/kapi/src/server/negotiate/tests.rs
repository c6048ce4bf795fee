use axum::http::HeaderValue;

use super::*;

fn accept(v: &str) -> HeaderMap {
    let mut h = HeaderMap::new();
    h.insert(ACCEPT, HeaderValue::from_str(v).unwrap());
    h
}

#[test]
fn kubectl_get_asks_for_a_table() {
    let h = accept(
        "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json",
    );
    assert_eq!(output(&h, true).unwrap(), Output::Table);
    let h = accept("application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json");
    assert_eq!(output(&h, true).unwrap(), Output::Json);
}

#[test]
fn protobuf_is_chosen_for_kinds_that_have_it_and_json_otherwise() {
    let pb_first = accept("application/vnd.kubernetes.protobuf,application/json");
    assert_eq!(output(&pb_first, true).unwrap(), Output::Protobuf);
    assert_eq!(output(&pb_first, false).unwrap(), Output::Json);
    let proxy = accept("application/vnd.kubernetes.protobuf, */*");
    assert_eq!(output(&proxy, true).unwrap(), Output::Protobuf);
    assert_eq!(output(&proxy, false).unwrap(), Output::Json);
    // A custom resource asked for in protobuf alone is 406, as from kube-apiserver.
    let only = accept("application/vnd.kubernetes.protobuf");
    assert_eq!(output(&only, false).unwrap_err().code, 406);
    // Metadata-only protobuf is not served: the JSON form that follows is.
    let meta = accept(
        "application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1",
    );
    assert_eq!(output(&meta, true).unwrap(), Output::Metadata);
    let json_first = accept("application/json,application/vnd.kubernetes.protobuf");
    assert_eq!(output(&json_first, true).unwrap(), Output::Json);
    assert_eq!(output(&HeaderMap::new(), true).unwrap(), Output::Json);
    assert_eq!(discovery(&only).unwrap_err().code, 406);
}

#[test]
fn metadata_only_is_understood() {
    let h = accept("application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1");
    assert_eq!(output(&h, true).unwrap(), Output::Metadata);
}

#[test]
fn aggregated_discovery_only_when_asked_first() {
    let h = accept(
        "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json",
    );
    assert_eq!(discovery(&h).unwrap(), Discovery::Aggregated);
    let h = accept(
        "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json",
    );
    assert_eq!(discovery(&h).unwrap(), Discovery::Legacy);
    assert_eq!(discovery(&HeaderMap::new()).unwrap(), Discovery::Legacy);
}

#[test]
fn q_values_reorder() {
    let h = accept("application/json;as=Table;v=v1;g=meta.k8s.io;q=0.5,application/json");
    assert_eq!(output(&h, true).unwrap(), Output::Json);
}

#[test]
fn request_bodies_are_json_or_protobuf() {
    let mut h = HeaderMap::new();
    assert_eq!(body_format(&h).unwrap(), BodyFormat::Json);
    h.insert(
        CONTENT_TYPE,
        HeaderValue::from_static("application/json; charset=utf-8"),
    );
    assert_eq!(body_format(&h).unwrap(), BodyFormat::Json);
    h.insert(
        CONTENT_TYPE,
        HeaderValue::from_static("application/vnd.kubernetes.protobuf"),
    );
    assert_eq!(body_format(&h).unwrap(), BodyFormat::Protobuf);
    let e = body_value(&h, b"{}").unwrap_err();
    assert_eq!(e.code, 400);
    assert!(e.message.contains("magic"), "{}", e.message);
    let cm = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}, "data": {"k": "v"}});
    assert_eq!(
        body_value(&h, &kpb::encode(cm.clone()).unwrap()).unwrap(),
        cm
    );
    h.insert(CONTENT_TYPE, HeaderValue::from_static("application/yaml"));
    let e = body_format(&h).unwrap_err();
    assert_eq!(e.code, 415);
    assert!(
        e.message.contains("application/vnd.kubernetes.protobuf"),
        "{}",
        e.message
    );
}
