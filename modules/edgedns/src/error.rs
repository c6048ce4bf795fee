//! What can go wrong starting or running the cluster DNS server.

use std::net::SocketAddr;

/// An error of the edgedns module.
#[derive(Debug, thiserror::Error)]
pub enum EdgeDnsError {
    /// The UDP or TCP listener could not be bound.
    #[error("binding the DNS listener {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    /// `clusterDomain` is not a valid DNS name.
    #[error("modules.edgeDNS.clusterDomain {domain:?} is not a DNS name: {reason}")]
    ClusterDomain { domain: String, reason: String },
    /// No upstream resolver was configured and the node's resolv.conf gave none.
    #[error("modules.edgeDNS: no upstream resolvers ({0})")]
    Upstreams(String),
    /// `serve` was called again after the listeners were used.
    #[error("the edgedns listeners were already used by an earlier run")]
    AlreadyServed,
}
