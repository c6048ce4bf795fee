use std::collections::BTreeSet;
use std::time::{Duration, SystemTime};

use super::*;

fn t(secs: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000 + secs)
}

fn desired(restart: RestartPolicy) -> Desired {
    Desired {
        run: true,
        init: vec![],
        containers: vec!["app".into()],
        ephemeral: vec![],
        restart,
        kill: BTreeSet::new(),
    }
}

fn sandbox(id: &str, attempt: u32, ready: bool) -> Sandbox {
    Sandbox {
        id: id.into(),
        attempt,
        ready,
    }
}

fn running(id: &str, name: &str, attempt: u32, sandbox: &str) -> Container {
    Container {
        id: id.into(),
        name: name.into(),
        attempt,
        sandbox: sandbox.into(),
        state: State::Running { started: t(0) },
    }
}

fn exited(id: &str, name: &str, attempt: u32, code: i32, ran: (u64, u64)) -> Container {
    Container {
        id: id.into(),
        name: name.into(),
        attempt,
        sandbox: "s1".into(),
        state: State::Exited {
            code,
            started: t(ran.0),
            finished: t(ran.1),
            reason: "Error".into(),
        },
    }
}

fn start(name: &str, init: bool, attempt: u32) -> Action {
    Action::StartContainer {
        name: name.into(),
        init,
        attempt,
        sandbox: "s1".into(),
    }
}

#[test]
fn a_new_pod_gets_a_sandbox_then_its_containers() {
    let d = desired(RestartPolicy::Always);
    let first = plan(&d, &Observed::default(), t(0));
    assert_eq!(first.actions, [Action::RunSandbox { attempt: 0 }]);
    let observed = Observed {
        sandboxes: vec![sandbox("s1", 0, true)],
        containers: vec![],
    };
    assert_eq!(plan(&d, &observed, t(1)).actions, [start("app", false, 0)]);
}

#[test]
fn a_running_pod_needs_nothing() {
    let observed = Observed {
        sandboxes: vec![sandbox("s1", 0, true)],
        containers: vec![running("c1", "app", 0, "s1")],
    };
    let p = plan(&desired(RestartPolicy::Always), &observed, t(5));
    assert_eq!(p, Plan::default());
}

#[test]
fn init_containers_run_one_at_a_time_in_order_before_the_app() {
    let mut d = desired(RestartPolicy::Always);
    d.init = vec!["one".into(), "two".into()];
    let mut observed = Observed {
        sandboxes: vec![sandbox("s1", 0, true)],
        containers: vec![],
    };
    assert_eq!(plan(&d, &observed, t(0)).actions, [start("one", true, 0)]);
    observed.containers.push(running("i1", "one", 0, "s1"));
    assert!(plan(&d, &observed, t(1)).actions.is_empty());
    observed.containers[0] = exited("i1", "one", 0, 0, (0, 1));
    assert_eq!(plan(&d, &observed, t(2)).actions, [start("two", true, 0)]);
    observed.containers.push(exited("i2", "two", 0, 0, (2, 3)));
    assert_eq!(plan(&d, &observed, t(4)).actions, [start("app", false, 0)]);
}

#[test]
fn a_crashing_container_restarts_with_a_doubling_back_off() {
    let d = desired(RestartPolicy::Always);
    let observed = |attempt, ran| Observed {
        sandboxes: vec![sandbox("s1", 0, true)],
        containers: vec![exited("c", "app", attempt, 1, ran)],
    };
    // The first restart is immediate.
    assert_eq!(
        plan(&d, &observed(0, (0, 1)), t(1)).actions,
        [start("app", false, 1)]
    );
    // The second waits 10 s after the exit, the third 20 s.
    let p = plan(&d, &observed(1, (0, 1)), t(5));
    assert!(p.actions.is_empty());
    assert_eq!(p.backoff, [("app".into(), t(11), Duration::from_secs(10))]);
    assert_eq!(
        plan(&d, &observed(1, (0, 1)), t(11)).actions,
        [start("app", false, 2)]
    );
    assert_eq!(
        plan(&d, &observed(2, (0, 1)), t(5)).backoff[0].2,
        Duration::from_secs(20)
    );
    // It never waits more than five minutes, and a container that ran ten minutes starts at once.
    assert_eq!(backoff(40, t(0), t(1)), BACKOFF_MAX);
    assert_eq!(backoff(5, t(0), t(600)), Duration::ZERO);
}

#[test]
fn on_failure_restarts_failures_only_and_never_restarts_nothing() {
    let observed = |code| Observed {
        sandboxes: vec![sandbox("s1", 0, true)],
        containers: vec![exited("c", "app", 0, code, (0, 1))],
    };
    let on_failure = desired(RestartPolicy::OnFailure);
    assert_eq!(
        plan(&on_failure, &observed(2), t(1)).actions,
        [start("app", false, 1)]
    );
    // Succeeded: nothing restarts, and the finished pod's sandbox is stopped.
    assert_eq!(
        plan(&on_failure, &observed(0), t(1)).actions,
        [Action::StopSandbox { id: "s1".into() }]
    );
    let never = desired(RestartPolicy::Never);
    assert_eq!(
        plan(&never, &observed(2), t(1)).actions,
        [Action::StopSandbox { id: "s1".into() }]
    );
    assert!(finished(&never, &observed(2)));
    // Once its sandbox is stopped, a finished pod is left as it is: nothing is removed or rerun.
    let mut stopped = observed(2);
    stopped.sandboxes[0].ready = false;
    assert_eq!(plan(&never, &stopped, t(2)), Plan::default());
}

#[test]
fn a_dead_sandbox_is_replaced_and_restart_counts_go_on() {
    // The node rebooted: the old sandbox is not ready and its container exited. Each plan is
    // applied before the next, as the worker does.
    let mut observed = Observed {
        sandboxes: vec![sandbox("s1", 0, false)],
        containers: vec![exited("c3", "app", 3, 255, (0, 100))],
    };
    let d = desired(RestartPolicy::Always);
    // The old container stays: it carries the restart count and the last exit.
    let p = plan(&d, &observed, t(200));
    assert_eq!(p.actions, [Action::RunSandbox { attempt: 1 }]);
    observed.sandboxes.push(sandbox("s2", 1, true));
    let p = plan(&d, &observed, t(201));
    let start4 = Action::StartContainer {
        name: "app".into(),
        init: false,
        attempt: 4,
        sandbox: "s2".into(),
    };
    assert_eq!(p.actions, [start4]);
    observed.containers.push(running("c4", "app", 4, "s2"));
    assert_eq!(plan(&d, &observed, t(202)), Plan::default());
    // Once a newer attempt replaced it twice over, it goes, and its emptied sandbox with it.
    observed.containers[1] = exited("c4", "app", 4, 1, (201, 202));
    observed.containers[1].sandbox = "s2".into();
    observed.containers.push(running("c5", "app", 5, "s2"));
    assert_eq!(
        plan(&d, &observed, t(203)).actions,
        [
            Action::RemoveContainer { id: "c3".into() },
            Action::RemoveSandbox { id: "s1".into() },
        ]
    );
}

#[test]
fn a_pod_that_should_not_run_is_stopped_then_removed() {
    let mut d = desired(RestartPolicy::Always);
    d.run = false;
    let observed = Observed {
        sandboxes: vec![sandbox("s1", 0, true)],
        containers: vec![running("c1", "app", 0, "s1")],
    };
    assert_eq!(
        plan(&d, &observed, t(0)).actions,
        [
            Action::StopContainer {
                id: "c1".into(),
                name: "app".into()
            },
            Action::StopSandbox { id: "s1".into() },
        ]
    );
    let stopped = Observed {
        sandboxes: vec![sandbox("s1", 0, false)],
        containers: vec![exited("c1", "app", 0, 137, (0, 1))],
    };
    assert_eq!(
        plan(&d, &stopped, t(1)).actions,
        [
            Action::RemoveContainer { id: "c1".into() },
            Action::RemoveSandbox { id: "s1".into() },
        ]
    );
}

#[test]
fn older_attempts_are_removed_but_the_previous_one_is_kept() {
    let observed = Observed {
        sandboxes: vec![sandbox("s1", 0, true)],
        containers: vec![
            exited("a0", "app", 0, 1, (0, 1)),
            exited("a1", "app", 1, 1, (2, 3)),
            running("a2", "app", 2, "s1"),
        ],
    };
    let p = plan(&desired(RestartPolicy::Always), &observed, t(10));
    assert_eq!(p.actions, [Action::RemoveContainer { id: "a0".into() }]);
}

#[test]
fn a_container_failing_its_liveness_probe_is_killed_and_the_policy_decides_the_rest() {
    let mut d = desired(RestartPolicy::Always);
    d.kill.insert("c1".into());
    let observed = Observed {
        sandboxes: vec![sandbox("s1", 0, true)],
        containers: vec![running("c1", "app", 0, "s1")],
    };
    let stop = Action::StopContainer {
        id: "c1".into(),
        name: "app".into(),
    };
    assert_eq!(
        plan(&d, &observed, t(5)).actions,
        std::slice::from_ref(&stop)
    );
    // Killed (SIGTERM): it starts again at once the first time, as any exit.
    let killed = Observed {
        containers: vec![exited("c1", "app", 0, 143, (0, 6))],
        ..observed.clone()
    };
    assert_eq!(plan(&d, &killed, t(6)).actions, [start("app", false, 1)]);
    // Never: killed, and not started again.
    d.restart = RestartPolicy::Never;
    assert_eq!(plan(&d, &observed, t(5)).actions, [stop]);
    assert_eq!(
        plan(&d, &killed, t(6)).actions,
        [Action::StopSandbox { id: "s1".into() }],
        "the pod is finished"
    );
    // A healthy container is left alone.
    d.kill.clear();
    assert!(plan(&d, &observed, t(5)).actions.is_empty());
}

#[test]
fn an_ephemeral_container_starts_once_and_stays_after_it_exits() {
    let mut d = desired(RestartPolicy::Always);
    d.ephemeral = vec!["debug".into()];
    let mut observed = Observed {
        sandboxes: vec![sandbox("s1", 0, true)],
        containers: vec![running("c1", "app", 0, "s1")],
    };
    assert_eq!(
        plan(&d, &observed, t(1)).actions,
        [start("debug", false, 0)]
    );
    observed
        .containers
        .push(exited("c2", "debug", 0, 1, (1, 2)));
    assert_eq!(plan(&d, &observed, t(3_600)), Plan::default());
}
