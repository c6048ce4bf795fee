//! The names site-local services are decided by, shared by the cloud (the `sites` controllers,
//! edgecontroller, the EndpointSlice controller) and the edge (lwproxy's filters), so the edge
//! does not depend on the cloud crates. `sites` keeps its own copies of the KubeEdge names
//! (`BELONGING_TO`, `SERVICE_TOPOLOGY`, `RANGE_NODEGROUP`); these must equal them.

/// The API group of KubeEdge's NodeGroup.
pub const NODE_GROUP_GROUP: &str = "apps.kubeedge.io";
/// The version of NodeGroup served.
pub const NODE_GROUP_VERSION: &str = "v1alpha1";
/// NodeGroup's kind.
pub const NODE_GROUP_KIND: &str = "NodeGroup";
/// NodeGroup's plural.
pub const NODE_GROUPS: &str = "nodegroups";
/// The edge store's collection of NodeGroups (`plural.group`).
pub const NODE_GROUP_RESOURCE: &str = "nodegroups.apps.kubeedge.io";

/// The label a NodeGroup puts on its member nodes, valued with the group's name.
pub const BELONGING_TO: &str = "apps.kubeedge.io/belonging-to";
/// The Service annotation that closes its traffic to the client node's group.
pub const SERVICE_TOPOLOGY: &str = "apps.kubeedge.io/service-topology";
/// [`SERVICE_TOPOLOGY`]'s value: endpoints in the client node's NodeGroup only.
pub const RANGE_NODEGROUP: &str = "range-nodegroup";

/// OpenYurt's Service annotation: `kubernetes.io/hostname` (same node), `openyurt.io/nodepool`
/// or `kubernetes.io/zone` (same pool; here, same NodeGroup).
pub const OPENYURT_TOPOLOGY_KEYS: &str = "openyurt.io/topologyKeys";
/// [`OPENYURT_TOPOLOGY_KEYS`]: the client's own node.
pub const OPENYURT_SAME_NODE: &str = "kubernetes.io/hostname";
/// [`OPENYURT_TOPOLOGY_KEYS`]: the client's pool.
pub const OPENYURT_SAME_POOL: &str = "openyurt.io/nodepool";
/// [`OPENYURT_TOPOLOGY_KEYS`]: the client's zone, which yurthub treats as its pool.
pub const OPENYURT_SAME_ZONE: &str = "kubernetes.io/zone";

/// A node's zone label (set to the group's name by a NodeGroup with `topologyEnabled`).
pub const ZONE_LABEL: &str = "topology.kubernetes.io/zone";
/// The label naming an EndpointSlice's Service.
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";
/// The Service annotation that turns on topology-aware routing (`Auto`).
pub const TOPOLOGY_MODE: &str = "service.kubernetes.io/topology-mode";
/// The deprecated predecessor of [`TOPOLOGY_MODE`].
pub const TOPOLOGY_AWARE_HINTS: &str = "service.kubernetes.io/topology-aware-hints";
/// `spec.trafficDistribution`'s value asking for endpoints close to the client.
pub const PREFER_CLOSE: &str = "PreferClose";
