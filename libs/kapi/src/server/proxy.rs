//! The proxy subresources, as kube-apiserver serves them: `pods/<[scheme:]name[:port]>/proxy`,
//! `services/<[scheme:]name[:port]>/proxy` and `nodes/<[scheme:]name[:port]>/proxy`, each with
//! an optional `/<path>` sent on to the backend. Every method is proxied; it is authorized as
//! the verb it means (`get`, `create`, `update`, `patch`, `delete`) on the subresource.
//!
//! - a pod: its `status.podIP`, at the port named or else the first one its containers
//!   declare;
//! - a Service: a ready endpoint of the named port (a port number is looked up among the
//!   Service's ports) from its EndpointSlices, one whose target pod holds that address (as
//!   kube-apiserver proxies only to pods); successive requests start at the next endpoint;
//! - a node: with no port or the kubelet's, its kubelet API over the router's
//!   [`crate::nodes::Dialer`] (`/<path>` there: `stats/summary`, `metrics/resource`, `pods`,
//!   `healthz`; see [`super::streams`]), else answered as an unreachable kubelet; with another
//!   port, plain HTTP to the node's address.
//!
//! Reachability is decided by dialing: a backend that does not accept a TCP connection within
//! [`ProxyConfig::dial_timeout`] (an edge pod behind NAT, a pod gone) gets a 503 `Status`
//! naming the node it runs on; the tunnel to the edge will carry these later. Only `http`
//! backends are proxied (an `https:` one is a 503 saying so); upgrades (`Connection:
//! Upgrade`) are not carried; redirects and links in answers are not rewritten.
//!
//! Without a [`ProxyConfig`] (lwproxy), the request is parsed and the object looked up, then
//! answered as a kubelet that cannot be reached, as before.

mod location;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use apimachinery::ApiError;
use axum::body::Body;
use axum::http::request::Parts;
use axum::response::Response;
use hyper_util::rt::TokioIo;
use objstore::{Filter, ListOptions, ObjKey};
use serde_json::Value;

use super::Target;
use super::error::from_store;
use super::streams::{self, KubeletCall};
use super::subresource::unreachable_kubelet;
use crate::Api;
use crate::nodes::Dialer;
use location::{Backend, Id};

pub(crate) use location::{DROPPED, verb};

/// How the API server proxies; added to the router with [`with_proxy`].
#[derive(Debug)]
pub struct ProxyConfig {
    /// How long a backend has to accept a connection before it counts as unreachable.
    pub dial_timeout: Duration,
    /// Whether loopback addresses may be proxied to. kube-apiserver refuses them (they would
    /// reach the API server's own host); tests on one host turn this on.
    pub allow_loopback: bool,
    /// Where the next Service request starts among the ready endpoints.
    next: AtomicUsize,
}

/// `router` proxying the proxy subresources to pods, Services and nodes as `config` says.
pub fn with_proxy(router: axum::Router, config: ProxyConfig) -> axum::Router {
    router.layer(axum::Extension(Arc::new(config)))
}

// === impl ProxyConfig ===

impl ProxyConfig {
    pub fn new(dial_timeout: Duration, allow_loopback: bool) -> ProxyConfig {
        ProxyConfig {
            dial_timeout,
            allow_loopback,
            next: AtomicUsize::new(0),
        }
    }
}

/// Answers a proxy request for `target` (whose name is the `[scheme:]name[:port]` segment).
pub(crate) async fn serve(
    api: &Api,
    target: &Target,
    parts: Parts,
    body: Body,
) -> Result<Response, ApiError> {
    let config = parts.extensions.get::<Arc<ProxyConfig>>().cloned();
    let segment = target.name.as_deref().unwrap_or_default();
    let namespace = target.namespace.as_deref().unwrap_or_default();
    let what = target.info.kind.to_ascii_lowercase();
    let id = Id::parse(segment, &what)?;
    let resource = target.info.plural.as_str();
    let obj = object(api, &target.info.store_resource(), namespace, &id.name)
        .await?
        .ok_or_else(|| ApiError::not_found(&target.info.group, resource, &id.name))?;
    if resource == "pods" && str_at(&obj, "/spec/nodeName").is_empty() {
        return Err(ApiError::bad_request(format!(
            "pod {} does not have a host assigned",
            id.name
        )));
    }
    let dialer = parts.extensions.get::<Dialer>().cloned();
    if let Some(Dialer(dialer)) = dialer
        && resource == "nodes"
        && is_kubelet_port(&obj, &id)
    {
        let call = kubelet_call(&id.name, &parts, target.info.namespaced);
        return streams::forward(dialer.as_ref(), call, parts, body).await;
    }
    let Some(config) = config else {
        return Err(match resource {
            "nodes" => unreachable_kubelet(&id.name, "nodes/proxy"),
            "pods" => unreachable_kubelet(&str_at(&obj, "/spec/nodeName"), "pods/proxy"),
            _ => ApiError::service_unavailable(format!(
                "{resource}/proxy is not served by this endpoint"
            )),
        });
    };
    let backend = match resource {
        "pods" => location::pod_backend(&obj, &id, namespace, config.allow_loopback)?,
        "services" => service_backend(api, &config, &obj, &id, namespace).await?,
        _ => node_backend(&obj, &id, config.allow_loopback)?,
    };
    let path = location::forwarded_path(parts.uri.path(), target.info.namespaced);
    forward(&config, &backend, &path, parts, body).await
}

/// A ready endpoint of the Service's port whose pod holds its address.
async fn service_backend(
    api: &Api,
    config: &ProxyConfig,
    service: &Value,
    id: &Id,
    namespace: &str,
) -> Result<Backend, ApiError> {
    let port_name = location::service_port_name(service, id)?;
    let slices = api
        .store
        .list(ListOptions {
            resource: "endpointslices.discovery.k8s.io".into(),
            filter: Filter {
                namespace: Some(namespace.to_owned()),
                labels: [("kubernetes.io/service-name".into(), id.name.clone())].into(),
                ..Filter::default()
            },
            ..ListOptions::default()
        })
        .await
        .map_err(from_store)?;
    let slices: Vec<Value> = slices
        .items
        .iter()
        .filter_map(|item| serde_json::from_slice(&item.value).ok())
        .collect();
    let endpoints = location::ready_endpoints(&slices, &port_name);
    let start = config.next.fetch_add(1, Ordering::Relaxed);
    for i in 0..endpoints.len() {
        let ep = &endpoints[(start + i) % endpoints.len()];
        let Some(pod_name) = &ep.pod else { continue };
        let Some(pod) = object(api, "pods", namespace, pod_name).await? else {
            continue;
        };
        if !holds_ip(&pod, &ep.ip) {
            continue;
        }
        let ip = location::allowed_ip(&ep.ip, config.allow_loopback)?;
        let node = match ep.node.as_str() {
            "" => str_at(&pod, "/spec/nodeName"),
            n => n.to_owned(),
        };
        return Ok(Backend {
            scheme: if id.scheme.is_empty() {
                "http"
            } else {
                &id.scheme
            }
            .to_owned(),
            addr: std::net::SocketAddr::new(ip, ep.port),
            node,
            what: format!("pod \"{namespace}/{pod_name}\" of service \"{}\"", id.name),
        });
    }
    Err(ApiError::service_unavailable(format!(
        "no endpoints available for service {:?}",
        id.name
    )))
}

/// Whether a `nodes/<id>/proxy` request is for the node's kubelet: no port, or the kubelet's
/// (`status.daemonEndpoints.kubeletEndpoint.Port`, else 10250).
fn is_kubelet_port(node: &Value, id: &Id) -> bool {
    let kubelet = node
        .pointer("/status/daemonEndpoints/kubeletEndpoint/Port")
        .and_then(Value::as_u64)
        .unwrap_or(10250);
    id.port.is_empty() || id.port.parse::<u64>() == Ok(kubelet)
}

/// `nodes/<node>/proxy/<path>?<query>` as the kubelet request `/<path>?<query>`.
fn kubelet_call(node: &str, parts: &Parts, namespaced: bool) -> KubeletCall {
    let path = location::forwarded_path(parts.uri.path(), namespaced);
    KubeletCall {
        node: node.to_owned(),
        path: match parts.uri.query() {
            Some(q) => format!("{path}?{q}"),
            None => path,
        },
        follow: false,
    }
}

/// A node's own port other than the kubelet's, on its first internal (else external) address.
fn node_backend(node: &Value, id: &Id, allow_loopback: bool) -> Result<Backend, ApiError> {
    if is_kubelet_port(node, id) {
        return Err(unreachable_kubelet(&id.name, "nodes/proxy"));
    }
    let port = id.port.parse::<u16>().map_err(|_| {
        ApiError::bad_request(format!("invalid port {:?} for node {:?}", id.port, id.name))
    })?;
    let addresses = node.pointer("/status/addresses").and_then(Value::as_array);
    let address = ["InternalIP", "ExternalIP"].iter().find_map(|kind| {
        addresses
            .into_iter()
            .flatten()
            .find(|a| a["type"] == *kind)
            .and_then(|a| a["address"].as_str())
    });
    let ip = location::allowed_ip(address.unwrap_or_default(), allow_loopback)?;
    Ok(Backend {
        scheme: if id.scheme.is_empty() {
            "http"
        } else {
            &id.scheme
        }
        .to_owned(),
        addr: std::net::SocketAddr::new(ip, port),
        node: id.name.clone(),
        what: format!("node \"{}\"", id.name),
    })
}

/// Sends the request to `backend` and streams its answer back.
async fn forward(
    config: &ProxyConfig,
    backend: &Backend,
    path: &str,
    parts: Parts,
    body: Body,
) -> Result<Response, ApiError> {
    if backend.scheme != "http" {
        return Err(ApiError::service_unavailable(format!(
            "error trying to reach service: {} is served over {}, which this API server does not \
             proxy to yet",
            backend.what, backend.scheme
        )));
    }
    let dial = tokio::time::timeout(
        config.dial_timeout,
        tokio::net::TcpStream::connect(backend.addr),
    )
    .await;
    let stream = match dial {
        Ok(Ok(stream)) => stream,
        Ok(Err(e)) => return Err(unreachable(backend, &e.to_string())),
        Err(_) => {
            let why = format!("no connection within {:?}", config.dial_timeout);
            return Err(unreachable(backend, &why));
        }
    };
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| failed(backend, &e))?;
    tokio::spawn(async move {
        if let Err(e) = conn.await {
            tracing::debug!(error = %e, "proxied connection ended");
        }
    });
    let uri = match parts.uri.query() {
        Some(q) => format!("{path}?{q}"),
        None => path.to_owned(),
    };
    let mut req = axum::http::Request::new(body);
    *req.method_mut() = parts.method.clone();
    *req.uri_mut() = uri
        .parse()
        .map_err(|_| ApiError::bad_request(format!("invalid proxy path {uri:?}")))?;
    *req.headers_mut() = location::forwarded_headers(&parts.headers, backend);
    let resp = sender
        .send_request(req)
        .await
        .map_err(|e| failed(backend, &e))?;
    let (mut head, incoming) = resp.into_parts();
    location::strip_hop_by_hop(&mut head.headers);
    Ok(Response::from_parts(head, Body::new(incoming)))
}

/// The 503 for a backend that did not take the connection: named with its node.
fn unreachable(backend: &Backend, why: &str) -> ApiError {
    let node = match backend.node.as_str() {
        "" => "an unknown node".to_owned(),
        n => format!("node \"{n}\""),
    };
    ApiError::service_unavailable(format!(
        "error trying to reach service: {} on {node} at {} cannot be reached from the cloud \
         ({why}); pods at the edge are proxied once the tunnel to the edge carries them",
        backend.what, backend.addr
    ))
}

/// The 503 of a backend that failed mid-request, as kube-apiserver answers it.
fn failed(backend: &Backend, e: &hyper::Error) -> ApiError {
    ApiError::service_unavailable(format!(
        "error trying to reach service: {} at {}: {e}",
        backend.what, backend.addr
    ))
}

/// Whether `pod` has `ip` among its addresses.
fn holds_ip(pod: &Value, ip: &str) -> bool {
    let listed = pod
        .pointer("/status/podIPs")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .any(|p| p["ip"].as_str() == Some(ip));
    listed || pod.pointer("/status/podIP").and_then(Value::as_str) == Some(ip)
}

/// A stored object, decoded.
async fn object(
    api: &Api,
    resource: &str,
    namespace: &str,
    name: &str,
) -> Result<Option<Value>, ApiError> {
    let key = ObjKey::new(resource, namespace, name);
    let Some(stored) = api.store.get(&key).await.map_err(from_store)? else {
        return Ok(None);
    };
    serde_json::from_slice(&stored.value)
        .map(Some)
        .map_err(|e| ApiError::internal(format!("decoding stored {key}: {e}")))
}

fn str_at(v: &Value, pointer: &str) -> String {
    v.pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
}
