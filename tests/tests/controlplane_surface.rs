//! The embedded control plane's built-in API surface, driven by kubectl (whatever `kubectl` is
//! on PATH) and the `kube` crate: discovery as `kubectl api-resources` shows it, one object of
//! every served kind applied and listed with its columns, `kubectl scale` through the scale
//! subresource, `kubectl certificate approve`, `kubectl logs` answered without a tunnel, the
//! health endpoints and `/version`.

use std::path::Path;
use std::time::Duration;

use e2e::controller::Desired;
use e2e::{Pki, Ports, cloud, kubectl, kubectl_ok as ok};
use futures::TryStreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::{Value, json};
use testkit::eventually;

const WAIT: Duration = Duration::from_secs(20);
const NS: &str = "surface";

/// `kubectl api-resources` rows of a real 1.32 cluster: name, short names, APIVERSION,
/// namespaced, kind.
#[rustfmt::skip]
const API_RESOURCES: &[(&str, &str, &str, &str, &str)] = &[
    ("bindings", "", "v1", "true", "Binding"),
    ("componentstatuses", "cs", "v1", "false", "ComponentStatus"),
    ("limitranges", "limits", "v1", "true", "LimitRange"),
    ("persistentvolumeclaims", "pvc", "v1", "true", "PersistentVolumeClaim"),
    ("persistentvolumes", "pv", "v1", "false", "PersistentVolume"),
    ("pods", "po", "v1", "true", "Pod"),
    ("podtemplates", "", "v1", "true", "PodTemplate"),
    ("replicationcontrollers", "rc", "v1", "true", "ReplicationController"),
    ("resourcequotas", "quota", "v1", "true", "ResourceQuota"),
    ("services", "svc", "v1", "true", "Service"),
    ("mutatingwebhookconfigurations", "", "admissionregistration.k8s.io/v1", "false", "MutatingWebhookConfiguration"),
    ("validatingadmissionpolicies", "", "admissionregistration.k8s.io/v1", "false", "ValidatingAdmissionPolicy"),
    ("validatingadmissionpolicybindings", "", "admissionregistration.k8s.io/v1", "false", "ValidatingAdmissionPolicyBinding"),
    ("validatingwebhookconfigurations", "", "admissionregistration.k8s.io/v1", "false", "ValidatingWebhookConfiguration"),
    ("customresourcedefinitions", "crd,crds", "apiextensions.k8s.io/v1", "false", "CustomResourceDefinition"),
    ("apiservices", "", "apiregistration.k8s.io/v1", "false", "APIService"),
    ("controllerrevisions", "", "apps/v1", "true", "ControllerRevision"),
    ("daemonsets", "ds", "apps/v1", "true", "DaemonSet"),
    ("deployments", "deploy", "apps/v1", "true", "Deployment"),
    ("replicasets", "rs", "apps/v1", "true", "ReplicaSet"),
    ("statefulsets", "sts", "apps/v1", "true", "StatefulSet"),
    ("horizontalpodautoscalers", "hpa", "autoscaling/v2", "true", "HorizontalPodAutoscaler"),
    ("cronjobs", "cj", "batch/v1", "true", "CronJob"),
    ("jobs", "", "batch/v1", "true", "Job"),
    ("certificatesigningrequests", "csr", "certificates.k8s.io/v1", "false", "CertificateSigningRequest"),
    ("leases", "", "coordination.k8s.io/v1", "true", "Lease"),
    ("endpointslices", "", "discovery.k8s.io/v1", "true", "EndpointSlice"),
    ("ingressclasses", "", "networking.k8s.io/v1", "false", "IngressClass"),
    ("ingresses", "ing", "networking.k8s.io/v1", "true", "Ingress"),
    ("networkpolicies", "netpol", "networking.k8s.io/v1", "true", "NetworkPolicy"),
    ("runtimeclasses", "", "node.k8s.io/v1", "false", "RuntimeClass"),
    ("poddisruptionbudgets", "pdb", "policy/v1", "true", "PodDisruptionBudget"),
    ("priorityclasses", "pc", "scheduling.k8s.io/v1", "false", "PriorityClass"),
    ("csidrivers", "", "storage.k8s.io/v1", "false", "CSIDriver"),
    ("csinodes", "", "storage.k8s.io/v1", "false", "CSINode"),
    ("csistoragecapacities", "", "storage.k8s.io/v1", "true", "CSIStorageCapacity"),
    ("storageclasses", "sc", "storage.k8s.io/v1", "false", "StorageClass"),
    ("volumeattachments", "", "storage.k8s.io/v1", "false", "VolumeAttachment"),
];

/// Each kind `kubectl get` lists from the manifest: resource, object name, the columns a real
/// cluster shows.
#[rustfmt::skip]
const GETS: &[(&str, &str, &str)] = &[
    ("deployments", "web", "NAME READY UP-TO-DATE AVAILABLE AGE"),
    ("replicasets", "web-rs", "NAME DESIRED CURRENT READY AGE"),
    ("statefulsets", "db", "NAME READY AGE"),
    ("daemonsets", "agent", "NAME DESIRED CURRENT READY UP-TO-DATE AVAILABLE NODE SELECTOR AGE"),
    ("controllerrevisions", "db-1", "NAME CONTROLLER REVISION AGE"),
    ("jobs", "once", "NAME STATUS COMPLETIONS DURATION AGE"),
    ("cronjobs", "nightly", "NAME SCHEDULE TIMEZONE SUSPEND ACTIVE LAST SCHEDULE AGE"),
    ("horizontalpodautoscalers", "web", "NAME REFERENCE TARGETS MINPODS MAXPODS REPLICAS AGE"),
    ("poddisruptionbudgets", "web", "NAME MIN AVAILABLE MAX UNAVAILABLE ALLOWED DISRUPTIONS AGE"),
    ("replicationcontrollers", "legacy", "NAME DESIRED CURRENT READY AGE"),
    ("podtemplates", "tmpl", "NAME CONTAINERS IMAGES POD LABELS"),
    ("persistentvolumeclaims", "data", "NAME STATUS VOLUME CAPACITY ACCESS MODES STORAGECLASS VOLUMEATTRIBUTESCLASS AGE"),
    ("persistentvolumes", "surface-pv", "NAME CAPACITY ACCESS MODES RECLAIM POLICY STATUS CLAIM STORAGECLASS VOLUMEATTRIBUTESCLASS REASON AGE"),
    ("limitranges", "limits", "NAME CREATED AT"),
    ("resourcequotas", "quota", "NAME AGE REQUEST LIMIT"),
    ("ingresses", "web", "NAME CLASS HOSTS ADDRESS PORTS AGE"),
    ("ingressclasses", "surface-nginx", "NAME CONTROLLER PARAMETERS AGE"),
    ("networkpolicies", "deny", "NAME POD-SELECTOR AGE"),
    ("storageclasses", "surface-fast", "NAME PROVISIONER RECLAIMPOLICY VOLUMEBINDINGMODE ALLOWVOLUMEEXPANSION AGE"),
    ("volumeattachments", "surface-va", "NAME ATTACHER PV NODE ATTACHED AGE"),
    ("csistoragecapacities", "cap", "NAME STORAGECLASSNAME CAPACITY"),
    ("priorityclasses", "surface-high", "NAME VALUE GLOBAL-DEFAULT AGE PREEMPTIONPOLICY"),
    ("certificatesigningrequests", "surface-alice", "NAME AGE SIGNERNAME REQUESTOR REQUESTEDDURATION CONDITION"),
    ("mutatingwebhookconfigurations", "surface-mutate", "NAME WEBHOOKS AGE"),
    ("validatingwebhookconfigurations", "surface-validate", "NAME WEBHOOKS AGE"),
    ("validatingadmissionpolicies", "surface-policy", "NAME VALIDATIONS PARAMKIND AGE"),
    ("validatingadmissionpolicybindings", "surface-binding", "NAME POLICYNAME PARAMREF AGE"),
    ("apiservices", "v1.surface.example.com", "NAME SERVICE AVAILABLE AGE"),
];

fn has_kubectl() -> bool {
    e2e::recent_kubectl()
}

fn apply(kubeconfig: &Path, manifest: &str) -> String {
    let out = e2e::kubectl_stdin(
        kubeconfig,
        &["apply", "--validate=false", "-f", "-"],
        manifest,
    );
    assert!(
        out.status.success(),
        "kubectl apply failed: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// One object of every kind this test lists (`{CSR}`: a certificate request, base64).
const MANIFEST: &str = r#"
apiVersion: v1
kind: Namespace
metadata: {name: surface}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: surface}
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec: {containers: [{name: c, image: "nginx:1.27"}]}
---
apiVersion: apps/v1
kind: ReplicaSet
metadata: {name: web-rs, namespace: surface}
spec:
  replicas: 1
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec: {containers: [{name: c, image: "nginx:1.27"}]}
---
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: db, namespace: surface}
spec:
  replicas: 1
  serviceName: db
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec: {containers: [{name: c, image: "nginx:1.27"}]}
---
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: agent, namespace: surface}
spec:
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec: {containers: [{name: c, image: "nginx:1.27"}]}
---
apiVersion: apps/v1
kind: ControllerRevision
metadata: {name: db-1, namespace: surface}
revision: 1
data: {}
---
apiVersion: batch/v1
kind: Job
metadata: {name: once, namespace: surface}
spec:
  template:
    spec: {restartPolicy: Never, containers: [{name: c, image: busybox}]}
---
apiVersion: batch/v1
kind: CronJob
metadata: {name: nightly, namespace: surface}
spec:
  schedule: "0 3 * * *"
  jobTemplate:
    spec:
      template:
        spec: {restartPolicy: Never, containers: [{name: c, image: busybox}]}
---
apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata: {name: web, namespace: surface}
spec:
  scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: web}
  minReplicas: 1
  maxReplicas: 5
  metrics:
  - type: Resource
    resource: {name: cpu, target: {type: Utilization, averageUtilization: 80}}
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: web, namespace: surface}
spec: {minAvailable: 1, selector: {matchLabels: {app: web}}}
---
apiVersion: v1
kind: ReplicationController
metadata: {name: legacy, namespace: surface}
spec:
  replicas: 1
  selector: {app: legacy}
  template:
    metadata: {labels: {app: legacy}}
    spec: {containers: [{name: c, image: "nginx:1.27"}]}
---
apiVersion: v1
kind: PodTemplate
metadata: {name: tmpl, namespace: surface}
template:
  metadata: {labels: {app: web}}
  spec: {containers: [{name: c, image: "nginx:1.27"}]}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: data, namespace: surface}
spec:
  accessModes: [ReadWriteOnce]
  resources: {requests: {storage: 1Gi}}
  storageClassName: surface-fast
---
apiVersion: v1
kind: PersistentVolume
metadata: {name: surface-pv}
spec:
  capacity: {storage: 1Gi}
  accessModes: [ReadWriteOnce]
  hostPath: {path: /tmp/surface}
  storageClassName: surface-fast
---
apiVersion: v1
kind: LimitRange
metadata: {name: limits, namespace: surface}
spec: {limits: [{type: Container, max: {cpu: "64"}}]}
---
apiVersion: v1
kind: ResourceQuota
metadata: {name: quota, namespace: surface}
spec: {hard: {pods: "100"}}
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {name: web, namespace: surface}
spec:
  ingressClassName: surface-nginx
  rules:
  - host: web.example
    http:
      paths:
      - {path: /, pathType: Prefix, backend: {service: {name: web, port: {number: 80}}}}
---
apiVersion: networking.k8s.io/v1
kind: IngressClass
metadata: {name: surface-nginx}
spec: {controller: example.com/ingress}
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: deny, namespace: surface}
spec: {podSelector: {}, policyTypes: [Ingress]}
---
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {name: surface-fast}
provisioner: example.com/csi
---
apiVersion: storage.k8s.io/v1
kind: VolumeAttachment
metadata: {name: surface-va}
spec: {attacher: example.com/csi, nodeName: edge-1, source: {persistentVolumeName: surface-pv}}
---
apiVersion: storage.k8s.io/v1
kind: CSIStorageCapacity
metadata: {name: cap, namespace: surface}
storageClassName: surface-fast
capacity: 10Gi
---
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: surface-high}
value: 1000
description: surface
---
apiVersion: certificates.k8s.io/v1
kind: CertificateSigningRequest
metadata: {name: surface-alice}
spec: {request: "{CSR}", signerName: example.com/signer, usages: [client auth]}
---
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata: {name: surface-mutate}
webhooks: []
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata: {name: surface-validate}
webhooks: []
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: surface-policy}
spec:
  failurePolicy: Ignore
  matchConstraints:
    resourceRules:
    - {apiGroups: [surface.example.com], apiVersions: [v1], operations: [CREATE], resources: [gadgets]}
  validations: [{expression: "true"}]
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {name: surface-binding}
spec: {policyName: surface-policy, validationActions: [Warn]}
---
apiVersion: apiregistration.k8s.io/v1
kind: APIService
metadata: {name: v1.surface.example.com}
spec: {group: surface.example.com, version: v1, groupPriorityMinimum: 1000, versionPriority: 15}
"#;

/// [`MANIFEST`] with a real certificate request.
fn manifest() -> String {
    let (csr_pem, _key) = pki::node_csr("surface").unwrap();
    MANIFEST.replace("{CSR}", &base64_encode(csr_pem.as_bytes()))
}

fn base64_encode(bytes: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// The `kubectl api-resources` row of `name` in `api_version`, as (short names, namespaced,
/// kind); short names are `""` when the column is empty.
fn api_resource<'a>(
    table: &'a str,
    name: &str,
    api_version: &str,
) -> Option<(String, &'a str, &'a str)> {
    table.lines().find_map(|line| {
        let cols: Vec<&str> = line.split_whitespace().collect();
        let n = cols.len();
        if n < 4 || cols[0] != name || cols[n - 3] != api_version {
            return None;
        }
        let short = if n == 5 {
            cols[1].to_owned()
        } else {
            String::new()
        };
        Some((short, cols[n - 2], cols[n - 1]))
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_sees_the_built_in_api_surface() {
    if !has_kubectl() {
        return;
    }
    let pki = Pki::new();
    let cloud = cloud(&pki, Desired::new(), Ports::default()).await;
    let kc = cloud.running.kubeconfig().unwrap().to_path_buf();

    let resources = ok(&kc, &["api-resources"]);
    for (name, short, api_version, namespaced, kind) in API_RESOURCES {
        let row = api_resource(&resources, name, api_version)
            .unwrap_or_else(|| panic!("{name} ({api_version}) in:\n{resources}"));
        assert_eq!(row, (short.to_string(), *namespaced, *kind), "{name}");
    }

    let applied = apply(&kc, &manifest());
    assert!(applied.contains("deployment.apps/web created"), "{applied}");
    for (resource, name, columns) in GETS {
        let mut args = vec!["get", resource, name];
        if !resource.ends_with("classes")
            && ![
                "persistentvolumes",
                "volumeattachments",
                "certificatesigningrequests",
                "apiservices",
            ]
            .contains(resource)
            && !resource.contains("webhook")
            && !resource.contains("admissionpolic")
        {
            args.extend(["-n", NS]);
        }
        let out = ok(&kc, &args);
        let mut lines = out.lines();
        let header: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
        assert_eq!(header.join(" "), *columns, "{resource}:\n{out}");
        let row = lines.next().unwrap_or_default();
        assert!(row.starts_with(name), "{resource}:\n{out}");
    }
    let hpa = ok(&kc, &["get", "hpa", "web", "-n", NS]);
    assert!(
        hpa.contains("Deployment/web") && hpa.contains("cpu: <unknown>/80%"),
        "{hpa}"
    );

    // The `all` category holds the workloads, as on a real cluster.
    let all = ok(&kc, &["get", "all", "-n", NS, "-o", "name"]);
    for name in [
        "deployment.apps/web",
        "replicaset.apps/web-rs",
        "statefulset.apps/db",
        "daemonset.apps/agent",
        "job.batch/once",
        "cronjob.batch/nightly",
        "horizontalpodautoscaler.autoscaling/web",
        "replicationcontroller/legacy",
    ] {
        assert!(all.lines().any(|l| l == name), "{name} in:\n{all}");
    }
    assert!(!all.contains("poddisruptionbudget"), "{all}");

    // kubectl scale goes through deployments/scale.
    let scaled = ok(
        &kc,
        &["scale", "deployment", "web", "-n", NS, "--replicas=4"],
    );
    assert!(scaled.contains("deployment.apps/web scaled"), "{scaled}");
    let replicas = ok(
        &kc,
        &[
            "get",
            "deployment",
            "web",
            "-n",
            NS,
            "-o",
            "jsonpath={.spec.replicas}",
        ],
    );
    assert_eq!(replicas, "4");
    let raw = ok(
        &kc,
        &[
            "get",
            "--raw",
            &format!("/apis/apps/v1/namespaces/{NS}/deployments/web/scale"),
        ],
    );
    let scale: Value = serde_json::from_str(&raw).unwrap();
    assert_eq!(scale["kind"], "Scale", "{scale}");
    assert_eq!(scale["apiVersion"], "autoscaling/v1", "{scale}");
    assert_eq!(scale["spec"]["replicas"], 4, "{scale}");
    assert_eq!(scale["status"]["selector"], "app=web", "{scale}");

    // kubectl certificate approve writes the approval subresource.
    let approved = ok(&kc, &["certificate", "approve", "surface-alice"]);
    assert!(approved.contains("approved"), "{approved}");
    let csr = ok(&kc, &["get", "csr", "surface-alice"]);
    assert!(csr.contains("Approved"), "{csr}");

    // Logs need the edge's tunnel: a clear error naming the node, not a 404.
    apply(
        &kc,
        &json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "placed", "namespace": NS},
                "spec": {"nodeName": "edge-far", "containers": [{"name": "c", "image": "nginx:1.27"}]}})
        .to_string(),
    );
    let logs = kubectl(&kc, &["logs", "placed", "-n", NS]);
    assert!(!logs.status.success());
    let stderr = String::from_utf8_lossy(&logs.stderr);
    assert!(
        stderr.contains("error dialing backend") && stderr.contains("edge-far"),
        "{stderr}"
    );
    assert!(
        !stderr.contains("NotFound") && !stderr.contains("could not find"),
        "{stderr}"
    );

    let exec = kubectl(&kc, &["exec", "placed", "-n", NS, "--", "true"]);
    assert!(!exec.status.success());
    let stderr = String::from_utf8_lossy(&exec.stderr);
    assert!(
        stderr.contains("error dialing backend") && stderr.contains("edge-far"),
        "{stderr}"
    );

    // kubectl debug adds an ephemeral container through pods/ephemeralcontainers.
    let debug = ok(
        &kc,
        &[
            "debug",
            "placed",
            "-n",
            NS,
            "--image=busybox",
            "--attach=false",
            "--container=dbg",
        ],
    );
    assert!(!debug.contains("error"), "{debug}");
    let image = ok(
        &kc,
        &[
            "get",
            "pod",
            "placed",
            "-n",
            NS,
            "-o",
            "jsonpath={.spec.ephemeralContainers[0].image}",
        ],
    );
    assert_eq!(image, "busybox");

    // Health and version.
    let readyz = ok(&kc, &["get", "--raw", "/readyz?verbose"]);
    assert!(
        readyz.contains("[+]ping ok") && readyz.contains("[+]etcd ok"),
        "{readyz}"
    );
    assert!(
        readyz.trim_end().ends_with("readyz check passed"),
        "{readyz}"
    );
    assert_eq!(ok(&kc, &["get", "--raw", "/livez"]), "ok");
    assert_eq!(ok(&kc, &["get", "--raw", "/healthz"]), "ok");
    assert_eq!(ok(&kc, &["get", "--raw", "/livez/ping"]), "ok");
    let version: Value = serde_json::from_str(&ok(&kc, &["get", "--raw", "/version"])).unwrap();
    assert_eq!(version["gitVersion"], "v1.32.0-kubeedge-rs", "{version}");
    let build_date = version["buildDate"].as_str().unwrap_or_default();
    let rfc3339 = build_date.len() == 20 && &build_date[10..11] == "T" && build_date.ends_with('Z');
    assert!(rfc3339, "{version}");

    cloud.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_and_version_are_open_to_unauthenticated_callers() {
    let pki = Pki::new();
    let cloud = cloud(&pki, Desired::new(), Ports::default()).await;
    let path = cloud.running.kubeconfig().unwrap();
    let kubeconfig = kube::config::Kubeconfig::read_from(path).unwrap();
    let mut config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .unwrap();
    config.auth_info = Default::default();
    let anonymous = kube::Client::try_from(config).unwrap();
    let get = |path: &str| http::Request::get(path).body(Vec::new()).unwrap();
    // As system:public-info-viewer allows: the endpoints, not their single checks.
    for path in ["/healthz", "/livez", "/readyz"] {
        let body = anonymous.request_text(get(path)).await.unwrap();
        assert_eq!(body, "ok", "{path}");
    }
    let single = anonymous.request_text(get("/readyz/etcd")).await;
    assert!(
        matches!(&single, Err(kube::Error::Api(s)) if s.code == 403),
        "{single:?}"
    );
    let version = anonymous.request_text(get("/version")).await.unwrap();
    assert!(version.contains("v1.32.0-kubeedge-rs"), "{version}");
    // Resources still need credentials.
    let pods = anonymous
        .request_text(get("/api/v1/namespaces/default/pods"))
        .await;
    assert!(pods.is_err(), "{pods:?}");
    cloud.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kube_crate_creates_lists_watches_and_scales_deployments() {
    let pki = Pki::new();
    let cloud = cloud(&pki, Desired::new(), Ports::default()).await;
    let client = cloud.kube().await;
    let api: Api<Deployment> = Api::namespaced(client, "default");

    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let watch = {
        let seen = seen.clone();
        let stream = watcher(api.clone(), watcher::Config::default()).applied_objects();
        tokio::spawn(async move {
            let mut stream = std::pin::pin!(stream);
            while let Ok(Some(d)) = stream.try_next().await {
                let replicas = d.spec.and_then(|s| s.replicas).unwrap_or_default();
                let name = d.metadata.name.unwrap_or_default();
                seen.lock().unwrap().push(format!("{name}={replicas}"));
            }
        })
    };

    let deployment: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "api"},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "api"}},
                 "template": {"metadata": {"labels": {"app": "api"}},
                              "spec": {"containers": [{"name": "c", "image": "nginx:1.27"}]}}},
    }))
    .unwrap();
    let created = api
        .create(&PostParams::default(), &deployment)
        .await
        .unwrap();
    assert!(created.metadata.uid.is_some());
    let got = api.get("api").await.unwrap();
    assert_eq!(got.metadata.uid, created.metadata.uid);
    let listed = api.list(&ListParams::default()).await.unwrap();
    assert!(
        listed
            .items
            .iter()
            .any(|d| d.metadata.name.as_deref() == Some("api"))
    );

    let scale = api.get_scale("api").await.unwrap();
    assert_eq!(scale.spec.and_then(|s| s.replicas), Some(1));
    let patch = Patch::Merge(json!({"spec": {"replicas": 3}}));
    let scaled = api
        .patch_scale("api", &PatchParams::default(), &patch)
        .await
        .unwrap();
    assert_eq!(scaled.spec.and_then(|s| s.replicas), Some(3));

    eventually(
        "the watch sees the deployment created and scaled",
        WAIT,
        || {
            let seen = seen.lock().unwrap().clone();
            std::future::ready(
                seen.contains(&"api=1".to_owned()) && seen.contains(&"api=3".to_owned()),
            )
        },
    )
    .await;
    watch.abort();
    cloud.stop().await;
}
