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
    assert_eq!(output(&h).unwrap(), Output::Table);
    let h = accept("application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json");
    assert_eq!(output(&h).unwrap(), Output::Json);
}

#[test]
fn protobuf_alone_is_not_acceptable_but_with_json_is_json() {
    assert_eq!(
        output(&accept("application/vnd.kubernetes.protobuf"))
            .unwrap_err()
            .code,
        406
    );
    assert_eq!(
        output(&accept(
            "application/vnd.kubernetes.protobuf,application/json"
        ))
        .unwrap(),
        Output::Json
    );
    assert_eq!(
        output(&accept("application/vnd.kubernetes.protobuf, */*")).unwrap(),
        Output::Json
    );
    assert_eq!(output(&HeaderMap::new()).unwrap(), Output::Json);
}

#[test]
fn metadata_only_is_understood() {
    let h = accept("application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1");
    assert_eq!(output(&h).unwrap(), Output::Metadata);
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
    assert_eq!(output(&h).unwrap(), Output::Json);
}

#[test]
fn request_bodies_must_be_json() {
    let mut h = HeaderMap::new();
    assert!(require_json_body(&h).is_ok());
    h.insert(
        CONTENT_TYPE,
        HeaderValue::from_static("application/json; charset=utf-8"),
    );
    assert!(require_json_body(&h).is_ok());
    h.insert(
        CONTENT_TYPE,
        HeaderValue::from_static("application/vnd.kubernetes.protobuf"),
    );
    let e = require_json_body(&h).unwrap_err();
    assert_eq!(e.code, 415);
    assert!(e.message.contains("contentType"), "{}", e.message);
    h.insert(CONTENT_TYPE, HeaderValue::from_static("application/yaml"));
    assert_eq!(require_json_body(&h).unwrap_err().code, 415);
}
