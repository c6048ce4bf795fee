//! The pod strategy: a pod is defaulted ([`apimachinery::defaults::pod`]) on every write and
//! validated ([`apimachinery::validation::pod`]); a new one goes through the admission
//! plugins (`admission`) and starts `Pending` with its QoS class; an update may change only
//! what kube-apiserver lets it; a pod keeps a generation, is deleted with a grace period while
//! a kubelet runs it, and has the `binding` and `eviction` subresources (served above the
//! verbs, in `pod_subresources`).

use apimachinery::validation;
use apimachinery::{ApiError, defaults};
use serde_json::{Value, json};

use super::vocab::{Core, Strategy, Subresource, Target};
use super::{admission, limits, meta, validate};
use crate::DeleteOptions;

/// `spec.terminationGracePeriodSeconds` when the pod does not say.
const DEFAULT_GRACE_SECONDS: i64 = 30;

/// Pods.
pub(super) struct Pods;

// === impl Pods ===

#[async_trait::async_trait]
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

    fn canonicalize(&self, _target: &Target, obj: &mut Value) -> Result<(), ApiError> {
        defaults::pod::pod(obj);
        Ok(())
    }

    /// A valid pod starts `Pending` unless its creator says otherwise (mirror pods carry a
    /// status), with its QoS class.
    fn prepare_create(&self, target: &Target, obj: &mut Value) -> Result<(), ApiError> {
        let errs = validation::pod::pod(obj);
        validate::field_errors(&target.info, meta::name(obj), errs)?;
        let qos = qos_class(obj);
        let map = meta::object_mut(obj);
        let status = meta::object_mut(map.entry("status").or_insert_with(|| json!({})));
        status
            .entry("phase")
            .or_insert_with(|| Value::String("Pending".into()));
        status.entry("qosClass").or_insert_with(|| json!(qos));
        Ok(())
    }

    /// Only images, the active deadline, added tolerations (and a few more) may change.
    fn prepare_update(
        &self,
        target: &Target,
        next: &mut Value,
        current: &Value,
    ) -> Result<(), ApiError> {
        defaults::pod::pod(next);
        // A pod stored before defaulting existed compares as it would be stored now.
        let mut current = current.clone();
        defaults::pod::pod(&mut current);
        let errs = validation::pod::update(next, &current);
        validate::field_errors(&target.info, meta::name(next), errs)
    }

    /// The admission plugins, in kube-apiserver's order, then the QoS class of what they made of the resources.
    async fn admit(&self, core: &Core, target: &Target, obj: &mut Value) -> Result<(), ApiError> {
        admission::admit_pod(core, target, obj).await?;
        limits::admit_pod(core, target, obj).await?;
        let qos = qos_class(obj);
        let map = meta::object_mut(obj);
        let status = meta::object_mut(map.entry("status").or_insert_with(|| json!({})));
        status.insert("qosClass".into(), json!(qos));
        Ok(())
    }

    fn grace_seconds(&self, obj: &Value, opts: &DeleteOptions) -> i64 {
        grace_seconds(obj, opts)
    }
}

// === helpers ===

/// `Guaranteed` when every container limits and requests the same CPU and memory,
/// `BestEffort` when none asks for any, else `Burstable`.
fn qos_class(pod: &Value) -> &'static str {
    let containers: Vec<&Value> = ["containers", "initContainers"]
        .iter()
        .filter_map(|k| pod.pointer(&format!("/spec/{k}")).and_then(Value::as_array))
        .flatten()
        .collect();
    let amount = |c: &Value, part: &str, res: &str| {
        c.pointer(&format!("/resources/{part}/{res}"))
            .and_then(Value::as_str)
            .map(str::to_owned)
            .or_else(|| {
                c.pointer(&format!("/resources/{part}/{res}"))
                    .map(Value::to_string)
            })
    };
    let resources = ["cpu", "memory"];
    let any = containers.iter().any(|c| {
        resources
            .iter()
            .any(|r| amount(c, "requests", r).is_some() || amount(c, "limits", r).is_some())
    });
    if !any {
        return "BestEffort";
    }
    let guaranteed = containers.iter().all(|c| {
        resources.iter().all(|r| {
            let limit = amount(c, "limits", r);
            limit.is_some() && limit == amount(c, "requests", r)
        })
    });
    if guaranteed {
        "Guaranteed"
    } else {
        "Burstable"
    }
}

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
    fn qos_follows_requests_and_limits() {
        let pod = |resources: Value| json!({"spec": {"containers": [{"resources": resources}]}});
        assert_eq!(qos_class(&pod(json!({}))), "BestEffort");
        let same = json!({"limits": {"cpu": "1", "memory": "1Gi"}, "requests": {"cpu": "1", "memory": "1Gi"}});
        assert_eq!(qos_class(&pod(same)), "Guaranteed");
        assert_eq!(
            qos_class(&pod(json!({"requests": {"cpu": "1"}}))),
            "Burstable"
        );
    }

    #[test]
    fn unscheduled_and_finished_pods_have_no_grace() {
        let opts = DeleteOptions::default();
        assert_eq!(grace_seconds(&json!({"spec": {}}), &opts), 0);
        let done = json!({"spec": {"nodeName": "n1"}, "status": {"phase": "Succeeded"}});
        assert_eq!(grace_seconds(&done, &opts), 0);
    }
}
