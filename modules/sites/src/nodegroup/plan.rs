//! What a NodeGroup's reconcile does, decided without I/O: which nodes are members, which
//! labels to put on or take off which node, which nodes leave (and lose the group's pods), and
//! the status to report.
//!
//! The [`BELONGING_TO`] label on a node is the record of ownership: a node labelled for another
//! group that exists is not taken (the group that labelled it first keeps it) and is reported
//! as a failed selection; a label naming a group that no longer exists is stale and is
//! overwritten.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::PodSpec;

use super::TOPOLOGY_ZONE;
use super::types::{
    NodeGroup, NodeGroupSpec, NodeGroupStatus, NodeStatus, ReadyStatus, SelectionStatus,
};
use crate::BELONGING_TO;

/// What the plan needs to know of a node.
#[derive(Clone, Copy, Debug)]
pub(crate) struct NodeView<'a> {
    /// Its name.
    pub name: &'a str,
    /// Its labels.
    pub labels: &'a BTreeMap<String, String>,
    /// Its `Ready` condition.
    pub ready: ReadyStatus,
    /// Its resourceVersion (the precondition of a claim).
    pub resource_version: Option<&'a str>,
}

/// The group being reconciled.
#[derive(Clone, Copy, Debug)]
pub(crate) struct GroupView<'a> {
    /// Its name (the label value).
    pub name: &'a str,
    /// What it wants.
    pub spec: &'a NodeGroupSpec,
    /// Whether it is being deleted: then every member leaves.
    pub deleting: bool,
}

/// The changes one reconcile makes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Plan {
    /// Label changes, by node name.
    pub patches: Vec<LabelPatch>,
    /// Nodes that leave the group: the group's pods on them go.
    pub leaving: Vec<String>,
    /// The status the group should report.
    pub status: NodeGroupStatus,
}

/// A change of one node's labels (a merge patch of `metadata.labels`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct LabelPatch {
    /// The node.
    pub node: String,
    /// Label values to set; `None` removes the label.
    pub labels: BTreeMap<String, Option<String>>,
    /// For a claim (the node did not carry this group's label): the resourceVersion the node
    /// had when it was seen unclaimed, so that of two groups claiming at once only the first
    /// write wins.
    pub precondition: Option<String>,
}

/// Decides the reconcile of `group` over every known node. `exists` says whether a NodeGroup
/// of a given name exists (a label naming a missing group does not hold a node).
pub(crate) fn plan<'a>(
    group: GroupView<'_>,
    nodes: impl IntoIterator<Item = NodeView<'a>>,
    exists: impl Fn(&str) -> bool,
) -> Plan {
    let mut plan = Plan::default();
    let mut named: BTreeSet<&str> = group.spec.nodes.iter().map(String::as_str).collect();
    let mut statuses = Vec::new();
    for node in nodes {
        named.remove(node.name);
        let wanted = !group.deleting && wants(group.spec, &node);
        let owner = node.labels.get(BELONGING_TO).map(String::as_str);
        match owner {
            Some(other) if wanted && other != group.name && exists(other) => {
                statuses.push(failed(
                    node.name,
                    node.ready,
                    format!("node {} already belongs to NodeGroup {other}", node.name),
                ));
            }
            _ if wanted => {
                statuses.push(succeeded(node.name, node.ready));
                plan.patches.extend(join(group, &node, owner));
            }
            Some(own) if own == group.name => {
                plan.patches.push(leave(group.name, &node));
                plan.leaving.push(node.name.to_owned());
            }
            _ => {}
        }
    }
    if !group.deleting {
        for name in named {
            let reason = format!("node {name} does not exist");
            statuses.push(failed(name, ReadyStatus::Unknown, reason));
        }
    }
    plan.patches.sort_by(|a, b| a.node.cmp(&b.node));
    plan.leaving.sort();
    plan.status = status(statuses);
    plan
}

/// Whether a change of the node `name` (now labelled `labels`) may change `group`'s
/// reconcile: the group selects it, it carries the group's label, or the group's status lists
/// it (it was selected before the change).
pub(crate) fn concerns(group: &NodeGroup, name: &str, labels: &BTreeMap<String, String>) -> bool {
    let view = NodeView {
        name,
        labels,
        ready: ReadyStatus::Unknown,
        resource_version: None,
    };
    labels.get(BELONGING_TO) == group.metadata.name.as_ref()
        || wants(&group.spec, &view)
        || group
            .status
            .as_ref()
            .is_some_and(|s| s.node_statuses.iter().any(|n| n.node_name == name))
}

/// Whether `pod` (on a node that left `group`, its group label now `now`) was placed for the
/// group and may no longer run there: its `nodeSelector` or required node affinity names the
/// group in [`BELONGING_TO`] and is not satisfied by the node's label any more.
pub(crate) fn evicts(pod: &PodSpec, group: &str, now: Option<&str>) -> bool {
    let selector = pod.node_selector.as_ref().and_then(|s| s.get(BELONGING_TO));
    let terms = pod
        .affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|a| {
            a.required_during_scheduling_ignored_during_execution
                .as_ref()
        })
        .map(|r| r.node_selector_terms.as_slice())
        .unwrap_or_default();
    let group_requirements = || {
        terms
            .iter()
            .flat_map(|t| t.match_expressions.iter().flatten())
            .filter(|e| e.key == BELONGING_TO)
    };
    let names_group = selector.is_some_and(|v| v == group)
        || group_requirements()
            .any(|e| e.operator == "In" && e.values.iter().flatten().any(|v| v == group));
    if !names_group {
        return false;
    }
    let selector_holds = selector.is_none_or(|v| Some(v.as_str()) == now);
    let affinity_holds = terms.is_empty()
        || terms.iter().any(|term| {
            term.match_expressions
                .iter()
                .flatten()
                .filter(|e| e.key == BELONGING_TO)
                .all(|e| requirement_holds(&e.operator, e.values.as_deref(), now))
        });
    !(selector_holds && affinity_holds)
}

/// Whether a node selector requirement on [`BELONGING_TO`] holds for the label value `now`.
fn requirement_holds(operator: &str, values: Option<&[String]>, now: Option<&str>) -> bool {
    let listed = |v: &str| values.unwrap_or_default().iter().any(|x| x == v);
    match operator {
        "In" => now.is_some_and(listed),
        "NotIn" => !now.is_some_and(listed),
        "Exists" => now.is_some(),
        "DoesNotExist" => now.is_none(),
        // Gt/Lt compare integers; a group name is none, as Kubernetes treats them.
        _ => false,
    }
}

/// Whether the group's spec selects `node`: by name, or by all of `matchLabels` (an empty
/// `matchLabels` selects nothing, as in KubeEdge).
fn wants(spec: &NodeGroupSpec, node: &NodeView<'_>) -> bool {
    spec.nodes.iter().any(|n| n == node.name)
        || (!spec.match_labels.is_empty()
            && spec
                .match_labels
                .iter()
                .all(|(k, v)| node.labels.get(k) == Some(v)))
}

/// The label changes that make `node` a member, if any.
fn join(group: GroupView<'_>, node: &NodeView<'_>, owner: Option<&str>) -> Option<LabelPatch> {
    let mut labels = BTreeMap::new();
    if owner != Some(group.name) {
        labels.insert(BELONGING_TO.to_owned(), Some(group.name.to_owned()));
    }
    let zone = node.labels.get(TOPOLOGY_ZONE).map(String::as_str);
    if group.spec.topology_enabled && zone != Some(group.name) {
        labels.insert(TOPOLOGY_ZONE.to_owned(), Some(group.name.to_owned()));
    }
    if !group.spec.topology_enabled && zone == Some(group.name) {
        labels.insert(TOPOLOGY_ZONE.to_owned(), None);
    }
    if labels.is_empty() {
        return None;
    }
    Some(LabelPatch {
        node: node.name.to_owned(),
        labels,
        precondition: match owner == Some(group.name) {
            true => None,
            false => node.resource_version.map(str::to_owned),
        },
    })
}

/// The label changes of `node` leaving `group`: its group label, and the zone the group set.
fn leave(group: &str, node: &NodeView<'_>) -> LabelPatch {
    let mut labels = BTreeMap::from([(BELONGING_TO.to_owned(), None)]);
    if node.labels.get(TOPOLOGY_ZONE).map(String::as_str) == Some(group) {
        labels.insert(TOPOLOGY_ZONE.to_owned(), None);
    }
    LabelPatch {
        node: node.name.to_owned(),
        labels,
        precondition: None,
    }
}

fn succeeded(node: &str, ready: ReadyStatus) -> NodeStatus {
    NodeStatus {
        node_name: node.to_owned(),
        ready_status: ready,
        selection_status: SelectionStatus::Succeeded,
        selection_status_reason: String::new(),
    }
}

fn failed(node: &str, ready: ReadyStatus, reason: String) -> NodeStatus {
    NodeStatus {
        node_name: node.to_owned(),
        ready_status: ready,
        selection_status: SelectionStatus::Failed,
        selection_status_reason: reason,
    }
}

/// The status of these node statuses: sorted by node, with the member counts.
fn status(mut statuses: Vec<NodeStatus>) -> NodeGroupStatus {
    statuses.sort_by(|a, b| a.node_name.cmp(&b.node_name));
    let members = statuses
        .iter()
        .filter(|s| s.selection_status == SelectionStatus::Succeeded);
    let count = |n: usize| i32::try_from(n).unwrap_or(i32::MAX);
    NodeGroupStatus {
        node_num: count(members.clone().count()),
        ready_node_num: count(
            members
                .filter(|s| s.ready_status == ReadyStatus::Ready)
                .count(),
        ),
        node_statuses: statuses,
    }
}

#[cfg(test)]
mod tests;
