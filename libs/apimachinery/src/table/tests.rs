use serde_json::{Value, json};

use super::*;
use crate::catalog::{builtins, from_crd};
use crate::time::parse_rfc3339;

fn info(group: &str, plural: &str) -> ResourceInfo {
    builtins()
        .into_iter()
        .find(|i| i.group == group && i.plural == plural)
        .unwrap()
}

fn now() -> i64 {
    parse_rfc3339("2026-05-01T12:00:00Z").unwrap()
}

/// The cells of one object's row.
fn cells(group: &str, plural: &str, obj: Value) -> Vec<Value> {
    let table = render(&info(group, plural), &[obj], IncludeObject::None, now());
    table["rows"][0]["cells"].as_array().unwrap().clone()
}

fn running_pod() -> Value {
    json!({
        "metadata": {"name": "web-0", "namespace": "default",
                     "creationTimestamp": "2026-05-01T11:55:00Z"},
        "spec": {"nodeName": "n1", "containers": [{"name": "app"}, {"name": "sidecar"}]},
        "status": {
            "phase": "Running",
            "podIPs": [{"ip": "10.42.0.7"}],
            "conditions": [{"type": "Ready", "status": "False"}],
            "containerStatuses": [
                {"name": "app", "ready": true, "restartCount": 2,
                 "state": {"running": {}},
                 "lastState": {"terminated": {"exitCode": 1,
                                              "finishedAt": "2026-05-01T11:57:00Z"}}},
                {"name": "sidecar", "ready": false, "restartCount": 0,
                 "state": {"running": {}}}
            ]
        }
    })
}

#[test]
fn table_has_the_meta_v1_shape() {
    let table = render(
        &info("", "pods"),
        &[running_pod()],
        IncludeObject::Metadata,
        now(),
    );
    assert_eq!(table["kind"], "Table");
    assert_eq!(table["apiVersion"], "meta.k8s.io/v1");
    assert_eq!(table["metadata"], json!({}));
    let first = &table["columnDefinitions"][0];
    assert_eq!(first["name"], "Name");
    assert_eq!(first["type"], "string");
    assert_eq!(first["format"], "name");
    assert_eq!(first["priority"], 0);
    assert!(
        first["description"]
            .as_str()
            .unwrap()
            .starts_with("Name must be unique")
    );
    assert_eq!(table["columnDefinitions"][5]["priority"], 1);
    let row = &table["rows"][0];
    assert_eq!(row["cells"].as_array().unwrap().len(), 9);
    assert_eq!(
        row["object"],
        json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
               "metadata": running_pod()["metadata"]})
    );
}

#[test]
fn include_object_controls_the_row_object() {
    let pods = info("", "pods");
    let none = render(&pods, &[running_pod()], IncludeObject::None, now());
    assert!(none["rows"][0].get("object").is_none());
    let full = render(&pods, &[running_pod()], IncludeObject::Object, now());
    assert_eq!(full["rows"][0]["object"]["kind"], "Pod");
    assert_eq!(full["rows"][0]["object"]["apiVersion"], "v1");
    assert_eq!(full["rows"][0]["object"]["status"]["phase"], "Running");
    assert_eq!(
        IncludeObject::from_query("Object"),
        Some(IncludeObject::Object)
    );
    assert_eq!(IncludeObject::from_query("x"), None);
}

#[test]
fn pod_cells_match_kubectl_get_pods_wide() {
    assert_eq!(
        cells("", "pods", running_pod()),
        [
            json!("web-0"),
            json!("1/2"),
            json!("Running"),
            json!("2 (3m ago)"),
            json!("5m"),
            json!("10.42.0.7"),
            json!("n1"),
            json!("<none>"),
            json!("<none>")
        ]
    );
}

#[test]
fn pod_status_shows_the_container_reason() {
    let mut pod = running_pod();
    pod["status"]["containerStatuses"][1]["state"] =
        json!({"waiting": {"reason": "CrashLoopBackOff"}});
    assert_eq!(cells("", "pods", pod.clone())[2], "CrashLoopBackOff");
    pod["status"]["containerStatuses"][1]["state"] = json!({"terminated": {"exitCode": 137}});
    assert_eq!(cells("", "pods", pod)[2], "ExitCode:137");
}

#[test]
fn pod_status_shows_init_progress_and_termination() {
    let pod = json!({
        "metadata": {"name": "p"},
        "spec": {"initContainers": [{"name": "init"}], "containers": [{"name": "app"}]},
        "status": {"phase": "Pending",
                   "initContainerStatuses": [{"name": "init", "restartCount": 0,
                                              "state": {"running": {}}}]}
    });
    let row = cells("", "pods", pod);
    assert_eq!(
        (&row[1], &row[2], &row[4]),
        (&json!("0/1"), &json!("Init:0/1"), &json!("<unknown>"))
    );

    let mut pod = running_pod();
    pod["metadata"]["deletionTimestamp"] = json!("2026-05-01T12:00:30Z");
    assert_eq!(cells("", "pods", pod)[2], "Terminating");
}

#[test]
fn completed_pods_carry_row_conditions() {
    let pod = json!({"metadata": {"name": "job"}, "spec": {"containers": [{"name": "c"}]},
                     "status": {"phase": "Succeeded", "containerStatuses": [
                         {"name": "c", "state": {"terminated": {"exitCode": 0,
                                                                "reason": "Completed"}}}]}});
    let table = render(&info("", "pods"), &[pod], IncludeObject::None, now());
    let row = &table["rows"][0];
    assert_eq!(row["cells"][2], "Completed");
    assert_eq!(row["conditions"][0]["type"], "Completed");
    assert_eq!(row["conditions"][0]["reason"], "Succeeded");
}

#[test]
fn node_cells_show_readiness_roles_and_version() {
    let node = json!({
        "metadata": {"name": "n1", "creationTimestamp": "2026-04-28T12:00:00Z",
                     "labels": {"node-role.kubernetes.io/control-plane": "",
                                "node-role.kubernetes.io/edge": "", "kubernetes.io/role": "worker"}},
        "spec": {"unschedulable": true},
        "status": {
            "conditions": [{"type": "MemoryPressure", "status": "False"},
                           {"type": "Ready", "status": "True"}],
            "addresses": [{"type": "InternalIP", "address": "10.0.0.5"},
                          {"type": "Hostname", "address": "n1"}],
            "nodeInfo": {"kubeletVersion": "v1.34.0", "osImage": "Ubuntu 24.04",
                         "kernelVersion": "6.8.0", "containerRuntimeVersion": "containerd://2.0"}
        }
    });
    assert_eq!(
        cells("", "nodes", node),
        [
            json!("n1"),
            json!("Ready,SchedulingDisabled"),
            json!("control-plane,edge,worker"),
            json!("3d"),
            json!("v1.34.0"),
            json!("10.0.0.5"),
            json!("<none>"),
            json!("Ubuntu 24.04"),
            json!("6.8.0"),
            json!("containerd://2.0")
        ]
    );
    let bare = cells("", "nodes", json!({"metadata": {"name": "n2"}}));
    assert_eq!((&bare[1], &bare[2]), (&json!("Unknown"), &json!("<none>")));
    assert_eq!(bare[7], "<unknown>");
}

#[test]
fn service_cells_show_ports_and_external_ips() {
    let svc = json!({
        "metadata": {"name": "web"},
        "spec": {"type": "NodePort", "clusterIP": "10.96.0.10", "clusterIPs": ["10.96.0.10"],
                 "selector": {"app": "web", "tier": "fe"},
                 "ports": [{"port": 80, "protocol": "TCP"},
                           {"port": 443, "nodePort": 30443, "protocol": "TCP"},
                           {"port": 53, "protocol": "UDP"}]}
    });
    let row = cells("", "services", svc);
    assert_eq!(
        &row[1..5],
        [
            json!("NodePort"),
            json!("10.96.0.10"),
            json!("<none>"),
            json!("80/TCP,443:30443/TCP,53/UDP")
        ]
    );
    assert_eq!(row[6], "app=web,tier=fe");
    let lb = json!({"metadata": {"name": "lb"}, "spec": {"type": "LoadBalancer", "ports": []}});
    let row = cells("", "services", lb);
    assert_eq!(
        (&row[2], &row[3], &row[4]),
        (&json!("<none>"), &json!("<pending>"), &json!("<none>"))
    );
}

#[test]
fn data_counts_and_simple_columns() {
    let cm = json!({"metadata": {"name": "c"}, "data": {"a": "1", "b": "2"},
                    "binaryData": {"c": "AA=="}});
    assert_eq!(cells("", "configmaps", cm)[1], 3);
    let secret = json!({"metadata": {"name": "s"}, "type": "Opaque", "data": {"a": "MQ=="}});
    assert_eq!(
        &cells("", "secrets", secret)[1..3],
        [json!("Opaque"), json!(1)]
    );
    let ns = json!({"metadata": {"name": "default"}, "status": {"phase": "Active"}});
    assert_eq!(cells("", "namespaces", ns)[1], "Active");
    let lease = json!({"metadata": {"name": "n1"}, "spec": {"holderIdentity": "n1"}});
    assert_eq!(cells("coordination.k8s.io", "leases", lease)[1], "n1");
    let crd =
        json!({"metadata": {"name": "x.io", "creationTimestamp": "2026-05-01T13:00:00+01:00"}});
    assert_eq!(
        cells("apiextensions.k8s.io", "customresourcedefinitions", crd),
        [json!("x.io"), json!("2026-05-01T12:00:00Z")]
    );
}

#[test]
fn endpoints_show_at_most_three_addresses() {
    let ep = json!({"metadata": {"name": "web"}, "subsets": [{
        "addresses": [{"ip": "10.0.0.1"}, {"ip": "10.0.0.2"}, {"ip": "fd00::3"}, {"ip": "10.0.0.4"}],
        "ports": [{"port": 80}]
    }]});
    assert_eq!(
        cells("", "endpoints", ep)[1],
        "10.0.0.1:80,10.0.0.2:80,[fd00::3]:80 + 1 more..."
    );
    assert_eq!(
        cells("", "endpoints", json!({"metadata": {"name": "e"}}))[1],
        "<none>"
    );
    let slice = json!({"metadata": {"name": "web-abc"}, "addressType": "IPv4",
                       "ports": [{"port": 80, "name": "http"}],
                       "endpoints": [{"addresses": ["10.0.0.1"]}, {"addresses": ["10.0.0.2"]}]});
    assert_eq!(
        &cells("discovery.k8s.io", "endpointslices", slice)[1..4],
        [json!("IPv4"), json!("80"), json!("10.0.0.1,10.0.0.2")]
    );
}

#[test]
fn event_cells_name_the_object_and_source() {
    let ev = json!({
        "metadata": {"name": "web-0.1"},
        "involvedObject": {"kind": "Pod", "name": "web-0", "fieldPath": "spec.containers{app}"},
        "reason": "Started", "message": "Started container app ", "type": "Normal",
        "source": {"component": "kubelet", "host": "n1"},
        "firstTimestamp": "2026-05-01T11:00:00Z", "lastTimestamp": "2026-05-01T11:59:00Z",
        "count": 3
    });
    assert_eq!(
        cells("", "events", ev),
        [
            json!("60s"),
            json!("Normal"),
            json!("Started"),
            json!("pod/web-0"),
            json!("spec.containers{app}"),
            json!("kubelet, n1"),
            json!("Started container app"),
            json!("60m"),
            json!(3),
            json!("web-0.1")
        ]
    );
    let new_style = json!({"metadata": {"name": "e"}, "regarding": {"kind": "Node", "name": "n1"},
                           "note": "hello", "eventTime": "2026-05-01T11:59:30.000000Z",
                           "reportingController": "kube-proxy"});
    let row = cells("events.k8s.io", "events", new_style);
    assert_eq!(
        &row[..4],
        [json!("30s"), json!(""), json!(""), json!("node/n1")]
    );
    assert_eq!(
        (&row[5], &row[6], &row[8]),
        (&json!("kube-proxy"), &json!("hello"), &json!(1))
    );
}

#[test]
fn csi_and_runtime_class_cells_have_defaults() {
    let driver = json!({"metadata": {"name": "d"}, "spec": {}});
    assert_eq!(
        &cells("storage.k8s.io", "csidrivers", driver)[1..7],
        [
            json!(true),
            json!(false),
            json!(false),
            json!("<unset>"),
            json!(false),
            json!("<none>")
        ]
    );
    let node = json!({"metadata": {"name": "n1"}, "spec": {"drivers": [{"name": "d"}]}});
    assert_eq!(cells("storage.k8s.io", "csinodes", node)[1], 1);
    let rc = json!({"metadata": {"name": "runc"}, "handler": "runc"});
    assert_eq!(cells("node.k8s.io", "runtimeclasses", rc)[1], "runc");
}

#[test]
fn custom_resource_columns_follow_their_json_paths() {
    let crd = json!({"spec": {"group": "x.io", "scope": "Namespaced",
    "names": {"plural": "widgets", "kind": "Widget"},
    "versions": [{"name": "v1", "served": true, "additionalPrinterColumns": [
        {"name": "Size", "type": "integer", "jsonPath": ".spec.size"},
        {"name": "Ready", "type": "string",
         "jsonPath": ".status.conditions[?(@.type==\"Ready\")].status"},
        {"name": "Tags", "type": "string", "jsonPath": ".spec.tags"},
        {"name": "Missing", "type": "string", "jsonPath": ".spec.nothing"},
        {"name": "Started", "type": "date", "jsonPath": ".status.startedAt"}
    ]}]}});
    let widgets = &from_crd(&crd).unwrap()[0];
    let obj = json!({"metadata": {"name": "w1"},
                     "spec": {"size": 3.0, "tags": ["a", "b"]},
                     "status": {"startedAt": "2026-05-01T10:00:00Z",
                                "conditions": [{"type": "Ready", "status": "True"}]}});
    let table = render(widgets, &[obj], IncludeObject::Metadata, now());
    let names: Vec<&str> = table["columnDefinitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        ["Name", "Size", "Ready", "Tags", "Missing", "Started"]
    );
    assert_eq!(
        table["rows"][0]["cells"],
        json!(["w1", 3, "True", "[\"a\",\"b\"]", null, "120m"])
    );
}

#[test]
fn custom_resources_without_columns_show_name_and_age() {
    let crd = json!({"spec": {"group": "x.io", "scope": "Cluster",
        "names": {"plural": "gizmos", "kind": "Gizmo"},
        "versions": [{"name": "v1", "served": true}]}});
    let gizmos = &from_crd(&crd).unwrap()[0];
    let obj = json!({"metadata": {"name": "g", "creationTimestamp": "2026-04-30T12:00:00Z"}});
    let table = render(gizmos, &[obj], IncludeObject::None, now());
    assert_eq!(table["rows"][0]["cells"], json!(["g", "24h"]));
    assert_eq!(table["columnDefinitions"][1]["type"], "date");
}

#[test]
fn component_status_cells_say_healthy_or_unhealthy_with_message_and_error() {
    let healthy = json!({"metadata": {"name": "scheduler"},
        "conditions": [{"type": "Healthy", "status": "True", "message": "ok"}]});
    assert_eq!(
        cells("", "componentstatuses", healthy),
        [json!("scheduler"), json!("Healthy"), json!("ok"), json!("")]
    );
    let unhealthy = json!({"metadata": {"name": "etcd-0"},
        "conditions": [{"type": "Healthy", "status": "False", "error": "store not writable"}]});
    assert_eq!(
        cells("", "componentstatuses", unhealthy),
        [
            json!("etcd-0"),
            json!("Unhealthy"),
            json!(""),
            json!("store not writable")
        ]
    );
    let unknown = json!({"metadata": {"name": "x"}});
    assert_eq!(cells("", "componentstatuses", unknown)[1], json!("Unknown"));
}
