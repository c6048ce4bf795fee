//! `modules.apiServer` in `cloudcore.yaml`: the embedded control plane.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use apimachinery::alloc::{Cidr, PortRange, ServiceRanges};
use serde::{Deserialize, Serialize};

/// `modules.apiServer`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
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
    /// Connections held at once. Default 1024.
    pub max_connections: usize,
    /// Of `maxConnections`, connections not yet authenticated (no verified client certificate,
    /// no request with a user yet); the rest stay free for authenticated clients. When they
    /// are all taken, the oldest idle one is closed to make room. Default 256.
    pub max_unauthenticated_connections: usize,
    /// Unauthenticated connections from one IP address. Default 64.
    pub max_unauthenticated_connections_per_client: usize,
    /// Time a client has to finish the TLS handshake. Default `10s`.
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
    /// Time a request body has to arrive after its head; a body not received by then gets a
    /// `408` and the connection is closed. Default `60s`.
    #[serde(with = "daemon::duration")]
    pub request_body_timeout: Duration,
    /// Connections one user holds who is neither an admin (`system:masters`) nor a node
    /// (`system:nodes`); a connection over it gets a `429` and is closed. Default 100.
    pub max_connections_per_user: usize,
    /// Of `maxConnections`, connections only admins and nodes may take. Default 128.
    pub reserved_connections: usize,
    /// Requests in flight of nodes (`system:nodes`); watches are not counted. Default 200.
    pub max_requests_in_flight_system: usize,
    /// Requests in flight of users who are neither admins nor nodes. Default 200.
    pub max_requests_in_flight_workload: usize,
    /// Anonymous requests in flight. Default 50.
    pub max_requests_in_flight_anonymous: usize,
    /// Requests in flight of one user (one client address for anonymous requests), in any
    /// level but the admins'. A request over a share gets `429` with `Retry-After`. Default 50.
    pub max_requests_in_flight_per_user: usize,
    /// The IPv4 block Services' cluster IPs are allocated from (kube-apiserver's
    /// `--service-cluster-ip-range`); its first address is the `kubernetes` Service's.
    /// Default `10.96.0.0/12`.
    #[serde(rename = "serviceClusterIPRange")]
    #[schemars(with = "String")]
    pub service_cluster_ip_range: Cidr,
    /// The ports NodePort and LoadBalancer Services' node ports are allocated from
    /// (`--service-node-port-range`). Default `30000-32767`.
    #[schemars(with = "String")]
    pub service_node_port_range: PortRange,
    /// How long a pod, Service endpoint or node has to accept the connection of a proxy
    /// request (`pods/<name>/proxy`, `services/<name>/proxy`) before it counts as unreachable
    /// from the cloud (an edge pod) and the request gets a 503 naming its node. Default `1s`.
    #[serde(with = "daemon::duration")]
    pub proxy_dial_timeout: Duration,
    /// Proxy requests to loopback addresses. kube-apiserver refuses them, as they reach the API
    /// server's own host; a single-host setup (or a test) may turn this on. Default false.
    pub proxy_to_loopback: bool,
    /// The built-in resource metrics pipeline (`metrics.k8s.io`, as metrics-server serves it).
    /// It scrapes only when cloudcore gives the control plane a way to reach nodes.
    pub metrics_server: crate::metrics_api::MetricsConfig,
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
            max_connections: 1024,
            max_unauthenticated_connections: 256,
            max_unauthenticated_connections_per_client: 64,
            tls_handshake_timeout: Duration::from_secs(10),
            read_header_timeout: Duration::from_secs(32),
            idle_timeout: Duration::from_secs(90),
            request_body_timeout: Duration::from_secs(60),
            max_connections_per_user: 100,
            reserved_connections: 128,
            max_requests_in_flight_system: 200,
            max_requests_in_flight_workload: 200,
            max_requests_in_flight_anonymous: 50,
            max_requests_in_flight_per_user: 50,
            service_cluster_ip_range: ServiceRanges::default().cluster_ips,
            service_node_port_range: ServiceRanges::default().node_ports,
            proxy_dial_timeout: Duration::from_secs(1),
            proxy_to_loopback: false,
            metrics_server: crate::metrics_api::MetricsConfig::default(),
        }
    }
}

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
            body_read_timeout: self.request_body_timeout,
            max_connections_per_user: self.max_connections_per_user,
            reserved_connections: self.reserved_connections,
            in_flight: kapi::InFlightLimits {
                system: self.max_requests_in_flight_system,
                workload: self.max_requests_in_flight_workload,
                anonymous: self.max_requests_in_flight_anonymous,
                per_identity: self.max_requests_in_flight_per_user,
            },
            ..kapi::ServeConfig::default()
        }
    }
    /// How the proxy subresources reach pods, Services and nodes.
    pub fn proxy_config(&self) -> kapi::ProxyConfig {
        kapi::ProxyConfig::new(self.proxy_dial_timeout, self.proxy_to_loopback)
    }

    /// Where Services' cluster IPs and node ports are allocated from.
    pub fn service_ranges(&self) -> ServiceRanges {
        ServiceRanges {
            cluster_ips: self.service_cluster_ip_range,
            node_ports: self.service_node_port_range,
        }
    }

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn service_ranges_are_typed_at_parse_time() {
        let yaml = "serviceClusterIPRange: 10.100.0.0/16\nserviceNodePortRange: 31000-31099\n";
        let config: Config = serde_yaml_ng::from_str(yaml).unwrap();
        let ranges = config.service_ranges();
        assert_eq!(ranges.cluster_ips.to_string(), "10.100.0.0/16");
        assert_eq!(ranges.cluster_ips.nth(0).to_string(), "10.100.0.1");
        assert_eq!(
            (ranges.node_ports.first, ranges.node_ports.last),
            (31000, 31099)
        );
        assert_eq!(Config::default().service_ranges(), ServiceRanges::default());
        let bad = serde_yaml_ng::from_str::<Config>("serviceClusterIPRange: 10.0.0.0\n");
        assert!(
            bad.unwrap_err()
                .to_string()
                .contains("expected address/prefix")
        );
        let bad = serde_yaml_ng::from_str::<Config>("serviceNodePortRange: 40000-30000\n");
        assert!(bad.is_err());
    }
}
