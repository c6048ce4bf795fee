use serde_json::{Value, json};

use super::*;

fn node(name: &str, extra: Value) -> NodeInfo {
    let mut v = json!({
        "metadata": {"name": name, "labels": {"zone": "a", "kubernetes.io/hostname": name}},
        "status": {
            "allocatable": {"cpu": "2", "memory": "4Gi", "pods": "3"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    });
    merge(&mut v, extra);
    NodeInfo::of(&serde_json::from_value(v).unwrap())
}

fn pod(spec: Value) -> Pod {
    let mut s = json!({"containers": [{"name": "c", "image": "i"}]});
    merge(&mut s, spec);
    serde_json::from_value(json!({"metadata": {"name": "p"}, "spec": s})).unwrap()
}

fn merge(a: &mut Value, b: Value) {
    if let (Some(a), Value::Object(b)) = (a.as_object_mut(), b) {
        for (k, v) in b {
            match a.get_mut(&k) {
                Some(slot) if slot.is_object() && v.is_object() => merge(slot, v),
                _ => {
                    a.insert(k, v);
                }
            }
        }
    }
}

fn fits(p: &Pod, n: &NodeInfo) -> Result<(), Misfit> {
    filter(p, &PodNeeds::of(p), n)
}

#[test]
fn node_selectors_and_required_affinity_filter() {
    let n = node("n1", json!({}));
    assert_eq!(
        fits(&pod(json!({"nodeSelector": {"zone": "a"}})), &n),
        Ok(())
    );
    assert_eq!(
        fits(&pod(json!({"nodeSelector": {"zone": "b"}})), &n),
        Err(Misfit::Selector)
    );
    let affinity = |op: &str, values: Value| {
        pod(
            json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": op, "values": values}]}]
            }}}}),
        )
    };
    assert_eq!(fits(&affinity("In", json!(["a", "b"])), &n), Ok(()));
    assert_eq!(
        fits(&affinity("NotIn", json!(["a"])), &n),
        Err(Misfit::Selector)
    );
    assert_eq!(fits(&affinity("Exists", json!([])), &n), Ok(()));
    assert_eq!(
        fits(&affinity("DoesNotExist", json!([])), &n),
        Err(Misfit::Selector)
    );
    let by_name = pod(
        json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n2"]}]},
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]},
            ]
        }}}}),
    );
    assert_eq!(fits(&by_name, &n), Ok(()), "terms are ORed");
    let gt = node("n2", json!({"metadata": {"labels": {"cores": "8"}}}));
    let needs_cores = pod(
        json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [{"key": "cores", "operator": "Gt", "values": ["4"]}]}]
        }}}}),
    );
    assert_eq!(fits(&needs_cores, &gt), Ok(()));
    assert_eq!(fits(&needs_cores, &n), Err(Misfit::Selector));
}

#[test]
fn taints_need_tolerations_and_not_ready_nodes_are_tainted() {
    let tainted = node(
        "n1",
        json!({"spec": {"taints": [{"key": "edge", "value": "true", "effect": "NoSchedule"}]}}),
    );
    assert_eq!(
        fits(&pod(json!({})), &tainted),
        Err(Misfit::Taint("edge: true".into()))
    );
    let tolerant =
        pod(json!({"tolerations": [{"key": "edge", "operator": "Equal", "value": "true"}]}));
    assert_eq!(fits(&tolerant, &tainted), Ok(()));
    let everything = pod(json!({"tolerations": [{"operator": "Exists"}]}));
    assert_eq!(fits(&everything, &tainted), Ok(()));
    let wrong_effect =
        pod(json!({"tolerations": [{"key": "edge", "operator": "Exists", "effect": "NoExecute"}]}));
    assert!(fits(&wrong_effect, &tainted).is_err());
    let soft = node(
        "n2",
        json!({"spec": {"taints": [{"key": "slow", "effect": "PreferNoSchedule"}]}}),
    );
    assert_eq!(
        fits(&pod(json!({})), &soft),
        Ok(()),
        "PreferNoSchedule only scores"
    );
    let mut down = node("n3", json!({}));
    down.ready = false;
    assert_eq!(
        fits(&pod(json!({})), &down),
        Err(Misfit::Taint("node.kubernetes.io/not-ready: ".into()))
    );
    let mut cordoned = node("n4", json!({}));
    cordoned.unschedulable = true;
    assert_eq!(fits(&pod(json!({})), &cordoned), Err(Misfit::Unschedulable));
}

#[test]
fn requests_count_against_allocatable_and_host_ports_are_exclusive() {
    let mut n = node("n1", json!({}));
    let big = pod(json!({"containers": [{"name": "c", "image": "i",
        "resources": {"requests": {"cpu": "1500m", "memory": "1Gi"}},
        "ports": [{"containerPort": 80, "hostPort": 8080}]}]}));
    let needs = PodNeeds::of(&big);
    assert_eq!(
        needs.requests,
        Resources {
            cpu: 1500,
            memory: 1 << 30,
            pods: 1
        }
    );
    assert_eq!(filter(&big, &needs, &n), Ok(()));
    n.place(&needs, 1);
    assert_eq!(filter(&big, &needs, &n), Err(Misfit::Insufficient("cpu")));
    let other_port = pod(json!({"containers": [{"name": "c", "image": "i",
        "ports": [{"containerPort": 80, "hostPort": 8080}]}]}));
    assert_eq!(fits(&other_port, &n), Err(Misfit::Ports));
    let udp = pod(json!({"containers": [{"name": "c", "image": "i",
        "ports": [{"containerPort": 80, "hostPort": 8080, "protocol": "UDP"}]}]}));
    assert_eq!(fits(&udp, &n), Ok(()));
    n.place(&PodNeeds::of(&udp), 1);
    n.place(&PodNeeds::of(&pod(json!({}))), 1);
    assert_eq!(fits(&pod(json!({})), &n), Err(Misfit::TooManyPods));
    n.place(&needs, -1);
    assert_eq!(n.requested.pods, 2);
    assert!(n.host_ports.iter().all(|p| p.starts_with("UDP")));
}

#[test]
fn init_containers_and_limits_set_the_requests() {
    let p = pod(json!({
        "initContainers": [{"name": "i", "image": "i", "resources": {"requests": {"cpu": "3"}}}],
        "containers": [{"name": "c", "image": "i", "resources": {"limits": {"memory": "64Mi"}}}],
    }));
    let needs = PodNeeds::of(&p);
    assert_eq!(needs.requests.cpu, 3000, "the largest init container");
    assert_eq!(
        needs.requests.memory,
        64 << 20,
        "a limit alone is the request"
    );
    assert_eq!(needs.scoring.cpu, 100, "no cpu request: 100m for scoring");
}

#[test]
fn scores_prefer_free_nodes_spreading_and_preferred_affinity() {
    let p = pod(
        json!({"affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 10, "preference": {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]}]}}
        ]}}}),
    );
    let needs = PodNeeds::of(&p);
    let a = node("a", json!({}));
    let b = node("b", json!({"metadata": {"labels": {"zone": "b"}}}));
    assert!(score(&p, &needs, &b, 0) > score(&p, &needs, &a, 0));
    let mut busy = node("busy", json!({}));
    busy.place(
        &PodNeeds::of(&pod(json!({"containers": [{"name": "c", "image": "i",
            "resources": {"requests": {"cpu": "1", "memory": "2Gi"}}}]}))),
        1,
    );
    let plain = pod(json!({}));
    let plain_needs = PodNeeds::of(&plain);
    assert!(score(&plain, &plain_needs, &a, 0) > score(&plain, &plain_needs, &busy, 0));
    let mut owned = pod(json!({}));
    owned.metadata.owner_references = Some(vec![
        serde_json::from_value(json!({"apiVersion": "apps/v1", "kind": "ReplicaSet",
            "name": "rs", "uid": "rs-uid", "controller": true}))
        .unwrap(),
    ]);
    let owned_needs = PodNeeds::of(&owned);
    let mut crowded = node("c", json!({}));
    crowded.owners.insert("rs-uid".into(), 2);
    assert!(score(&owned, &owned_needs, &a, 2) > score(&owned, &owned_needs, &crowded, 2));
}

#[test]
fn the_unschedulable_message_counts_reasons_as_kube_scheduler() {
    let msg = unschedulable_message(
        3,
        &[
            Misfit::Insufficient("cpu"),
            Misfit::Selector,
            Misfit::Insufficient("cpu"),
        ],
    );
    assert_eq!(
        msg,
        "0/3 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, 2 Insufficient cpu. preemption: not attempted."
    );
    assert_eq!(
        unschedulable_message(0, &[]),
        "0/0 nodes are available: no nodes available to schedule pods."
    );
}
