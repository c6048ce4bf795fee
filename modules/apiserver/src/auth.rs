//! Who a request is (the admin token, a service-account token, or a client certificate), what a
//! node may write, and what anyone short of an administrator may read.

use std::sync::Arc;

use apimachinery::ApiError;
use apimachinery::noderules::{NodeRead, NodeRule, NodeWrite, Read, ReadRule};
use apimachinery::patch::PatchType;
use bytes::Bytes;
use kapi::{Authorizer, Backend, DeleteOptions, ReadRequest, User, WriteRequest};
use serde_json::Value;

use crate::tokens::Tokens;

/// The group of cluster administrators.
pub const MASTERS: &str = "system:masters";
/// The group of node identities.
pub const NODES: &str = "system:nodes";

/// Maps credentials to users.
pub struct Authenticator {
    admin_token: String,
    tokens: Tokens,
}

/// Wraps the local backend: administrators write anything; a node writes only what
/// [`apimachinery::noderules`] allows a node; anyone else is refused.
pub struct NodeRestriction {
    pub inner: Arc<dyn Backend>,
    pub store: objstore::Store,
}

/// Who may read what: administrators everything; a node what
/// [`apimachinery::noderules::NodeRead`] allows, looking up its pods in the store; anyone else
/// everything but secrets (until RBAC).
pub struct ReadAuthorizer {
    pub store: objstore::Store,
}

// === impl Authenticator ===

impl Authenticator {
    pub(crate) fn new(admin_token: String, tokens: Tokens) -> Self {
        Authenticator {
            admin_token,
            tokens,
        }
    }

    /// The user of a request: its bearer token (the admin token, else a service-account
    /// token), else its client certificate's identity. A bearer token that is neither is a 401.
    pub async fn user(
        &self,
        authorization: Option<&str>,
        cert_user: Option<&User>,
    ) -> Result<User, ApiError> {
        let Some(token) = authorization.and_then(|h| h.strip_prefix("Bearer ")) else {
            return cert_user.cloned().ok_or_else(ApiError::unauthorized);
        };
        let token = token.trim();
        if constant_time_eq(token.as_bytes(), self.admin_token.as_bytes()) {
            return Ok(User {
                name: "admin".into(),
                groups: vec![MASTERS.into()],
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

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

// === impl NodeRestriction ===

impl NodeRestriction {
    /// Administrators write anything; a node what [`apimachinery::noderules`] allows it; anyone
    /// else nothing. `body` is the object written, if any.
    async fn check(
        &self,
        req: &WriteRequest<'_>,
        verb: &str,
        body: Option<&Value>,
    ) -> Result<(), ApiError> {
        let user = req.user;
        if user.groups.iter().any(|g| g == MASTERS) {
            return Ok(());
        }
        let Some(node) = node_of(user) else {
            let why = format!(
                "User {:?} cannot {verb} resource {:?}: only administrators and nodes may write",
                user.name,
                resource_name(req)
            );
            return Err(ApiError::forbidden(
                &req.info.group,
                &req.info.plural,
                req.name,
                &why,
            ));
        };
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
        self.check(&named, "create", Some(&obj)).await?;
        self.inner.create(req, obj).await
    }

    async fn update(&self, req: &WriteRequest<'_>, obj: Value) -> Result<Value, ApiError> {
        self.check(req, "update", Some(&obj)).await?;
        self.inner.update(req, obj).await
    }

    async fn patch(
        &self,
        req: &WriteRequest<'_>,
        kind: PatchType,
        patch: Bytes,
    ) -> Result<Value, ApiError> {
        self.check(req, "patch", None).await?;
        self.inner.patch(req, kind, patch).await
    }

    async fn delete(
        &self,
        req: &WriteRequest<'_>,
        opts: DeleteOptions,
    ) -> Result<(u16, Value), ApiError> {
        self.check(req, "delete", None).await?;
        self.inner.delete(req, opts).await
    }
}

// === impl ReadAuthorizer ===

#[async_trait::async_trait]
impl Authorizer for ReadAuthorizer {
    async fn authorize_read(&self, req: &ReadRequest<'_>) -> Result<(), ApiError> {
        let user = req.user;
        if user.groups.iter().any(|g| g == MASTERS) {
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
        let Some(node) = node_of(user) else {
            return read.check_other_user(&user.name);
        };
        let asked = NodeRead { node, read };
        match asked.rule() {
            ReadRule::Allowed => Ok(()),
            ReadRule::Denied(e) => Err(e),
            ReadRule::IfPodBound => {
                let bound = self.pod_node(req.namespace, read.target()).await?;
                asked.check_related(bound.as_deref() == Some(node))
            }
            ReadRule::IfReferenced => {
                let found = self.referenced(node, &read).await?;
                asked.check_related(found)
            }
        }
    }
}

impl ReadAuthorizer {
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

fn node_of(user: &User) -> Option<&str> {
    let name = user.name.strip_prefix(pki::NODE_CN_PREFIX)?;
    user.groups.iter().any(|g| g == NODES).then_some(name)
}

fn resource_name(req: &WriteRequest<'_>) -> String {
    match req.subresource {
        Some(sub) => format!("{}/{sub}", req.info.plural),
        None => req.info.plural.clone(),
    }
}
