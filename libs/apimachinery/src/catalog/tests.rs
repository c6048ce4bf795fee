use serde_json::json;

use super::*;

fn builtin(group: &str, plural: &str) -> ResourceInfo {
    builtins()
        .into_iter()
        .find(|i| i.group == group && i.plural == plural)
        .unwrap_or_else(|| panic!("{plural}.{group} is a builtin"))
}

fn column_names(info: &ResourceInfo, wide: bool) -> Vec<&str> {
    info.columns
        .iter()
        .filter(|c| wide || c.priority == 0)
        .map(|c| c.name.as_str())
        .collect()
}

#[test]
fn builtins_are_unique_per_group_version_and_plural() {
    let all = builtins();
    assert!(all.len() > 16, "the first sixteen and more");
    for (i, a) in all.iter().enumerate() {
        for b in &all[i + 1..] {
            assert!(
                (a.group.as_str(), a.version.as_str(), a.plural.as_str())
                    != (b.group.as_str(), b.version.as_str(), b.plural.as_str())
            );
        }
    }
}

#[test]
fn pods_carry_kube_apiserver_discovery_data() {
    let pods = builtin("", "pods");
    assert_eq!(pods.kind, "Pod");
    assert_eq!(pods.list_kind, "PodList");
    assert_eq!(pods.singular, "pod");
    assert!(pods.namespaced);
    assert_eq!(pods.short_names, ["po"]);
    assert_eq!(pods.categories, ["all"]);
    assert_eq!(pods.verbs, ALL_VERBS);
    assert_eq!(
        pods.subresources,
        [
            "status",
            "binding",
            "eviction",
            "ephemeralcontainers",
            "log",
            "exec",
            "attach",
            "portforward",
            "proxy"
        ]
    );
    assert!(pods.is_selectable("spec.nodeName"));
    assert!(pods.is_selectable("metadata.namespace"));
    assert!(!pods.is_selectable("spec.containers"));
    assert!(!pods.custom);
}

#[test]
fn short_names_match_kubectl() {
    let cases = [
        ("", "nodes", "no"),
        ("", "namespaces", "ns"),
        ("", "configmaps", "cm"),
        ("", "services", "svc"),
        ("", "endpoints", "ep"),
        ("", "serviceaccounts", "sa"),
        ("", "events", "ev"),
        ("apiextensions.k8s.io", "customresourcedefinitions", "crd"),
    ];
    for (group, plural, short) in cases {
        assert_eq!(builtin(group, plural).short_names[0], short, "{plural}");
    }
}

#[test]
fn namespaces_are_cluster_scoped_without_deletecollection() {
    let ns = builtin("", "namespaces");
    assert!(!ns.namespaced);
    assert!(!ns.verbs.iter().any(|v| v == "deletecollection"));
    assert_eq!(ns.subresources, ["status", "finalize"]);
    assert!(!ns.is_selectable("metadata.namespace"));
}

#[test]
fn columns_match_kubectl_get() {
    let pods = builtin("", "pods");
    assert_eq!(
        column_names(&pods, false),
        ["Name", "Ready", "Status", "Restarts", "Age"]
    );
    assert_eq!(
        column_names(&pods, true)[5..],
        ["IP", "Node", "Nominated Node", "Readiness Gates"]
    );
    let nodes = builtin("", "nodes");
    assert_eq!(
        column_names(&nodes, false),
        ["Name", "Status", "Roles", "Age", "Version"]
    );
    let svc = builtin("", "services");
    assert_eq!(
        column_names(&svc, false),
        [
            "Name",
            "Type",
            "Cluster-IP",
            "External-IP",
            "Port(s)",
            "Age"
        ]
    );
    let events = builtin("", "events");
    assert_eq!(
        column_names(&events, false),
        ["Last Seen", "Type", "Reason", "Object", "Message"]
    );
    let crds = builtin("apiextensions.k8s.io", "customresourcedefinitions");
    assert_eq!(column_names(&crds, false), ["Name", "Created At"]);
    assert_eq!(pods.columns[0].format, "name");
}

#[test]
fn api_version_and_store_resource_qualify_groups() {
    let pods = builtin("", "pods");
    assert_eq!(pods.api_version(), "v1");
    assert_eq!(pods.store_resource(), "pods");
    let leases = builtin("coordination.k8s.io", "leases");
    assert_eq!(leases.api_version(), "coordination.k8s.io/v1");
    assert_eq!(leases.store_resource(), "leases.coordination.k8s.io");
}

fn crontab_crd() -> serde_json::Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "crontabs.stable.example.com"},
        "spec": {
            "group": "stable.example.com",
            "scope": "Namespaced",
            "names": {"plural": "crontabs", "kind": "CronTab", "shortNames": ["ct"],
                      "categories": ["all"]},
            "versions": [
                {"name": "v1", "served": true, "storage": true,
                 "subresources": {"status": {}},
                 "selectableFields": [{"jsonPath": ".spec.color"}],
                 "additionalPrinterColumns": [
                     {"name": "Spec", "type": "string", "jsonPath": ".spec.cronSpec",
                      "description": "the schedule"},
                     {"name": "Replicas", "type": "integer", "jsonPath": ".spec.replicas",
                      "priority": 1},
                     {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}
                 ]},
                {"name": "v2", "served": true, "storage": false},
                {"name": "v0", "served": false, "storage": false}
            ]
        }
    })
}

#[test]
fn crd_gives_one_resource_per_served_version() {
    let resources = from_crd(&crontab_crd()).unwrap();
    let versions: Vec<&str> = resources.iter().map(|r| r.version.as_str()).collect();
    assert_eq!(versions, ["v1", "v2"]);
    let v1 = &resources[0];
    assert_eq!(v1.api_version(), "stable.example.com/v1");
    assert_eq!(v1.store_resource(), "crontabs.stable.example.com");
    assert_eq!(
        (v1.list_kind.as_str(), v1.singular.as_str()),
        ("CronTabList", "crontab")
    );
    assert_eq!(v1.short_names, ["ct"]);
    assert_eq!(v1.categories, ["all"]);
    assert_eq!(v1.subresources, ["status"]);
    assert_eq!(v1.selectable_fields, ["spec.color"]);
    assert!(v1.custom && v1.namespaced);
    assert!(resources[1].subresources.is_empty());
}

#[test]
fn crd_columns_follow_printer_columns_or_default_to_age() {
    let resources = from_crd(&crontab_crd()).unwrap();
    let names: Vec<&str> = resources[0]
        .columns
        .iter()
        .map(|c| c.name.as_str())
        .collect();
    assert_eq!(names, ["Name", "Spec", "Replicas", "Age"]);
    let replicas = &resources[0].columns[2];
    assert_eq!((replicas.type_.as_str(), replicas.priority), ("integer", 1));
    assert_eq!(replicas.json_path, ".spec.replicas");
    let v2: Vec<(&str, &str)> = resources[1]
        .columns
        .iter()
        .map(|c| (c.name.as_str(), c.json_path.as_str()))
        .collect();
    assert_eq!(
        v2,
        [
            ("Name", ".metadata.name"),
            ("Age", ".metadata.creationTimestamp")
        ]
    );
}

#[test]
fn crd_errors_name_what_is_missing() {
    let mut crd = crontab_crd();
    crd["spec"]["names"]
        .as_object_mut()
        .unwrap()
        .remove("plural");
    assert!(
        from_crd(&crd)
            .unwrap_err()
            .to_string()
            .contains("spec.names.plural is required")
    );

    let mut crd = crontab_crd();
    crd["spec"]["scope"] = json!("Galaxy");
    assert!(
        from_crd(&crd)
            .unwrap_err()
            .to_string()
            .contains("spec.scope")
    );

    let mut crd = crontab_crd();
    crd["spec"]["versions"][0]["additionalPrinterColumns"][0]
        .as_object_mut()
        .unwrap()
        .remove("jsonPath");
    let err = from_crd(&crd).unwrap_err().to_string();
    assert!(
        err.contains("spec.versions[0].additionalPrinterColumns[0].jsonPath is required"),
        "{err}"
    );

    let mut crd = crontab_crd();
    crd["spec"]["versions"] = json!([]);
    assert!(
        from_crd(&crd)
            .unwrap_err()
            .to_string()
            .contains("spec.versions is required")
    );
}

#[test]
fn cluster_scoped_crds_default_their_names() {
    let crd = json!({"spec": {"group": "x.io", "scope": "Cluster",
        "names": {"plural": "widgets", "kind": "Widget"},
        "versions": [{"name": "v1alpha1", "served": true}]}});
    let r = &from_crd(&crd).unwrap()[0];
    assert!(!r.namespaced);
    assert_eq!(
        (r.singular.as_str(), r.list_kind.as_str()),
        ("widget", "WidgetList")
    );
}
