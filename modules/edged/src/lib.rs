//! edged: the light kubelet inside edgecore. It takes the pods bound to its node from the edge
//! store metamanager keeps (a store watch, no polling of the cloud), runs them on containerd
//! through CRI v1, and reports pod status, node status and the node Lease through lwproxy's
//! Kubernetes API in-process, so while the cloud is away those writes are stored at the edge
//! and queued in the outbox, and the pods keep running: losing the link never stops, restarts
//! or re-creates a pod. Its split follows the kubelet's: a pure planner ([`plan`]) compares
//! what should run with what the runtime reports, one worker per pod applies the plan, and the
//! status is computed from the runtime's state, never remembered ([`status`]). A relist of the
//! runtime every `relistPeriod` (the kubelet's PLEG) wakes the workers whose containers changed.
//! Only sandboxes and containers edged labelled are touched.
#![forbid(unsafe_code)]

mod clock;
mod config;
mod credentials;
mod env;
mod error;
mod events;
mod kubelet;
mod logrotate;
mod node;
pub mod plan;
mod probe;
mod runtime;
mod spec;
mod statics;
mod stats;
mod status;
mod statuses;
mod tokens;
mod volumes;
mod worker;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use beehive::{Context, Mailbox, Module, ModuleError};
use k8s_openapi::api::core::v1::Pod;
use objstore::{EventKind, ListOptions, Store, WatchOptions};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::spec::{DnsSettings, PodId};
use crate::worker::WorkerHandle;

pub use config::Config;
pub use error::EdgedError;
pub use node::KUBELET_VERSION;

/// Module name.
pub const NAME: &str = "edged";

/// The edged module.
pub struct Edged {
    shared: Arc<Shared>,
}

/// What every part of edged shares.
pub(crate) struct Shared {
    config: Config,
    node: String,
    host_ip: String,
    dns: DnsSettings,
    cri: Arc<dyn cri::Runtime>,
    clock: clock::Clock,
    store: Store,
    client: kube::Client,
    link: watch::Receiver<lwproxy::Link>,
    tasks: TaskTracker,
    workers: Mutex<HashMap<String, WorkerHandle>>,
    events: events::Events,
    sink: events::Sink,
    statics: statics::Statics,
    statuses: statuses::Statuses,
    stats: stats::Stats,
}

// === impl Edged ===

impl Edged {
    /// Connects to the container runtime. `node` is the node's name (from its certificate
    /// unless `hostnameOverride` is set); `api` is lwproxy's Kubernetes API, called in-process;
    /// `link` says whether the cloud is reachable.
    pub async fn new(
        config: Config,
        node: String,
        store: Store,
        api: axum::Router,
        link: watch::Receiver<lwproxy::Link>,
    ) -> Result<Edged, EdgedError> {
        let node = if config.hostname_override.is_empty() {
            node
        } else {
            config.hostname_override.clone()
        };
        if node.is_empty() {
            return Err(EdgedError::Config(
                "no node name: set hostnameOverride or give the node a certificate".into(),
            ));
        }
        let cri = Arc::new(cri::Cri::connect(&config.remote_runtime_endpoint).await?);
        let client = kube::Client::new(api, "default");
        let shared = Shared::new(
            config,
            node,
            cri,
            clock::Clock::system(),
            store,
            client,
            link,
        );
        Ok(Edged {
            shared: Arc::new(shared),
        })
    }

    /// The node's kubelet API (containerLogs, exec, attach, portForward, pods, healthz) over
    /// this module's state. Nothing listens for it: the caller serves it (edgecore, on the
    /// streams the cloud opens over the link), before or after the module is registered.
    pub fn kubelet_api(&self) -> axum::Router {
        kubelet::router(self.shared.clone())
    }
}

#[beehive::async_trait]
impl Module for Edged {
    fn name(&self) -> &str {
        NAME
    }

    fn group(&self) -> &str {
        NAME
    }

    fn enabled(&self) -> bool {
        self.shared.config.enable
    }

    async fn run(
        &self,
        _ctx: Context,
        mailbox: &mut Mailbox,
        shutdown: CancellationToken,
    ) -> Result<(), ModuleError> {
        let shared = self.shared.clone();
        let tasks = shared.tasks.clone();
        tasks.spawn(node::run(shared.clone(), shutdown.clone()));
        let (s, stop) = (shared.clone(), shutdown.clone());
        tasks.spawn(async move { s.sink.run(s.client.clone(), s.node.clone(), stop).await });
        let supervise = supervise(shared.clone(), shutdown.clone());
        tokio::pin!(supervise);
        let result = loop {
            tokio::select! {
                biased;
                _ = shutdown.cancelled() => break Ok(()),
                r = &mut supervise => break r,
                m = mailbox.recv() => match m {
                    Some(m) => tracing::debug!(msg_id = %m.id(), "message for edged ignored"),
                    None => break Ok(()),
                },
            }
        };
        // Workers stop at shutdown; containers keep running (they are the node's, not ours).
        shared
            .workers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
        tasks.close();
        tasks.wait().await;
        tasks.reopen();
        result.map_err(|e: EdgedError| e.into())
    }
}

// === impl Shared ===

impl Shared {
    /// What edged's parts share, for node `node` on runtime `cri`; `client` is the Kubernetes
    /// API it writes to (lwproxy's, in-process) and `store` the edge store it reads.
    fn new(
        config: Config,
        node: String,
        cri: Arc<dyn cri::Runtime>,
        clock: clock::Clock,
        store: Store,
        client: kube::Client,
        link: watch::Receiver<lwproxy::Link>,
    ) -> Shared {
        let (events, sink) = events::channel();
        Shared {
            host_ip: host_ip(),
            dns: DnsSettings {
                servers: config.cluster_dns.clone(),
                domain: config.cluster_domain.clone(),
            },
            config,
            node,
            cri,
            clock,
            store,
            client,
            link,
            tasks: TaskTracker::new(),
            workers: Mutex::new(HashMap::new()),
            events,
            sink,
            statics: statics::Statics::default(),
            statuses: statuses::Statuses::default(),
            stats: stats::Stats::default(),
        }
    }

    /// Whether the cloud is reachable.
    pub(crate) fn online(&self) -> bool {
        *self.link.borrow() == lwproxy::Link::Up
    }

    /// A worker ended: its pod is gone from the node.
    pub(crate) fn forget(&self, uid: &str) {
        let mut workers = self.workers.lock().unwrap_or_else(|e| e.into_inner());
        if workers.get(uid).is_some_and(|w| w.pod.borrow().is_none()) {
            workers.remove(uid);
        }
    }

    /// Gives pod `pod` (or its absence) to its worker, starting one if needed.
    fn dispatch(
        self: &Arc<Self>,
        uid: &str,
        id: PodId,
        pod: Option<Arc<Pod>>,
        shutdown: &CancellationToken,
    ) {
        let mut workers = self.workers.lock().unwrap_or_else(|e| e.into_inner());
        match workers.get(uid) {
            Some(w) if !w.pod.is_closed() => {
                w.pod.send_replace(pod);
            }
            _ => {
                workers.insert(
                    uid.to_string(),
                    worker::spawn(self.clone(), id, pod, shutdown.clone()),
                );
            }
        }
    }

    /// Wakes the workers of the pods in `namespace` (a configmap or secret there changed:
    /// their volumes may need new files).
    fn wake_namespace(&self, namespace: &str) {
        let workers = self.workers.lock().unwrap_or_else(|e| e.into_inner());
        for w in workers.values().filter(|w| w.namespace == namespace) {
            w.wake.notify_one();
        }
    }
}

/// Follows the store's pods and the runtime's state until shutdown.
async fn supervise(shared: Arc<Shared>, shutdown: CancellationToken) -> Result<(), EdgedError> {
    let writer = shared.clone();
    let stop = shutdown.clone();
    shared.tasks.spawn(async move {
        let client = writer.client.clone();
        writer.statuses.run(client, stop).await;
    });
    let config = &shared.config;
    let policy = logrotate::Policy {
        max_size: config.container_log_max_size,
        max_files: config.container_log_max_files,
    };
    shared.tasks.spawn(logrotate::run(
        shared.cri.clone(),
        shared.clock.clone(),
        policy,
        config.container_log_monitor_interval,
        shutdown.clone(),
    ));
    let listed = shared
        .store
        .list(ListOptions {
            resource: "pods".into(),
            ..Default::default()
        })
        .await?;
    for obj in &listed.items {
        on_pod(&shared, obj, false, &shutdown);
    }
    // Static pods before orphans: their containers are not orphans.
    let mut manifest_errors = std::collections::BTreeMap::new();
    statics::load(&shared, &mut manifest_errors, &shutdown);
    remove_orphans(&shared, &shutdown).await?;
    shared.tasks.spawn(statics::run(
        shared.clone(),
        manifest_errors,
        shutdown.clone(),
    ));
    let mut pods = shared
        .store
        .watch(WatchOptions::from_revision(listed.revision).resource("pods"))?;
    // Services matter only when a container starts, which reads them then.
    let from = shared.store.revision();
    let mut refs = shared.store.watch(
        WatchOptions::from_revision(from)
            .predicate(|o| matches!(o.key.resource.as_str(), "configmaps" | "secrets")),
    )?;
    let mut relist = tokio::time::interval(shared.config.relist_period);
    relist.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut seen: HashMap<String, runtime::Held> = HashMap::new();
    loop {
        tokio::select! {
            biased;
            _ = shutdown.cancelled() => return Ok(()),
            event = pods.next() => match event {
                Some(Ok(e)) => on_pod(&shared, &e.object, e.kind == EventKind::Deleted, &shutdown),
                Some(Err(e)) => return Err(e.into()),
                None => return Ok(()),
            },
            event = refs.next() => match event {
                Some(Ok(e)) => shared.wake_namespace(&e.object.key.namespace),
                Some(Err(e)) => return Err(e.into()),
                None => return Ok(()),
            },
            _ = relist.tick() => {
                let now = match runtime::relist(&*shared.cri).await {
                    Ok(now) => now,
                    Err(e) => {
                        tracing::warn!(error = %e, "relisting the container runtime failed");
                        continue;
                    }
                };
                let workers = shared.workers.lock().unwrap_or_else(|e| e.into_inner());
                for (uid, held) in &now {
                    if seen.get(uid).map(|s| &s.fingerprint) != Some(&held.fingerprint)
                        && let Some(w) = workers.get(uid)
                    {
                        w.wake.notify_one();
                    }
                }
                drop(workers);
                seen = now;
            }
        }
    }
}

/// A pod event: pods bound to this node go to their worker; a deleted one (or one moved away)
/// is stopped and removed.
fn on_pod(
    shared: &Arc<Shared>,
    obj: &objstore::StoredObject,
    deleted: bool,
    shutdown: &CancellationToken,
) {
    let pod: Pod = match serde_json::from_slice(&obj.value) {
        Ok(p) => p,
        Err(e) => {
            tracing::warn!(pod = %obj.key, error = %e, "undecodable pod in the edge store skipped");
            return;
        }
    };
    if statics::is_mirror(&pod) {
        // The API's copy of a static pod: never run; its status goes to the static pod's
        // worker, and a deleted one is created again.
        if deleted || pod.metadata.deletion_timestamp.is_some() {
            shared.statics.poke();
        } else if let Some(p) = shared.statics.with_mirror_status(&pod)
            && let Some(id) = PodId::of(&p)
        {
            shared.dispatch(&id.uid.clone(), id, Some(p), shutdown);
        }
        return;
    }
    let Some(id) = PodId::of(&pod) else { return };
    let here = pod.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(shared.node.as_str());
    let uid = id.uid.clone();
    if deleted || !here {
        let known = shared
            .workers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains_key(&uid);
        if known {
            shared.dispatch(&uid, id, None, shutdown);
        }
        return;
    }
    shared.dispatch(&uid, id, Some(Arc::new(pod)), shutdown);
}

/// Pods edged holds sandboxes or containers of that are no longer in the store get a worker
/// that removes them.
async fn remove_orphans(
    shared: &Arc<Shared>,
    shutdown: &CancellationToken,
) -> Result<(), EdgedError> {
    for (uid, held) in runtime::relist(&*shared.cri).await? {
        let known = shared
            .workers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains_key(&uid);
        let Some(id) = held.id.filter(|_| !known && !uid.is_empty()) else {
            continue;
        };
        tracing::info!(pod = %id.key(), uid, "pod no longer on this node: removing what it left");
        shared.dispatch(&uid, id, None, shutdown);
    }
    Ok(())
}

/// The node's IP: the address the host would use for the outside world, found with a UDP
/// socket's route lookup (no packet is sent), loopback when there is no route.
fn host_ip() -> String {
    let socket = std::net::UdpSocket::bind("0.0.0.0:0");
    socket
        .and_then(|s| {
            s.connect("192.0.2.1:9")?;
            s.local_addr()
        })
        .map(|a| a.ip().to_string())
        .unwrap_or_else(|_| "127.0.0.1".into())
}

#[cfg(test)]
mod tests;
