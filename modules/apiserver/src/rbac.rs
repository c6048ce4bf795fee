//! RBAC on the embedded control plane: each decision reads the bindings that apply from the
//! store (a local SQLite read), so a binding takes effect, or stops, with the next request.
//! The rule evaluation and the bootstrap policy are [`apimachinery::rbac`]'s; here they meet
//! the store: [`bootstrap`] reconciles the bootstrap roles and bindings at start,
//! [`aggregation`] keeps aggregated ClusterRoles the union of the roles they select (a task,
//! as kube-controller-manager's clusterrole-aggregation controller), [`escalation`] keeps
//! whoever writes roles and bindings from granting more than it holds, and [`reviews`] answers
//! the review APIs (`kubectl auth can-i`, `kubectl auth whoami`).
//!
//! A `deletecollection` reaches the backend as one delete per object, each marked as part of
//! it and authorized as `deletecollection` of the collection, as kube-apiserver authorizes the
//! one request.

pub(crate) mod aggregation;
pub(crate) mod bootstrap;
mod escalation;
mod reviews;

use std::collections::BTreeSet;

use apimachinery::ApiError;
use apimachinery::rbac::{Binding, Decision, Policy, PolicyRule, Request};
use kapi::User;
use serde_json::Value;

pub(crate) use reviews::Reviews;

/// Store collections of the RBAC kinds.
pub(crate) const CLUSTER_ROLES: &str = "clusterroles.rbac.authorization.k8s.io";
pub(crate) const CLUSTER_ROLE_BINDINGS: &str = "clusterrolebindings.rbac.authorization.k8s.io";
pub(crate) const ROLES: &str = "roles.rbac.authorization.k8s.io";
pub(crate) const ROLE_BINDINGS: &str = "rolebindings.rbac.authorization.k8s.io";

/// Decides by the RBAC objects in the store.
#[derive(Clone)]
pub(crate) struct Rbac {
    store: objstore::Store,
}

// === impl Rbac ===

impl Rbac {
    pub(crate) fn new(store: objstore::Store) -> Rbac {
        Rbac { store }
    }

    /// Whether RBAC lets `user` do `verb` on `request`.
    pub(crate) async fn allows(
        &self,
        user: &User,
        verb: &str,
        request: Request<'_>,
    ) -> Result<bool, ApiError> {
        Ok(matches!(
            self.decide(user, verb, request).await?,
            Decision::Allowed(_)
        ))
    }

    /// RBAC's decision, with its reason.
    pub(crate) async fn decide(
        &self,
        user: &User,
        verb: &str,
        request: Request<'_>,
    ) -> Result<Decision, ApiError> {
        let namespace = match request {
            Request::Resource { namespace, .. } if !namespace.is_empty() => Some(namespace),
            _ => None,
        };
        let policy = self.policy(user, namespace).await?;
        Ok(policy.decide(&apimachinery::rbac::Attributes {
            user: &user.name,
            groups: &user.groups,
            verb,
            request,
        }))
    }

    /// The rules `user` holds in `namespace` (`""`: cluster-wide, ClusterRoleBindings only).
    pub(crate) async fn rules_for(
        &self,
        user: &User,
        namespace: &str,
    ) -> Result<Vec<PolicyRule>, ApiError> {
        let scope = Some(namespace).filter(|ns| !ns.is_empty());
        let policy = self.policy(user, scope).await?;
        Ok(policy.rules_for(&user.name, &user.groups, namespace))
    }

    /// The bindings that apply to `user` (ClusterRoleBindings, and RoleBindings of
    /// `namespace`), with the roles they reference.
    async fn policy(&self, user: &User, namespace: Option<&str>) -> Result<Policy, ApiError> {
        let mut bindings = self.bindings(CLUSTER_ROLE_BINDINGS, None, user).await?;
        if let Some(ns) = namespace {
            bindings.extend(self.bindings(ROLE_BINDINGS, Some(ns), user).await?);
        }
        let mut policy = Policy::default();
        let mut seen = BTreeSet::new();
        for b in &bindings {
            let (kind, name, ns) = (&b.role_ref.kind, &b.role_ref.name, &b.namespace);
            if !seen.insert((kind.clone(), ns.clone(), name.clone())) {
                continue;
            }
            match kind.as_str() {
                "ClusterRole" => {
                    if let Some(role) = self.object(CLUSTER_ROLES, "", name).await? {
                        policy
                            .cluster_roles
                            .insert(name.clone(), PolicyRule::of_role(&role));
                    }
                }
                "Role" if !ns.is_empty() => {
                    if let Some(role) = self.object(ROLES, ns, name).await? {
                        let rules = PolicyRule::of_role(&role);
                        policy.roles.insert((ns.clone(), name.clone()), rules);
                    }
                }
                _ => {}
            }
        }
        policy.bindings = bindings;
        Ok(policy)
    }

    /// The bindings in `collection` (of `namespace`, if given) naming `user` or its groups.
    async fn bindings(
        &self,
        collection: &str,
        namespace: Option<&str>,
        user: &User,
    ) -> Result<Vec<Binding>, ApiError> {
        let opts = objstore::ListOptions {
            resource: collection.into(),
            filter: objstore::Filter {
                namespace: namespace.map(str::to_owned),
                ..objstore::Filter::default()
            },
            ..objstore::ListOptions::default()
        };
        let listed = self.store.list(opts).await.map_err(internal)?;
        let mut found = Vec::new();
        for item in &listed.items {
            let obj: Value = serde_json::from_slice(&item.value).map_err(internal)?;
            let Some(binding) = Binding::from_object(&obj) else {
                continue;
            };
            if binding.applies_to(&user.name, &user.groups).is_some() {
                found.push(binding);
            }
        }
        Ok(found)
    }

    async fn object(
        &self,
        collection: &str,
        namespace: &str,
        name: &str,
    ) -> Result<Option<Value>, ApiError> {
        crate::auth::stored_object(&self.store, collection, namespace, name).await
    }
}

/// kube-apiserver's 403: `pods "p" is forbidden: User "u" cannot get resource "pods" in API
/// group "" in the namespace "ns"`, or `forbidden: User "u" cannot get path "/api"`.
pub(crate) fn forbidden(user: &str, verb: &str, request: &Request<'_>) -> ApiError {
    match *request {
        Request::Resource {
            group,
            resource,
            subresource,
            namespace,
            name,
        } => {
            let asked = match subresource {
                Some(sub) => format!("{resource}/{sub}"),
                None => resource.to_owned(),
            };
            let scope = match namespace {
                "" => "at the cluster scope".to_owned(),
                ns => format!("in the namespace {ns:?}"),
            };
            let why = format!(
                "User {user:?} cannot {verb} resource {asked:?} in API group {group:?} {scope}"
            );
            ApiError::forbidden(group, resource, name, &why)
        }
        Request::NonResource { path } => ApiError::new(
            403,
            "Forbidden",
            format!("forbidden: User {user:?} cannot {verb} path {path:?}"),
        ),
    }
}

fn internal(e: impl std::fmt::Display) -> ApiError {
    ApiError::internal(e.to_string())
}
