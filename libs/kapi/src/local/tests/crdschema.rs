//! Custom resources held to their CRD version's structural schema on every write: create,
//! update, patch and `status`, with defaults set, unknown fields pruned and CEL transition
//! rules seeing the stored object.

use super::*;

/// A CRD whose `spec.size` is an integer of at least 1 that may not shrink, `spec.mode`
/// defaults to `fast`, and whose `status.phase` is one of two values.
fn gadget_crd() -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "gadgets.example.com"},
        "spec": {
            "group": "example.com",
            "scope": "Namespaced",
            "names": {"plural": "gadgets", "singular": "gadget", "kind": "Gadget"},
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "properties": {
                        "size": {"type": "integer", "minimum": 1, "x-kubernetes-validations": [
                            {"rule": "self >= oldSelf", "message": "size may not shrink"}]},
                        "mode": {"type": "string", "default": "fast"},
                    }},
                    "status": {"type": "object", "properties": {
                        "phase": {"type": "string", "enum": ["Ready", "Pending"]}}},
                }}},
            }],
        },
    })
}

fn gadget(spec: Value) -> Value {
    json!({"apiVersion": "example.com/v1", "kind": "Gadget", "metadata": {"name": "g"},
        "spec": spec})
}

async fn with_gadgets() -> Fixture {
    let fx = fixture().await;
    fx.on("customresourcedefinitions", "", "")
        .create(gadget_crd())
        .await
        .unwrap();
    fx
}

fn causes(err: &ApiError) -> Vec<(String, String)> {
    let causes = err.details.as_ref().unwrap()["causes"].as_array().unwrap();
    causes
        .iter()
        .map(|c| {
            let field = c["field"].as_str().unwrap().to_owned();
            (field, c["reason"].as_str().unwrap().to_owned())
        })
        .collect()
}

#[tokio::test]
async fn creates_are_defaulted_pruned_and_validated() {
    let fx = with_gadgets().await;
    let err = fx
        .on("gadgets", "default", "")
        .create(gadget(json!({"size": "big"})))
        .await
        .unwrap_err();
    assert_eq!(err.code, 422);
    assert!(
        err.message
            .starts_with("Gadget.example.com \"g\" is invalid: "),
        "{}",
        err.message
    );
    assert_eq!(
        causes(&err)[0],
        ("spec.size".into(), "FieldValueTypeInvalid".into())
    );

    let created = fx
        .on("gadgets", "default", "")
        .create(gadget(json!({"size": 2, "color": "red"})))
        .await
        .unwrap();
    assert_eq!(created["spec"], json!({"size": 2, "mode": "fast"}));
    let stored = fx.stored("gadgets", "default", "g").await.unwrap();
    assert_eq!(stored["spec"], json!({"size": 2, "mode": "fast"}));
}

#[tokio::test]
async fn updates_and_patches_are_held_to_the_schema_and_transition_rules() {
    let fx = with_gadgets().await;
    fx.on("gadgets", "default", "")
        .create(gadget(json!({"size": 3})))
        .await
        .unwrap();
    let err = fx
        .on("gadgets", "default", "g")
        .patch(PatchType::Merge, json!({"spec": {"size": 2}}))
        .await
        .unwrap_err();
    assert_eq!(err.code, 422);
    assert!(
        err.message
            .contains("spec.size: Invalid value: \"integer\": size may not shrink"),
        "{}",
        err.message
    );
    let err = fx
        .on("gadgets", "default", "g")
        .update(gadget(json!({"size": 0})))
        .await
        .unwrap_err();
    assert!(
        err.message.contains("should be greater than or equal to 1"),
        "{}",
        err.message
    );
    let grown = fx
        .on("gadgets", "default", "g")
        .patch(PatchType::Merge, json!({"spec": {"size": 4, "junk": 1}}))
        .await
        .unwrap();
    assert_eq!(grown["spec"], json!({"size": 4, "mode": "fast"}));
}

#[tokio::test]
async fn status_writes_are_validated_against_the_status_schema() {
    let fx = with_gadgets().await;
    fx.on("gadgets", "default", "")
        .create(gadget(json!({"size": 3})))
        .await
        .unwrap();
    let mut body = gadget(json!({"size": 3}));
    body["status"] = json!({"phase": "Lost"});
    let err = fx
        .on("gadgets", "default", "g")
        .status()
        .update(body.clone())
        .await
        .unwrap_err();
    assert_eq!(err.code, 422);
    assert_eq!(
        causes(&err),
        [("status.phase".into(), "FieldValueNotSupported".into())]
    );
    body["status"] = json!({"phase": "Ready", "extra": 1});
    let written = fx
        .on("gadgets", "default", "g")
        .status()
        .update(body)
        .await
        .unwrap();
    assert_eq!(written["status"], json!({"phase": "Ready"}));
}

#[tokio::test]
async fn crds_with_non_structural_schemas_are_refused_with_their_paths() {
    let fx = fixture().await;
    let mut crd = gadget_crd();
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["size"] =
        json!({"minimum": 1});
    let err = fx
        .on("customresourcedefinitions", "", "")
        .create(crd)
        .await
        .unwrap_err();
    assert_eq!(err.code, 422);
    let field = "spec.versions[0].schema.openAPIV3Schema.properties[spec].properties[size].type";
    assert_eq!(causes(&err), [(field.into(), "FieldValueRequired".into())]);
    assert!(fx.registry.get("example.com", "v1", "gadgets").is_none());
}
