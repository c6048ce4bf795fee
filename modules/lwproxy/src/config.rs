//! The `modules.lwProxy` section of `edgecore.yaml`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// `modules.lwProxy`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
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
}

// === impl Config ===

impl Config {
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
