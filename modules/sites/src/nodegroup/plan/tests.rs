use serde_json::json;

use super::*;

struct Node {
    name: &'static str,
    labels: BTreeMap<String, String>,
    ready: ReadyStatus,
}

fn node(name: &'static str, labels: &[(&str, &str)]) -> Node {
    Node {
        name,
        labels: labels
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
        ready: ReadyStatus::Ready,
    }
}

fn views(nodes: &[Node]) -> impl Iterator<Item = NodeView<'_>> {
    nodes.iter().map(|n| NodeView {
        name: n.name,
        labels: &n.labels,
        ready: n.ready,
        resource_version: Some("7"),
    })
}

fn spec(nodes: &[&str], labels: &[(&str, &str)]) -> NodeGroupSpec {
    NodeGroupSpec {
        nodes: nodes.iter().map(|n| (*n).to_owned()).collect(),
        match_labels: labels
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
        topology_enabled: false,
    }
}

fn plan_of(name: &str, spec: &NodeGroupSpec, nodes: &[Node], groups: &[&str]) -> Plan {
    let group = GroupView {
        name,
        spec,
        deleting: false,
    };
    plan(group, views(nodes), |g| groups.contains(&g))
}

fn patched(plan: &Plan) -> Vec<&str> {
    plan.patches.iter().map(|p| p.node.as_str()).collect()
}

fn selection(plan: &Plan) -> Vec<(&str, SelectionStatus)> {
    plan.status
        .node_statuses
        .iter()
        .map(|s| (s.node_name.as_str(), s.selection_status))
        .collect()
}

fn set(key: &str, value: Option<&str>) -> (String, Option<String>) {
    (key.to_owned(), value.map(str::to_owned))
}

#[test]
fn a_node_named_in_the_spec_is_labelled_with_the_group_as_a_claim() {
    let nodes = [node("n1", &[]), node("n2", &[])];
    let plan = plan_of("shop", &spec(&["n1"], &[]), &nodes, &["shop"]);
    assert_eq!(
        plan.patches,
        vec![LabelPatch {
            node: "n1".into(),
            labels: BTreeMap::from([set(BELONGING_TO, Some("shop"))]),
            precondition: Some("7".into()),
        }]
    );
    assert_eq!(selection(&plan), vec![("n1", SelectionStatus::Succeeded)]);
    assert!(plan.leaving.is_empty());
}

#[test]
fn nodes_carrying_every_matched_label_are_members_and_others_are_not() {
    let nodes = [
        node("a", &[("site", "s1"), ("tier", "edge")]),
        node("b", &[("site", "s1")]),
        node("c", &[("site", "s2"), ("tier", "edge")]),
    ];
    let spec = spec(&[], &[("site", "s1"), ("tier", "edge")]);
    let plan = plan_of("s1", &spec, &nodes, &["s1"]);
    assert_eq!(patched(&plan), vec!["a"]);
    assert_eq!(selection(&plan), vec![("a", SelectionStatus::Succeeded)]);
}

#[test]
fn names_and_labels_together_select_the_union() {
    let nodes = [node("a", &[("site", "s1")]), node("b", &[]), node("c", &[])];
    let plan = plan_of("g", &spec(&["b"], &[("site", "s1")]), &nodes, &["g"]);
    assert_eq!(patched(&plan), vec!["a", "b"]);
}

#[test]
fn an_empty_match_labels_selects_no_node() {
    let nodes = [node("a", &[("site", "s1")]), node("b", &[])];
    let plan = plan_of("g", &spec(&[], &[]), &nodes, &["g"]);
    assert_eq!(plan, Plan::default());
}

#[test]
fn a_member_already_labelled_needs_no_patch_but_is_reported() {
    let nodes = [node("a", &[(BELONGING_TO, "g")])];
    let plan = plan_of("g", &spec(&["a"], &[]), &nodes, &["g"]);
    assert!(plan.patches.is_empty());
    assert_eq!(selection(&plan), vec![("a", SelectionStatus::Succeeded)]);
}

#[test]
fn a_node_held_by_another_group_is_not_taken_and_is_reported_failed_naming_it() {
    let nodes = [node("a", &[(BELONGING_TO, "first")])];
    let plan = plan_of("second", &spec(&["a"], &[]), &nodes, &["first", "second"]);
    assert!(plan.patches.is_empty());
    assert!(plan.leaving.is_empty());
    let status = &plan.status.node_statuses[0];
    assert_eq!(status.selection_status, SelectionStatus::Failed);
    assert!(
        status.selection_status_reason.contains("first"),
        "{status:?}"
    );
    assert_eq!((plan.status.node_num, plan.status.ready_node_num), (0, 0));
}

#[test]
fn a_label_naming_a_group_that_no_longer_exists_does_not_hold_the_node() {
    let nodes = [node("a", &[(BELONGING_TO, "gone")])];
    let plan = plan_of("g", &spec(&["a"], &[]), &nodes, &["g"]);
    assert_eq!(patched(&plan), vec!["a"]);
    assert_eq!(plan.patches[0].precondition.as_deref(), Some("7"));
    assert_eq!(selection(&plan), vec![("a", SelectionStatus::Succeeded)]);
}

#[test]
fn a_node_that_no_longer_matches_leaves_and_loses_both_labels() {
    let nodes = [node(
        "a",
        &[(BELONGING_TO, "g"), (TOPOLOGY_ZONE, "g"), ("site", "other")],
    )];
    let mut spec = spec(&[], &[("site", "s1")]);
    spec.topology_enabled = true;
    let plan = plan_of("g", &spec, &nodes, &["g"]);
    assert_eq!(plan.leaving, vec!["a".to_owned()]);
    assert_eq!(
        plan.patches[0].labels,
        BTreeMap::from([set(BELONGING_TO, None), set(TOPOLOGY_ZONE, None)])
    );
    assert_eq!(plan.patches[0].precondition, None);
    assert!(plan.status.node_statuses.is_empty());
}

#[test]
fn a_leaving_node_keeps_a_zone_the_group_did_not_set() {
    let nodes = [node("a", &[(BELONGING_TO, "g"), (TOPOLOGY_ZONE, "eu-1")])];
    let plan = plan_of("g", &spec(&[], &[]), &nodes, &["g"]);
    assert_eq!(
        plan.patches[0].labels,
        BTreeMap::from([set(BELONGING_TO, None)])
    );
}

#[test]
fn nodes_of_other_groups_are_left_alone() {
    let nodes = [node("a", &[(BELONGING_TO, "h")]), node("b", &[])];
    let plan = plan_of("g", &spec(&[], &[("site", "x")]), &nodes, &["g", "h"]);
    assert_eq!(plan, Plan::default());
}

#[test]
fn a_group_being_deleted_releases_every_member() {
    let nodes = [
        node("a", &[(BELONGING_TO, "g")]),
        node("b", &[(BELONGING_TO, "g"), ("site", "s")]),
        node("c", &[(BELONGING_TO, "h")]),
    ];
    let spec = spec(&["a", "missing"], &[("site", "s")]);
    let group = GroupView {
        name: "g",
        spec: &spec,
        deleting: true,
    };
    let plan = plan(group, views(&nodes), |_| true);
    assert_eq!(plan.leaving, vec!["a".to_owned(), "b".to_owned()]);
    assert_eq!(patched(&plan), vec!["a", "b"]);
    assert!(plan.status.node_statuses.is_empty());
}

#[test]
fn topology_sets_the_zone_and_turning_it_off_removes_the_groups_zone() {
    let nodes = [node("a", &[(BELONGING_TO, "g")])];
    let mut on = spec(&["a"], &[]);
    on.topology_enabled = true;
    let plan = plan_of("g", &on, &nodes, &["g"]);
    assert_eq!(
        plan.patches[0].labels,
        BTreeMap::from([set(TOPOLOGY_ZONE, Some("g"))])
    );
    assert_eq!(plan.patches[0].precondition, None, "not a claim");

    let nodes = [node("a", &[(BELONGING_TO, "g"), (TOPOLOGY_ZONE, "g")])];
    let plan = plan_of("g", &spec(&["a"], &[]), &nodes, &["g"]);
    assert_eq!(
        plan.patches[0].labels,
        BTreeMap::from([set(TOPOLOGY_ZONE, None)])
    );
}

#[test]
fn a_named_node_that_does_not_exist_is_reported_failed_and_unknown() {
    let plan = plan_of("g", &spec(&["ghost"], &[]), &[], &["g"]);
    let status = &plan.status.node_statuses[0];
    assert_eq!(status.node_name, "ghost");
    assert_eq!(status.ready_status, ReadyStatus::Unknown);
    assert_eq!(status.selection_status, SelectionStatus::Failed);
    assert!(plan.patches.is_empty());
}

#[test]
fn the_status_is_sorted_and_counts_members_and_ready_members() {
    let mut nodes = vec![
        node("c", &[]),
        node("a", &[]),
        node("b", &[(BELONGING_TO, "h")]),
    ];
    nodes[0].ready = ReadyStatus::NotReady;
    let plan = plan_of("g", &spec(&["a", "b", "c"], &[]), &nodes, &["g", "h"]);
    assert_eq!(
        selection(&plan),
        vec![
            ("a", SelectionStatus::Succeeded),
            ("b", SelectionStatus::Failed),
            ("c", SelectionStatus::Succeeded),
        ]
    );
    assert_eq!((plan.status.node_num, plan.status.ready_node_num), (2, 1));
    assert_eq!(
        plan.status.node_statuses[2].ready_status,
        ReadyStatus::NotReady
    );
}

fn pod(spec: serde_json::Value) -> PodSpec {
    let mut spec = spec;
    spec["containers"] = json!([{"name": "c", "image": "busybox"}]);
    serde_json::from_value(spec).unwrap()
}

fn affinity(values: &[&str]) -> PodSpec {
    pod(
        json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [
                {"key": BELONGING_TO, "operator": "In", "values": values},
            ]}],
        }}}}),
    )
}

#[test]
fn a_pod_pinned_by_node_selector_goes_when_its_node_leaves_the_group() {
    let pinned = pod(json!({"nodeSelector": {BELONGING_TO: "g"}}));
    assert!(evicts(&pinned, "g", None));
    assert!(evicts(&pinned, "g", Some("h")));
    assert!(!evicts(&pinned, "g", Some("g")), "the node is back in g");
    assert!(!evicts(&pinned, "h", None), "it is not h's pod");
}

#[test]
fn a_pod_pinned_by_required_affinity_goes_unless_the_new_group_also_satisfies_it() {
    assert!(evicts(&affinity(&["g"]), "g", None));
    assert!(evicts(&affinity(&["g"]), "g", Some("h")));
    assert!(!evicts(&affinity(&["g", "h"]), "g", Some("h")));
}

#[test]
fn pods_not_placed_for_the_group_stay() {
    assert!(!evicts(&pod(json!({})), "g", None));
    let other = pod(json!({"nodeSelector": {"site": "g"}}));
    assert!(!evicts(&other, "g", None));
    assert!(!evicts(&affinity(&["h"]), "g", None));
}

#[test]
fn a_node_change_concerns_the_groups_that_select_hold_or_listed_it() {
    let labels = |pairs: &[(&str, &str)]| node("x", pairs).labels;
    let by_label = NodeGroup::new("g", spec(&[], &[("site", "s")]));
    assert!(concerns(&by_label, "x", &labels(&[("site", "s")])));
    assert!(!concerns(&by_label, "x", &labels(&[("site", "t")])));
    assert!(
        concerns(&by_label, "x", &labels(&[(BELONGING_TO, "g")])),
        "it held the node"
    );
    let by_name = NodeGroup::new("h", spec(&["x"], &[]));
    assert!(concerns(&by_name, "x", &labels(&[])));
    assert!(!concerns(&by_name, "y", &labels(&[])));
    let mut listed = NodeGroup::new("k", spec(&[], &[("site", "s")]));
    listed.status = Some(
        plan_of(
            "k",
            &listed.spec,
            &[node("x", &[("site", "s"), (BELONGING_TO, "g")])],
            &["g", "k"],
        )
        .status,
    );
    assert!(
        concerns(&listed, "x", &labels(&[])),
        "its failed claim is listed and must be dropped"
    );
}
