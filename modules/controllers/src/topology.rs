//! Topology for the EndpointSlice controller, as kube-controller-manager's: every endpoint's
//! `zone` is its node's `topology.kubernetes.io/zone` label, and Services that ask for
//! topology-aware routing get `hints.forZones`, which kube-proxy (and lwproxy at the edge)
//! use to keep traffic in the client's zone.
//!
//! - `service.kubernetes.io/topology-mode: Auto` (or the deprecated
//!   `service.kubernetes.io/topology-aware-hints: Auto`; the annotation wins over
//!   `trafficDistribution`): the "Auto" heuristic. Each zone is allotted endpoints in
//!   proportion to the allocatable CPU of its ready nodes (control-plane nodes aside). Hints
//!   are given only when it is safe: every ready node has a zone and a CPU figure, there are
//!   at least as many ready endpoints as zones, every ready endpoint is in a known zone, and
//!   after moving endpoints from zones with more than their share to zones with less, every
//!   zone gets at least its share divided by 1.2 (the 20% overload threshold) and at most
//!   that minimum plus what is left over. Otherwise no endpoint carries hints. Endpoints that
//!   are not ready carry none.
//! - `spec.trafficDistribution: PreferClose`: each endpoint with a zone is hinted for its own
//!   zone (kube-proxy falls back to all endpoints when one lacks hints or none is for its zone).
//!
//! Simplified against kube-controller-manager: the node figures are read when a Service is
//! synced (no separate topology cache refresh), the endpoints moved between zones are the last
//! of each giving zone in name order (kube picks them the same way but over its own slice
//! order), and no events are recorded when hints are withheld.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, RwLock};

use apimachinery::sites;
use k8s_openapi::api::core::v1::{Node, Service};
use reconciler::Cache;
use serde_json::{Value, json};

/// The label of control-plane nodes, which do not count towards a zone's share.
const CONTROL_PLANE: &str = "node-role.kubernetes.io/control-plane";
/// How much more than its share a zone may be given (kube's 20%).
const OVERLOAD: f64 = 0.2;

/// Which heuristic assigns a Service's hints.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Heuristic {
    /// `topology-mode: Auto`: proportional to the zones' CPU.
    Auto,
    /// `trafficDistribution: PreferClose`: each endpoint for its own zone.
    PreferClose,
}

/// What the hints need to know of one node.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct NodeInfo {
    pub zone: Option<String>,
    /// Allocatable CPU, in millicores.
    pub cpu_millis: Option<i64>,
    pub ready: bool,
    pub control_plane: bool,
}

/// One zone's share of a Service's ready endpoints.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Allocation {
    pub minimum: usize,
    pub desired: f64,
    pub maximum: usize,
}

/// The nodes' zones and CPU, kept by a watch of the Nodes.
#[derive(Clone, Default)]
pub struct Zones(Arc<RwLock<HashMap<String, NodeInfo>>>);

// === impl Zones ===

impl Zones {
    /// Follows the Nodes of `nodes` (the shared cache); `changed` is called, once they are
    /// listed, whenever what the hints need of a node changes (its Services are to be synced
    /// again).
    pub fn follow(nodes: &Arc<Cache<Node>>, changed: impl Fn() + Send + 'static) -> Zones {
        let zones = Zones::default();
        let this = zones.clone();
        let listed = Arc::downgrade(nodes);
        nodes.subscribe(move |c| {
            let moved = match c.deleted {
                true => this.remove(&c.now),
                false => this.put(&c.now),
            };
            if moved && listed.upgrade().is_some_and(|n| n.synced()) {
                changed();
            }
        });
        zones
    }

    /// The zone of node `node`.
    pub(crate) fn zone(&self, node: &str) -> Option<String> {
        self.read().get(node).and_then(|n| n.zone.clone())
    }

    /// Each zone's share of the cluster's CPU, if every counted node says both.
    pub(crate) fn cpu_ratios(&self) -> Option<BTreeMap<String, f64>> {
        cpu_ratios(self.read().values())
    }

    fn put(&self, node: &Node) -> bool {
        let name = node.metadata.name.clone().unwrap_or_default();
        let info = node_info(node);
        let mut map = self.0.write().unwrap_or_else(|e| e.into_inner());
        map.insert(name, info.clone()) != Some(info)
    }

    fn remove(&self, node: &Node) -> bool {
        let name = node.metadata.name.clone().unwrap_or_default();
        let mut map = self.0.write().unwrap_or_else(|e| e.into_inner());
        map.remove(&name).is_some()
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, HashMap<String, NodeInfo>> {
        self.0.read().unwrap_or_else(|e| e.into_inner())
    }
}

/// Sets each endpoint's `zone` from its node and the hints `svc` asks for.
pub(crate) fn fill<'a>(
    svc: &Service,
    endpoints: impl IntoIterator<Item = &'a mut Value>,
    zones: &Zones,
) {
    let mut endpoints: Vec<&mut Value> = endpoints.into_iter().collect();
    for ep in endpoints.iter_mut() {
        let zone = ep["nodeName"].as_str().and_then(|n| zones.zone(n));
        if let (Some(zone), Some(map)) = (zone, ep.as_object_mut()) {
            map.insert("zone".into(), json!(zone));
        }
    }
    match heuristic(svc) {
        Some(Heuristic::Auto) => auto_hints(&mut endpoints, zones.cpu_ratios().as_ref()),
        Some(Heuristic::PreferClose) => prefer_close(&mut endpoints),
        None => {}
    }
}

/// The heuristic `svc` asks for, if any.
pub(crate) fn heuristic(svc: &Service) -> Option<Heuristic> {
    let annotations = svc.metadata.annotations.clone().unwrap_or_default();
    let mode = annotations
        .get(sites::TOPOLOGY_MODE)
        .or_else(|| annotations.get(sites::TOPOLOGY_AWARE_HINTS));
    if mode.is_some_and(|m| m.eq_ignore_ascii_case("auto")) {
        return Some(Heuristic::Auto);
    }
    let distribution = svc
        .spec
        .as_ref()
        .and_then(|s| s.traffic_distribution.as_deref());
    (distribution == Some(sites::PREFER_CLOSE)).then_some(Heuristic::PreferClose)
}

/// What the hints need of `node`.
pub(crate) fn node_info(node: &Node) -> NodeInfo {
    let labels = node.metadata.labels.clone().unwrap_or_default();
    let status = node.status.as_ref();
    NodeInfo {
        zone: labels
            .get(sites::ZONE_LABEL)
            .filter(|z| !z.is_empty())
            .cloned(),
        cpu_millis: status
            .and_then(|s| s.allocatable.as_ref())
            .and_then(|a| a.get("cpu"))
            .and_then(|q| apimachinery::quantity::milli(&q.0)),
        ready: status
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True")),
        control_plane: labels.contains_key(CONTROL_PLANE),
    }
}

/// Each zone's share of the CPU of the ready worker nodes; `None` when one of them lacks a
/// zone or a CPU figure, or there is none.
pub(crate) fn cpu_ratios<'a>(
    nodes: impl IntoIterator<Item = &'a NodeInfo>,
) -> Option<BTreeMap<String, f64>> {
    let mut by_zone: BTreeMap<String, i64> = BTreeMap::new();
    for node in nodes.into_iter().filter(|n| n.ready && !n.control_plane) {
        let (zone, cpu) = (node.zone.clone()?, node.cpu_millis?);
        *by_zone.entry(zone).or_default() += cpu;
    }
    let total: i64 = by_zone.values().sum();
    if total <= 0 {
        return None;
    }
    Some(
        by_zone
            .into_iter()
            .map(|(zone, cpu)| (zone, cpu as f64 / total as f64))
            .collect(),
    )
}

/// Each zone's share of `n` ready endpoints; `None` when there are fewer endpoints than zones
/// or the minimums do not fit.
pub(crate) fn allocations(
    ratios: &BTreeMap<String, f64>,
    n: usize,
) -> Option<BTreeMap<String, Allocation>> {
    if ratios.len() > n {
        return None;
    }
    let mut minimums = BTreeMap::new();
    for (zone, ratio) in ratios {
        let desired = ratio * n as f64;
        let minimum = (desired / (1.0 + OVERLOAD)).ceil() as usize;
        minimums.insert(zone.clone(), (minimum, desired.max(minimum as f64)));
    }
    let total: usize = minimums.values().map(|(m, _)| m).sum();
    let spare = n.checked_sub(total)?;
    Some(
        minimums
            .into_iter()
            .map(|(zone, (minimum, desired))| {
                let maximum = minimum + spare;
                (
                    zone,
                    Allocation {
                        minimum,
                        desired,
                        maximum,
                    },
                )
            })
            .collect(),
    )
}

/// The "Auto" heuristic over all the Service's endpoints (see the module doc).
pub(crate) fn auto_hints(endpoints: &mut [&mut Value], ratios: Option<&BTreeMap<String, f64>>) {
    let assigned = ratios.and_then(|r| assign(endpoints, r));
    for (i, ep) in endpoints.iter_mut().enumerate() {
        let Some(map) = ep.as_object_mut() else {
            continue;
        };
        match assigned.as_ref().and_then(|a| a.get(&i)) {
            Some(zone) => map.insert("hints".into(), json!({"forZones": [{"name": zone}]})),
            None => map.remove("hints"),
        };
    }
}

/// Which zone each ready endpoint (by index) serves, if hints can be given safely.
fn assign(
    endpoints: &[&mut Value],
    ratios: &BTreeMap<String, f64>,
) -> Option<BTreeMap<usize, String>> {
    let ready: Vec<usize> = (0..endpoints.len())
        .filter(|i| endpoints[*i]["conditions"]["ready"].as_bool() != Some(false))
        .collect();
    let allocations = allocations(ratios, ready.len())?;
    let mut assigned = BTreeMap::new();
    let mut by_zone: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for i in ready {
        let zone = endpoints[i]["zone"].as_str()?.to_owned();
        allocations.get(&zone)?;
        by_zone.entry(zone.clone()).or_default().push(i);
        assigned.insert(i, zone);
    }
    let count =
        |zone: &str, by_zone: &BTreeMap<String, Vec<usize>>| by_zone.get(zone).map_or(0, Vec::len);
    // Move endpoints from zones above their share to zones below their minimum.
    for (zone, alloc) in &allocations {
        while count(zone, &by_zone) < alloc.minimum {
            let giver = allocations
                .iter()
                .filter(|(z, a)| count(z, &by_zone) as f64 > a.desired)
                .max_by(|(z1, a1), (z2, a2)| {
                    let surplus = |z: &str, a: &Allocation| count(z, &by_zone) as f64 - a.desired;
                    surplus(z1, a1).total_cmp(&surplus(z2, a2))
                })
                .map(|(z, _)| z.clone())?;
            let moved = by_zone.get_mut(&giver)?.pop()?;
            by_zone.entry(zone.clone()).or_default().push(moved);
            assigned.insert(moved, zone.clone());
        }
    }
    let safe = allocations.iter().all(|(zone, a)| {
        let c = count(zone, &by_zone);
        a.minimum <= c && c <= a.maximum
    });
    safe.then_some(assigned)
}

/// `PreferClose`: each endpoint with a zone is hinted for it; the others carry none.
pub(crate) fn prefer_close(endpoints: &mut [&mut Value]) {
    for ep in endpoints.iter_mut() {
        let zone = ep["zone"].as_str().map(str::to_owned);
        let Some(map) = ep.as_object_mut() else {
            continue;
        };
        match zone {
            Some(zone) => map.insert("hints".into(), json!({"forZones": [{"name": zone}]})),
            None => map.remove("hints"),
        };
    }
}

#[cfg(test)]
mod tests;
