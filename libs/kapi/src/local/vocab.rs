//! The vocabulary every layer of `local` shares, importing no other module of it: the
//! [`Core`] a write runs against (store transactions, reads, background cleanups), the
//! [`Target`] it is about, and the [`Strategy`] interface through which a kind takes part in
//! the verbs (Kubernetes' create, update and delete strategies). The strategies themselves
//! sit one layer up, the verbs above them.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, PoisonError};

use apimachinery::alloc::ServiceRanges;
use apimachinery::fields::{labels_of, selectable_fields};
use apimachinery::object::{meta_str, metadata_mut};
use apimachinery::{ApiError, ResourceInfo};
use objstore::{
    Applied, ListOptions, Mutation, NewObject, ObjKey, StoreError, StoredObject, Writer,
};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::{DeleteOptions, Registry, WriteRequest};

/// What every step needs; cheap to clone into cleanup tasks.
#[derive(Clone)]
pub(super) struct Core {
    pub(super) store: Arc<Writer>,
    pub(super) registry: Registry,
    /// Where Services' cluster IPs and node ports come from.
    pub(super) ranges: ServiceRanges,
    /// Cancelled when the backend is dropped: ends the cleanup tasks.
    shutdown: CancellationToken,
    /// Namespaces and CRDs with a cleanup task running, so a repeated delete starts no second.
    cleanups: Arc<Mutex<HashSet<ObjKey>>>,
}

/// The object a write is about, owned so it can move into a store closure.
#[derive(Clone)]
pub(super) struct Target {
    pub(super) info: Arc<ResourceInfo>,
    /// `""` for cluster-scoped resources.
    pub(super) namespace: String,
    /// `""` for a create (the body names the object).
    pub(super) name: String,
    pub(super) dry_run: bool,
    /// For checks against the served resources (a CRD may not shadow a built-in).
    pub(super) registry: Registry,
    /// Who owns the fields written (`metadata.managedFields`).
    pub(super) owner: Owner,
    /// Who writes (`None`: the server's own work, such as cleanups).
    pub(super) user: Option<crate::User>,
}

/// A write's field manager, owned (see [`crate::FieldOwner`]).
#[derive(Clone, Debug, Default)]
pub(super) struct Owner {
    /// `None`: the server's own write, owning nothing.
    pub(super) manager: Option<String>,
    /// Server-side apply takes conflicting fields over.
    pub(super) force: bool,
    /// The subresource written (`status`, `scale`), as the managedFields entry names it.
    pub(super) subresource: Option<String>,
    /// The object comes from a server-side apply, its entries already made.
    pub(super) applying: bool,
}

/// A kind's part in the writes. The verbs are written once and call these hooks on the
/// strategy of the resource written; every default is the generic behaviour, so a kind only
/// says where it differs. The names follow kube-apiserver's registry strategies.
#[async_trait::async_trait]
pub(super) trait Strategy: Send + Sync {
    /// The rule the kind's names follow.
    fn name_rule(&self) -> NameRule {
        NameRule::Subdomain
    }

    /// Whether `metadata.generation` is kept (1 on create, bumped when the spec changes).
    fn tracks_generation(&self) -> bool {
        false
    }

    /// A subresource the kind has beyond `status`.
    fn subresource(&self, _name: &str) -> Option<Subresource> {
        None
    }

    /// PrepareForCreate: fills in what the kind owns on a new object (after the generic
    /// checks and [`Strategy::canonicalize`]), refusing what the kind cannot store.
    fn prepare_create(&self, _target: &Target, _obj: &mut Value) -> Result<(), ApiError> {
        Ok(())
    }

    /// PrepareForUpdate of the main resource: keeps from `current` what an update may not
    /// change, refusing what the kind cannot store.
    fn prepare_update(
        &self,
        _target: &Target,
        _next: &mut Value,
        _current: &Value,
    ) -> Result<(), ApiError> {
        Ok(())
    }

    /// Canonicalize: brings the kind's own data into its stored form and checks it; runs on
    /// every write that stores the object (create, update, patch, subresources, cleanups).
    fn canonicalize(&self, _target: &Target, _obj: &mut Value) -> Result<(), ApiError> {
        Ok(())
    }

    /// ValidateUpdate: refuses an update, patch, apply or subresource write of `current`
    /// into `next` (after [`Strategy::canonicalize`]) that the kind cannot store.
    fn validate_update(
        &self,
        _target: &Target,
        _current: &Value,
        _next: &Value,
    ) -> Result<(), ApiError> {
        Ok(())
    }

    /// Mutating admission of a create, with reads of the store (a pod's service account and
    /// priority class); runs after [`Strategy::prepare_create`], before the transaction.
    async fn admit(
        &self,
        _core: &Core,
        _target: &Target,
        _obj: &mut Value,
    ) -> Result<(), ApiError> {
        Ok(())
    }

    /// The ledger a create of the kind allocates from in its transaction (a Service's
    /// cluster IPs and node ports), read and rewritten with the object.
    fn ledger(&self) -> Option<ObjKey> {
        None
    }

    /// Allocates what a new `obj` needs from `ledger` (`None` before the first allocation),
    /// knowing `owners`, the objects of the kind as read in the same transaction; answers
    /// the ledger to store, if it changed.
    fn allocate(
        &self,
        _core: &Core,
        _target: &Target,
        _obj: &mut Value,
        _ledger: Option<Value>,
        _owners: &[(ObjKey, Option<StoredObject>)],
    ) -> Result<Option<Value>, ApiError> {
        Ok(None)
    }

    /// An object a create reads in its transaction besides the namespace (a custom
    /// resource's CRD); [`Strategy::check_parent`] judges it.
    fn create_parent(&self, _target: &Target) -> Option<ObjKey> {
        None
    }

    /// Refuses a create by the state of its [`Strategy::create_parent`] (`None`: missing).
    fn check_parent(&self, _parent: Option<&StoredObject>) -> Result<(), ApiError> {
        Ok(())
    }

    /// Refuses a delete before anything is read (namespaces the system needs).
    fn check_delete(&self, _target: &Target) -> Result<(), ApiError> {
        Ok(())
    }

    /// CheckGracefulDelete: the seconds `obj` is kept marked before it goes (0: no grace).
    fn grace_seconds(&self, _obj: &Value, _opts: &DeleteOptions) -> i64 {
        0
    }

    /// True when a delete only marks the object, and the kind's cleanup finishes it.
    fn marks_on_delete(&self) -> bool {
        false
    }

    /// What the kind adds to an object a delete marks (a `Terminating` phase or condition).
    fn mark_deleting(&self, _obj: &mut Value) {}

    /// True while the kind itself still holds a marked object, besides
    /// `metadata.finalizers` (a namespace's `spec.finalizers`).
    fn holds_deletion(&self, _obj: &Value) -> bool {
        false
    }

    /// The cleanup a committed delete of the kind starts. The verbs only name it: the
    /// cleanups call the verbs, so they run above them.
    fn cleanup(&self) -> Option<Cleanup> {
        None
    }

    /// AfterCreate/AfterUpdate: work once a write of object `name` is committed.
    async fn after_write(&self, _core: &Core, _name: &str) {}
}

/// Which names a kind accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum NameRule {
    /// Most kinds: a DNS-1123 subdomain.
    Subdomain,
    /// A DNS-1123 label (namespaces).
    Label,
    /// A DNS-1035 label (services: a name becomes a DNS label and an environment variable
    /// prefix).
    Dns1035,
    /// Anything usable as a URL path segment (RBAC kinds: `system:basic-user`).
    PathSegment,
}

/// Subresources that only some kinds have.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Subresource {
    /// `POST pods/{name}/binding`.
    Binding,
    /// `POST pods/{name}/eviction`.
    Eviction,
    /// `PUT namespaces/{name}/finalize`.
    Finalize,
}

/// Work that outlives the delete that starts it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Cleanup {
    /// Empty a terminating namespace, then finalize it.
    DrainNamespace,
    /// Delete a CRD's custom objects, then let the CRD go.
    CustomObjects,
}

/// The objects a write read next to its own, in the same transaction (see [`Core::mutate`]).
pub(super) type Parents = [Option<StoredObject>];

/// One item of a `mutate_many` batch: parents answer `None`, the object's own step `Some`.
type Step<T> =
    Box<dyn FnOnce(Option<&StoredObject>, u64) -> Result<(Mutation, Option<T>), ApiError> + Send>;

// === impl Core ===

impl Core {
    pub(super) fn new(store: Arc<Writer>, registry: Registry, ranges: ServiceRanges) -> Core {
        Core {
            store,
            registry,
            ranges,
            shutdown: CancellationToken::new(),
            cleanups: Arc::default(),
        }
    }

    /// Ends the cleanup tasks (the backend is dropped).
    pub(super) fn shut_down(&self) {
        self.shutdown.cancel();
    }

    pub(super) fn target(&self, req: &WriteRequest<'_>) -> Target {
        Target {
            info: Arc::new(req.info.clone()),
            namespace: req.namespace.to_owned(),
            name: req.name.to_owned(),
            dry_run: req.dry_run,
            registry: self.registry.clone(),
            owner: Owner {
                manager: req.owner.manager.map(str::to_owned),
                force: req.owner.force,
                subresource: req.subresource.map(str::to_owned),
                applying: false,
            },
            user: Some(req.user.clone()),
        }
    }

    /// A target for cleanup work on `info`'s object `namespace/name`.
    pub(super) fn target_for(
        &self,
        info: Arc<ResourceInfo>,
        namespace: &str,
        name: &str,
    ) -> Target {
        Target {
            info,
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            dry_run: false,
            registry: self.registry.clone(),
            owner: Owner::default(),
            user: None,
        }
    }

    /// Runs `step` on `key` inside the writer's transaction, after reading `parents` in the
    /// same transaction (their current states are handed to `step`, in order).
    pub(super) async fn mutate<T, F>(
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

    pub(super) async fn get(&self, key: &ObjKey) -> Result<Option<Value>, ApiError> {
        match self.store.get(key).await.map_err(store_error)? {
            Some(stored) => parse(&stored).map(Some),
            None => Ok(None),
        }
    }

    /// Every object of a store resource (in one namespace, when given).
    pub(super) async fn list(
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
    pub(super) fn spawn_cleanup<F, Fut>(&self, key: ObjKey, work: F)
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
    pub(super) fn key(&self) -> ObjKey {
        self.key_named(&self.name)
    }

    pub(super) fn key_named(&self, name: &str) -> ObjKey {
        ObjKey::new(self.info.store_resource(), self.namespace.clone(), name)
    }

    pub(super) fn has_status_subresource(&self) -> bool {
        self.info.has_subresource("status")
    }

    pub(super) fn not_found(&self) -> ApiError {
        ApiError::not_found(&self.info.group, &self.info.plural, &self.name)
    }

    /// Finishes a write decided in a store closure: the object gets the revision as its
    /// resourceVersion and is stored, or, for a dry run, only answered.
    /// Every object a write stores passes here: one larger than
    /// [`crate::MAX_OBJECT_BYTES`] is refused (413), dry run or not.
    pub(super) fn write(&self, obj: &mut Value, revision: u64) -> Result<Mutation, ApiError> {
        let encode = |obj: &Value| {
            // In Go field order, as reads serve it.
            let value = crate::server::stored_json(obj);
            crate::check_object_size(&self.info, meta_str(obj, "name"), &value)?;
            Ok::<_, ApiError>(value)
        };
        if self.dry_run {
            encode(obj)?;
            return Ok(Mutation::Keep);
        }
        let rv = revision.to_string();
        metadata_mut(obj).insert("resourceVersion".into(), Value::String(rv.clone()));
        let value = encode(obj)?;
        Ok(Mutation::Put(NewObject {
            uid: meta_str(obj, "uid").to_owned(),
            resource_version: rv,
            labels: labels_of(obj),
            fields: selectable_fields(&self.info, obj),
            value: value.into(),
        }))
    }
}

// === helpers ===

/// The store key of namespace `name`.
pub(super) fn namespace_key(name: &str) -> ObjKey {
    ObjKey::new("namespaces", "", name)
}

/// The stored JSON of an object.
pub(super) fn parse(stored: &StoredObject) -> Result<Value, ApiError> {
    serde_json::from_slice(&stored.value)
        .map_err(|e| ApiError::internal(format!("decoding stored {}: {e}", stored.key)))
}

/// A store failure as a 500, with its causes.
pub(super) fn store_error(e: StoreError) -> ApiError {
    let mut message = e.to_string();
    let mut source = std::error::Error::source(&e);
    while let Some(cause) = source {
        message.push_str(": ");
        message.push_str(&cause.to_string());
        source = cause.source();
    }
    ApiError::internal(message)
}

/// 405 for a subresource the resource does not have (or not for `verb`).
pub(super) fn unsupported(verb: &str, info: &ResourceInfo, sub: &str) -> ApiError {
    ApiError::method_not_supported(verb, &format!("{}/{sub}", info.plural))
}

/// 400 when a body names another object than the URL.
pub(super) fn name_mismatch(body: &str, url: &str) -> ApiError {
    ApiError::bad_request(format!(
        "the name of the object ({body}) does not match the name on the URL ({url})"
    ))
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}
