//! The pod subresources `binding` and `eviction`, above the verbs: there is no scheduler and
//! no PodDisruptionBudget here, so a binding sets the node and an eviction is a delete.

use apimachinery::ApiError;
use apimachinery::status::success;
use apimachinery::time::now_rfc3339;
use serde_json::{Value, json};

use super::vocab::{Core, Target, name_mismatch, parse};
use super::{delete, meta};
use crate::DeleteOptions;

/// `POST pods/{name}/binding`: assigns the pod to `target.name` (409 when it already has a
/// node or is being deleted); answers a `Success` status.
pub(super) async fn bind(core: &Core, target: Target, body: Value) -> Result<Value, ApiError> {
    let node = body
        .pointer("/target/name")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned();
    if node.is_empty() {
        let why = [("target.name", "Required value")];
        return Err(ApiError::invalid("", "Binding", &target.name, &why));
    }
    let body_name = meta::name(&body);
    if !body_name.is_empty() && body_name != target.name {
        return Err(name_mismatch(body_name, &target.name));
    }
    let annotations = body.pointer("/metadata/annotations").cloned();
    let t = target.clone();
    core.mutate(vec![], target.key(), move |current, revision, _| {
        let mut pod = parse(current.ok_or_else(|| t.not_found())?)?;
        check_bindable(&t, &pod)?;
        assign(&mut pod, &node, annotations);
        Ok((t.write(&mut pod, revision)?, ()))
    })
    .await?;
    Ok(success(None))
}

/// `POST pods/{name}/eviction`: deletes the pod with the eviction's `deleteOptions`;
/// answers a `Success` status.
pub(super) async fn evict(core: &Core, mut target: Target, body: Value) -> Result<Value, ApiError> {
    let opts = body.get("deleteOptions").cloned().unwrap_or(Value::Null);
    let dry_run = opts
        .get("dryRun")
        .and_then(Value::as_array)
        .is_some_and(|d| d.iter().any(|v| v == "All"));
    target.dry_run |= dry_run;
    let opts = DeleteOptions {
        grace_period_seconds: opts.get("gracePeriodSeconds").and_then(Value::as_i64),
        uid: str_at(&opts, "/preconditions/uid"),
        resource_version: str_at(&opts, "/preconditions/resourceVersion"),
        propagation_policy: str_at(&opts, "/propagationPolicy"),
    };
    delete::delete(core, target, opts).await?;
    Ok(success(None))
}

fn check_bindable(target: &Target, pod: &Value) -> Result<(), ApiError> {
    let info = &target.info;
    let conflict = |why: String| ApiError::conflict(&info.group, &info.plural, &target.name, &why);
    if meta::deleting(pod) {
        let why = format!(
            "pod {} is being deleted, cannot be assigned to a host",
            target.name
        );
        return Err(conflict(why));
    }
    match pod.pointer("/spec/nodeName").and_then(Value::as_str) {
        Some(node) if !node.is_empty() => Err(conflict(format!(
            "pod {} is already assigned to node \"{node}\"",
            target.name
        ))),
        _ => Ok(()),
    }
}

/// Sets `spec.nodeName`, merges the binding's annotations, and records `PodScheduled`.
fn assign(pod: &mut Value, node: &str, annotations: Option<Value>) {
    if let Some(Value::Object(extra)) = annotations {
        let meta = meta::metadata_mut(pod);
        let have = meta::object_mut(meta.entry("annotations").or_insert_with(|| json!({})));
        have.extend(extra);
    }
    let map = meta::object_mut(pod);
    let spec = meta::object_mut(map.entry("spec").or_insert_with(|| json!({})));
    spec.insert("nodeName".into(), Value::String(node.to_owned()));
    let status = meta::object_mut(map.entry("status").or_insert_with(|| json!({})));
    let conditions = status.entry("conditions").or_insert_with(|| json!([]));
    if !conditions.is_array() {
        *conditions = json!([]);
    }
    if let Some(list) = conditions.as_array_mut() {
        list.retain(|c| c.get("type").and_then(Value::as_str) != Some("PodScheduled"));
        list.push(json!({
            "type": "PodScheduled",
            "status": "True",
            "lastProbeTime": null,
            "lastTransitionTime": now_rfc3339(),
        }));
    }
}

fn str_at(v: &Value, pointer: &str) -> Option<String> {
    v.pointer(pointer)
        .and_then(Value::as_str)
        .map(str::to_owned)
}
