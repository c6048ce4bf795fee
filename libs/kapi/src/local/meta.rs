//! Reading and writing the parts of an object's JSON the write path cares about: metadata
//! fields, finalizers, the deletion marks, and `metav1.Time` values.

use serde_json::{Map, Value};

pub(super) use apimachinery::object::{meta_str as str_of, metadata_mut, object_mut};

pub(super) fn name(obj: &Value) -> &str {
    str_of(obj, "name")
}

pub(super) fn uid(obj: &Value) -> &str {
    str_of(obj, "uid")
}

pub(super) fn resource_version(obj: &Value) -> &str {
    str_of(obj, "resourceVersion")
}

/// Sets (or, with `Value::Null`, removes) a `metadata` field.
pub(super) fn set(obj: &mut Value, field: &str, value: Value) {
    let meta = metadata_mut(obj);
    if value.is_null() {
        meta.remove(field);
    } else {
        meta.insert(field.to_owned(), value);
    }
}

/// Copies a `metadata` field from `from` (removing it when `from` has none).
pub(super) fn copy(obj: &mut Value, from: &Value, field: &str) {
    let value = from
        .get("metadata")
        .and_then(|m| m.get(field))
        .cloned()
        .unwrap_or(Value::Null);
    set(obj, field, value);
}

/// Sets (or removes, for `None`) a top-level field such as `status`.
pub(super) fn set_top(obj: &mut Value, field: &str, value: Option<Value>) {
    let map = object_mut(obj);
    match value {
        Some(v) => map.insert(field.to_owned(), v),
        None => map.remove(field),
    };
}

/// `metadata.finalizers` (non-string entries skipped).
pub(super) fn finalizers(obj: &Value) -> Vec<&str> {
    obj.pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .map(|list| list.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

/// True once a delete has marked the object (`metadata.deletionTimestamp` set).
pub(super) fn deleting(obj: &Value) -> bool {
    obj.pointer("/metadata/deletionTimestamp")
        .is_some_and(|v| !v.is_null())
}

/// `metadata.deletionGracePeriodSeconds`, if set.
pub(super) fn deletion_grace(obj: &Value) -> Option<i64> {
    obj.pointer("/metadata/deletionGracePeriodSeconds")
        .and_then(Value::as_i64)
}

pub(super) fn generation(obj: &Value) -> Option<i64> {
    obj.pointer("/metadata/generation").and_then(Value::as_i64)
}

/// True when anything but `metadata` (and `status`, when `skip_status`) differs: the changes
/// that bump `metadata.generation`.
pub(super) fn spec_changed(old: &Value, new: &Value, skip_status: bool) -> bool {
    let skipped = |k: &str| k == "metadata" || (skip_status && k == "status");
    let (Some(old), Some(new)) = (old.as_object(), new.as_object()) else {
        return old != new;
    };
    let differs = |a: &Map<String, Value>, b: &Map<String, Value>| {
        a.iter()
            .any(|(k, v)| !skipped(k) && b.get(k).is_none_or(|w| w != v))
    };
    differs(old, new) || differs(new, old)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn spec_changed_ignores_metadata_and_optionally_status() {
        let a = json!({"metadata": {"name": "a"}, "spec": {"x": 1}, "status": {"y": 1}});
        let b = json!({"metadata": {"name": "b"}, "spec": {"x": 1}, "status": {"y": 2}});
        assert!(!spec_changed(&a, &b, true));
        assert!(spec_changed(&a, &b, false));
        let c = json!({"metadata": {}, "spec": {"x": 2}});
        assert!(spec_changed(&a, &c, true));
        let d = json!({"metadata": {}, "spec": {"x": 1}, "data": {}});
        assert!(spec_changed(&a, &d, true));
    }

    #[test]
    fn set_null_removes_the_field() {
        let mut obj = json!({"metadata": {"uid": "u"}});
        set(&mut obj, "uid", Value::Null);
        assert_eq!(obj, json!({"metadata": {}}));
        set(&mut obj, "uid", json!("v"));
        assert_eq!(uid(&obj), "v");
    }
}
