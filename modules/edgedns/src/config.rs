//! `modules.edgeDNS` in `edgecore.yaml`.

use std::net::SocketAddr;
use std::num::NonZeroUsize;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// NodeLocal DNSCache's link-local address, the node-local DNS address Kubernetes users know.
pub const DEFAULT_LISTEN: SocketAddr = SocketAddr::new(
    std::net::IpAddr::V4(std::net::Ipv4Addr::new(169, 254, 20, 10)),
    53,
);

/// The cluster DNS server at the edge.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct Config {
    /// Default false: the listen address must exist on the node (a link holding it).
    pub enable: bool,
    /// UDP and TCP address answered on. Default `169.254.20.10:53`.
    pub listen_address: SocketAddr,
    /// The cluster's DNS domain. Default `cluster.local`.
    pub cluster_domain: String,
    /// Resolvers for every other name. Default empty: the node's `/etc/resolv.conf`
    /// nameservers (port 53), this server's own address left out.
    pub upstreams: Vec<SocketAddr>,
    /// TTL of the cluster records (CoreDNS's `kubernetes` plugin default). Default 5s.
    #[serde(with = "daemon::duration")]
    pub ttl: Duration,
    /// Forwarded answers kept (the cache is bounded). Default 4096.
    pub cache_size: NonZeroUsize,
    /// A forwarded answer is kept at most its own TTL and at most this. Default 1h.
    #[serde(rename = "cacheMaxTTL", with = "daemon::duration")]
    pub cache_max_ttl: Duration,
    /// How long a forwarded query waits for an upstream. Default 2s.
    #[serde(with = "daemon::duration")]
    pub upstream_timeout: Duration,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            enable: false,
            listen_address: DEFAULT_LISTEN,
            cluster_domain: "cluster.local".into(),
            upstreams: Vec::new(),
            ttl: Duration::from_secs(5),
            cache_size: NonZeroUsize::new(4096).expect("4096 is not zero"),
            cache_max_ttl: Duration::from_secs(3600),
            upstream_timeout: Duration::from_secs(2),
        }
    }
}
