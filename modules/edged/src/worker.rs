//! One worker per pod (the kubelet's pod worker): it observes the runtime, plans, applies the
//! actions, and reports the status the runtime's state gives, each time the pod changes in the
//! store, the relist sees its containers change, or a back-off ends. A pod gone from the store
//! (or never in it: an orphan sandbox) is stopped and removed, then the worker ends.

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

    /// Plans and applies until the runtime matches the pod (a few rounds: a new sandbox, then
    /// its containers); returns when to sync again at the latest (a back-off's end).
    async fn converge(
        &mut self,
        pod: Option<&Pod>,
        desired: &plan::Desired,
        snap: &mut Snapshot,
        inputs: &Inputs,
    ) -> Result<Duration, EdgedError> {
        let mut next = Duration::from_secs(60);
        for _ in 0..8 {
            let plan = plan::plan(desired, &snap.observed, self.shared.clock.now());
            self.note_backoff(pod, &plan);
            if let Some(due) = plan.backoff.iter().map(|b| b.1).min() {
                let wait = due
                    .duration_since(self.shared.clock.now())
                    .unwrap_or_default();
                next = next.min(wait + Duration::from_millis(50));
            }
            let mut actions = plan.actions;
            if inputs.volumes.is_none() {
                // Volumes that cannot be set up hold the pod's start back (the kubelet waits
                // for them before it makes the sandbox); stopping still happens.
                actions.retain(|a| {
                    !matches!(a, Action::RunSandbox { .. } | Action::StartContainer { .. })
                });
            }
            if actions.is_empty() {
                break;
            }
            for action in actions {
                self.apply(pod, snap, action, inputs).await?;
            }
            *snap = runtime::observe(&*self.shared.cri, &self.id.uid).await?;
        }
        Ok(next)
    }

    /// Crash-loop back-offs become the containers' waiting reasons.
    fn note_backoff(&mut self, pod: Option<&Pod>, plan: &plan::Plan) {
        let before: Vec<String> = self
            .waiting
            .iter()
            .filter(|(_, w)| w.0 == "CrashLoopBackOff")
            .map(|(n, _)| n.clone())
            .collect();
        self.waiting.retain(|_, w| w.0 != "CrashLoopBackOff");
        for (name, _, wait) in &plan.backoff {
            if let Some(p) = pod.filter(|_| !before.contains(name)) {
                let involved = Involved::container(p, name);
                let text = "Back-off restarting failed container";
                self.events.warning(
                    &involved,
                    "BackOff",
                    &format!("{text} {name} in pod {}", self.id.key()),
                );
            }
            let msg = format!(
                "back-off {}s restarting failed container={name} pod={}_{}({})",
                wait.as_secs(),
                self.id.name,
                self.id.namespace,
                self.id.uid
            );
            self.waiting
                .insert(name.clone(), ("CrashLoopBackOff".into(), msg));
        }
    }

    async fn apply(
        &mut self,
        pod: Option<&Pod>,
        snap: &Snapshot,
        action: Action,
        inputs: &Inputs,
    ) -> Result<(), EdgedError> {
        let cri = &self.shared.cri;
        tracing::debug!(?action, "applying");
        match action {
            Action::StopContainer { id, name } => {
                let probe_grace = pod
                    .filter(|_| self.prober.unhealthy().contains(&id))
                    .and_then(|p| Prober::kill_grace(p, &name));
                let grace =
                    probe_grace.unwrap_or_else(|| pod.map_or(ORPHAN_GRACE_SECONDS, grace_period));
                if let Some(p) = pod {
                    self.pre_stop(p, &id, &name, grace).await;
                }
                ignore_missing(cri.stop_container(&id, grace).await)?;
            }
            Action::RemoveContainer { id } => ignore_missing(cri.remove_container(&id).await)?,
            Action::StopSandbox { id } => ignore_missing(cri.stop_pod_sandbox(&id).await)?,
            Action::RemoveSandbox { id } => ignore_missing(cri.remove_pod_sandbox(&id).await)?,
            Action::RunSandbox { attempt } => {
                let Some(p) = pod else { return Ok(()) };
                let config = self.sandbox_config(p, attempt);
                let dir = self.id.log_dir(&self.shared.config.pod_logs_directory);
                std::fs::create_dir_all(&dir).map_err(|source| EdgedError::Io {
                    what: "creating",
                    path: dir,
                    source,
                })?;
                let id = cri.run_pod_sandbox(config, "").await?;
                tracing::info!(sandbox = %id, attempt, "sandbox started");
            }
            Action::StartContainer {
                name,
                attempt,
                sandbox,
                ..
            } => {
                let Some(p) = pod else { return Ok(()) };
                match self
                    .start_container(p, snap, &name, attempt, &sandbox, inputs)
                    .await
                {
                    Ok(()) => {
                        self.waiting.remove(&name);
                        let involved = Involved::container(p, &name);
                        self.events.normal(
                            &involved,
                            "Started",
                            &format!("Started container {name}"),
                        );
                    }
                    Err(EdgedError::Pod { reason, message }) => {
                        tracing::warn!(container = %name, reason, %message, "container cannot start");
                        let involved = Involved::container(p, &name);
                        let (event, text) = match reason {
                            "ImagePullBackOff" => ("BackOff", message.clone()),
                            _ => ("Failed", format!("Error: {message}")),
                        };
                        self.events.warning(&involved, event, &text);
                        self.waiting.insert(name, (reason.into(), message));
                    }
                    Err(e) => return Err(e),
                }
            }
        }
        Ok(())
    }

    async fn start_container(
        &mut self,
        pod: &Pod,
        snap: &Snapshot,
        name: &str,
        attempt: u32,
        sandbox: &str,
        inputs: &Inputs,
    ) -> Result<(), EdgedError> {
        let c = spec::container(pod, name).ok_or_else(|| {
            EdgedError::pod(
                "CreateContainerConfigError",
                format!("no container {name} in the pod"),
            )
        })?;
        let image = c.image.clone().unwrap_or_default();
        let involved = Involved::container(pod, name);
        let secrets: Vec<Value> = crate::credentials::pull_secret_names(pod)
            .iter()
            .filter_map(|n| inputs.refs.secrets.get(n).cloned())
            .collect();
        let auth = crate::credentials::auth_for(&image, &secrets);
        self.ensure_image(&image, c.image_pull_policy.as_deref(), auth, &involved)
            .await?;
        let placement = Placement {
            pod_ip: snap.pod_ip.clone(),
            host_ip: self.shared.host_ip.clone(),
        };
        let mut refs = inputs.refs.clone();
        self.add_services(&mut refs).await?;
        let envs = env::container_env(pod, c, &refs, &placement)?;
        let mounts = volumes::mounts(c, inputs.volumes.as_ref().unwrap_or(&BTreeMap::new()))?;
        let sandbox_attempt = snap
            .observed
            .sandboxes
            .iter()
            .find(|s| s.id == sandbox)
            .map_or(0, |s| s.attempt);
        let sandbox_config = self.sandbox_config(pod, sandbox_attempt);
        let config = spec::container_config(&self.id, c, attempt, envs, mounts);
        let cri = &self.shared.cri;
        let id = cri
            .create_container(sandbox, config, sandbox_config)
            .await
            .map_err(|e| EdgedError::pod("CreateContainerError", e.to_string()))?;
        cri.start_container(&id)
            .await
            .map_err(|e| EdgedError::pod("RunContainerError", e.to_string()))?;
        tracing::info!(container = name, attempt, id = %id, "container started");
        if let Some(hook) = c.lifecycle.as_ref().and_then(|l| l.post_start.as_ref()) {
            // The kubelet kills a container whose postStart hook fails; the restart policy
            // decides what follows.
            let grace = grace_period(pod);
            let bound = Duration::from_secs(grace.max(1) as u64);
            if let Err(why) = self.hook(pod, c, &id, hook, bound).await {
                let message = format!("PostStartHook failed: {why}");
                self.events.warning(
                    &Involved::container(pod, name),
                    "FailedPostStartHook",
                    &message,
                );
                ignore_missing(cri.stop_container(&id, grace).await)?;
                return Err(EdgedError::pod("PostStartHookError", message));
            }
        }
        Ok(())
    }

    /// The config of the pod's sandbox attempt `attempt` (the same for creating the sandbox
    /// and each of its containers).
    fn sandbox_config(&self, pod: &Pod, attempt: u32) -> cri::api::PodSandboxConfig {
        let logs = &self.shared.config.pod_logs_directory;
        spec::sandbox_config(pod, &self.id, attempt, logs, &self.shared.dns)
    }

    /// The image is present, or pulled per the policy; an offline node never fails a pod whose
    /// image is present, whatever the policy says.
    async fn ensure_image(
        &mut self,
        image: &str,
        policy: Option<&str>,
        auth: Option<cri::api::AuthConfig>,
        involved: &Involved,
    ) -> Result<(), EdgedError> {
        let cri = &self.shared.cri;
        let present = cri.image_status(image).await?.is_some();
        let policy = policy.unwrap_or_else(|| default_pull_policy(image));
        let online = self.shared.online();
        if present && policy != "Always" {
            // Pulled since by another pod, or loaded by hand: no back-off to keep.
            self.pulls.remove(image);
        }
        match (policy, present) {
            ("Never", true) | ("IfNotPresent", true) => return Ok(()),
            ("Never", false) => {
                return Err(EdgedError::pod(
                    "ErrImageNeverPull",
                    format!("container image \"{image}\" is not present with pull policy of Never"),
                ));
            }
            (_, true) if !online => {
                tracing::info!(
                    image,
                    "offline: using the image present on the node instead of pulling it"
                );
                let message = format!(
                    "Container image \"{image}\" already present on machine; not pulled: the node is offline"
                );
                self.events.normal(involved, "Pulled", &message);
                return Ok(());
            }
            _ => {}
        }
        let now = self.shared.clock.now();
        if let Some((_, until, why)) = self.pulls.get(image)
            && now < *until
        {
            if present {
                return Ok(());
            }
            // As the kubelet words it since 1.30: the back-off with the last pull's error.
            return Err(EdgedError::pod(
                "ImagePullBackOff",
                format!("Back-off pulling image \"{image}\": ErrImagePull: {why}"),
            ));
        }
        let pulled = tokio::time::timeout(PULL_TIMEOUT, cri.pull_image(image, auth, None)).await;
        match pulled {
            Ok(Ok(_)) => {
                self.pulls.remove(image);
                Ok(())
            }
            failed => {
                let failures = self.pulls.get(image).map_or(1, |f| f.0 + 1);
                let wait = (plan::BACKOFF_INITIAL * 2u32.pow((failures - 1).min(5)))
                    .min(plan::BACKOFF_MAX);
                let why = match failed {
                    Ok(Err(e)) => e.to_string(),
                    _ => "the pull timed out".into(),
                };
                let pull = (failures, now + wait, why.clone());
                self.pulls.insert(image.to_string(), pull);
                if present {
                    tracing::warn!(image, error = %why, "pull failed; using the image present on the node");
                    let message = format!(
                        "Failed to pull image \"{image}\": {why}; using the image present on machine"
                    );
                    self.events.warning(involved, "Failed", &message);
                    return Ok(());
                }
                Err(EdgedError::pod(
                    "ErrImagePull",
                    format!("failed to pull image \"{image}\": {why}"),
                ))
            }
        }
    }

    /// Runs the container's preStop hook, bounded by the grace period.
    async fn pre_stop(&self, pod: &Pod, id: &str, name: &str, grace: i64) {
        let Some(c) = spec::container(pod, name) else {
            return;
        };
        let Some(hook) = c.lifecycle.as_ref().and_then(|l| l.pre_stop.as_ref()) else {
            return;
        };
        let bound = Duration::from_secs(grace.max(1) as u64);
        if let Err(why) = self.hook(pod, c, id, hook, bound).await {
            tracing::warn!(container = name, error = %why, "preStop hook failed");
            let message = format!("PreStopHook failed: {why}");
            self.events.warning(
                &Involved::container(pod, name),
                "FailedPreStopHook",
                &message,
            );
        }
    }

    /// Runs a lifecycle hook of container `c` (runtime id `id`) for at most `bound`: exec in
    /// the container, an HTTP GET (2xx and 3xx succeed), or a sleep.
    async fn hook(
        &self,
        pod: &Pod,
        c: &k8s_openapi::api::core::v1::Container,
        id: &str,
        hook: &k8s_openapi::api::core::v1::LifecycleHandler,
        bound: Duration,
    ) -> Result<(), String> {
        let run = async {
            if let Some(exec) = &hook.exec {
                let cmd = exec.command.clone().unwrap_or_default();
                let r = self
                    .shared
                    .cri
                    .exec_sync(id, cmd, bound.as_secs() as i64)
                    .await
                    .map_err(|e| e.to_string())?;
                if r.exit_code != 0 {
                    let out = String::from_utf8_lossy(&r.stdout).trim().to_string();
                    return Err(format!("command exited with {}: {out}", r.exit_code));
                }
            } else if let Some(get) = &hook.http_get {
                let port = probe::port(&get.port, c).ok_or("unknown port")?;
                let snap = runtime::observe(&*self.shared.cri, &self.id.uid)
                    .await
                    .map_err(|e| e.to_string())?;
                let host = get.host.clone().unwrap_or_else(|| self.pod_ip(pod, &snap));
                let code = probe::http_get(get, &host, port).await?;
                if !(200..400).contains(&code) {
                    return Err(format!(
                        "HTTP lifecycle hook failed with statuscode: {code}"
                    ));
                }
            } else if let Some(sleep) = &hook.sleep {
                tokio::time::sleep(Duration::from_secs(sleep.seconds.max(0) as u64)).await;
            }
            Ok(())
        };
        tokio::time::timeout(bound, run)
            .await
            .unwrap_or_else(|_| Err(format!("timed out after {}s", bound.as_secs())))
    }

    /// The configmaps and secrets the pod reads, and its volumes set up with them.
    async fn inputs(&mut self, pod: &Pod, pod_ip: &str) -> Result<Inputs, EdgedError> {
        let mut refs = self.refs(pod).await?;
        self.fill_tokens(pod, &mut refs).await;
        let volumes = self.volumes(pod, &refs, pod_ip)?;
        Ok(Inputs { refs, volumes })
    }

    /// The service-account tokens the pod's projected volumes hold: the ones held, requested
    /// again when due; after a restart, the ones the volumes already hold on disk.
    async fn fill_tokens(&mut self, pod: &Pod, refs: &mut Refs) {
        let wanted = tokens::wanted(pod);
        let keys = tokens::keys(&wanted);
        self.tokens.retain(|k, _| keys.contains(k));
        let root = &self.shared.config.root_directory;
        for (key, volume, path) in &wanted {
            if self.tokens.contains_key(key) {
                continue;
            }
            let file = volumes::volume_dir(root, &self.id.uid, "projected", volume).join(path);
            let held = std::fs::read_to_string(&file).ok();
            if let Some(token) = held.and_then(|v| Token::from_jwt(v.trim())) {
                self.tokens.insert(key.clone(), token);
            }
        }
        let now = apimachinery::time::now_unix();
        let mut due = None::<i64>;
        for key in &keys {
            if self.tokens.get(key).is_none_or(|t| now >= t.refresh_at()) {
                match self.request_token(pod, key).await {
                    Ok(token) => {
                        self.tokens.insert(key.clone(), token);
                    }
                    Err(e) => {
                        tracing::info!(account = %key.account, error = %e, "service-account token not issued; retrying");
                        due = Some(due.map_or(now + 10, |d| d.min(now + 10)));
                    }
                }
            }
            if let Some(t) = self.tokens.get(key) {
                refs.tokens
                    .insert(key.clone(), t.value.clone().into_bytes());
                due = Some(due.map_or(t.refresh_at(), |d| d.min(t.refresh_at())));
            }
        }
        self.token_due = due;
    }

    /// A token from the TokenRequest API, bound to the pod.
    async fn request_token(&self, pod: &Pod, key: &TokenKey) -> Result<Token, EdgedError> {
        use k8s_openapi::api::authentication::v1::TokenRequest;
        use k8s_openapi::api::core::v1::ServiceAccount;
        let api: Api<ServiceAccount> =
            Api::namespaced(self.shared.client.clone(), &self.id.namespace);
        let audiences: Vec<&str> = [key.audience.as_str()]
            .into_iter()
            .filter(|a| !a.is_empty())
            .collect();
        let request: TokenRequest = serde_json::from_value(json!({
            "spec": {
                "audiences": audiences,
                "expirationSeconds": key.expiration,
                "boundObjectRef": {
                    "apiVersion": "v1", "kind": "Pod",
                    "name": pod.metadata.name, "uid": pod.metadata.uid,
                },
            },
        }))
        .expect("a TokenRequest from known fields");
        let answer = api
            .create_token_request(&key.account, &kube::api::PostParams::default(), &request)
            .await?;
        let value = answer.status.map(|s| s.token).unwrap_or_default();
        Token::from_jwt(&value).ok_or_else(|| {
            EdgedError::pod(
                "ContainerCreating",
                "the TokenRequest API answered no usable token",
            )
        })
    }

    /// The configmaps and secrets the pod's env and volumes read.
    async fn refs(&self, pod: &Pod) -> Result<Refs, EdgedError> {
        let store = &self.shared.store;
        let ns = &self.id.namespace;
        let json = serde_json::to_value(pod).unwrap_or_default();
        let mut refs = Refs::default();
        let read = apimachinery::podrefs::readable(&json);
        for (resource, name) in read
            .into_iter()
            .filter(|(r, _)| matches!(*r, "configmaps" | "secrets"))
        {
            let Some(obj) = store
                .get(&ObjKey::new(resource, ns.as_str(), name.as_str()))
                .await?
            else {
                continue;
            };
            let value: Value = serde_json::from_slice(&obj.value).unwrap_or_default();
            match resource {
                "configmaps" => refs.configmaps.insert(name, value),
                "secrets" => refs.secrets.insert(name, value),
                _ => None,
            };
        }
        Ok(refs)
    }

    /// Adds the services a starting container's variables name: its namespace's and
    /// `default/kubernetes`.
    async fn add_services(&self, refs: &mut Refs) -> Result<(), EdgedError> {
        let store = &self.shared.store;
        let ns = &self.id.namespace;
        let services = store
            .list(objstore::ListOptions {
                resource: "services".into(),
                filter: objstore::Filter {
                    namespace: Some(ns.clone()),
                    ..Default::default()
                },
                ..Default::default()
            })
            .await?;
        refs.services = services
            .items
            .iter()
            .filter_map(|o| serde_json::from_slice(&o.value).ok())
            .collect();
        if let Some(k) = store
            .get(&ObjKey::new("services", "default", "kubernetes"))
            .await?
        {
            refs.kubernetes = serde_json::from_slice(&k.value).ok();
        }
        Ok(())
    }

    /// Sets the pod's volumes up; returns each volume's host path and whether it is read-only
    /// API data. A volume that cannot be set up becomes every container's waiting reason, and
    /// `None` is returned.
    fn volumes(
        &mut self,
        pod: &Pod,
        refs: &Refs,
        pod_ip: &str,
    ) -> Result<Option<BTreeMap<String, VolumePath>>, EdgedError> {
        let at = Placement {
            pod_ip: pod_ip.into(),
            host_ip: self.shared.host_ip.clone(),
        };
        let sources = match volumes::sources(pod, refs, &at) {
            Ok(s) => {
                self.waiting.retain(|_, w| w.0 != "ContainerCreating");
                s
            }
            Err(EdgedError::Pod { reason, message }) => {
                tracing::warn!(%message, "volume cannot be set up");
                let text = format!("MountVolume.SetUp failed: {message}");
                self.events
                    .warning(&Involved::pod(pod), "FailedMount", &text);
                for c in &spec::desired(pod, true).containers {
                    self.waiting
                        .insert(c.clone(), (reason.into(), message.clone()));
                }
                return Ok(None);
            }
            Err(e) => return Err(e),
        };
        let root = &self.shared.config.root_directory;
        let mut paths = BTreeMap::new();
        for (name, (kind, source)) in sources {
            let path = volumes::set_up(root, &self.id.uid, &name, kind, &source)?;
            paths.insert(name, (path, matches!(source, volumes::Source::Files(_))));
        }
        Ok(Some(paths))
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

/// The pod's grace period: the deletion's, else the spec's (default 30 s).
fn grace_period(pod: &Pod) -> i64 {
    pod.metadata
        .deletion_grace_period_seconds
        .or(pod
            .spec
            .as_ref()
            .and_then(|s| s.termination_grace_period_seconds))
        .unwrap_or(30)
}

/// `Always` for an untagged or `:latest` image, else `IfNotPresent` (the API's defaulting).
fn default_pull_policy(image: &str) -> &'static str {
    let name = image.rsplit('/').next().unwrap_or(image);
    if image.contains('@') {
        return "IfNotPresent";
    }
    match name.split_once(':') {
        Some((_, "latest")) | None => "Always",
        Some(_) => "IfNotPresent",
    }
}

fn ignore_missing(r: Result<(), cri::CriError>) -> Result<(), EdgedError> {
    match r {
        Err(e) if e.is_not_found() => Ok(()),
        other => Ok(other?),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pull_policy_defaults_follow_the_tag() {
        assert_eq!(default_pull_policy("busybox"), "Always");
        assert_eq!(default_pull_policy("busybox:latest"), "Always");
        assert_eq!(default_pull_policy("registry.local:5000/busybox"), "Always");
        assert_eq!(
            default_pull_policy("registry.local/busybox:1.36"),
            "IfNotPresent"
        );
        assert_eq!(default_pull_policy("busybox@sha256:abc"), "IfNotPresent");
    }
}
