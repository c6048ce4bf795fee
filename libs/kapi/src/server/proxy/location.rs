//! Where a proxy request goes, with no I/O: the `[scheme:]name[:port]` of the URL, a pod's
//! address, a Service's ready endpoint from its EndpointSlices, which addresses may be dialed,
//! and the path and headers sent on.

use std::net::{IpAddr, SocketAddr};

use apimachinery::ApiError;
use axum::http::{HeaderMap, HeaderName, Method, header};
use serde_json::Value;

/// The `[scheme:]name[:port]` segment of a proxy URL (kube's `SplitSchemeNamePort`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Id {
    /// `""`, `http` or `https`.
    pub(crate) scheme: String,
    pub(crate) name: String,
    /// A number or a port name; `""` when none was given.
    pub(crate) port: String,
}

/// A backend a proxy request may be sent to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Backend {
    /// `http` or `https`.
    pub(crate) scheme: String,
    pub(crate) addr: SocketAddr,
    /// The node the backend runs on (`""` when unknown), for the error of an unreachable one.
    pub(crate) node: String,
    /// `pod "default/web-0"`, for errors.
    pub(crate) what: String,
}

/// One ready endpoint of a Service port, as an EndpointSlice lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Endpoint {
    pub(crate) ip: String,
    pub(crate) port: u16,
    /// The pod it targets (`targetRef` of kind Pod), if any.
    pub(crate) pod: Option<String>,
    pub(crate) node: String,
}

/// The request headers never sent on: hop-by-hop ones, and the caller's credentials (kube-apiserver
/// removes `Authorization` once it has authenticated a request).
pub(crate) const DROPPED: &[&str] = &[
    "authorization",
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

// === impl Id ===

impl Id {
    /// Parses `name`, `name:port` or `scheme:name:port`; `what` (`pod`, `service`) names the
    /// request in the 400 for anything else.
    pub(crate) fn parse(segment: &str, what: &str) -> Result<Id, ApiError> {
        let parts: Vec<&str> = segment.split(':').collect();
        let (scheme, name, port) = match parts.as_slice() {
            [name] => ("", *name, ""),
            [name, port] => ("", *name, *port),
            [scheme, name, port] => (*scheme, *name, *port),
            _ => ("", "", ""),
        };
        if name.is_empty() || !matches!(scheme, "" | "http" | "https") {
            return Err(ApiError::bad_request(format!(
                "invalid {what} request {segment:?}"
            )));
        }
        Ok(Id {
            scheme: scheme.to_owned(),
            name: name.to_owned(),
            port: port.to_owned(),
        })
    }
}

/// The address of `pod` for a proxy request naming `port` (else the first port its containers
/// declare, else 80 as HTTP's default): its `status.podIP`, refused unless dialable.
pub(crate) fn pod_backend(
    pod: &Value,
    id: &Id,
    namespace: &str,
    allow_loopback: bool,
) -> Result<Backend, ApiError> {
    let declared = || {
        pod.pointer("/spec/containers")?
            .as_array()?
            .iter()
            .find_map(|c| c.pointer("/ports/0/containerPort")?.as_u64())
    };
    let port: Option<u16> = match id.port.as_str() {
        "" => Some(declared().and_then(|p| u16::try_from(p).ok()).unwrap_or(80)),
        p => p.parse().ok(),
    };
    let Some(port) = port.filter(|p| *p != 0) else {
        return Err(ApiError::bad_request(format!(
            "invalid port {:?} for pod {:?}: a pod proxy names a port number",
            id.port, id.name
        )));
    };
    let ip = pod
        .pointer("/status/podIP")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let ip = allowed_ip(ip, allow_loopback)?;
    Ok(Backend {
        scheme: scheme_or_http(&id.scheme),
        addr: SocketAddr::new(ip, port),
        node: str_at(pod, "/spec/nodeName"),
        what: format!("pod \"{namespace}/{}\"", id.name),
    })
}

/// The Service port name a `services/<name>:<port>` request means: a number is looked up
/// among the Service's ports (503 when it has none such, as kube-apiserver answers).
pub(crate) fn service_port_name(service: &Value, id: &Id) -> Result<String, ApiError> {
    let Ok(number) = id.port.parse::<u64>() else {
        return Ok(id.port.clone());
    };
    let ports = service.pointer("/spec/ports").and_then(Value::as_array);
    ports
        .into_iter()
        .flatten()
        .find(|p| p["port"].as_u64() == Some(number))
        .map(|p| p["name"].as_str().unwrap_or_default().to_owned())
        .ok_or_else(|| {
            ApiError::service_unavailable(format!(
                "no service port {number} found for service {:?}",
                id.name
            ))
        })
}

/// The ready endpoints of port `port_name` in `slices` (EndpointSlices of one Service), in
/// the order listed: an endpoint whose `ready` condition is false is left out (unknown counts
/// as ready, as the API defines it).
pub(crate) fn ready_endpoints(slices: &[Value], port_name: &str) -> Vec<Endpoint> {
    let mut out = Vec::new();
    for slice in slices {
        let port = slice["ports"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|p| p["name"].as_str().unwrap_or_default() == port_name)
            .and_then(|p| p["port"].as_u64())
            .and_then(|p| u16::try_from(p).ok());
        let Some(port) = port else { continue };
        for ep in slice["endpoints"].as_array().into_iter().flatten() {
            if ep.pointer("/conditions/ready").and_then(Value::as_bool) == Some(false) {
                continue;
            }
            let pod = (ep.pointer("/targetRef/kind").and_then(Value::as_str) == Some("Pod"))
                .then(|| str_at(ep, "/targetRef/name"));
            let node = str_at(ep, "/nodeName");
            for ip in ep["addresses"].as_array().into_iter().flatten() {
                if let Some(ip) = ip.as_str() {
                    out.push(Endpoint {
                        ip: ip.to_owned(),
                        port,
                        pod: pod.clone(),
                        node: node.clone(),
                    });
                }
            }
        }
    }
    out
}

/// `ip` when a proxy may dial it: a unicast address that is not unspecified, link-local or
/// multicast, nor loopback unless `allow_loopback` (kube-apiserver refuses all but global
/// unicast addresses, so that its own host's services are not reachable through it).
pub(crate) fn allowed_ip(ip: &str, allow_loopback: bool) -> Result<IpAddr, ApiError> {
    let refused = || ApiError::bad_request("address not allowed");
    let addr: IpAddr = ip.parse().map_err(|_| refused())?;
    let link_local = match addr {
        IpAddr::V4(a) => a.is_link_local() || a.is_broadcast(),
        IpAddr::V6(a) => a.is_unicast_link_local(),
    };
    if addr.is_unspecified() || addr.is_multicast() || link_local {
        return Err(refused());
    }
    if addr.is_loopback() && !allow_loopback {
        return Err(refused());
    }
    Ok(addr)
}

/// The path sent to the backend: what follows `.../proxy` in the request path, as sent (still
/// percent-encoded), `/` when nothing does.
pub(crate) fn forwarded_path(raw_path: &str, namespaced: bool) -> String {
    // `/api/v1/...` or `/apis/<group>/<version>/...`, then `namespaces/<ns>/<plural>/<name>/proxy`
    // or `<plural>/<name>/proxy`.
    let prefix = if raw_path.starts_with("/api/") { 3 } else { 4 };
    let skip = prefix + if namespaced { 5 } else { 3 };
    let rest: Vec<&str> = raw_path.split('/').skip(skip).collect();
    format!("/{}", rest.join("/"))
}

/// The request headers sent on (see [`DROPPED`]), with `Host` naming the backend.
pub(crate) fn forwarded_headers(headers: &HeaderMap, backend: &Backend) -> HeaderMap {
    let mut out = HeaderMap::new();
    for (name, value) in headers {
        let dropped = DROPPED.contains(&name.as_str())
            || name.as_str().starts_with("impersonate-")
            || name == header::HOST;
        if !dropped {
            out.append(name.clone(), value.clone());
        }
    }
    if let Ok(host) = backend.addr.to_string().parse() {
        out.insert(header::HOST, host);
    }
    out
}

/// Removes the hop-by-hop headers of a backend's answer.
pub(crate) fn strip_hop_by_hop(headers: &mut HeaderMap) {
    for name in DROPPED.iter().filter(|n| **n != "authorization") {
        headers.remove(HeaderName::from_static(name));
    }
}

/// The RBAC verb of a proxy request by its method, as kube-apiserver names it.
pub(crate) fn verb(method: &Method) -> String {
    match *method {
        Method::GET | Method::HEAD => "get".into(),
        Method::POST => "create".into(),
        Method::PUT => "update".into(),
        Method::PATCH => "patch".into(),
        Method::DELETE => "delete".into(),
        ref other => other.as_str().to_ascii_lowercase(),
    }
}

fn scheme_or_http(scheme: &str) -> String {
    match scheme {
        "" => "http".into(),
        s => s.to_owned(),
    }
}

fn str_at(v: &Value, pointer: &str) -> String {
    v.pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
}

#[cfg(test)]
mod tests;
