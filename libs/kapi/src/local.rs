//! The backend of the embedded control plane: writes applied to the local object store with
//! kube-apiserver's semantics.
//!
//! Every decision (preconditions, AlreadyExists, "the namespace is terminating") is taken
//! inside one [`objstore::Writer::mutate_many`] call on the store's writer thread, so each
//! read-check-write is atomic; the revision the store hands the closure becomes the object's
//! `resourceVersion`. A create also reads its namespace (and, for a custom resource, its CRD)
//! in the same transaction, so no object can slip into a namespace after it started
//! terminating.
//!
//! The submodules form layers; each imports only from layers below it (or its own, without a
//! cycle), which `tests/layering.rs` checks on the sources:
//! 1. Vocabulary: `meta` (an object's JSON) and `vocab` (the `Core` a write runs against,
//!    its `Target`, and the `Strategy` hooks), importing no other module; `validate` (the
//!    generic checks) and `owners` (`managedFields` of a write) on top of them.
//! 2. Strategies: how a kind differs, as Kubernetes' registry strategies say it (prepare and
//!    canonicalize on create and update, admission, allocation, what a delete does,
//!    after-commit work): `pods` (with `admission` and `limits`, the pod admission plugins), `services`
//!    (with their cluster IP and node port ledger), `workloads`, `namespace`, `crd` (CRDs and
//!    custom resources) and `strategy`, which picks the one of a resource (`strategy::of`)
//!    and holds the small ones (configmaps, secrets). Defaulting and validation themselves
//!    are pure, in `apimachinery::{defaults, validation}`. `subresources` says what the
//!    `approval` and `ephemeralcontainers` subresources take from a written object.
//! 3. Verbs: `create`, `update` (PUT and PATCH, main resource and subresources) and `delete`,
//!    written once; they call the strategy of the resource written, never a kind by name.
//! 4. Above the verbs, calling them: `pod_subresources` (binding, eviction), `scale` (a
//!    `Scale` written to its parent's `spec.replicas`), `namespace_drain`
//!    (the namespaces the system needs, emptying a terminating namespace) and `crd_cleanup`
//!    (a deleted CRD's custom objects). The verbs only name the cleanup a delete needs
//!    (`Cleanup`); this root starts it, and routes each request.
//!
//! Cleanups that outlive a request run as tasks that end when the backend is dropped.
//!
//! Where kube-apiserver's behaviour depends on machinery this plane does not have:
//! - No garbage collector: `propagationPolicy` is validated but dependents are never deleted
//!   with their owner; `Foreground` acts like `Background`.
//! - A deleted namespace is emptied here (the namespace controller's job): objects get a
//!   default delete, so unscheduled pods go at once and scheduled pods wait for their
//!   kubelet's final delete, exactly as with a client's delete.
//! - A deleted CRD is emptied the same way, held by kube's `customresourcecleanup` finalizer.
//! - Every delete answers the object (last state or marked), never a `Success` status.
//! - A write that changes nothing stores nothing (no new resourceVersion, no watch event).
//! - Server-side apply (`apimachinery::managedfields`) keys lists by their strategic merge
//!   keys and treats custom resources' lists as atomic; an apply of a missing object creates it
//!   (with the create's admission and allocation).

mod meta;
mod vocab;

mod owners;
mod validate;

mod admission;
mod crd;
mod csr;
mod limits;
mod namespace;
mod pods;
mod services;
mod strategy;
mod subresources;
mod workloads;

mod create;
mod delete;
mod update;

mod crd_cleanup;
mod namespace_drain;
mod pod_subresources;
mod scale;

#[cfg(test)]
mod tests;

use std::sync::Arc;

use apimachinery::alloc::ServiceRanges;
use apimachinery::patch::PatchType;
use apimachinery::{ApiError, ResourceInfo};
use bytes::Bytes;
use objstore::Writer;
use serde_json::Value;

use crate::{Backend, DeleteOptions, Registry, WriteRequest};
use delete::Outcome;
use vocab::{Cleanup, Core, Subresource, Target, unsupported};

pub use crd::register_existing_crds;

/// Writes to the local store: uid, resourceVersion (the store revision), creationTimestamp,
/// generateName, generation, optimistic concurrency, status vs spec, graceful pod deletion,
/// finalizers, namespace lifecycle, CRDs registering their resources.
pub struct LocalBackend {
    core: Core,
}

// === impl LocalBackend ===

impl LocalBackend {
    /// A backend writing to `store`, serving `registry`'s resources, allocating Services'
    /// addresses from `ranges`.
    pub fn new(
        store: impl Into<Arc<Writer>>,
        registry: Registry,
        ranges: ServiceRanges,
    ) -> Arc<LocalBackend> {
        let core = Core::new(store.into(), registry, ranges);
        Arc::new(LocalBackend { core })
    }

    /// Creates the namespaces that are missing (`status.phase: Active`), then resumes the
    /// cleanup of namespaces and CRDs a previous run left terminating. Call once at start.
    pub async fn ensure_namespaces(&self, names: &[&str]) -> Result<(), ApiError> {
        namespace_drain::ensure(&self.core, names).await?;
        namespace_drain::resume(&self.core).await?;
        crd_cleanup::resume(&self.core).await
    }

    /// `POST bindings`: the binding of the pod the body names, as `pods/{name}/binding`.
    async fn bind_named(&self, req: &WriteRequest<'_>, obj: Value) -> Result<Value, ApiError> {
        let pods = self.core.registry.get("", "v1", "pods");
        let pods = pods.ok_or_else(|| ApiError::internal("pods are not served"))?;
        let name = obj.pointer("/metadata/name").and_then(Value::as_str);
        let Some(name) = name.filter(|n| !n.is_empty()) else {
            let why = [("metadata.name", "Required value")];
            return Err(ApiError::invalid("", "Binding", "", &why));
        };
        let mut target = self.core.target_for(pods, req.namespace, name);
        target.dry_run = req.dry_run;
        pod_subresources::bind(&self.core, target, obj).await
    }

    /// Starts the cleanup the kind of a committed delete names (emptying a namespace,
    /// deleting a CRD's objects).
    fn start_cleanup(&self, target: &Target, outcome: &Outcome) {
        let Some(cleanup) = strategy::of(&target.info).cleanup() else {
            return;
        };
        let obj = outcome.object();
        let (name, uid) = (meta::name(obj), meta::uid(obj));
        match cleanup {
            Cleanup::DrainNamespace => namespace_drain::spawn(&self.core, name, uid),
            Cleanup::CustomObjects => crd_cleanup::spawn(&self.core, name, uid),
        }
    }
}

/// The REST layer on a fresh store at `path` with the built-in kinds and the `default`
/// namespace, every request made as `system:admin`: how tests drive the API in process
/// (`kapi::router(api)` as a `kube::Client`'s service), without a server. Also returns the
/// store's writer.
pub async fn admin_api(path: &std::path::Path) -> Result<(crate::Api, Arc<Writer>), ApiError> {
    let store = Writer::open(path, Default::default())
        .map_err(|e| ApiError::internal(format!("opening {}: {e}", path.display())))?;
    let store = Arc::new(store);
    let registry = Registry::new(apimachinery::catalog::builtins());
    let backend = LocalBackend::new(store.clone(), registry.clone(), Default::default());
    backend.ensure_namespaces(&["default"]).await?;
    let api = crate::Api {
        registry,
        store: store.reader(),
        backend,
        version: serde_json::json!({"major": "1", "minor": "33", "gitVersion": "v1.33.0"}),
        default_user: Some(crate::User {
            name: "system:admin".into(),
            groups: vec!["system:masters".into()],
        }),
        authorizer: None,
    };
    Ok((api, store))
}

impl Drop for LocalBackend {
    fn drop(&mut self) {
        self.core.shut_down();
    }
}

#[async_trait::async_trait]
impl Backend for LocalBackend {
    async fn create(&self, req: &WriteRequest<'_>, obj: Value) -> Result<Value, ApiError> {
        let target = self.core.target(req);
        let Some(sub) = req.subresource else {
            if is_binding_collection(req) {
                return self.bind_named(req, obj).await;
            }
            return create::create(&self.core, target, obj).await;
        };
        match strategy::of(req.info).subresource(sub) {
            Some(Subresource::Binding) => pod_subresources::bind(&self.core, target, obj).await,
            Some(Subresource::Eviction) => pod_subresources::evict(&self.core, target, obj).await,
            Some(Subresource::Finalize) | None => Err(unsupported("create", req.info, sub)),
        }
    }

    async fn update(&self, req: &WriteRequest<'_>, obj: Value) -> Result<Value, ApiError> {
        if is_scale(req) {
            return scale::update(&self.core, self.core.target(req), obj).await;
        }
        let part = update::Part::of(req.info, req.subresource, "update")?;
        update::update(&self.core, self.core.target(req), part, obj).await
    }

    async fn patch(
        &self,
        req: &WriteRequest<'_>,
        kind: PatchType,
        patch: Bytes,
    ) -> Result<Value, ApiError> {
        if is_scale(req) {
            return scale::patch(&self.core, self.core.target(req), kind, patch).await;
        }
        let part = update::Part::of(req.info, req.subresource, "patch")?;
        update::patch(&self.core, self.core.target(req), part, kind, patch).await
    }

    async fn delete(
        &self,
        req: &WriteRequest<'_>,
        opts: DeleteOptions,
    ) -> Result<(u16, Value), ApiError> {
        if let Some(sub) = req.subresource {
            return Err(unsupported("delete", req.info, sub));
        }
        let target = self.core.target(req);
        let outcome = delete::delete(&self.core, target.clone(), opts).await?;
        if !target.dry_run {
            self.start_cleanup(&target, &outcome);
        }
        Ok((200, delete_answer(req.info, outcome)))
    }
}

/// What a DELETE answers: the object when it is kept (marked for deletion) or its kind
/// returns the deleted object (pods, services), else a `Status` of Success naming it, as
/// kube-apiserver's store answers.
fn delete_answer(info: &ResourceInfo, outcome: Outcome) -> Value {
    let returns_deleted =
        info.group.is_empty() && matches!(info.plural.as_str(), "pods" | "services");
    match outcome {
        Outcome::Removed(obj) if !returns_deleted => {
            let mut details = serde_json::Map::new();
            details.insert("name".into(), obj["metadata"]["name"].clone());
            if !info.group.is_empty() {
                details.insert("group".into(), Value::from(info.group.as_str()));
            }
            details.insert("kind".into(), Value::from(info.plural.as_str()));
            details.insert("uid".into(), obj["metadata"]["uid"].clone());
            apimachinery::status::success(Some(Value::Object(details)))
        }
        outcome => outcome.into_object(),
    }
}

/// A create in the core `bindings` collection (the older form of `pods/{name}/binding`).
fn is_binding_collection(req: &WriteRequest<'_>) -> bool {
    req.info.group.is_empty() && req.info.plural == "bindings"
}

/// A write of the `scale` subresource of a resource that has one.
fn is_scale(req: &WriteRequest<'_>) -> bool {
    req.subresource == Some("scale") && req.info.has_subresource("scale")
}
