//! Rows of the workload, storage, networking and administration kinds, cell by cell.

use serde_json::{Value, json};

use crate::catalog::{ResourceInfo, builtins};
use crate::table::{IncludeObject, render};
use crate::time::parse_rfc3339;

const CREATED: &str = "2024-05-01T10:00:00Z";

fn info(group: &str, plural: &str) -> ResourceInfo {
    builtins()
        .into_iter()
        .find(|i| i.group == group && i.plural == plural)
        .unwrap()
}

/// The cells of `obj`'s row, wide columns included, one hour after it was created.
fn cells(group: &str, plural: &str, mut obj: Value) -> Vec<Value> {
    obj["metadata"]["name"] = json!("x");
    obj["metadata"]["creationTimestamp"] = json!(CREATED);
    let now = parse_rfc3339(CREATED).unwrap() + 3600;
    let table = render(&info(group, plural), &[obj], IncludeObject::None, now);
    table["rows"][0]["cells"].as_array().unwrap().clone()
}

#[test]
fn deployments_show_ready_of_desired_and_their_template() {
    let deployment = json!({
        "metadata": {},
        "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"}},
                 "template": {"spec": {"containers": [
                     {"name": "nginx", "image": "nginx:1.27"},
                     {"name": "side", "image": "busybox"}]}}},
        "status": {"readyReplicas": 2, "updatedReplicas": 3, "availableReplicas": 2},
    });
    assert_eq!(
        cells("apps", "deployments", deployment),
        json!([
            "x",
            "2/3",
            3,
            2,
            "60m",
            "nginx,side",
            "nginx:1.27,busybox",
            "app=web"
        ])
        .as_array()
        .unwrap()
        .clone()
    );
}

#[test]
fn replica_sets_and_controllers_count_replicas() {
    let rs = json!({"metadata": {}, "spec": {"replicas": 2, "selector": {"matchLabels": {"a": "b"}}},
                    "status": {"replicas": 2, "readyReplicas": 1}});
    let row = cells("apps", "replicasets", rs);
    assert_eq!(row[1..5], [json!(2), json!(2), json!(1), json!("60m")]);
    assert_eq!(row[7], "a=b");
    let rc = json!({"metadata": {}, "spec": {"selector": {"app": "db"}}});
    let row = cells("", "replicationcontrollers", rc);
    assert_eq!(row[1..4], [json!(1), json!(0), json!(0)]);
    assert_eq!(row[7], "app=db");
}

#[test]
fn jobs_show_status_completions_and_duration() {
    let job = json!({
        "metadata": {},
        "spec": {"completions": 2, "template": {"spec": {"containers": [{"name": "c", "image": "i"}]}}},
        "status": {"succeeded": 2, "startTime": "2024-05-01T10:00:00Z",
                   "completionTime": "2024-05-01T10:00:42Z",
                   "conditions": [{"type": "Complete", "status": "True"}]},
    });
    let row = cells("batch", "jobs", job);
    assert_eq!(row[1..4], [json!("Complete"), json!("2/2"), json!("42s")]);
    let running = json!({"metadata": {}, "spec": {"parallelism": 3}, "status": {}});
    let row = cells("batch", "jobs", running);
    assert_eq!(row[1..4], [json!("Running"), json!("0/1 of 3"), json!("")]);
}

#[test]
fn cron_jobs_show_schedule_and_unset_fields() {
    let cj = json!({"metadata": {}, "spec": {"schedule": "*/5 * * * *", "suspend": false}});
    let row = cells("batch", "cronjobs", cj);
    assert_eq!(
        row[1..7],
        [
            json!("*/5 * * * *"),
            json!("<none>"),
            json!("False"),
            json!(0),
            json!("<none>"),
            json!("60m")
        ]
    );
}

#[test]
fn hpas_show_targets_in_either_version() {
    let v2 = json!({"metadata": {}, "spec": {
        "scaleTargetRef": {"kind": "Deployment", "name": "web"},
        "minReplicas": 1, "maxReplicas": 5,
        "metrics": [{"type": "Resource", "resource": {"name": "cpu",
                     "target": {"type": "Utilization", "averageUtilization": 80}}}]},
        "status": {"currentReplicas": 2}});
    let row = cells("autoscaling", "horizontalpodautoscalers", v2);
    assert_eq!(
        row[1..6],
        [
            json!("Deployment/web"),
            json!("cpu: <unknown>/80%"),
            json!("1"),
            json!(5),
            json!(2)
        ]
    );
    let v1 = json!({"metadata": {}, "spec": {"scaleTargetRef": {"kind": "Deployment", "name": "web"},
                    "maxReplicas": 3, "targetCPUUtilizationPercentage": 50},
                    "status": {"currentCPUUtilizationPercentage": 10}});
    let row = cells("autoscaling", "horizontalpodautoscalers", v1);
    assert_eq!(row[2..4], [json!("cpu: 10%/50%"), json!("<unset>")]);
}

#[test]
fn pdbs_show_bounds_or_na() {
    let pdb = json!({"metadata": {}, "spec": {"minAvailable": "50%"}, "status": {"disruptionsAllowed": 1}});
    assert_eq!(
        cells("policy", "poddisruptionbudgets", pdb)[1..4],
        [json!("50%"), json!("N/A"), json!(1)]
    );
}

#[test]
fn volumes_and_claims_show_capacity_modes_and_class() {
    let pv = json!({"metadata": {}, "spec": {
        "capacity": {"storage": "10Gi"}, "accessModes": ["ReadWriteMany", "ReadWriteOnce"],
        "persistentVolumeReclaimPolicy": "Retain", "storageClassName": "fast",
        "claimRef": {"namespace": "default", "name": "data"}},
        "status": {"phase": "Bound"}});
    let row = cells("", "persistentvolumes", pv);
    assert_eq!(
        row[1..11],
        [
            json!("10Gi"),
            json!("RWO,RWX"),
            json!("Retain"),
            json!("Bound"),
            json!("default/data"),
            json!("fast"),
            json!("<unset>"),
            json!(""),
            json!("60m"),
            json!("<unset>")
        ]
    );
    let pending = json!({"metadata": {}, "spec": {"storageClassName": "fast"}, "status": {"phase": "Pending"}});
    let row = cells("", "persistentvolumeclaims", pending);
    assert_eq!(
        row[1..6],
        [
            json!("Pending"),
            json!(""),
            json!(""),
            json!(""),
            json!("fast")
        ]
    );
}

#[test]
fn quotas_split_requests_and_limits() {
    let quota = json!({"metadata": {}, "spec": {"hard": {"cpu": "2", "limits.memory": "1Gi", "pods": "10"}},
                       "status": {"used": {"cpu": "500m"}}});
    let row = cells("", "resourcequotas", quota);
    assert_eq!(
        row[2..4],
        [
            json!("cpu: 500m/2, pods: 0/10"),
            json!("limits.memory: 0/1Gi")
        ]
    );
}

#[test]
fn ingresses_show_hosts_address_and_ports() {
    let ing = json!({"metadata": {}, "spec": {"ingressClassName": "nginx",
        "rules": [{"host": "a.example"}, {"host": "b.example"}], "tls": [{"hosts": ["a.example"]}]},
        "status": {"loadBalancer": {"ingress": [{"ip": "10.0.0.1"}]}}});
    assert_eq!(
        cells("networking.k8s.io", "ingresses", ing)[1..5],
        [
            json!("nginx"),
            json!("a.example,b.example"),
            json!("10.0.0.1"),
            json!("80, 443")
        ]
    );
    let bare = json!({"metadata": {}, "spec": {}});
    assert_eq!(
        cells("networking.k8s.io", "ingresses", bare)[1..5],
        [json!("<none>"), json!("*"), json!(""), json!("80")]
    );
}

#[test]
fn the_default_storage_class_is_marked() {
    let sc = json!({"metadata": {"annotations": {"storageclass.kubernetes.io/is-default-class": "true"}},
                    "provisioner": "rancher.io/local-path", "volumeBindingMode": "WaitForFirstConsumer"});
    assert_eq!(
        cells("storage.k8s.io", "storageclasses", sc)[0..5],
        [
            json!("x (default)"),
            json!("rancher.io/local-path"),
            json!("Delete"),
            json!("WaitForFirstConsumer"),
            json!("false")
        ]
    );
}

#[test]
fn csrs_show_their_condition() {
    let csr = json!({"metadata": {}, "spec": {"signerName": "kubernetes.io/kube-apiserver-client",
                     "username": "alice", "expirationSeconds": 86400},
                     "status": {"conditions": [{"type": "Approved", "status": "True"}],
                                "certificate": "LS0t"}});
    assert_eq!(
        cells("certificates.k8s.io", "certificatesigningrequests", csr)[1..6],
        [
            json!("60m"),
            json!("kubernetes.io/kube-apiserver-client"),
            json!("alice"),
            json!("24h"),
            json!("Approved,Issued")
        ]
    );
    let pending = json!({"metadata": {}, "spec": {}});
    assert_eq!(
        cells("certificates.k8s.io", "certificatesigningrequests", pending)[5],
        "Pending"
    );
}

#[test]
fn admission_and_aggregation_kinds_count_and_reference() {
    let hooks = json!({"metadata": {}, "webhooks": [{"name": "a"}, {"name": "b"}]});
    assert_eq!(
        cells(
            "admissionregistration.k8s.io",
            "validatingwebhookconfigurations",
            hooks
        )[1],
        2
    );
    let vap = json!({"metadata": {}, "spec": {"validations": [{"expression": "true"}],
                     "paramKind": {"apiVersion": "v1", "kind": "ConfigMap"}}});
    assert_eq!(
        cells(
            "admissionregistration.k8s.io",
            "validatingadmissionpolicies",
            vap
        )[1..3],
        [json!(1), json!("v1/ConfigMap")]
    );
    let local = json!({"metadata": {}, "spec": {}});
    assert_eq!(
        cells("apiregistration.k8s.io", "apiservices", local)[1..3],
        [json!("Local"), json!("Unknown")]
    );
    let remote = json!({"metadata": {}, "spec": {"service": {"namespace": "kube-system", "name": "metrics"}},
                        "status": {"conditions": [{"type": "Available", "status": "False",
                                                   "reason": "MissingEndpoints"}]}});
    assert_eq!(
        cells("apiregistration.k8s.io", "apiservices", remote)[1..3],
        [
            json!("kube-system/metrics"),
            json!("False (MissingEndpoints)")
        ]
    );
}

#[test]
fn controller_revisions_name_their_controller() {
    let cr = json!({"metadata": {"ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet",
                    "name": "fluentd", "controller": true}]}, "revision": 3});
    assert_eq!(
        cells("apps", "controllerrevisions", cr)[1..3],
        [json!("daemonset.apps/fluentd"), json!(3)]
    );
}

#[test]
fn limit_ranges_show_created_at() {
    let lr = json!({"metadata": {}});
    assert_eq!(cells("", "limitranges", lr), [json!("x"), json!(CREATED)]);
}
