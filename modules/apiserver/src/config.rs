//! `modules.apiServer` in `cloudcore.yaml`: the embedded control plane.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// `modules.apiServer`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct Config {
    /// Serve the embedded control plane. It only runs when `kubeAPIConfig.kubeConfig` is empty.
    /// Default true.
    pub enable: bool,
    /// HTTPS listen address. Default `127.0.0.1:6443`.
    pub bind_address: SocketAddr,
    /// SQLite file. Default `/var/lib/kubeedge/apiserver.db`.
    pub data_source: PathBuf,
    /// Change-log revisions kept for watch resumption. Default 100000.
    pub change_log_retention: u64,
    /// CA of the API server (made with its key when neither file exists). Default
    /// `/etc/kubeedge/apiserver/ca.crt`.
    #[serde(rename = "tlsCAFile")]
    pub tls_ca_file: PathBuf,
    /// Default `/etc/kubeedge/apiserver/ca.key`.
    #[serde(rename = "tlsCAKeyFile")]
    pub tls_ca_key_file: PathBuf,
    /// Serving certificate (issued by the CA when neither file exists). Default
    /// `/etc/kubeedge/apiserver/server.crt`.
    pub tls_cert_file: PathBuf,
    /// Default `/etc/kubeedge/apiserver/server.key`.
    pub tls_private_key_file: PathBuf,
    /// Extra names and addresses for the serving certificate (localhost and 127.0.0.1 are always in).
    pub extra_sans: Vec<String>,
    /// Client certificates signed by this CA authenticate (`CN` user, `O` groups; nodes are
    /// `system:node:<name>` in `system:nodes`). Default: the API server's CA.
    #[serde(rename = "clientCAFile")]
    pub client_ca_file: Option<PathBuf>,
    /// The key that signs service-account tokens (TokenRequest): ECDSA P-256, PKCS#8 PEM, made
    /// when the file does not exist. Default: `sa.key` beside `tlsCAFile`
    /// (`/etc/kubeedge/apiserver/sa.key`).
    pub service_account_key_file: Option<PathBuf>,
    /// The admin bearer token (made when the file does not exist). Default
    /// `/etc/kubeedge/apiserver/admin.token`.
    pub token_file: PathBuf,
    /// Where the admin kubeconfig is written. Default `/etc/kubeedge/admin.kubeconfig`.
    pub admin_kubeconfig: PathBuf,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            enable: true,
            bind_address: SocketAddr::from(([127, 0, 0, 1], 6443)),
            data_source: "/var/lib/kubeedge/apiserver.db".into(),
            change_log_retention: 100_000,
            tls_ca_file: "/etc/kubeedge/apiserver/ca.crt".into(),
            tls_ca_key_file: "/etc/kubeedge/apiserver/ca.key".into(),
            tls_cert_file: "/etc/kubeedge/apiserver/server.crt".into(),
            tls_private_key_file: "/etc/kubeedge/apiserver/server.key".into(),
            extra_sans: Vec::new(),
            client_ca_file: None,
            service_account_key_file: None,
            token_file: "/etc/kubeedge/apiserver/admin.token".into(),
            admin_kubeconfig: "/etc/kubeedge/admin.kubeconfig".into(),
        }
    }
}

impl Config {
    /// Where the service-account key is: [`Config::service_account_key_file`], else `sa.key`
    /// beside the CA.
    pub fn service_account_key_path(&self) -> PathBuf {
        match &self.service_account_key_file {
            Some(path) => path.clone(),
            None => self
                .tls_ca_file
                .parent()
                .unwrap_or(Path::new(""))
                .join("sa.key"),
        }
    }
}
