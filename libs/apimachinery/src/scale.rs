//! The `scale` subresource's `autoscaling/v1` `Scale`: how it reads from its parent
//! (deployments, replica sets, stateful sets, replication controllers) and what a written
//! `Scale` asks of it.

use serde_json::{Map, Value, json};

use crate::ApiError;
use crate::fields::format_label_selector;

/// The parent's `Scale`: its identity (name, namespace, uid, resourceVersion,
/// creationTimestamp), `spec.replicas` (1 when unset, the API default), `status.replicas`, and
/// `status.selector` as a label selector string (`app=web`; a replication controller's map
/// selector too).
pub fn of(parent: &Value) -> Value {
    let mut metadata = Map::new();
    for field in [
        "name",
        "namespace",
        "uid",
        "resourceVersion",
        "creationTimestamp",
    ] {
        if let Some(value) = parent.pointer(&format!("/metadata/{field}")) {
            metadata.insert(field.to_owned(), value.clone());
        }
    }
    let replicas = parent
        .pointer("/spec/replicas")
        .and_then(Value::as_i64)
        .unwrap_or(1);
    let current = parent
        .pointer("/status/replicas")
        .and_then(Value::as_i64)
        .unwrap_or(0);
    json!({
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": metadata,
        "spec": {"replicas": replicas},
        "status": {"replicas": current, "selector": selector(parent)},
    })
}

/// The replicas a written `Scale` asks for: `spec.replicas`, a whole number of at least 0
/// (422 otherwise; unset means 0, as in the Go type).
pub fn replicas(scale: &Value) -> Result<i64, ApiError> {
    let name = scale
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let invalid =
        |why: &str| ApiError::invalid("autoscaling", "Scale", name, &[("spec.replicas", why)]);
    match scale.pointer("/spec/replicas") {
        None | Some(Value::Null) => Ok(0),
        Some(Value::Number(n)) => match n.as_i64() {
            Some(r) if r < 0 => Err(invalid(&format!(
                "Invalid value: {r}: must be greater than or equal to 0"
            ))),
            Some(r) if r > i64::from(i32::MAX) => Err(invalid(&format!(
                "Invalid value: {r}: must be less than or equal to {}",
                i32::MAX
            ))),
            Some(r) => Ok(r),
            None => Err(invalid(&format!("Invalid value: {n}: must be an integer"))),
        },
        Some(other) => Err(invalid(&format!(
            "Invalid value: {other}: must be an integer"
        ))),
    }
}

/// The parent's selector in the label selector syntax; `""` when it selects everything.
fn selector(parent: &Value) -> String {
    let selector = parent.pointer("/spec/selector");
    // A replication controller's selector is a plain map of labels.
    let is_map = selector
        .and_then(Value::as_object)
        .is_some_and(|m| !m.contains_key("matchLabels") && !m.contains_key("matchExpressions"));
    let formatted = if is_map {
        format_label_selector(Some(&json!({ "matchLabels": selector })))
    } else {
        format_label_selector(selector)
    };
    if formatted == "<none>" {
        String::new()
    } else {
        formatted
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_deployment_reads_as_its_scale() {
        let deployment = json!({
            "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "default", "uid": "u1",
                         "resourceVersion": "7", "creationTimestamp": "2024-01-01T00:00:00Z",
                         "labels": {"x": "y"}},
            "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"}}},
            "status": {"replicas": 2},
        });
        let scale = of(&deployment);
        assert_eq!(scale["kind"], "Scale");
        assert_eq!(scale["apiVersion"], "autoscaling/v1");
        assert_eq!(scale["metadata"]["uid"], "u1");
        assert_eq!(scale["metadata"]["resourceVersion"], "7");
        assert!(scale["metadata"].get("labels").is_none());
        assert_eq!(scale["spec"]["replicas"], 3);
        assert_eq!(
            scale["status"],
            json!({"replicas": 2, "selector": "app=web"})
        );
    }

    #[test]
    fn a_replication_controller_selector_is_a_map_and_replicas_default_to_one() {
        let rc = json!({
            "kind": "ReplicationController",
            "metadata": {"name": "rc"},
            "spec": {"selector": {"app": "db", "tier": "back"}},
        });
        let scale = of(&rc);
        assert_eq!(scale["spec"]["replicas"], 1);
        assert_eq!(scale["status"]["replicas"], 0);
        assert_eq!(scale["status"]["selector"], "app=db,tier=back");
    }

    #[test]
    fn written_replicas_must_be_whole_and_not_negative() {
        assert_eq!(replicas(&json!({"spec": {"replicas": 5}})).unwrap(), 5);
        assert_eq!(replicas(&json!({"spec": {}})).unwrap(), 0);
        let e =
            replicas(&json!({"metadata": {"name": "web"}, "spec": {"replicas": -1}})).unwrap_err();
        assert_eq!((e.code, e.reason.as_str()), (422, "Invalid"));
        assert!(e.message.contains("spec.replicas"), "{}", e.message);
        assert!(replicas(&json!({"spec": {"replicas": "3"}})).is_err());
        assert!(replicas(&json!({"spec": {"replicas": 1.5}})).is_err());
    }
}
