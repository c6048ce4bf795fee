use std::sync::Arc;

use super::super::document::Model;
use super::*;

fn model() -> Model {
    let all: Vec<Arc<ResourceInfo>> = apimachinery::catalog::builtins()
        .into_iter()
        .map(Arc::new)
        .collect();
    Model::new(&all, &[])
}

/// `(operationId, x-kubernetes-action)` of `method` on `path`.
fn op<'a>(paths: &'a Value, path: &str, method: &str) -> (&'a str, &'a str) {
    let op = &paths[path][method];
    let id = op["operationId"]
        .as_str()
        .unwrap_or_else(|| panic!("{method} {path}"));
    (id, op["x-kubernetes-action"].as_str().unwrap_or_default())
}

#[test]
fn both_documents_list_subresources_all_namespaces_lists_and_watches_as_kube_does() {
    let m = model();
    let v3 = m.v3();
    for (paths, apps) in [
        (&m.v2()["paths"], &m.v2()["paths"]),
        (&v3["api/v1"]["paths"], &v3["apis/apps/v1"]["paths"]),
    ] {
        let status = "/api/v1/namespaces/{namespace}/pods/{name}/status";
        assert_eq!(
            op(paths, status, "get"),
            ("readCoreV1NamespacedPodStatus", "get")
        );
        assert_eq!(
            op(paths, status, "put"),
            ("replaceCoreV1NamespacedPodStatus", "put")
        );
        assert_eq!(
            op(paths, status, "patch"),
            ("patchCoreV1NamespacedPodStatus", "patch")
        );
        assert_eq!(
            op(paths, "/api/v1/pods", "get"),
            ("listCoreV1PodForAllNamespaces", "list")
        );
        assert_eq!(
            op(paths, "/api/v1/watch/namespaces/{namespace}/pods", "get"),
            ("watchCoreV1NamespacedPodList", "watchlist")
        );
        assert_eq!(
            op(
                paths,
                "/api/v1/watch/namespaces/{namespace}/pods/{name}",
                "get"
            ),
            ("watchCoreV1NamespacedPod", "watch")
        );
        assert_eq!(
            op(paths, "/api/v1/watch/pods", "get"),
            ("watchCoreV1PodListForAllNamespaces", "watchlist")
        );
        assert_eq!(
            op(paths, "/api/v1/namespaces/{namespace}/pods", "delete"),
            ("deleteCoreV1CollectionNamespacedPod", "deletecollection")
        );
        assert_eq!(
            op(
                paths,
                "/api/v1/namespaces/{namespace}/pods/{name}/log",
                "get"
            ),
            ("readCoreV1NamespacedPodLog", "get")
        );
        assert_eq!(
            op(
                paths,
                "/api/v1/namespaces/{namespace}/pods/{name}/exec",
                "post"
            ),
            ("connectCoreV1PostNamespacedPodExec", "connect")
        );
        let proxy = "/api/v1/namespaces/{namespace}/services/{name}/proxy/{path}";
        assert_eq!(
            op(paths, proxy, "get"),
            ("connectCoreV1GetNamespacedServiceProxyWithPath", "connect")
        );
        assert_eq!(
            paths[proxy]["get"]["x-kubernetes-group-version-kind"]["kind"],
            "ServiceProxyOptions"
        );
        assert_eq!(
            op(paths, "/api/v1/nodes/{name}/proxy", "head").0,
            "connectCoreV1HeadNodeProxy"
        );
        assert_eq!(
            op(paths, "/api/v1/watch/nodes", "get"),
            ("watchCoreV1NodeList", "watchlist")
        );
        assert_eq!(
            op(paths, "/api/v1/namespaces/{name}/finalize", "put"),
            ("replaceCoreV1NamespaceFinalize", "put")
        );
        let scale = "/apis/apps/v1/namespaces/{namespace}/deployments/{name}/scale";
        assert_eq!(
            op(apps, scale, "get"),
            ("readAppsV1NamespacedDeploymentScale", "get")
        );
        assert_eq!(
            op(apps, scale, "patch"),
            ("patchAppsV1NamespacedDeploymentScale", "patch")
        );
        let gvk = &apps[scale]["get"]["x-kubernetes-group-version-kind"];
        assert_eq!(
            (gvk["group"].as_str(), gvk["kind"].as_str()),
            (Some("autoscaling"), Some("Scale"))
        );
        let params: Vec<&str> = apps[scale]["parameters"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|p| p["name"].as_str())
            .collect();
        assert_eq!(params, ["name", "namespace"]);
        // Reads and writes of the object (and of its status) answer its kind.
        let answer = |op: &Value| {
            let ok = &op["responses"]["200"];
            let schema = match ok["schema"].is_null() {
                true => &ok["content"]["application/json"]["schema"],
                false => &ok["schema"],
            };
            schema["$ref"]
                .as_str()
                .map(|r| r.rsplit('/').next().unwrap().to_owned())
        };
        let pod = "io.k8s.api.core.v1.Pod".to_owned();
        assert_eq!(answer(&paths[status]["put"]), Some(pod.clone()));
        assert_eq!(
            answer(&paths["/api/v1/namespaces/{namespace}/pods/{name}"]["get"]),
            Some(pod)
        );
        assert_eq!(
            answer(&apps[scale]["get"]),
            None,
            "a Scale is not the parent"
        );
    }
}

#[test]
fn every_reference_in_the_paths_resolves_in_its_document() {
    fn refs<'a>(v: &'a Value, out: &mut Vec<&'a str>) {
        match v {
            Value::Object(m) => {
                if let Some(r) = m.get("$ref").and_then(Value::as_str) {
                    out.push(r);
                }
                m.values().for_each(|v| refs(v, out));
            }
            Value::Array(l) => l.iter().for_each(|v| refs(v, out)),
            _ => {}
        }
    }
    let m = model();
    let v2 = m.v2();
    let mut found = Vec::new();
    refs(&v2["paths"], &mut found);
    assert!(!found.is_empty());
    for r in found {
        let name = r.strip_prefix(super::super::REF_V2).unwrap();
        assert!(v2["definitions"][name].is_object(), "v2: {r}");
    }
    for (gv, doc) in m.v3() {
        let mut found = Vec::new();
        refs(&doc["paths"], &mut found);
        for r in found {
            let name = r.strip_prefix(super::super::REF_V3).unwrap();
            assert!(doc["components"]["schemas"][name].is_object(), "{gv}: {r}");
        }
    }
}

#[test]
fn only_served_verbs_get_operations() {
    let m = model();
    let v2 = m.v2();
    let paths = &v2["paths"];
    // A binding is only created; a TokenReview only created, with no object path.
    let binding = "/api/v1/namespaces/{namespace}/pods/{name}/binding";
    assert!(paths[binding]["post"].is_object() && paths[binding]["get"].is_null());
    let reviews = "/apis/authentication.k8s.io/v1/tokenreviews";
    assert!(paths[reviews]["post"].is_object() && paths[reviews]["get"].is_null());
    assert!(paths[format!("{reviews}/{{name}}")].is_null());
    let count = paths.as_object().unwrap().len();
    println!("v2 paths: {count}");
    // 116 before subresources, all-namespaces lists and watches were listed.
    assert!(count > 300, "{count} paths");
}

#[test]
fn group_names_are_spelled_as_kube_spells_them() {
    assert_eq!(group_name(""), "Core");
    assert_eq!(group_name("apps"), "Apps");
    assert_eq!(group_name("rbac.authorization.k8s.io"), "RbacAuthorization");
    assert_eq!(
        group_name("flowcontrol.apiserver.k8s.io"),
        "FlowcontrolApiserver"
    );
    assert_eq!(group_name("stable.example.com"), "StableExampleCom");
    assert_eq!(connect_kind("Pod", "portforward"), "PodPortForwardOptions");
    assert_eq!(connect_kind("Service", "proxy"), "ServiceProxyOptions");
}
