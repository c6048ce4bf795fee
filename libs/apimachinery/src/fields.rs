//! What an object is selected by: its labels and its selectable fields.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::catalog::ResourceInfo;

/// Selectable booleans Kubernetes reports as `false` when unset (it selects on the Go struct,
/// where an absent boolean is `false`).
const FALSE_WHEN_ABSENT: &[(&str, &str)] =
    &[("Pod", "spec.hostNetwork"), ("Node", "spec.unschedulable")];

/// Selectable counters Kubernetes reports as `0` when unset, by kind, and the path of the
/// value they select on (a Job's `status.successful` is its `status.succeeded`).
const COUNTERS: &[(&str, &str, &str)] = &[
    (
        "ReplicationController",
        "status.replicas",
        "status.replicas",
    ),
    ("ReplicaSet", "status.replicas", "status.replicas"),
    ("Job", "status.successful", "status.succeeded"),
];

/// `metadata.labels` as a map (non-string values skipped).
pub fn labels_of(obj: &Value) -> BTreeMap<String, String> {
    obj.pointer("/metadata/labels")
        .and_then(Value::as_object)
        .map(|labels| {
            labels
                .iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned())))
                .collect()
        })
        .unwrap_or_default()
}

/// The resource's selectable fields (see [`ResourceInfo::selectable_fields`]) with their
/// values in `obj`, as field selectors compare them (`true`/`false` for booleans, numbers in
/// decimal); absent fields are left out, except the booleans Kubernetes defaults to `false`
/// (`spec.hostNetwork` of pods, `spec.unschedulable` of nodes). `metadata.name` and
/// `metadata.namespace` are not included.
///
/// An event's `source` is `source.component`, or `reportingComponent` when that is empty, as
/// kube-apiserver computes it.
pub fn selectable_fields(info: &ResourceInfo, obj: &Value) -> BTreeMap<String, String> {
    info.selectable_fields
        .iter()
        .filter_map(|field| {
            let value = selectable_value(info, obj, field)?;
            Some((field.clone(), value))
        })
        .collect()
}

/// The scalar at a dotted path (`spec.nodeName`), as a string.
pub fn field_value(obj: &Value, path: &str) -> Option<String> {
    let value = path
        .split('.')
        .try_fold(obj, |value, key| value.as_object()?.get(key))?;
    scalar_string(value)
}

/// A scalar as field selectors see it; `None` for null, objects and arrays.
pub fn scalar_string(value: &Value) -> Option<String> {
    match value {
        Value::String(s) => Some(s.clone()),
        Value::Bool(b) => Some(b.to_string()),
        Value::Number(n) => Some(n.to_string()),
        Value::Null | Value::Array(_) | Value::Object(_) => None,
    }
}

/// A `metav1.LabelSelector` (`matchLabels`, `matchExpressions`) in the label selector syntax,
/// requirements sorted by key, as `metav1.FormatLabelSelector` prints it: `app=web`,
/// `tier in (a,b)`, `!canary`; `<none>` for a missing or empty selector, `<error>` for an
/// operator Kubernetes does not know.
pub fn format_label_selector(selector: Option<&Value>) -> String {
    let Some(selector) = selector.and_then(Value::as_object) else {
        return "<none>".to_owned();
    };
    let mut terms: Vec<(String, String)> = Vec::new();
    for (key, value) in selector
        .get("matchLabels")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
    {
        let value = value.as_str().unwrap_or_default();
        terms.push((key.clone(), format!("{key}={value}")));
    }
    let expressions = selector.get("matchExpressions").and_then(Value::as_array);
    for expr in expressions.into_iter().flatten() {
        let key = expr["key"].as_str().unwrap_or_default();
        let mut values: Vec<&str> = expr["values"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        values.sort_unstable();
        let term = match expr["operator"].as_str().unwrap_or_default() {
            "In" => format!("{key} in ({})", values.join(",")),
            "NotIn" => format!("{key} notin ({})", values.join(",")),
            "Exists" => key.to_owned(),
            "DoesNotExist" => format!("!{key}"),
            _ => return "<error>".to_owned(),
        };
        terms.push((key.to_owned(), term));
    }
    if terms.is_empty() {
        return "<none>".to_owned();
    }
    terms.sort_by(|a, b| a.0.cmp(&b.0));
    let terms: Vec<String> = terms.into_iter().map(|(_, t)| t).collect();
    terms.join(",")
}

fn selectable_value(info: &ResourceInfo, obj: &Value, field: &str) -> Option<String> {
    if let Some((_, _, path)) = COUNTERS
        .iter()
        .find(|(kind, f, _)| *kind == info.kind && *f == field)
    {
        return Some(field_value(obj, path).unwrap_or_else(|| "0".to_owned()));
    }
    if info.kind == "Event" && info.group.is_empty() && field == "source" {
        return field_value(obj, "source.component")
            .filter(|s| !s.is_empty())
            .or_else(|| field_value(obj, "reportingComponent"));
    }
    field_value(obj, field).or_else(|| {
        FALSE_WHEN_ABSENT
            .iter()
            .any(|(kind, f)| *kind == info.kind && *f == field && info.group.is_empty())
            .then(|| "false".to_owned())
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::catalog::builtins;

    fn info(plural: &str) -> ResourceInfo {
        builtins()
            .into_iter()
            .find(|i| i.plural == plural && i.group.is_empty())
            .unwrap()
    }

    #[test]
    fn labels_skip_non_string_values() {
        let obj = json!({"metadata": {"labels": {"app": "web", "n": 1}}});
        let labels = labels_of(&obj);
        assert_eq!(labels.len(), 1);
        assert_eq!(labels["app"], "web");
        assert!(labels_of(&json!({})).is_empty());
    }

    #[test]
    fn field_value_renders_scalars() {
        let obj = json!({"spec": {"nodeName": "n1", "hostNetwork": true, "prio": 7, "x": null,
                                  "list": [1]}});
        assert_eq!(field_value(&obj, "spec.nodeName").as_deref(), Some("n1"));
        assert_eq!(
            field_value(&obj, "spec.hostNetwork").as_deref(),
            Some("true")
        );
        assert_eq!(field_value(&obj, "spec.prio").as_deref(), Some("7"));
        assert_eq!(field_value(&obj, "spec.x"), None);
        assert_eq!(field_value(&obj, "spec.list"), None);
        assert_eq!(field_value(&obj, "spec.missing"), None);
        assert_eq!(field_value(&obj, "spec"), None);
    }

    #[test]
    fn pod_fields_are_the_selectable_ones_only() {
        let pod = json!({
            "metadata": {"name": "p", "namespace": "default"},
            "spec": {"nodeName": "n1", "restartPolicy": "Always", "containers": []},
            "status": {"phase": "Running", "podIP": "10.0.0.1"}
        });
        let fields = selectable_fields(&info("pods"), &pod);
        let want: BTreeMap<String, String> = [
            ("spec.nodeName", "n1"),
            ("spec.restartPolicy", "Always"),
            ("spec.hostNetwork", "false"),
            ("status.phase", "Running"),
            ("status.podIP", "10.0.0.1"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        assert_eq!(fields, want);
    }

    #[test]
    fn event_source_falls_back_to_the_reporting_component() {
        let ev = json!({"involvedObject": {"kind": "Pod", "name": "p"}, "reason": "Started",
                        "reportingComponent": "kubelet", "source": {}});
        let fields = selectable_fields(&info("events"), &ev);
        assert_eq!(fields["source"], "kubelet");
        assert_eq!(fields["involvedObject.kind"], "Pod");
        assert_eq!(fields["reportingComponent"], "kubelet");
        let ev = json!({"source": {"component": "scheduler"}});
        assert_eq!(
            selectable_fields(&info("events"), &ev)["source"],
            "scheduler"
        );
    }

    #[test]
    fn counters_select_as_zero_when_unset_and_jobs_by_succeeded() {
        let find = |group: &str, plural: &str| {
            builtins()
                .into_iter()
                .find(|i| i.plural == plural && i.group == group)
                .unwrap()
        };
        let job = json!({"status": {"succeeded": 2}});
        let fields = selectable_fields(&find("batch", "jobs"), &job);
        assert_eq!(fields["status.successful"], "2");
        let fields = selectable_fields(&find("apps", "replicasets"), &json!({}));
        assert_eq!(fields["status.replicas"], "0");
        let csr = json!({"spec": {"signerName": "kubernetes.io/kubelet-serving"}});
        let fields = selectable_fields(
            &find("certificates.k8s.io", "certificatesigningrequests"),
            &csr,
        );
        assert_eq!(fields["spec.signerName"], "kubernetes.io/kubelet-serving");
    }

    #[test]
    fn label_selectors_print_sorted_by_key() {
        let sel = json!({
            "matchLabels": {"tier": "web", "app": "shop"},
            "matchExpressions": [
                {"key": "env", "operator": "In", "values": ["prod", "dev"]},
                {"key": "canary", "operator": "DoesNotExist"},
                {"key": "zone", "operator": "NotIn", "values": ["b"]},
                {"key": "gpu", "operator": "Exists"}
            ]
        });
        assert_eq!(
            format_label_selector(Some(&sel)),
            "app=shop,!canary,env in (dev,prod),gpu,tier=web,zone notin (b)"
        );
        assert_eq!(format_label_selector(Some(&json!({}))), "<none>");
        assert_eq!(format_label_selector(None), "<none>");
        let bad = json!({"matchExpressions": [{"key": "a", "operator": "Near"}]});
        assert_eq!(format_label_selector(Some(&bad)), "<error>");
    }

    #[test]
    fn configmaps_have_no_extra_fields() {
        let cm = json!({"metadata": {"name": "c"}, "data": {"a": "b"}});
        assert!(selectable_fields(&info("configmaps"), &cm).is_empty());
    }
}
