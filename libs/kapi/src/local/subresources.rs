//! What the `approval` (certificate signing requests) and `ephemeralcontainers` (pods)
//! subresources take from a written object, as their registry strategies say: an approval
//! only `status.conditions`, with their timestamps filled in (and `status` everything but the
//! approval conditions); ephemeral containers only `spec.ephemeralContainers`, which may grow
//! but never lose or change a container.

use apimachinery::ApiError;
use apimachinery::time::now_rfc3339;
use serde_json::{Value, json};

use super::meta;
use super::validate;
use super::vocab::Target;

/// The approval conditions, which only the `approval` subresource writes.
const APPROVAL: [&str; 2] = ["Approved", "Denied"];

/// The current request with `body`'s `status.conditions` (Approved, Denied, ...); a condition
/// without `lastUpdateTime` or `lastTransitionTime` gets the current time. 422 when the
/// request would be both approved and denied, or would lose its approval or denial.
pub(super) fn approve(target: &Target, current: &Value, body: &Value) -> Result<Value, ApiError> {
    let mut conditions = body
        .pointer("/status/conditions")
        .cloned()
        .filter(Value::is_array)
        .unwrap_or_else(|| json!([]));
    let kinds = |conditions: &Value| -> Vec<String> {
        conditions
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|c| c["type"].as_str().map(str::to_owned))
            .collect()
    };
    let (wanted, had) = (kinds(&conditions), kinds(&current["status"]["conditions"]));
    let invalid =
        |field: &str, why: String| validate::invalid(&target.info, &target.name, field, why);
    if APPROVAL.iter().all(|a| wanted.iter().any(|w| w == a)) {
        let why =
            "Invalid value: \"Denied\": Approved and Denied conditions are mutually exclusive";
        return Err(invalid("status.conditions", why.to_owned()));
    }
    if let Some(gone) = APPROVAL
        .iter()
        .find(|a| had.iter().any(|h| h == *a) && !wanted.iter().any(|w| w == *a))
    {
        let why = format!("Forbidden: updates may not remove a condition of type {gone:?}");
        return Err(invalid("status.conditions", why));
    }
    let now = now_rfc3339();
    for condition in conditions.as_array_mut().into_iter().flatten() {
        if let Some(map) = condition.as_object_mut() {
            for stamp in ["lastUpdateTime", "lastTransitionTime"] {
                if map.get(stamp).is_none_or(Value::is_null) {
                    map.insert(stamp.into(), Value::String(now.clone()));
                }
            }
        }
    }
    let mut next = current.clone();
    set_conditions(&mut next, conditions);
    Ok(next)
}

/// Puts back the approval conditions of `current` into `next`, a status write: those only
/// the `approval` subresource adds or removes.
pub(super) fn keep_approval(current: &Value, next: &mut Value) {
    let is_approval = |c: &Value| APPROVAL.iter().any(|a| c["type"] == *a);
    let mut conditions: Vec<Value> = next["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|c| !is_approval(c))
        .cloned()
        .collect();
    let kept = current["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|c| is_approval(c))
        .cloned();
    conditions.splice(0..0, kept);
    if !conditions.is_empty() || next["status"].get("conditions").is_some() {
        set_conditions(next, Value::Array(conditions));
    }
}

fn set_conditions(obj: &mut Value, conditions: Value) {
    let map = meta::object_mut(obj);
    let status = meta::object_mut(map.entry("status").or_insert_with(|| json!({})));
    status.insert("conditions".into(), conditions);
}

/// The current pod with `body`'s `spec.ephemeralContainers`; 422 when one of the current
/// ones is gone or changed, or a new one has no name or image.
pub(super) fn ephemeral_containers(
    target: &Target,
    current: &Value,
    body: &Value,
) -> Result<Value, ApiError> {
    const FIELD: &str = "spec.ephemeralContainers";
    let invalid =
        |field: String, why: String| validate::invalid(&target.info, &target.name, &field, why);
    let wanted: Vec<Value> = body
        .pointer("/spec/ephemeralContainers")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let had = current
        .pointer("/spec/ephemeralContainers")
        .and_then(Value::as_array)
        .map_or(&[][..], Vec::as_slice);
    for old in had {
        let name = old["name"].as_str().unwrap_or_default();
        match wanted.iter().position(|c| c["name"] == old["name"]) {
            None => {
                let why =
                    format!("Forbidden: existing ephemeral containers {name:?} may not be removed");
                return Err(invalid(FIELD.to_owned(), why));
            }
            Some(i) if wanted[i] != *old => {
                let why = "Forbidden: existing ephemeral containers may not be changed".to_owned();
                return Err(invalid(format!("{FIELD}[{i}]"), why));
            }
            Some(_) => {}
        }
    }
    for (i, container) in wanted.iter().enumerate() {
        for field in ["name", "image"] {
            if container[field].as_str().is_none_or(str::is_empty) {
                let why = "Required value".to_owned();
                return Err(invalid(format!("{FIELD}[{i}].{field}"), why));
            }
        }
    }
    let mut next = current.clone();
    let map = meta::object_mut(&mut next);
    let spec = meta::object_mut(map.entry("spec").or_insert_with(|| json!({})));
    spec.insert("ephemeralContainers".into(), Value::Array(wanted));
    Ok(next)
}
