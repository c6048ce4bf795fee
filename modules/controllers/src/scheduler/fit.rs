//! Where a pod may go and where it goes best: kube-scheduler's default filters and scores,
//! pure. Filters: `nodeSelector`, required node affinity (`matchExpressions`, `matchFields`),
//! taints against tolerations (`NoSchedule`, `NoExecute`; a node not Ready counts as tainted
//! `node.kubernetes.io/not-ready`), unschedulable nodes, requests against allocatable (cpu,
//! memory, pods), host ports. Scores (each 0 to 100, summed): least allocated, spreading the
//! pods of one owner, preferred node affinity, fewer untolerated `PreferNoSchedule` taints.

use std::collections::{BTreeMap, BTreeSet};

use apimachinery::quantity;
use k8s_openapi::api::core::v1::{
    Node, NodeSelectorRequirement, NodeSelectorTerm, Pod, Taint, Toleration,
};

/// CPU (millicores), memory (bytes) and pod count.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Resources {
    pub cpu: i64,
    pub memory: i64,
    pub pods: i64,
}

/// What the scheduler knows of a node: its spec and status, and what is placed on it.
#[derive(Clone, Debug, Default)]
pub struct NodeInfo {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub taints: Vec<Taint>,
    pub unschedulable: bool,
    pub ready: bool,
    pub allocatable: Resources,
    /// The requests of the pods placed here (bound or assumed).
    pub requested: Resources,
    /// `protocol/hostIP/port` of the host ports in use.
    pub host_ports: BTreeSet<String>,
    /// Pods placed here per owner (controller uid).
    pub owners: BTreeMap<String, u32>,
}

/// What a pod asks for.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodNeeds {
    pub requests: Resources,
    /// The requests used for scoring: a container that asks for nothing counts as 100m CPU and
    /// 200 MiB, as kube-scheduler counts it.
    pub scoring: Resources,
    pub host_ports: Vec<String>,
    /// The controller uid of its owner, if any.
    pub owner: Option<String>,
}

/// Why a node does not fit, as kube-scheduler words it in `FailedScheduling`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Misfit {
    Selector,
    Taint(String),
    Unschedulable,
    Insufficient(&'static str),
    TooManyPods,
    Ports,
}

const NOT_READY_TAINT: &str = "node.kubernetes.io/not-ready";
const DEFAULT_CPU_MILLI: i64 = 100;
const DEFAULT_MEMORY: i64 = 200 * 1024 * 1024;

// === impl Misfit ===

impl Misfit {
    /// The words of kube-scheduler's message (after the count).
    pub fn words(&self) -> String {
        match self {
            Misfit::Selector => "node(s) didn't match Pod's node affinity/selector".into(),
            Misfit::Taint(t) => format!("node(s) had untolerated taint {{{t}}}"),
            Misfit::Unschedulable => "node(s) were unschedulable".into(),
            Misfit::Insufficient(r) => format!("Insufficient {r}"),
            Misfit::TooManyPods => "Too many pods".into(),
            Misfit::Ports => "node(s) didn't have free ports for the requested pod ports".into(),
        }
    }
}

// === impl NodeInfo ===

impl NodeInfo {
    /// A node as the API holds it, with nothing placed yet.
    pub fn of(node: &Node) -> NodeInfo {
        let spec = node.spec.clone().unwrap_or_default();
        let status = node.status.clone().unwrap_or_default();
        let alloc = status.allocatable.or(status.capacity).unwrap_or_default();
        let get = |k: &str, milli: bool| {
            alloc.get(k).and_then(|q| {
                if milli {
                    quantity::milli(&q.0)
                } else {
                    quantity::units(&q.0)
                }
            })
        };
        let ready = status
            .conditions
            .iter()
            .flatten()
            .any(|c| c.type_ == "Ready" && c.status == "True");
        NodeInfo {
            name: node.metadata.name.clone().unwrap_or_default(),
            labels: node.metadata.labels.clone().unwrap_or_default(),
            taints: spec.taints.unwrap_or_default(),
            unschedulable: spec.unschedulable.unwrap_or(false),
            ready,
            allocatable: Resources {
                cpu: get("cpu", true).unwrap_or(0),
                memory: get("memory", false).unwrap_or(0),
                pods: get("pods", false).unwrap_or(110),
            },
            ..NodeInfo::default()
        }
    }

    /// Counts `needs` as placed here (or, with `sign` -1, no longer).
    pub fn place(&mut self, needs: &PodNeeds, sign: i64) {
        self.requested.cpu += sign * needs.requests.cpu;
        self.requested.memory += sign * needs.requests.memory;
        self.requested.pods += sign;
        for p in &needs.host_ports {
            if sign > 0 {
                self.host_ports.insert(p.clone());
            } else {
                self.host_ports.remove(p);
            }
        }
        if let Some(owner) = &needs.owner {
            let n = self.owners.entry(owner.clone()).or_default();
            *n = if sign > 0 {
                *n + 1
            } else {
                n.saturating_sub(1)
            };
        }
    }
}

// === impl PodNeeds ===

impl PodNeeds {
    /// What `pod` asks for: the larger of its app containers' sum and its largest init
    /// container, plus its overhead.
    pub fn of(pod: &Pod) -> PodNeeds {
        let spec = pod.spec.clone().unwrap_or_default();
        let request = |c: &k8s_openapi::api::core::v1::Container, k: &str, milli: bool| {
            let r = c.resources.as_ref();
            let q = r
                .and_then(|r| r.requests.as_ref().and_then(|m| m.get(k)))
                .or_else(|| r.and_then(|r| r.limits.as_ref().and_then(|m| m.get(k))));
            q.and_then(|q| {
                if milli {
                    quantity::milli(&q.0)
                } else {
                    quantity::units(&q.0)
                }
            })
        };
        let mut req = Resources::default();
        let mut scoring = Resources::default();
        for c in &spec.containers {
            let cpu = request(c, "cpu", true);
            let mem = request(c, "memory", false);
            req.cpu += cpu.unwrap_or(0);
            req.memory += mem.unwrap_or(0);
            scoring.cpu += cpu.unwrap_or(DEFAULT_CPU_MILLI);
            scoring.memory += mem.unwrap_or(DEFAULT_MEMORY);
        }
        for c in spec.init_containers.iter().flatten() {
            req.cpu = req.cpu.max(request(c, "cpu", true).unwrap_or(0));
            req.memory = req.memory.max(request(c, "memory", false).unwrap_or(0));
        }
        if let Some(o) = &spec.overhead {
            req.cpu += o
                .get("cpu")
                .and_then(|q| quantity::milli(&q.0))
                .unwrap_or(0);
            req.memory += o
                .get("memory")
                .and_then(|q| quantity::units(&q.0))
                .unwrap_or(0);
        }
        req.pods = 1;
        scoring.pods = 1;
        let host_ports = spec
            .containers
            .iter()
            .flat_map(|c| c.ports.iter().flatten())
            .filter_map(|p| {
                let port = p.host_port.filter(|p| *p > 0)?;
                let proto = p.protocol.as_deref().unwrap_or("TCP");
                let ip = p.host_ip.as_deref().unwrap_or("0.0.0.0");
                Some(format!("{proto}/{ip}/{port}"))
            })
            .collect();
        let owner = pod
            .metadata
            .owner_references
            .iter()
            .flatten()
            .find(|o| o.controller == Some(true))
            .map(|o| o.uid.clone());
        PodNeeds {
            requests: req,
            scoring,
            host_ports,
            owner,
        }
    }
}

/// Whether `pod` (asking `needs`) fits `node`; the first reason it does not.
pub fn filter(pod: &Pod, needs: &PodNeeds, node: &NodeInfo) -> Result<(), Misfit> {
    let spec = pod.spec.as_ref();
    if node.unschedulable && !tolerates_unschedulable(pod) {
        return Err(Misfit::Unschedulable);
    }
    if !matches_selector(pod, node) {
        return Err(Misfit::Selector);
    }
    let tolerations = spec.and_then(|s| s.tolerations.clone()).unwrap_or_default();
    let mut taints = node.taints.clone();
    if !node.ready && !taints.iter().any(|t| t.key == NOT_READY_TAINT) {
        taints.push(Taint {
            key: NOT_READY_TAINT.into(),
            effect: "NoSchedule".into(),
            ..Taint::default()
        });
    }
    for t in &taints {
        let hard = matches!(t.effect.as_str(), "NoSchedule" | "NoExecute");
        if hard && !tolerations.iter().any(|tol| tolerates(tol, t)) {
            return Err(Misfit::Taint(format!(
                "{}: {}",
                t.key,
                t.value.as_deref().unwrap_or_default()
            )));
        }
    }
    let a = &node.allocatable;
    let r = &node.requested;
    if r.pods + 1 > a.pods {
        return Err(Misfit::TooManyPods);
    }
    if needs.requests.cpu > 0 && r.cpu + needs.requests.cpu > a.cpu {
        return Err(Misfit::Insufficient("cpu"));
    }
    if needs.requests.memory > 0 && r.memory + needs.requests.memory > a.memory {
        return Err(Misfit::Insufficient("memory"));
    }
    if needs
        .host_ports
        .iter()
        .any(|p| port_taken(&node.host_ports, p))
    {
        return Err(Misfit::Ports);
    }
    Ok(())
}

/// How well `pod` fits `node` (higher is better); `max_owned` is the most pods of the pod's
/// owner on any feasible node.
pub fn score(pod: &Pod, needs: &PodNeeds, node: &NodeInfo, max_owned: u32) -> i64 {
    let a = &node.allocatable;
    let r = &node.requested;
    let free = |alloc: i64, used: i64| {
        if alloc <= 0 {
            0
        } else {
            ((alloc - used).max(0) * 100 / alloc).clamp(0, 100)
        }
    };
    let least = (free(a.cpu, r.cpu + needs.scoring.cpu)
        + free(a.memory, r.memory + needs.scoring.memory))
        / 2;
    let spread = match (&needs.owner, max_owned) {
        (Some(o), m) if m > 0 => {
            let here = i64::from(node.owners.get(o).copied().unwrap_or(0));
            (i64::from(m) - here) * 100 / i64::from(m)
        }
        _ => 100,
    };
    let preferred = preferred_affinity(pod, node);
    let tolerations = pod
        .spec
        .as_ref()
        .and_then(|s| s.tolerations.clone())
        .unwrap_or_default();
    let soft = node
        .taints
        .iter()
        .filter(|t| t.effect == "PreferNoSchedule")
        .filter(|t| !tolerations.iter().any(|tol| tolerates(tol, t)))
        .count() as i64;
    least + spread + preferred + (100 - 25 * soft).max(0)
}

/// kube-scheduler's `FailedScheduling` message for `total` nodes rejected for `reasons`.
pub fn unschedulable_message(total: usize, reasons: &[Misfit]) -> String {
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for r in reasons {
        *counts.entry(r.words()).or_default() += 1;
    }
    let mut parts: Vec<String> = counts.iter().map(|(w, n)| format!("{n} {w}")).collect();
    parts.sort();
    if parts.is_empty() {
        return format!("0/{total} nodes are available: no nodes available to schedule pods.");
    }
    format!(
        "0/{total} nodes are available: {}. preemption: not attempted.",
        parts.join(", ")
    )
}

fn tolerates_unschedulable(pod: &Pod) -> bool {
    let unschedulable = Taint {
        key: "node.kubernetes.io/unschedulable".into(),
        effect: "NoSchedule".into(),
        ..Taint::default()
    };
    pod.spec
        .as_ref()
        .and_then(|s| s.tolerations.as_ref())
        .is_some_and(|ts| ts.iter().any(|t| tolerates(t, &unschedulable)))
}

/// Whether toleration `tol` tolerates taint `t`.
pub fn tolerates(tol: &Toleration, t: &Taint) -> bool {
    if tol
        .effect
        .as_deref()
        .is_some_and(|e| !e.is_empty() && e != t.effect)
    {
        return false;
    }
    let key = tol.key.as_deref().unwrap_or_default();
    let exists = tol.operator.as_deref() == Some("Exists");
    if key.is_empty() {
        return exists;
    }
    key == t.key
        && (exists
            || tol.value.as_deref().unwrap_or_default() == t.value.as_deref().unwrap_or_default())
}

fn port_taken(used: &BTreeSet<String>, wanted: &str) -> bool {
    let mut parts = wanted.splitn(3, '/');
    let (proto, ip, port) = (parts.next(), parts.next(), parts.next());
    used.iter().any(|u| {
        let mut p = u.splitn(3, '/');
        let (uproto, uip, uport) = (p.next(), p.next(), p.next());
        uproto == proto
            && uport == port
            && (uip == ip || uip == Some("0.0.0.0") || ip == Some("0.0.0.0"))
    })
}

pub fn matches_selector(pod: &Pod, node: &NodeInfo) -> bool {
    let spec = pod.spec.as_ref();
    let selector = spec.and_then(|s| s.node_selector.as_ref());
    if let Some(sel) = selector
        && !sel.iter().all(|(k, v)| node.labels.get(k) == Some(v))
    {
        return false;
    }
    let required = spec
        .and_then(|s| s.affinity.as_ref())
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|na| {
            na.required_during_scheduling_ignored_during_execution
                .as_ref()
        });
    match required {
        // Terms are ORed; an empty list matches nothing.
        Some(r) => r.node_selector_terms.iter().any(|t| term_matches(t, node)),
        None => true,
    }
}

fn preferred_affinity(pod: &Pod, node: &NodeInfo) -> i64 {
    let preferred = pod
        .spec
        .as_ref()
        .and_then(|s| s.affinity.as_ref())
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|na| {
            na.preferred_during_scheduling_ignored_during_execution
                .as_ref()
        });
    let Some(terms) = preferred else { return 0 };
    let total: i64 = terms.iter().map(|t| i64::from(t.weight)).sum();
    if total <= 0 {
        return 0;
    }
    let hit: i64 = terms
        .iter()
        .filter(|t| term_matches(&t.preference, node))
        .map(|t| i64::from(t.weight))
        .sum();
    hit * 100 / total
}

/// Requirements within a term are ANDed; a term with none matches nothing.
fn term_matches(term: &NodeSelectorTerm, node: &NodeInfo) -> bool {
    let exprs = term.match_expressions.as_deref().unwrap_or_default();
    let fields = term.match_fields.as_deref().unwrap_or_default();
    if exprs.is_empty() && fields.is_empty() {
        return false;
    }
    exprs
        .iter()
        .all(|r| requirement(r, node.labels.get(&r.key).map(String::as_str)))
        && fields.iter().all(|r| {
            let value = (r.key == "metadata.name").then_some(node.name.as_str());
            requirement(r, value)
        })
}

fn requirement(r: &NodeSelectorRequirement, value: Option<&str>) -> bool {
    let values = r.values.as_deref().unwrap_or_default();
    let number = |s: &str| s.parse::<i64>().ok();
    match r.operator.as_str() {
        "In" => value.is_some_and(|v| values.iter().any(|x| x == v)),
        "NotIn" => value.is_none_or(|v| !values.iter().any(|x| x == v)),
        "Exists" => value.is_some(),
        "DoesNotExist" => value.is_none(),
        "Gt" => {
            matches!((value.and_then(number), values.first().and_then(|x| number(x))), (Some(v), Some(x)) if v > x)
        }
        "Lt" => {
            matches!((value.and_then(number), values.first().and_then(|x| number(x))), (Some(v), Some(x)) if v < x)
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests;
