//! The objects the control plane itself keeps in place, as kube-apiserver and
//! kube-controller-manager do: the `default` ServiceAccount of every namespace (the
//! serviceaccounts controller), and the `default/kubernetes` Service with its Endpoints and
//! EndpointSlice naming the API's own address (the apiserver's endpoint reconciler), and the
//! `kube-root-ca.crt` ConfigMaps ([`crate::rootca`]). Each is made at start, and put back when it
//! is deleted; one follower of the store drives them all (each follower costs the store's
//! watch fan-out on every write).

use std::net::SocketAddr;
use std::time::Duration;

use apimachinery::ApiError;
use kapi::{Api, User, WriteRequest};
use objstore::{EventKind, ListOptions, StoreError, WatchEvent, WatchOptions};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::{MASTERS, rootca};

/// Wait before following again after the watch failed.
const RETRY: Duration = Duration::from_secs(1);
/// The Service, Endpoints and EndpointSlice clients in pods find the API by.
const KUBERNETES: &str = "kubernetes";

/// Where the API is: the `kubernetes` Service's cluster IP, and the address it serves on; and
/// the CA clients in pods trust it by.
#[derive(Clone, Debug)]
pub(crate) struct ApiAddress {
    pub(crate) service_ip: String,
    pub(crate) serving: SocketAddr,
    pub(crate) ca_pem: String,
}

/// Keeps the objects in place until `shutdown`.
pub(crate) async fn keep(api: Api, address: ApiAddress, shutdown: CancellationToken) {
    let follow = api.store.follow(
        "kept objects",
        WatchOptions::from_revision(0),
        RETRY,
        || everything(&api, &address),
        |event| on_change(&api, &address, event),
    );
    tokio::select! {
        _ = shutdown.cancelled() => {}
        _ = follow => {}
    }
}

/// Makes the `kubernetes` Service and its endpoints, and every namespace's `default`
/// ServiceAccount, where missing.
pub(crate) async fn everything(api: &Api, address: &ApiAddress) -> Result<(), StoreError> {
    ensure_kubernetes(api, address).await;
    rootca::everywhere(api, &address.ca_pem).await?;
    let namespaces = api.store.list(ListOptions::new("namespaces")).await?;
    for ns in &namespaces.items {
        ensure_default_account(api, &ns.key.name).await;
    }
    Ok(())
}

async fn on_change(api: &Api, address: &ApiAddress, event: WatchEvent) {
    rootca::on_change(api, &address.ca_pem, &event).await;
    let key = &event.object.key;
    let deleted = event.kind == EventKind::Deleted;
    match key.resource.as_str() {
        "namespaces" if event.kind == EventKind::Added => {
            ensure_default_account(api, &key.name).await
        }
        "serviceaccounts" if deleted && key.name == "default" => {
            ensure_default_account(api, &key.namespace).await
        }
        "services" | "endpoints" | "endpointslices.discovery.k8s.io"
            if deleted && key.namespace == "default" && key.name == KUBERNETES =>
        {
            ensure_kubernetes(api, address).await
        }
        _ => {}
    }
}

async fn ensure_default_account(api: &Api, namespace: &str) {
    let account = json!({
        "apiVersion": "v1", "kind": "ServiceAccount",
        "metadata": {"name": "default", "namespace": namespace},
    });
    ensure(api, ("", "v1", "serviceaccounts"), namespace, account).await;
}

pub(crate) async fn ensure_kubernetes(api: &Api, address: &ApiAddress) {
    let port = address.serving.port();
    let service = json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": KUBERNETES, "namespace": "default",
                     "labels": {"component": "apiserver", "provider": "kubernetes"}},
        "spec": {"type": "ClusterIP", "clusterIP": address.service_ip,
                 "ports": [{"name": "https", "protocol": "TCP", "port": 443, "targetPort": port}]},
    });
    ensure(api, ("", "v1", "services"), "default", service).await;
    let ip = endpoint_ip(address.serving);
    let endpoints = json!({
        "apiVersion": "v1", "kind": "Endpoints",
        "metadata": {"name": KUBERNETES, "namespace": "default",
                     "labels": {"endpointslice.kubernetes.io/skip-mirror": "true"}},
        "subsets": [{"addresses": [{"ip": ip}],
                     "ports": [{"name": "https", "port": port, "protocol": "TCP"}]}],
    });
    ensure(api, ("", "v1", "endpoints"), "default", endpoints).await;
    let family = if ip.contains(':') { "IPv6" } else { "IPv4" };
    let slice = json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": KUBERNETES, "namespace": "default",
                     "labels": {"kubernetes.io/service-name": KUBERNETES}},
        "addressType": family,
        "endpoints": [{"addresses": [ip], "conditions": {"ready": true}}],
        "ports": [{"name": "https", "port": port, "protocol": "TCP"}],
    });
    let slices = ("discovery.k8s.io", "v1", "endpointslices");
    ensure(api, slices, "default", slice).await;
}

/// The address clients reach the API on: the serving address, or loopback when it serves on
/// every address.
fn endpoint_ip(serving: SocketAddr) -> String {
    match serving.ip() {
        ip if ip.is_unspecified() && ip.is_ipv6() => "::1".into(),
        ip if ip.is_unspecified() => "127.0.0.1".into(),
        ip => ip.to_string(),
    }
}

/// Creates `obj` in `namespace` as the control plane; one that exists already (409), or whose
/// namespace is gone or terminating (404, 403), is left: the next event decides.
async fn ensure(api: &Api, resource: (&str, &str, &str), namespace: &str, obj: Value) {
    let what = format!("{} {namespace}/{}", resource.2, obj["metadata"]["name"]);
    match create(api, resource, namespace, obj).await {
        Ok(()) => tracing::info!(object = %what, "kept object made"),
        Err(e) if matches!(e.code, 403 | 404 | 409) => {}
        Err(e) => tracing::warn!(object = %what, error = %e, "making a kept object"),
    }
}

/// Creates `obj` as the control plane (`system:masters`).
async fn create(
    api: &Api,
    (group, version, plural): (&str, &str, &str),
    namespace: &str,
    obj: Value,
) -> Result<(), ApiError> {
    let info = api
        .registry
        .get(group, version, plural)
        .ok_or_else(|| ApiError::internal(format!("{plural} are not served")))?;
    let controller = User {
        name: "system:kube-controller-manager".into(),
        groups: vec![MASTERS.into()],
    };
    let req = WriteRequest {
        info: &info,
        namespace,
        name: "",
        subresource: None,
        user: &controller,
        dry_run: false,
        owner: Default::default(),
        collection: false,
    };
    api.backend.create(&req, obj).await.map(drop)
}
