//! The clusterrole-aggregation controller: whenever a ClusterRole changes, every aggregated
//! ClusterRole's rules are set to the union of the roles its selectors pick
//! ([`apimachinery::rbac::aggregate`]). A write that loses a race is redone on the event the
//! winning write makes.

use std::time::Duration;

use apimachinery::ApiError;
use apimachinery::rbac::aggregate;
use kapi::{Api, WriteRequest};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::CLUSTER_ROLES;
use super::bootstrap::apiserver_user;

/// How long to wait before watching again after the watch failed.
const RETRY: Duration = Duration::from_millis(500);

/// Aggregates now, then after every ClusterRole change until `shutdown`.
pub(crate) async fn run(api: Api, shutdown: CancellationToken) {
    loop {
        let from = api.store.revision();
        if let Err(e) = settle(&api).await {
            tracing::warn!(error = %e, "aggregating cluster roles");
        }
        let opts = objstore::WatchOptions::from_revision(from).resource(CLUSTER_ROLES);
        let mut watcher = match api.store.watch(opts) {
            Ok(w) => w,
            Err(e) => {
                tracing::warn!(error = %e, "watching cluster roles");
                tokio::select! {
                    _ = shutdown.cancelled() => return,
                    _ = tokio::time::sleep(RETRY) => continue,
                }
            }
        };
        loop {
            let event = tokio::select! {
                biased;
                _ = shutdown.cancelled() => return,
                event = watcher.next() => event,
            };
            match event {
                Some(Ok(_)) => {
                    if let Err(e) = settle(&api).await {
                        tracing::warn!(error = %e, "aggregating cluster roles");
                    }
                }
                Some(Err(e)) => {
                    tracing::debug!(error = %e, "the cluster role watch ended; watching again");
                    break;
                }
                None => return,
            }
        }
    }
}

/// Writes the aggregated ClusterRoles whose rules are not yet the union they should be.
pub(crate) async fn settle(api: &Api) -> Result<(), ApiError> {
    let opts = objstore::ListOptions {
        resource: CLUSTER_ROLES.into(),
        ..objstore::ListOptions::default()
    };
    let listed = api
        .store
        .list(opts)
        .await
        .map_err(|e| ApiError::internal(e.to_string()))?;
    let roles: Vec<Value> = listed
        .items
        .iter()
        .filter_map(|item| serde_json::from_slice(&item.value).ok())
        .collect();
    let info = api
        .registry
        .get(apimachinery::rbac::GROUP, "v1", "clusterroles")
        .ok_or_else(|| ApiError::internal("clusterroles are not served"))?;
    let user = apiserver_user();
    for (name, rules) in aggregate(&roles) {
        let Some(mut role) = roles
            .iter()
            .find(|r| r["metadata"]["name"] == name.as_str())
            .cloned()
        else {
            continue;
        };
        role["rules"] =
            serde_json::to_value(&rules).map_err(|e| ApiError::internal(e.to_string()))?;
        let req = WriteRequest {
            info: &info,
            namespace: "",
            name: &name,
            subresource: None,
            user: &user,
            dry_run: false,
            owner: Default::default(),
            collection: false,
        };
        match api.backend.update(&req, role).await {
            Ok(_) => tracing::debug!(name, "aggregated a cluster role"),
            // Changed meanwhile: its event brings another pass.
            Err(e) if e.code == 409 || e.code == 404 => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}
