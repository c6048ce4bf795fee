//! kube-apiserver's validation of the built-in kinds, on their (defaulted) JSON: required
//! fields, values in range, names of containers and ports, selectors matching templates, and
//! what an update may not change. Every check answers [`FieldError`]s, all of them, as
//! `field.ErrorList` does; the caller turns them into one `422 Invalid` Status whose message
//! reads like kube-apiserver's (`Pod "x" is invalid: spec.containers[0].image: Required
//! value`), with a cause per error ([`crate::ApiError::invalid`]).

pub mod pod;
pub mod service;
pub mod workloads;

use serde_json::Value;

/// One invalid field: its path (`spec.containers[0].image`) and what is wrong, worded as
/// `field.Error` prints it (`Required value`, `Invalid value: 0: must be ...`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldError {
    pub field: String,
    pub why: String,
}

// === impl FieldError ===

impl FieldError {
    /// `Required value` (with a detail when given).
    pub fn required(field: impl Into<String>, detail: &str) -> FieldError {
        let why = if detail.is_empty() {
            "Required value".to_owned()
        } else {
            format!("Required value: {detail}")
        };
        FieldError {
            field: field.into(),
            why,
        }
    }

    /// `Invalid value: <value>: <detail>`.
    pub fn invalid(field: impl Into<String>, value: &Value, detail: &str) -> FieldError {
        FieldError {
            field: field.into(),
            why: format!("Invalid value: {}: {detail}", go_value(value)),
        }
    }

    /// `Forbidden: <detail>`.
    pub fn forbidden(field: impl Into<String>, detail: &str) -> FieldError {
        FieldError {
            field: field.into(),
            why: format!("Forbidden: {detail}"),
        }
    }

    /// `Unsupported value: "x": supported values: "a", "b"`.
    pub fn unsupported(field: impl Into<String>, value: &Value, supported: &[&str]) -> FieldError {
        let list: Vec<String> = supported.iter().map(|s| format!("\"{s}\"")).collect();
        FieldError {
            field: field.into(),
            why: format!(
                "Unsupported value: {}: supported values: {}",
                go_value(value),
                list.join(", ")
            ),
        }
    }

    /// `Duplicate value: <value>`.
    pub fn duplicate(field: impl Into<String>, value: &Value) -> FieldError {
        FieldError {
            field: field.into(),
            why: format!("Duplicate value: {}", go_value(value)),
        }
    }

    /// `Not found: <value>`.
    pub fn not_found(field: impl Into<String>, value: &Value) -> FieldError {
        FieldError {
            field: field.into(),
            why: format!("Not found: {}", go_value(value)),
        }
    }
}

/// A value as Go's `%#v`-ish rendering in field errors: strings quoted, numbers bare, the rest
/// as JSON.
pub fn go_value(v: &Value) -> String {
    match v {
        Value::String(s) => format!("{s:?}"),
        Value::Null => "null".into(),
        other => other.to_string(),
    }
}

/// True for a DNS-1123 label (`[a-z0-9]([-a-z0-9]*[a-z0-9])?`, at most 63 characters).
pub fn is_dns_label(s: &str) -> bool {
    let alnum = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
    !s.is_empty()
        && s.len() <= 63
        && s.chars().all(|c| alnum(c) || c == '-')
        && s.starts_with(alnum)
        && s.ends_with(alnum)
}

/// True for a DNS-1123 subdomain (dot-separated DNS-1123 labels, at most 253 characters).
pub fn is_dns_subdomain(s: &str) -> bool {
    s.len() <= 253 && s.split('.').all(is_dns_label)
}

/// Why `name` cannot be a URL path segment (Kubernetes' `IsValidPathSegmentName`), if it cannot.
pub fn path_segment_problem(name: &str) -> Option<String> {
    match name {
        "." | ".." => Some(format!("may not be '{name}'")),
        _ if name.contains('/') => Some("may not contain '/'".into()),
        _ if name.contains('%') => Some("may not contain '%'".into()),
        _ => None,
    }
}

/// True for an IANA service name (a named port): at most 15 characters, lowercase
/// alphanumerics and single dashes, at least one letter, no dash at either end.
pub fn is_port_name(s: &str) -> bool {
    s.len() <= 15
        && is_dns_label(s)
        && !s.contains("--")
        && s.chars().any(|c| c.is_ascii_lowercase())
}

/// The message for a bad DNS-1123 label.
pub const DNS_LABEL_MSG: &str = "a lowercase RFC 1123 label must consist of lower case \
    alphanumeric characters or '-', and must start and end with an alphanumeric character \
    (e.g. 'my-name',  or '123-abc', regex used for validation is \
    '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";

/// A port number (1–65535) at `field`, when present; `required` when absent.
pub(crate) fn port_number(
    errs: &mut Vec<FieldError>,
    field: &str,
    value: Option<&Value>,
    required: bool,
) {
    match value {
        None | Some(Value::Null) => {
            if required {
                errs.push(FieldError::required(field, ""));
            }
        }
        Some(v) => {
            if !v.as_i64().is_some_and(|p| (1..=65535).contains(&p)) {
                errs.push(FieldError::invalid(
                    field,
                    v,
                    "must be between 1 and 65535, inclusive",
                ));
            }
        }
    }
}

/// The string at `key` of `obj`, `""` when absent or not a string.
pub(crate) fn str_at<'a>(obj: &'a Value, key: &str) -> &'a str {
    obj.get(key).and_then(Value::as_str).unwrap_or("")
}

/// The array at `key` of `obj`, empty when absent.
pub(crate) fn list_at<'a>(obj: &'a Value, key: &str) -> &'a [Value] {
    obj.get(key)
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn field_errors_read_as_kube_apiserver_prints_them() {
        let r = FieldError::required("spec.containers[0].image", "");
        assert_eq!(r.why, "Required value");
        let i = FieldError::invalid(
            "spec.ports[0].port",
            &json!(0),
            "must be between 1 and 65535, inclusive",
        );
        assert_eq!(
            i.why,
            "Invalid value: 0: must be between 1 and 65535, inclusive"
        );
        let u = FieldError::unsupported(
            "spec.restartPolicy",
            &json!("Sometimes"),
            &["Always", "Never"],
        );
        assert_eq!(
            u.why,
            "Unsupported value: \"Sometimes\": supported values: \"Always\", \"Never\""
        );
    }

    #[test]
    fn port_names_are_iana_service_names() {
        assert!(is_port_name("http"));
        assert!(is_port_name("h2c-1"));
        assert!(!is_port_name("80"));
        assert!(!is_port_name("a--b"));
        assert!(!is_port_name("a-very-long-port-name"));
    }
}
