//! What the runtime holds, read through CRI into the planner's terms. Only sandboxes and
//! containers carrying edged's label are ever seen, so nothing edged did not create is touched.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, SystemTime};

use cri::{Runtime, api};

use crate::error::EdgedError;
use crate::plan::{Container, Observed, Sandbox, State};
use crate::spec::{MANAGED, POD_NAME, POD_NAMESPACE, POD_UID, PodId};

/// What the runtime holds for one pod, with what the status needs besides.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    /// Sandboxes and containers.
    pub observed: Observed,
    /// The current sandbox's IP.
    pub pod_ip: String,
    /// Image reference per container id.
    pub image_ids: BTreeMap<String, String>,
}

/// What the runtime holds of edged's for each pod, by pod uid.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Held {
    /// The pod's identity, from the labels of its sandboxes and containers.
    pub id: Option<PodId>,
    /// `(id, state)` of its sandboxes and containers, sorted: it changes when anything of the
    /// pod started, stopped, appeared or went (the relist compares it).
    pub fingerprint: Vec<(String, i32)>,
}

/// Every pod edged has sandboxes or containers for (the relist).
pub async fn relist(cri: &dyn Runtime) -> Result<HashMap<String, Held>, EdgedError> {
    let (sandboxes, containers) = list(cri, None).await?;
    let mut pods: HashMap<String, Held> = HashMap::new();
    let sandboxes = sandboxes.into_iter().map(|s| (s.labels, s.id, s.state));
    let containers = containers.into_iter().map(|c| (c.labels, c.id, c.state));
    for (labels, id, state) in sandboxes.chain(containers) {
        let label = |k: &str| labels.get(k).cloned().unwrap_or_default();
        let held = pods.entry(label(POD_UID)).or_default();
        held.fingerprint.push((id, state));
        held.id.get_or_insert_with(|| PodId {
            namespace: label(POD_NAMESPACE),
            name: label(POD_NAME),
            uid: label(POD_UID),
        });
    }
    for held in pods.values_mut() {
        held.fingerprint.sort();
    }
    Ok(pods)
}

/// The sandboxes and containers edged made, of pod `uid` or of every pod.
async fn list(
    cri: &dyn Runtime,
    uid: Option<&str>,
) -> Result<(Vec<api::PodSandbox>, Vec<api::Container>), EdgedError> {
    let mut selector = HashMap::from([(MANAGED.to_string(), "true".to_string())]);
    if let Some(uid) = uid {
        selector.insert(POD_UID.to_string(), uid.to_string());
    }
    let sandboxes = cri
        .list_pod_sandboxes(Some(api::PodSandboxFilter {
            label_selector: selector.clone(),
            ..Default::default()
        }))
        .await?;
    let containers = cri
        .list_containers(Some(api::ContainerFilter {
            label_selector: selector,
            ..Default::default()
        }))
        .await?;
    Ok((sandboxes, containers))
}

/// What the runtime holds for pod `uid`.
pub async fn observe(cri: &dyn Runtime, uid: &str) -> Result<Snapshot, EdgedError> {
    let (sandboxes, listed) = list(cri, Some(uid)).await?;
    let mut snap = Snapshot::default();
    for s in &sandboxes {
        snap.observed.sandboxes.push(Sandbox {
            id: s.id.clone(),
            attempt: s.metadata.as_ref().map_or(0, |m| m.attempt),
            ready: s.state == api::PodSandboxState::SandboxReady as i32,
        });
    }
    for c in listed {
        let status = match cri.container_status(&c.id).await {
            Ok(s) => s,
            Err(e) if e.is_not_found() => continue,
            Err(e) => return Err(e.into()),
        };
        snap.image_ids
            .insert(c.id.clone(), status.image_ref.clone());
        snap.observed.containers.push(Container {
            id: c.id.clone(),
            name: c
                .metadata
                .as_ref()
                .map(|m| m.name.clone())
                .unwrap_or_default(),
            attempt: c.metadata.as_ref().map_or(0, |m| m.attempt),
            sandbox: c.pod_sandbox_id.clone(),
            state: state_of(&status),
        });
    }
    if let Some(current) = crate::plan::current_sandbox(&snap.observed) {
        let status = cri.pod_sandbox_status(&current.id).await?;
        snap.pod_ip = status.network.map(|n| n.ip).unwrap_or_default();
    }
    Ok(snap)
}

fn state_of(s: &api::ContainerStatus) -> State {
    let at = |ns: i64| SystemTime::UNIX_EPOCH + Duration::from_nanos(ns.max(0) as u64);
    match api::ContainerState::try_from(s.state) {
        Ok(api::ContainerState::ContainerCreated) => State::Created,
        Ok(api::ContainerState::ContainerRunning) => State::Running {
            started: at(s.started_at),
        },
        Ok(api::ContainerState::ContainerExited) => State::Exited {
            code: s.exit_code,
            started: at(s.started_at),
            finished: at(s.finished_at),
            reason: s.reason.clone(),
        },
        _ => State::Unknown,
    }
}
