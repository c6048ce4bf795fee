//! Server-side apply and `metadata.managedFields`: which manager owns which fields of an
//! object, in Kubernetes' FieldsV1 form, as kube-apiserver's field manager keeps them.
//!
//! - [`record_update`]: a create, update or non-apply patch gives its manager's `Update` entry
//!   the fields it set or changed, takes them from the other managers, and drops owned fields
//!   the object no longer has.
//! - [`apply`]: an applied configuration's fields become its manager's `Apply` entry; a field
//!   another manager owns with a different live value is a conflict (409, or taken over with
//!   `force`); fields the manager applied before and no longer does are removed from the object
//!   unless another manager owns them. Keyed lists (containers by `name`, ...) merge item by
//!   item, sets by value; other lists and scalars are replaced.
//!
//! A manager is a name, an operation and a subresource: `kubectl` applying and `kubectl`
//! scaling through `scale` are two owners. Which fields count depends on the [`Scope`]: the
//! main resource leaves `status` to its subresource where there is one, `status` counts only
//! the status, `scale` only `spec.replicas`. The server's metadata (name, uid,
//! resourceVersion, ...) and `apiVersion`/`kind` are nobody's.
//!
//! A custom resource's lists and maps follow its schema (`x-kubernetes-list-type` `map` with
//! its `x-kubernetes-list-map-keys`, `set`, `atomic`; `x-kubernetes-map-type: atomic`).
//! The built-in kinds' lists are keyed by their strategic merge keys, ports also by protocol
//! (TCP when absent) and topology spread constraints by `whenUnsatisfiable`, as kube's list-map
//! keys are; workloads' and Services' selectors and pods' node selectors are atomic. Known
//! differences from kube-apiserver: other atomic structs of the built-in kinds merge field by
//! field; `managedFields` sent in a body are ignored (the server's are kept).

mod fieldset;
mod walk;

use serde_json::{Map, Value, json};

use crate::catalog::ResourceInfo;
use crate::status::ApiError;
use fieldset::{FieldSet, Path, Step};
use walk::{Structure, Walker};

/// Who writes, as a managedFields entry names it (without the operation).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Manager<'a> {
    /// The `fieldManager` (or what the User-Agent gives).
    pub name: &'a str,
    /// `status` or `scale`, when the write is to a subresource.
    pub subresource: Option<&'a str>,
    /// The API version written (`apps/v1`).
    pub api_version: &'a str,
}

/// Which fields of the object a write can own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// The main resource; `status` excluded when the kind has a status subresource.
    Main { skip_status: bool },
    /// The `status` subresource: the status only.
    Status,
    /// The `scale` subresource: `spec.replicas` only.
    Scale,
}

/// A field another manager owns with a different value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Conflict {
    pub manager: String,
    pub subresource: Option<String>,
    pub api_version: String,
    /// As kube-apiserver prints it: `.spec.replicas`.
    pub field: String,
}

/// One managedFields entry, parsed.
#[derive(Clone, Debug)]
struct Entry {
    manager: String,
    operation: String,
    api_version: String,
    time: Option<String>,
    subresource: Option<String>,
    fields: FieldSet,
}

/// Metadata fields nobody owns.
const SERVER_METADATA: [&str; 10] = [
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "managedFields",
    "selfLink",
];

// === impl Manager ===

impl Manager<'_> {
    fn is(&self, entry: &Entry, operation: &str) -> bool {
        entry.manager == self.name
            && entry.operation == operation
            && entry.subresource.as_deref() == self.subresource
    }

    fn entry(&self, operation: &str, fields: FieldSet, now: &str) -> Entry {
        Entry {
            manager: self.name.to_owned(),
            operation: operation.to_owned(),
            api_version: self.api_version.to_owned(),
            time: Some(now.to_owned()),
            subresource: self.subresource.map(str::to_owned),
            fields,
        }
    }
}

// === impl Conflict ===

impl Conflict {
    /// `conflict with "m" using apps/v1` (with `with subresource "scale"` when there is one).
    pub fn owner(&self) -> String {
        let sub = match &self.subresource {
            Some(s) => format!(" with subresource {s:?}"),
            None => String::new(),
        };
        format!(
            "conflict with {:?}{sub} using {}",
            self.manager, self.api_version
        )
    }
}

/// The 409 kube-apiserver answers an apply with conflicts: `Apply failed with 1 conflict:
/// conflict with "m" using apps/v1: .spec.replicas`, one `FieldManagerConflict` cause each.
pub fn conflict_error(conflicts: &[Conflict]) -> ApiError {
    let message = match conflicts {
        [one] => format!(
            "Apply failed with 1 conflict: {}: {}",
            one.owner(),
            one.field
        ),
        many => {
            let mut text = format!("Apply failed with {} conflicts: ", many.len());
            let mut owners: Vec<String> = many.iter().map(Conflict::owner).collect();
            owners.dedup();
            for owner in owners {
                text.push_str(&owner.replacen("conflict", "conflicts", 1));
                text.push_str(":\n");
                for c in many.iter().filter(|c| c.owner() == owner) {
                    text.push_str(&format!("- {}\n", c.field));
                }
            }
            text
        }
    };
    let causes: Vec<Value> = conflicts
        .iter()
        .map(|c| json!({"type": "FieldManagerConflict", "message": c.owner(), "field": c.field}))
        .collect();
    ApiError {
        details: Some(json!({ "causes": causes })),
        ..ApiError::new(409, "Conflict", message)
    }
}

/// An apply body (`application/apply-patch+yaml`): YAML or JSON, one object.
pub fn decode_config(body: &[u8]) -> Result<Value, ApiError> {
    let value: Value = match serde_json::from_slice(body) {
        Ok(v) => v,
        Err(_) => serde_yaml_ng::from_slice(body).map_err(|e| {
            ApiError::bad_request(format!("error decoding YAML in the apply patch: {e}"))
        })?,
    };
    if !value.is_object() {
        return Err(ApiError::bad_request(
            "the apply patch must be a single object",
        ));
    }
    Ok(value)
}

/// Records a non-apply write of `new` over `old` (`None`: a create) by `who` (`None`: the
/// server itself, which owns nothing: `old`'s entries are kept as they are). `new`'s own
/// `managedFields` are replaced.
pub fn record_update(
    info: &ResourceInfo,
    scope: Scope,
    old: Option<&Value>,
    new: &mut Value,
    who: Option<&Manager<'_>>,
    now: &str,
) {
    let Some(who) = who else {
        let kept = old
            .and_then(|o| o.pointer("/metadata/managedFields"))
            .cloned();
        set_entries_raw(new, kept);
        return;
    };
    let structure = Structure::of(info);
    let walker = Walker::new(&structure);
    let mut entries = old.map(parse_entries).unwrap_or_default();
    let old = old.unwrap_or(&Value::Null);
    let mut changed = walker.fields(new);
    changed.retain(|p| in_scope(scope, p) && differs(old, new, p));
    for entry in entries.iter_mut() {
        if !who.is(entry, "Update") {
            entry.fields.retain(|p| !changed.contains(p));
        }
        entry.fields.retain(|p| walk::get(new, p).is_some());
    }
    match entries.iter_mut().find(|e| who.is(e, "Update")) {
        Some(mine) => {
            let before = mine.fields.clone();
            mine.fields.extend(&changed);
            if mine.fields != before {
                mine.time = Some(now.to_owned());
                who.api_version.clone_into(&mut mine.api_version);
            }
        }
        None if !changed.is_empty() => entries.push(who.entry("Update", changed, now)),
        None => {}
    }
    set_entries(new, entries);
}

/// Applies `config` (an applied configuration, already checked against the URL) by `who` to
/// `live` (`{}` for an object that does not exist yet); returns the object to store, with its
/// managedFields, or the conflicts (none when `force`: the fields are taken over).
pub fn apply(
    info: &ResourceInfo,
    scope: Scope,
    live: &Value,
    config: &Value,
    who: &Manager<'_>,
    force: bool,
    now: &str,
) -> Result<Value, Vec<Conflict>> {
    let structure = Structure::of(info);
    let walker = Walker::new(&structure);
    let config = scoped(scope, config);
    let mut applied = walker.fields(&config);
    applied.retain(|p| in_scope(scope, p));
    let mut entries = parse_entries(live);
    let mine = entries.iter().position(|e| who.is(e, "Apply"));
    // Values are compared with the list keys' defaults filled in: an applied port without a
    // protocol is the live TCP port, owned by both managers, not a conflict.
    let compared = walker.with_default_keys(&config);
    let conflicts = conflicts(&entries, mine, &applied, live, &compared);
    if !conflicts.is_empty() && !force {
        return Err(conflicts);
    }
    for (i, entry) in entries.iter_mut().enumerate() {
        if Some(i) != mine {
            let owner = (entry.manager.clone(), entry.subresource.clone());
            entry.fields.retain(|p| !is_conflict(&conflicts, &owner, p));
        }
    }
    let mut merged = live.clone();
    walker.merge(&mut merged, &config);
    let previous = mine.map(|i| entries[i].fields.clone()).unwrap_or_default();
    let mut kept = applied.clone();
    for (i, entry) in entries.iter().enumerate() {
        if Some(i) != mine {
            kept.extend(&entry.fields);
        }
    }
    for path in previous.iter() {
        if !applied.contains(path) && !kept.covers(path) {
            walk::remove(&mut merged, path, &kept);
        }
    }
    for entry in entries.iter_mut() {
        entry.fields.retain(|p| walk::get(&merged, p).is_some());
    }
    match mine {
        Some(i) if entries[i].fields != applied || entries[i].api_version != who.api_version => {
            entries[i] = who.entry("Apply", applied, now);
        }
        Some(_) => {}
        None => entries.push(who.entry("Apply", applied, now)),
    }
    set_entries(&mut merged, entries);
    Ok(merged)
}

/// Removes `managedFields` from an object (what goes to edge nodes, `kubectl` without
/// `--show-managed-fields` hides them itself).
pub fn strip(obj: &mut Value) {
    if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.remove("managedFields");
    }
}

/// The fields another manager owns that `config` sets to another value than the live one.
fn conflicts(
    entries: &[Entry],
    mine: Option<usize>,
    applied: &FieldSet,
    live: &Value,
    config: &Value,
) -> Vec<Conflict> {
    let mut found = Vec::new();
    for (i, entry) in entries.iter().enumerate() {
        if Some(i) == mine {
            continue;
        }
        for path in applied.iter().filter(|p| entry.fields.contains(p)) {
            if is_item(path) {
                continue;
            }
            let have = walk::get(live, path);
            if have.is_some() && have != walk::get(config, path) {
                found.push(Conflict {
                    manager: entry.manager.clone(),
                    subresource: entry.subresource.clone(),
                    api_version: entry.api_version.clone(),
                    field: fieldset::display(path),
                });
            }
        }
    }
    found
}

fn is_conflict(conflicts: &[Conflict], owner: &(String, Option<String>), path: &Path) -> bool {
    if conflicts.is_empty() {
        return false;
    }
    let shown = fieldset::display(path);
    conflicts
        .iter()
        .any(|c| c.manager == owner.0 && c.subresource == owner.1 && c.field == shown)
}

/// Whether `path` names a list item (its presence, not a value that can differ).
fn is_item(path: &Path) -> bool {
    path.last()
        .and_then(|e| fieldset::step(e))
        .is_some_and(|s| !matches!(s, Step::Field(_)))
}

/// Whether the write changed what `path` names: a new field or item, or another value.
fn differs(old: &Value, new: &Value, path: &Path) -> bool {
    match walk::get(old, path) {
        None => true,
        Some(_) if is_item(path) => false,
        Some(before) => Some(before) != walk::get(new, path),
    }
}

/// Whether a path can be owned in this scope.
fn in_scope(scope: Scope, path: &Path) -> bool {
    let names: Vec<&str> = path
        .iter()
        .take(2)
        .map(|e| e.strip_prefix("f:").unwrap_or(""))
        .collect();
    match names.as_slice() {
        ["apiVersion" | "kind", ..] => false,
        ["metadata", field] if SERVER_METADATA.contains(field) => false,
        ["status", ..] => scope != Scope::Main { skip_status: true } && scope != Scope::Scale,
        ["spec", "replicas"] if scope == Scope::Scale => true,
        _ => matches!(scope, Scope::Main { .. }),
    }
}

/// The part of `config` a scope writes.
fn scoped(scope: Scope, config: &Value) -> Value {
    let mut out = config.clone();
    let Some(map) = out.as_object_mut() else {
        return out;
    };
    match scope {
        Scope::Main { skip_status: true } => {
            map.remove("status");
        }
        Scope::Main { .. } => {}
        Scope::Status => map.retain(|k, _| k == "status"),
        Scope::Scale => {
            let replicas = config.pointer("/spec/replicas").cloned();
            map.clear();
            if let Some(r) = replicas {
                map.insert("spec".into(), json!({ "replicas": r }));
            }
        }
    }
    out
}

fn parse_entries(obj: &Value) -> Vec<Entry> {
    let Some(Value::Array(items)) = obj.pointer("/metadata/managedFields") else {
        return Vec::new();
    };
    let text = |item: &Value, k: &str| item.get(k).and_then(Value::as_str).map(str::to_owned);
    items
        .iter()
        .map(|item| Entry {
            manager: text(item, "manager").unwrap_or_default(),
            operation: text(item, "operation").unwrap_or_default(),
            api_version: text(item, "apiVersion").unwrap_or_default(),
            time: text(item, "time"),
            subresource: text(item, "subresource").filter(|s| !s.is_empty()),
            fields: FieldSet::from_fields_v1(item.get("fieldsV1").unwrap_or(&Value::Null)),
        })
        .collect()
}

fn set_entries(obj: &mut Value, entries: Vec<Entry>) {
    let items: Vec<Value> = entries
        .into_iter()
        .filter(|e| !e.fields.is_empty())
        .map(|e| {
            let mut item = Map::new();
            item.insert("manager".into(), json!(e.manager));
            item.insert("operation".into(), json!(e.operation));
            item.insert("apiVersion".into(), json!(e.api_version));
            if let Some(time) = e.time {
                item.insert("time".into(), json!(time));
            }
            item.insert("fieldsType".into(), json!("FieldsV1"));
            item.insert("fieldsV1".into(), e.fields.to_fields_v1());
            if let Some(sub) = e.subresource {
                item.insert("subresource".into(), json!(sub));
            }
            Value::Object(item)
        })
        .collect();
    set_entries_raw(obj, (!items.is_empty()).then_some(Value::Array(items)));
}

fn set_entries_raw(obj: &mut Value, entries: Option<Value>) {
    let Some(map) = obj.as_object_mut() else {
        return;
    };
    let meta = map.entry("metadata").or_insert_with(|| json!({}));
    let Some(meta) = meta.as_object_mut() else {
        return;
    };
    match entries {
        Some(entries) => meta.insert("managedFields".into(), entries),
        None => meta.remove("managedFields"),
    };
}

#[cfg(test)]
mod tests;
