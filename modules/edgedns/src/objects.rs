//! What the cluster zone reads from Services and EndpointSlices (as the edge store holds them,
//! JSON): pure parsing; anything malformed is left out rather than failing the whole object.

use std::net::IpAddr;

use serde_json::Value;

/// The EndpointSlice label naming its Service.
pub(crate) const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";

/// A Service, as DNS sees it.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Service {
    pub(crate) kind: ServiceKind,
    pub(crate) ports: Vec<Port>,
    /// `spec.publishNotReadyAddresses`: unready endpoints get records too.
    pub(crate) publish_not_ready: bool,
}

/// How a Service's own name resolves.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum ServiceKind {
    /// To its cluster IPs.
    ClusterIp(Vec<IpAddr>),
    /// `clusterIP: None`: to its endpoints' addresses.
    Headless,
    /// `type: ExternalName`: a CNAME to `spec.externalName`.
    ExternalName(String),
}

/// A port, of a Service or of an EndpointSlice.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Port {
    /// Empty for an unnamed port (no SRV record).
    pub(crate) name: String,
    /// Lowercase: `tcp`, `udp`, `sctp`.
    pub(crate) protocol: String,
    pub(crate) port: u16,
}

/// An EndpointSlice, as DNS sees it.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Slice {
    /// The Service it belongs to (`kubernetes.io/service-name`).
    pub(crate) service: String,
    pub(crate) ports: Vec<Port>,
    pub(crate) endpoints: Vec<Endpoint>,
}

/// One endpoint of a slice.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Endpoint {
    pub(crate) addresses: Vec<IpAddr>,
    /// `hostname` (a StatefulSet pod, or a pod's `hostname` with a matching `subdomain`).
    pub(crate) hostname: Option<String>,
    /// `conditions.ready`, true when absent (as Kubernetes reads it).
    pub(crate) ready: bool,
}

// === impl Service ===

impl Service {
    /// Reads a Service's JSON.
    pub(crate) fn from_json(svc: &Value) -> Service {
        let spec = &svc["spec"];
        let kind = match spec["type"].as_str() {
            Some("ExternalName") => {
                let target = spec["externalName"].as_str().unwrap_or("");
                ServiceKind::ExternalName(target.trim_end_matches('.').to_ascii_lowercase())
            }
            _ if spec["clusterIP"].as_str() == Some("None") => ServiceKind::Headless,
            _ => ServiceKind::ClusterIp(cluster_ips(spec)),
        };
        Service {
            kind,
            ports: ports(&spec["ports"]),
            publish_not_ready: spec["publishNotReadyAddresses"].as_bool() == Some(true),
        }
    }
}

/// `spec.clusterIPs`, or `spec.clusterIP` when the list is absent.
fn cluster_ips(spec: &Value) -> Vec<IpAddr> {
    let listed: Vec<&str> = match spec["clusterIPs"].as_array() {
        Some(ips) => ips.iter().filter_map(Value::as_str).collect(),
        None => spec["clusterIP"].as_str().into_iter().collect(),
    };
    listed.iter().filter_map(|ip| ip.parse().ok()).collect()
}

fn ports(ports: &Value) -> Vec<Port> {
    let ports = ports.as_array().into_iter().flatten();
    ports
        .filter_map(|p| {
            let port = u16::try_from(p["port"].as_u64()?).ok()?;
            Some(Port {
                name: p["name"].as_str().unwrap_or("").to_ascii_lowercase(),
                protocol: p["protocol"].as_str().unwrap_or("TCP").to_ascii_lowercase(),
                port,
            })
        })
        .collect()
}

// === impl Slice ===

impl Slice {
    /// Reads an EndpointSlice's JSON; `None` for a slice of no Service or of FQDN addresses.
    pub(crate) fn from_json(slice: &Value) -> Option<Slice> {
        let service = slice["metadata"]["labels"][SERVICE_NAME_LABEL].as_str()?;
        if service.is_empty() || slice["addressType"].as_str() == Some("FQDN") {
            return None;
        }
        let endpoints = slice["endpoints"].as_array().into_iter().flatten();
        Some(Slice {
            service: service.to_owned(),
            ports: ports(&slice["ports"]),
            endpoints: endpoints.map(Endpoint::from_json).collect(),
        })
    }
}

// === impl Endpoint ===

impl Endpoint {
    fn from_json(ep: &Value) -> Endpoint {
        let addresses = ep["addresses"].as_array().into_iter().flatten();
        Endpoint {
            addresses: addresses.filter_map(|a| a.as_str()?.parse().ok()).collect(),
            hostname: ep["hostname"]
                .as_str()
                .filter(|h| !h.is_empty())
                .map(str::to_ascii_lowercase),
            ready: ep["conditions"]["ready"].as_bool() != Some(false),
        }
    }
}
