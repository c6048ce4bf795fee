//! The review APIs, create-only and never stored: each create is answered with the request
//! and its `status` filled in.
//! - `authorization.k8s.io/v1` SubjectAccessReview (any user, groups), LocalSubjectAccessReview
//!   (the same, in the URL's namespace), SelfSubjectAccessReview (the caller): may they do
//!   this? (`kubectl auth can-i`). Answered by administrators' group and RBAC; the node rules,
//!   which need the object written, are not consulted.
//! - SelfSubjectRulesReview: the caller's RBAC rules in a namespace (`kubectl auth can-i
//!   --list`).
//! - `authentication.k8s.io/v1` TokenReview: who a token is (the admin token, a
//!   service-account token); SelfSubjectReview: who the caller is (`kubectl auth whoami`).
//!
//! Whether the caller may create a review at all was decided before (the bootstrap role
//! `system:basic-user` lets everyone authenticated create the self reviews).

use std::sync::Arc;

use apimachinery::ApiError;
use apimachinery::patch::PatchType;
use apimachinery::rbac::{Decision, PolicyRule, Request};
use bytes::Bytes;
use kapi::{Backend, DeleteOptions, User, WriteRequest};
use serde_json::{Map, Value, json};

use super::Rbac;
use crate::auth::{Authenticator, is_master};

/// Wraps a backend: answers creates of the review kinds, passes everything else on.
pub(crate) struct Reviews {
    pub(crate) inner: Arc<dyn Backend>,
    pub(crate) rbac: Rbac,
    pub(crate) authenticator: Arc<Authenticator>,
}

/// The review kinds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    SubjectAccess,
    LocalSubjectAccess,
    SelfSubjectAccess,
    SelfSubjectRules,
    Token,
    SelfSubject,
}

// === impl Reviews ===

impl Reviews {
    async fn answer(
        &self,
        kind: Kind,
        req: &WriteRequest<'_>,
        obj: Value,
    ) -> Result<Value, ApiError> {
        let status = match kind {
            Kind::SubjectAccess | Kind::LocalSubjectAccess | Kind::SelfSubjectAccess => {
                self.access(kind, req, &obj).await?
            }
            Kind::SelfSubjectRules => self.rules(req.user, &obj).await?,
            Kind::Token => self.token(&obj).await,
            Kind::SelfSubject => json!({"userInfo": user_info(req.user)}),
        };
        let mut answer = Map::new();
        answer.insert("kind".into(), req.info.kind.clone().into());
        answer.insert("apiVersion".into(), req.info.api_version().into());
        let mut meta = obj.get("metadata").cloned().unwrap_or_else(|| json!({}));
        meta["creationTimestamp"] = Value::Null;
        answer.insert("metadata".into(), meta);
        if kind != Kind::SelfSubject {
            answer.insert(
                "spec".into(),
                obj.get("spec").cloned().unwrap_or_else(|| json!({})),
            );
        }
        answer.insert("status".into(), status);
        Ok(Value::Object(answer))
    }

    /// The status of an access review: whether the subject may do what `spec` asks.
    async fn access(
        &self,
        kind: Kind,
        req: &WriteRequest<'_>,
        obj: &Value,
    ) -> Result<Value, ApiError> {
        let spec = &obj["spec"];
        let (resource, non_resource) =
            (&spec["resourceAttributes"], &spec["nonResourceAttributes"]);
        if resource.is_object() == non_resource.is_object() {
            return Err(invalid(
                req,
                "spec.resourceAttributes",
                "exactly one of nonResourceAttributes or resourceAttributes must be specified",
            ));
        }
        let subject = match kind {
            Kind::SelfSubjectAccess => req.user.clone(),
            _ => subject(req, spec)?,
        };
        if kind == Kind::LocalSubjectAccess {
            let ns = resource["namespace"].as_str().unwrap_or_default();
            if !resource.is_object() || ns != req.namespace {
                return Err(invalid(
                    req,
                    "spec.resourceAttributes.namespace",
                    "must match metadata.namespace",
                ));
            }
        }
        let text = |v: &Value, k: &str| v[k].as_str().unwrap_or_default().to_owned();
        let verb = match resource.is_object() {
            true => text(resource, "verb"),
            false => text(non_resource, "verb"),
        };
        let (group, plural, sub, ns, name, path) = (
            text(resource, "group"),
            text(resource, "resource"),
            text(resource, "subresource"),
            text(resource, "namespace"),
            text(resource, "name"),
            text(non_resource, "path"),
        );
        let request = match resource.is_object() {
            true => Request::Resource {
                group: &group,
                resource: &plural,
                subresource: Some(sub.as_str()).filter(|s| !s.is_empty()),
                namespace: &ns,
                name: &name,
            },
            false => Request::NonResource { path: &path },
        };
        let status = match self.rbac.decide(&subject, &verb, request).await? {
            Decision::Allowed(reason) => json!({"allowed": true, "reason": reason}),
            Decision::NoOpinion if is_master(&subject) => json!({"allowed": true}),
            Decision::NoOpinion => json!({"allowed": false}),
        };
        Ok(status)
    }

    /// The status of a SelfSubjectRulesReview: the caller's rules in `spec.namespace`.
    async fn rules(&self, user: &User, obj: &Value) -> Result<Value, ApiError> {
        let Some(namespace) = obj["spec"]["namespace"].as_str().filter(|n| !n.is_empty()) else {
            return Err(ApiError::bad_request("no namespace on request"));
        };
        let rules = self.rbac.rules_for(user, namespace).await?;
        let (mut resource, mut non_resource) = (Vec::new(), Vec::new());
        for rule in rules {
            match rule.non_resource_urls.is_empty() {
                true => resource.push(resource_rule(rule)),
                false => non_resource.push(json!({
                    "verbs": rule.verbs,
                    "nonResourceURLs": rule.non_resource_urls,
                })),
            }
        }
        Ok(json!({
            "resourceRules": resource,
            "nonResourceRules": non_resource,
            "incomplete": false,
        }))
    }

    /// The status of a TokenReview: who `spec.token` authenticates as, for `spec.audiences`
    /// (the API's when none are given), and which of them it is valid for.
    async fn token(&self, obj: &Value) -> Value {
        let token = obj["spec"]["token"].as_str().unwrap_or_default();
        if token.is_empty() {
            return json!({"authenticated": false, "error": "token is empty"});
        }
        let asked = obj["spec"]["audiences"].as_array().into_iter().flatten();
        let asked: Vec<&str> = asked.filter_map(Value::as_str).collect();
        match self.authenticator.review(token, &asked).await {
            Ok((user, audiences)) => json!({
                "authenticated": true,
                "user": user_info(&user),
                "audiences": audiences,
            }),
            Err(_) => json!({"authenticated": false, "error": "invalid bearer token"}),
        }
    }
}

#[async_trait::async_trait]
impl Backend for Reviews {
    async fn create(&self, req: &WriteRequest<'_>, obj: Value) -> Result<Value, ApiError> {
        match Kind::of(&req.info.group, &req.info.plural) {
            Some(kind) if req.subresource.is_none() => self.answer(kind, req, obj).await,
            _ => self.inner.create(req, obj).await,
        }
    }

    async fn update(&self, req: &WriteRequest<'_>, obj: Value) -> Result<Value, ApiError> {
        self.inner.update(req, obj).await
    }

    async fn patch(
        &self,
        req: &WriteRequest<'_>,
        kind: PatchType,
        patch: Bytes,
    ) -> Result<Value, ApiError> {
        self.inner.patch(req, kind, patch).await
    }

    async fn delete(
        &self,
        req: &WriteRequest<'_>,
        opts: DeleteOptions,
    ) -> Result<(u16, Value), ApiError> {
        self.inner.delete(req, opts).await
    }
}

// === impl Kind ===

impl Kind {
    fn of(group: &str, plural: &str) -> Option<Kind> {
        Some(match (group, plural) {
            ("authorization.k8s.io", "subjectaccessreviews") => Kind::SubjectAccess,
            ("authorization.k8s.io", "localsubjectaccessreviews") => Kind::LocalSubjectAccess,
            ("authorization.k8s.io", "selfsubjectaccessreviews") => Kind::SelfSubjectAccess,
            ("authorization.k8s.io", "selfsubjectrulesreviews") => Kind::SelfSubjectRules,
            ("authentication.k8s.io", "tokenreviews") => Kind::Token,
            ("authentication.k8s.io", "selfsubjectreviews") => Kind::SelfSubject,
            _ => return None,
        })
    }
}

/// The user a (Local)SubjectAccessReview asks about: `spec.user` and `spec.groups`, at least
/// one of them.
fn subject(req: &WriteRequest<'_>, spec: &Value) -> Result<User, ApiError> {
    let name = spec["user"].as_str().unwrap_or_default().to_owned();
    let groups: Vec<String> = spec["groups"]
        .as_array()
        .map(|g| {
            g.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default();
    if name.is_empty() && groups.is_empty() {
        return Err(invalid(
            req,
            "spec.user",
            "at least one of user or group must be specified",
        ));
    }
    Ok(User { name, groups })
}

/// `userInfo` as kube-apiserver writes it.
fn user_info(user: &User) -> Value {
    json!({"username": user.name, "groups": user.groups})
}

fn resource_rule(rule: PolicyRule) -> Value {
    let mut out =
        json!({"verbs": rule.verbs, "apiGroups": rule.api_groups, "resources": rule.resources});
    if !rule.resource_names.is_empty() {
        out["resourceNames"] = json!(rule.resource_names);
    }
    out
}

fn invalid(req: &WriteRequest<'_>, field: &str, why: &str) -> ApiError {
    let detail = format!("Invalid value: \"\": {why}");
    ApiError::invalid(
        &req.info.group,
        &req.info.kind,
        "",
        &[(field, detail.as_str())],
    )
}
