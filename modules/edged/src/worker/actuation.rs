//! A pod worker's actuation: planning against what the runtime holds, and the CRI calls that
//! make it so (sandboxes, containers, stop hooks).

use super::*;

impl Worker {
    /// Plans and applies until the runtime matches the pod (a few rounds: a new sandbox, then
    /// its containers); returns when to sync again at the latest (a back-off's end).
    pub(super) async fn converge(
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
    pub(super) fn note_backoff(&mut self, pod: Option<&Pod>, plan: &plan::Plan) {
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

    pub(super) async fn apply(
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

    pub(super) async fn start_container(
        &mut self,
        pod: &Pod,
        snap: &Snapshot,
        name: &str,
        attempt: u32,
        sandbox: &str,
        inputs: &Inputs,
    ) -> Result<(), EdgedError> {
        let c = spec::any_container(pod, name).ok_or_else(|| {
            EdgedError::pod(
                "CreateContainerConfigError",
                format!("no container {name} in the pod"),
            )
        })?;
        let c = &*c;
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
        let mut config = spec::container_config(&self.id, c, attempt, envs, mounts);
        if let Some(target) = spec::ephemeral_target(pod, name) {
            share_target_pids(&mut config, &snap.observed, target, sandbox);
        }
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
    pub(super) fn sandbox_config(&self, pod: &Pod, attempt: u32) -> cri::api::PodSandboxConfig {
        let logs = &self.shared.config.pod_logs_directory;
        spec::sandbox_config(pod, &self.id, attempt, logs, &self.shared.dns)
    }

    /// Runs the container's preStop hook, bounded by the grace period.
    pub(super) async fn pre_stop(&self, pod: &Pod, id: &str, name: &str, grace: i64) {
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
    pub(super) async fn hook(
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
}

/// The pod's grace period: the deletion's, else the spec's (default 30 s).
pub(super) fn grace_period(pod: &Pod) -> i64 {
    pod.metadata
        .deletion_grace_period_seconds
        .or(pod
            .spec
            .as_ref()
            .and_then(|s| s.termination_grace_period_seconds))
        .unwrap_or(30)
}

pub(super) fn ignore_missing(r: Result<(), cri::CriError>) -> Result<(), EdgedError> {
    match r {
        Err(e) if e.is_not_found() => Ok(()),
        other => Ok(other?),
    }
}

/// Makes an ephemeral container see the processes of container `target` (running in
/// `sandbox`), as `kubectl debug --target` asks; without such a container it gets its own.
fn share_target_pids(
    config: &mut cri::api::ContainerConfig,
    observed: &crate::plan::Observed,
    target: &str,
    sandbox: &str,
) {
    let running = crate::plan::latest(observed, target, Some(sandbox))
        .filter(|c| matches!(c.state, crate::plan::State::Running { .. }));
    let Some(target) = running else { return };
    let linux = config.linux.get_or_insert_with(Default::default);
    let context = linux.security_context.get_or_insert_with(Default::default);
    let namespaces = context
        .namespace_options
        .get_or_insert_with(Default::default);
    namespaces.pid = cri::api::NamespaceMode::Target as i32;
    namespaces.target_id = target.id.clone();
}
