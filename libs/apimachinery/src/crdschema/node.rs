//! The typed form of an `openAPIV3Schema`, and the structural checks kube-apiserver makes
//! before it accepts one: every specified field has a type (unless it is int-or-string or
//! keeps unknown fields), arrays have items, no `$ref`/`additionalProperties: false`/
//! `uniqueItems`, value validations (`allOf`, `anyOf`, `oneOf`, `not`) declare no types or
//! defaults, the root's `metadata` restricts only `name` and `generateName`, list types are
//! consistent, patterns compile, defaults validate and CEL rules compile.

use std::collections::BTreeMap;

use regex::Regex;
use serde_json::Value;

use super::cel::{self, Rule};
use super::{ErrorKind, FieldError, show, validate};

/// A schema's `type`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Type {
    Object,
    Array,
    String,
    Integer,
    Number,
    Boolean,
}

/// `x-kubernetes-list-type`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) enum ListType {
    #[default]
    Atomic,
    Set,
    /// Items are objects told apart by these keys.
    Map(Vec<String>),
}

/// One node of a compiled schema.
#[derive(Default)]
pub(crate) struct Node {
    pub(crate) type_: Option<Type>,
    pub(crate) nullable: bool,
    pub(crate) int_or_string: bool,
    pub(crate) preserve_unknown: bool,
    pub(crate) embedded: bool,
    pub(crate) properties: BTreeMap<String, Node>,
    /// `additionalProperties` as a schema.
    pub(crate) additional: Option<Box<Node>>,
    /// `additionalProperties: true`.
    pub(crate) additional_any: bool,
    pub(crate) items: Option<Box<Node>>,
    pub(crate) required: Vec<String>,
    pub(crate) enum_: Vec<Value>,
    pub(crate) format: Option<String>,
    pub(crate) minimum: Option<f64>,
    pub(crate) exclusive_minimum: bool,
    pub(crate) maximum: Option<f64>,
    pub(crate) exclusive_maximum: bool,
    pub(crate) multiple_of: Option<f64>,
    pub(crate) min_length: Option<u64>,
    pub(crate) max_length: Option<u64>,
    pub(crate) pattern: Option<(String, Regex)>,
    pub(crate) min_items: Option<u64>,
    pub(crate) max_items: Option<u64>,
    pub(crate) min_properties: Option<u64>,
    pub(crate) max_properties: Option<u64>,
    pub(crate) list: ListType,
    pub(crate) default: Option<Value>,
    pub(crate) all_of: Vec<Node>,
    pub(crate) any_of: Vec<Node>,
    pub(crate) one_of: Vec<Node>,
    pub(crate) not: Option<Box<Node>>,
    pub(crate) rules: Vec<Rule>,
}

/// Where a node sits, for the checks that depend on it.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Place {
    Root,
    Field,
    /// Inside `allOf`/`anyOf`/`oneOf`/`not`: value validations only.
    Junctor,
}

/// Keys a structural schema may not use, with kube's reason.
const FORBIDDEN: &[(&str, &str)] = &[
    ("$ref", "$ref is not supported"),
    ("definitions", "definitions are not supported"),
    ("patternProperties", "patternProperties is not supported"),
    ("dependencies", "dependencies is not supported"),
    ("additionalItems", "additionalItems is not supported"),
    ("id", "id is not supported"),
    ("$schema", "$schema is not supported"),
];

/// Compiles the root schema.
pub(crate) fn compile_root(raw: &Value) -> Result<Node, Vec<FieldError>> {
    let mut errors = Vec::new();
    let root = compile(raw, "", Place::Root, &mut errors);
    if root.type_ != Some(Type::Object) && raw.is_object() {
        let got = raw.get("type").and_then(Value::as_str).unwrap_or("");
        let body = format!("{}: supported values: \"object\"", show(&Value::from(got)));
        errors.push(FieldError::new("type", ErrorKind::NotSupported, body));
    }
    if let Some(meta) = raw.pointer("/properties/metadata") {
        check_metadata(meta, &mut errors);
    }
    if errors.is_empty() {
        Ok(root)
    } else {
        Err(errors)
    }
}

// === impl Node ===

impl Node {
    pub(crate) fn has_defaults(&self) -> bool {
        self.default.is_some()
            || self.properties.values().any(Node::has_defaults)
            || self.items.as_ref().is_some_and(|n| n.has_defaults())
            || self.additional.as_ref().is_some_and(|n| n.has_defaults())
    }

    /// True when a value of this node may carry fields the schema does not name.
    pub(crate) fn keeps_unknown(&self) -> bool {
        self.preserve_unknown || self.additional_any
    }
}

// === helpers ===

fn compile(raw: &Value, path: &str, place: Place, errors: &mut Vec<FieldError>) -> Node {
    let Some(map) = raw.as_object() else {
        errors.push(FieldError::invalid(
            path,
            &show(raw),
            "must be a schema object",
        ));
        return Node::default();
    };
    let at = |key: &str| super::child(path, key);
    for (key, why) in FORBIDDEN {
        if map.contains_key(*key) {
            errors.push(FieldError::new(&at(key), ErrorKind::Forbidden, *why));
        }
    }
    let flag = |key: &str| map.get(key).and_then(Value::as_bool).unwrap_or(false);
    let mut node = Node {
        nullable: flag("nullable"),
        int_or_string: flag("x-kubernetes-int-or-string"),
        preserve_unknown: flag("x-kubernetes-preserve-unknown-fields"),
        embedded: flag("x-kubernetes-embedded-resource"),
        ..Node::default()
    };
    if map.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(false)) {
        let why = "must be true or undefined";
        errors.push(FieldError::new(
            &at("x-kubernetes-preserve-unknown-fields"),
            ErrorKind::Invalid,
            format!("false: {why}"),
        ));
    }
    if flag("uniqueItems") {
        let why =
            "uniqueItems cannot be set to true since the runtime complexity becomes quadratic";
        errors.push(FieldError::new(
            &at("uniqueItems"),
            ErrorKind::Forbidden,
            why,
        ));
    }
    node.type_ = compile_type(
        map,
        path,
        place,
        node.int_or_string || node.preserve_unknown,
        errors,
    );
    compile_children(map, path, place, &mut node, errors);
    compile_values(map, path, &mut node, errors);
    compile_list_type(map, path, &mut node, errors);
    if let Some(default) = map.get("default") {
        if place == Place::Junctor {
            let why = "must not be set inside allOf, anyOf, oneOf or not";
            errors.push(FieldError::new(&at("default"), ErrorKind::Forbidden, why));
        } else {
            check_default(&node, default, &at("default"), errors);
            node.default = Some(default.clone());
        }
    }
    if let Some(rules) = map.get("x-kubernetes-validations") {
        node.rules = cel::compile_rules(rules, &at("x-kubernetes-validations"), errors);
    }
    node
}

fn compile_type(
    map: &serde_json::Map<String, Value>,
    path: &str,
    place: Place,
    untyped_ok: bool,
    errors: &mut Vec<FieldError>,
) -> Option<Type> {
    let at = super::child(path, "type");
    let Some(raw) = map.get("type") else {
        if place == Place::Field && !untyped_ok {
            let why = "must not be empty for specified object fields";
            errors.push(FieldError::new(&at, ErrorKind::Required, why));
        }
        return None;
    };
    if place == Place::Junctor {
        let why = "must be empty to be structural";
        errors.push(FieldError::new(&at, ErrorKind::Forbidden, why));
    }
    let type_ = match raw.as_str().unwrap_or("") {
        "object" => Type::Object,
        "array" => Type::Array,
        "string" => Type::String,
        "integer" => Type::Integer,
        "number" => Type::Number,
        "boolean" => Type::Boolean,
        _ => {
            let supported =
                "\"array\", \"boolean\", \"integer\", \"number\", \"object\", \"string\"";
            let body = format!("{}: supported values: {supported}", show(raw));
            errors.push(FieldError::new(&at, ErrorKind::NotSupported, body));
            return None;
        }
    };
    Some(type_)
}

fn compile_children(
    map: &serde_json::Map<String, Value>,
    path: &str,
    place: Place,
    node: &mut Node,
    errors: &mut Vec<FieldError>,
) {
    let inner = if place == Place::Junctor {
        Place::Junctor
    } else {
        Place::Field
    };
    if let Some(props) = map.get("properties").and_then(Value::as_object) {
        for (name, raw) in props {
            let at = super::child(path, &format!("properties[{name}]"));
            node.properties
                .insert(name.clone(), compile(raw, &at, inner, errors));
        }
    }
    match map.get("additionalProperties") {
        None => {}
        Some(Value::Bool(true)) => node.additional_any = true,
        Some(Value::Bool(false)) => {
            let why = "additionalProperties cannot be set to false";
            let at = super::child(path, "additionalProperties");
            errors.push(FieldError::new(&at, ErrorKind::Forbidden, why));
        }
        Some(raw) => {
            let at = super::child(path, "additionalProperties");
            if map.contains_key("properties") {
                let why = "additionalProperties and properties are mutual exclusive";
                errors.push(FieldError::new(&at, ErrorKind::Forbidden, why));
            }
            node.additional = Some(Box::new(compile(raw, &at, inner, errors)));
        }
    }
    match map.get("items") {
        Some(raw) => {
            let at = super::child(path, "items");
            node.items = Some(Box::new(compile(raw, &at, inner, errors)));
        }
        None if node.type_ == Some(Type::Array) && place != Place::Junctor => {
            let at = super::child(path, "items");
            errors.push(FieldError::new(
                &at,
                ErrorKind::Required,
                "must be specified",
            ));
        }
        None => {}
    }
    let node_is_int_or_string = node.int_or_string;
    for (key, list) in [
        ("allOf", &mut node.all_of),
        ("anyOf", &mut node.any_of),
        ("oneOf", &mut node.one_of),
    ] {
        let spelled = |raw: &Value| {
            // kube's one exception: an int-or-string may spell out its two types.
            node_is_int_or_string
                && match key {
                    "anyOf" => int_or_string_pair(map.get(key).unwrap_or(&Value::Null)),
                    "allOf" => raw.as_object().is_some_and(|o| {
                        o.len() == 1 && o.get("anyOf").is_some_and(int_or_string_pair)
                    }),
                    _ => false,
                }
        };
        for (i, raw) in map
            .get(key)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .enumerate()
        {
            if spelled(raw) {
                continue;
            }
            let at = super::child(path, &format!("{key}[{i}]"));
            list.push(compile(raw, &at, Place::Junctor, errors));
        }
    }
    if let Some(raw) = map.get("not") {
        let at = super::child(path, "not");
        node.not = Some(Box::new(compile(raw, &at, Place::Junctor, errors)));
    }
    node.required = map
        .get("required")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(str::to_owned)
        .collect();
}

fn compile_values(
    map: &serde_json::Map<String, Value>,
    path: &str,
    node: &mut Node,
    errors: &mut Vec<FieldError>,
) {
    let mut number = |key: &str| -> Option<f64> {
        let raw = map.get(key)?;
        let n = raw.as_f64();
        if n.is_none() {
            let at = super::child(path, key);
            errors.push(FieldError::invalid(&at, &show(raw), "must be a number"));
        }
        n
    };
    node.minimum = number("minimum");
    node.maximum = number("maximum");
    node.multiple_of = number("multipleOf");
    let mut count = |key: &str| -> Option<u64> {
        let raw = map.get(key)?;
        let n = raw.as_u64();
        if n.is_none() {
            let at = super::child(path, key);
            errors.push(FieldError::invalid(
                &at,
                &show(raw),
                "must be a non-negative integer",
            ));
        }
        n
    };
    node.min_length = count("minLength");
    node.max_length = count("maxLength");
    node.min_items = count("minItems");
    node.max_items = count("maxItems");
    node.min_properties = count("minProperties");
    node.max_properties = count("maxProperties");
    let flag = |key: &str| map.get(key).and_then(Value::as_bool).unwrap_or(false);
    node.exclusive_minimum = flag("exclusiveMinimum");
    node.exclusive_maximum = flag("exclusiveMaximum");
    node.format = map.get("format").and_then(Value::as_str).map(str::to_owned);
    node.enum_ = map
        .get("enum")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if let Some(raw) = map.get("pattern") {
        let source = raw.as_str().unwrap_or_default();
        match Regex::new(source) {
            Ok(re) => node.pattern = Some((source.to_owned(), re)),
            Err(e) => {
                let at = super::child(path, "pattern");
                let why = format!("must be a valid regular expression, but isn't: {e}");
                errors.push(FieldError::invalid(&at, &show(raw), &why));
            }
        }
    }
}

fn compile_list_type(
    map: &serde_json::Map<String, Value>,
    path: &str,
    node: &mut Node,
    errors: &mut Vec<FieldError>,
) {
    let keys: Vec<String> = map
        .get("x-kubernetes-list-map-keys")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(str::to_owned)
        .collect();
    let keys_at = super::child(path, "x-kubernetes-list-map-keys");
    let list_type = map.get("x-kubernetes-list-type");
    match list_type.and_then(Value::as_str) {
        None if list_type.is_none() => {}
        Some("atomic") => {}
        Some("set") => node.list = ListType::Set,
        Some("map") => {
            if keys.is_empty() {
                let why = "must not be empty if x-kubernetes-list-type is map";
                errors.push(FieldError::new(&keys_at, ErrorKind::Required, why));
            }
            let item = node.items.as_deref();
            for key in &keys {
                let declared = item.is_some_and(|i| i.properties.contains_key(key));
                if !declared {
                    let why = "entries must all be names of item properties";
                    errors.push(FieldError::invalid(
                        &keys_at,
                        &show(&Value::from(key.as_str())),
                        why,
                    ));
                }
            }
            node.list = ListType::Map(keys.clone());
        }
        _ => {
            let at = super::child(path, "x-kubernetes-list-type");
            let body = format!(
                "{}: supported values: \"atomic\", \"map\", \"set\"",
                show(list_type.unwrap_or(&Value::Null))
            );
            errors.push(FieldError::new(&at, ErrorKind::NotSupported, body));
        }
    }
    if list_type.is_some() && node.type_ != Some(Type::Array) {
        let at = super::child(path, "x-kubernetes-list-type");
        errors.push(FieldError::new(
            &at,
            ErrorKind::Forbidden,
            "must only be used if type is array",
        ));
    }
    if !keys.is_empty() && !matches!(node.list, ListType::Map(_)) {
        let why = "must be empty if x-kubernetes-list-type is not map";
        errors.push(FieldError::new(&keys_at, ErrorKind::Forbidden, why));
    }
}

/// `[{type: integer}, {type: string}]`, in either order.
fn int_or_string_pair(list: &Value) -> bool {
    let Some(items) = list.as_array() else {
        return false;
    };
    let types: Vec<&str> = items
        .iter()
        .filter_map(Value::as_object)
        .filter(|o| o.len() == 1)
        .filter_map(|o| o.get("type")?.as_str())
        .collect();
    items.len() == 2
        && matches!(
            types.as_slice(),
            ["integer", "string"] | ["string", "integer"]
        )
}

/// A default must be valid for its own node (kube refuses the CRD otherwise).
fn check_default(node: &Node, default: &Value, at: &str, errors: &mut Vec<FieldError>) {
    for mut e in validate::validate_value(node, default) {
        e.field = if e.field.is_empty() {
            at.to_owned()
        } else {
            format!("{at}.{}", e.field)
        };
        errors.push(e);
    }
}

/// The root's `metadata` may only restrict `name` and `generateName` (as strings).
fn check_metadata(meta: &Value, errors: &mut Vec<FieldError>) {
    let allowed_top = ["type", "properties", "description"];
    let props = meta.get("properties").and_then(Value::as_object);
    let extra_key = meta
        .as_object()
        .is_some_and(|m| m.keys().any(|k| !allowed_top.contains(&k.as_str())));
    let extra_prop = props.is_some_and(|p| p.keys().any(|k| k != "name" && k != "generateName"));
    if extra_key || extra_prop {
        let why = "must not specify anything other than name and generateName, but metadata is \
                   implicitly specified";
        errors.push(FieldError::new(
            "properties[metadata]",
            ErrorKind::Forbidden,
            why,
        ));
    }
}
