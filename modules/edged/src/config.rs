//! The `modules.edged` section of `edgecore.yaml` (field names follow KubeEdge's edged and the
//! kubelet's configuration).

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// `modules.edged`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct Config {
    /// Run the node's pods. Default false: a native kubelet against lwproxy is the alternative.
    pub enable: bool,
    /// The node's name. Default empty: the name in the node's certificate (edgehub's identity).
    pub hostname_override: String,
    /// Labels edged puts on its Node (`keadm join --labels`). Default none.
    pub node_labels: std::collections::BTreeMap<String, String>,
    /// The CRI runtime (containerd) socket. Default `unix:///run/containerd/containerd.sock`.
    pub remote_runtime_endpoint: String,
    /// The kubelet's root: pod volumes live under `<rootDirectory>/pods/<uid>/volumes`.
    /// Default `/var/lib/kubelet`.
    pub root_directory: PathBuf,
    /// Container logs, in the kubelet's layout `<dir>/<ns>_<pod>_<uid>/<container>/<n>.log`.
    /// Default `/var/log/pods`.
    pub pod_logs_directory: PathBuf,
    /// How often the node's status is computed and sent when it changed (it is sent at least
    /// every 5 minutes). Default `10s`.
    #[serde(with = "daemon::duration")]
    pub node_status_update_frequency: Duration,
    /// The node Lease's duration; it is renewed every quarter of it. Default 40.
    pub node_lease_duration_seconds: u32,
    /// How often the runtime is relisted to notice containers that exited (the kubelet's
    /// PLEG period). Default `1s`.
    #[serde(with = "daemon::duration")]
    pub relist_period: Duration,
    /// Pods this node accepts (node capacity `pods`). Default 110.
    pub max_pods: u32,
    /// The cluster's DNS servers given to pods with `dnsPolicy: ClusterFirst`. Default none
    /// (the host's resolver settings are used).
    #[serde(rename = "clusterDNS")]
    pub cluster_dns: Vec<String>,
    /// The cluster's DNS domain. Default `cluster.local`.
    pub cluster_domain: String,
    /// Static pods: a directory of pod manifests (YAML or JSON, one pod per file) edged runs
    /// without the cloud, each with a mirror pod in the API. Empty: none. Default
    /// `/etc/kubeedge/manifests`.
    pub static_pod_path: PathBuf,
    /// How often the static pod directory is read again. Default `20s`.
    #[serde(with = "daemon::duration")]
    pub file_check_frequency: Duration,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            enable: false,
            hostname_override: String::new(),
            node_labels: Default::default(),
            remote_runtime_endpoint: "unix:///run/containerd/containerd.sock".into(),
            root_directory: "/var/lib/kubelet".into(),
            pod_logs_directory: "/var/log/pods".into(),
            node_status_update_frequency: Duration::from_secs(10),
            node_lease_duration_seconds: 40,
            relist_period: Duration::from_secs(1),
            max_pods: 110,
            cluster_dns: Vec::new(),
            cluster_domain: "cluster.local".into(),
            static_pod_path: "/etc/kubeedge/manifests".into(),
            file_check_frequency: Duration::from_secs(20),
        }
    }
}
