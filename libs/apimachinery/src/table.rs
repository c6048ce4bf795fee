//! `meta.k8s.io/v1` Table responses, as `kubectl get` asks for them.
//!
//! Built-in kinds get the cells of kube-apiserver's printers (`pkg/printers/internalversion`);
//! columns with a `json_path` (custom resources) are evaluated with a JSONPath subset (see
//! [`jsonpath`]) and converted like apiextensions-apiserver does (dates become ages).

use serde_json::{Map, Value, json};

use crate::catalog::{Column, ResourceInfo};
use crate::time;

pub mod jsonpath;
mod printers;

/// What each row carries in `object` (the `includeObject` query parameter).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum IncludeObject {
    None,
    /// `PartialObjectMetadata` (kubectl's default).
    #[default]
    Metadata,
    Object,
}

// === impl IncludeObject ===

impl IncludeObject {
    /// From the `includeObject` query parameter (`None`, `Metadata`, `Object`); `None` for
    /// anything else.
    pub fn from_query(value: &str) -> Option<IncludeObject> {
        match value {
            "None" => Some(IncludeObject::None),
            "Metadata" => Some(IncludeObject::Metadata),
            "Object" => Some(IncludeObject::Object),
            _ => None,
        }
    }
}

/// A Table of `objects` with the resource's columns (`kind: Table`, `apiVersion:
/// meta.k8s.io/v1`, `columnDefinitions`, `rows`); the caller sets `metadata` (resourceVersion,
/// continue). Ages are computed against `now` (seconds since the Unix epoch).
pub fn render(info: &ResourceInfo, objects: &[Value], include: IncludeObject, now: i64) -> Value {
    let columns: Vec<Value> = info.columns.iter().map(column_definition).collect();
    let rows: Vec<Value> = objects
        .iter()
        .map(|obj| row(info, obj, include, now))
        .collect();
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {},
        "columnDefinitions": columns,
        "rows": rows,
    })
}

/// The row of one object: its cells, `conditions` where the printer sets them (completed
/// pods), and `object` as asked.
pub fn row(info: &ResourceInfo, obj: &Value, include: IncludeObject, now: i64) -> Value {
    let printed = printers::print(info, obj, now);
    let cells: Vec<Value> = info
        .columns
        .iter()
        .map(|column| cell(column, &printed, obj, now))
        .collect();
    let mut row = Map::new();
    row.insert("cells".to_owned(), Value::Array(cells));
    if let Some(conditions) = printed.conditions {
        row.insert("conditions".to_owned(), conditions);
    }
    if let Some(object) = row_object(info, obj, include) {
        row.insert("object".to_owned(), object);
    }
    Value::Object(row)
}

fn column_definition(column: &Column) -> Value {
    json!({
        "name": column.name,
        "type": column.type_,
        "format": column.format,
        "description": column.description,
        "priority": column.priority,
    })
}

/// The printer's cell for the column, else the column's JSONPath, else the generic `Name`,
/// `Age` and `Created At` cells; `null` when nothing applies.
fn cell(column: &Column, printed: &printers::Printed, obj: &Value, now: i64) -> Value {
    if let Some(value) = printed.cell(&column.name) {
        return value.clone();
    }
    if !column.json_path.is_empty() {
        return json_path_cell(column, obj, now);
    }
    match column.name.as_str() {
        "Name" => Value::from(printers::text(obj, "/metadata/name")),
        "Age" => Value::from(time::age_since(
            obj.pointer("/metadata/creationTimestamp")
                .and_then(Value::as_str),
            now,
        )),
        "Created At" => printers::created_at(obj),
        _ => Value::Null,
    }
}

/// A custom column's value, converted by its type as apiextensions-apiserver does.
fn json_path_cell(column: &Column, obj: &Value, now: i64) -> Value {
    let Ok(path) = jsonpath::JsonPath::parse(&column.json_path) else {
        return Value::Null;
    };
    let Some(value) = path.find(obj).into_iter().next() else {
        return Value::Null;
    };
    match (column.type_.as_str(), value) {
        (_, Value::Null) => Value::Null,
        ("string", Value::String(s)) => Value::from(s.as_str()),
        ("string", other) => Value::from(other.to_string()),
        ("integer", Value::Number(n)) => n
            .as_i64()
            .or_else(|| n.as_f64().map(|f| f as i64))
            .map_or(Value::Null, Value::from),
        ("number", Value::Number(n)) => n.as_f64().map_or(Value::Null, Value::from),
        ("boolean", Value::Bool(b)) => Value::from(*b),
        ("date", Value::String(s)) => match time::parse_rfc3339(s) {
            Some(t) => Value::from(time::human_age(now - t)),
            None => Value::from("<invalid>"),
        },
        _ => Value::Null,
    }
}

fn row_object(info: &ResourceInfo, obj: &Value, include: IncludeObject) -> Option<Value> {
    match include {
        IncludeObject::None => None,
        IncludeObject::Metadata => {
            let metadata = obj.get("metadata").cloned().unwrap_or_else(|| json!({}));
            Some(json!({
                "kind": "PartialObjectMetadata",
                "apiVersion": "meta.k8s.io/v1",
                "metadata": metadata,
            }))
        }
        IncludeObject::Object => Some(with_type_meta(info, obj)),
    }
}

/// The object with `kind` and `apiVersion` set (stored objects may omit them).
fn with_type_meta(info: &ResourceInfo, obj: &Value) -> Value {
    let mut obj = obj.clone();
    if let Value::Object(map) = &mut obj {
        map.entry("kind")
            .or_insert_with(|| Value::from(info.kind.as_str()));
        map.entry("apiVersion")
            .or_insert_with(|| Value::from(info.api_version()));
    }
    obj
}

#[cfg(test)]
mod tests;
