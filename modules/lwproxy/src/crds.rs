//! Custom resources come and go with the CRDs the cloud sends down: the registry follows the
//! CRDs held in the edge store, so discovery and the served paths match local state offline.

use std::collections::HashSet;
use std::time::Duration;

use kapi::Registry;
use objstore::{EventKind, ListOptions, Store, StoreError, WatchOptions};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

/// Where CRDs are stored (`plural.group` of the CRD resource itself).
const STORE_RESOURCE: &str = "customresourcedefinitions.apiextensions.k8s.io";
/// Wait before following again after the watch failed.
const RETRY: Duration = Duration::from_secs(1);

/// Keeps `registry` in line with the stored CRDs until `shutdown`: a full pass, then every
/// change from the change log; after a watch failure (lagged, expired), a full pass again.
pub(crate) async fn follow(store: Store, registry: Registry, shutdown: CancellationToken) {
    let follow = store.follow(
        "CRD follower",
        WatchOptions::from_revision(0).resource(STORE_RESOURCE),
        RETRY,
        || resync(&store, &registry),
        |event| {
            let name = &event.object.key.name;
            match event.kind {
                EventKind::Deleted => unregister(&registry, name),
                EventKind::Added | EventKind::Modified => {
                    register(&registry, name, &event.object.value)
                }
            }
            std::future::ready(())
        },
    );
    tokio::select! {
        _ = shutdown.cancelled() => {}
        _ = follow => {}
    }
}

/// Serves the resources of every stored CRD and of no other.
async fn resync(store: &Store, registry: &Registry) -> Result<(), StoreError> {
    let listed = store.list(ListOptions::new(STORE_RESOURCE)).await?;
    let held: HashSet<String> = listed.items.iter().map(|o| o.key.name.clone()).collect();
    for info in registry.all() {
        if info.custom && !held.contains(&info.store_resource()) {
            registry.remove(&info.group, &info.plural);
        }
    }
    kapi::local::register_existing_crds(store, registry).await?;
    Ok(())
}

/// Serves the resources of CRD `name` (`plural.group`) held as `value`.
pub(crate) fn register(registry: &Registry, name: &str, value: &[u8]) {
    let resources = match serde_json::from_slice::<Value>(value)
        .map_err(|e| e.to_string())
        .and_then(|crd| apimachinery::catalog::from_crd(&crd).map_err(|e| e.to_string()))
    {
        Ok(resources) => resources,
        Err(e) => return tracing::warn!(crd = name, error = %e, "CRD held but not served"),
    };
    // Versions the CRD no longer serves go; the others are replaced in place.
    let stale = registry.all().iter().any(|r| {
        r.custom && r.store_resource() == name && !resources.iter().any(|n| n.version == r.version)
    });
    if stale {
        unregister(registry, name);
    }
    registry.upsert(resources);
}

/// Stops serving the resources of CRD `name` (`plural.group`).
fn unregister(registry: &Registry, name: &str) {
    if let Some((plural, group)) = name.split_once('.') {
        registry.remove(group, plural);
    }
}
