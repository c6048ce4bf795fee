//! The EdgeApplication controller: one copy of an application per target site.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use tokio_util::sync::CancellationToken;

/// The CustomResourceDefinition of EdgeApplication.
pub fn crd() -> Option<CustomResourceDefinition> {
    None
}

/// Reconciles EdgeApplications until shutdown.
pub async fn run(_client: kube::Client, shutdown: CancellationToken) {
    shutdown.cancelled().await
}
