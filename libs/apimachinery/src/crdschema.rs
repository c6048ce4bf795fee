//! CustomResourceDefinition structural schemas, applied to custom resources as
//! kube-apiserver applies them: a version's `openAPIV3Schema` is compiled once into a
//! [`Schema`] (refused with field errors when it is not structural or a CEL rule does not
//! compile), and then [`Schema::prune`]s unknown fields, [`Schema::default`]s missing ones,
//! and [`Schema::validate`]s objects, collecting every error with its field path, the
//! `x-kubernetes-validations` CEL rules included (with `oldSelf` on updates).
//!
//! Cost limits of the CEL rules (kube bounds them by an estimated cost): a rule's source is at
//! most [`MAX_RULE_BYTES`] and [`MAX_RULE_NODES`] parsed nodes; before a rule runs on a value
//! its work is bounded as `nodes × (size of self and oldSelf)^(nested comprehensions)`, and a
//! rule over [`PER_CALL_COST_LIMIT`] is refused for that object ("call cost exceeds limit");
//! one validation spends at most [`RUNTIME_COST_BUDGET`] over all its rules, then stops
//! evaluating ("running out of cost budget"), as kube-apiserver does.

use serde_json::{Map, Value};

use crate::ApiError;

mod cel;
mod format;
mod mutate;
mod node;
mod validate;

#[cfg(test)]
mod tests;

/// An error of a schema: `field` is its place under `openAPIV3Schema` (`""` for the root,
/// `properties[spec].type`).
pub type SchemaError = FieldError;

/// The longest CEL rule (or message expression) source accepted, in bytes.
pub const MAX_RULE_BYTES: usize = 4096;
/// The most parsed nodes a CEL rule may have.
pub const MAX_RULE_NODES: usize = 2000;
/// The most work one evaluation of one rule may take (kube's per-call limit).
pub const PER_CALL_COST_LIMIT: u64 = 1_000_000;
/// The most work all the rules of one validation may take (kube's runtime budget).
pub const RUNTIME_COST_BUDGET: u64 = 10_000_000;

/// A compiled structural schema of one CRD version.
pub struct Schema {
    root: node::Node,
    /// The `openAPIV3Schema` it was compiled from (schemas compare by it).
    source: Value,
}

/// The kind of a field error (kube's `field.ErrorType`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// `Required value`.
    Required,
    /// `Invalid value` of the wrong type.
    TypeInvalid,
    /// `Invalid value`.
    Invalid,
    /// `Unsupported value` (enum).
    NotSupported,
    /// `Duplicate value`.
    Duplicate,
    /// `Too long`.
    TooLong,
    /// `Too many`.
    TooMany,
    /// `Forbidden`.
    Forbidden,
}

/// One error of a validation: where, what kind, and kube's text for it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldError {
    /// `spec.replicas`, `spec.ports[0].name`.
    pub field: String,
    pub kind: ErrorKind,
    /// The part after the error kind (`Invalid value: "string": <this>`), Go-quoted value
    /// included where kube shows one.
    pub body: String,
}

/// Which part of an object a write changes: a `status` write reports only the status's
/// errors.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Part {
    /// The whole object (create, update of the main resource).
    Whole,
    /// `status` only.
    Status,
}

// === impl Schema ===

impl Schema {
    /// Compiles `openapi` (a version's `schema.openAPIV3Schema`), refusing a schema that is
    /// not structural, a pattern that is no regular expression, or a CEL rule that does not
    /// compile; each error names its place under `openAPIV3Schema`.
    pub fn compile(openapi: &Value) -> Result<Schema, Vec<SchemaError>> {
        let root = node::compile_root(openapi)?;
        Ok(Schema {
            root,
            source: openapi.clone(),
        })
    }

    /// True when some field has a `default`.
    pub fn has_defaults(&self) -> bool {
        self.root.has_defaults()
    }

    /// Removes the fields the schema does not know (apiVersion, kind and metadata always
    /// stay); answers their paths.
    pub fn prune(&self, obj: &mut Value) -> Vec<String> {
        let mut pruned = Vec::new();
        mutate::prune_root(&self.root, obj, &mut pruned);
        pruned
    }

    /// Sets the `default` of every missing field (and of null non-nullable ones).
    pub fn default(&self, obj: &mut Value) {
        mutate::default_root(&self.root, obj);
    }

    /// Every error of `obj` against the schema and its CEL rules; `old` is the stored object
    /// of an update (transition rules run only then, and values unchanged from it are not
    /// re-validated, as kube's validation ratcheting does).
    pub fn validate(&self, obj: &Value, old: Option<&Value>, part: Part) -> Vec<FieldError> {
        let mut errors = validate::validate_root(&self.root, obj, old);
        if errors.iter().any(|e| e.kind == ErrorKind::TypeInvalid) {
            errors.push(FieldError {
                field: "<nil>".into(),
                kind: ErrorKind::Invalid,
                body: "\"null\": some validation rules were not checked because the object \
                       was invalid; correct the existing errors to complete validation"
                    .into(),
            });
        } else {
            errors.extend(cel::validate_root(&self.root, obj, old));
        }
        if part == Part::Status {
            errors.retain(|e| e.field == "status" || e.field.starts_with("status."));
        }
        errors
    }
}

impl PartialEq for Schema {
    fn eq(&self, other: &Schema) -> bool {
        self.source == other.source
    }
}

impl Eq for Schema {}

impl std::fmt::Debug for Schema {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Schema")
            .field("source", &self.source)
            .finish_non_exhaustive()
    }
}

// === impl FieldError ===

impl FieldError {
    /// kube's cause reason (`FieldValueInvalid`, `FieldValueRequired`, ...).
    pub fn reason(&self) -> &'static str {
        match self.kind {
            ErrorKind::Required => "FieldValueRequired",
            ErrorKind::TypeInvalid => "FieldValueTypeInvalid",
            ErrorKind::Invalid => "FieldValueInvalid",
            ErrorKind::NotSupported => "FieldValueNotSupported",
            ErrorKind::Duplicate => "FieldValueDuplicate",
            ErrorKind::TooLong => "FieldValueTooLong",
            ErrorKind::TooMany => "FieldValueTooMany",
            ErrorKind::Forbidden => "FieldValueForbidden",
        }
    }

    /// The error without its field: `Invalid value: "string": spec.replicas in body must be
    /// of type integer: "string"`.
    pub fn message(&self) -> String {
        let kind = match self.kind {
            ErrorKind::Required => "Required value",
            ErrorKind::TypeInvalid | ErrorKind::Invalid => "Invalid value",
            ErrorKind::NotSupported => "Unsupported value",
            ErrorKind::Duplicate => "Duplicate value",
            ErrorKind::TooLong => "Too long",
            ErrorKind::TooMany => "Too many",
            ErrorKind::Forbidden => "Forbidden",
        };
        if self.body.is_empty() {
            kind.to_owned()
        } else {
            format!("{kind}: {}", self.body)
        }
    }

    pub(crate) fn new(field: &str, kind: ErrorKind, body: impl Into<String>) -> FieldError {
        FieldError {
            field: field.to_owned(),
            kind,
            body: body.into(),
        }
    }

    /// `Invalid value: <value>: <detail>`.
    pub(crate) fn invalid(field: &str, value: &str, detail: &str) -> FieldError {
        FieldError::new(field, ErrorKind::Invalid, format!("{value}: {detail}"))
    }
}

// === helpers ===

/// The 422 kube-apiserver answers for `errors` of object `name` of `group`'s `kind`:
/// `Widget.example.com "w" is invalid: [spec.replicas: Invalid value: ..., ...]`, one cause
/// each.
pub fn invalid(group: &str, kind: &str, name: &str, errors: &[FieldError]) -> ApiError {
    let qualified = if group.is_empty() {
        kind.to_owned()
    } else {
        format!("{kind}.{group}")
    };
    let name_q = crate::status::go_quote(name);
    let texts: Vec<String> = errors
        .iter()
        .map(|e| format!("{}: {}", e.field, e.message()))
        .collect();
    let message = match texts.as_slice() {
        [] => format!("{qualified} {name_q} is invalid"),
        [one] => format!("{qualified} {name_q} is invalid: {one}"),
        many => format!("{qualified} {name_q} is invalid: [{}]", many.join(", ")),
    };
    let causes: Vec<Value> = errors
        .iter()
        .map(|e| {
            let mut cause = Map::new();
            cause.insert("reason".into(), Value::from(e.reason()));
            cause.insert("message".into(), Value::from(e.message()));
            cause.insert("field".into(), Value::from(e.field.clone()));
            Value::Object(cause)
        })
        .collect();
    let mut details = Map::new();
    for (key, value) in [("name", name), ("group", group), ("kind", kind)] {
        if !value.is_empty() {
            details.insert(key.into(), Value::from(value));
        }
    }
    details.insert("causes".into(), Value::Array(causes));
    let mut err = ApiError::new(422, "Invalid", message);
    err.details = Some(Value::Object(details));
    err
}

/// A value as kube's field errors print it: strings Go-quoted, numbers and booleans plain,
/// null as `null`, objects and lists as JSON.
pub(crate) fn show(value: &Value) -> String {
    match value {
        Value::String(s) => crate::status::go_quote(s),
        other => other.to_string(),
    }
}

/// The JSON type name of `value` (`object`, `array`, `string`, `integer`, `number`,
/// `boolean`, `null`).
pub(crate) fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// `path.key` (`key` at the root).
pub(crate) fn child(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_owned()
    } else {
        format!("{path}.{key}")
    }
}

/// `path[i]`.
pub(crate) fn index(path: &str, i: usize) -> String {
    format!("{path}[{i}]")
}
