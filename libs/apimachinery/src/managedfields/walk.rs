//! Objects as field sets, and the edits apply makes: the leaves of an object (scalars, atomic
//! lists, empty maps, and the items of keyed lists and sets, whose fields count too), the value
//! at a path, removing a path, and merging an applied configuration into a live object.
//!
//! A list is keyed by its keys when every item is an object carrying them, with no key twice,
//! and a set when every item is a scalar; otherwise it is atomic, whatever the schema says, as
//! the data cannot be addressed item by item. The keys come from the strategic merge keys of
//! the built-in kinds, or from a custom resource's schema (`x-kubernetes-list-type` and
//! `x-kubernetes-list-map-keys`, and `x-kubernetes-map-type: atomic` for a map or struct set
//! whole).

use std::collections::HashSet;

use serde_json::{Map, Value};

use super::fieldset::{self, Element, FieldSet, Path, Step};
use crate::catalog::ResourceInfo;
use crate::patch::schema::{ListStrategy, Schema};

/// How one list is addressed.
#[derive(Clone, Debug, PartialEq, Eq)]
enum ListKind {
    Atomic,
    Set,
    Keyed(Vec<Key>),
}

/// One key field of a keyed list, and the value an item without it has (the schema's
/// default, as structured merge fills it: a container port without `protocol` is `TCP`).
#[derive(Clone, Debug, PartialEq, Eq)]
struct Key {
    name: String,
    default: Option<Value>,
}

impl Key {
    fn new(name: &str) -> Key {
        Key {
            name: name.to_owned(),
            default: None,
        }
    }

    fn of<'v>(&'v self, item: &'v Value) -> Option<&'v Value> {
        self.pick(item.get(&self.name))
    }

    fn pick<'v>(&'v self, value: Option<&'v Value>) -> Option<&'v Value> {
        value.filter(|v| !v.is_null()).or(self.default.as_ref())
    }
}

/// The keys of a built-in list from its strategic merge key: kube's list-map keys add the
/// protocol to ports (`+listMapKey=containerPort +listMapKey=protocol`, TCP by default) and
/// `whenUnsatisfiable` to topology spread constraints.
fn builtin_keys(merge_key: &str) -> Vec<Key> {
    let protocol = Key {
        name: "protocol".to_owned(),
        default: Some(Value::String("TCP".to_owned())),
    };
    match merge_key {
        "containerPort" | "port" => vec![Key::new(merge_key), protocol],
        "topologyKey" => vec![Key::new(merge_key), Key::new("whenUnsatisfiable")],
        _ => vec![Key::new(merge_key)],
    }
}

/// Where a kind's list and map types come from.
pub(crate) enum Structure<'a> {
    /// The strategic merge keys of the built-in kinds (and ObjectMeta's for every kind).
    Builtin(Schema),
    /// A custom resource's structural schema.
    Custom(Schema, &'a Value),
}

impl<'a> Structure<'a> {
    pub(crate) fn of(info: &'a ResourceInfo) -> Structure<'a> {
        let schema = Schema::for_resource(info);
        match info.structure.as_deref() {
            Some(root) => Structure::Custom(schema, root),
            None => Structure::Builtin(schema),
        }
    }

    fn list(&self, spath: &[String]) -> ListKind {
        let builtin = |schema: &Schema| match schema.list(spath) {
            ListStrategy::Atomic => ListKind::Atomic,
            ListStrategy::Set => ListKind::Set,
            ListStrategy::MergeKey(key) => ListKind::Keyed(builtin_keys(key)),
        };
        match self {
            Structure::Builtin(schema) => builtin(schema),
            Structure::Custom(schema, _) if spath.first().is_some_and(|s| s == "metadata") => {
                builtin(schema)
            }
            Structure::Custom(_, root) => {
                let node = schema_at(root, spath);
                match node.and_then(|n| n.get("x-kubernetes-list-type")?.as_str()) {
                    Some("set") => ListKind::Set,
                    Some("map") => {
                        let names = node.and_then(|n| n.get("x-kubernetes-list-map-keys"));
                        let names = names.and_then(Value::as_array).into_iter().flatten();
                        let item = node.and_then(|n| n.get("items"));
                        let keys: Vec<Key> = names
                            .filter_map(Value::as_str)
                            .map(|name| Key {
                                name: name.to_owned(),
                                default: item
                                    .and_then(|i| i.get("properties")?.get(name)?.get("default"))
                                    .cloned(),
                            })
                            .collect();
                        if keys.is_empty() {
                            ListKind::Atomic
                        } else {
                            ListKind::Keyed(keys)
                        }
                    }
                    _ => ListKind::Atomic,
                }
            }
        }
    }

    /// Whether the map at `spath` is set whole (`x-kubernetes-map-type: atomic`, or a
    /// built-in kind's atomic selector).
    fn atomic_map(&self, spath: &[String]) -> bool {
        match self {
            Structure::Builtin(schema) => schema.atomic_map(spath),
            Structure::Custom(_, root) if !spath.is_empty() && spath[0] != "metadata" => {
                schema_at(root, spath)
                    .and_then(|n| n.get("x-kubernetes-map-type")?.as_str())
                    .is_some_and(|t| t == "atomic")
            }
            _ => false,
        }
    }
}

/// The schema node of the field at `spath` (object keys from the root; the items of a list
/// add no step).
fn schema_at<'v>(root: &'v Value, spath: &[String]) -> Option<&'v Value> {
    let mut node = root;
    for name in spath {
        while let Some(items) = node.get("items").filter(|i| i.is_object()) {
            node = items;
        }
        node = match node.get("properties").and_then(|p| p.get(name)) {
            Some(field) => field,
            None => node.get("additionalProperties").filter(|a| a.is_object())?,
        };
    }
    Some(node)
}

/// Walks objects knowing where it is for the schema (the object keys from the root).
pub(crate) struct Walker<'a> {
    structure: &'a Structure<'a>,
}

// === impl Walker ===

impl<'a> Walker<'a> {
    pub(crate) fn new(structure: &'a Structure<'a>) -> Walker<'a> {
        Walker { structure }
    }

    /// Every leaf of `obj` (nulls are no fields).
    pub(crate) fn fields(&self, obj: &Value) -> FieldSet {
        let mut out = Vec::new();
        if let Value::Object(map) = obj {
            self.map_fields(map, &mut Vec::new(), &mut Vec::new(), &mut out);
        }
        out.into_iter().collect()
    }

    fn map_fields(
        &self,
        map: &Map<String, Value>,
        path: &mut Path,
        spath: &mut Vec<String>,
        out: &mut Vec<Path>,
    ) {
        for (name, value) in map {
            if value.is_null() {
                continue;
            }
            path.push(fieldset::field(name));
            spath.push(name.clone());
            self.value_fields(value, path, spath, out);
            spath.pop();
            path.pop();
        }
    }

    fn value_fields(
        &self,
        value: &Value,
        path: &mut Path,
        spath: &mut Vec<String>,
        out: &mut Vec<Path>,
    ) {
        match value {
            Value::Object(map) if !map.is_empty() && !self.structure.atomic_map(spath) => {
                self.map_fields(map, path, spath, out)
            }
            Value::Array(items) => match self.list_kind(spath, items) {
                ListKind::Atomic => out.push(path.clone()),
                ListKind::Set => {
                    for item in items {
                        out.push(with(path, fieldset::value(item)));
                    }
                }
                ListKind::Keyed(keys) => {
                    for item in items {
                        let Value::Object(fields) = item else {
                            continue;
                        };
                        path.push(item_key(&keys, fields));
                        out.push(path.clone());
                        self.map_fields(fields, path, spath, out);
                        path.pop();
                    }
                }
            },
            _ => out.push(path.clone()),
        }
    }

    /// `obj` with each keyed list item's missing keys set to their defaults (a container
    /// port without `protocol` gets `TCP`), as structured merge reads an applied configuration
    /// when it compares values.
    pub(crate) fn with_default_keys(&self, obj: &Value) -> Value {
        let mut out = obj.clone();
        self.default_keys_at(&mut out, &mut Vec::new());
        out
    }

    fn default_keys_at(&self, value: &mut Value, spath: &mut Vec<String>) {
        match value {
            Value::Object(map) if !self.structure.atomic_map(spath) => {
                for (name, child) in map.iter_mut() {
                    spath.push(name.clone());
                    self.default_keys_at(child, spath);
                    spath.pop();
                }
            }
            Value::Array(items) => {
                let ListKind::Keyed(keys) = self.list_kind(spath, items) else {
                    return;
                };
                for item in items.iter_mut() {
                    if let Value::Object(fields) = item {
                        for key in &keys {
                            let missing = fields.get(&key.name).is_none_or(Value::is_null);
                            if let (true, Some(default)) = (missing, &key.default) {
                                fields.insert(key.name.clone(), default.clone());
                            }
                        }
                    }
                    self.default_keys_at(item, spath);
                }
            }
            _ => {}
        }
    }

    /// Merges `applied` into `live`: maps key by key (`null` removes), keyed lists item by
    /// item (new items appended), sets as unions; atomic lists and scalars are replaced.
    pub(crate) fn merge(&self, live: &mut Value, applied: &Value) {
        self.merge_at(live, applied, &mut Vec::new());
    }

    fn merge_at(&self, live: &mut Value, applied: &Value, spath: &mut Vec<String>) {
        match (live, applied) {
            (live, Value::Object(_)) if self.structure.atomic_map(spath) => {
                *live = applied.clone();
            }
            (Value::Object(live), Value::Object(applied)) => {
                for (name, value) in applied {
                    if value.is_null() {
                        live.remove(name);
                        continue;
                    }
                    spath.push(name.clone());
                    match live.get_mut(name) {
                        Some(have) => self.merge_at(have, value, spath),
                        None => {
                            let mut fresh = Value::Null;
                            self.merge_at(&mut fresh, value, spath);
                            live.insert(name.clone(), fresh);
                        }
                    }
                    spath.pop();
                }
            }
            (Value::Array(live), Value::Array(applied)) => {
                self.merge_list(live, applied, spath);
            }
            (live, Value::Object(applied)) => {
                let mut fresh = Value::Object(Map::new());
                self.merge_at(&mut fresh, &Value::Object(applied.clone()), spath);
                *live = fresh;
            }
            (live, applied) => *live = applied.clone(),
        }
    }

    fn merge_list(&self, live: &mut Vec<Value>, applied: &[Value], spath: &mut Vec<String>) {
        let kind = self.list_kind(spath, applied);
        if kind != self.list_kind(spath, live) && !live.is_empty() {
            *live = applied.to_vec();
            return;
        }
        match kind {
            ListKind::Atomic => *live = applied.to_vec(),
            ListKind::Set => {
                for item in applied {
                    if !live.contains(item) {
                        live.push(item.clone());
                    }
                }
            }
            ListKind::Keyed(keys) => {
                for item in applied {
                    let same = |have: &Value| keys.iter().all(|k| k.of(have) == k.of(item));
                    let found = live.iter_mut().find(|have| same(have));
                    match found {
                        Some(have) => self.merge_at(have, item, spath),
                        None => {
                            let mut fresh = Value::Null;
                            self.merge_at(&mut fresh, item, spath);
                            live.push(fresh);
                        }
                    }
                }
            }
        }
    }

    fn list_kind(&self, spath: &[String], items: &[Value]) -> ListKind {
        match self.structure.list(spath) {
            ListKind::Set if items.iter().all(is_scalar) => ListKind::Set,
            ListKind::Keyed(keys) if keyed_by(items, &keys) => ListKind::Keyed(keys),
            _ => ListKind::Atomic,
        }
    }
}

/// The value at `path` in `obj`.
pub(crate) fn get<'v>(obj: &'v Value, path: &[Element]) -> Option<&'v Value> {
    let mut at = obj;
    for element in path {
        at = child(at, element)?;
    }
    Some(at)
}

/// Removes what `path` names (a field, or a list item); maps left empty by it go too, up to
/// the first one `keep` names. Returns whether something was removed.
pub(crate) fn remove(obj: &mut Value, path: &[Element], keep: &FieldSet) -> bool {
    let Some((last, parent_path)) = path.split_last() else {
        return false;
    };
    let Some(parent) = get_mut(obj, parent_path) else {
        return false;
    };
    let removed = match (parent, fieldset::step(last)) {
        (Value::Object(map), Some(Step::Field(name))) => map.remove(&name).is_some(),
        (Value::Array(items), Some(step)) => match position(items, &step) {
            Some(i) => {
                items.remove(i);
                true
            }
            None => false,
        },
        _ => false,
    };
    let emptied = get(obj, parent_path).is_some_and(|p| p.as_object().is_some_and(Map::is_empty));
    let is_field = parent_path
        .last()
        .is_some_and(|e| matches!(fieldset::step(e), Some(Step::Field(_))));
    if removed && emptied && is_field && !keep.covers(parent_path) {
        remove(obj, parent_path, keep);
    }
    removed
}

fn get_mut<'v>(obj: &'v mut Value, path: &[Element]) -> Option<&'v mut Value> {
    let mut at = obj;
    for element in path {
        at = match (at, fieldset::step(element)?) {
            (Value::Object(map), Step::Field(name)) => map.get_mut(&name)?,
            (Value::Array(items), step) => {
                let i = position(items, &step)?;
                &mut items[i]
            }
            _ => return None,
        };
    }
    Some(at)
}

fn child<'v>(at: &'v Value, element: &str) -> Option<&'v Value> {
    match (at, fieldset::step(element)?) {
        (Value::Object(map), Step::Field(name)) => map.get(&name),
        (Value::Array(items), step) => items.get(position(items, &step)?),
        _ => None,
    }
}

/// The index of the list item a step names.
fn position(items: &[Value], step: &Step) -> Option<usize> {
    match step {
        Step::Key(keys) => items.iter().position(|item| {
            keys.iter()
                .all(|(name, want)| item.get(name).is_some_and(|v| v == want))
        }),
        Step::Value(want) => items.iter().position(|item| item == want),
        Step::Index(i) => (*i < items.len()).then_some(*i),
        Step::Field(_) => None,
    }
}

fn item_key(keys: &[Key], fields: &Map<String, Value>) -> Element {
    let mut map = Map::new();
    for key in keys {
        if let Some(v) = key.pick(fields.get(&key.name)) {
            map.insert(key.name.clone(), v.clone());
        }
    }
    fieldset::key(&map)
}

/// Every item carries every key (or its default), and no two items the same values.
fn keyed_by(items: &[Value], keys: &[Key]) -> bool {
    let mut seen = HashSet::new();
    items.iter().all(|item| {
        let values: Option<Vec<String>> = keys
            .iter()
            .map(|k| k.of(item).map(Value::to_string))
            .collect();
        values.is_some_and(|v| seen.insert(v))
    })
}

fn is_scalar(v: &Value) -> bool {
    !(v.is_object() || v.is_array())
}

fn with(path: &[Element], element: Element) -> Path {
    let mut p = path.to_vec();
    p.push(element);
    p
}
