use serde_json::json;

use super::*;

fn service(annotations: Value, spec: Value) -> Value {
    json!({"metadata": {"name": "s", "namespace": "d", "annotations": annotations}, "spec": spec})
}

fn slice(endpoints: Value) -> Value {
    json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": "s-1", "namespace": "d", "resourceVersion": "42",
                     "labels": {"kubernetes.io/service-name": "s"}},
        "addressType": "IPv4",
        "endpoints": endpoints,
    })
}

fn ep(ip: &str, node: &str) -> Value {
    json!({"addresses": [ip], "nodeName": node, "conditions": {"ready": true}})
}

fn hinted(ip: &str, node: &str, zones: &[&str]) -> Value {
    let zones: Vec<Value> = zones.iter().map(|z| json!({"name": z})).collect();
    json!({"addresses": [ip], "nodeName": node, "hints": {"forZones": zones}})
}

fn place(node: &str, members: Option<&[&str]>, zone: Option<&str>) -> Place {
    Place {
        node: node.into(),
        zone: zone.map(Into::into),
        members: members.map(|m| m.iter().map(|s| s.to_string()).collect()),
    }
}

fn nodes_of(slice: &Value) -> Vec<&str> {
    slice["endpoints"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["nodeName"].as_str().unwrap())
        .collect()
}

#[test]
fn the_mode_comes_from_kubeedge_openyurt_and_kubernetes_annotations() {
    let m = |a: Value, s: Value| mode(&service(a, s));
    let none = json!({});
    assert_eq!(m(none.clone(), none.clone()), Mode::Open);
    let kubeedge = json!({"apps.kubeedge.io/service-topology": "range-nodegroup"});
    assert_eq!(m(kubeedge, none.clone()), Mode::Group);
    let other = json!({"apps.kubeedge.io/service-topology": "something-else"});
    assert_eq!(m(other, none.clone()), Mode::Open);
    for (key, want) in [
        ("kubernetes.io/hostname", Mode::Node),
        ("openyurt.io/nodepool", Mode::Group),
        ("kubernetes.io/zone", Mode::Group),
        ("bogus", Mode::Open),
    ] {
        assert_eq!(
            m(json!({"openyurt.io/topologyKeys": key}), none.clone()),
            want
        );
    }
    let auto = json!({"service.kubernetes.io/topology-mode": "Auto"});
    assert_eq!(m(auto, none.clone()), Mode::Hints);
    let old = json!({"service.kubernetes.io/topology-aware-hints": "auto"});
    assert_eq!(m(old, none.clone()), Mode::Hints);
    let close = json!({"trafficDistribution": "PreferClose"});
    assert_eq!(m(none.clone(), close), Mode::Hints);
}

#[test]
fn a_closed_slice_keeps_only_the_endpoints_of_the_nodes_group() {
    let mut s = slice(json!([
        ep("10.0.0.1", "a1"),
        ep("10.0.0.2", "b1"),
        ep("10.0.0.3", "a2")
    ]));
    let here = place("a1", Some(&["a1", "a2"]), None);
    assert!(endpoint_slice(&mut s, Mode::Group, &here, false));
    assert_eq!(nodes_of(&s), ["a1", "a2"]);
    assert_eq!(
        s["metadata"]["resourceVersion"], "42",
        "resourceVersion untouched"
    );
}

#[test]
fn a_node_in_no_group_sees_only_its_own_endpoints_of_a_closed_service() {
    let mut s = slice(json!([ep("10.0.0.1", "a1"), ep("10.0.0.2", "b1")]));
    assert!(endpoint_slice(
        &mut s,
        Mode::Group,
        &place("b1", None, None),
        false
    ));
    assert_eq!(nodes_of(&s), ["b1"]);
}

#[test]
fn endpoints_without_a_node_go_and_an_emptied_slice_stays_empty() {
    let mut s = slice(json!([{"addresses": ["10.0.0.9"]}, ep("10.0.0.2", "b1")]));
    assert!(endpoint_slice(
        &mut s,
        Mode::Group,
        &place("a1", Some(&["a1"]), None),
        false
    ));
    assert_eq!(s["endpoints"], json!([]));
}

#[test]
fn an_open_service_is_untouched() {
    let original = slice(json!([ep("10.0.0.1", "a1"), ep("10.0.0.2", "b1")]));
    let mut s = original.clone();
    assert!(!endpoint_slice(
        &mut s,
        Mode::Open,
        &place("a1", None, None),
        false
    ));
    assert_eq!(s, original);
}

#[test]
fn the_hostname_key_keeps_this_nodes_endpoints_even_inside_a_group() {
    let mut s = slice(json!([ep("10.0.0.1", "a1"), ep("10.0.0.3", "a2")]));
    let here = place("a1", Some(&["a1", "a2"]), None);
    assert!(endpoint_slice(&mut s, Mode::Node, &here, false));
    assert_eq!(nodes_of(&s), ["a1"]);
}

#[test]
fn hints_apply_only_when_every_ready_endpoint_has_them_and_one_names_the_zone() {
    let all = [hinted("1", "a1", &["za"]), hinted("2", "b1", &["zb"])];
    assert!(hints_apply(Some("za"), &all));
    assert!(!hints_apply(Some("zc"), &all), "none for this zone");
    assert!(!hints_apply(None, &all), "a node without a zone");
    let missing = [hinted("1", "a1", &["za"]), ep("2", "b1")];
    assert!(!hints_apply(Some("za"), &missing));
    let not_ready = json!({"addresses": ["3"], "nodeName": "b1", "conditions": {"ready": false}});
    assert!(hints_apply(Some("za"), [&all[0], &not_ready]));
}

#[test]
fn hinted_slices_keep_the_endpoints_for_this_zone_or_all_of_them() {
    let eps = json!([hinted("1", "a1", &["za"]), hinted("2", "b1", &["zb"])]);
    let here = place("a1", None, Some("za"));
    let mut s = slice(eps.clone());
    assert!(endpoint_slice(&mut s, Mode::Hints, &here, true));
    assert_eq!(nodes_of(&s), ["a1"]);
    let mut s = slice(eps);
    assert!(
        !endpoint_slice(&mut s, Mode::Hints, &here, false),
        "fallback: all"
    );
    assert_eq!(nodes_of(&s), ["a1", "b1"]);
}

#[test]
fn closed_endpoints_keep_the_groups_addresses_and_drop_emptied_subsets() {
    let mut e = json!({
        "kind": "Endpoints", "metadata": {"name": "s", "namespace": "d", "resourceVersion": "7"},
        "subsets": [
            {"addresses": [{"ip": "1", "nodeName": "a1"}, {"ip": "2", "nodeName": "b1"}],
             "notReadyAddresses": [{"ip": "3"}], "ports": [{"port": 80}]},
            {"addresses": [{"ip": "4", "nodeName": "b2"}], "ports": [{"port": 81}]},
        ],
    });
    assert!(endpoints(
        &mut e,
        Mode::Group,
        &place("a1", Some(&["a1"]), None)
    ));
    assert_eq!(
        e["subsets"],
        json!([{"addresses": [{"ip": "1", "nodeName": "a1"}], "notReadyAddresses": [], "ports": [{"port": 80}]}])
    );
    assert_eq!(e["metadata"]["resourceVersion"], "7");
}
