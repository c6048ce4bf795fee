//! The one-pass writer against the reference, on objects whose members come in every order,
//! with and without whitespace, and on damaged text.

use serde_json::{Value, json};

use super::super::{Served, value};
use super::reference;

/// xorshift64: a fixed sequence, so a failure names its seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// `value` as JSON text with each object's members shuffled, and now and then whitespace.
fn shuffled(value: &Value, rng: &mut Rng, out: &mut String) {
    let gap = |rng: &mut Rng, out: &mut String| {
        if rng.below(8) == 0 {
            out.push(' ');
        }
    };
    match value {
        Value::Object(map) => {
            let mut members: Vec<_> = map.iter().collect();
            for i in (1..members.len()).rev() {
                members.swap(i, rng.below(i + 1));
            }
            out.push('{');
            for (i, (k, v)) in members.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                gap(rng, out);
                out.push_str(&serde_json::to_string(k).unwrap());
                out.push(':');
                gap(rng, out);
                shuffled(v, rng, out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, v) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                shuffled(v, rng, out);
            }
            out.push(']');
        }
        other => out.push_str(&other.to_string()),
    }
}

pub(super) fn samples() -> Vec<(Value, &'static str, &'static str)> {
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "p", "namespace": "n", "uid": "u", "resourceVersion": "7",
            "labels": {"app": "a", "tier": "t"}, "annotations": {"x/y": "z\"q\\"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "r",
                "uid": "v", "controller": true}],
            "managedFields": [{"manager": "m", "operation": "Update", "fieldsType": "FieldsV1",
                "fieldsV1": {"f:spec": {"f:containers": {}}}}]},
        "spec": {"nodeName": "n1", "restartPolicy": "Always", "dnsPolicy": "ClusterFirst",
            "volumes": [{"name": "v", "configMap": {"name": "c", "items": [{"key": "k", "path": "p"}]}},
                        {"projected": {"sources": [{"serviceAccountToken": {"path": "t"}}]}, "name": "w"}],
            "containers": [{"name": "c", "image": "i", "args": ["a", "b"],
                "env": [{"name": "E", "valueFrom": {"fieldRef": {"fieldPath": "x"}}}],
                "resources": {"limits": {"cpu": "1"}, "requests": {"memory": "1Gi"}},
                "livenessProbe": {"periodSeconds": 3, "httpGet": {"port": 8, "path": "/"}},
                "ports": [{"protocol": "TCP", "containerPort": 80, "name": "http"}],
                "securityContext": {"runAsUser": 0, "capabilities": {"add": ["NET_ADMIN"]}}}],
            "tolerations": [{"key": "k", "operator": "Exists", "effect": "NoSchedule"}],
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
                {"nodeSelectorTerms": [{"matchExpressions": [{"key": "k", "operator": "In", "values": ["v"]}]}]}}},
            "unknownField": {"b": 1, "a": [1, 2]}},
        "status": {"phase": "Running", "podIP": "10.0.0.1", "hostIP": "10.0.0.2",
            "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": null}],
            "containerStatuses": [{"name": "c", "ready": true, "restartCount": 0,
                "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}}}]}
    });
    let deployment = json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "d", "generation": 2, "labels": {}},
        "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "a"}},
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": 1}},
            "template": {"metadata": {"labels": {"app": "a"}}, "spec": {"containers": [{"image": "i", "name": "c"}]}}},
        "status": {"replicas": 3, "readyReplicas": 2, "observedGeneration": 2}
    });
    let service = json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "s"},
        "spec": {"type": "ClusterIP", "clusterIP": "10.96.0.1", "clusterIPs": ["10.96.0.1"],
            "ports": [{"port": 80, "targetPort": 8080, "protocol": "TCP", "name": "h"}],
            "selector": {"app": "a"}, "ipFamilies": ["IPv4"]},
        "status": {"loadBalancer": {}}
    });
    let custom = json!({
        "apiVersion": "x.io/v1", "kind": "Widget",
        "metadata": {"name": "w", "uid": "u", "labels": {"b": "1"}},
        "spec": {"size": 3, "parts": [{"b": 1, "a": 2}]}, "a": 1, "zz": null
    });
    let config_map = json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "c"}, "data": {"k": "v", "a": "b"}, "binaryData": {}, "immutable": false
    });
    vec![
        (pod, "Pod", "v1"),
        (deployment, "Deployment", "apps/v1"),
        (service, "Service", "v1"),
        (custom, "Widget", "x.io/v1"),
        (config_map, "ConfigMap", "v1"),
    ]
}

#[test]
fn the_one_pass_writer_matches_the_reference_on_members_in_any_order() {
    for (sample, kind, api_version) in samples() {
        let served = Served::new(kind, api_version);
        for seed in 1..300u64 {
            let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15));
            let mut text = String::new();
            shuffled(&sample, &mut rng, &mut text);
            let raw = text.as_bytes();
            let want = reference::object(raw, kind, api_version);
            assert_eq!(served.object(raw), want, "{kind} seed {seed}: {text}");
            let want = want.expect("a shuffled object is an object");
            if served.is_written(raw) {
                assert_eq!(raw, want.as_slice(), "{kind} seed {seed}");
            }
            assert!(
                served.is_written(&want),
                "{kind} seed {seed}: written form not recognized"
            );
        }
    }
}

#[test]
fn the_one_pass_writer_matches_the_reference_on_damaged_text() {
    let (pod, ..) = samples().remove(0);
    let text = serde_json::to_vec(&pod).unwrap();
    let served = Served::new("Pod", "v1");
    let mut rng = Rng(0x1234_5678_9abc_def1);
    for round in 0..3000 {
        let mut bad = text.clone();
        let at = rng.below(bad.len());
        match rng.below(3) {
            0 => {
                bad.remove(at);
            }
            1 => bad.insert(at, b"{}[],:\" \\x1"[rng.below(11)]),
            _ => bad.truncate(at),
        }
        let want = reference::object(&bad, "Pod", "v1");
        let got = served.object(&bad);
        // Text that is not JSON may be refused where the reference wrote something (a
        // quote inside a number); whatever is written is what the reference writes.
        let json = serde_json::from_slice::<serde::de::IgnoredAny>(&bad).is_ok();
        if json || got.is_some() {
            assert_eq!(
                got,
                want,
                "round {round}: {}",
                String::from_utf8_lossy(&bad)
            );
        }
        if served.is_written(&bad) {
            assert_eq!(Some(bad), want, "round {round}");
        }
    }
}

#[test]
fn values_are_written_as_the_reference_writes_them() {
    let mut values: Vec<Value> = samples().into_iter().map(|(v, ..)| v).collect();
    values.push(
        json!({"apiVersion": "v1", "kind": "PodList", "metadata": {"resourceVersion": "3"},
        "items": [values[0].clone(), {"kind": "Pod"}, 3]}),
    );
    values.push(json!({"apiVersion": "x.io/v1", "kind": "WidgetList", "metadata": {"continue": "c", "resourceVersion": "1"},
        "items": [values[3].clone()]}));
    values.push(json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 409,
        "details": {"causes": [{"field": "f", "reason": "r", "message": "m"}], "name": "x"}, "metadata": {}}));
    values.push(json!({"apiVersion": "v1", "metadata": {"name": "no kind"}, "spec": {}}));
    values.push(json!({"kind": 3, "apiVersion": "v1", "b": 1, "a": 2}));
    values.push(json!([1, 2]));
    for v in &values {
        assert_eq!(value(v), reference::value(v), "{v}");
    }
}
