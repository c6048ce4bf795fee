//! The `modules.cloudHub` section of `cloudcore.yaml` (KubeEdge's names and defaults where they
//! exist).

use std::marker::PhantomData;
use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// `modules.cloudHub`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct Config {
    /// Run cloudhub. Default true.
    pub enable: bool,
    /// Most nodes connected at once; more are refused with a retry hint. Default 10000.
    pub node_limit: usize,
    /// Ping interval on every session. Default `15s`.
    #[serde(with = "daemon::duration")]
    pub keepalive_interval: Duration,
    /// Silence after which a node counts as gone. Default `45s`.
    #[serde(with = "daemon::duration")]
    pub keepalive_timeout: Duration,
    /// Bound on every socket write; a node that does not read is disconnected. Default `30s`.
    #[serde(with = "daemon::duration")]
    pub write_timeout: Duration,
    /// Time a node has to finish TLS and say hello. Default `10s`.
    #[serde(with = "daemon::duration")]
    pub handshake_timeout: Duration,
    /// Handshakes (TLS, stream or upgrade) run at once; more connections wait their turn, and
    /// one that waited a whole `handshakeTimeout` is refused so that its node backs off. A cloud
    /// restart brings every node at once: admitting them all makes each handshake slow enough to
    /// time out. Default 128.
    pub max_concurrent_handshakes: usize,
    /// Handshakes one source address runs at once; a connection beyond it is closed at accept,
    /// before TLS, so a flood of half-open connections from one address cannot take the slots.
    /// Nodes behind one NAT address share it. Default 32.
    pub max_handshakes_per_address: usize,
    /// Of `maxConcurrentHandshakes`, slots kept for addresses that held a valid session before
    /// (so a flood from many addresses cannot keep returning nodes out). Default 32.
    pub reserved_handshakes: usize,
    /// Addresses remembered as having held a valid session; the oldest is forgotten beyond it.
    /// Default 100000.
    pub known_addresses: usize,
    /// Downstream messages in flight per node before acks are needed. Default 128.
    pub window: u32,
    /// Distinct objects that may wait per node; beyond that the node is resynced. Default 100000.
    pub queue_capacity: usize,
    /// Largest frame, in bytes. Default 33554432 (32 MiB).
    pub max_frame: u32,
    /// CA certificate; made (with its key) when neither file exists. Default `/etc/kubeedge/ca/rootCA.crt`.
    #[serde(rename = "tlsCAFile")]
    pub tls_ca_file: PathBuf,
    /// CA key. Default `/etc/kubeedge/ca/rootCA.key`.
    #[serde(rename = "tlsCAKeyFile")]
    pub tls_ca_key_file: PathBuf,
    /// Server certificate; issued by the CA when neither file exists. Default `/etc/kubeedge/certs/server.crt`.
    pub tls_cert_file: PathBuf,
    /// Server key. Default `/etc/kubeedge/certs/server.key`.
    pub tls_private_key_file: PathBuf,
    /// Addresses put in the server certificate (edges dial one of them). Default `[127.0.0.1]`.
    pub advertise_address: Vec<IpAddr>,
    /// Extra DNS names for the server certificate. Default `[localhost]`.
    pub dns_names: Vec<String>,
    /// WebSocket listener: enabled, `0.0.0.0:10000` by default.
    pub websocket: Listener<WebSocketDefaults>,
    /// QUIC listener: disabled, `0.0.0.0:10001` by default.
    pub quic: Listener<QuicDefaults>,
    /// The certificate service (HTTPS): `GET /ca.crt`, and `POST /edge.crt` to sign a node's
    /// CSR, with a bootstrap token (`keadm join`) or over mutual TLS with the node's current
    /// certificate (renewal). Enabled, `0.0.0.0:10002` by default.
    pub https: Listener<HttpsDefaults>,
    /// Validity of the node certificates the certificate service signs: a duration (`720h`)
    /// or, as in KubeEdge, a bare number of days. Default `8760h` (365 days).
    #[serde(with = "days_or_duration")]
    pub edge_cert_signing_duration: Duration,
    /// Module that says what each node should hold and takes upstream messages. Default `edgecontroller`.
    pub controller_module: String,
    /// How long cloudhub waits for the controller to answer. Default `30s`.
    #[serde(with = "daemon::duration")]
    pub controller_timeout: Duration,
}

/// A listener section; its defaults come from `D`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase", bound = "")]
pub struct Listener<D: ListenerDefaults> {
    /// Serve this transport.
    pub enable: bool,
    /// Listen address. Default `0.0.0.0`.
    pub address: IpAddr,
    /// Listen port.
    pub port: u16,
    #[serde(skip)]
    _defaults: PhantomData<D>,
}

/// Default port and state of a listener section.
pub trait ListenerDefaults: Clone + std::fmt::Debug + PartialEq + Eq {
    const PORT: u16;
    const ENABLE: bool;
}

/// The certificate service: on, port 10002.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HttpsDefaults;

/// WebSocket: on, port 10000.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WebSocketDefaults;

/// QUIC: off, port 10001.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QuicDefaults;

impl ListenerDefaults for WebSocketDefaults {
    const PORT: u16 = 10000;
    const ENABLE: bool = true;
}

impl ListenerDefaults for QuicDefaults {
    const PORT: u16 = 10001;
    const ENABLE: bool = false;
}

impl ListenerDefaults for HttpsDefaults {
    const PORT: u16 = 10002;
    const ENABLE: bool = true;
}

/// Serde for a duration that may be a bare number of days (KubeEdge's
/// `edgeCertSigningDuration` is in days): `720h`, or `365`.
#[allow(non_camel_case_types)]
struct days_or_duration;

impl days_or_duration {
    fn serialize<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        daemon::duration::serialize(d, s)
    }

    fn deserialize<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Days(u64),
            Text(String),
        }
        match Raw::deserialize(d)? {
            Raw::Days(days) => Ok(Duration::from_secs(days * 86400)),
            Raw::Text(t) => daemon::duration::parse(&t).map_err(serde::de::Error::custom),
        }
    }
}

impl schemars::JsonSchema for days_or_duration {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "DaysOrDuration".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "type": "string",
            "description": "A duration with unit ms, s, m or h (`720h`), or a bare number of days",
        })
    }
}

// === impl Config ===

impl Default for Config {
    fn default() -> Self {
        Config {
            enable: true,
            node_limit: 10_000,
            keepalive_interval: Duration::from_secs(15),
            keepalive_timeout: Duration::from_secs(45),
            write_timeout: Duration::from_secs(30),
            handshake_timeout: Duration::from_secs(10),
            max_concurrent_handshakes: 128,
            max_handshakes_per_address: 32,
            reserved_handshakes: 32,
            known_addresses: 100_000,
            window: 128,
            queue_capacity: 100_000,
            max_frame: 32 << 20,
            tls_ca_file: "/etc/kubeedge/ca/rootCA.crt".into(),
            tls_ca_key_file: "/etc/kubeedge/ca/rootCA.key".into(),
            tls_cert_file: "/etc/kubeedge/certs/server.crt".into(),
            tls_private_key_file: "/etc/kubeedge/certs/server.key".into(),
            advertise_address: vec![IpAddr::from([127, 0, 0, 1])],
            dns_names: vec!["localhost".into()],
            websocket: Listener::default(),
            quic: Listener::default(),
            https: Listener::default(),
            edge_cert_signing_duration: Duration::from_secs(365 * 86400),
            controller_module: "edgecontroller".into(),
            controller_timeout: Duration::from_secs(30),
        }
    }
}

impl<D: ListenerDefaults> Default for Listener<D> {
    fn default() -> Self {
        Listener {
            enable: D::ENABLE,
            address: IpAddr::from([0, 0, 0, 0]),
            port: D::PORT,
            _defaults: PhantomData,
        }
    }
}

impl<D: ListenerDefaults> Listener<D> {
    pub fn socket_addr(&self) -> std::net::SocketAddr {
        std::net::SocketAddr::new(self.address, self.port)
    }
}
