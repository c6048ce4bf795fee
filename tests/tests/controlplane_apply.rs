//! Server-side apply against the embedded control plane: `kubectl apply --server-side` (when a
//! recent kubectl is on PATH) creating with managedFields, conflicting with another manager
//! and with `kubectl scale`, forcing, and pruning what the applied file dropped; the same
//! through the `kube` crate (`Patch::Apply`), with the `status` and `scale` subresources,
//! `dryRun` and the `Update` entries other writes leave.

use std::path::Path;
use std::process::Output;
use std::time::Duration;

use e2e::{Pki, Ports, k8s_cloud};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use testkit::eventually;

const WAIT: Duration = Duration::from_secs(20);

fn deployment_yaml(replicas: Option<u32>, tier: bool) -> String {
    let replicas = replicas.map_or(String::new(), |r| format!("  replicas: {r}\n"));
    let tier = if tier { "    tier: front\n" } else { "" };
    format!(
        "apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: default
  labels:
    app: web
{tier}spec:
{replicas}  selector:
    matchLabels:
      app: web
  template:
    metadata:
      labels:
        app: web
    spec:
      containers:
      - name: c
        image: nginx:1.27
"
    )
}

fn kubectl(kubeconfig: &Path, args: &[&str], stdin: Option<&str>) -> Output {
    match stdin {
        Some(input) => e2e::kubectl_stdin(kubeconfig, args, input),
        None => e2e::kubectl(kubeconfig, args),
    }
}

fn ok(out: Output, what: &str) -> String {
    assert!(
        out.status.success(),
        "{what} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn get_json(kubeconfig: &Path, what: &str) -> Value {
    let out = kubectl(
        kubeconfig,
        &["get", what, "-o", "json", "--show-managed-fields"],
        None,
    );
    serde_json::from_str(&ok(out, "kubectl get")).unwrap()
}

/// The managedFields entry of `manager` with `operation`.
fn entry<'v>(obj: &'v Value, manager: &str, operation: &str) -> Option<&'v Value> {
    obj["metadata"]["managedFields"]
        .as_array()?
        .iter()
        .find(|e| e["manager"] == manager && e["operation"] == operation)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_server_side_apply_owns_conflicts_forces_and_prunes() {
    if !e2e::recent_kubectl() {
        return;
    }
    let pki = Pki::new();
    let cloud = k8s_cloud(&pki, Ports::default()).await;
    let kc = cloud.running.kubeconfig().unwrap().to_path_buf();
    let ssa = ["apply", "--server-side", "-f", "-"];

    let out = kubectl(&kc, &ssa, Some(&deployment_yaml(Some(2), true)));
    assert!(ok(out, "apply").contains("serverside-applied"));
    let web = get_json(&kc, "deployment/web");
    let mine = entry(&web, "kubectl", "Apply").expect("kubectl's Apply entry");
    assert_eq!(mine["fieldsType"], "FieldsV1");
    assert_eq!(mine["fieldsV1"]["f:spec"]["f:replicas"], json!({}));
    let containers = &mine["fieldsV1"]["f:spec"]["f:template"]["f:spec"]["f:containers"];
    assert!(containers.get("k:{\"name\":\"c\"}").is_some(), "{mine}");
    let plain = ok(
        kubectl(&kc, &["get", "deployment/web", "-o", "yaml"], None),
        "get",
    );
    assert!(
        !plain.contains("managedFields"),
        "kubectl hides them by default"
    );

    let other = ["apply", "--server-side", "--field-manager=other", "-f", "-"];
    let out = kubectl(&kc, &other, Some(&deployment_yaml(Some(5), false)));
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("conflict with \"kubectl\""), "{err}");
    assert!(err.contains(".spec.replicas"), "{err}");

    let forced = [
        "apply",
        "--server-side",
        "--field-manager=other",
        "--force-conflicts",
        "-f",
        "-",
    ];
    ok(
        kubectl(&kc, &forced, Some(&deployment_yaml(Some(5), false))),
        "forced apply",
    );
    let web = get_json(&kc, "deployment/web");
    assert_eq!(web["spec"]["replicas"], 5);
    let taken = &entry(&web, "other", "Apply").unwrap()["fieldsV1"];
    assert_eq!(taken["f:spec"]["f:replicas"], json!({}));
    let first = &entry(&web, "kubectl", "Apply").unwrap()["fieldsV1"];
    assert!(first["f:spec"].get("f:replicas").is_none(), "{first}");

    // kubectl drops the tier label (and replicas, now other's): the label goes.
    let out = kubectl(&kc, &ssa, Some(&deployment_yaml(None, false)));
    ok(out, "apply without the label");
    let web = get_json(&kc, "deployment/web");
    assert!(web["metadata"]["labels"].get("tier").is_none(), "{web}");
    assert_eq!(web["metadata"]["labels"]["app"], "web");
    assert_eq!(web["spec"]["replicas"], 5, "still other's");

    ok(
        kubectl(&kc, &["scale", "deployment/web", "--replicas=7"], None),
        "scale",
    );
    let out = kubectl(&kc, &other, Some(&deployment_yaml(Some(5), false)));
    assert!(!out.status.success(), "scale took replicas over");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(".spec.replicas"), "{err}");
    assert!(err.contains("subresource \"scale\""), "{err}");
    cloud.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_applies_server_side_what_it_created_with_a_port_of_no_protocol() {
    if !e2e::recent_kubectl() {
        return;
    }
    let pki = Pki::new();
    let cloud = k8s_cloud(&pki, Ports::default()).await;
    let kc = cloud.running.kubeconfig().unwrap().to_path_buf();
    let file = deployment_yaml(Some(1), false) + "        ports:\n        - containerPort: 80\n";
    ok(kubectl(&kc, &["create", "-f", "-"], Some(&file)), "create");
    let applied = ok(
        kubectl(
            &kc,
            &["apply", "--server-side", "--field-manager=x", "-f", "-"],
            Some(&file),
        ),
        "apply --server-side of the created file",
    );
    assert!(applied.contains("serverside-applied"), "{applied}");
    let web = get_json(&kc, "deployment/web");
    assert!(
        entry(&web, "x", "Apply").is_some(),
        "x shares the fields it applied"
    );
    cloud.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kube_crate_applies_with_conflicts_force_and_dry_run() {
    let pki = Pki::new();
    let cloud = k8s_cloud(&pki, Ports::default()).await;
    let client = cloud.kube().await;
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let config = |value: &str, extra: bool| {
        let mut data = json!({"color": value});
        if extra {
            data["size"] = json!("big");
        }
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings"}, "data": data})
    };

    let unnamed = http::Request::builder()
        .method("PATCH")
        .uri("/api/v1/namespaces/default/configmaps/settings")
        .header("content-type", "application/apply-patch+yaml")
        .body(b"data: {color: red}".to_vec())
        .unwrap();
    match client.request_text(unnamed).await {
        Err(kube::Error::Api(s)) => assert_eq!((s.code, s.reason.as_str()), (422, "Invalid")),
        other => panic!("an apply without fieldManager: {other:?}"),
    }

    let dry = PatchParams::apply("mgr").dry_run();
    maps.patch("settings", &dry, &Patch::Apply(config("red", true)))
        .await
        .unwrap();
    assert!(maps.get_opt("settings").await.unwrap().is_none(), "dry run");

    let mgr = PatchParams::apply("mgr");
    let created = maps
        .patch("settings", &mgr, &Patch::Apply(config("red", true)))
        .await
        .unwrap();
    let fields = created.metadata.managed_fields.clone().unwrap();
    assert_eq!(fields.len(), 1);
    assert_eq!(fields[0].manager.as_deref(), Some("mgr"));
    assert_eq!(fields[0].operation.as_deref(), Some("Apply"));

    let rival = PatchParams::apply("rival");
    let err = maps
        .patch("settings", &rival, &Patch::Apply(config("blue", false)))
        .await
        .unwrap_err();
    let kube::Error::Api(status) = err else {
        panic!("expected a Status, got {err:?}");
    };
    assert_eq!((status.code, status.reason.as_str()), (409, "Conflict"));
    assert_eq!(
        status.message,
        "Apply failed with 1 conflict: conflict with \"mgr\" using v1: .data.color"
    );

    let forced = maps
        .patch(
            "settings",
            &rival.clone().force(),
            &Patch::Apply(config("blue", false)),
        )
        .await
        .unwrap();
    assert_eq!(forced.data.as_ref().unwrap()["color"], "blue");

    // mgr stops setting `size`: nobody else owns it, so it goes.
    let pruned = maps
        .patch(
            "settings",
            &mgr,
            &Patch::Apply(json!({
                "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings"},
                "data": {"other": "x"},
            })),
        )
        .await
        .unwrap();
    let data = pruned.data.unwrap();
    assert!(!data.contains_key("size"), "{data:?}");
    assert_eq!(data["color"], "blue", "still rival's");

    // A merge patch leaves an Update entry for its manager.
    let patcher = PatchParams {
        field_manager: Some("patcher".into()),
        ..PatchParams::default()
    };
    let merged = maps
        .patch(
            "settings",
            &patcher,
            &Patch::Merge(json!({"data": {"color": "green"}})),
        )
        .await
        .unwrap();
    let fields = merged.metadata.managed_fields.unwrap();
    let update = fields
        .iter()
        .find(|f| f.manager.as_deref() == Some("patcher"))
        .expect("the patcher's entry");
    assert_eq!(update.operation.as_deref(), Some("Update"));
    let again = maps
        .patch("settings", &rival, &Patch::Apply(config("blue", false)))
        .await
        .unwrap_err();
    assert!(
        again.to_string().contains("conflict with \"patcher\""),
        "{again}"
    );
    cloud.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_through_the_scale_and_status_subresources_owns_their_fields() {
    let pki = Pki::new();
    let cloud = k8s_cloud(&pki, Ports::default()).await;
    let client = cloud.kube().await;
    let api: Api<Deployment> = Api::namespaced(client, "default");
    let manifest: Value = serde_json::to_value(
        serde_yaml_ng::from_str::<Value>(&deployment_yaml(Some(1), false)).unwrap(),
    )
    .unwrap();
    let created = api
        .create(
            &PostParams {
                field_manager: Some("creator".into()),
                ..PostParams::default()
            },
            &serde_json::from_value(manifest.clone()).unwrap(),
        )
        .await
        .unwrap();
    let fields = created.metadata.managed_fields.unwrap();
    assert_eq!(fields[0].manager.as_deref(), Some("creator"));
    assert_eq!(fields[0].operation.as_deref(), Some("Update"));

    let scaler = PatchParams::apply("autoscaler");
    let scale = json!({"apiVersion": "autoscaling/v1", "kind": "Scale",
                       "metadata": {"name": "web"}, "spec": {"replicas": 3}});
    let err = api
        .patch_scale("web", &scaler, &Patch::Apply(scale.clone()))
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("conflict with \"creator\""),
        "{err}"
    );
    api.patch_scale("web", &scaler.clone().force(), &Patch::Apply(scale))
        .await
        .unwrap();
    let web = api.get("web").await.unwrap();
    assert_eq!(web.spec.as_ref().unwrap().replicas, Some(3));
    let entry = web
        .metadata
        .managed_fields
        .as_ref()
        .unwrap()
        .iter()
        .find(|f| f.manager.as_deref() == Some("autoscaler"))
        .expect("the autoscaler's entry")
        .clone();
    assert_eq!(entry.subresource.as_deref(), Some("scale"));
    assert_eq!(
        entry.fields_v1.unwrap().0,
        json!({"f:spec": {"f:replicas": {}}})
    );

    let status = json!({"apiVersion": "apps/v1", "kind": "Deployment",
                        "metadata": {"name": "web"}, "status": {"observedGeneration": 99}});
    let reporter = PatchParams::apply("reporter").force();
    api.patch_status("web", &reporter, &Patch::Apply(status))
        .await
        .unwrap();
    eventually("the status entry", WAIT, || async {
        let web = api.get("web").await.unwrap();
        web.metadata
            .managed_fields
            .unwrap_or_default()
            .iter()
            .any(|f| {
                f.manager.as_deref() == Some("reporter")
                    && f.subresource.as_deref() == Some("status")
            })
    })
    .await;
    cloud.stop().await;
}
