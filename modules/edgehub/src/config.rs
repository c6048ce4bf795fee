//! The `modules.edgeHub` section of `edgecore.yaml` (KubeEdge's names where they exist).

use std::marker::PhantomData;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// `modules.edgeHub`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct Config {
    /// Run edgehub. Default true.
    pub enable: bool,
    /// Node name; must match the certificate's `system:node:<name>`. Default: read from the certificate.
    pub node_name: Option<String>,
    /// Ping interval. Default `15s`.
    #[serde(with = "daemon::duration")]
    pub heartbeat: Duration,
    /// Silence after which the cloud counts as gone. Default `45s`.
    #[serde(with = "daemon::duration")]
    pub keepalive_timeout: Duration,
    /// CA that signed cloudhub's certificate. Default `/etc/kubeedge/ca/rootCA.crt`.
    pub tls_ca_file: PathBuf,
    /// This node's certificate (CN `system:node:<name>`, signed by the cloud's CA). Default
    /// `/etc/kubeedge/certs/edgecore.crt` (not cloudhub's `server.crt` beside it).
    pub tls_cert_file: PathBuf,
    /// This node's key. Default `/etc/kubeedge/certs/edgecore.key`.
    pub tls_private_key_file: PathBuf,
    /// The certificate service (cloudhub's `https`), for renewing the node certificate. Default
    /// `https://127.0.0.1:10002`.
    pub http_server: String,
    /// Renew the node certificate before it expires, at a random point between 70% and 90% of
    /// its lifetime, over mutual TLS with the current one; the link then reconnects with the new
    /// certificate. Default true.
    pub rotate_certificates: bool,
    /// Name cloudhub's certificate must carry. Default: the host of the server address dialled.
    pub server_name: Option<String>,
    /// WebSocket transport (used when enabled; QUIC otherwise).
    pub websocket: Transport<WebSocketDefaults>,
    /// QUIC transport.
    pub quic: Transport<QuicDefaults>,
    /// Upstream messages per second drained from the outbox. Default 100.
    #[serde(rename = "messageQPS")]
    pub message_qps: u32,
    /// Burst of the outbox drain. Default 200.
    pub message_burst: u32,
    /// First reconnect backoff ceiling; doubles per failure (full jitter). Default `1s`.
    #[serde(with = "daemon::duration")]
    pub reconnect_base: Duration,
    /// Largest reconnect backoff. Default `60s`.
    #[serde(with = "daemon::duration")]
    pub reconnect_max: Duration,
    /// Messages in flight each way before acks are needed. Default 128.
    pub window: u32,
    /// Largest frame, in bytes. Default 33554432 (32 MiB).
    pub max_frame: u32,
    /// Seconds added to this machine's clock in the certificate renewal's decisions: only tests
    /// set it, to run an edge whose clock is skewed. Not read from YAML. Default 0.
    #[serde(skip)]
    pub clock_offset_secs: i64,
}

/// A transport section: `server` is one `host:port` or a list tried in turn.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase", bound = "")]
pub struct Transport<D: TransportDefaults> {
    /// Use this transport. Default: WebSocket on, QUIC off (WebSocket wins when both are on).
    pub enable: bool,
    /// cloudhub endpoints. Default `127.0.0.1:<port>`.
    pub server: Servers,
    /// Time to finish TCP/QUIC, TLS and the hello. Default `30s`.
    #[serde(with = "daemon::duration")]
    pub handshake_timeout: Duration,
    /// Bound on every write. Default `15s`.
    #[serde(with = "daemon::duration")]
    pub write_deadline: Duration,
    #[serde(skip)]
    _defaults: PhantomData<D>,
}

/// Default state and port of a transport section.
pub trait TransportDefaults: Clone + std::fmt::Debug + PartialEq + Eq {
    const ENABLE: bool;
    const PORT: u16;
}

/// WebSocket: on, `127.0.0.1:10000`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WebSocketDefaults;

/// QUIC: off, `127.0.0.1:10001`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QuicDefaults;

impl TransportDefaults for WebSocketDefaults {
    const ENABLE: bool = true;
    const PORT: u16 = 10000;
}

impl TransportDefaults for QuicDefaults {
    const ENABLE: bool = false;
    const PORT: u16 = 10001;
}

/// One endpoint or several.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(untagged)]
pub enum Servers {
    One(String),
    Many(Vec<String>),
}

// === impl Config ===

impl Default for Config {
    fn default() -> Self {
        Config {
            enable: true,
            node_name: None,
            heartbeat: Duration::from_secs(15),
            keepalive_timeout: Duration::from_secs(45),
            tls_ca_file: "/etc/kubeedge/ca/rootCA.crt".into(),
            tls_cert_file: "/etc/kubeedge/certs/edgecore.crt".into(),
            tls_private_key_file: "/etc/kubeedge/certs/edgecore.key".into(),
            server_name: None,
            http_server: "https://127.0.0.1:10002".into(),
            rotate_certificates: true,
            clock_offset_secs: 0,
            websocket: Transport::default(),
            quic: Transport::default(),
            message_qps: 100,
            message_burst: 200,
            reconnect_base: Duration::from_secs(1),
            reconnect_max: Duration::from_secs(60),
            window: 128,
            max_frame: 32 << 20,
        }
    }
}

impl Config {
    /// The transport to use and its endpoints.
    pub fn endpoints(&self) -> (link::Transport, Vec<String>, Duration, Duration) {
        if self.websocket.enable || !self.quic.enable {
            let t = &self.websocket;
            (
                link::Transport::WebSocket,
                t.server.list(),
                t.handshake_timeout,
                t.write_deadline,
            )
        } else {
            let t = &self.quic;
            (
                link::Transport::Quic,
                t.server.list(),
                t.handshake_timeout,
                t.write_deadline,
            )
        }
    }
}

impl<D: TransportDefaults> Default for Transport<D> {
    fn default() -> Self {
        Transport {
            enable: D::ENABLE,
            server: Servers::One(format!("127.0.0.1:{}", D::PORT)),
            handshake_timeout: Duration::from_secs(30),
            write_deadline: Duration::from_secs(15),
            _defaults: PhantomData,
        }
    }
}

// === impl Servers ===

impl Servers {
    pub fn list(&self) -> Vec<String> {
        match self {
            Servers::One(s) => s
                .split(',')
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty())
                .collect(),
            Servers::Many(v) => v.clone(),
        }
    }
}
