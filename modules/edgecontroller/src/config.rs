//! The `modules.edgeController` section of `cloudcore.yaml`.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// `modules.edgeController`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct Config {
    /// Run edgecontroller. Default true.
    pub enable: bool,
    /// Custom resources edge nodes hold, as `group/version/plural/Kind`
    /// (`devices.kubeedge.io/v1beta1/devices/Device`): an object with `spec.nodeName` goes to
    /// that node only, any other to every edge node; the CRDs go to every edge node. Default none.
    pub custom_resources: Vec<String>,
    /// Create the Node (labelled `node-role.kubernetes.io/edge`) of a node that connects without
    /// one. Default true.
    pub register_nodes: bool,
    /// How long a write a node sent may take at the Kubernetes API. Default `30s`.
    #[serde(with = "daemon::duration")]
    pub request_timeout: Duration,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            enable: true,
            custom_resources: Vec::new(),
            register_nodes: true,
            request_timeout: Duration::from_secs(30),
        }
    }
}
