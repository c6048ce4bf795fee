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
//! The steps live in submodules: `create`, `update` (PUT and PATCH, main resource and
//! subresources), `delete` (preconditions, finalizers, graceful pod deletion), `pods`
//! (binding, eviction), `namespace` (Terminating and the cascade), `crd` (CRDs register
//! their resources), `validate` and `meta`. Cleanups that outlive a request (emptying a
//! namespace, removing a CRD's objects) run as tasks that end when the backend is dropped.
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
//! - Server-side apply is whatever `apimachinery::patch` supports (415 today); an apply of a
//!   missing object would create it.

mod crd;
mod create;
mod delete;
mod meta;
mod namespace;
mod pods;
mod update;
mod validate;

#[cfg(test)]
mod tests;

use std::collections::HashSet;
use std::sync::{Arc, Mutex, PoisonError};

use apimachinery::fields::{labels_of, selectable_fields};
use apimachinery::patch::PatchType;
use apimachinery::{ApiError, ResourceInfo};
use bytes::Bytes;
use objstore::{
    Applied, ListOptions, Mutation, NewObject, ObjKey, StoreError, StoredObject, Writer,
};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::{Backend, DeleteOptions, Registry, WriteRequest};

pub use crd::register_existing_crds;

/// Writes to the local store: uid, resourceVersion (the store revision), creationTimestamp,
/// generateName, generation, optimistic concurrency, status vs spec, graceful pod deletion,
/// finalizers, namespace lifecycle, CRDs registering their resources.
pub struct LocalBackend {
    core: Core,
}

/// What every step needs; cheap to clone into cleanup tasks.
#[derive(Clone)]
struct Core {
    store: Arc<Writer>,
    registry: Registry,
    /// Cancelled when the [`LocalBackend`] is dropped: ends the cleanup tasks.
    shutdown: CancellationToken,
    /// Namespaces and CRDs with a cleanup task running, so a repeated delete starts no second.
    cleanups: Arc<Mutex<HashSet<ObjKey>>>,
}

/// The object a write is about, owned so it can move into a store closure.
#[derive(Clone)]
struct Target {
    info: Arc<ResourceInfo>,
    /// `""` for cluster-scoped resources.
    namespace: String,
    /// `""` for a create (the body names the object).
    name: String,
    dry_run: bool,
    /// For checks against the served resources (a CRD may not shadow a built-in).
    registry: Registry,
}

/// Kinds whose writes do more than the generic rules.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Special {
    Pod,
    Namespace,
    Crd,
    None,
}

/// The objects a write read next to its own, in the same transaction (see [`Core::mutate`]).
type Parents = [Option<StoredObject>];

/// One item of a `mutate_many` batch: parents answer `None`, the object's own step `Some`.
type Step<T> =
    Box<dyn FnOnce(Option<&StoredObject>, u64) -> Result<(Mutation, Option<T>), ApiError> + Send>;

// === impl LocalBackend ===

impl LocalBackend {
    pub fn new(store: impl Into<Arc<Writer>>, registry: Registry) -> Arc<LocalBackend> {
        let core = Core {
            store: store.into(),
            registry,
            shutdown: CancellationToken::new(),
            cleanups: Arc::default(),
        };
        Arc::new(LocalBackend { core })
    }

    /// Creates the namespaces that are missing (`status.phase: Active`), then resumes the
    /// cleanup of namespaces and CRDs a previous run left terminating. Call once at start.
    pub async fn ensure_namespaces(&self, names: &[&str]) -> Result<(), ApiError> {
        namespace::ensure(&self.core, names).await?;
        namespace::resume(&self.core).await?;
        crd::resume(&self.core).await
    }
}

impl Drop for LocalBackend {
    fn drop(&mut self) {
        self.core.shutdown.cancel();
    }
}

#[async_trait::async_trait]
impl Backend for LocalBackend {
    async fn create(&self, req: &WriteRequest<'_>, obj: Value) -> Result<Value, ApiError> {
        let target = self.core.target(req);
        match (req.subresource, special(req.info)) {
            (None, _) => create::create(&self.core, target, obj).await,
            (Some("binding"), Special::Pod) => pods::bind(&self.core, target, obj).await,
            (Some("eviction"), Special::Pod) => pods::evict(&self.core, target, obj).await,
            (Some(sub), _) => Err(unsupported("create", req.info, sub)),
        }
    }

    async fn update(&self, req: &WriteRequest<'_>, obj: Value) -> Result<Value, ApiError> {
        let part = update::Part::of(req.info, req.subresource, "update")?;
        update::update(&self.core, self.core.target(req), part, obj).await
    }

    async fn patch(
        &self,
        req: &WriteRequest<'_>,
        kind: PatchType,
        patch: Bytes,
    ) -> Result<Value, ApiError> {
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
        let obj = delete::delete(&self.core, self.core.target(req), opts).await?;
        Ok((200, obj))
    }
}

// === impl Core ===

impl Core {
    fn target(&self, req: &WriteRequest<'_>) -> Target {
        Target {
            info: Arc::new(req.info.clone()),
            namespace: req.namespace.to_owned(),
            name: req.name.to_owned(),
            dry_run: req.dry_run,
            registry: self.registry.clone(),
        }
    }

    /// A target for cleanup work on `info`'s object `namespace/name`.
    fn target_for(&self, info: Arc<ResourceInfo>, namespace: &str, name: &str) -> Target {
        Target {
            info,
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            dry_run: false,
            registry: self.registry.clone(),
        }
    }

    /// Commits `edit` as `part` to the cluster-scoped object `name` of `group`/v1/`plural`, if it
    /// still has `uid`; an object that is gone, or was deleted and created again, is left alone.
    async fn edit_if_same(
        &self,
        (group, plural): (&str, &str),
        name: &str,
        uid: &str,
        part: update::Part,
        edit: impl FnOnce(&mut Value) + Send + 'static,
    ) -> Result<(), ApiError> {
        let info = self.registry.get(group, "v1", plural).ok_or_else(|| {
            ApiError::internal(format!("{plural} are not among the served resources"))
        })?;
        let target = self.target_for(info, "", name);
        let uid = uid.to_owned();
        self.mutate(vec![], target.key(), move |current, revision, _| {
            let Some(current) = current else {
                return Ok((Mutation::Keep, ()));
            };
            let current = parse(current)?;
            if meta::uid(&current) != uid {
                return Ok((Mutation::Keep, ()));
            }
            let mut next = current.clone();
            edit(&mut next);
            let (mutation, _) = update::commit(&target, part, &current, next, revision)?;
            Ok((mutation, ()))
        })
        .await?;
        Ok(())
    }

    /// Runs `step` on `key` inside the writer's transaction, after reading `parents` in the
    /// same transaction (their current states are handed to `step`, in order).
    async fn mutate<T, F>(
        &self,
        parents: Vec<ObjKey>,
        key: ObjKey,
        step: F,
    ) -> Result<Applied<T>, ApiError>
    where
        T: Send + 'static,
        F: FnOnce(Option<&StoredObject>, u64, &Parents) -> Result<(Mutation, T), ApiError>
            + Send
            + 'static,
    {
        let seen: Arc<Mutex<Vec<Option<StoredObject>>>> = Arc::default();
        let mut items: Vec<(ObjKey, Step<T>)> = Vec::with_capacity(parents.len() + 1);
        for parent in parents {
            let seen = seen.clone();
            let read: Step<T> = Box::new(move |current, _| {
                lock(&seen).push(current.cloned());
                Ok((Mutation::Keep, None))
            });
            items.push((parent, read));
        }
        let own: Step<T> = Box::new(move |current, revision| {
            let parents = std::mem::take(&mut *lock(&seen));
            let (mutation, output) = step(current, revision, &parents)?;
            Ok((mutation, Some(output)))
        });
        items.push((key, own));
        let mut results = self.store.mutate_many(items).await.map_err(store_error)?;
        let own = results
            .pop()
            .ok_or_else(|| ApiError::internal("the object store answered no result"))??;
        match own.output {
            Some(output) => Ok(Applied {
                object: own.object,
                revision: own.revision,
                output,
            }),
            None => Err(ApiError::internal("the object store skipped a write step")),
        }
    }

    async fn get(&self, key: &ObjKey) -> Result<Option<Value>, ApiError> {
        match self.store.get(key).await.map_err(store_error)? {
            Some(stored) => parse(&stored).map(Some),
            None => Ok(None),
        }
    }

    /// Every object of a store resource (in one namespace, when given).
    async fn list(
        &self,
        resource: &str,
        namespace: Option<&str>,
    ) -> Result<Vec<Arc<StoredObject>>, ApiError> {
        let mut opts = ListOptions::new(resource);
        if let Some(ns) = namespace {
            opts = opts.namespace(ns);
        }
        let listed = self.store.list(opts).await.map_err(store_error)?;
        Ok(listed.items)
    }

    /// Runs the cleanup `work` makes for `key` in the background, until it ends or the backend
    /// shuts down, unless a cleanup of `key` already runs.
    fn spawn_cleanup<F, Fut>(&self, key: ObjKey, work: F)
    where
        F: FnOnce(Core) -> Fut,
        Fut: Future<Output = ()> + Send + 'static,
    {
        if !lock(&self.cleanups).insert(key.clone()) {
            return;
        }
        let claim = CleanupClaim {
            cleanups: self.cleanups.clone(),
            key,
        };
        let shutdown = self.shutdown.clone();
        let work = work(self.clone());
        tokio::spawn(async move {
            let _claim = claim;
            tokio::select! {
                biased;
                () = shutdown.cancelled() => {}
                () = work => {}
            }
        });
    }
}

/// Releases a cleanup claim when the cleanup task ends.
struct CleanupClaim {
    cleanups: Arc<Mutex<HashSet<ObjKey>>>,
    key: ObjKey,
}

impl Drop for CleanupClaim {
    fn drop(&mut self) {
        lock(&self.cleanups).remove(&self.key);
    }
}

// === impl Target ===

impl Target {
    fn key(&self) -> ObjKey {
        self.key_named(&self.name)
    }

    fn key_named(&self, name: &str) -> ObjKey {
        ObjKey::new(self.info.store_resource(), self.namespace.clone(), name)
    }

    fn special(&self) -> Special {
        special(&self.info)
    }

    fn has_status_subresource(&self) -> bool {
        self.info.has_subresource("status")
    }

    fn not_found(&self) -> ApiError {
        ApiError::not_found(&self.info.group, &self.info.plural, &self.name)
    }

    /// `metadata.generation` is kept where kube-apiserver keeps it among the served kinds:
    /// pods, CRDs and custom resources (nodes, services, leases, ... have none).
    fn tracks_generation(&self) -> bool {
        self.info.custom || matches!(self.special(), Special::Pod | Special::Crd)
    }

    /// Finishes a write decided in a store closure: the object gets the revision as its
    /// resourceVersion and is stored, or, for a dry run, only answered.
    fn write(&self, obj: &mut Value, revision: u64) -> Result<Mutation, ApiError> {
        if self.dry_run {
            return Ok(Mutation::Keep);
        }
        let rv = revision.to_string();
        meta::set(obj, "resourceVersion", Value::String(rv.clone()));
        let value = serde_json::to_vec(obj)
            .map_err(|e| ApiError::internal(format!("encoding the object: {e}")))?;
        Ok(Mutation::Put(NewObject {
            uid: meta::uid(obj).to_owned(),
            resource_version: rv,
            labels: labels_of(obj),
            fields: selectable_fields(&self.info, obj),
            value: value.into(),
        }))
    }
}

// === helpers ===

fn special(info: &ResourceInfo) -> Special {
    match (info.group.as_str(), info.plural.as_str()) {
        ("", "pods") => Special::Pod,
        ("", "namespaces") => Special::Namespace,
        (crd::GROUP, "customresourcedefinitions") => Special::Crd,
        _ => Special::None,
    }
}

/// The stored JSON of an object.
fn parse(stored: &StoredObject) -> Result<Value, ApiError> {
    serde_json::from_slice(&stored.value)
        .map_err(|e| ApiError::internal(format!("decoding stored {}: {e}", stored.key)))
}

/// A store failure as a 500, with its causes.
fn store_error(e: StoreError) -> ApiError {
    let mut message = e.to_string();
    let mut source = std::error::Error::source(&e);
    while let Some(cause) = source {
        message.push_str(": ");
        message.push_str(&cause.to_string());
        source = cause.source();
    }
    ApiError::internal(message)
}

fn unsupported(verb: &str, info: &ResourceInfo, sub: &str) -> ApiError {
    ApiError::method_not_supported(verb, &format!("{}/{sub}", info.plural))
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}
