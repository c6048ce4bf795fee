//! Value validation of an object against its compiled schema, with kube-apiserver's error
//! kinds and wording (`spec.replicas in body must be of type integer: "string"`). Every error
//! is collected. On updates, a value equal to the one it replaces is not checked again
//! (validation ratcheting), so an object stored before a schema tightened can still be
//! edited elsewhere.

use serde_json::{Map, Value};

use super::node::{ListType, Node, Type};
use super::{ErrorKind, FieldError, child, format, index, show, type_name};

/// Errors of a whole object: the root's `metadata` is checked only for `name` and
/// `generateName` (the rest is ObjectMeta's, checked by the generic validation).
pub(crate) fn validate_root(root: &Node, obj: &Value, old: Option<&Value>) -> Vec<FieldError> {
    let mut check = Check::default();
    let Some(map) = obj.as_object() else {
        check.node(root, obj, old, "");
        return check.errors;
    };
    for (key, value) in map {
        let old = old.and_then(|o| o.get(key));
        match (key.as_str(), root.properties.get(key)) {
            ("metadata", Some(meta)) => check.metadata(meta, value, old),
            ("metadata", None) => {}
            (_, Some(prop)) => check.node(prop, value, old, key),
            (_, None) => {}
        }
    }
    check.object_rules(root, map, "");
    check.errors
}

/// Errors of `value` against `node` alone, paths relative to it (a `default`'s check).
pub(crate) fn validate_value(node: &Node, value: &Value) -> Vec<FieldError> {
    let mut check = Check::default();
    check.node(node, value, None, "");
    check.errors
}

#[derive(Default)]
struct Check {
    errors: Vec<FieldError>,
}

impl Check {
    fn node(&mut self, node: &Node, value: &Value, old: Option<&Value>, path: &str) {
        if old == Some(value) {
            return;
        }
        if value.is_null() && (node.nullable || node.type_.is_none() && !node.int_or_string) {
            return;
        }
        if !self.type_ok(node, value, path) {
            return;
        }
        self.enum_ok(node, value, path);
        match value {
            Value::Number(_) => self.number(node, value, path),
            Value::String(s) => self.string(node, value, s, path),
            Value::Array(items) => self.array(node, items, old, path),
            Value::Object(map) => self.object(node, map, old, path),
            _ => {}
        }
        self.junctors(node, value, path);
    }

    /// The root's `metadata`: `name` and `generateName` against their schemas.
    fn metadata(&mut self, meta: &Node, value: &Value, old: Option<&Value>) {
        for key in ["name", "generateName"] {
            if let (Some(node), Some(v)) = (meta.properties.get(key), value.get(key)) {
                let old = old.and_then(|o| o.get(key));
                self.node(node, v, old, &format!("metadata.{key}"));
            }
        }
    }

    fn type_ok(&mut self, node: &Node, value: &Value, path: &str) -> bool {
        let got = type_name(value);
        let integral = || value.as_f64().is_some_and(|f| f.fract() == 0.0);
        let (ok, want) = match node.type_ {
            _ if node.int_or_string => (value.is_string() || integral(), "integer,string"),
            None => (true, ""),
            Some(Type::Object) => (value.is_object(), "object"),
            Some(Type::Array) => (value.is_array(), "array"),
            Some(Type::String) => (value.is_string(), "string"),
            Some(Type::Integer) => (value.is_number() && integral(), "integer"),
            Some(Type::Number) => (value.is_number(), "number"),
            Some(Type::Boolean) => (value.is_boolean(), "boolean"),
        };
        if !ok {
            let body = format!(
                "\"{got}\": {} must be of type {want}: \"{got}\"",
                in_body(path)
            );
            self.push(path, ErrorKind::TypeInvalid, body);
        }
        ok
    }

    fn enum_ok(&mut self, node: &Node, value: &Value, path: &str) {
        if node.enum_.is_empty() || node.enum_.iter().any(|e| same(e, value)) {
            return;
        }
        let supported: Vec<String> = node
            .enum_
            .iter()
            .map(|e| match e {
                Value::String(s) => crate::status::go_quote(s),
                other => crate::status::go_quote(&other.to_string()),
            })
            .collect();
        let body = format!(
            "{}: supported values: {}",
            show(value),
            supported.join(", ")
        );
        self.push(path, ErrorKind::NotSupported, body);
    }

    fn number(&mut self, node: &Node, value: &Value, path: &str) {
        let Some(n) = value.as_f64() else { return };
        let shown = show(value);
        let at = in_body(path);
        if let Some(min) = node.minimum {
            if node.exclusive_minimum && n <= min {
                self.invalid(path, &shown, &format!("{at} should be greater than {min}"));
            } else if n < min {
                let why = format!("{at} should be greater than or equal to {min}");
                self.invalid(path, &shown, &why);
            }
        }
        if let Some(max) = node.maximum {
            if node.exclusive_maximum && n >= max {
                self.invalid(path, &shown, &format!("{at} should be less than {max}"));
            } else if n > max {
                self.invalid(
                    path,
                    &shown,
                    &format!("{at} should be less than or equal to {max}"),
                );
            }
        }
        if let Some(m) = node.multiple_of.filter(|m| *m > 0.0) {
            let ratio = n / m;
            if (ratio - ratio.round()).abs() > 1e-9 {
                self.invalid(path, &shown, &format!("{at} should be a multiple of {m}"));
            }
        }
        if let Some(f) = node.format.as_deref()
            && !format::number_ok(f, value)
        {
            self.invalid(path, &shown, &format!("{at} must be of type {f}: {shown}"));
        }
    }

    fn string(&mut self, node: &Node, value: &Value, s: &str, path: &str) {
        let shown = show(value);
        let at = in_body(path);
        let len = s.chars().count() as u64;
        if let Some(min) = node.min_length.filter(|m| len < *m) {
            self.invalid(
                path,
                &shown,
                &format!("{at} should be at least {min} chars long"),
            );
        }
        if let Some(max) = node.max_length.filter(|m| len > *m) {
            let body = format!("may not be more than {max} bytes");
            self.push(path, ErrorKind::TooLong, body);
        }
        if let Some((source, re)) = &node.pattern
            && !re.is_match(s)
        {
            self.invalid(path, &shown, &format!("{at} should match '{source}'"));
        }
        if let Some(f) = node.format.as_deref()
            && !format::string_ok(f, s)
        {
            self.invalid(path, &shown, &format!("{at} must be of type {f}: {shown}"));
        }
    }

    fn array(&mut self, node: &Node, items: &[Value], old: Option<&Value>, path: &str) {
        let len = items.len() as u64;
        if let Some(min) = node.min_items.filter(|m| len < *m) {
            let why = format!("{} should have at least {min} items", in_body(path));
            self.invalid(path, &len.to_string(), &why);
        }
        if let Some(max) = node.max_items.filter(|m| len > *m) {
            self.push(
                path,
                ErrorKind::TooMany,
                format!("{len}: must have at most {max} items"),
            );
        }
        self.list_unique(node, items, path);
        let Some(item_node) = node.items.as_deref() else {
            return;
        };
        let old_items = old.and_then(Value::as_array);
        for (i, item) in items.iter().enumerate() {
            let old_item = old_items.and_then(|o| correlate(&node.list, item, o));
            self.node(item_node, item, old_item, &index(path, i));
        }
    }

    /// `x-kubernetes-list-type: set` items and `map` keys must be unique.
    fn list_unique(&mut self, node: &Node, items: &[Value], path: &str) {
        match &node.list {
            ListType::Atomic => {}
            ListType::Set => {
                for (i, item) in items.iter().enumerate() {
                    if items[..i].iter().any(|o| same(o, item)) {
                        self.push(&index(path, i), ErrorKind::Duplicate, show(item));
                    }
                }
            }
            ListType::Map(keys) => {
                for (i, item) in items.iter().enumerate() {
                    let key = map_key(keys, item);
                    if items[..i].iter().any(|o| map_key(keys, o) == key) {
                        let body = format!(
                            "map[string]interface {{}}{}",
                            Value::Object(key.into_iter().collect())
                        );
                        self.push(&index(path, i), ErrorKind::Duplicate, body);
                    }
                }
            }
        }
    }

    fn object(&mut self, node: &Node, map: &Map<String, Value>, old: Option<&Value>, path: &str) {
        self.object_rules(node, map, path);
        for (key, value) in map {
            let old = old.and_then(|o| o.get(key));
            let at = child(path, key);
            if let Some(prop) = node.properties.get(key) {
                self.node(prop, value, old, &at);
            } else if let Some(extra) = node.additional.as_deref() {
                self.node(extra, value, old, &at);
            }
        }
        if node.embedded {
            for key in ["apiVersion", "kind"] {
                if map
                    .get(key)
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .is_empty()
                {
                    self.push(&child(path, key), ErrorKind::Required, "must not be empty");
                }
            }
        }
    }

    /// `required`, `minProperties`, `maxProperties`.
    fn object_rules(&mut self, node: &Node, map: &Map<String, Value>, path: &str) {
        for key in &node.required {
            if !map.contains_key(key) {
                self.push(&child(path, key), ErrorKind::Required, "");
            }
        }
        let len = map.len() as u64;
        if let Some(min) = node.min_properties.filter(|m| len < *m) {
            let why = format!("{} should have at least {min} properties", in_body(path));
            self.invalid(path, &len.to_string(), &why);
        }
        if let Some(max) = node.max_properties.filter(|m| len > *m) {
            self.push(
                path,
                ErrorKind::TooMany,
                format!("{len}: must have at most {max} items"),
            );
        }
    }

    fn junctors(&mut self, node: &Node, value: &Value, path: &str) {
        let passes = |n: &Node| {
            let mut sub = Check::default();
            sub.node(n, value, None, path);
            sub.errors
        };
        for n in &node.all_of {
            self.errors.extend(passes(n));
        }
        let shown = show(value);
        let at = in_body(path);
        if !node.any_of.is_empty() && !node.any_of.iter().any(|n| passes(n).is_empty()) {
            let why = format!("{at} must validate at least one schema (anyOf)");
            self.invalid(path, &shown, &why);
        }
        if !node.one_of.is_empty()
            && node.one_of.iter().filter(|n| passes(n).is_empty()).count() != 1
        {
            let why = format!("{at} must validate one and only one schema (oneOf)");
            self.invalid(path, &shown, &why);
        }
        if let Some(not) = node.not.as_deref()
            && passes(not).is_empty()
        {
            let why = format!("{at} must not validate the schema (not)");
            self.invalid(path, &shown, &why);
        }
    }

    fn invalid(&mut self, path: &str, value: &str, detail: &str) {
        self.errors.push(FieldError::invalid(path, value, detail));
    }

    fn push(&mut self, path: &str, kind: ErrorKind, body: impl Into<String>) {
        self.errors.push(FieldError::new(path, kind, body));
    }
}

/// The item of `old` that `item` replaces: by key in a map list, the equal item in a set (so
/// it is unchanged), none in an atomic list.
pub(crate) fn correlate<'a>(list: &ListType, item: &Value, old: &'a [Value]) -> Option<&'a Value> {
    match list {
        ListType::Atomic => None,
        ListType::Set => old.iter().find(|o| same(o, item)),
        ListType::Map(keys) => {
            let key = map_key(keys, item);
            old.iter().find(|o| map_key(keys, o) == key)
        }
    }
}

/// The key values of a map-list item, in key order (a missing key is absent).
fn map_key(keys: &[String], item: &Value) -> Vec<(String, Value)> {
    keys.iter()
        .filter_map(|k| Some((k.clone(), item.get(k)?.clone())))
        .collect()
}

/// JSON equality with numbers compared by value (`1` equals `1.0`).
fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        _ => a == b,
    }
}

/// `spec.replicas in body` (`in body` at the root).
fn in_body(path: &str) -> String {
    if path.is_empty() {
        "in body".to_owned()
    } else {
        format!("{path} in body")
    }
}
