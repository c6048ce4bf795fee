//! `kubectl get cs` on the embedded control plane: the scheduler, the controllers and the
//! store report their health, with kube's deprecation warning; the resource is read-only.

use std::time::Duration;

use e2e::{Pki, Ports, k8s_cloud, k8s_cloud_with, kubectl, kubectl_ok, kubectl_stdin};
use testkit::eventually;

const WAIT: Duration = Duration::from_secs(30);

/// `kubectl get cs` as `name -> status` rows, and its stderr.
fn get_cs(kubeconfig: &std::path::Path) -> (Vec<(String, String)>, String) {
    let out = kubectl(kubeconfig, &["get", "cs", "--no-headers"]);
    assert!(
        out.status.success(),
        "kubectl get cs: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let mut cols = l.split_whitespace();
            Some((cols.next()?.to_string(), cols.next()?.to_string()))
        })
        .collect();
    (rows, String::from_utf8_lossy(&out.stderr).into_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_get_cs_shows_the_scheduler_the_controllers_and_the_store_healthy() {
    let pki = Pki::new();
    let cloud = k8s_cloud(&pki, Ports::default()).await;
    let kubeconfig = cloud.running.kubeconfig().unwrap().to_path_buf();
    let healthy = |name: &str| (name.to_string(), "Healthy".to_string());
    let want = vec![
        healthy("scheduler"),
        healthy("controller-manager"),
        healthy("etcd-0"),
    ];
    eventually("every component is healthy", WAIT, || async {
        get_cs(&kubeconfig).0 == want
    })
    .await;
    let (_, stderr) = get_cs(&kubeconfig);
    assert!(
        stderr.contains("v1 ComponentStatus is deprecated in v1.19+"),
        "{stderr}"
    );

    let one: serde_json::Value = serde_json::from_str(&kubectl_ok(
        &kubeconfig,
        &["get", "cs", "etcd-0", "-o", "json"],
    ))
    .unwrap();
    assert_eq!(one["kind"], "ComponentStatus");
    assert_eq!(one["conditions"][0]["type"], "Healthy");
    assert_eq!(one["conditions"][0]["status"], "True");

    let missing = kubectl(&kubeconfig, &["get", "cs", "nope"]);
    assert!(!missing.status.success());
    assert!(String::from_utf8_lossy(&missing.stderr).contains("not found"));

    // Read-only, as in kube: a create is refused and nothing is stored.
    let body = r#"{"apiVersion": "v1", "kind": "ComponentStatus", "metadata": {"name": "x"}}"#;
    let created = kubectl_stdin(&kubeconfig, &["create", "-f", "-"], body);
    assert!(!created.status.success());
    assert_eq!(get_cs(&kubeconfig).0.len(), 3);
    cloud.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_controllers_the_scheduler_and_controller_manager_are_unhealthy() {
    let pki = Pki::new();
    let cloud = k8s_cloud_with(&pki, Ports::default(), |c| {
        c.modules.controllers.enable = false;
    })
    .await;
    let kubeconfig = cloud.running.kubeconfig().unwrap().to_path_buf();
    let (rows, _) = get_cs(&kubeconfig);
    let status = |name: &str| {
        rows.iter()
            .find(|(n, _)| n == name)
            .map(|(_, s)| s.clone())
            .unwrap_or_default()
    };
    assert_eq!(status("scheduler"), "Unhealthy");
    assert_eq!(status("controller-manager"), "Unhealthy");
    assert_eq!(status("etcd-0"), "Healthy");
    cloud.stop().await;
}
