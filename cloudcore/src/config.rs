//! `cloudcore.yaml`: one section per module, each with an `enable` flag. Sections appear here
//! as their modules are built; an unknown section or key is an error that names it.

use daemon::CommonConfig;
use serde::{Deserialize, Serialize};

/// The whole `cloudcore.yaml`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct Config {
    /// Default `cloudcore.config.kubeedge.io/v1alpha1`.
    pub api_version: String,
    /// Default `CloudCore`.
    pub kind: String,
    /// Monitor listener, grace period, mailbox size.
    pub common_config: CommonConfig,
    /// Which Kubernetes API cloudcore uses.
    #[serde(rename = "kubeAPIConfig")]
    pub kube_api_config: KubeApiConfig,
    /// One section per module.
    pub modules: Modules,
}

/// The `modules` section: one entry per cloud module built so far.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct Modules {
    /// The embedded control plane (used when `kubeAPIConfig.kubeConfig` is empty).
    pub api_server: apiserver::Config,
    /// The cloud end of the link.
    pub cloud_hub: cloudhub::Config,
    /// What each edge node holds, from Kubernetes watches; applies nodes' writes.
    pub edge_controller: edgecontroller::Config,
    /// The scheduler and workload controllers of the embedded control plane (not run against a
    /// real cluster, which has its own).
    pub controllers: controllers::Config,
    /// The edge platform's own controllers (NodeGroup, EdgeApplication), run in both modes.
    pub sites: sites::Config,
    /// The kubelet-compatible endpoint a real cluster's kube-apiserver reaches the nodes'
    /// kubelet APIs through (off by default; the embedded control plane needs none).
    pub cloud_stream: crate::stream::Config,
}

/// `kubeAPIConfig`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct KubeApiConfig {
    /// Kubeconfig of a real cluster. Empty (default): the embedded control plane
    /// (`modules.apiServer`) is started and its admin kubeconfig is used.
    pub kube_config: std::path::PathBuf,
}

pub const API_VERSION: &str = "cloudcore.config.kubeedge.io/v1alpha1";
pub const KIND: &str = "CloudCore";

impl Default for Config {
    fn default() -> Self {
        Config {
            api_version: API_VERSION.into(),
            kind: KIND.into(),
            common_config: CommonConfig::default(),
            kube_api_config: KubeApiConfig::default(),
            modules: Modules::default(),
        }
    }
}
