//! The NodeGroup controller (KubeEdge's `apps.kubeedge.io/v1alpha1` NodeGroup): a site's
//! member nodes, named in `spec.nodes` or selected by `spec.matchLabels`, are labelled
//! [`BELONGING_TO`](crate::BELONGING_TO)`=<group>` (and [`TOPOLOGY_ZONE`]`=<group>` with
//! `topologyEnabled`); a node belongs to at most one group; a node that leaves a group loses
//! the labels and the group's pods on it; `status.nodeStatuses` reports every member's
//! readiness and every failed claim.
//!
//! [`types`] holds the API types and the CRD, `plan` the decisions (no I/O), `controller` the
//! kube-runtime controller that applies them.

mod controller;
mod plan;
pub mod types;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use tokio_util::sync::CancellationToken;

pub use controller::FINALIZER;
pub use types::{
    NodeGroup, NodeGroupSpec, NodeGroupStatus, NodeStatus, ReadyStatus, SelectionStatus,
};

/// The well-known zone label, set to the group's name on members when `topologyEnabled`.
pub const TOPOLOGY_ZONE: &str = "topology.kubernetes.io/zone";

/// The CustomResourceDefinition of NodeGroup.
pub fn crd() -> Option<CustomResourceDefinition> {
    Some(types::crd())
}

/// Reconciles NodeGroups until shutdown.
pub async fn run(client: kube::Client, shutdown: CancellationToken) {
    controller::run(client, shutdown).await
}
