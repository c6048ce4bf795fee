//! What kube-apiserver checks on every object it stores: the body's type, a name against the
//! rule its kind's strategy names (DNS-1123 subdomain, DNS-1123 label, DNS-1035 label), and
//! the shape of labels, annotations and finalizers. Generic: no kind is named here.

use apimachinery::validation::{
    FieldError, is_dns_label as is_label, is_dns_subdomain as is_subdomain, path_segment_problem,
};
use apimachinery::{ApiError, ResourceInfo};
use serde_json::Value;

use super::meta;
use super::vocab::NameRule;

const LABEL_MAX: usize = 63;
const SUBDOMAIN_MAX: usize = 253;
const ANNOTATIONS_MAX_BYTES: usize = 256 * 1024;

const LABEL_MSG: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric \
    characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  \
    or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";
const SUBDOMAIN_MSG: &str = "a lowercase RFC 1123 subdomain must consist of lower case \
    alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character \
    (e.g. 'example.com', regex used for validation is \
    '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
const DNS1035_MSG: &str = "a DNS-1035 label must consist of lower case alphanumeric characters \
    or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. \
    'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')";
const QUALIFIED_MSG: &str = "name part must consist of alphanumeric characters, '-', '_' or \
    '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  \
    or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";
const LABEL_VALUE_MSG: &str = "a valid label must be an empty string or consist of alphanumeric \
    characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. \
    'MyValue',  or 'my_value',  or '12345', regex used for validation is \
    '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')";

/// Checks `apiVersion`/`kind` against the resource, filling them in when absent (400 on a
/// mismatch, as decoding a body of the wrong type does).
pub(super) fn check_type(info: &ResourceInfo, obj: &mut Value) -> Result<(), ApiError> {
    let Some(map) = obj.as_object_mut() else {
        return Err(ApiError::bad_request(format!(
            "the body of the request was not a JSON object (expected a {})",
            info.kind
        )));
    };
    let want_version = info.api_version();
    match map.get("apiVersion") {
        None | Some(Value::Null) => {
            map.insert("apiVersion".into(), Value::String(want_version));
        }
        Some(Value::String(v)) if *v == want_version => {}
        Some(v) => {
            return Err(ApiError::bad_request(format!(
                "the API version in the data ({}) does not match the expected API version ({want_version})",
                display(v)
            )));
        }
    }
    match map.get("kind") {
        None | Some(Value::Null) => {
            map.insert("kind".into(), Value::String(info.kind.clone()));
        }
        Some(Value::String(k)) if *k == info.kind => {}
        Some(k) => {
            return Err(ApiError::bad_request(format!(
                "the kind in the data ({}) does not match the expected kind ({})",
                display(k),
                info.kind
            )));
        }
    }
    match map.get("metadata") {
        None | Some(Value::Object(_)) => Ok(()),
        Some(_) => Err(ApiError::bad_request(
            "metadata: the object's metadata must be a JSON object",
        )),
    }
}

/// Checks `metadata.namespace` against the URL and fills it in (cluster-scoped objects have
/// none: a namespace in their body is dropped, as kube-apiserver does).
pub(super) fn check_namespace(
    info: &ResourceInfo,
    namespace: &str,
    obj: &mut Value,
) -> Result<(), ApiError> {
    if !info.namespaced {
        meta::set(obj, "namespace", Value::Null);
        return Ok(());
    }
    let have = meta::str_of(obj, "namespace");
    if !have.is_empty() && have != namespace {
        return Err(ApiError::bad_request(
            "the namespace of the provided object does not match the namespace sent on the request",
        ));
    }
    meta::set(obj, "namespace", Value::String(namespace.to_owned()));
    Ok(())
}

/// 422 unless `name` follows `rule`, the naming rule of `info`'s kind.
pub(super) fn check_name(info: &ResourceInfo, rule: NameRule, name: &str) -> Result<(), ApiError> {
    if name.is_empty() {
        return Err(invalid(
            info,
            name,
            "metadata.name",
            "Required value: name or generateName is required".into(),
        ));
    }
    match name_problem(rule, name) {
        None => Ok(()),
        Some(why) => Err(invalid(
            info,
            name,
            "metadata.name",
            format!("Invalid value: \"{name}\": {why}"),
        )),
    }
}

/// 422 (400 for values of the wrong JSON type) unless labels, annotations and finalizers are
/// well formed.
pub(super) fn check_metadata(info: &ResourceInfo, obj: &Value) -> Result<(), ApiError> {
    let name = meta::name(obj);
    let Some(metadata) = obj.get("metadata") else {
        return Ok(());
    };
    if let Some(labels) = string_map(metadata, "labels")? {
        for (k, v) in labels {
            if let Some(why) = qualified_name_problem(k) {
                let field = "metadata.labels";
                return Err(invalid(
                    info,
                    name,
                    field,
                    format!("Invalid value: \"{k}\": {why}"),
                ));
            }
            if let Some(why) = label_value_problem(v) {
                let field = format!("metadata.labels: Invalid value: \"{v}\"");
                return Err(invalid(info, name, &field, why.into()));
            }
        }
    }
    if let Some(annotations) = string_map(metadata, "annotations")? {
        let mut size = 0;
        for (k, v) in &annotations {
            if let Some(why) = qualified_name_problem(k) {
                let field = "metadata.annotations";
                return Err(invalid(
                    info,
                    name,
                    field,
                    format!("Invalid value: \"{k}\": {why}"),
                ));
            }
            size += k.len() + v.len();
        }
        if size > ANNOTATIONS_MAX_BYTES {
            let why = format!("Too long: must have at most {ANNOTATIONS_MAX_BYTES} bytes");
            return Err(invalid(info, name, "metadata.annotations", why));
        }
    }
    match metadata.get("finalizers") {
        None | Some(Value::Null) => {}
        Some(Value::Array(list)) => {
            for f in list {
                let Some(f) = f.as_str() else {
                    return Err(ApiError::bad_request(
                        "metadata.finalizers: every finalizer must be a string",
                    ));
                };
                if let Some(why) = qualified_name_problem(f) {
                    let why = format!("Invalid value: \"{f}\": {why}");
                    return Err(invalid(info, name, "metadata.finalizers", why));
                }
            }
        }
        Some(_) => {
            return Err(ApiError::bad_request(
                "metadata.finalizers: must be a list of strings",
            ));
        }
    }
    Ok(())
}

/// One 422 naming every field error of `errs` (kube's `field.ErrorList`), when there are any.
pub(super) fn field_errors(
    info: &ResourceInfo,
    name: &str,
    errs: Vec<FieldError>,
) -> Result<(), ApiError> {
    if errs.is_empty() {
        return Ok(());
    }
    let causes: Vec<(&str, &str)> = errs
        .iter()
        .map(|e| (e.field.as_str(), e.why.as_str()))
        .collect();
    Err(ApiError::invalid(&info.group, &info.kind, name, &causes))
}

/// `Kind "name" is invalid: field: why` (422).
pub(super) fn invalid(info: &ResourceInfo, name: &str, field: &str, why: String) -> ApiError {
    ApiError::invalid(&info.group, &info.kind, name, &[(field, &why)])
}

fn name_problem(rule: NameRule, name: &str) -> Option<String> {
    let (max, ok, msg) = match rule {
        NameRule::PathSegment => return path_segment_problem(name),
        NameRule::Subdomain => (SUBDOMAIN_MAX, is_subdomain(name), SUBDOMAIN_MSG),
        NameRule::Label => (LABEL_MAX, is_label(name), LABEL_MSG),
        NameRule::Dns1035 => (
            LABEL_MAX,
            is_label(name) && name.starts_with(|c: char| c.is_ascii_lowercase()),
            DNS1035_MSG,
        ),
    };
    if name.len() > max {
        Some(format!("must be no more than {max} characters"))
    } else if !ok {
        Some(msg.to_owned())
    } else {
        None
    }
}

/// `[prefix/]name` as label keys, annotation keys and finalizers are.
fn qualified_name_problem(key: &str) -> Option<String> {
    let (prefix, name) = match key.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    if let Some(p) = prefix
        && !is_subdomain(p)
    {
        return Some(format!("prefix part {SUBDOMAIN_MSG}"));
    }
    if name.is_empty() {
        return Some("name part must be non-empty".into());
    }
    if name.len() > LABEL_MAX {
        return Some(format!(
            "name part must be no more than {LABEL_MAX} characters"
        ));
    }
    (!is_label_value(name)).then(|| QUALIFIED_MSG.to_owned())
}

fn label_value_problem(v: &str) -> Option<&'static str> {
    if v.len() > LABEL_MAX {
        Some("must be no more than 63 characters")
    } else if !v.is_empty() && !is_label_value(v) {
        Some(LABEL_VALUE_MSG)
    } else {
        None
    }
}

fn is_label_value(s: &str) -> bool {
    let alnum = |c: char| c.is_ascii_alphanumeric();
    s.chars().all(|c| alnum(c) || matches!(c, '-' | '_' | '.'))
        && s.starts_with(alnum)
        && s.ends_with(alnum)
}

/// A `map[string]string` metadata field; 400 when it has another JSON shape.
fn string_map<'a>(
    metadata: &'a Value,
    field: &str,
) -> Result<Option<Vec<(&'a String, &'a str)>>, ApiError> {
    match metadata.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Object(map)) => map
            .iter()
            .map(|(k, v)| match v.as_str() {
                Some(s) => Ok((k, s)),
                None => Err(ApiError::bad_request(format!(
                    "metadata.{field}.{k}: the value must be a string"
                ))),
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Some),
        Some(_) => Err(ApiError::bad_request(format!(
            "metadata.{field}: must be a map of strings"
        ))),
    }
}

fn display(v: &Value) -> String {
    v.as_str().map_or_else(|| v.to_string(), str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_rule_of_their_kind() {
        assert_eq!(name_problem(NameRule::Subdomain, "web-0.example"), None);
        assert!(name_problem(NameRule::Subdomain, "Web").is_some());
        assert!(name_problem(NameRule::Subdomain, "-web").is_some());
        assert!(name_problem(NameRule::Label, "a.b").is_some());
        assert_eq!(name_problem(NameRule::Label, "kube-system"), None);
        assert!(name_problem(NameRule::Dns1035, "1abc").is_some());
        assert_eq!(name_problem(NameRule::Dns1035, "abc-1"), None);
        let long = "a".repeat(64);
        assert_eq!(
            name_problem(NameRule::Label, &long).as_deref(),
            Some("must be no more than 63 characters")
        );
    }

    #[test]
    fn qualified_names_accept_prefixes_and_refuse_junk() {
        assert_eq!(qualified_name_problem("app.kubernetes.io/name"), None);
        assert_eq!(qualified_name_problem("kubernetes"), None);
        assert_eq!(qualified_name_problem("My_Key.1"), None);
        assert!(qualified_name_problem("Bad Prefix/x").is_some());
        assert!(qualified_name_problem("example.com/").is_some());
        assert!(qualified_name_problem("-x").is_some());
        assert_eq!(label_value_problem(""), None);
        assert!(label_value_problem("a b").is_some());
    }
}
