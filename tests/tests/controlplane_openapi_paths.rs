//! The embedded control plane's OpenAPI documents list the paths kube-apiserver's list, over
//! real TLS: subresources, lists across all namespaces and watch paths, with kube's operation
//! ids and actions, in v2 and in each v3 group-version document; `kubectl explain` still reads
//! them.

use e2e::{Pki, Ports, k8s_cloud, kubectl};
use serde_json::Value;

async fn document(client: &kube::Client, path: &str) -> Value {
    let req = http::Request::get(path).body(Vec::new()).unwrap();
    let text = client.request_text(req).await.unwrap();
    serde_json::from_str(&text).unwrap()
}

/// `(operationId, x-kubernetes-action)` of `method` on `path` in `doc`.
fn op(doc: &Value, path: &str, method: &str) -> (String, String) {
    let op = &doc["paths"][path][method];
    let text = |k: &str| {
        op[k]
            .as_str()
            .unwrap_or_else(|| panic!("{method} {path}: {k}"))
            .to_owned()
    };
    (text("operationId"), text("x-kubernetes-action"))
}

fn pair(id: &str, action: &str) -> (String, String) {
    (id.to_owned(), action.to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v2_and_v3_list_subresources_all_namespaces_and_watch_paths() {
    let pki = Pki::new();
    let cloud = k8s_cloud(&pki, Ports::default()).await;
    let client = cloud.kube().await;
    let v2 = document(&client, "/openapi/v2").await;
    let core = document(&client, "/openapi/v3/api/v1").await;
    let apps = document(&client, "/openapi/v3/apis/apps/v1").await;
    for (core, apps) in [(&v2, &v2), (&core, &apps)] {
        let status = "/api/v1/namespaces/{namespace}/pods/{name}/status";
        assert_eq!(
            op(core, status, "get"),
            pair("readCoreV1NamespacedPodStatus", "get")
        );
        assert_eq!(
            op(core, status, "patch"),
            pair("patchCoreV1NamespacedPodStatus", "patch")
        );
        assert_eq!(
            op(core, "/api/v1/pods", "get"),
            pair("listCoreV1PodForAllNamespaces", "list")
        );
        assert_eq!(
            op(core, "/api/v1/watch/namespaces/{namespace}/pods", "get"),
            pair("watchCoreV1NamespacedPodList", "watchlist")
        );
        assert_eq!(
            op(
                core,
                "/api/v1/namespaces/{namespace}/pods/{name}/log",
                "get"
            ),
            pair("readCoreV1NamespacedPodLog", "get")
        );
        assert_eq!(
            op(
                core,
                "/api/v1/namespaces/{namespace}/services/{name}/proxy/{path}",
                "put"
            ),
            pair("connectCoreV1PutNamespacedServiceProxyWithPath", "connect")
        );
        let scale = "/apis/apps/v1/namespaces/{namespace}/deployments/{name}/scale";
        assert_eq!(
            op(apps, scale, "get"),
            pair("readAppsV1NamespacedDeploymentScale", "get")
        );
        assert_eq!(
            op(apps, scale, "put"),
            pair("replaceAppsV1NamespacedDeploymentScale", "put")
        );
        assert_eq!(
            apps["paths"][scale]["get"]["x-kubernetes-group-version-kind"]["kind"],
            "Scale"
        );
    }
    let count = v2["paths"].as_object().unwrap().len();
    println!("v2 paths: {count}");
    assert!(count > 300, "{count}");
    if std::process::Command::new("kubectl")
        .arg("version")
        .arg("--client")
        .output()
        .is_ok()
    {
        let kubeconfig = cloud.running.kubeconfig().unwrap();
        let out = kubectl(kubeconfig, &["explain", "deployments.spec.replicas"]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("FIELD: replicas <integer>"), "{text}");
    }
    cloud.stop().await;
}
