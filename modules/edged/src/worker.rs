//! One worker per pod (the kubelet's pod worker): it observes the runtime, plans, applies the
//! actions, and reports the status the runtime's state gives, each time the pod changes in the
//! store, the relist sees its containers change, or a back-off ends. A pod gone from the store
//! (or never in it: an orphan sandbox) is stopped and removed, then the worker ends.

mod actuation;
mod images;
mod inputs;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use objstore::ObjKey;
use serde_json::{Value, json};
use tokio::sync::{Notify, watch};
use tokio_util::sync::CancellationToken;

use crate::Shared;
use crate::env::{self, Placement, Refs};
use crate::error::EdgedError;
use crate::events::{Events, Involved};
use crate::plan::{self, Action};
use crate::probe::{self, Prober};
use crate::runtime::{self, Snapshot};
use crate::spec::{self, PodId};
use crate::status::{self, Extra};
use crate::tokens::{self, Token, TokenKey};
use crate::volumes;

/// Where a volume is on the host, and whether it holds API data (mounted read-only).
type VolumePath = (std::path::PathBuf, bool);

/// How long a stopping container of a pod no longer in the store gets (its grace period is
/// not known any more).
const ORPHAN_GRACE_SECONDS: i64 = 2;
/// The longest an image pull may take.
const PULL_TIMEOUT: Duration = Duration::from_secs(120);

/// What a pod's containers are started with: the objects their env reads, and where each
/// volume is (`None` while a volume cannot be set up: nothing starts then).
#[derive(Default)]
struct Inputs {
    refs: Refs,
    volumes: Option<BTreeMap<String, VolumePath>>,
}

/// How a pod's worker is reached.
pub struct WorkerHandle {
    /// The pod as the store holds it; `None` once it left the store.
    pub pod: watch::Sender<Option<Arc<Pod>>>,
    /// Wakes the worker for a sync (its containers changed, a referenced object changed).
    pub wake: Arc<Notify>,
    /// The pod's namespace (a configmap or secret there wakes it).
    pub namespace: String,
}

/// A pod worker's state.
struct Worker {
    shared: Arc<Shared>,
    id: PodId,
    /// Waiting reasons of containers that could not start, by container name.
    waiting: BTreeMap<String, (String, String)>,
    /// Image pull back-off: failures, the time the next pull may start and why the last one
    /// failed, by image.
    pulls: HashMap<String, (u32, SystemTime, String)>,
    /// The final delete was accepted by the API.
    deleted: bool,
    /// The containers' probes.
    prober: Prober,
    /// Service-account tokens held for the pod's projected volumes.
    tokens: HashMap<TokenKey, Token>,
    /// When a token is due again (Unix seconds).
    token_due: Option<i64>,
    events: Events,
}

/// Starts the worker of pod `id`.
pub fn spawn(
    shared: Arc<Shared>,
    id: PodId,
    pod: Option<Arc<Pod>>,
    shutdown: CancellationToken,
) -> WorkerHandle {
    let (tx, rx) = watch::channel(pod);
    let wake = Arc::new(Notify::new());
    let namespace = id.namespace.clone();
    let span = tracing::info_span!("pod", pod = %id.key(), uid = %id.uid);
    let worker = Worker {
        shared: shared.clone(),
        id,
        waiting: BTreeMap::new(),
        pulls: HashMap::new(),
        deleted: false,
        prober: Prober::new(wake.clone(), shared.events.clone()),
        tokens: HashMap::new(),
        token_due: None,
        events: shared.events.clone(),
    };
    let run = worker.run(rx, wake.clone(), shutdown);
    shared
        .tasks
        .spawn(tracing::Instrument::instrument(run, span));
    WorkerHandle {
        pod: tx,
        wake,
        namespace,
    }
}

// === impl Worker ===

impl Worker {
    async fn run(
        mut self,
        mut pod: watch::Receiver<Option<Arc<Pod>>>,
        wake: Arc<Notify>,
        shutdown: CancellationToken,
    ) {
        loop {
            let current = pod.borrow_and_update().clone();
            let next = match self.sync(current.as_deref()).await {
                Ok(Some(next)) => next,
                Ok(None) => {
                    tracing::info!("pod removed from the node");
                    self.shared.statuses.forget(&self.id.uid);
                    self.shared.forget(&self.id.uid);
                    return;
                }
                Err(e) => {
                    tracing::warn!(error = %beehive::ErrorChain(&e), "pod sync failed; retrying");
                    Duration::from_secs(2)
                }
            };
            tokio::select! {
                biased;
                _ = shutdown.cancelled() => return,
                changed = pod.changed() => if changed.is_err() {
                    // The supervisor is gone (shutdown).
                    return;
                },
                _ = wake.notified() => {}
                _ = tokio::time::sleep(next) => {}
            }
        }
    }

    /// One sync; returns when to sync again at the latest, `None` when the pod is gone from
    /// the node and the worker can end.
    async fn sync(&mut self, pod: Option<&Pod>) -> Result<Option<Duration>, EdgedError> {
        let run = pod.is_some_and(|p| p.metadata.deletion_timestamp.is_none());
        let mut desired = match pod {
            Some(p) => spec::desired(p, run),
            None => plan::Desired {
                run: false,
                init: vec![],
                containers: vec![],
                ephemeral: vec![],
                restart: plan::RestartPolicy::Never,
                kill: Default::default(),
            },
        };
        if run {
            desired.kill = self.prober.unhealthy();
        }
        let mut snap = runtime::observe(&*self.shared.cri, &self.id.uid).await?;
        let inputs = match pod {
            Some(p) if run => self.inputs(p, &snap.pod_ip).await?,
            _ => Inputs::default(),
        };
        let mut next = self.converge(pod, &desired, &mut snap, &inputs).await?;
        match pod {
            Some(p) if run => {
                let target = probe::Target {
                    cri: self.shared.cri.clone(),
                    host: self.pod_ip(p, &snap),
                };
                self.prober.sync(p, &snap.observed, &target);
            }
            _ => self.prober.clear(),
        }
        let now = self.shared.clock.now();
        // A back-off still ahead wakes the pod; one behind it was retried in this sync (or its
        // image is there now): none may ask for a sync at once, over and over.
        if let Some(retry) = self.pulls.values().map(|p| p.1).filter(|t| *t > now).min() {
            next = next.min(retry.duration_since(now).unwrap_or_default());
        }
        if let Some(due) = self.token_due {
            let wait = (due - status::unix(now)).max(0) as u64;
            next = next.min(Duration::from_secs(wait));
        }
        let Some(pod) = pod else {
            if snap.observed.sandboxes.is_empty() && snap.observed.containers.is_empty() {
                volumes::tear_down(&self.shared.config.root_directory, &self.id.uid)?;
                return Ok(None);
            }
            return Ok(Some(Duration::from_secs(1)));
        };
        self.report(pod, &desired, &snap);
        // Not running: being deleted (a pod that left the node was handled above).
        if !run
            && snap
                .observed
                .containers
                .iter()
                .all(|c| !matches!(c.state, plan::State::Running { .. }))
            && !self.deleted
        {
            self.deleted = self.shared.statuses.delete_when_reported(&self.id);
            if !self.deleted {
                next = next.min(Duration::from_secs(5));
            }
        }
        Ok(Some(next))
    }

    /// The pod's IP: its sandbox's, the node's for a host-network pod.
    fn pod_ip(&self, pod: &Pod, snap: &Snapshot) -> String {
        if spec::host_network(pod) {
            self.shared.host_ip.clone()
        } else {
            snap.pod_ip.clone()
        }
    }

    /// Offers the pod's status to the status manager, which writes it if it changed.
    fn report(&mut self, pod: &Pod, desired: &plan::Desired, snap: &Snapshot) {
        let extra = Extra {
            pod_ip: self.pod_ip(pod, snap),
            host_ip: self.shared.host_ip.clone(),
            waiting: self.waiting.clone(),
            image_ids: snap.image_ids.clone(),
            not_started: self.prober.pending(probe::Kind::Startup),
            unready: self.prober.pending(probe::Kind::Readiness),
        };
        let new = status::pod_status(
            pod,
            desired,
            &snap.observed,
            &extra,
            self.shared.clock.now(),
        );
        let held = pod
            .status
            .as_ref()
            .and_then(|s| serde_json::to_value(s).ok());
        let mirror = pod
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(crate::statics::MIRROR_UID))
            .cloned();
        self.shared.statuses.offer(&self.id, new, held, mirror);
    }
}
