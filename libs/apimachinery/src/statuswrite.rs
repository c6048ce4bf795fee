//! What a write to the `status` subresource changes, as one rule both endpoints apply: the
//! embedded control plane when it stores the write, lwproxy when it applies one locally while
//! offline and when it queues one for the cloud.
//!
//! A status write takes `status` from the request. For built-in kinds it also takes
//! `metadata.labels` and `metadata.annotations` (kube-apiserver's status strategies for pods
//! and nodes keep what kubelet sends there); a custom resource's status write takes `status`
//! only. Everything else is the stored object's.
//!
//! [`merge_patch`] is the JSON merge patch (RFC 7386) of what a status write changed, for
//! replaying it later over an object that may have changed meanwhile: `status` whole (with
//! `null` for fields the write removed), labels and annotations only where the write changed
//! them, so the replay never undoes what it did not write.

use serde_json::{Map, Value};

use crate::object::{metadata_mut, object_mut};

/// The `metadata` fields a status write of a built-in kind takes from the request.
pub const BUILT_IN_METADATA: [&str; 2] = ["labels", "annotations"];

/// `current` after a status write of `body` (`custom`: a custom resource).
pub fn apply(current: &Value, body: &Value, custom: bool) -> Value {
    let mut next = current.clone();
    let map = object_mut(&mut next);
    match body.get("status") {
        Some(status) => map.insert("status".into(), status.clone()),
        None => map.remove("status"),
    };
    if !custom {
        for field in BUILT_IN_METADATA {
            let value = body.get("metadata").and_then(|m| m.get(field));
            let meta = metadata_mut(&mut next);
            match value {
                Some(v) if !v.is_null() => meta.insert(field.into(), v.clone()),
                _ => meta.remove(field),
            };
        }
    }
    next
}

/// The merge patch that makes a status write's changes from `before` to `after` (see the
/// module doc), for an object of a built-in kind unless `custom`.
pub fn merge_patch(before: &Value, after: &Value, custom: bool) -> Value {
    let mut patch = Map::new();
    let status = whole(before.get("status"), after.get("status"));
    patch.insert("status".into(), status);
    if !custom {
        let mut meta = Map::new();
        for field in BUILT_IN_METADATA {
            let old = before.get("metadata").and_then(|m| m.get(field));
            let new = after.get("metadata").and_then(|m| m.get(field));
            if let Some(diff) = changes(old, new) {
                meta.insert(field.into(), diff);
            }
        }
        if !meta.is_empty() {
            patch.insert("metadata".into(), Value::Object(meta));
        }
    }
    Value::Object(patch)
}

/// All of `after`, with `null` for the fields of `before` it no longer has (recursively), so
/// the patch sets `after` whole whatever the target holds besides.
pub fn whole(before: Option<&Value>, after: Option<&Value>) -> Value {
    match (before, after) {
        (Some(Value::Object(old)), Some(Value::Object(new))) => {
            let mut out = Map::new();
            for (key, value) in new {
                out.insert(key.clone(), whole(old.get(key), Some(value)));
            }
            for key in old.keys().filter(|k| !new.contains_key(*k)) {
                out.insert(key.clone(), Value::Null);
            }
            Value::Object(out)
        }
        (_, Some(value)) => value.clone(),
        (_, None) => Value::Null,
    }
}

/// Only what changed from `before` to `after` (`None`: nothing did).
fn changes(before: Option<&Value>, after: Option<&Value>) -> Option<Value> {
    match (before, after) {
        (Some(Value::Object(old)), Some(Value::Object(new))) => {
            let mut out = Map::new();
            for (key, value) in new {
                if let Some(diff) = changes(old.get(key), Some(value)) {
                    out.insert(key.clone(), diff);
                }
            }
            for key in old.keys().filter(|k| !new.contains_key(*k)) {
                out.insert(key.clone(), Value::Null);
            }
            (!out.is_empty()).then_some(Value::Object(out))
        }
        (old, new) if old == new => None,
        (None | Some(Value::Null), None | Some(Value::Null)) => None,
        (_, Some(value)) => Some(value.clone()),
        (_, None) => Some(Value::Null),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::patch::PatchType;

    fn pod(labels: Value, status: Value) -> Value {
        json!({
            "metadata": {"name": "p", "labels": labels, "uid": "u1"},
            "spec": {"nodeName": "n1"},
            "status": status,
        })
    }

    #[test]
    fn a_status_write_takes_status_labels_and_annotations_of_a_built_in_kind() {
        let current = pod(json!({"a": "1"}), json!({"phase": "Pending"}));
        let mut body = pod(json!({"a": "2"}), json!({"phase": "Running"}));
        body["spec"]["nodeName"] = json!("elsewhere");
        body["metadata"]["uid"] = json!("other");
        let next = apply(&current, &body, false);
        assert_eq!(next["status"], json!({"phase": "Running"}));
        assert_eq!(next["metadata"]["labels"], json!({"a": "2"}));
        assert!(next["metadata"].get("annotations").is_none());
        assert_eq!(next["spec"], current["spec"]);
        assert_eq!(next["metadata"]["uid"], "u1");
    }

    #[test]
    fn a_status_write_of_a_custom_resource_takes_status_only() {
        let current = pod(json!({"a": "1"}), json!({"phase": "Pending"}));
        let body = pod(json!({"a": "2"}), json!({"phase": "Running"}));
        let next = apply(&current, &body, true);
        assert_eq!(next["status"], json!({"phase": "Running"}));
        assert_eq!(next["metadata"]["labels"], json!({"a": "1"}));
    }

    #[test]
    fn the_merge_patch_replays_the_write_without_undoing_other_changes() {
        let before = pod(
            json!({"a": "1", "gone": "x"}),
            json!({"phase": "Pending", "reason": "r", "conditions": [{"type": "Ready"}]}),
        );
        let after = pod(
            json!({"a": "1", "b": "2"}),
            json!({"phase": "Running", "conditions": []}),
        );
        let patch = merge_patch(&before, &after, false);
        assert_eq!(
            patch,
            json!({
                "status": {"phase": "Running", "reason": null, "conditions": []},
                "metadata": {"labels": {"b": "2", "gone": null}},
            })
        );
        // Meanwhile the target gained a label and a status field the write knew nothing of.
        let mut target = before.clone();
        target["metadata"]["labels"]["cloud"] = json!("yes");
        target["status"]["hostIP"] = json!("10.0.0.1");
        let bytes = serde_json::to_vec(&patch).unwrap();
        let info = crate::ResourceInfo::new("", "v1", "Pod", "pods", true);
        let replayed = crate::patch::apply(&info, PatchType::Merge, &target, &bytes).unwrap();
        assert_eq!(
            replayed["metadata"]["labels"],
            json!({"a": "1", "b": "2", "cloud": "yes"})
        );
        assert_eq!(
            replayed["status"],
            json!({"phase": "Running", "conditions": [], "hostIP": "10.0.0.1"})
        );
    }
}
