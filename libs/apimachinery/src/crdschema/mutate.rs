//! Pruning and defaulting, as kube-apiserver applies them to custom resources: fields the
//! schema does not specify are dropped (unless a node keeps unknown fields), and missing
//! fields with a `default` get it. A value of the wrong type is left alone (validation
//! reports it).

use serde_json::{Map, Value};

use super::node::{Node, Type};
use super::{child, index};

/// Fields every object (and every embedded resource) keeps: ObjectMeta and the type are
/// handled by the generic layer.
const TYPE_AND_META: [&str; 3] = ["apiVersion", "kind", "metadata"];

pub(crate) fn prune_root(root: &Node, obj: &mut Value, pruned: &mut Vec<String>) {
    if let Value::Object(map) = obj {
        prune_fields(root, map, "", true, pruned);
    }
}

pub(crate) fn default_root(root: &Node, obj: &mut Value) {
    if let Value::Object(map) = obj {
        default_fields(root, map, true);
    }
}

// === helpers ===

fn prune(node: &Node, value: &mut Value, path: &str, pruned: &mut Vec<String>) {
    match value {
        Value::Object(map) if node.type_ == Some(Type::Object) => {
            prune_fields(node, map, path, node.embedded, pruned);
        }
        Value::Array(items) => {
            if let Some(item) = node.items.as_deref() {
                for (i, v) in items.iter_mut().enumerate() {
                    prune(item, v, &index(path, i), pruned);
                }
            }
        }
        _ => {}
    }
}

/// Prunes the fields of an object; `resource` keeps its type and metadata.
fn prune_fields(
    node: &Node,
    map: &mut Map<String, Value>,
    path: &str,
    resource: bool,
    pruned: &mut Vec<String>,
) {
    let mut unknown = Vec::new();
    for (key, value) in map.iter_mut() {
        let at = child(path, key);
        if resource && TYPE_AND_META.contains(&key.as_str()) {
            if key != "metadata"
                && let Some(prop) = node.properties.get(key)
            {
                prune(prop, value, &at, pruned);
            }
        } else if let Some(prop) = node.properties.get(key) {
            prune(prop, value, &at, pruned);
        } else if let Some(extra) = node.additional.as_deref() {
            prune(extra, value, &at, pruned);
        } else if !node.keeps_unknown() {
            unknown.push(key.clone());
            pruned.push(at);
        }
    }
    for key in unknown {
        map.remove(&key);
    }
}

fn default(node: &Node, value: &mut Value) {
    match value {
        Value::Object(map) if node.type_ == Some(Type::Object) => default_fields(node, map, false),
        Value::Array(items) => {
            if let Some(item) = node.items.as_deref() {
                for v in items {
                    default(item, v);
                }
            }
        }
        _ => {}
    }
}

fn default_fields(node: &Node, map: &mut Map<String, Value>, root: bool) {
    for (key, prop) in &node.properties {
        if root && key == "metadata" {
            continue;
        }
        let Some(value) = &prop.default else {
            continue;
        };
        let missing = match map.get(key) {
            None => true,
            Some(Value::Null) => !prop.nullable,
            Some(_) => false,
        };
        if missing {
            map.insert(key.clone(), value.clone());
        }
    }
    for (key, value) in map.iter_mut() {
        if root && key == "metadata" {
            continue;
        }
        if let Some(prop) = node.properties.get(key) {
            default(prop, value);
        } else if let Some(extra) = node.additional.as_deref() {
            default(extra, value);
        }
    }
}
