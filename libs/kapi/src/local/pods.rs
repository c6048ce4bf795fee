//! The pod strategy: a pod starts `Pending`, keeps a generation, is deleted with a grace
//! period while a kubelet runs it, and has the `binding` and `eviction` subresources (served
//! above the verbs, in `pod_subresources`).

use apimachinery::ApiError;
use serde_json::{Value, json};

use super::meta;
use super::vocab::{Strategy, Subresource, Target};
use crate::DeleteOptions;

/// `spec.terminationGracePeriodSeconds` when the pod does not say.
const DEFAULT_GRACE_SECONDS: i64 = 30;

/// Pods.
pub(super) struct Pods;

// === impl Pods ===

impl Strategy for Pods {
    fn tracks_generation(&self) -> bool {
        true
    }

    fn subresource(&self, name: &str) -> Option<Subresource> {
        match name {
            "binding" => Some(Subresource::Binding),
            "eviction" => Some(Subresource::Eviction),
            _ => None,
        }
    }

    /// A pod starts `Pending` unless its creator says otherwise (mirror pods carry a status).
    fn prepare_create(&self, _target: &Target, obj: &mut Value) -> Result<(), ApiError> {
        let map = meta::object_mut(obj);
        let status = meta::object_mut(map.entry("status").or_insert_with(|| json!({})));
        status
            .entry("phase")
            .or_insert_with(|| Value::String("Pending".into()));
        Ok(())
    }

    fn grace_seconds(&self, obj: &Value, opts: &DeleteOptions) -> i64 {
        grace_seconds(obj, opts)
    }
}

// === helpers ===

/// The grace period of deleting `pod`: the request's, else the pod's, else 30 s; 0 for pods
/// no kubelet runs (unscheduled) or that have finished; negative values count as 1 s.
fn grace_seconds(pod: &Value, opts: &DeleteOptions) -> i64 {
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
