//! The local backend against a real store in a temporary directory.

use std::sync::Arc;
use std::time::Duration;

use apimachinery::catalog::builtins;
use apimachinery::patch::PatchType;
use apimachinery::time::parse_rfc3339;
use apimachinery::{ApiError, ResourceInfo};
use objstore::{ObjKey, Store, StoreConfig, Synchronous};
use serde_json::{Value, json};
use tempfile::TempDir;
use testkit::eventually;

use super::{LocalBackend, register_existing_crds};
use crate::{Backend, DeleteOptions, Registry, User, WriteRequest};

/// How long a background deletion may take before a test fails.
const PATIENCE: Duration = Duration::from_secs(5);

struct Fixture {
    _dir: TempDir,
    store: Store,
    registry: Registry,
    backend: Arc<LocalBackend>,
    user: User,
}

/// One write target: resource, namespace, name, subresource, dry run.
struct Call<'a> {
    fx: &'a Fixture,
    info: Arc<ResourceInfo>,
    namespace: &'a str,
    name: &'a str,
    subresource: Option<&'a str>,
    dry_run: bool,
}

async fn fixture() -> Fixture {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = StoreConfig {
        synchronous: Synchronous::Normal,
        ..StoreConfig::default()
    };
    let store = Store::open(dir.path().join("kapi.db"), config).expect("open store");
    let registry = Registry::new(builtins());
    let backend = LocalBackend::new(store.clone(), registry.clone());
    backend
        .ensure_namespaces(&["default", "kube-system"])
        .await
        .expect("namespaces");
    Fixture {
        _dir: dir,
        store,
        registry,
        backend,
        user: User {
            name: "admin".into(),
            groups: vec!["system:masters".into()],
        },
    }
}

impl Fixture {
    fn on<'a>(&'a self, plural: &str, namespace: &'a str, name: &'a str) -> Call<'a> {
        let info = self
            .registry
            .all()
            .into_iter()
            .find(|r| r.plural == plural)
            .unwrap_or_else(|| panic!("{plural} is not served"));
        Call {
            fx: self,
            info,
            namespace,
            name,
            subresource: None,
            dry_run: false,
        }
    }

    /// The object as stored, if present.
    async fn stored(&self, plural: &str, namespace: &str, name: &str) -> Option<Value> {
        let info = self.on(plural, namespace, name).info;
        let key = ObjKey::new(info.store_resource(), namespace, name);
        let stored = self.store.get(&key).await.expect("store get")?;
        Some(serde_json::from_slice(&stored.value).expect("stored JSON"))
    }
}

impl<'a> Call<'a> {
    fn status(mut self) -> Self {
        self.subresource = Some("status");
        self
    }

    fn sub(mut self, sub: &'a str) -> Self {
        self.subresource = Some(sub);
        self
    }

    fn dry_run(mut self) -> Self {
        self.dry_run = true;
        self
    }

    fn req(&self) -> WriteRequest<'_> {
        WriteRequest {
            info: &self.info,
            namespace: self.namespace,
            name: self.name,
            subresource: self.subresource,
            user: &self.fx.user,
            dry_run: self.dry_run,
        }
    }

    async fn create(&self, body: Value) -> Result<Value, ApiError> {
        self.fx.backend.create(&self.req(), body).await
    }

    async fn update(&self, body: Value) -> Result<Value, ApiError> {
        self.fx.backend.update(&self.req(), body).await
    }

    async fn patch(&self, kind: PatchType, patch: Value) -> Result<Value, ApiError> {
        let body = serde_json::to_vec(&patch).expect("patch JSON").into();
        self.fx.backend.patch(&self.req(), kind, body).await
    }

    async fn delete(&self, opts: DeleteOptions) -> Result<Value, ApiError> {
        let (code, obj) = self.fx.backend.delete(&self.req(), opts).await?;
        assert_eq!(code, 200);
        Ok(obj)
    }
}

fn rv(obj: &Value) -> u64 {
    obj["metadata"]["resourceVersion"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .expect("numeric resourceVersion")
}

fn configmap(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"a": "1"}})
}

fn pod(name: &str, node: Option<&str>) -> Value {
    let mut spec = json!({"containers": [{"name": "app", "image": "nginx"}]});
    if let Some(node) = node {
        spec["nodeName"] = json!(node);
    }
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec})
}

fn widget_crd() -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {
            "group": "example.com",
            "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}},
                "subresources": {"status": {}},
            }],
        },
    })
}

fn grace(seconds: i64) -> DeleteOptions {
    DeleteOptions {
        grace_period_seconds: Some(seconds),
        ..DeleteOptions::default()
    }
}

// === create ===

#[tokio::test]
async fn create_sets_uid_timestamp_generation_and_the_revision_as_resource_version() {
    let fx = fixture().await;
    let created = fx
        .on("pods", "default", "")
        .create(pod("web", None))
        .await
        .unwrap();
    let meta = &created["metadata"];
    assert_eq!(meta["name"], "web");
    assert_eq!(meta["namespace"], "default");
    assert_eq!(meta["uid"].as_str().unwrap().len(), 36);
    assert!(parse_rfc3339(meta["creationTimestamp"].as_str().unwrap()).is_some());
    assert_eq!(meta["generation"], 1);
    assert_eq!(rv(&created), fx.store.revision());
    assert_eq!(created["status"]["phase"], "Pending");
    assert_eq!(fx.stored("pods", "default", "web").await.unwrap(), created);
}

#[tokio::test]
async fn only_pods_crds_and_custom_resources_get_a_generation() {
    let fx = fixture().await;
    let cm = fx
        .on("configmaps", "default", "")
        .create(configmap("c"))
        .await
        .unwrap();
    assert!(cm["metadata"].get("generation").is_none());
    let lease = json!({"metadata": {"name": "n1"}, "spec": {"holderIdentity": "n1"}});
    let lease = fx.on("leases", "default", "").create(lease).await.unwrap();
    assert!(lease["metadata"].get("generation").is_none());
    let mut renewed = lease.clone();
    renewed["spec"]["renewTime"] = json!("2026-05-01T10:00:00.000000Z");
    let renewed = fx
        .on("leases", "default", "n1")
        .update(renewed)
        .await
        .unwrap();
    assert!(renewed["metadata"].get("generation").is_none());
}

#[tokio::test]
async fn generate_name_appends_five_random_characters() {
    let fx = fixture().await;
    let body = json!({"metadata": {"generateName": "job-"}, "data": {}});
    let a = fx
        .on("configmaps", "default", "")
        .create(body.clone())
        .await
        .unwrap();
    let b = fx
        .on("configmaps", "default", "")
        .create(body)
        .await
        .unwrap();
    let (a, b) = (
        a["metadata"]["name"].as_str().unwrap(),
        b["metadata"]["name"].as_str().unwrap(),
    );
    assert!(a.starts_with("job-") && a.len() == 9, "{a}");
    assert_ne!(a, b);
}

#[tokio::test]
async fn create_of_an_existing_name_is_already_exists() {
    let fx = fixture().await;
    let call = fx.on("configmaps", "default", "");
    call.create(configmap("c")).await.unwrap();
    let err = call.create(configmap("c")).await.unwrap_err();
    assert_eq!((err.code, err.reason.as_str()), (409, "AlreadyExists"));
}

#[tokio::test]
async fn create_refuses_bodies_that_do_not_fit_the_request() {
    let fx = fixture().await;
    let call = fx.on("configmaps", "default", "");
    let mut with_rv = configmap("c");
    with_rv["metadata"]["resourceVersion"] = json!("5");
    assert_eq!(call.create(with_rv).await.unwrap_err().code, 400);
    let mut other_ns = configmap("c");
    other_ns["metadata"]["namespace"] = json!("kube-system");
    assert_eq!(call.create(other_ns).await.unwrap_err().code, 400);
    let wrong_kind = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "c"}});
    assert_eq!(call.create(wrong_kind).await.unwrap_err().code, 400);
    let err = call.create(configmap("Not_Valid")).await.unwrap_err();
    assert_eq!((err.code, err.reason.as_str()), (422, "Invalid"));
    assert!(err.message.contains("metadata.name"), "{}", err.message);
    let err = call.create(json!({"data": {}})).await.unwrap_err();
    assert_eq!(err.code, 422);
    let ns = json!({"metadata": {"name": "a.b"}});
    assert_eq!(
        fx.on("namespaces", "", "")
            .create(ns)
            .await
            .unwrap_err()
            .code,
        422
    );
}

#[tokio::test]
async fn create_in_a_missing_namespace_is_not_found() {
    let fx = fixture().await;
    let err = fx
        .on("configmaps", "nowhere", "")
        .create(configmap("c"))
        .await
        .unwrap_err();
    assert_eq!(err.code, 404);
    assert!(err.message.contains("namespaces"), "{}", err.message);
}

#[tokio::test]
async fn dry_run_answers_without_storing() {
    let fx = fixture().await;
    let before = fx.store.revision();
    let obj = fx
        .on("configmaps", "default", "")
        .dry_run()
        .create(configmap("c"))
        .await
        .unwrap();
    assert_eq!(obj["metadata"]["name"], "c");
    assert!(obj["metadata"]["uid"].is_string());
    assert!(fx.stored("configmaps", "default", "c").await.is_none());
    fx.on("configmaps", "default", "")
        .create(configmap("c"))
        .await
        .unwrap();
    let after_create = fx.store.revision();
    let mut changed = configmap("c");
    changed["data"]["a"] = json!("2");
    let obj = fx
        .on("configmaps", "default", "c")
        .dry_run()
        .update(changed)
        .await
        .unwrap();
    assert_eq!(obj["data"]["a"], "2");
    fx.on("configmaps", "default", "c")
        .dry_run()
        .delete(DeleteOptions::default())
        .await
        .unwrap();
    let stored = fx.stored("configmaps", "default", "c").await.unwrap();
    assert_eq!(stored["data"]["a"], "1");
    assert_eq!(fx.store.revision(), after_create);
    assert!(after_create > before);
}

// === update ===

#[tokio::test]
async fn update_with_a_stale_resource_version_conflicts() {
    let fx = fixture().await;
    let created = fx
        .on("configmaps", "default", "")
        .create(configmap("c"))
        .await
        .unwrap();
    let call = fx.on("configmaps", "default", "c");
    let mut first = created.clone();
    first["data"]["a"] = json!("2");
    let updated = call.update(first).await.unwrap();
    assert!(rv(&updated) > rv(&created));
    assert_eq!(updated["metadata"]["uid"], created["metadata"]["uid"]);
    assert_eq!(
        updated["metadata"]["creationTimestamp"],
        created["metadata"]["creationTimestamp"]
    );
    let mut stale = created.clone();
    stale["data"]["a"] = json!("3");
    let err = call.update(stale).await.unwrap_err();
    assert_eq!((err.code, err.reason.as_str()), (409, "Conflict"));
    assert!(
        err.message.contains("the object has been modified"),
        "{}",
        err.message
    );
    let mut unconditional = configmap("c");
    unconditional["data"]["a"] = json!("4");
    assert_eq!(call.update(unconditional).await.unwrap()["data"]["a"], "4");
}

#[tokio::test]
async fn update_of_a_missing_object_is_not_found_and_names_must_match() {
    let fx = fixture().await;
    let err = fx
        .on("configmaps", "default", "c")
        .update(configmap("c"))
        .await
        .unwrap_err();
    assert_eq!(err.code, 404);
    fx.on("configmaps", "default", "")
        .create(configmap("c"))
        .await
        .unwrap();
    let err = fx
        .on("configmaps", "default", "c")
        .update(configmap("d"))
        .await
        .unwrap_err();
    assert_eq!(err.code, 400);
}

#[tokio::test]
async fn update_that_changes_nothing_keeps_the_resource_version() {
    let fx = fixture().await;
    let created = fx
        .on("configmaps", "default", "")
        .create(configmap("c"))
        .await
        .unwrap();
    let same = fx
        .on("configmaps", "default", "c")
        .update(created.clone())
        .await
        .unwrap();
    assert_eq!(same, created);
    assert_eq!(fx.store.revision(), rv(&created));
}

#[tokio::test]
async fn status_writes_touch_only_status_and_main_writes_keep_it() {
    let fx = fixture().await;
    let created = fx
        .on("pods", "default", "")
        .create(pod("web", Some("n1")))
        .await
        .unwrap();
    let mut body = created.clone();
    body["spec"]["nodeName"] = json!("elsewhere");
    body["status"] = json!({"phase": "Running"});
    let after_status = fx
        .on("pods", "default", "web")
        .status()
        .update(body)
        .await
        .unwrap();
    assert_eq!(after_status["status"]["phase"], "Running");
    assert_eq!(after_status["spec"]["nodeName"], "n1");
    assert_eq!(after_status["metadata"]["generation"], 1);

    let mut body = after_status.clone();
    body["status"] = json!({"phase": "Failed"});
    body["metadata"]["labels"] = json!({"app": "web"});
    let after_main = fx.on("pods", "default", "web").update(body).await.unwrap();
    assert_eq!(after_main["status"]["phase"], "Running");
    assert_eq!(after_main["metadata"]["labels"]["app"], "web");
}

#[tokio::test]
async fn generation_bumps_only_when_the_spec_changes() {
    let fx = fixture().await;
    let created = fx
        .on("pods", "default", "")
        .create(pod("web", Some("n1")))
        .await
        .unwrap();
    let call = fx.on("pods", "default", "web");
    let mut labelled = created.clone();
    labelled["metadata"]["labels"] = json!({"a": "b"});
    let labelled = call.update(labelled).await.unwrap();
    assert_eq!(labelled["metadata"]["generation"], 1);
    let mut respec = labelled.clone();
    respec["spec"]["containers"][0]["image"] = json!("nginx:2");
    let respec = call.update(respec).await.unwrap();
    assert_eq!(respec["metadata"]["generation"], 2);
    let mut forged = respec.clone();
    forged["metadata"]["generation"] = json!(40);
    assert_eq!(
        call.update(forged).await.unwrap()["metadata"]["generation"],
        2
    );
}

#[tokio::test]
async fn uid_in_the_body_is_a_precondition() {
    let fx = fixture().await;
    fx.on("configmaps", "default", "")
        .create(configmap("c"))
        .await
        .unwrap();
    let mut body = configmap("c");
    body["metadata"]["uid"] = json!("not-the-uid");
    let err = fx
        .on("configmaps", "default", "c")
        .update(body)
        .await
        .unwrap_err();
    assert_eq!(err.code, 409);
    assert!(
        err.message.contains("Precondition failed: UID"),
        "{}",
        err.message
    );
}

// === patch ===

#[tokio::test]
async fn merge_json_and_strategic_patches_go_through_the_backend() {
    let fx = fixture().await;
    fx.on("pods", "default", "")
        .create(pod("web", Some("n1")))
        .await
        .unwrap();
    let call = fx.on("pods", "default", "web");

    let merged = call
        .patch(
            PatchType::Merge,
            json!({"metadata": {"labels": {"app": "web"}}}),
        )
        .await
        .unwrap();
    assert_eq!(merged["metadata"]["labels"]["app"], "web");

    let ops = json!([{"op": "replace", "path": "/spec/containers/0/image", "value": "nginx:2"}]);
    let patched = call.patch(PatchType::Json, ops).await.unwrap();
    assert_eq!(patched["spec"]["containers"][0]["image"], "nginx:2");
    assert_eq!(patched["metadata"]["generation"], 2);

    let smp = json!({"spec": {"containers": [{"name": "sidecar", "image": "busybox"}]}});
    let patched = call.patch(PatchType::StrategicMerge, smp).await.unwrap();
    let names: Vec<&str> = patched["spec"]["containers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(names.len(), 2, "{names:?}");
    assert!(names.contains(&"app") && names.contains(&"sidecar"));

    let status = json!({"spec": {"nodeName": "n2"}, "status": {"phase": "Running"}});
    let patched = call
        .status()
        .patch(PatchType::StrategicMerge, status)
        .await
        .unwrap();
    assert_eq!(patched["status"]["phase"], "Running");
    assert_eq!(patched["spec"]["nodeName"], "n1");
    assert_eq!(fx.stored("pods", "default", "web").await.unwrap(), patched);
}

#[tokio::test]
async fn patch_carrying_a_stale_resource_version_conflicts() {
    let fx = fixture().await;
    let created = fx
        .on("configmaps", "default", "")
        .create(configmap("c"))
        .await
        .unwrap();
    let call = fx.on("configmaps", "default", "c");
    call.patch(PatchType::Merge, json!({"data": {"b": "2"}}))
        .await
        .unwrap();
    let stale = json!({"metadata": {"resourceVersion": created["metadata"]["resourceVersion"]}, "data": {"c": "3"}});
    let err = call.patch(PatchType::Merge, stale).await.unwrap_err();
    assert_eq!((err.code, err.reason.as_str()), (409, "Conflict"));
}

#[tokio::test]
async fn patch_of_a_missing_object_is_not_found() {
    let fx = fixture().await;
    let err = fx
        .on("configmaps", "default", "c")
        .patch(PatchType::Merge, json!({"data": {}}))
        .await
        .unwrap_err();
    assert_eq!(err.code, 404);
}

// === delete ===

#[tokio::test]
async fn scheduled_pods_are_deleted_gracefully_until_the_final_delete() {
    let fx = fixture().await;
    let created = fx
        .on("pods", "default", "")
        .create(pod("web", Some("n1")))
        .await
        .unwrap();
    let call = fx.on("pods", "default", "web");
    let marked = call.delete(DeleteOptions::default()).await.unwrap();
    assert_eq!(marked["metadata"]["deletionGracePeriodSeconds"], 30);
    let at = parse_rfc3339(marked["metadata"]["deletionTimestamp"].as_str().unwrap()).unwrap();
    let created_at =
        parse_rfc3339(created["metadata"]["creationTimestamp"].as_str().unwrap()).unwrap();
    assert!(at >= created_at + 29, "{at} vs {created_at}");
    assert!(fx.stored("pods", "default", "web").await.is_some());

    let shorter = call.delete(grace(10)).await.unwrap();
    assert_eq!(shorter["metadata"]["deletionGracePeriodSeconds"], 10);
    let longer = call.delete(grace(60)).await.unwrap();
    assert_eq!(longer["metadata"]["deletionGracePeriodSeconds"], 10);

    let wrong_uid = DeleteOptions {
        uid: Some("other".into()),
        ..grace(0)
    };
    assert_eq!(call.delete(wrong_uid).await.unwrap_err().code, 409);
    let kubelet = DeleteOptions {
        uid: created["metadata"]["uid"].as_str().map(str::to_owned),
        ..grace(0)
    };
    let gone = call.delete(kubelet).await.unwrap();
    assert_eq!(gone["metadata"]["name"], "web");
    assert!(fx.stored("pods", "default", "web").await.is_none());
}

#[tokio::test]
async fn unscheduled_pods_are_deleted_at_once() {
    let fx = fixture().await;
    fx.on("pods", "default", "")
        .create(pod("web", None))
        .await
        .unwrap();
    fx.on("pods", "default", "web")
        .delete(DeleteOptions::default())
        .await
        .unwrap();
    assert!(fx.stored("pods", "default", "web").await.is_none());
    let err = fx
        .on("pods", "default", "web")
        .delete(DeleteOptions::default())
        .await
        .unwrap_err();
    assert_eq!(err.code, 404);
}

#[tokio::test]
async fn finalizers_keep_the_object_until_the_last_is_removed() {
    let fx = fixture().await;
    let mut body = configmap("c");
    body["metadata"]["finalizers"] = json!(["example.com/hold"]);
    fx.on("configmaps", "default", "")
        .create(body)
        .await
        .unwrap();
    let call = fx.on("configmaps", "default", "c");
    let marked = call.delete(DeleteOptions::default()).await.unwrap();
    assert!(marked["metadata"]["deletionTimestamp"].is_string());
    assert_eq!(marked["metadata"]["deletionGracePeriodSeconds"], 0);
    assert!(fx.stored("configmaps", "default", "c").await.is_some());

    let more = json!({"metadata": {"finalizers": ["example.com/hold", "example.com/more"]}});
    let err = call.patch(PatchType::Merge, more).await.unwrap_err();
    assert_eq!(err.code, 422);

    let mut release = marked.clone();
    release["metadata"]["finalizers"] = json!([]);
    let last = call.update(release).await.unwrap();
    assert_eq!(last["metadata"]["name"], "c");
    assert!(fx.stored("configmaps", "default", "c").await.is_none());
}

#[tokio::test]
async fn delete_preconditions_must_match() {
    let fx = fixture().await;
    let created = fx
        .on("configmaps", "default", "")
        .create(configmap("c"))
        .await
        .unwrap();
    let call = fx.on("configmaps", "default", "c");
    let stale = DeleteOptions {
        resource_version: Some("1".into()),
        ..DeleteOptions::default()
    };
    let err = call.delete(stale).await.unwrap_err();
    assert_eq!((err.code, err.reason.as_str()), (409, "Conflict"));
    let current = DeleteOptions {
        resource_version: created["metadata"]["resourceVersion"]
            .as_str()
            .map(str::to_owned),
        ..DeleteOptions::default()
    };
    call.delete(current).await.unwrap();
    assert!(fx.stored("configmaps", "default", "c").await.is_none());
}

// === namespaces ===

#[tokio::test]
async fn ensure_namespaces_creates_active_namespaces_once() {
    let fx = fixture().await;
    let ns = fx.stored("namespaces", "", "default").await.unwrap();
    assert_eq!(ns["status"]["phase"], "Active");
    assert_eq!(
        ns["metadata"]["labels"]["kubernetes.io/metadata.name"],
        "default"
    );
    let revision = fx.store.revision();
    fx.backend
        .ensure_namespaces(&["default", "kube-system"])
        .await
        .unwrap();
    assert_eq!(fx.store.revision(), revision);
}

#[tokio::test]
async fn system_namespaces_cannot_be_deleted() {
    let fx = fixture().await;
    let err = fx
        .on("namespaces", "", "default")
        .delete(DeleteOptions::default())
        .await
        .unwrap_err();
    assert_eq!((err.code, err.reason.as_str()), (403, "Forbidden"));
}

#[tokio::test]
async fn deleting_a_namespace_refuses_new_content_and_empties_it() {
    let fx = fixture().await;
    fx.on("namespaces", "", "")
        .create(json!({"metadata": {"name": "team"}}))
        .await
        .unwrap();
    fx.on("configmaps", "team", "")
        .create(configmap("plain"))
        .await
        .unwrap();
    fx.on("pods", "team", "")
        .create(pod("unscheduled", None))
        .await
        .unwrap();
    let mut held = configmap("held");
    held["metadata"]["finalizers"] = json!(["example.com/hold"]);
    fx.on("configmaps", "team", "").create(held).await.unwrap();

    let marked = fx
        .on("namespaces", "", "team")
        .delete(DeleteOptions::default())
        .await
        .unwrap();
    assert_eq!(marked["status"]["phase"], "Terminating");
    let err = fx
        .on("configmaps", "team", "")
        .create(configmap("late"))
        .await
        .unwrap_err();
    assert_eq!(err.code, 403);
    assert!(
        err.message.contains("because it is being terminated"),
        "{}",
        err.message
    );

    eventually("plain objects deleted", PATIENCE, || async {
        fx.stored("configmaps", "team", "plain").await.is_none()
            && fx.stored("pods", "team", "unscheduled").await.is_none()
    })
    .await;
    let held = fx.stored("configmaps", "team", "held").await.unwrap();
    assert!(held["metadata"]["deletionTimestamp"].is_string());
    assert!(fx.stored("namespaces", "", "team").await.is_some());

    let release = json!({"metadata": {"finalizers": null}});
    fx.on("configmaps", "team", "held")
        .patch(PatchType::Merge, release)
        .await
        .unwrap();
    eventually("namespace gone", PATIENCE, || async {
        fx.stored("namespaces", "", "team").await.is_none()
    })
    .await;
}

// === CRDs ===

#[tokio::test]
async fn crds_register_their_resources_and_take_them_away_on_delete() {
    let fx = fixture().await;
    let crd = fx
        .on("customresourcedefinitions", "", "")
        .create(widget_crd())
        .await
        .unwrap();
    let conditions = crd["status"]["conditions"].as_array().unwrap();
    assert!(
        conditions
            .iter()
            .any(|c| c["type"] == "Established" && c["status"] == "True")
    );
    assert_eq!(crd["status"]["acceptedNames"]["kind"], "Widget");
    assert!(fx.registry.get("example.com", "v1", "widgets").is_some());

    let widget = json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": {"size": 1}, "status": {"ok": true}});
    let created = fx
        .on("widgets", "default", "")
        .create(widget)
        .await
        .unwrap();
    assert!(
        created.get("status").is_none(),
        "status subresource: status dropped on create"
    );
    assert_eq!(created["metadata"]["generation"], 1);

    fx.on("customresourcedefinitions", "", "widgets.example.com")
        .delete(DeleteOptions::default())
        .await
        .unwrap();
    eventually("CRD and widgets gone", PATIENCE, || async {
        fx.registry.get("example.com", "v1", "widgets").is_none()
            && fx
                .stored("customresourcedefinitions", "", "widgets.example.com")
                .await
                .is_none()
    })
    .await;
    let key = ObjKey::new("widgets.example.com", "default", "w");
    assert!(fx.store.get(&key).await.unwrap().is_none());
}

#[tokio::test]
async fn invalid_crds_are_refused() {
    let fx = fixture().await;
    let mut crd = widget_crd();
    crd["metadata"]["name"] = json!("gadgets.example.com");
    let err = fx
        .on("customresourcedefinitions", "", "")
        .create(crd)
        .await
        .unwrap_err();
    assert_eq!(err.code, 422);
    let mut crd = widget_crd();
    crd["spec"]["versions"] = json!([]);
    let err = fx
        .on("customresourcedefinitions", "", "")
        .create(crd)
        .await
        .unwrap_err();
    assert_eq!(err.code, 422);
    assert!(fx.registry.get("example.com", "v1", "widgets").is_none());
}

#[tokio::test]
async fn stored_crds_are_registered_at_start() {
    let fx = fixture().await;
    fx.on("customresourcedefinitions", "", "")
        .create(widget_crd())
        .await
        .unwrap();
    let fresh = Registry::new(builtins());
    assert_eq!(register_existing_crds(&fx.store, &fresh).await.unwrap(), 1);
    assert!(fresh.get("example.com", "v1", "widgets").is_some());
}

// === pods subresources ===

#[tokio::test]
async fn binding_assigns_the_node_once() {
    let fx = fixture().await;
    fx.on("pods", "default", "")
        .create(pod("web", None))
        .await
        .unwrap();
    let binding = json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "web"}, "target": {"kind": "Node", "name": "n1"}});
    let call = fx.on("pods", "default", "web").sub("binding");
    call.create(binding.clone()).await.unwrap();
    let stored = fx.stored("pods", "default", "web").await.unwrap();
    assert_eq!(stored["spec"]["nodeName"], "n1");
    assert_eq!(call.create(binding).await.unwrap_err().code, 409);
}

#[tokio::test]
async fn concurrent_updates_from_the_same_version_have_one_winner() {
    let fx = Arc::new(fixture().await);
    let created = fx
        .on("configmaps", "default", "")
        .create(configmap("c"))
        .await
        .unwrap();
    let mut tasks = Vec::new();
    for i in 0..8 {
        let (fx, mut body) = (fx.clone(), created.clone());
        body["data"]["a"] = json!(i.to_string());
        tasks.push(tokio::spawn(async move {
            fx.on("configmaps", "default", "c").update(body).await
        }));
    }
    let mut won = 0;
    for task in tasks {
        match task.await.unwrap() {
            Ok(_) => won += 1,
            Err(e) => assert_eq!(e.code, 409),
        }
    }
    assert_eq!(won, 1);
}

#[tokio::test]
async fn a_terminating_crd_refuses_new_objects_until_its_objects_are_gone() {
    let fx = fixture().await;
    fx.on("customresourcedefinitions", "", "")
        .create(widget_crd())
        .await
        .unwrap();
    let widget = |name: &str| json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": name, "finalizers": ["example.com/hold"]}});
    fx.on("widgets", "default", "")
        .create(widget("w"))
        .await
        .unwrap();
    let smp = json!({"spec": {"size": 2}});
    let err = fx
        .on("widgets", "default", "w")
        .patch(PatchType::StrategicMerge, smp)
        .await
        .unwrap_err();
    assert_eq!(err.code, 415);

    let crd = fx.on("customresourcedefinitions", "", "widgets.example.com");
    let marked = crd.delete(DeleteOptions::default()).await.unwrap();
    let conditions = marked["status"]["conditions"].as_array().unwrap();
    assert!(conditions.iter().any(|c| c["type"] == "Terminating"));
    eventually("widget marked", PATIENCE, || async {
        fx.stored("widgets", "default", "w")
            .await
            .is_some_and(|w| w["metadata"]["deletionTimestamp"].is_string())
    })
    .await;
    let err = fx
        .on("widgets", "default", "")
        .create(widget("late"))
        .await
        .unwrap_err();
    assert_eq!(err.code, 405);
    assert!(fx.registry.get("example.com", "v1", "widgets").is_some());

    let release = json!({"metadata": {"finalizers": null}});
    fx.on("widgets", "default", "w")
        .patch(PatchType::Merge, release)
        .await
        .unwrap();
    eventually("CRD gone", PATIENCE, || async {
        fx.stored("customresourcedefinitions", "", "widgets.example.com")
            .await
            .is_none()
    })
    .await;
    assert!(fx.registry.get("example.com", "v1", "widgets").is_none());
}

#[tokio::test]
async fn crd_updates_keep_the_status_and_follow_new_versions() {
    let fx = fixture().await;
    let created = fx
        .on("customresourcedefinitions", "", "")
        .create(widget_crd())
        .await
        .unwrap();
    let mut body = created.clone();
    body["status"] = json!({});
    body["spec"]["versions"] = json!([
        {"name": "v1", "served": true, "storage": false, "schema": {"openAPIV3Schema": {"type": "object"}}},
        {"name": "v2", "served": true, "storage": true, "schema": {"openAPIV3Schema": {"type": "object"}}},
    ]);
    let updated = fx
        .on("customresourcedefinitions", "", "widgets.example.com")
        .update(body)
        .await
        .unwrap();
    assert_eq!(updated["status"]["storedVersions"], json!(["v1", "v2"]));
    assert_eq!(updated["metadata"]["generation"], 2);
    assert!(fx.registry.get("example.com", "v2", "widgets").is_some());
    assert!(fx.registry.get("example.com", "v1", "widgets").is_some());
}

#[tokio::test]
async fn eviction_deletes_the_pod() {
    let fx = fixture().await;
    fx.on("pods", "default", "")
        .create(pod("web", Some("n1")))
        .await
        .unwrap();
    let eviction = json!({"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "web"}, "deleteOptions": {"gracePeriodSeconds": 0}});
    let status = fx
        .on("pods", "default", "web")
        .sub("eviction")
        .create(eviction)
        .await
        .unwrap();
    assert_eq!(status["status"], "Success");
    assert!(fx.stored("pods", "default", "web").await.is_none());
}

#[tokio::test]
async fn only_finalize_changes_the_finalizers_of_a_namespace() {
    let fx = fixture().await;
    fx.on("namespaces", "", "")
        .create(json!({"metadata": {"name": "team"}}))
        .await
        .unwrap();
    let ns = fx.on("namespaces", "", "team");
    let mut spec_change = fx.stored("namespaces", "", "team").await.unwrap();
    spec_change["spec"]["finalizers"] = json!([]);
    let kept = ns.update(spec_change).await.unwrap();
    assert_eq!(
        kept["spec"]["finalizers"],
        json!(["kubernetes"]),
        "only finalize changes them"
    );
    let finalized = ns
        .sub("finalize")
        .update(json!({"spec": {"finalizers": []}}))
        .await
        .unwrap();
    assert_eq!(finalized["spec"]["finalizers"], json!([]));
}
