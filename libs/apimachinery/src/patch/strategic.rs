//! Strategic merge patch, the apply half of k8s.io/apimachinery `pkg/util/strategicpatch`
//! (with `MergeParallelList` and `IgnoreUnmatchedNulls`, as kube-apiserver applies patches).
//!
//! - Maps merge key by key; `null` deletes a key; `$patch: replace` replaces the map and
//!   `$patch: delete` empties it; `$retainKeys` drops the original's keys not listed.
//! - Lists merge by their [`ListStrategy`]: atomic lists are replaced, lists of scalars with a
//!   merge strategy are unions, lists of objects merge element-wise by their merge key. Inside a
//!   merged list, `{"$patch": "delete", <key>: v}` deletes elements and `{"$patch": "replace"}`
//!   makes the rest of the patch list the whole list.
//! - `$setElementOrder/<list>` orders the merged list: the listed elements in the given order,
//!   the others (only on the server) interleaved where they stood relative to them.
//!   Without it, patched elements come first in patch order, interleaved the same way.
//! - `$deleteFromPrimitiveList/<list>` removes values from a list of scalars.
//!
//! Values new to the object are merged into nothing, so directives inside them are applied and
//! `null`s dropped rather than stored.

use serde_json::{Map, Value};

use super::PatchError;
use super::schema::{ListStrategy, Schema};

const DIRECTIVE: &str = "$patch";
const RETAIN_KEYS: &str = "$retainKeys";
const SET_ELEMENT_ORDER: &str = "$setElementOrder/";
const DELETE_FROM_PRIMITIVE_LIST: &str = "$deleteFromPrimitiveList/";

const BAD_RETAIN_KEYS: &str = "invalid patch format of retainKeys";
const BAD_SET_ELEMENT_ORDER: &str = "invalid patch format of setElementOrder list";
const BAD_PRIMITIVE_LIST: &str = "invalid patch format of primitive list";

type Result<T> = std::result::Result<T, PatchError>;

/// Walks the object and the patch together, knowing where it is for the schema.
struct Merger<'a> {
    schema: &'a Schema,
    path: Vec<String>,
}

/// Applies `patch` (a JSON object) to `original`.
pub(super) fn apply(schema: &Schema, original: &Value, patch: &Value) -> Result<Value> {
    let original = original.as_object().cloned().unwrap_or_default();
    let patch = patch
        .as_object()
        .cloned()
        .ok_or_else(|| PatchError::BadRequest("the patch body must be a JSON object".into()))?;
    let mut merger = Merger {
        schema,
        path: Vec::new(),
    };
    merger.map(original, patch).map(Value::Object)
}

// === impl Merger ===

impl Merger<'_> {
    fn map(
        &mut self,
        mut original: Map<String, Value>,
        mut patch: Map<String, Value>,
    ) -> Result<Map<String, Value>> {
        if let Some(directive) = patch.remove(DIRECTIVE) {
            return match directive.as_str() {
                Some("replace") => self.map(Map::new(), patch),
                Some("delete") => Ok(Map::new()),
                _ => Err(bad_patch_type(&directive, &patch)),
            };
        }
        retain_keys(&mut original, &mut patch)?;
        self.set_element_orders(&mut original, &mut patch)?;
        for (key, value) in patch {
            self.field(&mut original, &key, value)?;
        }
        Ok(original)
    }

    fn field(&mut self, original: &mut Map<String, Value>, key: &str, value: Value) -> Result<()> {
        let (name, delete_list) = match key.strip_prefix(DELETE_FROM_PRIMITIVE_LIST) {
            Some(name) if !name.is_empty() => (name, true),
            Some(_) => return Err(PatchError::BadRequest(BAD_PRIMITIVE_LIST.into())),
            None if key.starts_with("$deleteFromPrimitiveList") => {
                return Err(PatchError::BadRequest(BAD_PRIMITIVE_LIST.into()));
            }
            None => (key, false),
        };
        if value.is_null() {
            original.remove(name);
            return Ok(());
        }
        let current = original.remove(name);
        self.path.push(name.to_owned());
        let merged = self.field_value(current, value, delete_list);
        self.path.pop();
        if let Some(merged) = merged? {
            original.insert(name.to_owned(), merged);
        }
        Ok(())
    }

    fn field_value(
        &mut self,
        current: Option<Value>,
        patch: Value,
        delete_list: bool,
    ) -> Result<Option<Value>> {
        let merged = match (current, patch) {
            (None, _) if delete_list => return Ok(None),
            (Some(Value::Object(cur)), Value::Object(p)) => Value::Object(self.map(cur, p)?),
            (Some(Value::Array(cur)), Value::Array(p)) => {
                Value::Array(self.list(cur, p, delete_list)?)
            }
            (Some(cur), _) if delete_list => cur,
            (_, patch) => self.fresh(patch)?,
        };
        Ok(Some(merged))
    }

    /// A value new to the object: the patch merged into nothing.
    fn fresh(&mut self, patch: Value) -> Result<Value> {
        match patch {
            Value::Object(p) => self.map(Map::new(), p).map(Value::Object),
            Value::Array(p) => self.list(Vec::new(), p, false).map(Value::Array),
            other => Ok(other),
        }
    }

    fn list(
        &mut self,
        original: Vec<Value>,
        patch: Vec<Value>,
        delete_list: bool,
    ) -> Result<Vec<Value>> {
        if delete_list {
            return Ok(original
                .into_iter()
                .filter(|v| !patch.contains(v))
                .collect());
        }
        match self.schema.list(&self.path) {
            ListStrategy::Atomic => Ok(patch),
            strategy => self.merge_list(original, patch, strategy.merge_key()),
        }
    }

    fn merge_list(
        &mut self,
        original: Vec<Value>,
        patch: Vec<Value>,
        key: Option<&'static str>,
    ) -> Result<Vec<Value>> {
        if original.is_empty() && patch.is_empty() {
            return Ok(original);
        }
        if !elements_are_maps(&original, &patch)? {
            let merged = dedupe(original.iter().chain(&patch).cloned());
            let (in_patch, server_only) = partition(merged, &patch, None)?;
            return normalize_order(in_patch, server_only, &patch, &original, None);
        }
        let key = key.ok_or_else(|| {
            PatchError::Invalid(format!(
                "cannot merge lists without merge key for {}",
                self.path.join(".")
            ))
        })?;
        let (original, patch) = self.special_elements(original, patch, key)?;
        let merged = self.merge_elements(original.clone(), &patch, key)?;
        let (in_patch, server_only) = partition(merged, &patch, Some(key))?;
        normalize_order(in_patch, server_only, &patch, &original, Some(key))
    }

    /// Applies `$patch: delete` and `$patch: replace` elements; returns the original and the
    /// patch elements left to merge.
    fn special_elements(
        &mut self,
        mut original: Vec<Value>,
        patch: Vec<Value>,
        key: &str,
    ) -> Result<(Vec<Value>, Vec<Value>)> {
        let mut rest = Vec::new();
        let mut replace = false;
        for item in patch {
            let Some(directive) = item.get(DIRECTIVE) else {
                rest.push(item);
                continue;
            };
            match directive.as_str() {
                Some("delete") => {
                    let value = merge_key_value(&item, key)?;
                    original = delete_matching(original, key, value)?;
                }
                Some("replace") => replace = true,
                Some("merge") => {
                    return Err(PatchError::Invalid(
                        "merging lists cannot yet be specified in the patch".into(),
                    ));
                }
                _ => {
                    return Err(bad_patch_type(
                        directive,
                        item.as_object().unwrap_or(&Map::new()),
                    ));
                }
            }
        }
        if replace {
            let replacement = rest
                .into_iter()
                .map(|e| self.fresh(e))
                .collect::<Result<_>>()?;
            return Ok((replacement, Vec::new()));
        }
        Ok((original, rest))
    }

    /// Merges each patch element into the original element with the same key, or appends it.
    fn merge_elements(
        &mut self,
        mut merged: Vec<Value>,
        patch: &[Value],
        key: &str,
    ) -> Result<Vec<Value>> {
        for item in patch {
            let value = merge_key_value(item, key)?;
            let Some(i) = position(&merged, key, value)? else {
                merged.push(self.fresh(item.clone())?);
                continue;
            };
            match (std::mem::take(&mut merged[i]), item) {
                (Value::Object(current), Value::Object(p)) => {
                    merged[i] = Value::Object(self.map(current, p.clone())?);
                }
                _ => return Err(PatchError::Invalid("list elements must be maps".into())),
            }
        }
        Ok(merged)
    }

    /// Processes every `$setElementOrder/<list>` of `patch`, merging and ordering that list.
    fn set_element_orders(
        &mut self,
        original: &mut Map<String, Value>,
        patch: &mut Map<String, Value>,
    ) -> Result<()> {
        let directives: Vec<String> = patch
            .keys()
            .filter(|k| k.starts_with(SET_ELEMENT_ORDER))
            .cloned()
            .collect();
        for directive in directives {
            let Some(Value::Array(order)) = patch.remove(&directive) else {
                return Err(PatchError::BadRequest(BAD_SET_ELEMENT_ORDER.into()));
            };
            let field = &directive[SET_ELEMENT_ORDER.len()..];
            if field.is_empty() {
                return Err(PatchError::BadRequest(BAD_SET_ELEMENT_ORDER.into()));
            }
            self.path.push(field.to_owned());
            let result = self.ordered_list(original, patch, field, &order);
            self.path.pop();
            result?;
        }
        Ok(())
    }

    fn ordered_list(
        &mut self,
        original: &mut Map<String, Value>,
        patch: &mut Map<String, Value>,
        field: &str,
        order: &[Value],
    ) -> Result<()> {
        let current = take_list(original, field)?;
        let patched = match patch.remove(field) {
            Some(Value::Null) => return Ok(()),
            Some(Value::Array(list)) => Some(list),
            Some(other) => return Err(not_a_list(field, &other)),
            None => None,
        };
        let strategy = self.schema.list(&self.path);
        validate_order(patched.as_deref(), order, strategy.merge_key())?;
        let (server_order, merged) = match (current, patched) {
            (None, None) => return Ok(()),
            (Some(current), None) => (current.clone(), current),
            (current, Some(patched)) => {
                let current = current.unwrap_or_default();
                (current.clone(), self.list(current, patched, false)?)
            }
        };
        let maps = merged.iter().any(Value::is_object);
        let key = strategy.merge_key().filter(|_| maps);
        let ordered = if strategy == ListStrategy::Atomic || (maps && key.is_none()) {
            merged
        } else {
            let (in_order, server_only) = partition(merged, order, key)?;
            normalize_order(in_order, server_only, order, &server_order, key)?
        };
        original.insert(field.to_owned(), Value::Array(ordered));
        Ok(())
    }
}

/// Drops the keys of `original` not in the patch's `$retainKeys`; every key the patch sets
/// must be listed.
fn retain_keys(original: &mut Map<String, Value>, patch: &mut Map<String, Value>) -> Result<()> {
    let Some(retain) = patch.remove(RETAIN_KEYS) else {
        return Ok(());
    };
    let Value::Array(retain) = retain else {
        return Err(PatchError::BadRequest(BAD_RETAIN_KEYS.into()));
    };
    let listed = |k: &str| retain.iter().any(|r| r.as_str() == Some(k));
    let unlisted = patch.iter().any(|(k, v)| {
        !v.is_null()
            && !k.starts_with(DELETE_FROM_PRIMITIVE_LIST)
            && !k.starts_with(SET_ELEMENT_ORDER)
            && !listed(k)
    });
    if unlisted {
        return Err(PatchError::BadRequest(BAD_RETAIN_KEYS.into()));
    }
    original.retain(|k, _| listed(k));
    Ok(())
}

/// The relative order of the patch list's elements must match the `$setElementOrder` list.
fn validate_order(patch: Option<&[Value]>, order: &[Value], key: Option<&str>) -> Result<()> {
    let Some(patch) = patch else {
        return Ok(());
    };
    let items: Vec<&Value> = patch
        .iter()
        .filter(|v| key.is_none() || v.get(DIRECTIVE).and_then(Value::as_str) != Some("delete"))
        .collect();
    let (mut p, mut o) = (0, 0);
    while p < items.len() && o < order.len() {
        if items[p].get(DIRECTIVE).is_some() {
            p += 1;
            continue;
        }
        if same_element(items[p], &order[o], key)? {
            p += 1;
        }
        o += 1;
    }
    if p < items.len() && !order.is_empty() {
        return Err(PatchError::Invalid(format!(
            "the order in patch list: {} doesn't match $setElementOrder list: {}",
            Value::Array(patch.to_vec()),
            Value::Array(order.to_vec())
        )));
    }
    Ok(())
}

fn same_element(a: &Value, b: &Value, key: Option<&str>) -> Result<bool> {
    match key {
        Some(key) => Ok(merge_key_value(a, key)? == merge_key_value(b, key)?),
        None => Ok(a == b),
    }
}

/// Whether the lists hold maps (`false`: scalars); lists of lists and mixed lists are refused.
fn elements_are_maps(original: &[Value], patch: &[Value]) -> Result<bool> {
    let all = original.iter().chain(patch);
    if all.clone().any(Value::is_array) {
        return Err(PatchError::Invalid(
            "lists of lists are not supported".into(),
        ));
    }
    let maps = all.clone().filter(|v| v.is_object()).count();
    if maps != 0 && maps != original.len() + patch.len() {
        return Err(PatchError::Invalid(
            "list element types are not identical".into(),
        ));
    }
    Ok(maps != 0)
}

fn dedupe(items: impl Iterator<Item = Value>) -> Vec<Value> {
    let mut out: Vec<Value> = Vec::new();
    for item in items {
        if !out.contains(&item) {
            out.push(item);
        }
    }
    out
}

/// Splits `merged` into the elements found in `by` and the others, keeping their order.
fn partition(
    merged: Vec<Value>,
    by: &[Value],
    key: Option<&str>,
) -> Result<(Vec<Value>, Vec<Value>)> {
    let (mut found, mut rest) = (Vec::new(), Vec::new());
    for item in merged {
        if index(by, &item, key)?.is_some() {
            found.push(item);
        } else {
            rest.push(item);
        }
    }
    Ok((found, rest))
}

/// Sorts the patched elements by `patch_order` and the server-only ones by `server_order`,
/// then interleaves them (k8s `normalizeElementOrder`).
fn normalize_order(
    patched: Vec<Value>,
    server_only: Vec<Value>,
    patch_order: &[Value],
    server_order: &[Value],
    key: Option<&str>,
) -> Result<Vec<Value>> {
    let patched = sort_by_order(patched, patch_order, key)?;
    let server_only = sort_by_order(server_only, server_order, key)?;
    merge_sorted(server_only, patched, server_order, key)
}

/// Stable sort by position in `order`; elements not in it go last.
fn sort_by_order(items: Vec<Value>, order: &[Value], key: Option<&str>) -> Result<Vec<Value>> {
    let mut keyed = items
        .into_iter()
        .map(|item| Ok((index(order, &item, key)?.unwrap_or(usize::MAX), item)))
        .collect::<Result<Vec<_>>>()?;
    keyed.sort_by_key(|(i, _)| *i);
    Ok(keyed.into_iter().map(|(_, item)| item).collect())
}

/// Interleaves two sorted lists: a server-only element goes before a patched one only when
/// both are in `server_order` and it stood before it there (k8s `mergeSortedSlice`).
fn merge_sorted(
    left: Vec<Value>,
    right: Vec<Value>,
    server_order: &[Value],
    key: Option<&str>,
) -> Result<Vec<Value>> {
    let mut out = Vec::with_capacity(left.len() + right.len());
    let (mut left, mut right) = (left.into_iter().peekable(), right.into_iter().peekable());
    loop {
        let take_left = match (left.peek(), right.peek()) {
            (None, None) => return Ok(out),
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (Some(l), Some(r)) => {
                let li = index(server_order, l, key)?;
                let ri = index(server_order, r, key)?;
                matches!((li, ri), (Some(li), Some(ri)) if li < ri)
            }
        };
        let next = if take_left { left.next() } else { right.next() };
        out.extend(next);
    }
}

/// Where `item` is in `list`: by merge key value for maps, by value for scalars.
fn index(list: &[Value], item: &Value, key: Option<&str>) -> Result<Option<usize>> {
    let Some(key) = key else {
        return Ok(list.iter().position(|v| v == item));
    };
    let wanted = merge_key_value(item, key)?;
    Ok(list.iter().position(|v| v.get(key) == Some(wanted)))
}

fn position(list: &[Value], key: &str, value: &Value) -> Result<Option<usize>> {
    for (i, item) in list.iter().enumerate() {
        let Value::Object(map) = item else {
            return Err(PatchError::Invalid(format!(
                "value for key {i} is not a map"
            )));
        };
        if map.get(key) == Some(value) {
            return Ok(Some(i));
        }
    }
    Ok(None)
}

fn delete_matching(list: Vec<Value>, key: &str, value: &Value) -> Result<Vec<Value>> {
    let mut kept = Vec::with_capacity(list.len());
    for item in list {
        if !item.is_object() {
            return Err(PatchError::Invalid(format!(
                "expected a map in the list, but received {item}"
            )));
        }
        if item.get(key) != Some(value) {
            kept.push(item);
        }
    }
    Ok(kept)
}

fn merge_key_value<'v>(item: &'v Value, key: &str) -> Result<&'v Value> {
    item.get(key).ok_or_else(|| {
        PatchError::Invalid(format!(
            "map: {item} does not contain declared merge key: {key}"
        ))
    })
}

fn take_list(map: &mut Map<String, Value>, field: &str) -> Result<Option<Vec<Value>>> {
    match map.remove(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Array(list)) => Ok(Some(list)),
        Some(other) => Err(not_a_list(field, &other)),
    }
}

fn not_a_list(field: &str, value: &Value) -> PatchError {
    PatchError::Invalid(format!("expected a list for {field}, but received {value}"))
}

fn bad_patch_type(directive: &Value, map: &Map<String, Value>) -> PatchError {
    PatchError::Invalid(format!(
        "unknown patch type: {directive} in map: {}",
        Value::Object(map.clone())
    ))
}
