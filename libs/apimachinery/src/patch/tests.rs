use serde_json::{Value, json};

use super::*;
use crate::catalog::{builtins, from_crd};

fn info(group: &str, plural: &str) -> ResourceInfo {
    builtins()
        .into_iter()
        .find(|i| i.group == group && i.plural == plural)
        .unwrap()
}

fn smp(plural: &str, original: Value, patch: Value) -> Value {
    apply(
        &info("", plural),
        PatchType::StrategicMerge,
        &original,
        patch.to_string().as_bytes(),
    )
    .unwrap_or_else(|e| panic!("patch failed: {e}"))
}

fn smp_err(plural: &str, original: Value, patch: Value) -> PatchError {
    apply(
        &info("", plural),
        PatchType::StrategicMerge,
        &original,
        patch.to_string().as_bytes(),
    )
    .unwrap_err()
}

#[test]
fn content_types_map_both_ways() {
    for t in [
        PatchType::Json,
        PatchType::Merge,
        PatchType::StrategicMerge,
        PatchType::Apply,
    ] {
        assert_eq!(PatchType::from_content_type(t.content_type()), Some(t));
    }
    assert_eq!(
        PatchType::from_content_type("Application/Merge-Patch+JSON; charset=utf-8"),
        Some(PatchType::Merge)
    );
    assert_eq!(PatchType::from_content_type("application/json"), None);
}

#[test]
fn kubelet_pod_status_patch_orders_conditions_and_replaces_container_statuses() {
    let pod = json!({
        "metadata": {"name": "web", "uid": "u1"},
        "spec": {"containers": [{"name": "app", "image": "nginx"}]},
        "status": {
            "phase": "Pending",
            "conditions": [
                {"type": "PodScheduled", "status": "True"},
                {"type": "Initialized", "status": "False"}
            ],
            "containerStatuses": [{"name": "app", "ready": false, "restartCount": 0,
                                   "state": {"waiting": {"reason": "ContainerCreating"}}}]
        }
    });
    let patch = json!({
        "metadata": {"uid": "u1"},
        "status": {
            "$setElementOrder/conditions": [
                {"type": "Initialized"}, {"type": "Ready"}, {"type": "ContainersReady"},
                {"type": "PodScheduled"}
            ],
            "conditions": [
                {"type": "Initialized", "status": "True"},
                {"type": "Ready", "status": "True"},
                {"type": "ContainersReady", "status": "True"}
            ],
            "containerStatuses": [{"name": "app", "ready": true, "restartCount": 0,
                                   "state": {"running": {"startedAt": "2026-05-01T10:00:00Z"}}}],
            "phase": "Running",
            "podIP": "10.42.0.7",
            "$setElementOrder/podIPs": [{"ip": "10.42.0.7"}],
            "podIPs": [{"ip": "10.42.0.7"}]
        }
    });
    let got = smp("pods", pod, patch);
    let types: Vec<&str> = got["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["type"].as_str().unwrap())
        .collect();
    assert_eq!(
        types,
        ["Initialized", "Ready", "ContainersReady", "PodScheduled"]
    );
    assert_eq!(got["status"]["conditions"][0]["status"], "True");
    assert_eq!(got["status"]["conditions"][3]["status"], "True");
    assert_eq!(
        got["status"]["containerStatuses"],
        json!([{"name": "app", "ready": true, "restartCount": 0,
                "state": {"running": {"startedAt": "2026-05-01T10:00:00Z"}}}]),
        "containerStatuses are atomic: the stale waiting state must go"
    );
    assert_eq!(got["status"]["podIPs"], json!([{"ip": "10.42.0.7"}]));
    assert_eq!(got["status"]["phase"], "Running");
    assert_eq!(got["spec"]["containers"][0]["image"], "nginx");
}

#[test]
fn node_status_patch_updates_one_condition_and_adds_an_address() {
    let node = json!({
        "metadata": {"name": "n1", "labels": {"kubernetes.io/hostname": "n1"}},
        "status": {
            "conditions": [
                {"type": "MemoryPressure", "status": "False", "lastHeartbeatTime": "t0"},
                {"type": "Ready", "status": "True", "lastHeartbeatTime": "t0",
                 "reason": "KubeletReady"}
            ],
            "addresses": [{"type": "InternalIP", "address": "10.0.0.5"}],
            "images": [{"names": ["a"]}, {"names": ["b"]}]
        }
    });
    let patch = json!({
        "status": {
            "$setElementOrder/conditions": [{"type": "MemoryPressure"}, {"type": "Ready"}],
            "conditions": [{"type": "Ready", "lastHeartbeatTime": "t1"}],
            "$setElementOrder/addresses": [{"type": "InternalIP"}, {"type": "Hostname"}],
            "addresses": [{"type": "Hostname", "address": "n1"}],
            "images": [{"names": ["c"]}]
        }
    });
    let got = smp("nodes", node, patch);
    assert_eq!(
        got["status"]["conditions"],
        json!([
            {"type": "MemoryPressure", "status": "False", "lastHeartbeatTime": "t0"},
            {"type": "Ready", "status": "True", "lastHeartbeatTime": "t1",
             "reason": "KubeletReady"}
        ])
    );
    assert_eq!(
        got["status"]["addresses"],
        json!([{"type": "InternalIP", "address": "10.0.0.5"},
               {"type": "Hostname", "address": "n1"}])
    );
    assert_eq!(got["status"]["images"], json!([{"names": ["c"]}]));
    assert_eq!(got["metadata"]["labels"]["kubernetes.io/hostname"], "n1");
}

#[test]
fn node_addresses_replace_directive_sets_the_whole_list() {
    let node = json!({"status": {"addresses": [
        {"type": "InternalIP", "address": "10.0.0.5"},
        {"type": "InternalIP", "address": "10.0.0.6"}
    ]}});
    let patch = json!({"status": {"addresses": [
        {"type": "InternalIP", "address": "10.0.0.7"},
        {"type": "Hostname", "address": "n1"},
        {"$patch": "replace"}
    ]}});
    let got = smp("nodes", node, patch);
    assert_eq!(
        got["status"]["addresses"],
        json!([{"type": "InternalIP", "address": "10.0.0.7"},
               {"type": "Hostname", "address": "n1"}])
    );
}

#[test]
fn kubectl_apply_patch_merges_containers_by_name() {
    let pod = json!({"spec": {"containers": [
        {"name": "app", "image": "app:1", "env": [{"name": "A", "value": "1"}],
         "ports": [{"containerPort": 80, "protocol": "TCP"}]},
        {"name": "sidecar", "image": "proxy:1"}
    ]}});
    let patch = json!({"spec": {
        "$setElementOrder/containers": [{"name": "app"}, {"name": "sidecar"}, {"name": "log"}],
        "containers": [
            {"name": "app", "image": "app:2",
             "$setElementOrder/env": [{"name": "A"}, {"name": "B"}],
             "env": [{"name": "B", "value": "2"}]},
            {"name": "log", "image": "fluent:1"}
        ]
    }});
    let got = smp("pods", pod, patch);
    assert_eq!(
        got["spec"]["containers"],
        json!([
            {"name": "app", "image": "app:2",
             "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
             "ports": [{"containerPort": 80, "protocol": "TCP"}]},
            {"name": "sidecar", "image": "proxy:1"},
            {"name": "log", "image": "fluent:1"}
        ])
    );
}

#[test]
fn without_set_element_order_new_elements_come_first_like_kube() {
    let pod = json!({"spec": {"containers": [{"name": "a"}, {"name": "b"}]}});
    let patch = json!({"spec": {"containers": [{"name": "c"}, {"name": "b", "image": "x"}]}});
    let got = smp("pods", pod, patch);
    let names: Vec<&str> = got["spec"]["containers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["c", "a", "b"]);
}

#[test]
fn set_element_order_keeps_server_only_elements_in_place() {
    let pod = json!({"status": {"conditions": [
        {"type": "A"}, {"type": "X"}, {"type": "B"}, {"type": "Y"}
    ]}});
    let patch = json!({"status": {
        "$setElementOrder/conditions": [{"type": "B"}, {"type": "A"}],
        "conditions": [{"type": "A", "status": "True"}]
    }});
    let got = smp("pods", pod, patch);
    let types: Vec<&str> = got["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["type"].as_str().unwrap())
        .collect();
    // As kube: X stood before B on the server, so it stays before it.
    assert_eq!(types, ["X", "B", "A", "Y"]);
}

#[test]
fn delete_directives_remove_elements_and_maps() {
    let pod = json!({
        "metadata": {"labels": {"a": "1", "b": "2"}, "finalizers": ["x", "y", "z"]},
        "spec": {
            "containers": [{"name": "app"}, {"name": "debug"}],
            "securityContext": {"runAsUser": 1000},
            "nodeSelector": {"disk": "ssd"}
        }
    });
    let patch = json!({
        "metadata": {"labels": {"a": null, "c": "3"},
                     "$deleteFromPrimitiveList/finalizers": ["y"]},
        "spec": {
            "containers": [{"name": "debug", "$patch": "delete"}],
            "securityContext": {"$patch": "delete"},
            "nodeSelector": {"$patch": "replace", "zone": "a"}
        }
    });
    let got = smp("pods", pod, patch);
    assert_eq!(got["metadata"]["labels"], json!({"b": "2", "c": "3"}));
    assert_eq!(got["metadata"]["finalizers"], json!(["x", "z"]));
    assert_eq!(got["spec"]["containers"], json!([{"name": "app"}]));
    assert_eq!(got["spec"]["securityContext"], json!({}));
    assert_eq!(got["spec"]["nodeSelector"], json!({"zone": "a"}));
}

#[test]
fn finalizers_merge_as_a_set_and_owner_references_by_uid() {
    let obj = json!({"metadata": {
        "finalizers": ["a"],
        "ownerReferences": [{"uid": "1", "name": "x"}]
    }});
    let patch = json!({"metadata": {
        "finalizers": ["b", "a"],
        "ownerReferences": [{"uid": "2", "name": "y"}]
    }});
    let got = smp("configmaps", obj, patch);
    assert_eq!(got["metadata"]["finalizers"], json!(["b", "a"]));
    assert_eq!(
        got["metadata"]["ownerReferences"],
        json!([{"uid": "2", "name": "y"}, {"uid": "1", "name": "x"}])
    );
}

#[test]
fn unknown_and_atomic_lists_are_replaced() {
    let pod = json!({"spec": {"tolerations": [{"key": "a"}], "containers": [
        {"name": "app", "args": ["x", "y"]}
    ]}});
    let patch = json!({"spec": {"tolerations": [{"key": "b"}], "containers": [
        {"name": "app", "args": ["z"]}
    ]}});
    let got = smp("pods", pod, patch);
    assert_eq!(got["spec"]["tolerations"], json!([{"key": "b"}]));
    assert_eq!(got["spec"]["containers"][0]["args"], json!(["z"]));

    let node = json!({"spec": {"taints": [{"key": "a", "effect": "NoSchedule"}]}});
    let patch = json!({"spec": {"taints": [{"key": "b", "effect": "NoExecute"}]}});
    let got = smp("nodes", node, patch);
    assert_eq!(
        got["spec"]["taints"],
        json!([{"key": "b", "effect": "NoExecute"}])
    );
}

#[test]
fn service_ports_merge_by_port() {
    let svc = json!({"spec": {"ports": [{"port": 80, "targetPort": 8080}]}});
    let patch = json!({"spec": {
        "$setElementOrder/ports": [{"port": 80}, {"port": 443}],
        "ports": [{"port": 80, "targetPort": 9090}, {"port": 443}]
    }});
    let got = smp("services", svc, patch);
    assert_eq!(
        got["spec"]["ports"],
        json!([{"port": 80, "targetPort": 9090}, {"port": 443}])
    );
}

#[test]
fn retain_keys_clears_unlisted_fields_of_a_volume() {
    let pod = json!({"spec": {"volumes": [
        {"name": "data", "emptyDir": {}}
    ]}});
    let patch = json!({"spec": {"volumes": [
        {"name": "data", "$retainKeys": ["name", "hostPath"], "hostPath": {"path": "/d"}}
    ]}});
    let got = smp("pods", pod, patch);
    assert_eq!(
        got["spec"]["volumes"],
        json!([{"name": "data", "hostPath": {"path": "/d"}}])
    );
    let err = smp_err(
        "pods",
        json!({"spec": {"volumes": [{"name": "data"}]}}),
        json!({"spec": {"volumes": [{"name": "data", "$retainKeys": ["name"], "x": 1}]}}),
    );
    assert_eq!(
        err,
        PatchError::BadRequest("invalid patch format of retainKeys".into())
    );
}

#[test]
fn directives_inside_new_values_are_applied_not_stored() {
    let got = smp(
        "nodes",
        json!({"status": {}}),
        json!({"status": {"addresses": [{"type": "Hostname", "address": "n1"},
                                        {"$patch": "replace"}],
                          "nodeInfo": {"kubeletVersion": "v1.34.0", "bootID": null}}}),
    );
    assert_eq!(
        got["status"],
        json!({"addresses": [{"type": "Hostname", "address": "n1"}],
               "nodeInfo": {"kubeletVersion": "v1.34.0"}})
    );
}

#[test]
fn malformed_strategic_patches_are_rejected() {
    let pod = json!({"spec": {"containers": [{"name": "a"}]}});
    let err = smp_err(
        "pods",
        pod.clone(),
        json!({"spec": {"containers": [{"image": "x"}]}}),
    );
    assert!(
        matches!(&err, PatchError::Invalid(m) if m.contains("merge key: name")),
        "{err}"
    );
    let err = smp_err("pods", pod.clone(), json!({"spec": {"$patch": "explode"}}));
    assert!(matches!(&err, PatchError::Invalid(m) if m.contains("unknown patch type")));
    let err = smp_err(
        "pods",
        pod.clone(),
        json!({"spec": {"$setElementOrder/containers": {"name": "a"}}}),
    );
    assert!(matches!(err, PatchError::BadRequest(_)));
    let err = apply(&info("", "pods"), PatchType::StrategicMerge, &pod, b"[1]").unwrap_err();
    assert!(matches!(err, PatchError::BadRequest(_)));
}

#[test]
fn merge_patch_null_deletes_and_lists_replace() {
    let obj = json!({"metadata": {"labels": {"a": "1", "b": "2"}},
                     "spec": {"containers": [{"name": "a"}, {"name": "b"}]}});
    let patch = json!({"metadata": {"labels": {"a": null, "c": "3"}},
                       "spec": {"containers": [{"name": "c"}]}});
    let got = apply(
        &info("", "pods"),
        PatchType::Merge,
        &obj,
        patch.to_string().as_bytes(),
    )
    .unwrap();
    assert_eq!(
        got,
        json!({"metadata": {"labels": {"b": "2", "c": "3"}},
               "spec": {"containers": [{"name": "c"}]}})
    );
}

#[test]
fn json_patch_applies_operations_and_reports_failures() {
    let obj = json!({"metadata": {"name": "a", "labels": {"x": "1"}}});
    let cm = info("", "configmaps");
    let ops = br#"[{"op":"test","path":"/metadata/name","value":"a"},
                  {"op":"add","path":"/metadata/labels/y","value":"2"},
                  {"op":"remove","path":"/metadata/labels/x"}]"#;
    let got = apply(&cm, PatchType::Json, &obj, ops).unwrap();
    assert_eq!(got["metadata"]["labels"], json!({"y": "2"}));

    let failing = br#"[{"op":"test","path":"/metadata/name","value":"b"}]"#;
    let err = apply(&cm, PatchType::Json, &obj, failing).unwrap_err();
    assert!(matches!(err, PatchError::Invalid(_)), "{err:?}");

    let missing = br#"[{"op":"remove","path":"/spec/x"}]"#;
    let err = apply(&cm, PatchType::Json, &obj, missing).unwrap_err();
    assert!(matches!(err, PatchError::Invalid(_)), "{err:?}");

    let malformed = br#"[{"op":"frobnicate","path":"/a"}]"#;
    let err = apply(&cm, PatchType::Json, &obj, malformed).unwrap_err();
    assert!(matches!(err, PatchError::BadRequest(_)), "{err:?}");

    let replace_root = br#"[{"op":"replace","path":"","value":[]}]"#;
    let err = apply(&cm, PatchType::Json, &obj, replace_root).unwrap_err();
    assert!(matches!(err, PatchError::Invalid(_)), "{err:?}");
}

#[test]
fn custom_resources_refuse_strategic_merge_like_kube_apiserver() {
    let crd = json!({"spec": {"group": "x.io", "scope": "Namespaced",
        "names": {"plural": "widgets", "kind": "Widget"},
        "versions": [{"name": "v1", "served": true}]}});
    let widgets = &from_crd(&crd).unwrap()[0];
    let obj = json!({"spec": {"size": 1}});
    let err = apply(widgets, PatchType::StrategicMerge, &obj, b"{}").unwrap_err();
    assert_eq!(
        err,
        PatchError::Unsupported(
            "the body of the request was in an unknown format - accepted media types include: \
             application/json-patch+json, application/merge-patch+json"
                .into()
        )
    );
    let got = apply(widgets, PatchType::Merge, &obj, br#"{"spec":{"size":2}}"#).unwrap();
    assert_eq!(got["spec"]["size"], 2);
}

#[test]
fn server_side_apply_is_unsupported_for_every_kind() {
    let err = apply(&info("", "pods"), PatchType::Apply, &json!({}), b"{}").unwrap_err();
    assert!(matches!(err, PatchError::Unsupported(m) if m.contains("strategic-merge-patch")));
}
