//! The `modules.sites` section of `cloudcore.yaml`.

use serde::{Deserialize, Serialize};

/// `modules.sites`: the controllers that exist because this is an edge platform (KubeEdge's
/// controller-manager). They run in both modes, against a real cluster as against the
/// embedded control plane.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct Config {
    /// Run the site controllers. Default true.
    pub enable: bool,
    /// The NodeGroup controller (`apps.kubeedge.io/v1alpha1` NodeGroup).
    pub node_group: Toggle,
    /// The EdgeApplication controller (`apps.kubeedge.io/v1alpha1` EdgeApplication).
    pub edge_application: Toggle,
}

/// A controller that can be turned off.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct Toggle {
    /// Run it. Default true.
    pub enable: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            enable: true,
            node_group: Toggle::default(),
            edge_application: Toggle::default(),
        }
    }
}

impl Default for Toggle {
    fn default() -> Self {
        Toggle { enable: true }
    }
}
