use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::catalog::builtins;
use crate::patch::{
    MAX_JSON_PATCH_OPERATIONS, MAX_PATCHED_BYTES, PatchError, PatchType, apply, encoded_len,
};

fn configmaps() -> crate::ResourceInfo {
    builtins()
        .into_iter()
        .find(|i| i.group.is_empty() && i.plural == "configmaps")
        .unwrap()
}

fn patch(kind: PatchType, original: &Value, body: &Value) -> Result<Value, PatchError> {
    apply(&configmaps(), kind, original, body.to_string().as_bytes())
}

fn configmap(value: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "cm", "namespace": "default"},
        "data": {"a": value},
    })
}

fn too_large(result: Result<Value, PatchError>) -> String {
    match result {
        Err(PatchError::TooLarge(m)) => m,
        other => panic!("expected a too-large refusal, got {other:?}"),
    }
}

#[test]
fn a_json_patch_of_more_than_ten_thousand_operations_is_refused() {
    let original = configmap("x");
    let test = json!({"op": "test", "path": "/data/a", "value": "x"});
    let at_limit = Value::Array(vec![test.clone(); MAX_JSON_PATCH_OPERATIONS]);
    patch(PatchType::Json, &original, &at_limit).expect("10,000 operations are allowed");

    let over = Value::Array(vec![test; MAX_JSON_PATCH_OPERATIONS + 1]);
    let message = too_large(patch(PatchType::Json, &original, &over));
    assert_eq!(
        message,
        "The allowed number of operations in a JSON patch is 10000, got 10001"
    );
    let status = crate::ApiError::from(PatchError::TooLarge(message));
    assert_eq!(
        (status.code, status.reason.as_str()),
        (413, "RequestEntityTooLarge")
    );
}

#[test]
fn copies_doubling_a_value_are_refused_before_they_grow_the_object() {
    // 40 doublings of 64 KiB would be 64 PiB; the limit stops the sixth (index 5).
    let original = configmap(&"x".repeat(64 * 1024));
    let ops: Vec<Value> = (0..40)
        .map(|i| json!({"op": "copy", "from": "/data", "path": format!("/data/d{i}")}))
        .collect();
    let started = Instant::now();
    let message = too_large(patch(PatchType::Json, &original, &Value::Array(ops)));
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "refused quickly, took {:?}",
        started.elapsed()
    );
    assert!(message.contains("operation 5 (copy)"), "{message}");
    assert!(
        message.contains(&MAX_PATCHED_BYTES.to_string()),
        "{message}"
    );
}

#[test]
fn copies_within_the_limit_apply() {
    let original = configmap(&"x".repeat(64 * 1024));
    let ops = json!([
        {"op": "copy", "from": "/data/a", "path": "/data/b"},
        {"op": "copy", "from": "/data/a", "path": "/data/c"},
        {"op": "move", "from": "/data/c", "path": "/data/d"},
    ]);
    let patched = patch(PatchType::Json, &original, &ops).unwrap();
    assert_eq!(patched["data"]["b"], patched["data"]["a"]);
    assert_eq!(patched["data"]["d"], patched["data"]["a"]);
    assert!(patched["data"].get("c").is_none());
}

#[test]
fn operations_that_do_not_apply_name_their_index() {
    let ops = json!([
        {"op": "test", "path": "/data/a", "value": "x"},
        {"op": "remove", "path": "/data/missing"},
    ]);
    match patch(PatchType::Json, &configmap("x"), &ops) {
        Err(PatchError::Invalid(m)) => assert!(m.starts_with("operation '/1'"), "{m}"),
        other => panic!("expected 422, got {other:?}"),
    }
}

#[test]
fn every_patch_type_refuses_a_result_past_the_limit() {
    // Each patch fits a request body; what it makes of the object does not.
    let original = configmap(&"x".repeat(2 * 1024 * 1024));
    let big = "y".repeat(1024 * 1024 + 512 * 1024);
    let merge = json!({"data": {"b": big}});
    for kind in [PatchType::Merge, PatchType::StrategicMerge] {
        let message = too_large(patch(kind, &original, &merge));
        assert!(
            message.contains("the patched object is"),
            "{kind:?}: {message}"
        );
    }
    let add = json!([{"op": "add", "path": "/data/b", "value": big}]);
    too_large(patch(PatchType::Json, &original, &add));
}

#[test]
fn the_encoded_length_is_the_length_of_the_encoding() {
    let value = json!({"a": [1, "two", null, {"b": 3.5}], "c": "é\n"});
    assert_eq!(
        encoded_len(&value),
        serde_json::to_vec(&value).unwrap().len()
    );
}

#[test]
fn a_test_of_null_passes_on_a_missing_member_of_an_object_that_exists() {
    let original = configmap("x");
    let body = json!([
        {"op": "test", "path": "/metadata/finalizers", "value": null},
        {"op": "add", "path": "/metadata/finalizers", "value": ["f"]},
    ]);
    let patched = patch(PatchType::Json, &original, &body).unwrap();
    assert_eq!(patched["metadata"]["finalizers"], json!(["f"]));
    // Not null, or a missing parent: the test fails as before.
    let not_null = json!([{"op": "test", "path": "/metadata/finalizers", "value": []}]);
    assert!(matches!(
        patch(PatchType::Json, &original, &not_null),
        Err(PatchError::Invalid(_))
    ));
    let no_parent = json!([{"op": "test", "path": "/spec/x", "value": null}]);
    assert!(matches!(
        patch(PatchType::Json, &original, &no_parent),
        Err(PatchError::Invalid(_))
    ));
    // A member that is there and not null fails a test of null.
    let present = json!([{"op": "test", "path": "/data/a", "value": null}]);
    assert!(matches!(
        patch(PatchType::Json, &original, &present),
        Err(PatchError::Invalid(_))
    ));
}
