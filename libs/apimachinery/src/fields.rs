//! What an object is selected by: its labels and its selectable fields.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::catalog::ResourceInfo;

/// `metadata.labels` as a map (non-string values skipped).
pub fn labels_of(obj: &Value) -> BTreeMap<String, String> {
    let _ = obj;
    todo!()
}

/// The resource's selectable fields (see [`ResourceInfo::selectable_fields`]) with their
/// values in `obj`, as field selectors compare them (`true`/`false` for booleans, numbers in
/// decimal); absent fields are left out. `metadata.name`/`metadata.namespace` are not included.
pub fn selectable_fields(info: &ResourceInfo, obj: &Value) -> BTreeMap<String, String> {
    let _ = (info, obj);
    todo!()
}

/// The scalar at a dotted path (`spec.nodeName`), as a string.
pub fn field_value(obj: &Value, path: &str) -> Option<String> {
    let _ = (obj, path);
    todo!()
}
