//! The schemas of custom resources: each served version's `openAPIV3Schema` of a
//! CustomResourceDefinition, under the name kube-apiserver gives it (reversed group, version,
//! kind: `com.example.v1.Widget`), with the kind's `x-kubernetes-group-version-kind`, and
//! `apiVersion`, `kind` and `metadata` described as for every object.

use std::collections::HashMap;

use serde_json::{Map, Value, json};

use super::builtin::add_gvk;
use super::{Gvk, REF_V2};

/// The definition name of a kind Kubernetes publishes under its group: `com.example.v1.Widget`
/// for `example.com/v1` `Widget`.
pub(super) fn definition_name(gvk: &Gvk) -> String {
    let mut parts: Vec<&str> = gvk.group.split('.').filter(|s| !s.is_empty()).collect();
    parts.reverse();
    parts.push(&gvk.version);
    parts.push(&gvk.kind);
    parts.join(".")
}

/// The schema of every version of the CRDs that carries one, by group/version/kind.
pub(super) fn definitions(crds: &[Value]) -> HashMap<Gvk, (String, Value)> {
    let mut out = HashMap::new();
    for crd in crds {
        let spec = &crd["spec"];
        let (Some(group), Some(kind)) = (spec["group"].as_str(), spec["names"]["kind"].as_str())
        else {
            continue;
        };
        for version in spec["versions"].as_array().into_iter().flatten() {
            let Some(v) = version["name"].as_str() else {
                continue;
            };
            let Some(Value::Object(schema)) = version["schema"].get("openAPIV3Schema") else {
                continue;
            };
            let gvk = Gvk::new(group, v, kind);
            let name = definition_name(&gvk);
            let schema = object_schema(schema.clone(), &gvk);
            out.insert(gvk, (name, schema));
        }
    }
    out
}

/// A schema for a kind with none: any object, with the kind's extension.
pub(super) fn permissive(gvk: &Gvk) -> Value {
    let mut def = Map::new();
    def.insert("type".into(), json!("object"));
    def.insert(
        "description".into(),
        json!(format!(
            "{} is served without a published schema.",
            gvk.kind
        )),
    );
    def.insert("x-kubernetes-preserve-unknown-fields".into(), json!(true));
    add_gvk(&mut def, gvk);
    Value::Object(def)
}

/// The CRD's root schema with the object's common fields and the kind's extension.
fn object_schema(mut schema: Map<String, Value>, gvk: &Gvk) -> Value {
    let props = schema
        .entry("properties")
        .or_insert_with(|| json!({}))
        .as_object_mut();
    if let Some(props) = props {
        props.entry("apiVersion").or_insert_with(|| {
            json!({
                "type": "string",
                "description": "APIVersion defines the versioned schema of this representation of an object. Servers should convert recognized schemas to the latest internal value, and may reject unrecognized values. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#resources",
            })
        });
        props.entry("kind").or_insert_with(|| {
            json!({
                "type": "string",
                "description": "Kind is a string value representing the REST resource this object represents. Servers may infer this from the endpoint the client submits requests to. Cannot be updated. In CamelCase. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#types-kinds",
            })
        });
        props.insert(
            "metadata".into(),
            json!({
                "$ref": format!("{REF_V2}io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"),
                "description": "Standard object's metadata. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata",
            }),
        );
    }
    schema.entry("type").or_insert_with(|| json!("object"));
    add_gvk(&mut schema, gvk);
    Value::Object(schema)
}

/// The Swagger 2.0 form of a CRD schema, as kube-apiserver publishes it in `/openapi/v2`:
/// no `oneOf`/`anyOf`/`allOf`/`not`/`nullable`, and a subtree that keeps unknown fields
/// loses its `properties` (so client-side validation does not refuse what the server keeps).
pub(super) fn to_v2(schema: &Value) -> Value {
    let Value::Object(map) = schema else {
        return schema.clone();
    };
    let preserve = map.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true));
    let mut out = Map::new();
    for (key, value) in map {
        let kept = match key.as_str() {
            "oneOf" | "anyOf" | "allOf" | "not" | "nullable" | "x-kubernetes-validations" => {
                continue;
            }
            "properties" if preserve => continue,
            "properties" => Value::Object(
                value
                    .as_object()
                    .into_iter()
                    .flatten()
                    .map(|(k, v)| (k.clone(), to_v2(v)))
                    .collect(),
            ),
            "items" | "additionalProperties" => to_v2(value),
            _ => value.clone(),
        };
        out.insert(key.clone(), kept);
    }
    if out.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true))
        && !out.contains_key("type")
    {
        out.insert("type".into(), json!("string"));
        out.insert("format".into(), json!("int-or-string"));
    }
    Value::Object(out)
}
