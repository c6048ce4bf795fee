//! sites: the cloud controllers that exist because this is an edge platform (what KubeEdge's
//! controller-manager runs), as a beehive module of cloudcore. Unlike `controllers` (the
//! embedded control plane's stand-ins for kube-controller-manager), they run in both modes:
//! against a real cluster and against the embedded control plane, through the `kube` crate.
//! Today: NodeGroup ([`nodegroup`]) and EdgeApplication ([`edgeapp`]) of
//! `apps.kubeedge.io/v1alpha1`, whose CustomResourceDefinitions the module applies at start.
#![forbid(unsafe_code)]

mod config;
pub mod edgeapp;
pub mod nodegroup;

use std::time::Duration;

use beehive::{Context, Mailbox, Module, ModuleError};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, Patch, PatchParams};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

pub use config::{Config, Toggle};

/// Module name.
pub const NAME: &str = "sites";

/// The API group and version of NodeGroup and EdgeApplication (KubeEdge's).
pub const API_VERSION: &str = "apps.kubeedge.io/v1alpha1";

/// The label a NodeGroup puts on its member nodes, valued with the group's name.
pub const BELONGING_TO: &str = "apps.kubeedge.io/belonging-to";

/// The annotation that closes a Service's traffic to the group of the node serving it.
pub const SERVICE_TOPOLOGY: &str = "apps.kubeedge.io/service-topology";

/// [`SERVICE_TOPOLOGY`]'s value: endpoints in the client node's NodeGroup only.
pub const RANGE_NODEGROUP: &str = "range-nodegroup";

/// The field manager of what the module applies.
pub const FIELD_MANAGER: &str = "cloudcore-sites";

/// The site controllers module.
pub struct Sites {
    config: Config,
    client: kube::Client,
}

/// Why the module could not do something.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A CustomResourceDefinition was refused.
    #[error("applying the CustomResourceDefinition {name}: {source}")]
    Crd {
        name: String,
        #[source]
        source: kube::Error,
    },
}

// === impl Sites ===

impl Sites {
    /// The site controllers of the API `client` reaches.
    pub fn new(config: Config, client: kube::Client) -> Sites {
        Sites { config, client }
    }

    /// The CustomResourceDefinitions of the enabled controllers.
    fn crds(&self) -> Vec<CustomResourceDefinition> {
        let mut crds = Vec::new();
        if self.config.node_group.enable {
            crds.extend(nodegroup::crd());
        }
        if self.config.edge_application.enable {
            crds.extend(edgeapp::crd());
        }
        crds
    }
}

/// Applies `crds` (server-side apply, so a user's own copy of KubeEdge's CRDs is taken over).
pub async fn apply_crds(
    client: &kube::Client,
    crds: &[CustomResourceDefinition],
) -> Result<(), Error> {
    let api = Api::<CustomResourceDefinition>::all(client.clone());
    let params = PatchParams::apply(FIELD_MANAGER).force();
    for crd in crds {
        let name = crd.metadata.name.clone().unwrap_or_default();
        api.patch(&name, &params, &Patch::Apply(crd))
            .await
            .map_err(|source| Error::Crd { name, source })?;
    }
    Ok(())
}

#[beehive::async_trait]
impl Module for Sites {
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
        let crds = self.crds();
        loop {
            match apply_crds(&self.client, &crds).await {
                Ok(()) => break,
                Err(e) => tracing::warn!(error = %e, "retrying in 2s"),
            }
            tokio::select! {
                _ = shutdown.cancelled() => return Ok(()),
                _ = tokio::time::sleep(Duration::from_secs(2)) => {}
            }
        }
        let tasks = TaskTracker::new();
        let stop = shutdown.child_token();
        if self.config.node_group.enable {
            tasks.spawn(nodegroup::run(self.client.clone(), stop.clone()));
        }
        if self.config.edge_application.enable {
            tasks.spawn(edgeapp::run(self.client.clone(), stop.clone()));
        }
        mailbox.ignore_until(&shutdown).await;
        stop.cancel();
        tasks.close();
        tasks.wait().await;
        Ok(())
    }
}
