use super::*;

fn svc(annotations: Value, spec: Value) -> Service {
    serde_json::from_value(
        json!({"metadata": {"name": "s", "annotations": annotations}, "spec": spec}),
    )
    .unwrap()
}

fn ep(node: &str, zone: &str) -> Value {
    json!({"addresses": ["10.0.0.1"], "nodeName": node, "zone": zone, "conditions": {"ready": true}})
}

fn hints(eps: &[Value]) -> Vec<Option<String>> {
    eps.iter()
        .map(|e| {
            e["hints"]["forZones"][0]["name"]
                .as_str()
                .map(str::to_owned)
        })
        .collect()
}

fn ratios(pairs: &[(&str, f64)]) -> BTreeMap<String, f64> {
    pairs.iter().map(|(z, r)| (z.to_string(), *r)).collect()
}

fn run_auto(eps: &mut [Value], r: Option<&BTreeMap<String, f64>>) {
    let mut refs: Vec<&mut Value> = eps.iter_mut().collect();
    auto_hints(&mut refs, r);
}

fn worker(zone: Option<&str>, cpu: Option<i64>) -> NodeInfo {
    NodeInfo {
        zone: zone.map(Into::into),
        cpu_millis: cpu,
        ready: true,
        control_plane: false,
    }
}

#[test]
fn the_topology_mode_annotation_wins_over_traffic_distribution() {
    let close = json!({"trafficDistribution": "PreferClose"});
    assert_eq!(heuristic(&svc(json!({}), json!({}))), None);
    assert_eq!(
        heuristic(&svc(json!({}), close.clone())),
        Some(Heuristic::PreferClose)
    );
    let auto = json!({"service.kubernetes.io/topology-mode": "Auto"});
    assert_eq!(heuristic(&svc(auto, close.clone())), Some(Heuristic::Auto));
    let old = json!({"service.kubernetes.io/topology-aware-hints": "auto"});
    assert_eq!(heuristic(&svc(old, json!({}))), Some(Heuristic::Auto));
    let disabled = json!({"service.kubernetes.io/topology-mode": "Disabled"});
    assert_eq!(
        heuristic(&svc(disabled, close)),
        Some(Heuristic::PreferClose)
    );
}

#[test]
fn cpu_ratios_need_a_zone_and_cpu_on_every_ready_worker() {
    let nodes = [worker(Some("a"), Some(3000)), worker(Some("b"), Some(1000))];
    assert_eq!(
        cpu_ratios(&nodes),
        Some(ratios(&[("a", 0.75), ("b", 0.25)]))
    );
    let missing = [worker(Some("a"), Some(3000)), worker(None, Some(1000))];
    assert_eq!(cpu_ratios(&missing), None, "a node without a zone");
    let mut not_ready = worker(None, None);
    not_ready.ready = false;
    let mut control = worker(Some("c"), Some(8000));
    control.control_plane = true;
    let ignored = [worker(Some("a"), Some(1000)), not_ready, control];
    assert_eq!(cpu_ratios(&ignored), Some(ratios(&[("a", 1.0)])));
}

#[test]
fn allocations_need_an_endpoint_per_zone_and_keep_within_the_overload_threshold() {
    let even = ratios(&[("a", 0.5), ("b", 0.5)]);
    assert_eq!(allocations(&even, 1), None);
    let a = allocations(&even, 4).unwrap();
    assert_eq!((a["a"].minimum, a["a"].maximum), (2, 2));
    // 2.5 each: a minimum of ceil(2.5 / 1.2) = 3 per zone does not fit in 5.
    assert_eq!(allocations(&even, 5), None);
    let uneven = ratios(&[("a", 0.75), ("b", 0.25)]);
    let a = allocations(&uneven, 8).unwrap();
    assert_eq!((a["a"].minimum, a["a"].maximum), (5, 6));
    assert_eq!((a["b"].minimum, a["b"].maximum), (2, 3));
}

#[test]
fn balanced_zones_hint_each_endpoint_for_its_own_zone() {
    let r = ratios(&[("a", 0.5), ("b", 0.5)]);
    let mut eps = vec![ep("n1", "a"), ep("n2", "a"), ep("n3", "b"), ep("n4", "b")];
    run_auto(&mut eps, Some(&r));
    let want: Vec<Option<String>> = ["a", "a", "b", "b"]
        .iter()
        .map(|z| Some(z.to_string()))
        .collect();
    assert_eq!(hints(&eps), want);
}

#[test]
fn a_zone_short_of_endpoints_is_given_one_from_a_zone_with_surplus() {
    let r = ratios(&[("a", 0.5), ("b", 0.5)]);
    let mut eps = vec![ep("n1", "a"), ep("n2", "a"), ep("n3", "a"), ep("n4", "b")];
    run_auto(&mut eps, Some(&r));
    let got = hints(&eps);
    assert_eq!(got.iter().filter(|h| h.as_deref() == Some("a")).count(), 2);
    assert_eq!(got.iter().filter(|h| h.as_deref() == Some("b")).count(), 2);
    assert_eq!(got[3].as_deref(), Some("b"));
}

#[test]
fn hints_are_withheld_and_removed_when_they_cannot_be_given_safely() {
    let r = ratios(&[("a", 0.5), ("b", 0.5)]);
    // Fewer endpoints than zones; an old hint goes.
    let mut eps = vec![ep("n1", "a")];
    eps[0]["hints"] = json!({"forZones": [{"name": "a"}]});
    run_auto(&mut eps, Some(&r));
    assert_eq!(hints(&eps), vec![None]);
    // A ready endpoint without a zone, or in a zone with no CPU share.
    let mut eps = vec![
        ep("n1", "a"),
        json!({"nodeName": "n2", "conditions": {"ready": true}}),
    ];
    run_auto(&mut eps, Some(&r));
    assert_eq!(hints(&eps), vec![None, None]);
    let mut eps = vec![ep("n1", "a"), ep("n2", "c")];
    run_auto(&mut eps, Some(&r));
    assert_eq!(hints(&eps), vec![None, None]);
    // No node figures at all.
    let mut eps = vec![ep("n1", "a"), ep("n2", "b")];
    run_auto(&mut eps, None);
    assert_eq!(hints(&eps), vec![None, None]);
}

#[test]
fn prefer_close_hints_each_endpoint_with_a_zone_for_it_and_fill_sets_zones() {
    let mut map = HashMap::new();
    map.insert("n1".to_owned(), worker(Some("a"), Some(1000)));
    map.insert("n2".to_owned(), worker(None, Some(1000)));
    let zones = Zones(Arc::new(RwLock::new(map)));
    let mut eps = vec![
        json!({"nodeName": "n1", "conditions": {"ready": true}}),
        json!({"nodeName": "n2", "conditions": {"ready": true}}),
    ];
    let close = svc(json!({}), json!({"trafficDistribution": "PreferClose"}));
    fill(&close, eps.iter_mut(), &zones);
    assert_eq!(eps[0]["zone"], "a");
    assert!(eps[1].get("zone").is_none());
    assert_eq!(hints(&eps), vec![Some("a".to_owned()), None]);
}
