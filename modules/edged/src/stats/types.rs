//! The kubelet's stats Summary (`k8s.io/kubelet/pkg/apis/stats/v1alpha1`) as JSON: the field
//! names are the kubelet's, absent values are left out as its `omitempty` does.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde::{Deserialize, Serialize};

/// `GET /stats/summary`: the node and its pods.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// The node's usage.
    pub node: NodeStats,
    /// Each pod's usage.
    pub pods: Vec<PodStats>,
}

/// The node's usage.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeStats {
    /// The node's name.
    pub node_name: String,
    /// When the node booted.
    pub start_time: Time,
    /// CPU of the whole node.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu: Option<CpuStats>,
    /// Memory of the whole node.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory: Option<MemoryStats>,
    /// The node's network interfaces.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub network: Option<NetworkStats>,
    /// The filesystem holding the kubelet's root directory.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fs: Option<FsStats>,
}

/// One pod's usage.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodStats {
    /// Which pod.
    pub pod_ref: PodReference,
    /// When its sandbox was created.
    pub start_time: Time,
    /// Its running containers.
    pub containers: Vec<ContainerStats>,
    /// CPU of the whole pod.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu: Option<CpuStats>,
    /// Memory of the whole pod.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory: Option<MemoryStats>,
    /// The pod's network, when the runtime reports it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub network: Option<NetworkStats>,
}

/// A pod's name, namespace and uid.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PodReference {
    /// The pod's name.
    pub name: String,
    /// The pod's namespace.
    pub namespace: String,
    /// The pod's uid.
    pub uid: String,
}

/// One container's usage.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ContainerStats {
    /// The container's name in the pod.
    pub name: String,
    /// When the container was created.
    pub start_time: Time,
    /// Its CPU.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu: Option<CpuStats>,
    /// Its memory.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory: Option<MemoryStats>,
    /// Its writable layer.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rootfs: Option<FsStats>,
    /// Its log files.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub logs: Option<FsStats>,
}

/// CPU usage at `time`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CpuStats {
    /// When it was sampled.
    pub time: Time,
    /// Cores used (in billionths), averaged since the previous sample.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage_nano_cores: Option<u64>,
    /// CPU time used so far, in nanoseconds of one core.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage_core_nano_seconds: Option<u64>,
}

/// Memory usage at `time`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MemoryStats {
    /// When it was sampled.
    pub time: Time,
    /// Memory left before the limit (the node's capacity for the node).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub available_bytes: Option<u64>,
    /// All memory used, page cache included.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage_bytes: Option<u64>,
    /// Memory that cannot be reclaimed easily (what evictions and `kubectl top` use).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub working_set_bytes: Option<u64>,
    /// Anonymous memory and swap cache.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rss_bytes: Option<u64>,
}

/// Network usage at `time`: the default interface inline, and every interface.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NetworkStats {
    /// When it was sampled.
    pub time: Time,
    /// The default interface's counters.
    #[serde(flatten)]
    pub default: InterfaceStats,
    /// Every interface's counters.
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub interfaces: Vec<InterfaceStats>,
}

/// One interface's counters.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InterfaceStats {
    /// The interface's name.
    pub name: String,
    /// Bytes received.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rx_bytes: Option<u64>,
    /// Receive errors.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rx_errors: Option<u64>,
    /// Bytes sent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tx_bytes: Option<u64>,
    /// Send errors.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tx_errors: Option<u64>,
}

/// A filesystem's (or a part of one's) usage at `time`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FsStats {
    /// When it was sampled.
    pub time: Time,
    /// Bytes free to unprivileged users.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub available_bytes: Option<u64>,
    /// The filesystem's size.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub capacity_bytes: Option<u64>,
    /// Bytes used (by the whole filesystem, or by the part described).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub used_bytes: Option<u64>,
    /// Inodes free.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub inodes_free: Option<u64>,
    /// Inodes in total.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub inodes: Option<u64>,
    /// Inodes used (by the whole filesystem, or by the part described).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub inodes_used: Option<u64>,
}
