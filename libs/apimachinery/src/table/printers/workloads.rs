//! Cells of the workload kinds: pod templates, replication controllers, apps/v1, batch/v1,
//! horizontal pod autoscalers and pod disruption budgets.

use serde_json::{Value, json};

use super::{Cells, format_labels, items, or_placeholder, text};
use crate::fields::format_label_selector;
use crate::time::{age_since, human_age, parse_rfc3339};

/// `spec.replicas`, or the API default of 1 when unset.
fn desired_replicas(obj: &Value) -> i64 {
    obj.pointer("/spec/replicas")
        .and_then(Value::as_i64)
        .unwrap_or(1)
}

pub(super) fn pod_template(obj: &Value) -> Cells {
    let (names, images) = containers(obj.pointer("/template/spec/containers"));
    vec![
        ("Containers", Value::from(names)),
        ("Images", Value::from(images)),
        (
            "Pod Labels",
            Value::from(format_labels(obj.pointer("/template/metadata/labels"))),
        ),
    ]
}

/// Replication controllers (a map selector) and replica sets (a label selector).
pub(super) fn replicas(obj: &Value, map_selector: bool) -> Cells {
    let selector = if map_selector {
        format_labels(obj.pointer("/spec/selector"))
    } else {
        format_label_selector(obj.pointer("/spec/selector"))
    };
    let mut cells = vec![
        ("Desired", json!(desired_replicas(obj))),
        ("Current", json!(counter(obj, "/status/replicas"))),
        ("Ready", json!(counter(obj, "/status/readyReplicas"))),
        ("Selector", Value::from(selector)),
    ];
    cells.extend(template_cells(obj, "/spec/template"));
    cells
}

pub(super) fn deployment(obj: &Value) -> Cells {
    let mut cells = vec![
        ("Ready", Value::from(ready_of_desired(obj))),
        ("Up-to-date", json!(counter(obj, "/status/updatedReplicas"))),
        (
            "Available",
            json!(counter(obj, "/status/availableReplicas")),
        ),
        (
            "Selector",
            Value::from(format_label_selector(obj.pointer("/spec/selector"))),
        ),
    ];
    cells.extend(template_cells(obj, "/spec/template"));
    cells
}

pub(super) fn stateful_set(obj: &Value) -> Cells {
    let mut cells = vec![("Ready", Value::from(ready_of_desired(obj)))];
    cells.extend(template_cells(obj, "/spec/template"));
    cells
}

pub(super) fn daemon_set(obj: &Value) -> Cells {
    let mut cells = vec![
        (
            "Desired",
            json!(counter(obj, "/status/desiredNumberScheduled")),
        ),
        (
            "Current",
            json!(counter(obj, "/status/currentNumberScheduled")),
        ),
        ("Ready", json!(counter(obj, "/status/numberReady"))),
        (
            "Up-to-date",
            json!(counter(obj, "/status/updatedNumberScheduled")),
        ),
        ("Available", json!(counter(obj, "/status/numberAvailable"))),
        (
            "Node Selector",
            Value::from(format_labels(
                obj.pointer("/spec/template/spec/nodeSelector"),
            )),
        ),
        (
            "Selector",
            Value::from(format_label_selector(obj.pointer("/spec/selector"))),
        ),
    ];
    cells.extend(template_cells(obj, "/spec/template"));
    cells
}

/// `Controller` is the controlling owner as `kind.group/name` (`daemonset.apps/fluentd`).
pub(super) fn controller_revision(obj: &Value) -> Cells {
    let owner = items(obj, "/metadata/ownerReferences")
        .iter()
        .find(|o| o["controller"] == true);
    let controller = owner.map_or_else(
        || "<none>".to_owned(),
        |o| {
            let kind = o["kind"].as_str().unwrap_or_default().to_lowercase();
            let api_version = o["apiVersion"].as_str().unwrap_or_default();
            let name = o["name"].as_str().unwrap_or_default();
            match api_version.split_once('/') {
                Some((group, _)) => format!("{kind}.{group}/{name}"),
                None => format!("{kind}/{name}"),
            }
        },
    );
    vec![
        ("Controller", Value::from(controller)),
        ("Revision", json!(counter(obj, "/revision"))),
    ]
}

pub(super) fn job(obj: &Value, now: i64) -> Cells {
    let succeeded = counter(obj, "/status/succeeded");
    let completions = match obj.pointer("/spec/completions").and_then(Value::as_i64) {
        Some(n) => format!("{succeeded}/{n}"),
        None => match obj.pointer("/spec/parallelism").and_then(Value::as_i64) {
            Some(p) if p > 1 => format!("{succeeded}/1 of {p}"),
            _ => format!("{succeeded}/1"),
        },
    };
    let started = time_at(obj, "/status/startTime");
    let duration = match (started, time_at(obj, "/status/completionTime")) {
        (None, _) => String::new(),
        (Some(start), None) => human_age(now - start),
        (Some(start), Some(end)) => human_age(end - start),
    };
    let mut cells = vec![
        ("Status", Value::from(job_status(obj))),
        ("Completions", Value::from(completions)),
        ("Duration", Value::from(duration)),
        (
            "Selector",
            Value::from(format_label_selector(obj.pointer("/spec/selector"))),
        ),
    ];
    cells.extend(template_cells(obj, "/spec/template"));
    cells
}

/// `Complete`, `Failed`, `Terminating`, `Suspended`, `FailureTarget`, else `Running`.
fn job_status(obj: &Value) -> &'static str {
    let has = |kind: &str| {
        items(obj, "/status/conditions")
            .iter()
            .find(|c| c["type"] == kind)
            .is_some_and(|c| c["status"] == "True")
    };
    if has("Complete") {
        "Complete"
    } else if has("Failed") {
        "Failed"
    } else if obj.pointer("/metadata/deletionTimestamp").is_some() {
        "Terminating"
    } else if has("Suspended") {
        "Suspended"
    } else if has("FailureTarget") {
        "FailureTarget"
    } else {
        "Running"
    }
}

pub(super) fn cron_job(obj: &Value, now: i64) -> Cells {
    let last = match text(obj, "/status/lastScheduleTime") {
        "" => "<none>".to_owned(),
        t => age_since(Some(t), now),
    };
    let suspend = match obj.pointer("/spec/suspend").and_then(Value::as_bool) {
        Some(true) => "True",
        Some(false) => "False",
        None => "<unset>",
    };
    let template = "/spec/jobTemplate/spec";
    let mut cells = vec![
        ("Schedule", Value::from(text(obj, "/spec/schedule"))),
        (
            "Timezone",
            or_placeholder(text(obj, "/spec/timeZone"), "<none>"),
        ),
        ("Suspend", Value::from(suspend)),
        ("Active", json!(items(obj, "/status/active").len())),
        ("Last Schedule", Value::from(last)),
        (
            "Selector",
            Value::from(format_label_selector(
                obj.pointer(&format!("{template}/selector")),
            )),
        ),
    ];
    cells.extend(template_cells(obj, &format!("{template}/template")));
    cells
}

/// Either API version's shape: `v2` metrics, or `v1`'s `targetCPUUtilizationPercentage`.
pub(super) fn horizontal_pod_autoscaler(obj: &Value) -> Cells {
    let target = format!(
        "{}/{}",
        text(obj, "/spec/scaleTargetRef/kind"),
        text(obj, "/spec/scaleTargetRef/name")
    );
    let min = match obj.pointer("/spec/minReplicas").and_then(Value::as_i64) {
        Some(n) => n.to_string(),
        None => "<unset>".to_owned(),
    };
    vec![
        ("Reference", Value::from(target)),
        ("Targets", Value::from(hpa_targets(obj))),
        ("MinPods", Value::from(min)),
        ("MaxPods", json!(counter(obj, "/spec/maxReplicas"))),
        ("Replicas", json!(counter(obj, "/status/currentReplicas"))),
    ]
}

/// `cpu: 40%/80%` per metric (current from the status, `<unknown>` before the first
/// measurement), at most three then `+ N more...`; `<none>` without metrics.
fn hpa_targets(obj: &Value) -> String {
    if let Some(percent) = obj
        .pointer("/spec/targetCPUUtilizationPercentage")
        .and_then(Value::as_i64)
    {
        let current = obj
            .pointer("/status/currentCPUUtilizationPercentage")
            .and_then(Value::as_i64)
            .map_or_else(|| "<unknown>".to_owned(), |c| format!("{c}%"));
        return format!("cpu: {current}/{percent}%");
    }
    let metrics = items(obj, "/spec/metrics");
    if metrics.is_empty() {
        return "<none>".to_owned();
    }
    let current = items(obj, "/status/currentMetrics");
    let all: Vec<String> = metrics
        .iter()
        .enumerate()
        .map(|(i, m)| hpa_metric(m, current.get(i)))
        .collect();
    let shown = all[..all.len().min(3)].join(", ");
    if all.len() > 3 {
        format!("{shown} + {} more...", all.len() - 3)
    } else {
        shown
    }
}

fn hpa_metric(metric: &Value, current: Option<&Value>) -> String {
    let kind = metric["type"].as_str().unwrap_or_default();
    let key = match kind {
        "Resource" => "resource",
        "ContainerResource" => "containerResource",
        "Pods" => "pods",
        "Object" => "object",
        "External" => "external",
        _ => return "<unknown type>".to_owned(),
    };
    let spec = &metric[key];
    let now = current.map(|c| &c[key]["current"]);
    let (target, current) = if let Some(u) = spec["target"]["averageUtilization"].as_i64() {
        let c = now.and_then(|c| c["averageUtilization"].as_i64());
        (format!("{u}%"), c.map(|c| format!("{c}%")))
    } else {
        let field = ["averageValue", "value"]
            .into_iter()
            .find(|f| !spec["target"][f].is_null())
            .unwrap_or("value");
        let c = now.and_then(|c| quantity(&c[field]));
        (quantity(&spec["target"][field]).unwrap_or_default(), c)
    };
    let current = current.unwrap_or_else(|| "<unknown>".to_owned());
    match kind {
        "Resource" | "ContainerResource" => {
            let name = spec["name"].as_str().unwrap_or_default();
            format!("{name}: {current}/{target}")
        }
        _ => format!("{current}/{target}"),
    }
}

pub(super) fn pod_disruption_budget(obj: &Value) -> Cells {
    let bound = |field: &str| match obj.pointer(&format!("/spec/{field}")) {
        Some(v) => Value::from(quantity(v).unwrap_or_default()),
        None => Value::from("N/A"),
    };
    vec![
        ("Min Available", bound("minAvailable")),
        ("Max Unavailable", bound("maxUnavailable")),
        (
            "Allowed Disruptions",
            json!(counter(obj, "/status/disruptionsAllowed")),
        ),
    ]
}

/// The wide `Containers` and `Images` cells of the pod template at `template`.
fn template_cells(obj: &Value, template: &str) -> Cells {
    let (names, images) = containers(obj.pointer(&format!("{template}/spec/containers")));
    vec![
        ("Containers", Value::from(names)),
        ("Images", Value::from(images)),
    ]
}

/// Container names and images, each joined with commas.
fn containers(list: Option<&Value>) -> (String, String) {
    let list = list
        .and_then(Value::as_array)
        .map_or(&[][..], Vec::as_slice);
    let field = |f: &str| {
        list.iter()
            .map(|c| c[f].as_str().unwrap_or_default())
            .collect::<Vec<_>>()
            .join(",")
    };
    (field("name"), field("image"))
}

/// `ready/desired`, as deployments and stateful sets show it.
fn ready_of_desired(obj: &Value) -> String {
    format!(
        "{}/{}",
        counter(obj, "/status/readyReplicas"),
        desired_replicas(obj)
    )
}

fn counter(obj: &Value, pointer: &str) -> i64 {
    obj.pointer(pointer).and_then(Value::as_i64).unwrap_or(0)
}

fn time_at(obj: &Value, pointer: &str) -> Option<i64> {
    obj.pointer(pointer)
        .and_then(Value::as_str)
        .and_then(parse_rfc3339)
}

/// A quantity or int-or-string as text (`"50%"`, `2`, `"500m"`).
pub(super) fn quantity(value: &Value) -> Option<String> {
    match value {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}
