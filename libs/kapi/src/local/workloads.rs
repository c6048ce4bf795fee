//! The workload strategies (`apps/v1` Deployments, ReplicaSets, StatefulSets, DaemonSets;
//! `batch/v1` Jobs and CronJobs): defaulted ([`apimachinery::defaults::workloads`], their pod
//! templates as pods) on every write, validated on create and update, with a generation; a
//! Job without `manualSelector: true` gets kube's generated selector and pod labels.

use apimachinery::defaults::{self, child};
use apimachinery::{ApiError, validation};
use serde_json::{Value, json};

use super::vocab::{Strategy, Target};
use super::{meta, validate};

/// Workloads, told apart by their kind.
pub(super) struct Workloads;

/// The label a Job's generated selector matches, with its legacy twin on the pods.
const CONTROLLER_UID: [&str; 2] = ["batch.kubernetes.io/controller-uid", "controller-uid"];
const JOB_NAME: [&str; 2] = ["batch.kubernetes.io/job-name", "job-name"];

// === impl Workloads ===

impl Strategy for Workloads {
    fn tracks_generation(&self) -> bool {
        true
    }

    fn canonicalize(&self, target: &Target, obj: &mut Value) -> Result<(), ApiError> {
        defaults::workloads::workload(&target.info.kind, obj);
        Ok(())
    }

    fn prepare_create(&self, target: &Target, obj: &mut Value) -> Result<(), ApiError> {
        let kind = target.info.kind.as_str();
        if kind == "Job" {
            generate_job_selector(obj);
        }
        let errs = validation::workloads::workload(kind, obj);
        validate::field_errors(&target.info, meta::name(obj), errs)
    }

    fn prepare_update(
        &self,
        target: &Target,
        next: &mut Value,
        current: &Value,
    ) -> Result<(), ApiError> {
        let kind = target.info.kind.as_str();
        defaults::workloads::workload(kind, next);
        let mut current = current.clone();
        defaults::workloads::workload(kind, &mut current);
        let errs = validation::workloads::update(kind, next, &current);
        validate::field_errors(&target.info, meta::name(next), errs)
    }
}

// === helpers ===

/// kube's `generateSelector`: unless `spec.manualSelector` is true, the pods get the Job's uid
/// and name as labels, and the selector matches the uid.
fn generate_job_selector(job: &mut Value) {
    if job.pointer("/spec/manualSelector") == Some(&json!(true)) {
        return;
    }
    let uid = meta::uid(job).to_owned();
    let name = meta::name(job).to_owned();
    let map = meta::object_mut(job);
    let spec = child(map, "spec");
    let labels = child(child(child(spec, "template"), "metadata"), "labels");
    for key in CONTROLLER_UID {
        labels.insert(key.into(), json!(uid));
    }
    for key in JOB_NAME {
        labels.insert(key.into(), json!(name));
    }
    if spec.get("selector").is_none_or(Value::is_null) {
        spec.insert(
            "selector".into(),
            json!({"matchLabels": {CONTROLLER_UID[0]: uid}}),
        );
    }
    defaults::workloads::labels_from_template(map);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_job_gets_a_selector_on_its_uid_and_labels_on_its_pods() {
        let mut job = json!({"metadata": {"name": "pi", "uid": "u-1"},
            "spec": {"template": {"spec": {"containers": []}}}});
        generate_job_selector(&mut job);
        assert_eq!(
            job["spec"]["selector"],
            json!({"matchLabels": {"batch.kubernetes.io/controller-uid": "u-1"}})
        );
        let labels = &job["spec"]["template"]["metadata"]["labels"];
        assert_eq!(labels["controller-uid"], "u-1");
        assert_eq!(labels["batch.kubernetes.io/job-name"], "pi");
        assert_eq!(labels["job-name"], "pi");
        assert_eq!(job["metadata"]["labels"], *labels);
    }

    #[test]
    fn a_manual_selector_is_left_alone() {
        let mut job = json!({"metadata": {"name": "pi", "uid": "u-1"},
            "spec": {"manualSelector": true, "selector": {"matchLabels": {"a": "b"}}}});
        let before = job.clone();
        generate_job_selector(&mut job);
        assert_eq!(job, before);
    }
}
