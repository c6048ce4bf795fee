//! Workload validation (`apps/v1` and `batch/v1`): a selector that matches the pod template's
//! labels, the template's pod spec, restart policies the controller can honour, counts that
//! are not negative; on update, selectors (and a Job's template) stay as they were.

use serde_json::{Map, Value, json};

use super::{FieldError, pod};

/// The longest name a CronJob may have.
const CRON_JOB_NAME_MAX: usize = 52;

/// Validates a (defaulted) workload of `kind`; other kinds answer nothing.
pub fn workload(kind: &str, obj: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let spec = obj.get("spec").unwrap_or(&Value::Null);
    let (template, template_path) = match kind {
        "Deployment" | "ReplicaSet" | "StatefulSet" | "DaemonSet" | "Job" => {
            (spec.get("template"), "spec.template")
        }
        "CronJob" => (
            spec.pointer("/jobTemplate/spec/template"),
            "spec.jobTemplate.spec.template",
        ),
        _ => return errs,
    };
    if kind != "CronJob" {
        selector(&mut errs, spec, template);
    } else {
        cron_job(&mut errs, obj, spec);
    }
    for key in ["replicas", "parallelism", "completions", "backoffLimit"] {
        if let Some(n) = spec.get(key).filter(|v| !v.is_null())
            && n.as_i64().is_none_or(|n| n < 0)
        {
            let why = "must be greater than or equal to 0";
            errs.push(FieldError::invalid(format!("spec.{key}"), n, why));
        }
    }
    let Some(template) = template else {
        errs.push(FieldError::required(template_path, ""));
        return errs;
    };
    let pod_path = format!("{template_path}.spec");
    let pod_spec = template.get("spec").unwrap_or(&Value::Null);
    errs.extend(pod::spec(pod_spec, &pod_path));
    let restart = pod_spec.get("restartPolicy").cloned().unwrap_or(json!(""));
    let allowed: &[&str] = if matches!(kind, "Job" | "CronJob") {
        &["OnFailure", "Never"]
    } else {
        &["Always"]
    };
    if !restart.as_str().is_some_and(|r| allowed.contains(&r)) {
        let field = format!("{pod_path}.restartPolicy");
        errs.retain(|e| e.field != field);
        errs.push(FieldError::unsupported(field, &restart, allowed));
    }
    errs
}

/// What an update may not change: the selector; for a Job also its pod template.
pub fn update(kind: &str, new: &Value, old: &Value) -> Vec<FieldError> {
    let mut errs = workload(kind, new);
    if kind == "CronJob" {
        return errs;
    }
    let selector = |o: &Value| o.pointer("/spec/selector").cloned().unwrap_or(Value::Null);
    if selector(new) != selector(old) {
        errs.push(FieldError::invalid(
            "spec.selector",
            &selector(new),
            "field is immutable",
        ));
    }
    if kind == "Job" {
        let template = |o: &Value| o.pointer("/spec/template").cloned().unwrap_or(Value::Null);
        if template(new) != template(old) {
            errs.push(FieldError::invalid(
                "spec.template",
                &template(new),
                "field is immutable",
            ));
        }
        for key in ["completions", "completionMode"] {
            if new.pointer(&format!("/spec/{key}")) != old.pointer(&format!("/spec/{key}")) {
                let v = new
                    .pointer(&format!("/spec/{key}"))
                    .cloned()
                    .unwrap_or(Value::Null);
                errs.push(FieldError::invalid(
                    format!("spec.{key}"),
                    &v,
                    "field is immutable",
                ));
            }
        }
    }
    errs
}

/// A CronJob needs a schedule, and a name short enough for its Jobs' (name plus an
/// 11-character suffix, within a 63-character label).
fn cron_job(errs: &mut Vec<FieldError>, obj: &Value, spec: &Value) {
    let name = obj
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("");
    if name.len() > CRON_JOB_NAME_MAX {
        let why = format!("must be no more than {CRON_JOB_NAME_MAX} characters");
        errs.push(FieldError::invalid("metadata.name", &json!(name), &why));
    }
    if spec
        .get("schedule")
        .and_then(Value::as_str)
        .is_none_or(str::is_empty)
    {
        errs.push(FieldError::required("spec.schedule", ""));
    }
}

/// A selector is required, non-empty, and matches the template's labels.
fn selector(errs: &mut Vec<FieldError>, spec: &Value, template: Option<&Value>) {
    let Some(sel) = spec.get("selector").filter(|s| !s.is_null()) else {
        errs.push(FieldError::required("spec.selector", ""));
        return;
    };
    let empty = Map::new();
    let match_labels = sel
        .get("matchLabels")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    let expressions = sel
        .get("matchExpressions")
        .and_then(Value::as_array)
        .map_or(0, Vec::len);
    if match_labels.is_empty() && expressions == 0 {
        let why = "empty selector is invalid for deployment";
        errs.push(FieldError::invalid("spec.selector", sel, why));
        return;
    }
    let labels = template
        .and_then(|t| t.pointer("/metadata/labels"))
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    let matches = match_labels.iter().all(|(k, v)| labels.get(k) == Some(v))
        && sel
            .get("matchExpressions")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .all(|e| expression_matches(e, labels));
    if !matches {
        errs.push(FieldError::invalid(
            "spec.template.metadata.labels",
            &Value::Object(labels.clone()),
            "`selector` does not match template `labels`",
        ));
    }
}

fn expression_matches(e: &Value, labels: &Map<String, Value>) -> bool {
    let key = e.get("key").and_then(Value::as_str).unwrap_or("");
    let values: Vec<&str> = e
        .get("values")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    let have = labels.get(key).and_then(Value::as_str);
    match e.get("operator").and_then(Value::as_str).unwrap_or("") {
        "In" => have.is_some_and(|v| values.contains(&v)),
        "NotIn" => !have.is_some_and(|v| values.contains(&v)),
        "Exists" => have.is_some(),
        "DoesNotExist" => have.is_none(),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deployment(selector: Value, labels: Value) -> Value {
        json!({"spec": {"selector": selector, "template": {"metadata": {"labels": labels},
            "spec": {"restartPolicy": "Always", "containers": [{"name": "c", "image": "x"}]}}}})
    }

    #[test]
    fn a_deployment_needs_a_selector_matching_its_template() {
        let ok = deployment(
            json!({"matchLabels": {"app": "a"}}),
            json!({"app": "a", "x": "y"}),
        );
        assert_eq!(workload("Deployment", &ok), []);
        let missing = deployment(Value::Null, json!({"app": "a"}));
        assert_eq!(
            workload("Deployment", &missing),
            [FieldError::required("spec.selector", "")]
        );
        let other = deployment(json!({"matchLabels": {"app": "b"}}), json!({"app": "a"}));
        let errs = workload("Deployment", &other);
        assert_eq!(errs[0].field, "spec.template.metadata.labels");
        assert!(
            errs[0]
                .why
                .ends_with("`selector` does not match template `labels`")
        );
    }

    #[test]
    fn templates_are_pod_specs_with_the_controllers_restart_policy() {
        let mut d = deployment(json!({"matchLabels": {"app": "a"}}), json!({"app": "a"}));
        d["spec"]["template"]["spec"]["containers"][0]["image"] = json!("");
        d["spec"]["template"]["spec"]["restartPolicy"] = json!("Never");
        let got: Vec<String> = workload("Deployment", &d)
            .into_iter()
            .map(|e| e.field)
            .collect();
        assert_eq!(
            got,
            [
                "spec.template.spec.containers[0].image",
                "spec.template.spec.restartPolicy"
            ]
        );
        let mut job = deployment(json!({"matchLabels": {"app": "a"}}), json!({"app": "a"}));
        let errs = workload("Job", &job);
        assert!(errs[0].why.starts_with("Unsupported value: \"Always\""));
        job["spec"]["template"]["spec"]["restartPolicy"] = json!("Never");
        assert_eq!(workload("Job", &job), []);
    }

    #[test]
    fn cron_jobs_need_a_schedule_and_a_short_name() {
        let template = json!({"spec": {"restartPolicy": "Never",
            "containers": [{"name": "c", "image": "x"}]}});
        let long = "c".repeat(53);
        let cron = json!({"metadata": {"name": long},
            "spec": {"jobTemplate": {"spec": {"template": template}}}});
        let got: Vec<String> = workload("CronJob", &cron)
            .into_iter()
            .map(|e| e.field)
            .collect();
        assert_eq!(got, ["metadata.name", "spec.schedule"]);
    }

    #[test]
    fn selectors_and_job_templates_are_immutable() {
        let old = deployment(
            json!({"matchLabels": {"app": "a"}}),
            json!({"app": "a", "b": "c"}),
        );
        let new = deployment(
            json!({"matchLabels": {"b": "c"}}),
            json!({"app": "a", "b": "c"}),
        );
        let errs = update("Deployment", &new, &old);
        assert_eq!(errs.len(), 1);
        assert_eq!(errs[0].field, "spec.selector");
        let mut job = deployment(json!({"matchLabels": {"app": "a"}}), json!({"app": "a"}));
        job["spec"]["template"]["spec"]["restartPolicy"] = json!("Never");
        let mut changed = job.clone();
        changed["spec"]["template"]["spec"]["containers"][0]["image"] = json!("y");
        let errs = update("Job", &changed, &job);
        assert_eq!(errs.len(), 1);
        assert_eq!(errs[0].field, "spec.template");
    }
}
