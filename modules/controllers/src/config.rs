//! The `modules.controllers` section of `cloudcore.yaml`.

use serde::{Deserialize, Serialize};

/// `modules.controllers`: the controllers a real cluster's kube-scheduler and
/// kube-controller-manager run, for the embedded control plane. They run only with it (a real
/// cluster has its own).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct Config {
    /// Run the controllers with the embedded control plane. Default true.
    pub enable: bool,
    /// The scheduler.
    pub scheduler: SchedulerConfig,
    /// A node whose kubelet renewed neither its Lease nor its status for this long is
    /// `Ready=Unknown` and tainted unreachable; its pods are not evicted. Default `40s`.
    #[serde(with = "daemon::duration")]
    pub node_monitor_grace_period: std::time::Duration,
    /// The longest certificate the CertificateSigningRequest signers issue (kube's
    /// `--cluster-signing-duration`); a request's `spec.expirationSeconds` asks for less.
    /// Default `8760h`.
    #[serde(with = "daemon::duration")]
    pub cluster_signing_duration: std::time::Duration,
    /// The HorizontalPodAutoscaler controller.
    pub horizontal_pod_autoscaler: crate::hpa::HpaConfig,
}

/// `modules.controllers.scheduler`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct SchedulerConfig {
    /// Bind pods without `spec.nodeName`. Default true.
    pub enable: bool,
    /// Binds in flight at once. Default 64.
    pub bind_concurrency: usize,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            enable: true,
            scheduler: SchedulerConfig::default(),
            node_monitor_grace_period: std::time::Duration::from_secs(40),
            cluster_signing_duration: std::time::Duration::from_secs(365 * 86400),
            horizontal_pod_autoscaler: crate::hpa::HpaConfig::default(),
        }
    }
}

impl Default for SchedulerConfig {
    fn default() -> Self {
        SchedulerConfig {
            enable: true,
            bind_concurrency: 64,
        }
    }
}
