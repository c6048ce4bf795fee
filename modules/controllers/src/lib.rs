//! controllers: what a real cluster's kube-scheduler and kube-controller-manager do, for the
//! embedded control plane, as a beehive module of cloudcore. Each controller talks to the API
//! only through the `kube` crate, with watches and the same REST layer as any client, so a
//! restart relists and converges. Today: the scheduler ([`scheduler`]) the Deployment
//! ([`deployment`]), DaemonSet ([`daemonset`]), StatefulSet ([`statefulset`], its revisions in
//! ControllerRevisions: [`history`]), Job ([`job`]), CronJob ([`cronjob`]) and ReplicaSet
//! ([`replicaset`]) controllers, the EndpointSlice/Endpoints
//! controller ([`endpoints`]) the garbage collector ([`gc`]), node lifecycle
//! without eviction ([`nodelifecycle`]), the CertificateSigningRequest signer
//! ([`csrsigning`]) and the HorizontalPodAutoscaler controller ([`hpa`]).
//!
//! They all run on [`reconciler`]: one watch and one cache per resource for the whole module
//! (pods kept once, slim, for the scheduler and every workload controller), controller-owner
//! indexes instead of scans, work queues whose reconciles return an [`reconciler::Action`] and
//! whose failures back off exponentially. The caches are the module's own unless the process
//! shares its [`reconciler::Stores`] ([`Controllers::with_stores`]).
#![forbid(unsafe_code)]

mod config;
pub mod cronjob;
pub mod csrsigning;
pub mod daemonset;
pub mod deployment;
pub mod endpoints;
pub mod events;
pub mod gc;
pub mod history;
pub mod hpa;
pub mod informer;
pub mod job;
pub mod nodelifecycle;
pub mod replicaset;
pub mod scheduler;
pub mod statefulset;
mod topology;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use beehive::{Context, Mailbox, Module, ModuleError};
use reconciler::Stores;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

pub use config::{Config, SchedulerConfig};

/// Module name.
pub const NAME: &str = "controllers";

/// The controllers module.
pub struct Controllers {
    config: Config,
    client: kube::Client,
    signer: Option<std::sync::Arc<pki::Ca>>,
    /// The shared caches, when the process shares them with other modules.
    stores: Option<Stores>,
    liveness: Liveness,
}

/// Whether the scheduler and the controllers are running, for the control plane's
/// `componentstatuses` (cheap to clone).
#[derive(Clone, Default)]
pub struct Liveness {
    /// Scheduler loops running (0 or 1).
    scheduler: Arc<AtomicUsize>,
    /// Controller loops running.
    controllers: Arc<AtomicUsize>,
    /// Controller loops started by the module's run (0 when it is not running).
    expected: Arc<AtomicUsize>,
}

/// Counts one running loop while it lives.
struct Running(Arc<AtomicUsize>);

// === impl Controllers ===

impl Controllers {
    /// The controllers of the API `client` reaches.
    pub fn new(config: Config, client: kube::Client) -> Controllers {
        Controllers {
            config,
            client,
            signer: None,
            stores: None,
            liveness: Liveness::default(),
        }
    }

    /// Whether the scheduler and the controllers are running.
    pub fn liveness(&self) -> Liveness {
        self.liveness.clone()
    }

    /// Runs one controller loop on `tasks`, counted as running while it lives.
    fn spawn_controller<F>(&self, tasks: &TaskTracker, run: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        self.liveness.expected.fetch_add(1, Ordering::AcqRel);
        let running = Running::new(&self.liveness.controllers);
        tasks.spawn(async move {
            let _running = running;
            run.await
        });
    }

    /// Reads the cluster through `stores` (one watch and cache per resource, shared with the
    /// process's other controllers) instead of caches of its own.
    pub fn with_stores(mut self, stores: Stores) -> Controllers {
        self.stores = Some(stores);
        self
    }

    /// Signs CertificateSigningRequests for kube's signers with `ca` ([`csrsigning`]): the CA
    /// the API server checks client certificates against.
    pub fn with_signer(mut self, ca: std::sync::Arc<pki::Ca>) -> Controllers {
        self.signer = Some(ca);
        self
    }
}

#[beehive::async_trait]
impl Module for Controllers {
    fn name(&self) -> &str {
        NAME
    }

    fn group(&self) -> &str {
        NAME
    }

    fn enabled(&self) -> bool {
        self.config.enable
    }

    async fn run(
        &self,
        _ctx: Context,
        mailbox: &mut Mailbox,
        shutdown: CancellationToken,
    ) -> Result<(), ModuleError> {
        let tasks = tokio_util::task::TaskTracker::new();
        let stop = shutdown.child_token();
        // One watch and cache per resource for every controller here; our own when the
        // process gave none, stopped with us.
        let own = self.stores.is_none();
        let stores = self
            .stores
            .clone()
            .unwrap_or_else(|| Stores::new(self.client.clone(), stop.clone()));
        let recorder = |component: &'static str| {
            let (events, writer) =
                events::Recorder::new(self.client.clone(), component, stop.clone());
            tasks.spawn(writer);
            events
        };
        if self.config.scheduler.enable {
            let run = scheduler::run(
                stores.clone(),
                self.config.scheduler.bind_concurrency,
                recorder(scheduler::NAME),
                stop.clone(),
            );
            let running = Running::new(&self.liveness.scheduler);
            tasks.spawn(async move {
                let _running = running;
                if let Err(e) = run.await {
                    tracing::error!(error = %e, "the scheduler stopped");
                }
            });
        }
        self.spawn_controller(
            &tasks,
            replicaset::run(stores.clone(), recorder(replicaset::NAME), stop.clone()),
        );
        self.spawn_controller(&tasks, endpoints::run(stores.clone(), stop.clone()));
        self.spawn_controller(&tasks, gc::run(stores.clone(), stop.clone()));
        self.spawn_controller(
            &tasks,
            job::run(stores.clone(), recorder(job::NAME), stop.clone()),
        );
        self.spawn_controller(
            &tasks,
            cronjob::run(stores.clone(), recorder(cronjob::NAME), stop.clone()),
        );
        self.spawn_controller(
            &tasks,
            daemonset::run(stores.clone(), recorder(daemonset::NAME), stop.clone()),
        );
        self.spawn_controller(
            &tasks,
            nodelifecycle::run(
                stores.clone(),
                self.config.node_monitor_grace_period,
                stop.clone(),
            ),
        );
        self.spawn_controller(
            &tasks,
            statefulset::run(stores.clone(), recorder(statefulset::NAME), stop.clone()),
        );
        self.spawn_controller(
            &tasks,
            deployment::run(stores.clone(), recorder(deployment::NAME), stop.clone()),
        );
        self.spawn_controller(
            &tasks,
            hpa::run(
                stores.clone(),
                self.config.horizontal_pod_autoscaler.clone(),
                recorder(hpa::NAME),
                stop.clone(),
            ),
        );
        if let Some(ca) = &self.signer {
            self.spawn_controller(
                &tasks,
                csrsigning::run(
                    stores.clone(),
                    ca.clone(),
                    self.config.cluster_signing_duration,
                    stop.clone(),
                ),
            );
        }
        mailbox.ignore_until(&shutdown).await;
        self.liveness.expected.store(0, Ordering::Release);
        stop.cancel();
        tasks.close();
        tasks.wait().await;
        if own {
            stores.stopped().await;
        }
        Ok(())
    }
}

// === impl Liveness ===

impl Liveness {
    /// `Ok` while the scheduler runs, else why not.
    pub fn scheduler(&self) -> Result<(), String> {
        match self.scheduler.load(Ordering::Acquire) {
            0 => Err("the scheduler is not running".into()),
            _ => Ok(()),
        }
    }

    /// `Ok` while every controller loop runs, else how many stopped.
    pub fn controllers(&self) -> Result<(), String> {
        let expected = self.expected.load(Ordering::Acquire);
        let running = self.controllers.load(Ordering::Acquire);
        match (expected, running) {
            (0, _) => Err("the controllers are not running".into()),
            (e, r) if r >= e => Ok(()),
            (e, r) => Err(format!("{} of {e} controller loops stopped", e - r)),
        }
    }
}

// === impl Running ===

impl Running {
    fn new(count: &Arc<AtomicUsize>) -> Running {
        count.fetch_add(1, Ordering::AcqRel);
        Running(count.clone())
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod liveness_tests {
    use super::*;

    #[test]
    fn liveness_counts_running_loops_and_says_how_many_stopped() {
        let live = Liveness::default();
        assert!(live.scheduler().is_err());
        assert!(live.controllers().is_err());
        live.expected.store(2, Ordering::Release);
        let a = Running::new(&live.controllers);
        let b = Running::new(&live.controllers);
        let s = Running::new(&live.scheduler);
        assert_eq!(live.controllers(), Ok(()));
        assert_eq!(live.scheduler(), Ok(()));
        drop(b);
        drop(s);
        assert_eq!(
            live.controllers(),
            Err("1 of 2 controller loops stopped".to_string())
        );
        assert!(live.scheduler().is_err());
        drop(a);
    }
}
