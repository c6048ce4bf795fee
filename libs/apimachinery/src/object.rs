//! Reading and writing an object's JSON: its map, its `metadata`, a metadata string.

use serde_json::{Map, Value};

/// `obj` as a map, turning anything else into an empty object first (callers check the body
/// is an object before they get here, so the replacement never happens for client data).
pub fn object_mut(obj: &mut Value) -> &mut Map<String, Value> {
    if !obj.is_object() {
        *obj = Value::Object(Map::new());
    }
    match obj {
        Value::Object(map) => map,
        _ => unreachable!("replaced by an object just above"),
    }
}

/// `obj.metadata`, created if absent (or not an object).
pub fn metadata_mut(obj: &mut Value) -> &mut Map<String, Value> {
    let meta = object_mut(obj)
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    object_mut(meta)
}

/// A string field of `metadata`, `""` when absent or not a string.
pub fn meta_str<'a>(obj: &'a Value, field: &str) -> &'a str {
    obj.get("metadata")
        .and_then(|m| m.get(field))
        .and_then(Value::as_str)
        .unwrap_or("")
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn metadata_is_made_where_missing_and_read_as_strings() {
        let mut v = json!(3);
        metadata_mut(&mut v).insert("name".into(), json!("a"));
        assert_eq!(v, json!({"metadata": {"name": "a"}}));
        assert_eq!(meta_str(&v, "name"), "a");
        assert_eq!(meta_str(&v, "uid"), "");
        assert_eq!(meta_str(&json!({"metadata": {"uid": 1}}), "uid"), "");
    }
}
