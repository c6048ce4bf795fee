//! Who a request is (the admin token, a service-account token, a client certificate, or
//! anonymous), and whether it may do what it asks: `system:masters` anything; a node what the
//! Node authorizer rules ([`apimachinery::noderules`]) allow it, OR what RBAC grants it; anyone
//! else what RBAC grants ([`crate::rbac`]), as kube-apiserver's `--authorization-mode=Node,RBAC`.

use std::sync::Arc;

use apimachinery::ApiError;
use apimachinery::noderules::{NodeRead, NodeRule, NodeWrite, Read, ReadRule};
use apimachinery::patch::PatchType;
use apimachinery::rbac::{self, Request};
use axum::http::HeaderMap;
use bytes::Bytes;
use kapi::{Authorizer, Backend, DeleteOptions, ReadRequest, User, WriteRequest};
use serde_json::Value;

use crate::rbac::Rbac;
use crate::tokens::Tokens;

/// The group of cluster administrators.
pub const MASTERS: &str = "system:masters";
/// The group of node identities.
pub const NODES: &str = "system:nodes";

/// Maps credentials to users, and lets a user act as another (impersonation) if RBAC lets it.
pub struct Authenticator {
    admin_token: String,
    tokens: Tokens,
    rbac: Rbac,
}

/// Wraps the backend: administrators write anything; a node what [`apimachinery::noderules`]
/// allows a node or RBAC grants it; anyone else what RBAC grants.
pub struct NodeRestriction {
    pub inner: Arc<dyn Backend>,
    pub store: objstore::Store,
    pub(crate) rbac: Rbac,
}

/// Who may read what: administrators everything; a node what
/// [`apimachinery::noderules::NodeRead`] allows (looking up its pods in the store) or RBAC
/// grants; anyone else what RBAC grants. Non-resource paths (discovery, `/version`, OpenAPI)
/// are RBAC's `nonResourceURLs` rules.
pub struct ReadAuthorizer {
    pub store: objstore::Store,
    pub(crate) rbac: Rbac,
}

// === impl Authenticator ===

impl Authenticator {
    pub(crate) fn new(admin_token: String, tokens: Tokens, rbac: Rbac) -> Self {
        Authenticator {
            admin_token,
            tokens,
            rbac,
        }
    }

    /// The user a request acts as: `user`, or the one its `Impersonate-User` and
    /// `Impersonate-Group` headers name, if `user` may `impersonate` that user (a service
    /// account: `serviceaccounts`; else `users`) and each group (`groups`). An impersonated
    /// service account is in its groups unless groups are named; every impersonated user is
    /// in `system:authenticated`.
    pub async fn acting_as(&self, user: User, headers: &HeaderMap) -> Result<User, ApiError> {
        let values = |name: &str| -> Vec<String> {
            headers
                .get_all(name)
                .iter()
                .filter_map(|v| v.to_str().ok())
                .map(str::to_owned)
                .collect()
        };
        let groups = values("impersonate-group");
        let Some(name) = values("impersonate-user").into_iter().next() else {
            if groups.is_empty() {
                return Ok(user);
            }
            return Err(ApiError::bad_request(format!(
                "requested {groups:?} without impersonating a user"
            )));
        };
        let account = name
            .strip_prefix("system:serviceaccount:")
            .and_then(|rest| rest.split_once(':'));
        let target = match account {
            Some((ns, sa)) => ("serviceaccounts", ns, sa),
            None => ("users", "", name.as_str()),
        };
        self.may_impersonate(&user, target).await?;
        for group in &groups {
            self.may_impersonate(&user, ("groups", "", group)).await?;
        }
        let groups = match account {
            Some((ns, _)) if groups.is_empty() => vec![
                "system:serviceaccounts".into(),
                format!("system:serviceaccounts:{ns}"),
            ],
            _ => groups,
        };
        Ok(authenticated(User { name, groups }))
    }

    async fn may_impersonate(
        &self,
        user: &User,
        (resource, namespace, name): (&str, &str, &str),
    ) -> Result<(), ApiError> {
        let request = Request::Resource {
            group: "",
            resource,
            subresource: None,
            namespace,
            name,
        };
        if is_master(user) || self.rbac.allows(user, "impersonate", request).await? {
            return Ok(());
        }
        Err(crate::rbac::forbidden(&user.name, "impersonate", &request))
    }

    /// The user of a request: its bearer token (the admin token, else a service-account
    /// token), else its client certificate's identity, else `system:anonymous` (group
    /// `system:unauthenticated`). A bearer token that is neither is a 401. Every
    /// authenticated user is in `system:authenticated`.
    pub async fn user(
        &self,
        authorization: Option<&str>,
        cert_user: Option<&User>,
    ) -> Result<User, ApiError> {
        let Some(token) = authorization.and_then(|h| h.strip_prefix("Bearer ")) else {
            return Ok(match cert_user {
                Some(user) => authenticated(user.clone()),
                None => User {
                    name: rbac::ANONYMOUS.into(),
                    groups: vec![rbac::UNAUTHENTICATED.into()],
                },
            });
        };
        let token = token.trim();
        if constant_time_eq(token.as_bytes(), self.admin_token.as_bytes()) {
            return Ok(User {
                name: "admin".into(),
                groups: vec![MASTERS.into(), rbac::AUTHENTICATED.into()],
            });
        }
        match self
            .tokens
            .user(token, apimachinery::time::now_unix())
            .await
        {
            Ok(user) => Ok(user),
            Err(e) => {
                tracing::debug!(error = %e, "bearer token refused");
                Err(ApiError::unauthorized())
            }
        }
    }
}

// === impl Authenticator (reviews) ===

impl Authenticator {
    /// Who bearer `token` is for a TokenReview asking about `audiences` (none: the API's), and
    /// the audiences it is valid for among them (`status.audiences`). The admin token is not
    /// audience-aware: it is valid for the API's audience only.
    pub(crate) async fn review(
        &self,
        token: &str,
        audiences: &[&str],
    ) -> Result<(User, Vec<String>), ApiError> {
        let api = crate::tokens::API_AUDIENCE;
        let audiences = match audiences {
            [] => &[api][..],
            given => given,
        };
        if constant_time_eq(token.as_bytes(), self.admin_token.as_bytes()) {
            if !audiences.contains(&api) {
                return Err(ApiError::unauthorized());
            }
            let user = self.user(Some(&format!("Bearer {token}")), None).await?;
            return Ok((user, vec![api.to_owned()]));
        }
        let now = apimachinery::time::now_unix();
        self.tokens
            .user_for(token, now, audiences)
            .await
            .map_err(|e| {
                tracing::debug!(error = %e, "reviewed token refused");
                ApiError::unauthorized()
            })
    }
}

/// The user a client certificate names: CN is the user, each O a group.
pub fn user_from_cert(cert: &rustls::pki_types::CertificateDer<'_>) -> Option<User> {
    if let Some(node) = pki::node_name(cert) {
        return Some(User {
            name: format!("{}{node}", pki::NODE_CN_PREFIX),
            groups: vec![NODES.into()],
        });
    }
    pki::subject(cert).map(|(cn, groups)| User { name: cn, groups })
}

/// `user` with `system:authenticated` among its groups.
fn authenticated(mut user: User) -> User {
    if !user.groups.iter().any(|g| g == rbac::AUTHENTICATED) {
        user.groups.push(rbac::AUTHENTICATED.into());
    }
    user
}

/// Whether `user` is an administrator (`system:masters`).
pub(crate) fn is_master(user: &User) -> bool {
    user.groups.iter().any(|g| g == MASTERS)
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

// === impl NodeRestriction ===

impl NodeRestriction {
    /// Administrators write anything; a node what [`apimachinery::noderules`] allows it or
    /// RBAC grants; anyone else what RBAC grants. `named` carries the object's name (for a
    /// create, the body's: the node rules need it); RBAC is asked about `req` (a create names
    /// no object, as in Kubernetes). `body` is the object written, if any.
    async fn check(
        &self,
        req: &WriteRequest<'_>,
        named: &WriteRequest<'_>,
        verb: &str,
        body: Option<&Value>,
    ) -> Result<(), ApiError> {
        let user = req.user;
        if is_master(user) {
            return Ok(());
        }
        let by_node = match node_of(user) {
            Some(node) => Some(self.node_rule(named, node, verb, body).await),
            None => None,
        };
        if let Some(Ok(())) = by_node {
            return Ok(());
        }
        let request = Request::Resource {
            group: &req.info.group,
            resource: &req.info.plural,
            subresource: req.subresource,
            namespace: req.namespace,
            name: req.name,
        };
        if self.rbac.allows(user, verb, request).await? {
            return Ok(());
        }
        match by_node {
            Some(Err(e)) => Err(e),
            _ => Err(crate::rbac::forbidden(&user.name, verb, &request)),
        }
    }

    /// RBAC's escalation check of a role or binding written by anyone but an administrator.
    async fn check_escalation(&self, req: &WriteRequest<'_>, obj: &Value) -> Result<(), ApiError> {
        match escalation_checked(req) {
            true => self.rbac.check_escalation(req, obj).await,
            false => Ok(()),
        }
    }

    /// What the node rules say of `node`'s write.
    async fn node_rule(
        &self,
        req: &WriteRequest<'_>,
        node: &str,
        verb: &str,
        body: Option<&Value>,
    ) -> Result<(), ApiError> {
        let asked = NodeWrite {
            node,
            verb,
            group: &req.info.group,
            resource: &req.info.plural,
            namespace: req.namespace,
            name: req.name,
            subresource: req.subresource,
            body,
        };
        match asked.rule() {
            NodeRule::Allowed => Ok(()),
            NodeRule::Denied(e) => Err(e),
            NodeRule::IfPodBound => {
                let bound = self.pod_node(req.namespace, asked.bound_pod()).await?;
                asked.check_bound(bound.as_deref())
            }
        }
    }

    /// The node pod `namespace/name` is bound to (`""`: not scheduled; `None`: no such pod).
    async fn pod_node(&self, namespace: &str, name: &str) -> Result<Option<String>, ApiError> {
        pod_node(&self.store, namespace, name).await
    }

    /// NodeRestriction's label and taint rules for `node`'s write that leaves its Node as
    /// `next` (a dry run of the write).
    async fn check_node_change(
        &self,
        req: &WriteRequest<'_>,
        node: &str,
        next: &Value,
    ) -> Result<(), ApiError> {
        let current = stored_object(&self.store, "nodes", "", req.name).await?;
        node_change(node, current.as_ref(), next)
    }
}

/// The node writing, when a node writes a Node (its own: the node rules allow no other).
fn own_node_writer<'a>(req: &WriteRequest<'a>) -> Option<&'a str> {
    let nodes = req.info.group.is_empty() && req.info.plural == "nodes";
    nodes.then(|| node_of(req.user)).flatten()
}

/// `req` as a dry run: the object as the write would leave it, nothing stored.
fn preview<'a>(req: &WriteRequest<'a>) -> WriteRequest<'a> {
    WriteRequest {
        dry_run: true,
        ..req.clone()
    }
}

/// [`noderules::node_change_refusal`] as the API's 403.
fn node_change(node: &str, current: Option<&Value>, next: &Value) -> Result<(), ApiError> {
    match apimachinery::noderules::node_change_refusal(node, current, next) {
        None => Ok(()),
        Some(why) => Err(ApiError::forbidden("", "nodes", node, &why)),
    }
}

#[async_trait::async_trait]
impl Backend for NodeRestriction {
    async fn create(&self, req: &WriteRequest<'_>, obj: Value) -> Result<Value, ApiError> {
        // A create names its object in the body; a subresource create (a token, a binding)
        // names the parent in the URL.
        let name = match req.name {
            "" => obj["metadata"]["name"].as_str().unwrap_or(""),
            name => name,
        };
        let named = WriteRequest {
            name,
            ..req.clone()
        };
        self.check(req, &named, "create", Some(&obj)).await?;
        self.check_escalation(req, &obj).await?;
        if let Some(node) = own_node_writer(req) {
            node_change(node, None, &obj)?;
        }
        self.inner.create(req, obj).await
    }

    async fn update(&self, req: &WriteRequest<'_>, obj: Value) -> Result<Value, ApiError> {
        self.check(req, req, "update", Some(&obj)).await?;
        self.check_escalation(req, &obj).await?;
        if let Some(node) = own_node_writer(req) {
            let next = self.inner.update(&preview(req), obj.clone()).await?;
            self.check_node_change(req, node, &next).await?;
        }
        self.inner.update(req, obj).await
    }

    async fn patch(
        &self,
        req: &WriteRequest<'_>,
        kind: PatchType,
        patch: Bytes,
    ) -> Result<Value, ApiError> {
        self.check(req, req, "patch", None).await?;
        if escalation_checked(req) {
            // The escalation check needs the object as patched: a dry run first.
            let patched = self.inner.patch(&preview(req), kind, patch.clone()).await?;
            self.rbac.check_escalation(req, &patched).await?;
        }
        if let Some(node) = own_node_writer(req) {
            let next = self.inner.patch(&preview(req), kind, patch.clone()).await?;
            self.check_node_change(req, node, &next).await?;
        }
        self.inner.patch(req, kind, patch).await
    }

    async fn delete(
        &self,
        req: &WriteRequest<'_>,
        opts: DeleteOptions,
    ) -> Result<(u16, Value), ApiError> {
        if req.collection {
            // A deletecollection is allowed or not for the collection as a whole.
            let collection = WriteRequest {
                name: "",
                ..req.clone()
            };
            self.check(&collection, req, "deletecollection", None)
                .await?;
        } else {
            self.check(req, req, "delete", None).await?;
        }
        self.inner.delete(req, opts).await
    }
}

// === impl ReadAuthorizer ===

#[async_trait::async_trait]
impl Authorizer for ReadAuthorizer {
    async fn authorize_read(&self, req: &ReadRequest<'_>) -> Result<(), ApiError> {
        let user = req.user;
        if is_master(user) {
            return Ok(());
        }
        let read = Read {
            verb: req.verb,
            group: &req.info.group,
            resource: &req.info.plural,
            namespace: req.namespace,
            name: req.name,
            subresource: req.subresource,
            field_selector: req.field_selector,
        };
        let by_node = match node_of(user) {
            Some(node) => Some(self.node_read(NodeRead { node, read }).await),
            None => None,
        };
        if let Some(Ok(())) = by_node {
            return Ok(());
        }
        let request = Request::Resource {
            group: read.group,
            resource: read.resource,
            subresource: read.subresource,
            namespace: read.namespace,
            // A list or watch of one object by `metadata.name` is about that object, as in
            // Kubernetes (for `resourceNames`).
            name: read.target(),
        };
        if self.rbac.allows(user, read.verb, request).await? {
            return Ok(());
        }
        match by_node {
            Some(Err(e)) => Err(e),
            _ => Err(read.forbidden(&user.name, "")),
        }
    }

    async fn authorize_non_resource(
        &self,
        user: &User,
        verb: &str,
        path: &str,
    ) -> Result<(), ApiError> {
        let request = Request::NonResource { path };
        if is_master(user) || self.rbac.allows(user, verb, request).await? {
            return Ok(());
        }
        Err(crate::rbac::forbidden(&user.name, verb, &request))
    }
}

impl ReadAuthorizer {
    /// What the node rules say of a node's read, looking up its pods as they ask.
    async fn node_read(&self, asked: NodeRead<'_>) -> Result<(), ApiError> {
        let read = asked.read;
        match asked.rule() {
            ReadRule::Allowed => Ok(()),
            ReadRule::Denied(e) => Err(e),
            ReadRule::IfPodBound => {
                let bound = self.pod_node(read.namespace, read.target()).await?;
                asked.check_related(bound.as_deref() == Some(asked.node))
            }
            ReadRule::IfReferenced => {
                let found = self.referenced(asked.node, &read).await?;
                asked.check_related(found)
            }
        }
    }

    /// The node pod `namespace/name` is bound to (`""`: not scheduled; `None`: no such pod).
    async fn pod_node(&self, namespace: &str, name: &str) -> Result<Option<String>, ApiError> {
        pod_node(&self.store, namespace, name).await
    }

    /// Whether a pod bound to `node` in the read's namespace references the object it names
    /// ([`apimachinery::podrefs::readable`]).
    async fn referenced(&self, node: &str, read: &Read<'_>) -> Result<bool, ApiError> {
        let wanted = (read.resource, read.target().to_owned());
        let opts = objstore::ListOptions {
            resource: "pods".into(),
            filter: objstore::Filter {
                namespace: Some(read.namespace.to_owned()),
                field: Some(("spec.nodeName".into(), node.to_owned())),
                ..objstore::Filter::default()
            },
            ..objstore::ListOptions::default()
        };
        let pods = self
            .store
            .list(opts)
            .await
            .map_err(|e| ApiError::internal(e.to_string()))?;
        for pod in &pods.items {
            let pod: Value = serde_json::from_slice(&pod.value)
                .map_err(|e| ApiError::internal(e.to_string()))?;
            // The field index is a hint: check the binding on the object itself.
            let bound = pod["spec"]["nodeName"].as_str() == Some(node);
            if bound && apimachinery::podrefs::readable(&pod).contains(&wanted) {
                return Ok(true);
            }
        }
        Ok(false)
    }
}

/// The node pod `namespace/name` is bound to (`""`: not scheduled; `None`: no such pod).
async fn pod_node(
    store: &objstore::Store,
    namespace: &str,
    name: &str,
) -> Result<Option<String>, ApiError> {
    let pod = stored_object(store, "pods", namespace, name).await?;
    Ok(pod.map(|p| {
        p["spec"]["nodeName"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }))
}

/// The stored object `namespace/name` of store resource `resource` (`pods`, ...), as JSON.
pub(crate) async fn stored_object(
    store: &objstore::Store,
    resource: &str,
    namespace: &str,
    name: &str,
) -> Result<Option<Value>, ApiError> {
    let key = objstore::ObjKey::new(resource, namespace, name);
    let Some(found) = store
        .get(&key)
        .await
        .map_err(|e| ApiError::internal(e.to_string()))?
    else {
        return Ok(None);
    };
    let obj =
        serde_json::from_slice(&found.value).map_err(|e| ApiError::internal(e.to_string()))?;
    Ok(Some(obj))
}

/// Whether a write is one RBAC's escalation check applies to: a role or binding, written by
/// anyone but an administrator.
fn escalation_checked(req: &WriteRequest<'_>) -> bool {
    req.info.group == rbac::GROUP && req.subresource.is_none() && !is_master(req.user)
}

fn node_of(user: &User) -> Option<&str> {
    let name = user.name.strip_prefix(pki::NODE_CN_PREFIX)?;
    user.groups.iter().any(|g| g == NODES).then_some(name)
}
