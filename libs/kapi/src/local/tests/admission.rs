//! Defaulting, validation, admission and allocation through the backend: what kube-apiserver
//! adds to and refuses of pods, services and workloads.

use std::collections::HashSet;
use std::sync::Arc;

use apimachinery::ResourceInfo;
use apimachinery::alloc::ServiceRanges;

use super::*;

fn service(name: &str, spec: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name}, "spec": spec})
}

fn web_ports() -> Value {
    json!({"selector": {"app": "web"}, "ports": [{"port": 80}]})
}

fn causes(e: &ApiError) -> Vec<(String, String)> {
    let details = e.details.as_ref().expect("details");
    details["causes"]
        .as_array()
        .expect("causes")
        .iter()
        .map(|c| {
            let field = c["field"].as_str().unwrap_or("").to_owned();
            (field, c["reason"].as_str().unwrap().to_owned())
        })
        .collect()
}

#[tokio::test]
async fn every_namespace_gets_a_default_service_account() {
    let fx = fixture().await;
    assert!(
        fx.stored("serviceaccounts", "default", "default")
            .await
            .is_some()
    );
    fx.on("namespaces", "", "")
        .create(json!({"metadata": {"name": "team"}}))
        .await
        .unwrap();
    let account = fx
        .stored("serviceaccounts", "team", "default")
        .await
        .unwrap();
    assert_eq!(account["kind"], "ServiceAccount");
    assert!(!account["metadata"]["uid"].as_str().unwrap().is_empty());
}

#[tokio::test]
async fn a_new_pod_is_defaulted_and_admitted() {
    let fx = fixture().await;
    let created = fx
        .on("pods", "default", "")
        .create(pod("web", None))
        .await
        .unwrap();
    let spec = &created["spec"];
    assert_eq!(spec["restartPolicy"], "Always");
    assert_eq!(spec["serviceAccountName"], "default");
    assert_eq!(spec["priority"], 0);
    assert_eq!(spec["preemptionPolicy"], "PreemptLowerPriority");
    assert_eq!(spec["tolerations"].as_array().unwrap().len(), 2);
    let volume = &spec["volumes"][0];
    let name = volume["name"].as_str().unwrap();
    assert!(
        name.starts_with("kube-api-access-") && name.len() == 21,
        "{name}"
    );
    let mount = &spec["containers"][0]["volumeMounts"][0];
    assert_eq!(mount["name"], name);
    assert_eq!(
        mount["mountPath"],
        "/var/run/secrets/kubernetes.io/serviceaccount"
    );
    assert_eq!(mount["readOnly"], true);
    assert_eq!(spec["containers"][0]["imagePullPolicy"], "Always");
    assert_eq!(created["status"]["qosClass"], "BestEffort");
}

#[tokio::test]
async fn pods_without_automount_or_mirrored_get_no_token() {
    let fx = fixture().await;
    let mut quiet = pod("quiet", None);
    quiet["spec"]["automountServiceAccountToken"] = json!(false);
    let created = fx.on("pods", "default", "").create(quiet).await.unwrap();
    assert!(created["spec"].get("volumes").is_none());
    let mut mirror = pod("mirror", Some("n1"));
    mirror["metadata"]["annotations"] = json!({"kubernetes.io/config.mirror": "hash"});
    let created = fx.on("pods", "default", "").create(mirror).await.unwrap();
    assert!(created["spec"].get("volumes").is_none());
    assert!(created["spec"].get("serviceAccountName").is_none());
}

#[tokio::test]
async fn a_pod_naming_a_missing_account_or_class_is_forbidden() {
    let fx = fixture().await;
    let mut p = pod("web", None);
    p["spec"]["serviceAccountName"] = json!("robot");
    let e = fx.on("pods", "default", "").create(p).await.unwrap_err();
    assert_eq!((e.code, e.reason.as_str()), (403, "Forbidden"));
    assert!(
        e.message.ends_with(
            "error looking up service account default/robot: serviceaccount \"robot\" not found"
        ),
        "{}",
        e.message
    );
    let mut p = pod("web", None);
    p["spec"]["priorityClassName"] = json!("gold");
    let e = fx.on("pods", "default", "").create(p).await.unwrap_err();
    assert_eq!(e.code, 403);
    assert!(
        e.message
            .ends_with("no PriorityClass with name gold was found")
    );
    let mut p = pod("critical", None);
    p["spec"]["priorityClassName"] = json!("system-node-critical");
    let created = fx.on("pods", "default", "").create(p).await.unwrap();
    assert_eq!(created["spec"]["priority"], 2_000_001_000);
}

#[tokio::test]
async fn an_invalid_pod_is_refused_with_every_field_path() {
    let fx = fixture().await;
    let body = json!({"metadata": {"name": "bad"}, "spec": {"containers": [
        {"name": "a"}, {"name": "a", "image": "x", "ports": [{"containerPort": 70000}]}]}});
    let e = fx.on("pods", "default", "").create(body).await.unwrap_err();
    assert_eq!((e.code, e.reason.as_str()), (422, "Invalid"));
    assert_eq!(
        causes(&e),
        [
            (
                "spec.containers[0].image".to_owned(),
                "FieldValueRequired".to_owned()
            ),
            (
                "spec.containers[1].name".to_owned(),
                "FieldValueDuplicate".to_owned()
            ),
            (
                "spec.containers[1].ports[0].containerPort".to_owned(),
                "FieldValueInvalid".to_owned()
            ),
        ]
    );
    assert!(
        e.message
            .starts_with("Pod \"bad\" is invalid: [spec.containers[0].image: Required value, ")
    );
}

#[tokio::test]
async fn a_pod_update_may_change_images_but_not_the_rest_of_the_spec() {
    let fx = fixture().await;
    let created = fx
        .on("pods", "default", "")
        .create(pod("web", None))
        .await
        .unwrap();
    let call = fx.on("pods", "default", "web");
    let mut next = created.clone();
    next["spec"]["containers"][0]["image"] = json!("nginx:2");
    let updated = call.update(next).await.unwrap();
    assert_eq!(updated["spec"]["containers"][0]["image"], "nginx:2");
    let mut next = updated.clone();
    next["spec"]["restartPolicy"] = json!("Never");
    let e = call.update(next).await.unwrap_err();
    assert_eq!(e.code, 422);
    assert_eq!(
        causes(&e),
        [("spec".to_owned(), "FieldValueForbidden".to_owned())]
    );
}

#[tokio::test]
async fn services_get_a_cluster_ip_from_the_range_and_unique_node_ports() {
    let fx = fixture().await;
    let ranges = ServiceRanges::default();
    let mut ips = HashSet::new();
    let mut ports = HashSet::new();
    for i in 0..5 {
        let mut spec = web_ports();
        spec["type"] = json!("NodePort");
        let created = fx
            .on("services", "default", "")
            .create(service(&format!("s{i}"), spec))
            .await
            .unwrap();
        let s = &created["spec"];
        let ip: std::net::Ipv4Addr = s["clusterIP"].as_str().unwrap().parse().unwrap();
        assert!(ranges.cluster_ips.index_of(ip).is_some(), "{ip}");
        assert_eq!(s["clusterIPs"], json!([ip.to_string()]));
        assert_eq!(s["ports"][0]["targetPort"], 80);
        assert_eq!(s["ipFamilies"], json!(["IPv4"]));
        assert!(ips.insert(ip));
        let port = s["ports"][0]["nodePort"].as_i64().unwrap();
        assert!(ranges.node_ports.contains(port));
        assert!(ports.insert(port));
    }
}

#[tokio::test]
async fn an_allocated_ip_or_port_is_refused_until_its_service_is_deleted() {
    let fx = fixture().await;
    let spec = json!({"type": "NodePort", "clusterIP": "10.96.0.50", "ports": [{"port": 80, "nodePort": 30080}]});
    fx.on("services", "default", "")
        .create(service("a", spec.clone()))
        .await
        .unwrap();
    let e = fx
        .on("services", "default", "")
        .create(service("b", spec.clone()))
        .await
        .unwrap_err();
    assert_eq!(e.code, 422);
    assert_eq!(
        causes(&e),
        [
            ("spec.clusterIPs".to_owned(), "FieldValueInvalid".to_owned()),
            (
                "spec.ports[0].nodePort".to_owned(),
                "FieldValueInvalid".to_owned()
            ),
        ]
    );
    assert!(
        e.message.contains("provided IP is already allocated"),
        "{}",
        e.message
    );
    let outside = json!({"clusterIP": "192.168.0.1", "ports": [{"port": 80}]});
    let e = fx
        .on("services", "default", "")
        .create(service("c", outside))
        .await
        .unwrap_err();
    assert!(
        e.message.contains("The range of valid IPs is 10.96.0.0/12"),
        "{}",
        e.message
    );
    fx.on("services", "default", "a")
        .delete(DeleteOptions::default())
        .await
        .unwrap();
    let again = fx
        .on("services", "default", "")
        .create(service("b", spec))
        .await
        .unwrap();
    assert_eq!(again["spec"]["clusterIP"], "10.96.0.50");
}

/// A backend over a fresh store, and the store's writer, for tests that share it.
async fn shared_store() -> (TempDir, Arc<Writer>, Arc<LocalBackend>, Registry) {
    let dir = tempfile::tempdir().expect("tempdir");
    let writer = Writer::open(dir.path().join("kapi.db"), StoreConfig::default()).expect("open");
    let writer = Arc::new(writer);
    let registry = Registry::new(builtins());
    let backend = LocalBackend::new(writer.clone(), registry.clone(), ServiceRanges::default());
    backend
        .ensure_namespaces(&["default"])
        .await
        .expect("namespaces");
    (dir, writer, backend, registry)
}

fn request<'a>(info: &'a ResourceInfo, user: &'a User) -> WriteRequest<'a> {
    WriteRequest {
        info,
        namespace: "default",
        name: "",
        subresource: None,
        user,
        dry_run: false,
        owner: Default::default(),
        collection: false,
    }
}

#[tokio::test]
async fn allocations_live_in_the_store_not_the_backend() {
    let (_dir, writer, first, registry) = shared_store().await;
    let user = User {
        name: "admin".into(),
        groups: vec!["system:masters".into()],
    };
    let info = registry.get("", "v1", "services").unwrap();
    let spec = json!({"clusterIP": "10.96.0.60", "ports": [{"port": 80}]});
    first
        .create(&request(&info, &user), service("a", spec.clone()))
        .await
        .unwrap();
    drop(first);
    // A new backend over the same store sees the first one's allocation.
    let second = LocalBackend::new(writer, registry.clone(), ServiceRanges::default());
    let e = second
        .create(&request(&info, &user), service("b", spec))
        .await
        .unwrap_err();
    assert!(e.message.contains("already allocated"), "{}", e.message);
}

#[tokio::test]
async fn an_update_keeps_the_cluster_ip_and_refuses_a_new_one() {
    let fx = fixture().await;
    let mut spec = web_ports();
    spec["type"] = json!("NodePort");
    let created = fx
        .on("services", "default", "")
        .create(service("web", spec.clone()))
        .await
        .unwrap();
    let call = fx.on("services", "default", "web");
    // A PUT without the allocated values (as `kubectl replace` of the original file).
    let updated = call.update(service("web", spec)).await.unwrap();
    assert_eq!(updated["spec"]["clusterIP"], created["spec"]["clusterIP"]);
    assert_eq!(
        updated["spec"]["ports"][0]["nodePort"],
        created["spec"]["ports"][0]["nodePort"]
    );
    let mut moved = updated.clone();
    moved["spec"]["clusterIP"] = json!("10.96.0.77");
    moved["spec"]["clusterIPs"] = json!(["10.96.0.77"]);
    let e = call.update(moved).await.unwrap_err();
    assert_eq!(e.code, 422);
    assert!(
        e.message.contains("spec.clusterIPs[0]: Invalid value"),
        "{}",
        e.message
    );
}

#[tokio::test]
async fn a_service_turned_node_port_gets_node_ports_and_back_releases_them() {
    let fx = fixture().await;
    let created = fx
        .on("services", "default", "")
        .create(service("web", web_ports()))
        .await
        .unwrap();
    assert!(created["spec"]["ports"][0].get("nodePort").is_none());
    let call = fx.on("services", "default", "web");
    // `kubectl patch svc web -p '{"spec":{"type":"NodePort"}}'`
    let patch = json!({"spec": {"type": "NodePort"}});
    let node_port = call.patch(PatchType::Merge, patch).await.unwrap();
    let port = node_port["spec"]["ports"][0]["nodePort"].as_i64();
    assert!(
        port.is_some_and(|p| ServiceRanges::default().node_ports.contains(p)),
        "{node_port}"
    );
    assert_eq!(node_port["spec"]["clusterIP"], created["spec"]["clusterIP"]);
    // Another Service cannot take that port while this one holds it.
    let mut spec = web_ports();
    spec["type"] = json!("NodePort");
    spec["ports"][0]["nodePort"] = json!(port);
    let e = fx
        .on("services", "default", "")
        .create(service("other", spec.clone()))
        .await
        .unwrap_err();
    assert!(e.message.contains("already allocated"), "{}", e.message);
    // Back to ClusterIP (`kubectl patch svc web -p '{"spec":{"type":"ClusterIP"}}'`): the
    // node port goes with the type, is released, and the other Service may have it.
    let patch = json!({"spec": {"type": "ClusterIP"}});
    let back = call.patch(PatchType::Merge, patch).await.unwrap();
    assert!(back["spec"]["ports"][0].get("nodePort").is_none(), "{back}");
    fx.on("services", "default", "")
        .create(service("other", spec))
        .await
        .unwrap();
}

#[tokio::test]
async fn headless_services_keep_none_and_services_need_ports() {
    let fx = fixture().await;
    let spec = json!({"clusterIP": "None", "selector": {"app": "db"}});
    let created = fx
        .on("services", "default", "")
        .create(service("db", spec))
        .await
        .unwrap();
    assert_eq!(created["spec"]["clusterIP"], "None");
    let e = fx
        .on("services", "default", "")
        .create(service("empty", json!({})))
        .await
        .unwrap_err();
    assert_eq!(
        e.message,
        "Service \"empty\" is invalid: spec.ports: Required value"
    );
}

fn served(fx: &Fixture, group: &str, kind: &str, plural: &str) {
    if fx.registry.get(group, "v1", plural).is_none() {
        fx.registry
            .upsert(vec![ResourceInfo::new(group, "v1", kind, plural, true)]);
    }
}

#[tokio::test]
async fn deployments_are_defaulted_and_their_selectors_checked() {
    let fx = fixture().await;
    served(&fx, "apps", "Deployment", "deployments");
    let template = json!({"metadata": {"labels": {"app": "web"}},
        "spec": {"containers": [{"name": "c", "image": "nginx:1"}]}});
    let body = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
        "spec": {"selector": {"matchLabels": {"app": "web"}}, "template": template}});
    let created = fx
        .on("deployments", "default", "")
        .create(body.clone())
        .await
        .unwrap();
    assert_eq!(created["spec"]["replicas"], 1);
    assert_eq!(
        created["spec"]["strategy"]["rollingUpdate"]["maxSurge"],
        "25%"
    );
    assert_eq!(
        created["spec"]["template"]["spec"]["dnsPolicy"],
        "ClusterFirst"
    );
    assert_eq!(created["metadata"]["generation"], 1);
    let mut other = created.clone();
    other["spec"]["selector"] = json!({"matchLabels": {"app": "web", "tier": "x"}});
    other["spec"]["template"]["metadata"]["labels"]["tier"] = json!("x");
    let e = fx
        .on("deployments", "default", "web")
        .update(other)
        .await
        .unwrap_err();
    assert_eq!(
        causes(&e),
        [("spec.selector".to_owned(), "FieldValueInvalid".to_owned())]
    );
    let mut bad = body;
    bad["metadata"]["name"] = json!("bad");
    bad["spec"]["selector"] = json!({"matchLabels": {"app": "other"}});
    let e = fx
        .on("deployments", "default", "")
        .create(bad)
        .await
        .unwrap_err();
    assert!(
        e.message
            .ends_with("`selector` does not match template `labels`"),
        "{}",
        e.message
    );
}

#[tokio::test]
async fn a_job_gets_its_generated_selector_and_labels() {
    let fx = fixture().await;
    served(&fx, "batch", "Job", "jobs");
    let body = json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "pi"},
        "spec": {"template": {"spec": {"restartPolicy": "Never",
            "containers": [{"name": "c", "image": "perl:5"}]}}}});
    let created = fx.on("jobs", "default", "").create(body).await.unwrap();
    let uid = created["metadata"]["uid"].as_str().unwrap();
    assert_eq!(
        created["spec"]["selector"]["matchLabels"]["batch.kubernetes.io/controller-uid"],
        uid
    );
    assert_eq!(
        created["spec"]["template"]["metadata"]["labels"]["job-name"],
        "pi"
    );
    assert_eq!(
        created["metadata"]["labels"]["batch.kubernetes.io/job-name"],
        "pi"
    );
    assert_eq!(created["spec"]["backoffLimit"], 6);
    assert_eq!(created["spec"]["completions"], 1);
}

#[tokio::test]
async fn priority_classes_resolve_to_the_pod_priority() {
    let fx = fixture().await;
    fx.on("priorityclasses", "", "")
        .create(
            json!({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
            "metadata": {"name": "gold"}, "value": 1000, "preemptionPolicy": "Never"}),
        )
        .await
        .unwrap();
    let mut p = pod("gold", None);
    p["spec"]["priorityClassName"] = json!("gold");
    let created = fx.on("pods", "default", "").create(p).await.unwrap();
    assert_eq!(created["spec"]["priority"], 1000);
    assert_eq!(created["spec"]["preemptionPolicy"], "Never");
    fx.on("priorityclasses", "", "")
        .create(
            json!({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
            "metadata": {"name": "normal"}, "value": 10, "globalDefault": true}),
        )
        .await
        .unwrap();
    let created = fx
        .on("pods", "default", "")
        .create(pod("plain", None))
        .await
        .unwrap();
    assert_eq!(created["spec"]["priority"], 10);
    assert_eq!(created["spec"]["priorityClassName"], "normal");
    let mut wrong = pod("wrong", None);
    wrong["spec"]["priority"] = json!(5);
    let e = fx
        .on("pods", "default", "")
        .create(wrong)
        .await
        .unwrap_err();
    assert_eq!(e.code, 403);
    assert!(
        e.message.contains("must not be provided in pod spec"),
        "{}",
        e.message
    );
}

#[tokio::test]
async fn a_limit_range_defaults_containers_and_a_quota_caps_the_pod_count() {
    let fx = fixture().await;
    fx.on("limitranges", "default", "")
        .create(json!({"apiVersion": "v1", "kind": "LimitRange", "metadata": {"name": "limits"},
            "spec": {"limits": [{"type": "Container", "default": {"memory": "256Mi"},
                                 "defaultRequest": {"memory": "128Mi"}, "max": {"memory": "1Gi"}}]}}))
        .await
        .unwrap();
    let created = fx
        .on("pods", "default", "")
        .create(pod("a", None))
        .await
        .unwrap();
    let resources = &created["spec"]["containers"][0]["resources"];
    assert_eq!(resources["limits"]["memory"], "256Mi");
    assert_eq!(resources["requests"]["memory"], "128Mi");
    assert_eq!(created["status"]["qosClass"], "Burstable");
    let note = created["metadata"]["annotations"]["kubernetes.io/limit-ranger"]
        .as_str()
        .unwrap();
    assert!(
        note.starts_with("LimitRanger plugin set: memory request for container app"),
        "{note}"
    );
    let mut big = pod("big", None);
    big["spec"]["containers"][0]["resources"] = json!({"limits": {"memory": "2Gi"}});
    let e = fx.on("pods", "default", "").create(big).await.unwrap_err();
    assert_eq!(e.code, 403);
    assert!(
        e.message
            .ends_with("maximum memory usage per Container is 1Gi, but limit is 2Gi"),
        "{}",
        e.message
    );

    fx.on("resourcequotas", "default", "")
        .create(
            json!({"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "two"},
            "spec": {"hard": {"pods": "2"}}}),
        )
        .await
        .unwrap();
    fx.on("pods", "default", "")
        .create(pod("b", None))
        .await
        .unwrap();
    let e = fx
        .on("pods", "default", "")
        .create(pod("c", None))
        .await
        .unwrap_err();
    assert_eq!((e.code, e.reason.as_str()), (403, "Forbidden"));
    assert!(
        e.message
            .ends_with("exceeded quota: two, requested: pods=1, used: pods=2, limited: pods=2"),
        "{}",
        e.message
    );
}

#[tokio::test]
async fn a_pod_stored_before_defaulting_can_still_change_its_image() {
    let (_dir, writer, backend, registry) = shared_store().await;
    let user = User {
        name: "admin".into(),
        groups: vec!["system:masters".into()],
    };
    let raw = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "old", "namespace": "default", "uid": "u-old", "resourceVersion": "1"},
        "spec": {"containers": [{"name": "app", "image": "nginx:1"}]}});
    let object = objstore::NewObject::from_value(serde_json::to_vec(&raw).unwrap())
        .uid("u-old")
        .resource_version("1");
    writer
        .put(ObjKey::new("pods", "default", "old"), object)
        .await
        .unwrap();
    let info = registry.get("", "v1", "pods").unwrap();
    let mut req = request(&info, &user);
    req.name = "old";
    let mut next = raw;
    next["spec"]["containers"][0]["image"] = json!("nginx:2");
    next["metadata"]["resourceVersion"] = Value::Null;
    let updated = backend.update(&req, next).await.unwrap();
    assert_eq!(updated["spec"]["containers"][0]["image"], "nginx:2");
    assert_eq!(updated["spec"]["restartPolicy"], "Always");
}
