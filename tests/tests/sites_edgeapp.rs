//! EdgeApplication (KubeEdge's `apps.kubeedge.io/v1alpha1`) on a real cloudcore with the
//! embedded control plane: nodes register through the API as kubelets would, labelled into
//! groups (`apps.kubeedge.io/belonging-to`) by the test itself; the scheduler binds each
//! copy's pods to its group's nodes. KubeEdge's own documents and its users' reports are
//! applied unchanged with the machine's kubectl.

use std::time::Duration;

use e2e::{Cloud, Pki, Ports, k8s_cloud_with};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Node, Pod, Service};
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch,
    PatchParams, PostParams,
};
use serde_json::{Value, json};
use testkit::eventually;

const WAIT: Duration = Duration::from_secs(40);
/// The garbage collector learns a new kind (the EdgeApplication CRD applied at start) as soon
/// as its CRD is established, not at its next minutely rediscovery.
const GC_WAIT: Duration = Duration::from_secs(20);
const BELONGING_TO: &str = "apps.kubeedge.io/belonging-to";
const TARGET: &str = "apps.kubeedge.io/edgeapplication-target";

fn node(name: &str, group: &str) -> Node {
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {BELONGING_TO: group, "kubernetes.io/hostname": name}},
        "status": {
            "capacity": {"cpu": "4", "memory": "8Gi", "pods": "110"},
            "allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
        },
    }))
    .unwrap()
}

/// A cloudcore whose nodes (registered by the test, renewing no Lease) stay Ready.
async fn cloud(pki: &Pki) -> Cloud {
    k8s_cloud_with(pki, Ports::default(), |c| {
        c.modules.controllers.node_monitor_grace_period = Duration::from_secs(3600);
    })
    .await
}

fn edgeapps(client: &kube::Client, ns: &str) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("apps.kubeedge.io", "v1alpha1", "EdgeApplication");
    let ar = ApiResource::from_gvk_with_plural(&gvk, "edgeapplications");
    Api::namespaced_with(client.clone(), ns, &ar)
}

/// Registers `nodes` (name, group) and waits until EdgeApplications are served.
async fn setup(client: &kube::Client, nodes: &[(&str, &str)]) {
    let api: Api<Node> = Api::all(client.clone());
    for (name, group) in nodes {
        api.create(&PostParams::default(), &node(name, group))
            .await
            .unwrap();
    }
    let apps = edgeapps(client, "default");
    eventually("EdgeApplications are served", WAIT, || async {
        apps.list(&ListParams::default()).await.is_ok()
    })
    .await;
}

/// The nodes the pods of one copy (by its target label) are bound to, and their images.
async fn placed(pods: &Api<Pod>, target: &str) -> Vec<(String, String)> {
    let lp = ListParams::default().labels(&format!("{TARGET}={target}"));
    let mut out: Vec<(String, String)> = pods
        .list(&lp)
        .await
        .map(|l| l.items)
        .unwrap_or_default()
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .map(|p| {
            let spec = p.spec.unwrap_or_default();
            let image = spec.containers[0].image.clone().unwrap_or_default();
            (spec.node_name.unwrap_or_default(), image)
        })
        .collect();
    out.sort();
    out
}

async fn deployment(api: &Api<Deployment>, name: &str) -> Option<Value> {
    let d = api.get_opt(name).await.ok().flatten()?;
    Some(serde_json::to_value(d).unwrap())
}

/// `(name, condition)` of each entry of the application's `status.workloadStatus`.
async fn workload_status(apps: &Api<DynamicObject>, name: &str) -> Vec<(String, String)> {
    let Ok(Some(app)) = apps.get_opt(name).await else {
        return Vec::new();
    };
    let mut out: Vec<(String, String)> = app.data["status"]["workloadStatus"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|s| {
            let name = s["identifier"]["name"].as_str().unwrap_or_default();
            (
                name.to_owned(),
                s["conditions"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    out.sort();
    out
}

/// Marks a pod Ready, as its kubelet would.
async fn make_ready(pods: &Api<Pod>, name: &str) {
    let now = "2026-01-01T00:00:00Z";
    let status = json!({"status": {"phase": "Running", "conditions": [
        {"type": "Ready", "status": "True", "lastTransitionTime": now},
        {"type": "ContainersReady", "status": "True", "lastTransitionTime": now}]}});
    pods.patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edge_application_runs_one_copy_per_group_follows_its_scope_and_goes_with_its_owner() {
    let pki = Pki::new();
    let cloud = cloud(&pki).await;
    let client = cloud.kube().await;
    let groups = [
        ("n1", "g1"),
        ("n2", "g1"),
        ("n3", "g2"),
        ("n4", "g2"),
        ("n5", "g3"),
        ("n6", "g3"),
    ];
    setup(&client, &groups).await;
    let apps = edgeapps(&client, "default");
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), "default");
    let services: Api<Service> = Api::namespaced(client.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");

    // A Deployment and a Service for g1 (2 replicas, the canary tag) and g2 (3 replicas).
    let app: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "apps.kubeedge.io/v1alpha1", "kind": "EdgeApplication",
        "metadata": {"name": "web"},
        "spec": {
            "workloadTemplate": {"manifests": [
                {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
                 "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}},
                   "template": {"metadata": {"labels": {"app": "web"}},
                     "spec": {"containers": [{"name": "web", "image": "registry.local/web:1.0"}]}}}},
                {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"},
                 "spec": {"selector": {"app": "web"}, "ports": [{"port": 80}]}},
            ]},
            "workloadScope": {"targetNodeGroups": [
                {"name": "g1", "overriders": {"replicas": 2, "imageOverriders": [
                    {"component": "Tag", "operator": "replace", "value": "1.1"}]}},
                {"name": "g2", "overriders": {"replicas": 3}},
            ]},
        },
    }))
    .unwrap();
    apps.create(&PostParams::default(), &app).await.unwrap();

    let g1 = |image: &'static str| {
        move |placed: &Vec<(String, String)>| {
            placed.len() == 2
                && placed
                    .iter()
                    .all(|(n, i)| ["n1", "n2"].contains(&n.as_str()) && i == image)
        }
    };
    eventually(
        "g1's two pods run the canary image on g1's nodes",
        WAIT,
        || async { g1("registry.local/web:1.1")(&placed(&pods, "g1").await) },
    )
    .await;
    eventually("g2's three pods run on g2's nodes", WAIT, || async {
        let p = placed(&pods, "g2").await;
        p.len() == 3
            && p.iter()
                .all(|(n, i)| ["n3", "n4"].contains(&n.as_str()) && i == "registry.local/web:1.0")
    })
    .await;
    assert!(placed(&pods, "g3").await.is_empty(), "g3 is not a target");
    let svc = services.get("web").await.unwrap();
    let annotations = svc.metadata.annotations.unwrap_or_default();
    assert_eq!(
        annotations
            .get("apps.kubeedge.io/service-topology")
            .map(String::as_str),
        Some("range-nodegroup")
    );
    let owner = &svc.metadata.owner_references.unwrap()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str()),
        ("EdgeApplication", "web")
    );
    // Each copy selects only its own pods.
    let d1 = deployment(&deployments, "web-g1").await.unwrap();
    assert_eq!(
        d1["spec"]["selector"]["matchLabels"],
        json!({"app": "web", TARGET: "g1"})
    );

    // The status lists every object; g1's copy turns Available once its pods are Ready.
    eventually("the status lists the three objects", WAIT, || async {
        let s = workload_status(&apps, "web").await;
        s.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>() == ["web", "web-g1", "web-g2"]
    })
    .await;
    let lp = ListParams::default().labels(&format!("{TARGET}=g1"));
    for p in pods.list(&lp).await.unwrap() {
        make_ready(&pods, p.metadata.name.as_deref().unwrap()).await;
    }
    eventually("web-g1 is Available in the status", WAIT, || async {
        workload_status(&apps, "web")
            .await
            .contains(&("web-g1".into(), "Available".into()))
    })
    .await;
    assert!(
        workload_status(&apps, "web")
            .await
            .contains(&("web-g2".into(), "Processing".into())),
        "g2's pods are not ready"
    );

    // Editing the overrides rolls each group's Deployment, and only once.
    let edit = json!({"spec": {"workloadScope": {"targetNodeGroups": [
        {"name": "g1", "overriders": {"replicas": 2, "imageOverriders": [
            {"component": "Tag", "operator": "replace", "value": "1.2"}]}},
        {"name": "g2", "overriders": {"replicas": 3, "imageOverriders": [
            {"component": "Registry", "operator": "replace", "value": "mirror.g2"}]}},
    ]}}});
    apps.patch("web", &PatchParams::default(), &Patch::Merge(&edit))
        .await
        .unwrap();
    eventually("g1 gets pods with its new image", WAIT, || async {
        let p = placed(&pods, "g1").await;
        p.iter()
            .any(|(n, i)| ["n1", "n2"].contains(&n.as_str()) && i == "registry.local/web:1.2")
    })
    .await;
    eventually("g2 gets pods from its mirror", WAIT, || async {
        let p = placed(&pods, "g2").await;
        p.iter()
            .any(|(n, i)| ["n3", "n4"].contains(&n.as_str()) && i == "mirror.g2/web:1.0")
    })
    .await;
    for name in ["web-g1", "web-g2"] {
        let d = deployment(&deployments, name).await.unwrap();
        assert_eq!(
            d["metadata"]["generation"], 2,
            "{name} changed once: no churn"
        );
    }

    // A third group gets its copy; a group removed loses its copy.
    let scope = json!({"spec": {"workloadScope": {"targetNodeGroups": [
        {"name": "g1", "overriders": {"replicas": 2, "imageOverriders": [
            {"component": "Tag", "operator": "replace", "value": "1.2"}]}},
        {"name": "g3", "overriders": {"replicas": 1}},
    ]}}});
    apps.patch("web", &PatchParams::default(), &Patch::Merge(&scope))
        .await
        .unwrap();
    eventually("g3's pod runs on a g3 node", WAIT, || async {
        let p = placed(&pods, "g3").await;
        p.len() == 1 && ["n5", "n6"].contains(&p[0].0.as_str())
    })
    .await;
    eventually("g2's copy is deleted", WAIT, || async {
        deployment(&deployments, "web-g2").await.is_none()
    })
    .await;
    eventually("the status follows the scope", WAIT, || async {
        let s = workload_status(&apps, "web").await;
        s.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>() == ["web", "web-g1", "web-g3"]
    })
    .await;

    // Deleting the application deletes everything it made (the garbage collector).
    apps.delete("web", &DeleteParams::default()).await.unwrap();
    eventually("the copies and the Service are gone", GC_WAIT, || async {
        let ds = deployments.list(&ListParams::default()).await.unwrap();
        let svc = services.get_opt("web").await.unwrap();
        ds.items.is_empty() && svc.is_none()
    })
    .await;
    cloud.stop().await;
}

/// KubeEdge's node-group proposal (docs/proposals/node-group-management.md, its Example), as
/// written: `component: "registry"` in lower case, and `ports` misplaced in the pod spec.
const PROPOSAL: &str = r#"apiVersion: apps.kubeedge.io/v1alpha1
kind: EdgeApplication
metadata:
  name: nginx-app 
spec:
  workloadTemplate:
    manifests:
    - apiVersion: apps/v1
      kind: Deployment
      metadata:
        name: nginx
      spec:
        selector:
          matchLabels:
            app: nginx
        template:
          metadata:
            labels:
              app: nginx
          spec:
            containers:
            - name: nginx
              image: nginx:latest
            ports:
            - containerPort: 80
    - apiVersion: v1
      kind: Service
      metadata:
        name: nginx-service
      spec:
        selector:
          app: nginx
        ports:
        - name: http
          protocol: TCP
          port: 80
          targetPort: 8080
        type: LoadBalancer
  workloadScope:
    targetNodeGroups:
      - name: hangzhou
        overriders:
          replicas: 2
          imageOverriders:
            - component: "registry"
              operator: "replace"
              value: "hangzhou.registry.io"
      - name: beijing
        overriders:
          replicas: 3
          imageOverriders:
            - component: "registry"
              operator: "replace"
              value: "beijing.registry.io"
"#;

/// kubeedge #6336 ("no deployment was created"): the reporter's EdgeApplication, in the
/// default namespace (its NodeGroup `group1` is the test's labelled node).
const ISSUE_6336: &str = r#"apiVersion: apps.kubeedge.io/v1alpha1
kind: EdgeApplication
metadata:
  name: nginx-app
spec:
  workloadTemplate:
    manifests:
    - apiVersion: apps/v1
      kind: Deployment
      metadata:
        name: nginx
      spec:
        replicas: 1
        selector:
          matchLabels:
            app: nginx
        template:
          metadata:
            labels:
              app: nginx
          spec:
            containers:
              - name: nginx
                image: nginx:latest
  workloadScope:
    targetNodeGroups:
    - name: group1
"#;

/// kubeedge #5475 ("kubectl get all -n edge-example: No resources found"): the reporter's
/// EdgeApplication in namespace edge-example, manifests without a namespace. (The report is
/// cut after `targetNodeGroups:`; its NodeGroup is `d2000-1`.)
const ISSUE_5475: &str = r#"apiVersion: apps.kubeedge.io/v1alpha1
kind: EdgeApplication
metadata:
  name: nginx-app 
  namespace: edge-example
spec:
  workloadTemplate:
    manifests:
    - apiVersion: apps/v1
      kind: Deployment
      metadata:
        name: nginx
      spec:
        selector:
          matchLabels:
            app: d2000-1
        template:
          metadata:
            labels:
              app: d2000-1
          spec:
            containers:
            - name: nginx
              image: nginx:latest
            ports:
            - containerPort: 80
    - apiVersion: v1
      kind: Service
      metadata:
        name: nginx-service
      spec:
        selector:
          app: d2000-1
        ports:
        - name: http
          protocol: TCP
          port: 80
          targetPort: 8080
        type: LoadBalancer
  workloadScope:
    targetNodeGroups:
    - name: d2000-1
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubeedges_own_documents_and_its_users_reports_apply_unchanged_and_run() {
    if !e2e::recent_kubectl() {
        return;
    }
    let pki = Pki::new();
    let cloud = cloud(&pki).await;
    let client = cloud.kube().await;
    let nodes = [
        ("hz1", "hangzhou"),
        ("hz2", "hangzhou"),
        ("bj1", "beijing"),
        ("bj2", "beijing"),
        ("grp1", "group1"),
        ("d2000", "d2000-1"),
    ];
    setup(&client, &nodes).await;
    let kubeconfig = cloud.running.kubeconfig().unwrap().to_path_buf();
    e2e::kubectl_ok(&kubeconfig, &["create", "namespace", "edge-example"]);
    for (what, doc) in [("the proposal", PROPOSAL), ("#5475", ISSUE_5475)] {
        let out = e2e::kubectl_stdin(&kubeconfig, &["apply", "-f", "-"], doc);
        assert!(
            out.status.success(),
            "{what} applies: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    let default_pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    eventually(
        "the proposal's nginx runs 2 in hangzhou and 3 in beijing",
        WAIT,
        || async {
            let (hz, bj) = (
                placed(&default_pods, "hangzhou").await,
                placed(&default_pods, "beijing").await,
            );
            hz.len() == 2
                && hz
                    .iter()
                    .all(|(n, i)| n.starts_with("hz") && i == "hangzhou.registry.io/nginx:latest")
                && bj.len() == 3
                && bj
                    .iter()
                    .all(|(n, i)| n.starts_with("bj") && i == "beijing.registry.io/nginx:latest")
        },
    )
    .await;
    let names = e2e::kubectl_ok(&kubeconfig, &["get", "deployments,services", "-o", "name"]);
    for want in [
        "deployment.apps/nginx-hangzhou",
        "deployment.apps/nginx-beijing",
        "service/nginx-service",
    ] {
        assert!(names.contains(want), "{want} in {names}");
    }
    let topology = e2e::kubectl_ok(
        &kubeconfig,
        &[
            "get",
            "service",
            "nginx-service",
            "-o",
            "jsonpath={.metadata.annotations.apps\\.kubeedge\\.io/service-topology}",
        ],
    );
    assert_eq!(topology, "range-nodegroup");
    let short = e2e::kubectl_ok(&kubeconfig, &["get", "eapp", "-o", "name"]);
    assert!(
        short.contains("nginx-app"),
        "the short name eapp works: {short}"
    );

    // #5475: everything lands in the application's namespace.
    let ns_pods: Api<Pod> = Api::namespaced(client.clone(), "edge-example");
    eventually(
        "#5475's nginx runs on its group's node in edge-example",
        WAIT,
        || async {
            let p = placed(&ns_pods, "d2000-1").await;
            p.len() == 1 && p[0].0 == "d2000"
        },
    )
    .await;
    let all = e2e::kubectl_ok(
        &kubeconfig,
        &[
            "get",
            "deployments,services",
            "-n",
            "edge-example",
            "-o",
            "name",
        ],
    );
    assert!(
        all.contains("deployment.apps/nginx-d2000-1") && all.contains("service/nginx-service"),
        "{all}"
    );

    // #6336, after the proposal's application of the same name is gone.
    e2e::kubectl_ok(
        &kubeconfig,
        &[
            "delete",
            "edgeapplication",
            "nginx-app",
            "-n",
            "default",
            "--wait=false",
        ],
    );
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), "default");
    eventually("the proposal's copies are collected", GC_WAIT, || async {
        deployment(&deployments, "nginx-hangzhou").await.is_none()
            && edgeapps(&client, "default")
                .get_opt("nginx-app")
                .await
                .ok()
                .flatten()
                .is_none()
    })
    .await;
    let out = e2e::kubectl_stdin(&kubeconfig, &["apply", "-f", "-"], ISSUE_6336);
    assert!(
        out.status.success(),
        "#6336 applies: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    eventually(
        "#6336's nginx-group1 is created and runs on group1's node",
        WAIT,
        || async {
            let p = placed(&default_pods, "group1").await;
            p.len() == 1 && p[0].0 == "grp1"
        },
    )
    .await;
    cloud.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_named_twice_or_named_like_the_application_makes_one_copy_each() {
    // kubeedge #4860 / #5497: the same NodeGroup twice in one EdgeApplication, and a group
    // named like the application.
    let pki = Pki::new();
    let cloud = cloud(&pki).await;
    let client = cloud.kube().await;
    setup(&client, &[("a1", "shop"), ("b1", "web")]).await;
    let apps = edgeapps(&client, "default");
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), "default");
    let app = |groups: Value| -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "apps.kubeedge.io/v1alpha1", "kind": "EdgeApplication",
            "metadata": {"name": "web"},
            "spec": {
                "workloadTemplate": {"manifests": [
                    {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
                     "spec": {"selector": {"matchLabels": {"app": "web"}},
                       "template": {"metadata": {"labels": {"app": "web"}},
                         "spec": {"containers": [{"name": "web", "image": "web"}]}}}}]},
                "workloadScope": {"targetNodeGroups": groups},
            },
        }))
        .unwrap()
    };
    let twice = app(json!([{"name": "shop"}, {"name": "shop", "overriders": {"replicas": 5}}]));
    match apps.create(&PostParams::default(), &twice).await {
        // Refused at admission, naming the duplicate, as kube-apiserver does for a list map.
        Err(kube::Error::Api(s)) => {
            eprintln!("the duplicate group was refused: {}", s.message);
            assert_eq!(s.code, 422, "{s:?}");
            assert!(s.message.contains("shop"), "{}", s.message);
        }
        Err(e) => panic!("unexpected error: {e}"),
        // Taken once (the first entry), with one status entry.
        Ok(_) => {
            eprintln!("the duplicate group was admitted: the controller takes it once");
            eventually("one copy with one status entry", WAIT, || async {
                workload_status(&apps, "web").await.len() == 1
            })
            .await;
            let d = deployment(&deployments, "web-shop").await.unwrap();
            assert_eq!(d["spec"]["replicas"], 1, "the first entry counts");
            apps.delete("web", &DeleteParams::default()).await.unwrap();
            eventually("the first try is gone", WAIT, || async {
                apps.get_opt("web").await.ok().flatten().is_none()
            })
            .await;
        }
    }
    apps.create(
        &PostParams::default(),
        &app(json!([{"name": "shop"}, {"name": "web"}])),
    )
    .await
    .unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    eventually(
        "web-shop and web-web each run on their own group's node",
        WAIT,
        || async {
            let (shop, web) = (placed(&pods, "shop").await, placed(&pods, "web").await);
            shop.len() == 1 && shop[0].0 == "a1" && web.len() == 1 && web[0].0 == "b1"
        },
    )
    .await;
    let selector = |d: Value| d["spec"]["selector"]["matchLabels"].clone();
    let shop = selector(deployment(&deployments, "web-shop").await.unwrap());
    let web = selector(deployment(&deployments, "web-web").await.unwrap());
    assert_ne!(shop, web, "the copies' selectors differ");
    cloud.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn statefulsets_and_daemonsets_are_copied_per_group_and_a_node_joining_a_group_gets_its_pods()
{
    let pki = Pki::new();
    let cloud = cloud(&pki).await;
    let client = cloud.kube().await;
    setup(
        &client,
        &[("n1", "g1"), ("n2", "g1"), ("n3", "g2"), ("n4", "g3")],
    )
    .await;
    let apps = edgeapps(&client, "default");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let template = |app: &str| {
        json!({"metadata": {"labels": {"app": app}},
               "spec": {"containers": [{"name": app, "image": format!("registry.local/{app}:1")}]}})
    };
    let app: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "apps.kubeedge.io/v1alpha1", "kind": "EdgeApplication",
        "metadata": {"name": "site"},
        "spec": {
            "workloadTemplate": {"manifests": [
                {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "agent"},
                 "spec": {"selector": {"matchLabels": {"app": "agent"}}, "template": template("agent")}},
                {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "db"},
                 "spec": {"serviceName": "db", "replicas": 1, "podManagementPolicy": "Parallel",
                          "selector": {"matchLabels": {"app": "db"}}, "template": template("db")}},
            ]},
            "workloadScope": {"targetNodeGroups": [
                {"name": "g1", "overriders": {"replicas": 2}},
                {"name": "g2"},
            ]},
        },
    }))
    .unwrap();
    apps.create(&PostParams::default(), &app).await.unwrap();
    let on = |app: &'static str, target: &'static str| {
        let pods = pods.clone();
        async move {
            let lp = ListParams::default().labels(&format!("app={app},{TARGET}={target}"));
            let mut nodes: Vec<String> = pods
                .list(&lp)
                .await
                .map(|l| l.items)
                .unwrap_or_default()
                .into_iter()
                .filter_map(|p| p.spec.and_then(|s| s.node_name))
                .collect();
            nodes.sort();
            nodes
        }
    };
    eventually(
        "the agent runs on every node of g1 and g2, the db per group",
        WAIT,
        || async {
            on("agent", "g1").await == ["n1", "n2"]
                && on("agent", "g2").await == ["n3"]
                && on("db", "g1").await.len() == 2
                && on("db", "g1").await.iter().all(|n| n == "n1" || n == "n2")
                && on("db", "g2").await == ["n3"]
        },
    )
    .await;
    assert!(on("agent", "g3").await.is_empty(), "g3 is not a target");

    // A node that joins g1 gets the group's DaemonSet pod through the DaemonSet controller.
    let nodes: Api<Node> = Api::all(client.clone());
    let join = json!({"metadata": {"labels": {BELONGING_TO: "g1"}}});
    nodes
        .patch("n4", &PatchParams::default(), &Patch::Merge(&join))
        .await
        .unwrap();
    eventually("n4 runs g1's agent", WAIT, || async {
        on("agent", "g1").await == ["n1", "n2", "n4"]
    })
    .await;
    cloud.stop().await;
}
