//! The local backend against a real store in a temporary directory: the shared fixture and
//! object builders here, the tests by verb in the submodules.

mod admission;
mod crds;
mod crdschema;
mod create;
mod csr;
mod delete;
mod layering;
mod namespaces;
mod subresources;
mod update;

use std::sync::Arc;
use std::time::Duration;

use apimachinery::catalog::builtins;
use apimachinery::patch::PatchType;
use apimachinery::time::parse_rfc3339;
use apimachinery::{ApiError, ResourceInfo};
use objstore::{ObjKey, Store, StoreConfig, Synchronous, Writer};
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
    let writer = Writer::open(dir.path().join("kapi.db"), config).expect("open store");
    let store = writer.reader();
    let registry = Registry::new(builtins());
    let backend = LocalBackend::new(writer, registry.clone(), Default::default());
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
            owner: Default::default(),
            collection: false,
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
