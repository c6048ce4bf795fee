//! Keeps the [`Zone`] in line with the edge store: a full read of the Services and
//! EndpointSlices, then every change from the store's change log (never a read per query).
//! EndpointSlices pass through lwproxy's site filter ([`lwproxy::Closure`]) first, so a closed
//! headless Service answers with the endpoints this node may reach; when the filter's inputs
//! change (its epoch moves) the zone is read again in full.

use std::sync::{Arc, RwLock, RwLockWriteGuard};
use std::time::Duration;

use objstore::{EventKind, ListOptions, Store, StoreError, StoredObject, WatchEvent, WatchOptions};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::objects::{Service, Slice};
use crate::zone::Zone;

/// The store collections the zone is made from.
pub(crate) const SERVICES: &str = "services";
pub(crate) const ENDPOINT_SLICES: &str = "endpointslices.discovery.k8s.io";

/// How long the follower waits before reading again after its watch failed.
const RETRY: Duration = Duration::from_secs(1);

/// The zone, shared between the follower (one writer) and the query handlers.
pub(crate) type SharedZone = Arc<RwLock<Zone>>;

/// Follows the store into `zone` until `shutdown`.
pub(crate) async fn follow(store: Store, zone: SharedZone, shutdown: CancellationToken) {
    let closure = lwproxy::Closure::new(store.clone());
    tokio::spawn(closure.clone().follow(shutdown.clone()));
    let mut epochs = closure.epochs();
    loop {
        let following = follow_once(&store, &zone, &closure);
        tokio::select! {
            biased;
            _ = shutdown.cancelled() => return,
            changed = epochs.changed() => if changed.is_err() {
                return;
            },
            () = following => return, // the store closed
        }
        tracing::debug!("the site filter changed; reading the cluster zone again");
    }
}

/// One full read of the store and the changes after it.
async fn follow_once(store: &Store, zone: &SharedZone, closure: &Arc<lwproxy::Closure>) {
    let opts = WatchOptions::from_revision(0)
        .predicate(|o| o.key.resource == SERVICES || o.key.resource == ENDPOINT_SLICES);
    let pass = || read_all(store, zone, closure);
    let apply = |event: WatchEvent| async move {
        let deleted = event.kind == EventKind::Deleted;
        if let Err(e) = apply(zone, closure, &event.object, deleted).await {
            tracing::warn!(error = %e, key = %event.object.key, "updating the cluster zone failed");
        }
    };
    store.follow("edgedns zone", opts, RETRY, pass, apply).await;
}

/// Reads every Service and EndpointSlice into an empty zone.
async fn read_all(
    store: &Store,
    zone: &SharedZone,
    closure: &lwproxy::Closure,
) -> Result<(), StoreError> {
    let list = |resource: &str| {
        store.list(ListOptions {
            resource: resource.into(),
            ..ListOptions::default()
        })
    };
    let services = list(SERVICES).await?;
    let slices = list(ENDPOINT_SLICES).await?;
    let mut parsed = Vec::with_capacity(slices.items.len());
    let mut place = None;
    for slice in &slices.items {
        parsed.push((slice, filtered_slice(closure, slice, &mut place).await?));
    }
    let mut zone = write(zone);
    zone.clear();
    for svc in &services.items {
        let service = Service::from_json(&json(svc));
        zone.set_service(&svc.key.namespace, &svc.key.name, Some(service));
    }
    for (obj, slice) in parsed {
        zone.set_slice(&obj.key.namespace, &obj.key.name, slice);
    }
    tracing::debug!(
        services = services.items.len(),
        slices = slices.items.len(),
        "cluster zone read"
    );
    Ok(())
}

/// One change of a Service or EndpointSlice.
async fn apply(
    zone: &SharedZone,
    closure: &lwproxy::Closure,
    obj: &StoredObject,
    deleted: bool,
) -> Result<(), StoreError> {
    let (ns, name) = (&obj.key.namespace, &obj.key.name);
    if obj.key.resource == SERVICES {
        let service = (!deleted).then(|| Service::from_json(&json(obj)));
        write(zone).set_service(ns, name, service);
        return Ok(());
    }
    let slice = match deleted {
        true => None,
        false => filtered_slice(closure, obj, &mut None).await?,
    };
    write(zone).set_slice(ns, name, slice);
    Ok(())
}

/// A slice as this node is shown it (lwproxy's site filter).
async fn filtered_slice(
    closure: &lwproxy::Closure,
    obj: &StoredObject,
    place: &mut Option<lwproxy::Place>,
) -> Result<Option<Slice>, StoreError> {
    let mut value = json(obj);
    closure
        .filter(lwproxy::Served::EndpointSlices, &mut value, place)
        .await?;
    Ok(Slice::from_json(&value))
}

fn json(obj: &StoredObject) -> Value {
    serde_json::from_slice(&obj.value).unwrap_or_else(|e| {
        tracing::warn!(key = %obj.key, error = %e, "stored object is not JSON; skipped");
        Value::Null
    })
}

fn write(zone: &SharedZone) -> RwLockWriteGuard<'_, Zone> {
    zone.write().unwrap_or_else(|e| e.into_inner())
}
