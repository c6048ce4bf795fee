//! Kubernetes RBAC as pure functions: whether a rule allows a request ([`PolicyRule::allows`]),
//! which bindings apply to a user ([`Binding::applies_to`]), the decision over a set of
//! bindings and the roles they reference ([`Policy::decide`], with the reason kube-apiserver
//! gives), the rules a user holds in a namespace ([`Policy::rules_for`], for
//! SelfSubjectRulesReview), ClusterRole aggregation ([`aggregate`]) and the bootstrap policy
//! kube-apiserver reconciles at start ([`bootstrap`]).
//!
//! Rules are matched as `k8s.io/kubernetes/pkg/apis/rbac/v1` does: `*` matches any verb, group,
//! resource or URL; `*/scale` any resource's `scale` subresource; a resource request's
//! subresource is matched as `<resource>/<sub>`; an empty `resourceNames` matches every name;
//! a non-resource URL rule ending in `*` matches by prefix. RoleBindings grant only within
//! their namespace and never non-resource URLs.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

mod aggregate;
pub mod bootstrap;
mod validate;

pub use aggregate::{aggregate, selector_matches};
pub use validate::{validate, validate_update};

/// The API group of RBAC objects.
pub const GROUP: &str = "rbac.authorization.k8s.io";
/// Every authenticated user is in this group.
pub const AUTHENTICATED: &str = "system:authenticated";
/// Requests without credentials are in this group (as user [`ANONYMOUS`]).
pub const UNAUTHENTICATED: &str = "system:unauthenticated";
/// The user of requests without credentials.
pub const ANONYMOUS: &str = "system:anonymous";

/// One rule of a Role or ClusterRole (`rbac.authorization.k8s.io/v1` `PolicyRule`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PolicyRule {
    #[serde(default)]
    pub verbs: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub api_groups: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resources: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resource_names: Vec<String>,
    #[serde(
        default,
        rename = "nonResourceURLs",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub non_resource_urls: Vec<String>,
}

/// What is asked: a verb on a resource or on a non-resource URL.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Request<'a> {
    Resource {
        group: &'a str,
        /// Plural.
        resource: &'a str,
        subresource: Option<&'a str>,
        /// `""`: cluster-scoped, or across all namespaces.
        namespace: &'a str,
        /// `""`: a collection.
        name: &'a str,
    },
    NonResource {
        path: &'a str,
    },
}

/// A request to authorize: who, which verb, on what.
#[derive(Clone, Copy, Debug)]
pub struct Attributes<'a> {
    pub user: &'a str,
    pub groups: &'a [String],
    pub verb: &'a str,
    pub request: Request<'a>,
}

/// Whom a binding names.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
pub struct Subject {
    pub kind: String,
    pub name: String,
    #[serde(default)]
    pub namespace: String,
}

/// The role a binding grants.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
pub struct RoleRef {
    /// `Role` or `ClusterRole`.
    pub kind: String,
    pub name: String,
}

/// A RoleBinding (`namespace` set) or ClusterRoleBinding (`namespace` empty).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Binding {
    pub name: String,
    pub namespace: String,
    pub role_ref: RoleRef,
    pub subjects: Vec<Subject>,
}

/// Bindings and the roles they reference: everything one decision needs. The caller may load
/// only the bindings that apply to the user and the namespace asked about.
#[derive(Clone, Debug, Default)]
pub struct Policy {
    pub bindings: Vec<Binding>,
    /// ClusterRole rules by name.
    pub cluster_roles: BTreeMap<String, Vec<PolicyRule>>,
    /// Role rules by (namespace, name).
    pub roles: BTreeMap<(String, String), Vec<PolicyRule>>,
}

/// A policy's answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Allowed, with kube-apiserver's reason (`RBAC: allowed by ClusterRoleBinding "x" of
    /// ClusterRole "y" to Group "z"`).
    Allowed(String),
    /// No rule allows it.
    NoOpinion,
}

// === impl PolicyRule ===

impl PolicyRule {
    /// A resource rule.
    pub fn resource(verbs: &[&str], groups: &[&str], resources: &[&str]) -> PolicyRule {
        PolicyRule {
            verbs: strings(verbs),
            api_groups: strings(groups),
            resources: strings(resources),
            ..PolicyRule::default()
        }
    }

    /// A non-resource rule.
    pub fn urls(verbs: &[&str], urls: &[&str]) -> PolicyRule {
        PolicyRule {
            verbs: strings(verbs),
            non_resource_urls: strings(urls),
            ..PolicyRule::default()
        }
    }

    /// Limits a resource rule to these object names.
    pub fn names(mut self, names: &[&str]) -> PolicyRule {
        self.resource_names = strings(names);
        self
    }

    /// The rules of a Role or ClusterRole object (`rules`); rules that do not parse are
    /// skipped, as they grant nothing.
    pub fn of_role(role: &Value) -> Vec<PolicyRule> {
        let Some(rules) = role.get("rules").and_then(Value::as_array) else {
            return Vec::new();
        };
        rules
            .iter()
            .filter_map(|r| serde_json::from_value(r.clone()).ok())
            .collect()
    }

    /// Whether this rule allows `verb` on `request`.
    pub fn allows(&self, verb: &str, request: &Request<'_>) -> bool {
        if !has(&self.verbs, verb) {
            return false;
        }
        match *request {
            Request::Resource {
                group,
                resource,
                subresource,
                name,
                ..
            } => {
                has(&self.api_groups, group)
                    && self.resource_matches(resource, subresource)
                    && (self.resource_names.is_empty()
                        || self.resource_names.iter().any(|n| n == name))
            }
            Request::NonResource { path } => {
                self.non_resource_urls.iter().any(|u| url_matches(u, path))
            }
        }
    }

    fn resource_matches(&self, resource: &str, subresource: Option<&str>) -> bool {
        self.resources.iter().any(|r| match subresource {
            None => r == "*" || r == resource,
            Some(sub) => {
                r == "*"
                    || r.split_once('/') == Some((resource, sub))
                    || r.strip_prefix("*/") == Some(sub)
            }
        })
    }

    /// Whether `owner` together allow everything this rule allows (kube's `Covers`, used to
    /// find the bootstrap rules an existing role is missing). `*` in this rule must be `*` in
    /// the owner's.
    pub fn covered_by(&self, owner: &[PolicyRule]) -> bool {
        if !self.non_resource_urls.is_empty() {
            return self.verbs.iter().all(|verb| {
                self.non_resource_urls.iter().all(|url| {
                    owner.iter().any(|o| {
                        has(&o.verbs, verb)
                            && o.non_resource_urls.iter().any(|u| url_matches(u, url))
                    })
                })
            });
        }
        let names: Vec<&str> = match self.resource_names.is_empty() {
            true => vec![""],
            false => self.resource_names.iter().map(String::as_str).collect(),
        };
        for verb in &self.verbs {
            for group in &self.api_groups {
                for resource in &self.resources {
                    for name in &names {
                        if !owner
                            .iter()
                            .any(|o| o.covers_atom(verb, group, resource, name))
                        {
                            return false;
                        }
                    }
                }
            }
        }
        true
    }

    /// Whether this rule allows `verb` on `resource` (possibly `*` or `<r>/<sub>`) of `group`
    /// named `name` (`""`: every name), taking `*` in the asked values literally.
    fn covers_atom(&self, verb: &str, group: &str, resource: &str, name: &str) -> bool {
        let (res, sub) = match resource.split_once('/') {
            Some((r, s)) => (r, Some(s)),
            None => (resource, None),
        };
        let resource_ok = self.resources.iter().any(|r| r == "*" || r == resource)
            || (res != "*" && self.resource_matches(res, sub));
        let name_ok = self.resource_names.is_empty()
            || (!name.is_empty() && self.resource_names.iter().any(|n| n == name));
        has(&self.verbs, verb) && has(&self.api_groups, group) && resource_ok && name_ok
    }
}

// === impl Subject ===

impl Subject {
    /// Whether this subject names the user or one of its groups. A ServiceAccount subject
    /// without a namespace means one in the binding's namespace.
    pub fn names(&self, user: &str, groups: &[String], binding_namespace: &str) -> bool {
        match self.kind.as_str() {
            "User" => self.name == user,
            "Group" => groups.contains(&self.name),
            "ServiceAccount" => {
                let namespace = match self.namespace.as_str() {
                    "" => binding_namespace,
                    ns => ns,
                };
                user.strip_prefix("system:serviceaccount:")
                    .and_then(|rest| rest.split_once(':'))
                    == Some((namespace, self.name.as_str()))
            }
            _ => false,
        }
    }

    /// `User "alice"`, `Group "system:masters"`, `ServiceAccount "ns/name"` (for reasons).
    fn describe(&self, binding_namespace: &str) -> String {
        match self.kind.as_str() {
            "ServiceAccount" => {
                let ns = if self.namespace.is_empty() {
                    binding_namespace
                } else {
                    &self.namespace
                };
                format!("ServiceAccount \"{}/{}\"", ns, self.name)
            }
            kind => format!("{kind} {:?}", self.name),
        }
    }
}

// === impl Binding ===

impl Binding {
    /// A RoleBinding or ClusterRoleBinding object; `None` if it has no valid `roleRef`.
    pub fn from_object(obj: &Value) -> Option<Binding> {
        let meta = &obj["metadata"];
        let role_ref: RoleRef = serde_json::from_value(obj.get("roleRef")?.clone()).ok()?;
        let subjects = obj
            .get("subjects")
            .and_then(Value::as_array)
            .map(|s| {
                s.iter()
                    .filter_map(|s| serde_json::from_value(s.clone()).ok())
                    .collect()
            })
            .unwrap_or_default();
        Some(Binding {
            name: meta["name"].as_str().unwrap_or_default().to_owned(),
            namespace: meta["namespace"].as_str().unwrap_or_default().to_owned(),
            role_ref,
            subjects,
        })
    }

    /// The subject naming the user or one of its groups, if any.
    pub fn applies_to(&self, user: &str, groups: &[String]) -> Option<&Subject> {
        self.subjects
            .iter()
            .find(|s| s.names(user, groups, &self.namespace))
    }

    /// Whether this binding grants anything for a request in `namespace` (`None`:
    /// cluster-scoped or non-resource): ClusterRoleBindings everywhere, RoleBindings in their
    /// namespace only.
    pub fn grants_in(&self, namespace: Option<&str>) -> bool {
        self.namespace.is_empty() || Some(self.namespace.as_str()) == namespace
    }

    fn kind(&self) -> &'static str {
        match self.namespace.is_empty() {
            true => "ClusterRoleBinding",
            false => "RoleBinding",
        }
    }
}

// === impl Policy ===

impl Policy {
    /// The rules a binding grants (those of its role, if the role exists).
    pub fn rules_of(&self, binding: &Binding) -> &[PolicyRule] {
        let rules = match binding.role_ref.kind.as_str() {
            "ClusterRole" => self.cluster_roles.get(&binding.role_ref.name),
            "Role" if !binding.namespace.is_empty() => self
                .roles
                .get(&(binding.namespace.clone(), binding.role_ref.name.clone())),
            _ => None,
        };
        rules.map_or(&[], Vec::as_slice)
    }

    /// Whether any binding that applies to the user grants the request.
    pub fn decide(&self, attrs: &Attributes<'_>) -> Decision {
        let namespace = match attrs.request {
            Request::Resource { namespace, .. } if !namespace.is_empty() => Some(namespace),
            _ => None,
        };
        for binding in &self.bindings {
            if !binding.grants_in(namespace) {
                continue;
            }
            let Some(subject) = binding.applies_to(attrs.user, attrs.groups) else {
                continue;
            };
            if self
                .rules_of(binding)
                .iter()
                .any(|r| r.allows(attrs.verb, &attrs.request))
            {
                let in_ns = match binding.namespace.as_str() {
                    "" => String::new(),
                    ns => format!(" in namespace {ns:?}"),
                };
                return Decision::Allowed(format!(
                    "RBAC: allowed by {} {:?} of {} {:?} to {}{in_ns}",
                    binding.kind(),
                    binding.name,
                    binding.role_ref.kind,
                    binding.role_ref.name,
                    subject.describe(&binding.namespace)
                ));
            }
        }
        Decision::NoOpinion
    }

    /// Every rule the user holds in `namespace` (ClusterRoleBindings and that namespace's
    /// RoleBindings), in binding order, duplicates removed. RoleBindings grant no
    /// non-resource rules.
    pub fn rules_for(&self, user: &str, groups: &[String], namespace: &str) -> Vec<PolicyRule> {
        let mut rules: Vec<PolicyRule> = Vec::new();
        for binding in &self.bindings {
            if !binding.grants_in(Some(namespace)) || binding.applies_to(user, groups).is_none() {
                continue;
            }
            for rule in self.rules_of(binding) {
                let namespaced = !binding.namespace.is_empty();
                if namespaced && !rule.non_resource_urls.is_empty() {
                    continue;
                }
                if !rules.contains(rule) {
                    rules.push(rule.clone());
                }
            }
        }
        rules
    }
}

/// `rules` allows `value` (`*` allows anything).
fn has(rules: &[String], value: &str) -> bool {
    rules.iter().any(|r| r == "*" || r == value)
}

/// A non-resource URL rule: exact, `*`, or a prefix ending in `*`.
fn url_matches(rule: &str, path: &str) -> bool {
    match rule.strip_suffix('*') {
        Some(prefix) => path.starts_with(prefix),
        None => rule == path,
    }
}

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| (*s).to_owned()).collect()
}

#[cfg(test)]
mod tests;
