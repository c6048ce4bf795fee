//! The data of ConfigMaps and Secrets, as kube-apiserver takes it: every key is a file name once
//! the object is mounted, so keys follow the config-key rule (`[-._a-zA-Z0-9]+`, never `.` or
//! `..`, never starting with `..`); a Secret's `stringData` is write-only and merged into `data`
//! (base64) before it is stored; `data` of a Secret and `binaryData` of a ConfigMap are base64;
//! each object holds at most 1 MiB. [`volume_path_problem`] is the check a volume writer (edged)
//! applies to every file name it is given, whatever the API let through.

use std::collections::{BTreeMap, BTreeSet};

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Map, Value};

/// The largest key, as for a DNS subdomain.
pub const KEY_MAX: usize = 253;
/// The most data one ConfigMap or Secret may hold (decoded bytes, keys not counted for a
/// Secret; keys and values for a ConfigMap).
pub const MAX_SIZE: usize = 1024 * 1024;

const KEY_MSG: &str = "a valid config key must consist of alphanumeric characters, '-', '_' or \
    '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is \
    '[-._a-zA-Z0-9]+')";

/// Why a data or binary data entry was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DataError {
    /// 422: a field path (`data[..]`) and what is wrong with it.
    Invalid { field: String, why: String },
    /// 400: the body could not be taken as the kind (a value of the wrong type, bad base64).
    Malformed(String),
}

// === public functions ===

/// Why `key` is not a valid ConfigMap or Secret key, if it is not.
pub fn key_problem(key: &str) -> Option<String> {
    if key.len() > KEY_MAX {
        return Some(format!("must be no more than {KEY_MAX} characters"));
    }
    let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.');
    if key.is_empty() || !key.chars().all(allowed) {
        return Some(KEY_MSG.to_owned());
    }
    match key {
        "." => Some("must not be '.'".to_owned()),
        ".." => Some("must not be '..'".to_owned()),
        k if k.starts_with("..") => Some("must not start with '..'".to_owned()),
        _ => None,
    }
}

/// Why `path` may not be written inside a volume (a key, or an item's `path`), if it may not:
/// it must be relative, non-empty, and have no `..` element, so it stays below the volume.
pub fn volume_path_problem(path: &str) -> Option<&'static str> {
    if path.is_empty() {
        return Some("must not be empty");
    }
    if path.starts_with('/') {
        return Some("must be a relative path");
    }
    if path.contains('\0') {
        return Some("must not contain a NUL byte");
    }
    if path.split('/').any(|element| element == "..") {
        return Some("must not contain '..'");
    }
    None
}

/// Checks a Secret body and moves its `stringData` into `data` (base64), as the API server does
/// before it stores one.
pub fn prepare_secret(obj: &mut Value) -> Result<(), DataError> {
    let Some(map) = obj.as_object_mut() else {
        return Ok(());
    };
    let mut data = base64_map(map, "data")?;
    if let Some(strings) = string_map(map, "stringData")? {
        for (key, value) in strings {
            data.insert(key, (STANDARD.encode(value.as_bytes()), value.len()));
        }
    }
    map.remove("stringData");
    // `SetDefaults_Secret`: a Secret without a type is Opaque.
    if map
        .get("type")
        .and_then(Value::as_str)
        .is_none_or(str::is_empty)
    {
        map.insert("type".into(), Value::String("Opaque".into()));
    }
    let mut size = 0;
    for (key, (_, len)) in &data {
        if let Some(why) = key_problem(key) {
            return Err(invalid_key("data", key, &why));
        }
        size += len;
    }
    if size > MAX_SIZE {
        return Err(too_long("data"));
    }
    if map.contains_key("data") || !data.is_empty() {
        let encoded = data.into_iter().map(|(k, (v, _))| (k, Value::String(v)));
        map.insert("data".into(), Value::Object(encoded.collect()));
    }
    Ok(())
}

/// Checks a ConfigMap body: keys of `data` and `binaryData`, no key in both, base64 in
/// `binaryData`, the size limit.
pub fn check_configmap(obj: &Value) -> Result<(), DataError> {
    let Some(map) = obj.as_object() else {
        return Ok(());
    };
    let strings = string_map(map, "data")?.unwrap_or_default();
    let binary = base64_map(map, "binaryData")?;
    let mut size = 0;
    let mut seen = BTreeSet::new();
    for (key, value) in &strings {
        if let Some(why) = key_problem(key) {
            return Err(invalid_key("data", key, &why));
        }
        seen.insert(key.as_str());
        size += key.len() + value.len();
    }
    for (key, (_, len)) in &binary {
        if let Some(why) = key_problem(key) {
            return Err(invalid_key("binaryData", key, &why));
        }
        if seen.contains(key.as_str()) {
            let why = "duplicate of key present in data";
            return Err(invalid_key("binaryData", key, why));
        }
        size += key.len() + len;
    }
    if size > MAX_SIZE {
        return Err(too_long(""));
    }
    Ok(())
}

// === helpers ===

/// A `map[string]string` field (`null` values are empty strings).
fn string_map(
    map: &Map<String, Value>,
    field: &str,
) -> Result<Option<Vec<(String, String)>>, DataError> {
    let Some(entries) = object_field(map, field)? else {
        return Ok(None);
    };
    let mut out = Vec::with_capacity(entries.len());
    for (key, value) in entries {
        let value = match value {
            Value::String(s) => s.clone(),
            Value::Null => String::new(),
            _ => return Err(wrong_type(field, key, "a string")),
        };
        out.push((key.clone(), value));
    }
    Ok(Some(out))
}

/// A `map[string][]byte` field: each value base64, kept encoded, with its decoded length.
fn base64_map(
    map: &Map<String, Value>,
    field: &str,
) -> Result<BTreeMap<String, (String, usize)>, DataError> {
    let mut out = BTreeMap::new();
    let Some(entries) = object_field(map, field)? else {
        return Ok(out);
    };
    for (key, value) in entries {
        let encoded = match value {
            Value::String(s) => s.as_str(),
            Value::Null => "",
            _ => return Err(wrong_type(field, key, "a base64 string")),
        };
        let decoded = STANDARD.decode(encoded).map_err(|e| {
            DataError::Malformed(format!("{field}[{key}]: illegal base64 data: {e}"))
        })?;
        out.insert(key.clone(), (encoded.to_owned(), decoded.len()));
    }
    Ok(out)
}

fn object_field<'a>(
    map: &'a Map<String, Value>,
    field: &str,
) -> Result<Option<&'a Map<String, Value>>, DataError> {
    match map.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Object(entries)) => Ok(Some(entries)),
        Some(_) => Err(DataError::Malformed(format!(
            "{field}: must be a map of strings"
        ))),
    }
}

fn invalid_key(field: &str, key: &str, why: &str) -> DataError {
    DataError::Invalid {
        field: format!("{field}[{key}]"),
        why: format!("Invalid value: {key:?}: {why}"),
    }
}

fn too_long(field: &str) -> DataError {
    DataError::Invalid {
        field: field.to_owned(),
        why: format!("Too long: must have at most {MAX_SIZE} bytes"),
    }
}

fn wrong_type(field: &str, key: &str, want: &str) -> DataError {
    DataError::Malformed(format!("{field}[{key}]: the value must be {want}"))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_secret_without_a_type_is_opaque_and_a_typed_one_keeps_its_type() {
        let mut untyped = json!({"metadata": {"name": "s"}, "stringData": {"k": "v"}});
        prepare_secret(&mut untyped).unwrap();
        assert_eq!(untyped["type"], "Opaque");
        let mut tls = json!({"metadata": {"name": "t"}, "type": "kubernetes.io/tls"});
        prepare_secret(&mut tls).unwrap();
        assert_eq!(tls["type"], "kubernetes.io/tls");
    }

    #[test]
    fn keys_are_file_names_that_cannot_leave_the_volume() {
        for good in [
            "a", "key.name", "KEY_NAME", "key-name", ".hidden", "a..b", "tls.crt",
        ] {
            assert_eq!(key_problem(good), None, "{good}");
        }
        for bad in [
            "",
            ".",
            "..",
            "..data",
            "../../etc/cron.d/x",
            "a/b",
            "a b",
            "ключ",
        ] {
            assert!(key_problem(bad).is_some(), "{bad}");
        }
        assert_eq!(key_problem("..").as_deref(), Some("must not be '..'"));
        assert!(key_problem(&"k".repeat(254)).is_some());
        assert_eq!(key_problem(&"k".repeat(253)), None);
    }

    #[test]
    fn volume_paths_stay_below_the_volume() {
        assert_eq!(volume_path_problem("config.yaml"), None);
        assert_eq!(volume_path_problem("sub/config.yaml"), None);
        assert_eq!(volume_path_problem("..x"), None);
        for bad in ["", "/etc/passwd", "..", "../x", "a/../../x", "a/..", "a\0b"] {
            assert!(volume_path_problem(bad).is_some(), "{bad:?}");
        }
    }

    #[test]
    fn string_data_is_merged_into_data_and_dropped() {
        let mut secret = json!({
            "data": {"a": "b2xk", "keep": "eA=="},
            "stringData": {"a": "new", "b": "two"},
        });
        prepare_secret(&mut secret).unwrap();
        assert_eq!(
            secret,
            json!({"data": {"a": "bmV3", "b": "dHdv", "keep": "eA=="}, "type": "Opaque"})
        );
        let mut only_strings = json!({"stringData": {"password": "s3cr3t"}});
        prepare_secret(&mut only_strings).unwrap();
        assert_eq!(
            only_strings,
            json!({"data": {"password": "czNjcjN0"}, "type": "Opaque"})
        );
        let mut empty = json!({"type": "Opaque"});
        prepare_secret(&mut empty).unwrap();
        assert_eq!(empty, json!({"type": "Opaque"}));
    }

    #[test]
    fn secrets_refuse_bad_keys_bad_base64_and_oversized_data() {
        let refused = |mut s: Value| prepare_secret(&mut s).unwrap_err();
        let DataError::Invalid { field, why } = refused(json!({"data": {"..": "eA=="}})) else {
            panic!("a '..' key was not invalid");
        };
        assert_eq!(field, "data[..]");
        assert!(why.contains("must not be '..'"), "{why}");
        let DataError::Invalid { field, .. } =
            refused(json!({"stringData": {"../../etc/cron.d/x": "* * * * * root sh"}}))
        else {
            panic!("a path key in stringData was not invalid");
        };
        assert_eq!(field, "data[../../etc/cron.d/x]");
        assert!(matches!(
            refused(json!({"data": {"": "eA=="}})),
            DataError::Invalid { .. }
        ));
        let DataError::Malformed(why) = refused(json!({"data": {"k": "not base64!"}})) else {
            panic!("bad base64 was accepted");
        };
        assert!(why.starts_with("data[k]: illegal base64 data"), "{why}");
        assert!(matches!(
            refused(json!({"data": {"k": 5}})),
            DataError::Malformed(_)
        ));
        let big = "x".repeat(MAX_SIZE + 1);
        let DataError::Invalid { field, why } = refused(json!({"stringData": {"k": big}})) else {
            panic!("an oversized secret was accepted");
        };
        assert_eq!(
            (field.as_str(), why.starts_with("Too long")),
            ("data", true)
        );
    }

    #[test]
    fn configmaps_refuse_bad_keys_duplicates_and_bad_binary_data() {
        let ok = json!({"data": {"a.yaml": "x: 1"}, "binaryData": {"b.bin": "AAEC"}});
        assert_eq!(check_configmap(&ok), Ok(()));
        let DataError::Invalid { field, .. } =
            check_configmap(&json!({"data": {"../../etc/cron.d/x": "boom"}})).unwrap_err()
        else {
            panic!("a path key was accepted");
        };
        assert_eq!(field, "data[../../etc/cron.d/x]");
        let DataError::Invalid { field, why } =
            check_configmap(&json!({"data": {"k": "a"}, "binaryData": {"k": "YQ=="}})).unwrap_err()
        else {
            panic!("a duplicate key was accepted");
        };
        assert_eq!(field, "binaryData[k]");
        assert!(why.contains("duplicate"), "{why}");
        assert!(matches!(
            check_configmap(&json!({"binaryData": {"k": "%%%"}})),
            Err(DataError::Malformed(_))
        ));
        assert!(matches!(
            check_configmap(&json!({"data": {"": "a"}})),
            Err(DataError::Invalid { .. })
        ));
    }
}
