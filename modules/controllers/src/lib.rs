//! controllers: what a real cluster's kube-scheduler and kube-controller-manager do, for the
//! embedded control plane, as a beehive module of cloudcore. Each controller talks to the API
//! only through the `kube` crate, with watches and the same REST layer as any client, so a
//! restart relists and converges. Today: the scheduler ([`scheduler`]) the Deployment
//! ([`deployment`]), DaemonSet ([`daemonset`]), StatefulSet ([`statefulset`], its revisions in
//! ControllerRevisions: [`history`]), Job ([`job`]), CronJob ([`cronjob`]) and ReplicaSet
//! ([`replicaset`]) controllers, the EndpointSlice/Endpoints
//! controller ([`endpoints`]) the garbage collector ([`gc`]), node lifecycle
//! without eviction ([`nodelifecycle`]) and the CertificateSigningRequest signer
//! ([`csrsigning`]).
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
pub mod informer;
pub mod job;
pub mod nodelifecycle;
pub mod replicaset;
pub mod scheduler;
pub mod statefulset;

use beehive::{Context, Mailbox, Module, ModuleError};
use tokio_util::sync::CancellationToken;

pub use config::{Config, SchedulerConfig};

/// Module name.
pub const NAME: &str = "controllers";

/// The controllers module.
pub struct Controllers {
    config: Config,
    client: kube::Client,
    signer: Option<std::sync::Arc<pki::Ca>>,
}

// === impl Controllers ===

impl Controllers {
    /// The controllers of the API `client` reaches.
    pub fn new(config: Config, client: kube::Client) -> Controllers {
        Controllers {
            config,
            client,
            signer: None,
        }
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
        let recorder = |component: &'static str| {
            let (events, writer) =
                events::Recorder::new(self.client.clone(), component, stop.clone());
            tasks.spawn(writer);
            events
        };
        if self.config.scheduler.enable {
            let run = scheduler::run(
                self.client.clone(),
                self.config.scheduler.bind_concurrency,
                recorder(scheduler::NAME),
                stop.clone(),
            );
            tasks.spawn(async move {
                if let Err(e) = run.await {
                    tracing::error!(error = %e, "the scheduler stopped");
                }
            });
        }
        tasks.spawn(replicaset::run(
            self.client.clone(),
            recorder(replicaset::NAME),
            stop.clone(),
        ));
        tasks.spawn(endpoints::run(self.client.clone(), stop.clone()));
        tasks.spawn(gc::run(self.client.clone(), stop.clone()));
        tasks.spawn(job::run(
            self.client.clone(),
            recorder(job::NAME),
            stop.clone(),
        ));
        tasks.spawn(cronjob::run(
            self.client.clone(),
            recorder(cronjob::NAME),
            stop.clone(),
        ));
        tasks.spawn(daemonset::run(
            self.client.clone(),
            recorder(daemonset::NAME),
            stop.clone(),
        ));
        tasks.spawn(nodelifecycle::run(
            self.client.clone(),
            self.config.node_monitor_grace_period,
            stop.clone(),
        ));
        tasks.spawn(statefulset::run(
            self.client.clone(),
            recorder(statefulset::NAME),
            stop.clone(),
        ));
        tasks.spawn(deployment::run(
            self.client.clone(),
            recorder(deployment::NAME),
            stop.clone(),
        ));
        if let Some(ca) = &self.signer {
            tasks.spawn(csrsigning::run(
                self.client.clone(),
                ca.clone(),
                self.config.cluster_signing_duration,
                stop.clone(),
            ));
        }
        drain(mailbox, &shutdown).await;
        stop.cancel();
        tasks.close();
        tasks.wait().await;
        Ok(())
    }
}

/// Ignores messages until shutdown.
async fn drain(mailbox: &mut Mailbox, shutdown: &CancellationToken) {
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            m = mailbox.recv() => if m.is_none() { return },
        }
    }
}
