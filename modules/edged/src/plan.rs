//! What should run against what runs: the pure half of a pod's sync (the kubelet's
//! `computePodActions`). [`plan`] takes the pod as the store holds it ([`Desired`]) and what the
//! runtime reports for it ([`Observed`]) and returns the next [`Action`]s; the worker applies
//! them and plans again. Nothing here talks to containerd or reads a clock: `now` is an argument,
//! and every decision is computed again from the runtime's state, so an edgecore restarted at
//! any point (or a node rebooted, containerd restarted) picks up exactly where it left off.

use std::collections::BTreeSet;
use std::time::{Duration, SystemTime};

/// Restart policy of a pod.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RestartPolicy {
    /// Restart every exited container (the default).
    Always,
    /// Restart containers that failed.
    OnFailure,
    /// Never restart.
    Never,
}

/// The pod as it should be.
#[derive(Clone, Debug)]
pub struct Desired {
    /// The pod should run: it is in the store, not being deleted, not finished.
    pub run: bool,
    /// Init containers, in order.
    pub init: Vec<String>,
    /// App containers.
    pub containers: Vec<String>,
    /// Ephemeral containers (`kubectl debug`): each started once while the pod runs, never
    /// restarted.
    pub ephemeral: Vec<String>,
    /// Restart policy.
    pub restart: RestartPolicy,
    /// Running containers to kill (their liveness or startup probe failed), by runtime id;
    /// the restart policy decides whether they start again.
    pub kill: BTreeSet<String>,
}

/// A sandbox the runtime holds for the pod.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sandbox {
    /// Runtime id.
    pub id: String,
    /// Sandbox attempt (a new sandbox for the same pod gets the next one).
    pub attempt: u32,
    /// Ready (running, network set up) or not (stopped, or its host rebooted).
    pub ready: bool,
}

/// A container's state, as CRI reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum State {
    /// Created, never started.
    Created,
    /// Running since `started`.
    Running {
        /// Start time.
        started: SystemTime,
    },
    /// Ran and ended.
    Exited {
        /// Exit code.
        code: i32,
        /// Start time.
        started: SystemTime,
        /// End time.
        finished: SystemTime,
        /// The runtime's reason (`Completed`, `Error`, `OOMKilled`).
        reason: String,
    },
    /// The runtime does not know.
    Unknown,
}

/// A container the runtime holds for the pod.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Container {
    /// Runtime id.
    pub id: String,
    /// Container name in the pod spec.
    pub name: String,
    /// Attempt: how many times a container of this name was started before in this pod.
    pub attempt: u32,
    /// The sandbox it runs in.
    pub sandbox: String,
    /// Its state.
    pub state: State,
}

/// What the runtime holds for a pod.
#[derive(Clone, Debug, Default)]
pub struct Observed {
    /// Its sandboxes, any order.
    pub sandboxes: Vec<Sandbox>,
    /// Its containers, any order.
    pub containers: Vec<Container>,
}

/// One step of a sync.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Stop a running container, with the pod's grace period.
    StopContainer {
        /// Runtime id.
        id: String,
        /// Container name.
        name: String,
    },
    /// Remove a container that no longer runs.
    RemoveContainer {
        /// Runtime id.
        id: String,
    },
    /// Stop a sandbox (its containers are stopped first).
    StopSandbox {
        /// Runtime id.
        id: String,
    },
    /// Remove a stopped sandbox whose containers are gone.
    RemoveSandbox {
        /// Runtime id.
        id: String,
    },
    /// Run a new sandbox.
    RunSandbox {
        /// Its attempt.
        attempt: u32,
    },
    /// Create and start a container in sandbox `sandbox`.
    StartContainer {
        /// Container name.
        name: String,
        /// Init container or app container.
        init: bool,
        /// Its attempt (the restart count it reports).
        attempt: u32,
        /// The sandbox.
        sandbox: String,
    },
}

/// The plan of one sync.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    /// What to do now, in order.
    pub actions: Vec<Action>,
    /// Containers waiting out a crash-loop back-off, with the time they may start again.
    pub backoff: Vec<(String, SystemTime, Duration)>,
}

/// The first back-off after a crash; it doubles with each restart.
pub const BACKOFF_INITIAL: Duration = Duration::from_secs(10);
/// The longest back-off.
pub const BACKOFF_MAX: Duration = Duration::from_secs(300);
/// A container that ran this long before exiting starts again at once.
pub const BACKOFF_RESET: Duration = Duration::from_secs(600);

/// The next actions that bring the runtime to `desired`.
pub fn plan(desired: &Desired, observed: &Observed, now: SystemTime) -> Plan {
    let mut plan = Plan::default();
    let current = current_sandbox(observed).filter(|_| desired.run);
    tidy(desired, observed, current.map(|s| s.id.as_str()), &mut plan);
    if !desired.run {
        return plan;
    }
    let Some(sandbox) = current else {
        // No ready sandbox: the pod starts over in a new one (a first start, or the sandbox
        // died with its host or runtime). A finished pod keeps its exited containers (their
        // exit codes are its status) until it is deleted.
        if !finished(desired, observed) {
            let attempt = observed
                .sandboxes
                .iter()
                .map(|s| s.attempt + 1)
                .max()
                .unwrap_or(0);
            plan.actions.push(Action::RunSandbox { attempt });
        }
        return plan;
    };
    if !init_done(desired, observed, sandbox, now, &mut plan) {
        return plan;
    }
    for name in &desired.containers {
        start_if_due(desired, observed, sandbox, name, false, now, &mut plan);
    }
    for name in &desired.ephemeral {
        if latest(observed, name, None).is_none() {
            plan.actions.push(Action::StartContainer {
                name: name.clone(),
                init: false,
                attempt: 0,
                sandbox: sandbox.id.clone(),
            });
        }
    }
    if finished(desired, observed) {
        plan.actions.push(Action::StopSandbox {
            id: sandbox.id.clone(),
        });
    }
    plan
}

/// The back-off before attempt `attempt` may start, the previous one having run from
/// `started` to `finished`.
pub fn backoff(attempt: u32, started: SystemTime, finished: SystemTime) -> Duration {
    let ran = finished.duration_since(started).unwrap_or_default();
    if attempt <= 1 || ran >= BACKOFF_RESET {
        return Duration::ZERO;
    }
    let doublings = (attempt - 2).min(16);
    (BACKOFF_INITIAL * 2u32.pow(doublings)).min(BACKOFF_MAX)
}

/// The newest container named `name` in sandbox `sandbox` (or in any sandbox when `None`).
pub fn latest<'a>(
    observed: &'a Observed,
    name: &str,
    sandbox: Option<&str>,
) -> Option<&'a Container> {
    observed
        .containers
        .iter()
        .filter(|c| c.name == name && sandbox.is_none_or(|s| c.sandbox == s))
        .max_by_key(|c| c.attempt)
}

/// The newest ready sandbox.
pub fn current_sandbox(observed: &Observed) -> Option<&Sandbox> {
    observed
        .sandboxes
        .iter()
        .filter(|s| s.ready)
        .max_by_key(|s| s.attempt)
}

/// Whether every container ended and none will start again.
pub fn finished(desired: &Desired, observed: &Observed) -> bool {
    if desired.restart == RestartPolicy::Always || desired.containers.is_empty() {
        return false;
    }
    let failed_init = desired.init.iter().any(|n| {
        matches!(latest(observed, n, None), Some(Container { state: State::Exited { code, .. }, .. }) if *code != 0)
    });
    if failed_init && desired.restart == RestartPolicy::Never {
        return true;
    }
    desired
        .containers
        .iter()
        .all(|n| match latest(observed, n, None).map(|c| &c.state) {
            Some(State::Exited { code, .. }) => {
                *code == 0 || desired.restart == RestartPolicy::Never
            }
            _ => false,
        })
}

/// Stops what runs outside sandbox `keep` (everything when `None`) and removes what is done
/// with: every container when the pod should not run, else containers a newer attempt
/// replaced twice over (the one before the newest stays, wherever it ran: it carries the
/// restart count and `lastState` across a sandbox replacement) or that the spec no longer
/// names; and stopped sandboxes left with no container.
fn tidy(desired: &Desired, observed: &Observed, keep: Option<&str>, plan: &mut Plan) {
    let wanted = |name: &str| {
        desired
            .init
            .iter()
            .chain(&desired.containers)
            .chain(&desired.ephemeral)
            .any(|n| n == name)
    };
    let mut removed = Vec::new();
    for c in &observed.containers {
        let outside = keep != Some(c.sandbox.as_str());
        let replaced = latest(observed, &c.name, None).is_some_and(|l| l.attempt >= c.attempt + 2);
        match c.state {
            State::Running { .. } | State::Unknown if outside => {
                plan.actions.push(Action::StopContainer {
                    id: c.id.clone(),
                    name: c.name.clone(),
                })
            }
            State::Running { .. } | State::Unknown => {}
            State::Created if outside => removed.push(c),
            State::Created | State::Exited { .. } => {
                if !desired.run || replaced || !wanted(&c.name) {
                    removed.push(c);
                }
            }
        }
    }
    for c in &removed {
        plan.actions
            .push(Action::RemoveContainer { id: c.id.clone() });
    }
    for s in observed
        .sandboxes
        .iter()
        .filter(|s| keep != Some(s.id.as_str()))
    {
        let emptied = observed
            .containers
            .iter()
            .filter(|c| c.sandbox == s.id)
            .all(|c| removed.iter().any(|r| r.id == c.id));
        if s.ready {
            plan.actions.push(Action::StopSandbox { id: s.id.clone() });
        } else if emptied {
            plan.actions
                .push(Action::RemoveSandbox { id: s.id.clone() });
        }
    }
}

/// Runs the init containers in order; true once all of them succeeded.
fn init_done(
    desired: &Desired,
    observed: &Observed,
    sandbox: &Sandbox,
    now: SystemTime,
    plan: &mut Plan,
) -> bool {
    for name in &desired.init {
        match latest(observed, name, Some(&sandbox.id)).map(|c| &c.state) {
            Some(State::Exited { code: 0, .. }) => continue,
            None | Some(State::Exited { .. }) | Some(State::Created) => {
                start_if_due(desired, observed, sandbox, name, true, now, plan);
                return false;
            }
            Some(State::Running { .. } | State::Unknown) => return false,
        }
    }
    true
}

/// Starts container `name` if it has none in the sandbox, or if its last one exited, the
/// policy restarts it and its back-off is over.
fn start_if_due(
    desired: &Desired,
    observed: &Observed,
    sandbox: &Sandbox,
    name: &str,
    init: bool,
    now: SystemTime,
    plan: &mut Plan,
) {
    let here = latest(observed, name, Some(&sandbox.id));
    let next_attempt = latest(observed, name, None).map_or(0, |c| c.attempt + 1);
    let start = |plan: &mut Plan| {
        plan.actions.push(Action::StartContainer {
            name: name.into(),
            init,
            attempt: next_attempt,
            sandbox: sandbox.id.clone(),
        })
    };
    let Some(c) = here else {
        return start(plan);
    };
    match &c.state {
        State::Running { .. } if desired.kill.contains(&c.id) => {
            plan.actions.push(Action::StopContainer {
                id: c.id.clone(),
                name: c.name.clone(),
            })
        }
        State::Running { .. } | State::Unknown => {}
        State::Created => plan
            .actions
            .push(Action::RemoveContainer { id: c.id.clone() }),
        State::Exited {
            code,
            started,
            finished,
            ..
        } => {
            let restart = match desired.restart {
                RestartPolicy::Always => !init || *code != 0,
                RestartPolicy::OnFailure => *code != 0,
                RestartPolicy::Never => false,
            };
            if !restart {
                return;
            }
            let wait = backoff(next_attempt, *started, *finished);
            let due = *finished + wait;
            if now >= due {
                start(plan);
            } else {
                plan.backoff.push((name.into(), due, wait));
            }
        }
    }
}

#[cfg(test)]
mod tests;
