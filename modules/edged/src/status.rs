//! A pod's status computed from what the runtime reports (the kubelet's
//! `generateAPIPodStatus`), never remembered: phase, conditions with transition times carried
//! over while unchanged, container statuses with state, last state and restart count, IPs,
//! start time and QoS class. Pure.

use std::collections::{BTreeMap, BTreeSet};
use std::time::SystemTime;

use apimachinery::time::format_rfc3339;
use k8s_openapi::api::core::v1::{Container as Spec, Pod};
use serde_json::{Value, json};

use crate::plan::{self, Container, Desired, Observed, RestartPolicy, State};

/// What the worker knows beyond the runtime's state.
#[derive(Clone, Debug, Default)]
pub struct Extra {
    /// The pod's IP.
    pub pod_ip: String,
    /// The node's IP.
    pub host_ip: String,
    /// A waiting reason and message per container (image pulls, config errors, back-off).
    pub waiting: BTreeMap<String, (String, String)>,
    /// Image id per container id.
    pub image_ids: BTreeMap<String, String>,
    /// Running containers whose startup probe has not passed yet (not `started`).
    pub not_started: BTreeSet<String>,
    /// Running containers whose readiness probe does not pass (not `ready`).
    pub unready: BTreeSet<String>,
}

/// The status to report for `pod`.
pub fn pod_status(
    pod: &Pod,
    desired: &Desired,
    observed: &Observed,
    extra: &Extra,
    now: SystemTime,
) -> Value {
    let sandbox = plan::current_sandbox(observed).map(|s| s.id.as_str());
    let spec = pod.spec.clone().unwrap_or_default();
    let deleting = pod.metadata.deletion_timestamp.is_some();
    let init_specs = spec.init_containers.clone().unwrap_or_default();
    let status_of = |c: &Spec| {
        let s = container_status(c, observed, sandbox, extra);
        match deleting {
            true => terminating(s, pod),
            false => s,
        }
    };
    let init: Vec<Value> = init_specs.iter().map(status_of).collect();
    let app: Vec<Value> = spec.containers.iter().map(status_of).collect();
    // Ephemeral containers are never ready: they serve no traffic.
    let ephemeral: Vec<Value> = (spec.ephemeral_containers.iter().flatten())
        .filter_map(|e| crate::spec::any_container(pod, &e.name))
        .map(|c| {
            let mut s = status_of(&c);
            s["ready"] = json!(false);
            s
        })
        .collect();
    let initialized = desired.init.iter().all(|n| {
        matches!(
            plan::latest(observed, n, None).map(|c| &c.state),
            Some(State::Exited { code: 0, .. })
        )
    });
    let mut phase = phase(desired, observed, initialized);
    // A pod being deleted keeps the phase it had while its containers stop and go: it never
    // goes back to Pending.
    let reported = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    if let (true, "Pending", Some(before @ ("Running" | "Succeeded" | "Failed"))) =
        (deleting, phase, reported)
    {
        phase = match before {
            "Running" => "Running",
            "Succeeded" => "Succeeded",
            _ => "Failed",
        };
    }
    let containers_ready = app.iter().all(|s| s["ready"] == json!(true)) && !app.is_empty();
    let previous = pod
        .status
        .as_ref()
        .and_then(|s| s.conditions.clone())
        .unwrap_or_default();
    let stamp = format_rfc3339(unix(now));
    let condition = |kind: &str, ok: bool, reason: Option<&str>| {
        let status = if ok { "True" } else { "False" };
        let since = previous
            .iter()
            .find(|c| c.type_ == kind && c.status == status)
            .and_then(|c| c.last_transition_time.as_ref())
            .and_then(|t| serde_json::to_value(t).ok())
            .unwrap_or_else(|| json!(stamp));
        let mut c = json!({"type": kind, "status": status, "lastProbeTime": null, "lastTransitionTime": since});
        if let (false, Some(reason)) = (ok, reason) {
            c["reason"] = json!(reason);
        }
        c
    };
    let completed = matches!(phase, "Succeeded" | "Failed");
    let ready_reason = if completed {
        "PodCompleted"
    } else {
        "ContainersNotReady"
    };
    let conditions = vec![
        condition("PodReadyToStartContainers", sandbox.is_some(), None),
        condition(
            "Initialized",
            initialized || completed,
            Some("ContainersNotInitialized"),
        ),
        condition("Ready", containers_ready && !completed, Some(ready_reason)),
        condition(
            "ContainersReady",
            containers_ready && !completed,
            Some(ready_reason),
        ),
        condition("PodScheduled", true, None),
    ];
    let start = pod
        .status
        .as_ref()
        .and_then(|s| s.start_time.as_ref())
        .and_then(|t| serde_json::to_value(t).ok())
        .unwrap_or_else(|| json!(stamp));
    let mut status = json!({
        "phase": phase,
        "conditions": conditions,
        "containerStatuses": app,
        "startTime": start,
        "qosClass": qos_class(&spec.containers),
    });
    if !init.is_empty() {
        status["initContainerStatuses"] = json!(init);
    }
    if !ephemeral.is_empty() {
        status["ephemeralContainerStatuses"] = json!(ephemeral);
    }
    if !extra.host_ip.is_empty() {
        status["hostIP"] = json!(extra.host_ip);
        status["hostIPs"] = json!([{"ip": extra.host_ip}]);
    }
    if !extra.pod_ip.is_empty() {
        status["podIP"] = json!(extra.pod_ip);
        status["podIPs"] = json!([{"ip": extra.pod_ip}]);
    }
    status
}

/// The kubelet's phase rules.
fn phase(desired: &Desired, observed: &Observed, initialized: bool) -> &'static str {
    let failed_init = desired.init.iter().any(|n| {
        matches!(plan::latest(observed, n, None).map(|c| &c.state), Some(State::Exited { code, .. }) if *code != 0)
    });
    if failed_init && desired.restart == RestartPolicy::Never {
        return "Failed";
    }
    if !initialized {
        return "Pending";
    }
    // Counted as the kubelet's `getPhase` counts: a container waiting to start again after an
    // exit is stopped, not waiting.
    let (mut running, mut waiting, mut stopped, mut succeeded, mut unknown) = (0, 0, 0, 0, 0);
    for name in &desired.containers {
        match plan::latest(observed, name, None).map(|c| &c.state) {
            Some(State::Running { .. }) => running += 1,
            Some(State::Exited { code, .. }) => {
                stopped += 1;
                if *code == 0 {
                    succeeded += 1;
                }
            }
            Some(State::Unknown) => unknown += 1,
            Some(State::Created) | None => waiting += 1,
        }
    }
    if desired.containers.is_empty() || waiting > 0 {
        // One or more containers has not been started.
        return "Pending";
    }
    if unknown > 0 {
        return "Pending";
    }
    if running > 0 {
        return "Running";
    }
    match desired.restart {
        // All stopped: restarting.
        RestartPolicy::Always => "Running",
        _ if succeeded == stopped => "Succeeded",
        RestartPolicy::Never => "Failed",
        RestartPolicy::OnFailure => "Running",
    }
}

/// The status of a container of a pod being deleted: a container already gone from the
/// runtime is not being created, it has terminated; its last reported termination stays,
/// else it is reported as the kubelet does a container it can no longer find.
fn terminating(mut status: Value, pod: &Pod) -> Value {
    if status["state"]["waiting"]["reason"] != "ContainerCreating" {
        return status;
    }
    let name = status["name"].as_str().unwrap_or_default().to_owned();
    let reported = pod.status.as_ref().and_then(|s| {
        let all = s.container_statuses.iter().flatten();
        let all = all.chain(s.init_container_statuses.iter().flatten());
        all.filter(|c| c.name == name).find_map(|c| c.state.clone())
    });
    let terminated = reported
        .and_then(|state| state.terminated)
        .and_then(|t| serde_json::to_value(t).ok())
        .unwrap_or_else(|| {
            json!({"exitCode": 137, "reason": "ContainerStatusUnknown",
                   "message": "The container could not be located when the pod was deleted."})
        });
    status["state"] = json!({"terminated": terminated});
    status["ready"] = json!(false);
    status["started"] = json!(false);
    status
}

fn container_status(c: &Spec, observed: &Observed, sandbox: Option<&str>, extra: &Extra) -> Value {
    let latest = plan::latest(observed, &c.name, None);
    let previous = latest.and_then(|l| {
        observed
            .containers
            .iter()
            .filter(|o| o.name == c.name && o.attempt < l.attempt)
            .max_by_key(|o| o.attempt)
    });
    let running = matches!(latest.map(|l| &l.state), Some(State::Running { .. }));
    let waiting = extra.waiting.get(&c.name).filter(|_| !running);
    let state = match (latest, waiting) {
        (_, Some((reason, message))) => json!({"waiting": {"reason": reason, "message": message}}),
        (Some(l), None) => state_of(l),
        (None, None) => json!({"waiting": {"reason": "ContainerCreating"}}),
    };
    // While a container waits to start again, the exit it waits after is its last state.
    let last = match latest {
        Some(l) if waiting.is_some() && matches!(l.state, State::Exited { .. }) => state_of(l),
        _ => previous.map(state_of).unwrap_or_else(|| json!({})),
    };
    // A container running outside the pod's current sandbox is being stopped; one whose
    // startup probe has not passed is not started; one whose readiness probe does not pass is
    // not ready.
    let id = latest.map_or("", |l| l.id.as_str());
    let started = running && !extra.not_started.contains(id);
    let ready = started
        && latest.is_some_and(|l| Some(l.sandbox.as_str()) == sandbox)
        && !extra.unready.contains(id);
    let mut s = json!({
        "name": c.name,
        "image": c.image.clone().unwrap_or_default(),
        "imageID": "",
        "state": state,
        "lastState": last,
        "ready": ready,
        "started": started,
        "restartCount": latest.map_or(0, |l| l.attempt),
    });
    if let Some(l) = latest {
        s["containerID"] = json!(format!("containerd://{}", l.id));
        if let Some(image) = extra.image_ids.get(&l.id) {
            s["imageID"] = json!(image);
        }
    }
    s
}

fn state_of(c: &Container) -> Value {
    match &c.state {
        State::Running { started } => {
            json!({"running": {"startedAt": format_rfc3339(unix(*started))}})
        }
        State::Exited {
            code,
            started,
            finished,
            reason,
        } => json!({"terminated": {
            "exitCode": code,
            "reason": if reason.is_empty() { if *code == 0 { "Completed" } else { "Error" } } else { reason.as_str() },
            "startedAt": format_rfc3339(unix(*started)),
            "finishedAt": format_rfc3339(unix(*finished)),
            "containerID": format!("containerd://{}", c.id),
        }}),
        State::Created => json!({"waiting": {"reason": "ContainerCreating"}}),
        State::Unknown => json!({"waiting": {"reason": "ContainerStatusUnknown"}}),
    }
}

/// The pod's QoS class from its containers' requests and limits.
pub fn qos_class(containers: &[Spec]) -> &'static str {
    let mut any = false;
    let mut guaranteed = true;
    for c in containers {
        let r = c.resources.clone().unwrap_or_default();
        let (req, lim) = (r.requests.unwrap_or_default(), r.limits.unwrap_or_default());
        any |= !req.is_empty() || !lim.is_empty();
        for res in ["cpu", "memory"] {
            let limit = lim.get(res);
            let request = req.get(res).or(limit);
            if limit.is_none() || request != limit {
                guaranteed = false;
            }
        }
    }
    match (any, guaranteed) {
        (false, _) => "BestEffort",
        (true, true) => "Guaranteed",
        (true, false) => "Burstable",
    }
}

/// Seconds since the epoch.
pub fn unix(t: SystemTime) -> i64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::plan::Sandbox;

    fn t(s: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000 + s)
    }

    fn pod(restart: &str) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "ns", "uid": "u"},
            "spec": {"restartPolicy": restart, "containers": [{"name": "app", "image": "busybox"}]},
        }))
        .unwrap()
    }

    fn observed(state: State, attempt: u32) -> Observed {
        Observed {
            sandboxes: vec![Sandbox {
                id: "s".into(),
                attempt: 0,
                ready: true,
            }],
            containers: vec![Container {
                id: "c".into(),
                name: "app".into(),
                attempt,
                sandbox: "s".into(),
                state,
            }],
        }
    }

    #[test]
    fn a_running_container_makes_a_ready_running_pod() {
        let p = pod("Always");
        let d = crate::spec::desired(&p, true);
        let extra = Extra {
            pod_ip: "10.1.0.2".into(),
            host_ip: "192.0.2.1".into(),
            ..Extra::default()
        };
        let s = pod_status(
            &p,
            &d,
            &observed(State::Running { started: t(1) }, 0),
            &extra,
            t(2),
        );
        assert_eq!(s["phase"], "Running");
        assert_eq!(s["podIP"], "10.1.0.2");
        assert_eq!(s["qosClass"], "BestEffort");
        let ready = s["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == "Ready")
            .unwrap();
        assert_eq!(ready["status"], "True");
        let cs = &s["containerStatuses"][0];
        assert_eq!(cs["ready"], true);
        assert_eq!(cs["containerID"], "containerd://c");
        assert!(cs["state"]["running"]["startedAt"].is_string());
    }

    #[test]
    fn a_pod_being_deleted_keeps_its_phase_and_shows_its_containers_terminated() {
        let mut p = pod("Always");
        let d = crate::spec::desired(&p, true);
        let running = pod_status(
            &p,
            &d,
            &observed(State::Running { started: t(1) }, 0),
            &Extra::default(),
            t(2),
        );
        p.status = Some(serde_json::from_value(running).unwrap());
        p.metadata.deletion_timestamp =
            serde_json::from_value(json!("2026-01-01T00:00:00Z")).unwrap();
        // The container is stopped and removed: nothing is observed any more.
        let gone = Observed {
            sandboxes: vec![],
            containers: vec![],
        };
        let s = pod_status(&p, &d, &gone, &Extra::default(), t(3));
        assert_eq!(s["phase"], "Running", "never back to Pending");
        let state = &s["containerStatuses"][0]["state"];
        assert_eq!(
            state["terminated"]["reason"], "ContainerStatusUnknown",
            "{state}"
        );
        assert!(
            state.get("waiting").is_none(),
            "not ContainerCreating: {state}"
        );
        // A termination reported before stays.
        let stopped = State::Exited {
            code: 143,
            started: t(1),
            finished: t(3),
            reason: String::new(),
        };
        let exited = pod_status(&p, &d, &observed(stopped, 0), &Extra::default(), t(3));
        p.status = Some(serde_json::from_value(exited).unwrap());
        let s = pod_status(&p, &d, &gone, &Extra::default(), t(4));
        assert_eq!(
            s["containerStatuses"][0]["state"]["terminated"]["exitCode"],
            143
        );
        // A pod not being deleted with nothing observed is still being created.
        let mut fresh = pod("Always");
        fresh.status = p.status.clone();
        let s = pod_status(&fresh, &d, &gone, &Extra::default(), t(4));
        assert_eq!(
            s["containerStatuses"][0]["state"]["waiting"]["reason"],
            "ContainerCreating"
        );
    }

    #[test]
    fn probes_decide_started_and_ready() {
        let p = pod("Always");
        let d = crate::spec::desired(&p, true);
        let o = observed(State::Running { started: t(1) }, 0);
        let condition = |s: &Value, kind: &str| {
            s["conditions"]
                .as_array()
                .unwrap()
                .iter()
                .find(|c| c["type"] == kind)
                .unwrap()["status"]
                .clone()
        };
        let unready = Extra {
            unready: ["c".to_string()].into(),
            ..Extra::default()
        };
        let s = pod_status(&p, &d, &o, &unready, t(2));
        let cs = &s["containerStatuses"][0];
        assert_eq!(
            (cs["started"].clone(), cs["ready"].clone()),
            (json!(true), json!(false))
        );
        assert_eq!(condition(&s, "Ready"), "False");
        assert_eq!(condition(&s, "ContainersReady"), "False");
        assert_eq!(s["phase"], "Running", "an unready pod still runs");
        let starting = Extra {
            not_started: ["c".to_string()].into(),
            ..Extra::default()
        };
        let s = pod_status(&p, &d, &o, &starting, t(2));
        let cs = &s["containerStatuses"][0];
        assert_eq!(
            (cs["started"].clone(), cs["ready"].clone()),
            (json!(false), json!(false))
        );
        let s = pod_status(&p, &d, &o, &Extra::default(), t(2));
        assert_eq!(condition(&s, "Ready"), "True");
    }

    #[test]
    fn phases_follow_the_restart_policy() {
        let exited = |code| State::Exited {
            code,
            started: t(0),
            finished: t(1),
            reason: String::new(),
        };
        let phase_of = |policy, code| {
            let p = pod(policy);
            let d = crate::spec::desired(&p, true);
            pod_status(&p, &d, &observed(exited(code), 0), &Extra::default(), t(2))["phase"].clone()
        };
        assert_eq!(phase_of("Never", 0), "Succeeded");
        assert_eq!(phase_of("Never", 1), "Failed");
        assert_eq!(phase_of("OnFailure", 1), "Running");
        assert_eq!(phase_of("OnFailure", 0), "Succeeded");
        assert_eq!(phase_of("Always", 0), "Running");
    }

    #[test]
    fn a_pod_is_pending_until_every_container_started() {
        let p: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "ns", "uid": "u"},
            "spec": {"containers": [{"name": "app", "image": "i"}, {"name": "side", "image": "i"}]},
        }))
        .unwrap();
        let d = crate::spec::desired(&p, true);
        let mut o = observed(State::Running { started: t(1) }, 0);
        let phase = |o: &Observed| pod_status(&p, &d, o, &Extra::default(), t(2))["phase"].clone();
        assert_eq!(phase(&o), "Pending", "the second container has not started");
        o.containers.push(Container {
            id: "c2".into(),
            name: "side".into(),
            attempt: 0,
            sandbox: "s".into(),
            state: State::Exited {
                code: 1,
                started: t(0),
                finished: t(1),
                reason: String::new(),
            },
        });
        assert_eq!(phase(&o), "Running", "one runs, the other restarts");
    }

    #[test]
    fn a_crash_looping_container_reports_its_back_off_and_last_exit() {
        let p = pod("Always");
        let d = crate::spec::desired(&p, true);
        let mut extra = Extra::default();
        extra.waiting.insert(
            "app".into(),
            (
                "CrashLoopBackOff".into(),
                "back-off 10s restarting failed container".into(),
            ),
        );
        let exited = State::Exited {
            code: 1,
            started: t(0),
            finished: t(1),
            reason: "Error".into(),
        };
        let s = pod_status(&p, &d, &observed(exited, 2), &extra, t(3));
        let cs = &s["containerStatuses"][0];
        assert_eq!(cs["state"]["waiting"]["reason"], "CrashLoopBackOff");
        assert_eq!(cs["lastState"]["terminated"]["exitCode"], 1);
        assert_eq!(cs["restartCount"], 2);
        assert_eq!(cs["ready"], false);
    }

    #[test]
    fn qos_classes() {
        let c = |r: Value| -> Spec {
            serde_json::from_value(json!({"name": "c", "resources": r})).unwrap()
        };
        assert_eq!(qos_class(&[c(json!({}))]), "BestEffort");
        assert_eq!(
            qos_class(&[c(json!({"limits": {"cpu": "1", "memory": "1Gi"}}))]),
            "Guaranteed"
        );
        assert_eq!(
            qos_class(&[c(json!({"requests": {"cpu": "1"}}))]),
            "Burstable"
        );
    }
}
