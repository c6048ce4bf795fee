use serde_json::json;

use super::*;

fn state() -> State {
    State::new(Kind::builtins())
}

fn kind_id(s: &State, plural: &str) -> usize {
    s.kinds().iter().position(|k| k.plural == plural).unwrap()
}

fn obj(s: &State, plural: &str, value: Value) -> Obj {
    let id = kind_id(s, plural);
    Obj::from_value(id, &s.kinds()[id], value)
}

fn node(s: &State, name: &str, edge: bool, rv: &str) -> Obj {
    let labels = match edge {
        true => json!({EDGE_LABEL: ""}),
        false => json!({}),
    };
    obj(
        s,
        "nodes",
        json!({"metadata": {"name": name, "labels": labels, "resourceVersion": rv}}),
    )
}

fn pod(s: &State, name: &str, on: &str, cm: &str, rv: &str) -> Obj {
    obj(
        s,
        "pods",
        json!({
            "metadata": {"name": name, "namespace": "default", "uid": format!("u-{name}"), "resourceVersion": rv},
            "spec": {"nodeName": on, "serviceAccountName": "sa", "containers": [{"name": "c"}],
                     "volumes": [{"name": "v", "configMap": {"name": cm}}]},
        }),
    )
}

fn named(s: &State, plural: &str, name: &str, rv: &str) -> Obj {
    obj(
        s,
        plural,
        json!({"metadata": {"name": name, "namespace": "default", "resourceVersion": rv}}),
    )
}

/// `(node, upsert?, key)` of each output.
fn summary(out: &[Out]) -> Vec<(String, bool, String)> {
    out.iter()
        .map(|o| match o {
            Out::Upsert(n, o) => (n.clone(), true, o.key.clone()),
            Out::Delete(n, o) => (n.clone(), false, o.key.clone()),
        })
        .collect()
}

fn up(node: &str, key: &str) -> (String, bool, String) {
    (node.into(), true, key.into())
}

fn del(node: &str, key: &str) -> (String, bool, String) {
    (node.into(), false, key.into())
}

#[test]
fn a_pod_brings_what_it_references_first_and_an_unreferenced_secret_stays_in_the_cloud() {
    let mut s = state();
    assert_eq!(
        summary(&s.apply(node(&s, "e1", true, "1"))),
        vec![up("e1", "nodes//e1")]
    );
    assert!(s.apply(named(&s, "configmaps", "cfg", "2")).is_empty());
    assert!(s.apply(named(&s, "secrets", "unused", "3")).is_empty());
    assert!(s.apply(named(&s, "serviceaccounts", "sa", "4")).is_empty());
    let out = s.apply(pod(&s, "p", "e1", "cfg", "5"));
    let mut got = summary(&out);
    let last = got.pop().unwrap();
    got.sort();
    assert_eq!(
        got,
        vec![
            up("e1", "configmaps/default/cfg"),
            up("e1", "serviceaccounts/default/sa")
        ]
    );
    assert_eq!(last, up("e1", "pods/default/p"), "the pod comes last");
    // Editing the configmap reaches the node; the unreferenced secret never does.
    assert_eq!(
        summary(&s.apply(named(&s, "configmaps", "cfg", "6"))),
        vec![up("e1", "configmaps/default/cfg")]
    );
    assert!(s.apply(named(&s, "secrets", "unused", "7")).is_empty());
    assert!(
        s.desired("e1")
            .iter()
            .all(|o| o.key != "secrets/default/unused")
    );
}

#[test]
fn a_pod_bound_after_its_creation_brings_what_it_references() {
    let mut s = state();
    s.apply(node(&s, "e1", true, "1"));
    s.apply(named(&s, "configmaps", "cfg", "2"));
    s.apply(named(&s, "serviceaccounts", "sa", "3"));
    // Created unbound (a controller's pod), then bound by the scheduler.
    assert!(s.apply(pod(&s, "p", "", "cfg", "4")).is_empty());
    let mut got = summary(&s.apply(pod(&s, "p", "e1", "cfg", "5")));
    let last = got.pop().unwrap();
    got.sort();
    assert_eq!(
        got,
        vec![
            up("e1", "configmaps/default/cfg"),
            up("e1", "serviceaccounts/default/sa")
        ]
    );
    assert_eq!(last, up("e1", "pods/default/p"));
    let out = summary(&s.delete("pods/default/p"));
    assert!(
        out.contains(&del("e1", "configmaps/default/cfg")),
        "{out:?}"
    );
}

#[test]
fn a_shared_reference_leaves_the_node_with_its_last_pod() {
    let mut s = state();
    s.apply(node(&s, "e1", true, "1"));
    s.apply(named(&s, "configmaps", "shared", "2"));
    s.apply(pod(&s, "a", "e1", "shared", "3"));
    s.apply(pod(&s, "b", "e1", "shared", "4"));
    let out = summary(&s.delete("pods/default/a"));
    assert_eq!(out, vec![del("e1", "pods/default/a")]);
    let out = summary(&s.delete("pods/default/b"));
    assert!(
        out.contains(&del("e1", "configmaps/default/shared")),
        "{out:?}"
    );
    assert!(out.contains(&del("e1", "pods/default/b")), "{out:?}");
}

#[test]
fn changing_a_pods_reference_swaps_the_objects_at_the_node() {
    let mut s = state();
    s.apply(node(&s, "e1", true, "1"));
    s.apply(named(&s, "configmaps", "old", "2"));
    s.apply(named(&s, "configmaps", "new", "3"));
    s.apply(pod(&s, "p", "e1", "old", "4"));
    let out = summary(&s.apply(pod(&s, "p", "e1", "new", "5")));
    assert_eq!(
        out,
        vec![
            up("e1", "configmaps/default/new"),
            del("e1", "configmaps/default/old"),
            up("e1", "pods/default/p"),
        ]
    );
}

#[test]
fn only_edge_nodes_hold_anything_and_a_new_edge_node_gets_everything() {
    let mut s = state();
    s.apply(named(&s, "services", "svc", "1"));
    s.apply(named(&s, "configmaps", "cfg", "2"));
    s.apply(pod(&s, "p", "n1", "cfg", "3"));
    assert!(s.apply(node(&s, "n1", false, "4")).is_empty());
    assert!(s.desired("n1").is_empty());
    let mut got = summary(&s.apply(node(&s, "n1", true, "5")));
    got.sort();
    assert_eq!(
        got,
        vec![
            up("n1", "configmaps/default/cfg"),
            up("n1", "nodes//n1"),
            up("n1", "pods/default/p"),
            up("n1", "services/default/svc"),
        ]
    );
    // Services go to every edge node.
    s.apply(node(&s, "n2", true, "6"));
    let mut got = summary(&s.apply(named(&s, "services", "svc", "7")));
    got.sort();
    assert_eq!(
        got,
        vec![
            up("n1", "services/default/svc"),
            up("n2", "services/default/svc")
        ]
    );
}

#[test]
fn a_relist_deletes_what_vanished_while_the_watch_was_down() {
    let mut s = state();
    s.apply(node(&s, "e1", true, "1"));
    s.apply(named(&s, "services", "a", "2"));
    s.apply(named(&s, "services", "b", "3"));
    let kind = kind_id(&s, "services");
    let out = summary(&s.relist(kind, vec![named(&s, "services", "b", "3")]));
    assert_eq!(out, vec![del("e1", "services/default/a")]);
}

#[test]
fn the_digest_is_the_one_the_edge_computes_over_what_it_holds() {
    let mut s = state();
    s.apply(node(&s, "e1", true, "1"));
    s.apply(named(&s, "configmaps", "cfg", "2"));
    s.apply(pod(&s, "p", "e1", "cfg", "3"));
    let expected = wire::digest([
        ("nodes//e1", "1"),
        ("configmaps/default/cfg", "2"),
        ("pods/default/p", "3"),
    ]);
    assert_eq!(s.digest("e1"), expected);
    assert_eq!(s.digest("other"), wire::Digest::EMPTY);
}

#[test]
fn every_kind_of_pod_reference_is_found() {
    let pod = json!({"spec": {
        "imagePullSecrets": [{"name": "pull"}],
        "volumes": [
            {"configMap": {"name": "vol-cm"}}, {"secret": {"secretName": "vol-s"}},
            {"projected": {"sources": [{"configMap": {"name": "proj-cm"}}, {"secret": {"name": "proj-s"}}, {"serviceAccountToken": {}}]}},
        ],
        "initContainers": [{"envFrom": [{"configMapRef": {"name": "init-cm"}}]}],
        "containers": [{
            "env": [{"valueFrom": {"configMapKeyRef": {"name": "env-cm"}}}, {"valueFrom": {"secretKeyRef": {"name": "env-s"}}}],
            "envFrom": [{"secretRef": {"name": "from-s"}}],
        }],
    }});
    let names: Vec<String> = pod_refs("ns", &pod);
    assert_eq!(
        names,
        [
            "configmaps/ns/env-cm",
            "configmaps/ns/init-cm",
            "configmaps/ns/proj-cm",
            "configmaps/ns/vol-cm",
            "secrets/ns/env-s",
            "secrets/ns/from-s",
            "secrets/ns/proj-s",
            "secrets/ns/pull",
            "secrets/ns/vol-s",
            "serviceaccounts/ns/default",
        ]
    );
}

#[test]
fn a_custom_resource_bound_to_a_node_goes_only_there_and_follows_a_move() {
    let [crd, device] = Kind::custom("devices.kubeedge.io/v1beta1/devices/Device").unwrap();
    let mut kinds = Kind::builtins();
    kinds.extend([crd, device]);
    let mut s = State::new(kinds);
    s.apply(node(&s, "e1", true, "1"));
    s.apply(node(&s, "e2", true, "2"));
    let dev = |s: &State, on: Option<&str>, rv: &str| {
        let id = s
            .kinds()
            .iter()
            .position(|k| k.plural == "devices")
            .unwrap();
        let value = json!({"metadata": {"name": "d", "namespace": "default", "resourceVersion": rv},
            "spec": {"nodeName": on}});
        Obj::from_value(id, &s.kinds()[id], value)
    };
    let key = "devices.devices.kubeedge.io/default/d";
    assert_eq!(
        summary(&s.apply(dev(&s, Some("e1"), "3"))),
        vec![up("e1", key)]
    );
    assert_eq!(
        summary(&s.apply(dev(&s, Some("e2"), "4"))),
        vec![del("e1", key), up("e2", key)]
    );
    // Unbound: every edge node holds it; the node that had it gets the new version, no delete.
    let mut got = summary(&s.apply(dev(&s, None, "5")));
    got.sort();
    assert_eq!(got, vec![up("e1", key), up("e2", key)]);
    let mut got = summary(&s.apply(dev(&s, Some("e1"), "6")));
    got.sort();
    assert_eq!(got, vec![up("e1", key), del("e2", key)]);
    assert!(s.desired("e1").iter().any(|o| o.key == key));
    assert!(s.desired("e2").iter().all(|o| o.key != key));
    assert_eq!(summary(&s.delete(key)), vec![del("e1", key)]);
}

#[test]
fn a_connected_node_is_served_without_the_label_and_a_re_created_node_gets_everything() {
    let mut s = state();
    s.apply(named(&s, "configmaps", "cfg", "1"));
    s.apply(pod(&s, "p", "n1", "cfg", "2"));
    s.apply(node(&s, "n1", false, "3"));
    assert!(s.desired("n1").is_empty());
    let mut got = summary(&s.connect("n1"));
    got.sort();
    assert_eq!(
        got,
        vec![
            up("n1", "configmaps/default/cfg"),
            up("n1", "nodes//n1"),
            up("n1", "pods/default/p"),
        ]
    );
    // Its Node deleted and registered again without the label: it is still an edge node.
    assert_eq!(
        summary(&s.delete("nodes//n1")),
        vec![del("n1", "nodes//n1")]
    );
    assert!(s.unserved("n1"));
    let mut got = summary(&s.apply(node(&s, "n1", false, "4")));
    got.sort();
    assert_eq!(
        got,
        vec![
            up("n1", "configmaps/default/cfg"),
            up("n1", "nodes//n1"),
            up("n1", "pods/default/p"),
        ]
    );
    assert!(!s.unserved("n1"));
    assert_eq!(
        summary(&s.apply(pod(&s, "q", "n1", "cfg", "5"))),
        vec![up("n1", "pods/default/q")]
    );
}

#[test]
fn a_node_that_loses_the_label_is_served_while_connected_and_resynced_when_it_returns() {
    let mut s = state();
    s.apply(node(&s, "n1", true, "1"));
    s.connect("n1");
    // Losing the label while connected changes nothing: it is still kept current.
    assert_eq!(
        summary(&s.apply(node(&s, "n1", false, "2"))),
        vec![up("n1", "nodes//n1")]
    );
    assert_eq!(
        summary(&s.apply(pod(&s, "p", "n1", "cfg", "3"))),
        vec![up("n1", "pods/default/p")]
    );
    // Disconnected without the label: not served, and nothing is deleted at the edge.
    s.disconnect("n1");
    assert!(s.desired("n1").is_empty());
    assert!(s.apply(pod(&s, "q", "n1", "cfg", "4")).is_empty());
    // Back: everything it should hold, which its resync compares with what it has.
    let mut got = summary(&s.connect("n1"));
    got.sort();
    assert_eq!(
        got,
        vec![
            up("n1", "nodes//n1"),
            up("n1", "pods/default/p"),
            up("n1", "pods/default/q"),
        ]
    );
    // A labelled node stays served while away (its changes are queued by cloudhub).
    s.apply(node(&s, "n1", true, "5"));
    s.disconnect("n1");
    assert_eq!(
        summary(&s.apply(pod(&s, "r", "n1", "cfg", "6"))),
        vec![up("n1", "pods/default/r")]
    );
}

#[test]
fn managed_fields_are_not_sent_to_nodes() {
    let s = state();
    let o = obj(
        &s,
        "configmaps",
        json!({"metadata": {"name": "c", "namespace": "default", "uid": "u", "resourceVersion": "1",
               "managedFields": [{"manager": "kubectl", "operation": "Apply"}]},
               "data": {"a": "b"}}),
    );
    let sent: Value = serde_json::from_slice(&o.json).unwrap();
    assert!(sent["metadata"].get("managedFields").is_none(), "{sent}");
    assert_eq!(sent["data"]["a"], "b");
}

#[test]
fn a_subscribed_kind_goes_only_to_the_nodes_that_subscribed_and_stops_with_the_last() {
    let mut s = state();
    s.apply(node(&s, "n1", true, "1"));
    s.apply(node(&s, "n2", true, "2"));
    let sub =
        apimachinery::subscribe::Subscription::new("networking.k8s.io", "v1", "networkpolicies")
            .unwrap();
    let id = s.add_kind(Kind::subscribed(&sub, "NetworkPolicy"));
    let a = obj(
        &s,
        "networkpolicies",
        json!({"metadata": {"name": "a", "namespace": "default", "resourceVersion": "3"}}),
    );
    assert!(s.relist(id, vec![a]).is_empty(), "nobody subscribed yet");
    let initial = s.subscribe("n1", id);
    assert_eq!(initial.len(), 1);
    assert!(
        s.desired("n1")
            .iter()
            .any(|o| o.key == "networkpolicies.networking.k8s.io/default/a")
    );
    assert!(!s.desired("n2").iter().any(|o| o.kind == id));
    let b = obj(
        &s,
        "networkpolicies",
        json!({"metadata": {"name": "b", "namespace": "default", "resourceVersion": "4"}}),
    );
    assert_eq!(
        summary(&s.apply(b)),
        vec![up("n1", "networkpolicies.networking.k8s.io/default/b")]
    );
    assert!(
        s.managed_resources("n1")
            .contains("networkpolicies.networking.k8s.io")
    );
    assert!(
        !s.managed_resources("n2")
            .contains("networkpolicies.networking.k8s.io")
    );
    assert_eq!(s.subscriptions(), 1);
    assert!(s.unsubscribe("n1", id), "the last subscriber left");
    assert!(s.of_kind(id).is_empty());
    assert!(!s.desired("n1").iter().any(|o| o.kind == id));
    let c = obj(
        &s,
        "networkpolicies",
        json!({"metadata": {"name": "c", "namespace": "default", "resourceVersion": "5"}}),
    );
    assert!(s.apply(c).is_empty(), "nobody gets the kind any more");
}

fn grouped_state() -> State {
    let mut kinds = Kind::builtins();
    kinds.push(Kind::node_group());
    State::new(kinds)
}

fn grouped_node(s: &State, name: &str, group: &str, rv: &str) -> Obj {
    let mut labels = json!({EDGE_LABEL: ""});
    if !group.is_empty() {
        labels[apimachinery::sites::BELONGING_TO] = json!(group);
    }
    obj(
        s,
        "nodes",
        json!({"metadata": {"name": name, "labels": labels, "resourceVersion": rv}}),
    )
}

fn group(s: &State, name: &str, members: &[&str], rv: &str) -> Obj {
    let statuses: Vec<Value> = members
        .iter()
        .map(|m| json!({"nodeName": m, "selectionStatus": "Succeeded"}))
        .collect();
    obj(
        s,
        "nodegroups",
        json!({"metadata": {"name": name, "resourceVersion": rv}, "status": {"nodeStatuses": statuses}}),
    )
}

const GROUP_A: &str = "nodegroups.apps.kubeedge.io//a";
const GROUP_B: &str = "nodegroups.apps.kubeedge.io//b";

#[test]
fn a_node_group_goes_to_the_nodes_its_label_names_and_so_do_its_changes() {
    let mut s = grouped_state();
    s.apply(grouped_node(&s, "a1", "a", "1"));
    s.apply(grouped_node(&s, "a2", "a", "2"));
    s.apply(grouped_node(&s, "b1", "b", "3"));
    s.apply(grouped_node(&s, "none", "", "4"));
    let mut got = summary(&s.apply(group(&s, "a", &["a1", "a2"], "5")));
    got.sort();
    assert_eq!(got, vec![up("a1", GROUP_A), up("a2", GROUP_A)]);
    assert_eq!(
        summary(&s.apply(group(&s, "b", &["b1"], "6"))),
        vec![up("b1", GROUP_B)]
    );
    assert!(s.desired("a1").iter().any(|o| o.key == GROUP_A));
    assert!(
        s.desired("none")
            .iter()
            .all(|o| o.kind != kind_id(&s, "nodegroups"))
    );
    assert_eq!(summary(&s.delete(GROUP_B)), vec![del("b1", GROUP_B)]);
}

#[test]
fn a_node_moved_to_another_group_loses_the_old_one_and_gets_the_new_one() {
    let mut s = grouped_state();
    s.apply(group(&s, "a", &["a1"], "1"));
    s.apply(group(&s, "b", &["b1"], "2"));
    let first = summary(&s.apply(grouped_node(&s, "a1", "a", "3")));
    assert!(first.contains(&up("a1", GROUP_A)), "{first:?}");
    let moved = summary(&s.apply(grouped_node(&s, "a1", "b", "4")));
    assert_eq!(
        moved,
        vec![up("a1", "nodes//a1"), del("a1", GROUP_A), up("a1", GROUP_B)]
    );
    // Group a's changes no longer reach it; group b's do.
    assert!(s.apply(group(&s, "a", &[], "5")).is_empty());
    assert_eq!(
        summary(&s.apply(group(&s, "b", &["b1", "a1"], "6"))),
        vec![up("a1", GROUP_B)]
    );
    let left = summary(&s.apply(grouped_node(&s, "a1", "", "7")));
    assert_eq!(left, vec![up("a1", "nodes//a1"), del("a1", GROUP_B)]);
}
