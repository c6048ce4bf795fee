//! The NodeGroup controller: a site's member nodes, labelled and reported.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use tokio_util::sync::CancellationToken;

/// The CustomResourceDefinition of NodeGroup.
pub fn crd() -> Option<CustomResourceDefinition> {
    None
}

/// Reconciles NodeGroups until shutdown.
pub async fn run(_client: kube::Client, shutdown: CancellationToken) {
    shutdown.cancelled().await
}
