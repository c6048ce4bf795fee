//! The pod printer: READY, STATUS (phase, init progress, container reasons, `Terminating`),
//! RESTARTS (with the last restart's age), and the wide columns.

use serde_json::{Value, json};

use super::{Printed, creation_age, items, or_placeholder, text};
use crate::time::{age_since, parse_rfc3339};

/// What the container statuses add up to.
#[derive(Default)]
struct Tally {
    ready: usize,
    restarts: i64,
    /// Latest `lastState.terminated.finishedAt` (seconds and text).
    last_restart: Option<(i64, String)>,
}

/// The init containers' tallies: all of them, and the restartable (sidecar) ones alone.
struct InitTally {
    all: Tally,
    sidecars: Tally,
}

pub(super) fn print(pod: &Value, now: i64) -> Printed {
    let phase = text(pod, "/status/phase");
    let mut reason = Some(text(pod, "/status/reason"))
        .filter(|r| !r.is_empty())
        .unwrap_or(phase)
        .to_owned();
    if conditions(pod).any(|c| c["type"] == "PodScheduled" && c["reason"] == "SchedulingGated") {
        reason = "SchedulingGated".to_owned();
    }
    let (init, initializing) = init_containers(pod, &mut reason);
    let tally = if !initializing || condition_true(pod, "Initialized") {
        containers(pod, init, &mut reason)
    } else {
        init.all
    };
    if pod
        .pointer("/metadata/deletionTimestamp")
        .is_some_and(|t| !t.is_null())
    {
        if text(pod, "/status/reason") == "NodeLost" {
            reason = "Unknown".to_owned();
        } else if phase != "Succeeded" && phase != "Failed" {
            reason = "Terminating".to_owned();
        }
    }
    let total = items(pod, "/spec/containers").len() + restartable_init_count(pod);
    let mut printed = Printed::new(vec![
        ("Name", Value::from(text(pod, "/metadata/name"))),
        ("Ready", Value::from(format!("{}/{total}", tally.ready))),
        ("Status", Value::from(reason)),
        ("Restarts", Value::from(restarts(&tally, now))),
        ("Age", Value::from(creation_age(pod, now))),
        ("IP", first_pod_ip(pod)),
        (
            "Node",
            or_placeholder(text(pod, "/spec/nodeName"), "<none>"),
        ),
        (
            "Nominated Node",
            or_placeholder(text(pod, "/status/nominatedNodeName"), "<none>"),
        ),
        ("Readiness Gates", Value::from(readiness_gates(pod))),
    ]);
    printed.conditions = completion_conditions(phase);
    printed
}

/// Walks the init container statuses until the first one still initializing, setting
/// `reason` to its `Init:` status; returns the tallies and whether the pod is initializing.
fn init_containers(pod: &Value, reason: &mut String) -> (InitTally, bool) {
    let mut init = InitTally {
        all: Tally::default(),
        sidecars: Tally::default(),
    };
    let specs = items(pod, "/spec/initContainers");
    for (i, status) in items(pod, "/status/initContainerStatuses")
        .iter()
        .enumerate()
    {
        let sidecar = specs
            .iter()
            .any(|c| c["name"] == status["name"] && c["restartPolicy"] == "Always");
        init.all.count_restarts(status);
        if sidecar {
            init.sidecars.count_restarts(status);
        }
        let terminated = status.pointer("/state/terminated");
        if terminated.is_some_and(|t| t["exitCode"].as_i64().unwrap_or(0) == 0) {
            continue;
        }
        if sidecar && status["started"] == true {
            if status["ready"] == true {
                init.all.ready += 1;
                init.sidecars.ready += 1;
            }
            continue;
        }
        *reason = init_reason(status, terminated, i, specs.len());
        return (init, true);
    }
    (init, false)
}

fn init_reason(status: &Value, terminated: Option<&Value>, index: usize, total: usize) -> String {
    if let Some(t) = terminated {
        return match (
            t["reason"].as_str().filter(|r| !r.is_empty()),
            t["signal"].as_i64(),
        ) {
            (Some(r), _) => format!("Init:{r}"),
            (None, Some(signal)) if signal != 0 => format!("Init:Signal:{signal}"),
            (None, _) => format!("Init:ExitCode:{}", t["exitCode"].as_i64().unwrap_or(0)),
        };
    }
    match status
        .pointer("/state/waiting/reason")
        .and_then(Value::as_str)
    {
        Some(r) if !r.is_empty() && r != "PodInitializing" => format!("Init:{r}"),
        _ => format!("Init:{index}/{total}"),
    }
}

/// Tallies the app containers (last to first, as kubectl does, so the first container's
/// reason wins) on top of the sidecars, updating `reason`.
fn containers(pod: &Value, init: InitTally, reason: &mut String) -> Tally {
    let mut tally = init.sidecars;
    tally.ready = init.all.ready;
    let mut has_running = false;
    for status in items(pod, "/status/containerStatuses").iter().rev() {
        tally.count_restarts(status);
        let waiting = status
            .pointer("/state/waiting/reason")
            .and_then(Value::as_str);
        let terminated = status.pointer("/state/terminated");
        if let Some(r) = waiting.filter(|r| !r.is_empty()) {
            *reason = r.to_owned();
        } else if let Some(t) = terminated {
            *reason = terminated_reason(t);
        } else if status["ready"] == true && status.pointer("/state/running").is_some() {
            has_running = true;
            tally.ready += 1;
        }
    }
    if reason == "Completed" && has_running {
        *reason = if condition_true(pod, "Ready") {
            "Running"
        } else {
            "NotReady"
        }
        .to_owned();
    }
    tally
}

fn terminated_reason(t: &Value) -> String {
    match (
        t["reason"].as_str().filter(|r| !r.is_empty()),
        t["signal"].as_i64(),
    ) {
        (Some(r), _) => r.to_owned(),
        (None, Some(signal)) if signal != 0 => format!("Signal:{signal}"),
        (None, _) => format!("ExitCode:{}", t["exitCode"].as_i64().unwrap_or(0)),
    }
}

/// `3`, or `3 (5m ago)` when the last restart's time is known.
fn restarts(tally: &Tally, now: i64) -> String {
    match &tally.last_restart {
        Some((_, at)) if tally.restarts != 0 => {
            format!("{} ({} ago)", tally.restarts, age_since(Some(at), now))
        }
        _ => tally.restarts.to_string(),
    }
}

fn restartable_init_count(pod: &Value) -> usize {
    items(pod, "/spec/initContainers")
        .iter()
        .filter(|c| c["restartPolicy"] == "Always")
        .count()
}

fn conditions(pod: &Value) -> impl Iterator<Item = &Value> {
    items(pod, "/status/conditions").iter()
}

fn condition_true(pod: &Value, type_: &str) -> bool {
    conditions(pod).any(|c| c["type"] == type_ && c["status"] == "True")
}

fn first_pod_ip(pod: &Value) -> Value {
    let ip = items(pod, "/status/podIPs")
        .first()
        .and_then(|p| p["ip"].as_str())
        .unwrap_or_else(|| text(pod, "/status/podIP"));
    or_placeholder(ip, "<none>")
}

/// `true/total` of the readiness gates, or `<none>`.
fn readiness_gates(pod: &Value) -> String {
    let gates = items(pod, "/spec/readinessGates");
    if gates.is_empty() {
        return "<none>".to_owned();
    }
    let passing = gates
        .iter()
        .filter(|g| {
            conditions(pod)
                .find(|c| c["type"] == g["conditionType"])
                .is_some_and(|c| c["status"] == "True")
        })
        .count();
    format!("{passing}/{}", gates.len())
}

/// The row conditions kube-apiserver sets on completed pods.
fn completion_conditions(phase: &str) -> Option<Value> {
    let message = match phase {
        "Succeeded" => "The pod has completed successfully.",
        "Failed" => "The pod failed.",
        _ => return None,
    };
    Some(json!([{"type": "Completed", "status": "True", "reason": phase, "message": message}]))
}

// === impl Tally ===

impl Tally {
    fn count_restarts(&mut self, status: &Value) {
        self.restarts += status["restartCount"].as_i64().unwrap_or(0);
        let finished = status
            .pointer("/lastState/terminated/finishedAt")
            .and_then(Value::as_str);
        let Some((at, text)) = finished.and_then(|t| Some((parse_rfc3339(t)?, t))) else {
            return;
        };
        if self
            .last_restart
            .as_ref()
            .is_none_or(|(last, _)| at > *last)
        {
            self.last_restart = Some((at, text.to_owned()));
        }
    }
}
