//! Names outside the cluster zone go to the node's resolvers, through hickory-resolver and its
//! cache: an answer is kept for its TTL (never past `cacheMaxTTL`), negative answers for their
//! SOA's minimum, and at most `cacheSize` of them (least recently used first out).

use std::net::SocketAddr;

use hickory_proto::op::ResponseCode;
use hickory_proto::rr::{Name, Record, RecordType};
use hickory_proto::xfer::Protocol;
use hickory_resolver::Resolver;
use hickory_resolver::config::{NameServerConfig, ResolveHosts, ResolverConfig, ResolverOpts};
use hickory_resolver::name_server::TokioConnectionProvider;

use crate::config::Config;
use crate::error::EdgeDnsError;

/// The upstream answer to one question.
#[derive(Debug)]
pub(crate) enum Forwarded {
    /// NOERROR with records.
    Records(Vec<Record>),
    /// NOERROR or NXDOMAIN without records, with the upstream's SOA if it gave one.
    Empty {
        code: ResponseCode,
        soa: Option<Box<Record>>,
    },
    /// No upstream answered (SERVFAIL).
    Failed,
}

/// The forwarding resolver.
pub(crate) struct Forwarder {
    resolver: Resolver<TokioConnectionProvider>,
}

// === impl Forwarder ===

impl Forwarder {
    /// Forwards to `upstreams` (UDP, and TCP for truncated answers).
    pub(crate) fn new(config: &Config, upstreams: &[SocketAddr]) -> Forwarder {
        let mut resolvers = ResolverConfig::new();
        for addr in upstreams {
            resolvers.add_name_server(NameServerConfig::new(*addr, Protocol::Udp));
            resolvers.add_name_server(NameServerConfig::new(*addr, Protocol::Tcp));
        }
        let mut opts = ResolverOpts::default();
        opts.cache_size = config.cache_size.get();
        opts.positive_max_ttl = Some(config.cache_max_ttl);
        opts.negative_max_ttl = Some(config.cache_max_ttl);
        opts.timeout = config.upstream_timeout;
        opts.attempts = 2;
        opts.preserve_intermediates = true;
        opts.use_hosts_file = ResolveHosts::Never;
        opts.ndots = 0;
        let resolver = Resolver::builder_with_config(resolvers, TokioConnectionProvider::default())
            .with_options(opts)
            .build();
        Forwarder { resolver }
    }

    /// Asks the upstreams (or the cache) for `qtype` records of `name` (fully qualified).
    pub(crate) async fn resolve(&self, name: Name, qtype: RecordType) -> Forwarded {
        match self.resolver.lookup(name, qtype).await {
            Ok(lookup) => Forwarded::Records(lookup.records().to_vec()),
            Err(e) if e.is_no_records_found() => {
                let code = match e.is_nx_domain() {
                    true => ResponseCode::NXDomain,
                    false => ResponseCode::NoError,
                };
                let soa = e.into_soa().map(|soa| Box::new(soa.into_record_of_rdata()));
                Forwarded::Empty { code, soa }
            }
            Err(e) => {
                tracing::debug!(error = %e, "forwarded query failed");
                Forwarded::Failed
            }
        }
    }
}

/// The node's resolvers from resolv.conf text: its nameservers on port 53, `own` (this
/// server's address) left out so the server never asks itself.
pub(crate) fn upstreams_from_resolv_conf(
    text: &str,
    own: SocketAddr,
) -> Result<Vec<SocketAddr>, EdgeDnsError> {
    let (config, _) = hickory_resolver::system_conf::parse_resolv_conf(text)
        .map_err(|e| EdgeDnsError::Upstreams(format!("reading resolv.conf: {e}")))?;
    let mut found: Vec<SocketAddr> = Vec::new();
    for ns in config.name_servers() {
        if ns.socket_addr != own && !found.contains(&ns.socket_addr) {
            found.push(ns.socket_addr);
        }
    }
    match found.is_empty() {
        true => Err(EdgeDnsError::Upstreams(
            "resolv.conf names no nameserver other than this server".into(),
        )),
        false => Ok(found),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolv_conf_nameservers_become_upstreams_without_this_server() {
        let own: SocketAddr = "169.254.20.10:53".parse().unwrap();
        let text = "search default.svc.cluster.local\nnameserver 169.254.20.10\nnameserver 10.0.0.2\nnameserver 10.0.0.3\noptions ndots:5\n";
        let found = upstreams_from_resolv_conf(text, own).unwrap();
        let want: Vec<SocketAddr> = vec![
            "10.0.0.2:53".parse().unwrap(),
            "10.0.0.3:53".parse().unwrap(),
        ];
        assert_eq!(found, want);
    }

    #[test]
    fn resolv_conf_naming_only_this_server_is_an_error() {
        let own: SocketAddr = "169.254.20.10:53".parse().unwrap();
        let err = upstreams_from_resolv_conf("nameserver 169.254.20.10\n", own).unwrap_err();
        assert!(
            err.to_string().contains("no nameserver other than"),
            "{err}"
        );
    }
}
