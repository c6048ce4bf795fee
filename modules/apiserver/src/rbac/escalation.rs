//! RBAC's escalation check: a user short of `system:masters` may write a role only with rules
//! it already holds where the role applies (or with the `escalate` verb on it), and bind a role
//! only if it holds the role's rules there (or has the `bind` verb on it), so that the right to
//! write roles and bindings is not the right to everything. A ClusterRole with an
//! `aggregationRule` may gather anything, so writing one takes every right (or `escalate`).

use apimachinery::ApiError;
use apimachinery::rbac::{GROUP, PolicyRule, Request};
use kapi::{User, WriteRequest};
use serde_json::Value;

use super::{CLUSTER_ROLES, ROLES, Rbac};

// === impl Rbac ===

impl Rbac {
    /// `Ok` unless `req` (a create or update of `obj`, an RBAC object) grants more than its
    /// user holds.
    pub(crate) async fn check_escalation(
        &self,
        req: &WriteRequest<'_>,
        obj: &Value,
    ) -> Result<(), ApiError> {
        let (plural, namespace) = (req.info.plural.as_str(), req.namespace);
        let name = obj["metadata"]["name"].as_str().unwrap_or(req.name);
        match plural {
            "roles" | "clusterroles" => {
                let escalate = rbac_request(plural, namespace, name);
                if self.allows(req.user, "escalate", escalate).await? {
                    return Ok(());
                }
                let mut wanted = PolicyRule::of_role(obj);
                if obj.get("aggregationRule").is_some_and(|a| !a.is_null()) {
                    wanted.push(PolicyRule::resource(&["*"], &["*"], &["*"]));
                    wanted.push(PolicyRule::urls(&["*"], &["*"]));
                }
                self.confirm_held(req, name, namespace, &wanted).await
            }
            "rolebindings" | "clusterrolebindings" => {
                let role_name = obj["roleRef"]["name"].as_str().unwrap_or_default();
                let (role_plural, store) = match obj["roleRef"]["kind"].as_str() {
                    Some("Role") => ("roles", ROLES),
                    _ => ("clusterroles", CLUSTER_ROLES),
                };
                let bind = rbac_request(role_plural, namespace, role_name);
                if self.allows(req.user, "bind", bind).await? {
                    return Ok(());
                }
                let role_ns = if role_plural == "roles" {
                    namespace
                } else {
                    ""
                };
                let role = self
                    .object(store, role_ns, role_name)
                    .await?
                    .ok_or_else(|| ApiError::not_found(GROUP, role_plural, role_name))?;
                let wanted = PolicyRule::of_role(&role);
                self.confirm_held(req, name, namespace, &wanted).await
            }
            _ => Ok(()),
        }
    }

    /// `Ok` if the user holds every rule of `wanted` in `namespace`.
    async fn confirm_held(
        &self,
        req: &WriteRequest<'_>,
        name: &str,
        namespace: &str,
        wanted: &[PolicyRule],
    ) -> Result<(), ApiError> {
        let held = self.rules_for(req.user, namespace).await?;
        let missing: Vec<&PolicyRule> = wanted.iter().filter(|r| !r.covered_by(&held)).collect();
        if missing.is_empty() {
            return Ok(());
        }
        let why = not_held(req.user, &missing);
        Err(ApiError::forbidden(GROUP, &req.info.plural, name, &why))
    }
}

fn rbac_request<'a>(plural: &'a str, namespace: &'a str, name: &'a str) -> Request<'a> {
    Request::Resource {
        group: GROUP,
        resource: plural,
        subresource: None,
        namespace,
        name,
    }
}

/// kube-apiserver's words: `user "u" (groups=["g"]) is attempting to grant RBAC permissions
/// not currently held:` and one line per rule.
fn not_held(user: &User, missing: &[&PolicyRule]) -> String {
    let lines: Vec<String> = missing
        .iter()
        .map(|r| match r.non_resource_urls.is_empty() {
            true => format!(
                "{{APIGroups:{:?}, Resources:{:?}, ResourceNames:{:?}, Verbs:{:?}}}",
                r.api_groups, r.resources, r.resource_names, r.verbs
            ),
            false => format!(
                "{{NonResourceURLs:{:?}, Verbs:{:?}}}",
                r.non_resource_urls, r.verbs
            ),
        })
        .collect();
    format!(
        "user {:?} (groups={:?}) is attempting to grant RBAC permissions not currently held:\n{}",
        user.name,
        user.groups,
        lines.join("\n")
    )
}
