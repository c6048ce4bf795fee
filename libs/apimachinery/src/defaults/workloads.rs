//! Workload defaulting (`apps/v1` and `batch/v1` `SetDefaults_*`): replicas, update strategies,
//! history limits, Job completions and policies, CronJob policies; every pod template gets
//! the pod defaults ([`super::pod::template`]).

use serde_json::{Map, Value, json};

use super::{child, field_mut, or_set, pod};

/// Defaults a workload of `kind` (`Deployment`, `ReplicaSet`, `StatefulSet`, `DaemonSet`,
/// `Job`, `CronJob`, `ReplicationController`, `PodTemplate`); other kinds are left alone.
pub fn workload(kind: &str, obj: &mut Value) {
    let Some(map) = obj.as_object_mut() else {
        return;
    };
    if kind == "PodTemplate" {
        pod::template(child(map, "template"));
        return;
    }
    let spec = child(map, "spec");
    match kind {
        "Deployment" => deployment(spec),
        "ReplicaSet" | "ReplicationController" => or_set(spec, "replicas", json!(1)),
        "StatefulSet" => stateful_set(spec),
        "DaemonSet" => daemon_set(spec),
        "Job" => job(spec),
        "CronJob" => {
            cron_job(spec);
            let job_spec = child(child(spec, "jobTemplate"), "spec");
            pod::template(child(job_spec, "template"));
            return;
        }
        _ => return,
    }
    pod::template(child(spec, "template"));
    if kind == "Job" {
        labels_from_template(map);
    }
}

fn deployment(spec: &mut Map<String, Value>) {
    or_set(spec, "replicas", json!(1));
    let strategy = child(spec, "strategy");
    or_set(strategy, "type", json!("RollingUpdate"));
    if strategy["type"] == "RollingUpdate" {
        let rolling = child(strategy, "rollingUpdate");
        or_set(rolling, "maxUnavailable", json!("25%"));
        or_set(rolling, "maxSurge", json!("25%"));
    }
    or_set(spec, "revisionHistoryLimit", json!(10));
    or_set(spec, "progressDeadlineSeconds", json!(600));
}

fn stateful_set(spec: &mut Map<String, Value>) {
    or_set(spec, "replicas", json!(1));
    or_set(spec, "podManagementPolicy", json!("OrderedReady"));
    let strategy = child(spec, "updateStrategy");
    or_set(strategy, "type", json!("RollingUpdate"));
    if strategy["type"] == "RollingUpdate" {
        or_set(child(strategy, "rollingUpdate"), "partition", json!(0));
    }
    or_set(spec, "revisionHistoryLimit", json!(10));
    let retention = child(spec, "persistentVolumeClaimRetentionPolicy");
    or_set(retention, "whenDeleted", json!("Retain"));
    or_set(retention, "whenScaled", json!("Retain"));
    if let Some(claims) = spec
        .get_mut("volumeClaimTemplates")
        .and_then(Value::as_array_mut)
    {
        for claim in claims.iter_mut().filter_map(Value::as_object_mut) {
            or_set(child(claim, "spec"), "volumeMode", json!("Filesystem"));
        }
    }
}

fn daemon_set(spec: &mut Map<String, Value>) {
    let strategy = child(spec, "updateStrategy");
    or_set(strategy, "type", json!("RollingUpdate"));
    if strategy["type"] == "RollingUpdate" {
        let rolling = child(strategy, "rollingUpdate");
        or_set(rolling, "maxUnavailable", json!(1));
        or_set(rolling, "maxSurge", json!(0));
    }
    or_set(spec, "revisionHistoryLimit", json!(10));
}

fn job(spec: &mut Map<String, Value>) {
    let unset = |spec: &Map<String, Value>, k: &str| spec.get(k).is_none_or(Value::is_null);
    if unset(spec, "completions") && unset(spec, "parallelism") {
        spec.insert("completions".into(), json!(1));
    }
    or_set(spec, "parallelism", json!(1));
    let backoff = if unset(spec, "backoffLimitPerIndex") {
        json!(6)
    } else {
        json!(i32::MAX)
    };
    or_set(spec, "backoffLimit", backoff);
    or_set(spec, "completionMode", json!("NonIndexed"));
    or_set(spec, "suspend", json!(false));
    or_set(spec, "manualSelector", json!(false));
    let replacement = if unset(spec, "podFailurePolicy") {
        "TerminatingOrFailed"
    } else {
        "Failed"
    };
    or_set(spec, "podReplacementPolicy", json!(replacement));
    if let Some(policy) = field_mut(spec, "podFailurePolicy") {
        for rule in super::items(policy, "rules") {
            for pattern in super::items(rule, "onPodConditions") {
                or_set(pattern, "status", json!("True"));
            }
        }
    }
}

fn cron_job(spec: &mut Map<String, Value>) {
    or_set(spec, "concurrencyPolicy", json!("Allow"));
    or_set(spec, "suspend", json!(false));
    or_set(spec, "successfulJobsHistoryLimit", json!(3));
    or_set(spec, "failedJobsHistoryLimit", json!(1));
}

/// A Job without labels takes its pod template's.
pub fn labels_from_template(job: &mut Map<String, Value>) {
    let template_labels = job
        .get("spec")
        .and_then(|s| s.pointer("/template/metadata/labels"))
        .and_then(Value::as_object)
        .filter(|l| !l.is_empty())
        .cloned();
    let Some(labels) = template_labels else {
        return;
    };
    let metadata = child(job, "metadata");
    let empty = metadata
        .get("labels")
        .and_then(Value::as_object)
        .is_none_or(Map::is_empty);
    if empty {
        metadata.insert("labels".into(), Value::Object(labels));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn template() -> Value {
        json!({"metadata": {"labels": {"app": "a"}}, "spec": {"containers": [{"name": "c", "image": "x:1"}]}})
    }

    #[test]
    fn deployments_get_replicas_strategy_and_limits() {
        let mut d = json!({"spec": {"template": template()}});
        workload("Deployment", &mut d);
        let spec = &d["spec"];
        assert_eq!(spec["replicas"], 1);
        assert_eq!(
            spec["strategy"],
            json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"}})
        );
        assert_eq!(spec["revisionHistoryLimit"], 10);
        assert_eq!(spec["progressDeadlineSeconds"], 600);
        assert_eq!(spec["template"]["spec"]["restartPolicy"], "Always");
        let recreate = &mut json!({"spec": {"strategy": {"type": "Recreate"}}});
        workload("Deployment", recreate);
        assert_eq!(recreate["spec"]["strategy"], json!({"type": "Recreate"}));
    }

    #[test]
    fn stateful_sets_and_daemon_sets_get_their_update_strategies() {
        let mut s =
            json!({"spec": {"template": template(), "volumeClaimTemplates": [{"spec": {}}]}});
        workload("StatefulSet", &mut s);
        let spec = &s["spec"];
        assert_eq!(spec["replicas"], 1);
        assert_eq!(spec["podManagementPolicy"], "OrderedReady");
        assert_eq!(
            spec["updateStrategy"],
            json!({"type": "RollingUpdate", "rollingUpdate": {"partition": 0}})
        );
        assert_eq!(
            spec["persistentVolumeClaimRetentionPolicy"],
            json!({"whenDeleted": "Retain", "whenScaled": "Retain"})
        );
        assert_eq!(
            spec["volumeClaimTemplates"][0]["spec"]["volumeMode"],
            "Filesystem"
        );
        let mut d = json!({"spec": {"template": template()}});
        workload("DaemonSet", &mut d);
        assert_eq!(
            d["spec"]["updateStrategy"],
            json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}})
        );
        assert_eq!(d["spec"]["revisionHistoryLimit"], 10);
    }

    #[test]
    fn jobs_get_completions_only_when_neither_count_is_set() {
        let mut j = json!({"spec": {"template": template()}});
        workload("Job", &mut j);
        let spec = &j["spec"];
        assert_eq!(
            (&spec["completions"], &spec["parallelism"]),
            (&json!(1), &json!(1))
        );
        assert_eq!(spec["backoffLimit"], 6);
        assert_eq!(spec["completionMode"], "NonIndexed");
        assert_eq!(spec["suspend"], false);
        assert_eq!(spec["manualSelector"], false);
        assert_eq!(spec["podReplacementPolicy"], "TerminatingOrFailed");
        assert_eq!(j["metadata"]["labels"], json!({"app": "a"}));
        let mut p = json!({"spec": {"parallelism": 3, "template": template()}});
        workload("Job", &mut p);
        assert!(p["spec"].get("completions").is_none());
    }

    #[test]
    fn cron_jobs_get_policies_and_their_pod_template_the_pod_defaults() {
        let mut c = json!({"spec": {"schedule": "* * * * *", "jobTemplate": {"spec": {"template": template()}}}});
        workload("CronJob", &mut c);
        let spec = &c["spec"];
        assert_eq!(spec["concurrencyPolicy"], "Allow");
        assert_eq!(spec["suspend"], false);
        assert_eq!(spec["successfulJobsHistoryLimit"], 3);
        assert_eq!(spec["failedJobsHistoryLimit"], 1);
        let pod = &spec["jobTemplate"]["spec"]["template"]["spec"];
        assert_eq!(pod["dnsPolicy"], "ClusterFirst");
    }
}
