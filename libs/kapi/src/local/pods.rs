//! Pod specifics: the grace period of a delete, and the `binding` and `eviction`
//! subresources (there is no scheduler and no PodDisruptionBudget here: a binding sets the
//! node, an eviction is a delete).

use apimachinery::ApiError;
use apimachinery::status::success;
use apimachinery::time::now_rfc3339;
use serde_json::{Value, json};

use super::{Core, Target, delete, meta};
use crate::DeleteOptions;

/// `spec.terminationGracePeriodSeconds` when the pod does not say.
const DEFAULT_GRACE_SECONDS: i64 = 30;

/// The grace period of deleting `pod`: the request's, else the pod's, else 30 s; 0 for pods
/// no kubelet runs (unscheduled) or that have finished; negative values count as 1 s.
pub(super) fn grace_seconds(pod: &Value, opts: &DeleteOptions) -> i64 {
    let scheduled = pod
        .pointer("/spec/nodeName")
        .and_then(Value::as_str)
        .is_some_and(|n| !n.is_empty());
    let phase = pod.pointer("/status/phase").and_then(Value::as_str);
    if !scheduled || matches!(phase, Some("Succeeded" | "Failed")) {
        return 0;
    }
    let grace = opts
        .grace_period_seconds
        .or_else(|| {
            pod.pointer("/spec/terminationGracePeriodSeconds")
                .and_then(Value::as_i64)
        })
        .unwrap_or(DEFAULT_GRACE_SECONDS);
    if grace < 0 { 1 } else { grace }
}

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
        return Err(super::create::name_mismatch(body_name, &target.name));
    }
    let annotations = body.pointer("/metadata/annotations").cloned();
    let t = target.clone();
    core.mutate(vec![], target.key(), move |current, revision, _| {
        let mut pod = super::parse(current.ok_or_else(|| t.not_found())?)?;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grace_comes_from_options_then_pod_then_default() {
        let pod = json!({"spec": {"nodeName": "n1", "terminationGracePeriodSeconds": 10}});
        let opts = |g| DeleteOptions {
            grace_period_seconds: g,
            ..DeleteOptions::default()
        };
        assert_eq!(grace_seconds(&pod, &opts(Some(5))), 5);
        assert_eq!(grace_seconds(&pod, &opts(None)), 10);
        assert_eq!(grace_seconds(&pod, &opts(Some(-3))), 1);
        let bare = json!({"spec": {"nodeName": "n1"}});
        assert_eq!(grace_seconds(&bare, &opts(None)), 30);
    }

    #[test]
    fn unscheduled_and_finished_pods_have_no_grace() {
        let opts = DeleteOptions::default();
        assert_eq!(grace_seconds(&json!({"spec": {}}), &opts), 0);
        let done = json!({"spec": {"nodeName": "n1"}, "status": {"phase": "Succeeded"}});
        assert_eq!(grace_seconds(&done, &opts), 0);
    }
}
