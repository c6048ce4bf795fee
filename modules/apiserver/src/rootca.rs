//! The `kube-root-ca.crt` ConfigMap in every namespace, holding the control plane's CA (what
//! the projected `kube-api-access-*` volume of a pod mounts to trust the API): created for each
//! namespace there is and each one created later, and put back if it is changed or deleted
//! (kube-controller-manager's root-ca-cert-publisher does the same). Driven by
//! [`crate::kept`]'s one follower of the store.

use apimachinery::ApiError;
use kapi::{Api, User, WriteRequest};
use objstore::{EventKind, ListOptions, StoreError, WatchEvent};
use serde_json::{Value, json};

use crate::MASTERS;

/// The ConfigMap's name.
pub const NAME: &str = "kube-root-ca.crt";
/// Its one key.
const KEY: &str = "ca.crt";

/// Every namespace gets the ConfigMap.
pub(crate) async fn everywhere(api: &Api, ca_pem: &str) -> Result<(), StoreError> {
    let namespaces = api.store.list(ListOptions::new("namespaces")).await?;
    for ns in &namespaces.items {
        ensure(api, &ns.key.name, ca_pem).await;
    }
    Ok(())
}

/// A namespace created, or the ConfigMap changed or deleted somewhere.
pub(crate) async fn on_change(api: &Api, ca_pem: &str, event: &WatchEvent) {
    let key = &event.object.key;
    match (key.resource.as_str(), event.kind) {
        ("namespaces", EventKind::Added) => ensure(api, &key.name, ca_pem).await,
        ("configmaps", _) if key.name == NAME => ensure(api, &key.namespace, ca_pem).await,
        _ => {}
    }
}

/// Creates the ConfigMap in `namespace`, or puts its content back.
async fn ensure(api: &Api, namespace: &str, ca_pem: &str) {
    let key = objstore::ObjKey::new("configmaps", namespace, NAME);
    let held = match api.store.get(&key).await {
        Ok(held) => held,
        Err(e) => return tracing::warn!(namespace, error = %e, "reading kube-root-ca.crt"),
    };
    let result = match held {
        Some(obj) => {
            let mut value: Value = serde_json::from_slice(&obj.value).unwrap_or_default();
            if value["data"][KEY] == ca_pem {
                return;
            }
            value["data"] = json!({ KEY: ca_pem });
            write(api, namespace, NAME, value, true).await
        }
        None => {
            let cm = json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": NAME, "namespace": namespace},
                "data": { KEY: ca_pem },
            });
            write(api, namespace, "", cm, false).await
        }
    };
    match result {
        Ok(()) => tracing::debug!(namespace, "kube-root-ca.crt published"),
        // Gone meanwhile, terminating, or written by someone else first: the next event decides.
        Err(e) if matches!(e.code, 403 | 404 | 409) => {
            tracing::debug!(namespace, error = %e, "kube-root-ca.crt not written")
        }
        Err(e) => tracing::warn!(namespace, error = %e, "writing kube-root-ca.crt"),
    }
}

async fn write(
    api: &Api,
    namespace: &str,
    name: &str,
    obj: Value,
    replace: bool,
) -> Result<(), ApiError> {
    let info = api
        .registry
        .get("", "v1", "configmaps")
        .ok_or_else(|| ApiError::internal("configmaps are not served"))?;
    let publisher = User {
        name: "system:kube-controller-manager".into(),
        groups: vec![MASTERS.into()],
    };
    let req = WriteRequest {
        info: &info,
        namespace,
        name,
        subresource: None,
        user: &publisher,
        dry_run: false,
        owner: Default::default(),
        collection: false,
    };
    match replace {
        true => api.backend.update(&req, obj).await.map(drop),
        false => api.backend.create(&req, obj).await.map(drop),
    }
}
