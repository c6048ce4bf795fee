//! kapi: one Kubernetes REST layer over the object store, used twice: by the embedded control
//! plane in cloudcore (writes applied to the local store by [`local::LocalBackend`]) and by the
//! edge's lwproxy (writes forwarded to the cloud). It knows nothing of which side it runs on:
//! reads (discovery, get, list, watch, tables, OpenAPI) come from the [`objstore::Store`], writes
//! go through a [`Backend`], and who the caller is comes from the request's [`User`] extension.
#![forbid(unsafe_code)]

mod client_limits;
pub mod local;
pub mod nodes;
mod registry;
pub mod serve;
mod server;
mod size;

use std::sync::Arc;

use apimachinery::patch::PatchType;
use apimachinery::selector::FieldSelector;
use apimachinery::{ApiError, ResourceInfo};
use bytes::Bytes;
use serde_json::Value;

pub use client_limits::{ClientLimiter, ClientLimits};
pub use registry::Registry;
pub use serve::{
    Connection, InFlightLimits, Level, PeerCertificate, RemoteAddr, ServeConfig, ServeStats,
    fair_share, serve,
};
pub use server::{ProxyConfig, bad_objects_skipped, metered_router, router, with_proxy};
pub use size::{MAX_OBJECT_BYTES, check_object_size};

/// Who makes a request (from a bearer token or a client certificate, or the local default).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct User {
    /// e.g. `admin`, `system:node:edge-1`.
    pub name: String,
    /// e.g. `system:masters`, `system:nodes`.
    pub groups: Vec<String>,
}

/// One write, as the REST layer parsed it.
#[derive(Clone, Debug)]
pub struct WriteRequest<'a> {
    pub info: &'a ResourceInfo,
    /// `""` for cluster-scoped resources.
    pub namespace: &'a str,
    /// The object name from the URL; `""` for a create (the body names it, or `generateName`).
    pub name: &'a str,
    /// `status`, `binding`, `finalize`, ... or `None` for the main resource.
    pub subresource: Option<&'a str>,
    pub user: &'a User,
    /// `dryRun=All`: validate and answer, store nothing.
    pub dry_run: bool,
    /// Whose fields the write sets (`metadata.managedFields`).
    pub owner: FieldOwner<'a>,
    /// One delete of a `deletecollection`: authorized as `deletecollection` of the collection
    /// (as kube-apiserver authorizes it), not as `delete` of the object.
    pub collection: bool,
}

/// The field manager of a write (`?fieldManager=`, else the User-Agent's program name) and
/// `?force=true` (server-side apply takes conflicting fields over). No manager: the server's
/// own writes, which own no fields.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FieldOwner<'a> {
    pub manager: Option<&'a str>,
    pub force: bool,
}

/// The `DeleteOptions` of a delete (body and query parameters merged).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DeleteOptions {
    pub grace_period_seconds: Option<i64>,
    /// `preconditions.uid`.
    pub uid: Option<String>,
    /// `preconditions.resourceVersion`.
    pub resource_version: Option<String>,
    /// `Orphan`, `Background`, `Foreground`.
    pub propagation_policy: Option<String>,
}

/// Where writes go. Implementations: [`local::LocalBackend`] (the embedded control plane),
/// and lwproxy's forwarder (the edge).
#[async_trait::async_trait]
pub trait Backend: Send + Sync + 'static {
    /// Creates `obj`; returns it as stored (201).
    async fn create(&self, req: &WriteRequest<'_>, obj: Value) -> Result<Value, ApiError>;
    /// Replaces the object (or its subresource); returns it as stored (200).
    async fn update(&self, req: &WriteRequest<'_>, obj: Value) -> Result<Value, ApiError>;
    /// Patches the object (or its subresource); returns it as stored (200).
    async fn patch(
        &self,
        req: &WriteRequest<'_>,
        kind: PatchType,
        patch: Bytes,
    ) -> Result<Value, ApiError>;
    /// Deletes the object. Returns the object (marked for graceful deletion, or as it was when
    /// removed) or a `Status`, as kube-apiserver answers for the kind (200 or 202).
    async fn delete(
        &self,
        req: &WriteRequest<'_>,
        opts: DeleteOptions,
    ) -> Result<(u16, Value), ApiError>;
}

/// One read (get, list or watch) of a resource, as the REST layer resolved it, for an
/// [`Authorizer`].
#[derive(Clone, Copy, Debug)]
pub struct ReadRequest<'a> {
    pub user: &'a User,
    /// `get`, `list` or `watch`.
    pub verb: &'a str,
    pub info: &'a ResourceInfo,
    /// `""`: cluster-scoped, or across all namespaces.
    pub namespace: &'a str,
    /// The object named in the URL (`""`: a collection).
    pub name: &'a str,
    /// `status`, ... or `None` for the main resource.
    pub subresource: Option<&'a str>,
    /// The `fieldSelector`, when there is one and it parses (one that does not is refused
    /// later, with a 400).
    pub field_selector: Option<&'a FieldSelector>,
}

/// Decides whether a user may read, and fetch the non-resource paths (discovery, `/version`,
/// OpenAPI). Writes are the [`Backend`]'s to check.
#[async_trait::async_trait]
pub trait Authorizer: Send + Sync + 'static {
    /// `Ok` to serve the read, else the error to answer (a 403 `Status`).
    async fn authorize_read(&self, req: &ReadRequest<'_>) -> Result<(), ApiError>;

    /// `Ok` to serve `verb` (`get`) on non-resource `path` (`/api`, `/version`, ...), else the
    /// error to answer. By default anyone may.
    async fn authorize_non_resource(
        &self,
        _user: &User,
        _verb: &str,
        _path: &str,
    ) -> Result<(), ApiError> {
        Ok(())
    }
}

/// Everything the REST handlers need.
#[derive(Clone)]
pub struct Api {
    pub registry: Registry,
    pub store: objstore::Store,
    pub backend: Arc<dyn Backend>,
    /// `/version` answer (`gitVersion` etc.).
    pub version: Value,
    /// The user when a request carries none (lwproxy on loopback: a local admin).
    pub default_user: Option<User>,
    /// Who may read what (`None`: every user reads everything, as at lwproxy, whose store
    /// holds only what its node may read).
    pub authorizer: Option<Arc<dyn Authorizer>>,
}
