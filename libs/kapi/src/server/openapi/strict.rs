//! Server-side strict field validation (`fieldValidation=Strict`): the fields of a written
//! object, or of a merge patch's partial object, that the kind's published schema does not
//! declare. A subtree marked `x-kubernetes-preserve-unknown-fields` (and a kind with no known
//! schema) takes anything; maps (`additionalProperties`) are checked value by value.

use std::collections::BTreeMap;

use apimachinery::patch::PatchType;
use apimachinery::{ApiError, ResourceInfo};
use serde_json::{Value, json};

use super::{REF_V2, builtin, documents};
use crate::Api;
use crate::server::Target;

/// With `fieldValidation=Strict`, refuses an object (of the target's kind, written to the main
/// resource) with fields its schema does not declare: 400, naming each, as kube-apiserver's
/// `strict decoding error: unknown field "spec.foo"`.
pub(crate) async fn check_strict(
    api: &Api,
    field_validation: Option<&str>,
    target: &Target,
    obj: &Value,
) -> Result<(), ApiError> {
    let strict = field_validation.is_some_and(|v| v.eq_ignore_ascii_case("Strict"));
    if !strict || target.subresource.is_some() {
        return Ok(());
    }
    let unknown = unknown_fields(api, &target.info, obj).await?;
    if unknown.is_empty() {
        return Ok(());
    }
    let fields: Vec<String> = unknown
        .iter()
        .map(|f| format!("unknown field \"{f}\""))
        .collect();
    let info = &target.info;
    // kube-apiserver's wording for built-in kinds (its decoder reports them).
    let prefix = if info.custom {
        String::new()
    } else {
        format!(
            "{} in version {:?} cannot be handled as a {}: ",
            info.kind, info.version, info.kind
        )
    };
    Err(ApiError::bad_request(format!(
        "{prefix}strict decoding error: {}",
        fields.join(", ")
    )))
}

/// [`check_strict`] for the body of a JSON merge or strategic merge patch (a partial object;
/// the strategic merge directives, keys starting with `$`, are not fields). JSON patches and
/// apply patches are not checked.
pub(crate) async fn check_strict_patch(
    api: &Api,
    field_validation: Option<&str>,
    target: &Target,
    kind: PatchType,
    body: &[u8],
) -> Result<(), ApiError> {
    if !matches!(kind, PatchType::Merge | PatchType::StrategicMerge) {
        return Ok(());
    }
    match serde_json::from_slice::<Value>(body) {
        Ok(patch) => check_strict(api, field_validation, target, &patch).await,
        // The patch verb reports a body that does not parse.
        Err(_) => Ok(()),
    }
}

/// The paths of fields `obj` (an object of `info`'s kind) has that its schema does not
/// declare, in kube-apiserver's form (`spec.containers[0].foo`); empty when the kind keeps
/// unknown fields or has no schema.
async fn unknown_fields(
    api: &Api,
    info: &ResourceInfo,
    obj: &Value,
) -> Result<Vec<String>, ApiError> {
    let docs = documents(api).await?;
    let Some((_, name)) =
        docs.model.kinds.iter().find(|(r, _)| {
            r.group == info.group && r.version == info.version && r.kind == info.kind
        })
    else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    let root = json!({ "$ref": format!("{REF_V2}{name}") });
    walk_unknown(&docs.model.definitions, &root, obj, "", &mut out);
    Ok(out)
}

/// Collects the paths of `value`'s fields that `schema` does not declare.
pub(super) fn walk_unknown(
    definitions: &BTreeMap<String, Value>,
    schema: &Value,
    value: &Value,
    path: &str,
    out: &mut Vec<String>,
) {
    let Some(schema) = resolve(definitions, schema) else {
        return;
    };
    if schema.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true)) {
        return;
    }
    match value {
        Value::Object(fields) => {
            if let Some(props) = schema.get("properties").and_then(Value::as_object) {
                for (k, v) in fields.iter().filter(|(k, _)| !k.starts_with('$')) {
                    let sub = if path.is_empty() {
                        k.clone()
                    } else {
                        format!("{path}.{k}")
                    };
                    match props.get(k) {
                        Some(s) => walk_unknown(definitions, s, v, &sub, out),
                        None => out.push(sub),
                    }
                }
            } else if let Some(s @ Value::Object(_)) = schema.get("additionalProperties") {
                for (k, v) in fields {
                    walk_unknown(definitions, s, v, &format!("{path}.{k}"), out);
                }
            }
        }
        Value::Array(items) => {
            if let Some(s) = schema.get("items") {
                for (i, v) in items.iter().enumerate() {
                    walk_unknown(definitions, s, v, &format!("{path}[{i}]"), out);
                }
            }
        }
        _ => {}
    }
}

/// The schema a `$ref` names (through any `allOf` of one), or the schema itself.
fn resolve<'a>(definitions: &'a BTreeMap<String, Value>, schema: &'a Value) -> Option<&'a Value> {
    let mut schema = schema;
    for _ in 0..8 {
        let map = schema.as_object()?;
        if let Some(name) = builtin::ref_name(map) {
            schema = definitions.get(name)?;
        } else {
            return Some(schema);
        }
    }
    None
}
