//! The `modules.lwProxy` section of `edgecore.yaml`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// `modules.lwProxy`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct Config {
    /// Serve the local Kubernetes endpoint. Default true.
    pub enable: bool,
    /// Listen address. Default `127.0.0.1:10550`.
    pub server: SocketAddr,
    /// Serving certificate; with `tlsPrivateKeyFile`, lwproxy serves HTTPS. Default empty
    /// (plain HTTP).
    pub tls_cert_file: PathBuf,
    /// Key of `tlsCertFile`. Default empty.
    pub tls_private_key_file: PathBuf,
    /// CA whose client certificates are accepted (optional: clients without one are served
    /// too). Only with `tlsCertFile`. Default empty (no client certificates asked).
    pub tls_ca_file: PathBuf,
    /// How long a write forwarded to the cloud may take before the client gets a 503.
    /// Default `10s`.
    #[serde(with = "daemon::duration")]
    pub forward_timeout: Duration,
    /// Connections held at once. Default 1024.
    pub max_connections: usize,
    /// Of `maxConnections`, connections not yet authenticated (no verified client certificate,
    /// no request with a user yet); the rest stay free for authenticated clients. When they
    /// are all taken, the oldest idle one is closed to make room. Default 256.
    pub max_unauthenticated_connections: usize,
    /// Unauthenticated connections from one IP address. Default 64.
    pub max_unauthenticated_connections_per_client: usize,
    /// Time a client has to finish the TLS handshake (with HTTPS). Default `10s`.
    #[serde(with = "daemon::duration")]
    pub tls_handshake_timeout: Duration,
    /// Time a client has to send a request head (kube-apiserver's `ReadHeaderTimeout`).
    /// Default `32s`.
    #[serde(with = "daemon::duration")]
    pub read_header_timeout: Duration,
    /// A connection with no request in flight is closed after this long (a watch is a request
    /// in flight). Default `90s`.
    #[serde(with = "daemon::duration")]
    pub idle_timeout: Duration,
    /// Watches one client (IP address; every local component shares loopback) holds open at
    /// once; the next is refused with a 429, so watches cannot take every connection. Default
    /// 256.
    pub max_watches_per_client: usize,
    /// Other requests one client has in flight at once (a list counts until its body is
    /// sent); the next is refused with a 429. Default 64.
    pub max_requests_per_client: usize,
    /// A kind this node subscribed to (one the node rules do not send, read by a local client)
    /// that no client read for this long, with no watch open, is dropped: the cloud stops
    /// sending it and its objects leave the edge store. Default `1h`.
    #[serde(with = "daemon::duration")]
    pub subscription_idle_timeout: Duration,
    /// How long the first read of a kind waits for the cloud's initial sync of it before it
    /// gets a 504. Default `10s`.
    #[serde(with = "daemon::duration")]
    pub subscription_sync_timeout: Duration,
    /// How long the cloud's refusal of a kind (403, 404) is answered before it is asked again
    /// (it is asked again on reconnect too). Default `5m`.
    #[serde(with = "daemon::duration")]
    pub subscription_refusal_ttl: Duration,
    /// How often a subscribed kind is asked for again: the cloud checks the node's RBAC again
    /// (a grant removed since takes the kind away) and sends the kind whole. Default `10m`.
    #[serde(with = "daemon::duration")]
    pub subscription_renew_interval: Duration,
}

// === impl Config ===

impl Config {
    /// The connection limits and timeouts of the HTTP server.
    pub fn serve_config(&self) -> kapi::ServeConfig {
        kapi::ServeConfig {
            max_connections: self.max_connections,
            max_unauthenticated: self.max_unauthenticated_connections,
            max_unauthenticated_per_client: self.max_unauthenticated_connections_per_client,
            handshake_timeout: self.tls_handshake_timeout,
            header_read_timeout: self.read_header_timeout,
            idle_timeout: self.idle_timeout,
            ..kapi::ServeConfig::default()
        }
    }

    /// The per-client caps on watches and requests.
    pub fn client_limits(&self) -> kapi::ClientLimits {
        kapi::ClientLimits {
            max_watches: self.max_watches_per_client,
            max_requests: self.max_requests_per_client,
        }
    }

    /// The subscription settings.
    pub(crate) fn subscriptions(&self) -> crate::subscribe::Settings {
        crate::subscribe::Settings {
            sync_timeout: self.subscription_sync_timeout,
            idle: self.subscription_idle_timeout,
            refusal_ttl: self.subscription_refusal_ttl,
            request_timeout: self.forward_timeout.max(self.subscription_sync_timeout),
            // A zero interval would spin.
            renew: self
                .subscription_renew_interval
                .max(Duration::from_millis(100)),
        }
    }

    /// Whether HTTPS is configured.
    pub fn tls(&self) -> bool {
        !self.tls_cert_file.as_os_str().is_empty()
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            enable: true,
            server: SocketAddr::from(([127, 0, 0, 1], 10550)),
            tls_cert_file: PathBuf::new(),
            tls_private_key_file: PathBuf::new(),
            tls_ca_file: PathBuf::new(),
            forward_timeout: Duration::from_secs(10),
            max_connections: 1024,
            max_unauthenticated_connections: 256,
            max_unauthenticated_connections_per_client: 64,
            tls_handshake_timeout: Duration::from_secs(10),
            read_header_timeout: Duration::from_secs(32),
            idle_timeout: Duration::from_secs(90),
            max_watches_per_client: 256,
            max_requests_per_client: 64,
            subscription_idle_timeout: Duration::from_secs(3600),
            subscription_sync_timeout: Duration::from_secs(10),
            subscription_refusal_ttl: Duration::from_secs(300),
            subscription_renew_interval: Duration::from_secs(600),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_section_means_plain_http_on_10550() {
        let config: Config = serde_json::from_str("{}").unwrap();
        assert_eq!(config, Config::default());
        assert!(!config.tls());
        assert_eq!(config.server.port(), 10550);
    }

    #[test]
    fn durations_and_tls_files_parse_and_unknown_keys_are_refused() {
        let text = r#"{"forwardTimeout": "2s", "tlsCertFile": "/c", "tlsPrivateKeyFile": "/k"}"#;
        let config: Config = serde_json::from_str(text).unwrap();
        assert_eq!(config.forward_timeout, Duration::from_secs(2));
        assert!(config.tls());
        assert!(serde_json::from_str::<Config>(r#"{"listen": "x"}"#).is_err());
    }
}
