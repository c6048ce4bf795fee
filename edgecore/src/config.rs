//! `edgecore.yaml`: one section per module, each with an `enable` flag. Sections appear here
//! as their modules are built; an unknown section or key is an error that names it.

use std::net::SocketAddr;

use daemon::CommonConfig;
use metamanager::DatabaseConfig;
use serde::{Deserialize, Serialize};

/// The whole `edgecore.yaml`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct Config {
    /// Default `edgecore.config.kubeedge.io/v1alpha2`.
    pub api_version: String,
    /// Default `EdgeCore`.
    pub kind: String,
    /// Monitor listener, grace period, mailbox size.
    pub common_config: CommonConfig,
    /// The edge store file.
    pub database: DatabaseConfig,
    /// One section per module.
    pub modules: Modules,
}

/// The `modules` section: one entry per edge module built so far.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct Modules {
    /// The edge store module.
    pub meta_manager: metamanager::Config,
    /// The edge end of the link.
    pub edge_hub: edgehub::Config,
    /// The local Kubernetes endpoint.
    pub lw_proxy: lwproxy::Config,
    /// The node's pods on containerd.
    pub edged: edged::Config,
    /// The cloud's kubelet API streams forwarded to a native kubelet (instead of edged).
    pub edge_stream: crate::edgestream::Config,
    /// Cluster DNS at the edge.
    #[serde(rename = "edgeDNS")]
    pub edge_dns: edgedns::Config,
}

pub const API_VERSION: &str = "edgecore.config.kubeedge.io/v1alpha2";
pub const KIND: &str = "EdgeCore";

impl Default for Config {
    fn default() -> Self {
        Config {
            api_version: API_VERSION.into(),
            kind: KIND.into(),
            common_config: CommonConfig::with_monitor(SocketAddr::from(([127, 0, 0, 1], 10352))),
            database: DatabaseConfig::default(),
            modules: Modules::default(),
        }
    }
}
