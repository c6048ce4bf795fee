//! Which endpoints a closed Service shows this node: pure functions of the Service, the
//! EndpointSlice (or Endpoints) and where the node stands ([`Place`]), with no I/O.
//!
//! - `apps.kubeedge.io/service-topology: range-nodegroup` (KubeEdge) and `openyurt.io/topologyKeys`
//!   `openyurt.io/nodepool` / `kubernetes.io/zone` (OpenYurt): endpoints on the nodes of this
//!   node's NodeGroup. A node in no group (or whose group the edge does not hold) falls back to
//!   its own endpoints, as yurthub does for a node in no pool: closed means closed.
//! - `openyurt.io/topologyKeys: kubernetes.io/hostname`: endpoints on this node only.
//! - Topology-aware routing (`service.kubernetes.io/topology-mode: Auto`, the deprecated
//!   `topology-aware-hints: Auto`, `spec.trafficDistribution: PreferClose`): as kube-proxy
//!   does, the endpoints whose `hints.forZones` name this node's zone, when every ready endpoint
//!   of the Service carries hints and one names the zone; otherwise all of them.
//!
//! Endpoints without a `nodeName` are dropped by the closures (yurthub does the same); a slice
//! left without endpoints is still served, empty. Everything else in the object (its metadata,
//! its resourceVersion) is untouched.

use std::collections::BTreeSet;

use apimachinery::sites;
use serde_json::Value;

/// How a Service's endpoints are chosen for this node.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Mode {
    /// All of them (no topology annotation).
    Open,
    /// On this node.
    Node,
    /// In this node's NodeGroup.
    Group,
    /// By Kubernetes' zone hints.
    Hints,
}

/// Where this node stands, as the edge store last said.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Place {
    /// This node's name.
    pub node: String,
    /// Its `topology.kubernetes.io/zone` label.
    pub zone: Option<String>,
    /// The members of its NodeGroup (`None`: in no group, or the group is not held).
    pub members: Option<BTreeSet<String>>,
}

/// The mode of `service` (a Service as JSON); `Open` for anything else.
pub(crate) fn mode(service: &Value) -> Mode {
    let annotations = &service["metadata"]["annotations"];
    let annotation = |k: &str| annotations.get(k).and_then(Value::as_str).unwrap_or("");
    if annotation(sites::SERVICE_TOPOLOGY) == sites::RANGE_NODEGROUP {
        return Mode::Group;
    }
    match annotation(sites::OPENYURT_TOPOLOGY_KEYS).trim() {
        sites::OPENYURT_SAME_NODE => return Mode::Node,
        sites::OPENYURT_SAME_POOL | sites::OPENYURT_SAME_ZONE => return Mode::Group,
        _ => {}
    }
    let auto = |k: &str| annotation(k).eq_ignore_ascii_case("auto");
    let close = service["spec"]["trafficDistribution"].as_str() == Some(sites::PREFER_CLOSE);
    if auto(sites::TOPOLOGY_MODE) || auto(sites::TOPOLOGY_AWARE_HINTS) || close {
        return Mode::Hints;
    }
    Mode::Open
}

/// Whether zone hints apply to a Service whose endpoints (of all its slices) are `endpoints`,
/// for a node in `zone`: every ready endpoint has hints and one names the zone (kube-proxy's
/// rule).
pub(crate) fn hints_apply<'a>(
    zone: Option<&str>,
    endpoints: impl IntoIterator<Item = &'a Value>,
) -> bool {
    let Some(zone) = zone.filter(|z| !z.is_empty()) else {
        return false;
    };
    let mut for_zone = false;
    for ep in endpoints.into_iter().filter(|ep| ready(ep)) {
        let zones = hinted_zones(ep);
        if zones.is_empty() {
            return false;
        }
        for_zone |= zones.contains(&zone);
    }
    for_zone
}

/// Trims an EndpointSlice to what `mode` shows a node at `place`; `hinted`: whether zone hints
/// apply to its Service ([`hints_apply`]). Returns whether anything was removed.
pub(crate) fn endpoint_slice(slice: &mut Value, mode: Mode, place: &Place, hinted: bool) -> bool {
    let Some(keep) = Keep::of(mode, place, hinted) else {
        return false;
    };
    let Some(map) = slice.as_object_mut() else {
        return false;
    };
    let endpoints = match map.get_mut("endpoints") {
        Some(Value::Array(eps)) => std::mem::take(eps),
        _ => Vec::new(),
    };
    let before = endpoints.len();
    let kept: Vec<Value> = endpoints
        .into_iter()
        .filter(|ep| keep.slice_endpoint(ep))
        .collect();
    let removed = kept.len() != before;
    map.insert("endpoints".into(), Value::Array(kept));
    removed
}

/// Trims an Endpoints object to what `mode` shows a node at `place` (hints do not apply to
/// Endpoints); subsets left empty go. Returns whether anything was removed.
pub(crate) fn endpoints(obj: &mut Value, mode: Mode, place: &Place) -> bool {
    let Some(keep) = Keep::of(mode, place, false) else {
        return false;
    };
    let Some(Value::Array(subsets)) = obj.get_mut("subsets") else {
        return false;
    };
    let mut removed = false;
    for subset in subsets.iter_mut() {
        for field in ["addresses", "notReadyAddresses"] {
            if let Some(Value::Array(addrs)) = subset.get_mut(field) {
                let before = addrs.len();
                addrs.retain(|a| keep.node(a["nodeName"].as_str()));
                removed |= addrs.len() != before;
            }
        }
    }
    let has = |s: &Value, f: &str| s[f].as_array().is_some_and(|a| !a.is_empty());
    subsets.retain(|s| has(s, "addresses") || has(s, "notReadyAddresses"));
    removed
}

/// What an endpoint must satisfy to stay.
enum Keep<'a> {
    /// Its node is one of these.
    Nodes(BTreeSet<&'a str>),
    /// Its hints name this zone.
    Zone(&'a str),
}

impl<'a> Keep<'a> {
    fn of(mode: Mode, place: &'a Place, hinted: bool) -> Option<Keep<'a>> {
        let own = || BTreeSet::from([place.node.as_str()]);
        match mode {
            Mode::Open => None,
            Mode::Node => Some(Keep::Nodes(own())),
            Mode::Group => Some(Keep::Nodes(match &place.members {
                Some(members) => members
                    .iter()
                    .map(String::as_str)
                    .chain([place.node.as_str()])
                    .collect(),
                None => own(),
            })),
            Mode::Hints => match (hinted, place.zone.as_deref()) {
                (true, Some(zone)) => Some(Keep::Zone(zone)),
                _ => None,
            },
        }
    }

    fn node(&self, node: Option<&str>) -> bool {
        match self {
            Keep::Nodes(nodes) => node.is_some_and(|n| nodes.contains(n)),
            Keep::Zone(_) => true,
        }
    }

    fn slice_endpoint(&self, ep: &Value) -> bool {
        match self {
            Keep::Nodes(_) => self.node(ep["nodeName"].as_str()),
            Keep::Zone(zone) => hinted_zones(ep).contains(zone),
        }
    }
}

/// An endpoint counts as ready unless `conditions.ready` is false.
fn ready(ep: &Value) -> bool {
    ep["conditions"]["ready"].as_bool() != Some(false)
}

/// The zones in an endpoint's `hints.forZones`.
fn hinted_zones(ep: &Value) -> Vec<&str> {
    ep["hints"]["forZones"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|z| z["name"].as_str())
        .collect()
}

#[cfg(test)]
mod tests;
