//! Subscriptions: how an edge node asks the cloud for a kind the node rules never send it.
//!
//! The node rules deliver a fixed set of kinds ([`ALWAYS_DELIVERED`]: the node's own Node,
//! Lease and CSINode, its pods and what they reference, and the cluster objects kube-proxy and
//! a kubelet read). For any other resource a local client reads, lwproxy sends a
//! [`Subscription`] upstream (message resource [`Subscription::message_resource`], operation
//! `subscribe`, JSON content); the cloud answers with a [`SubscribeReply`]: `403` when the
//! node's identity may not `list` and `watch` the resource cluster-wide (or the kind is
//! delivered by node rules and never subscribable), `404` when the API does not serve it,
//! else `200` with every object of the kind, after which it delivers the kind's changes like
//! any other object. `unsubscribe` (same content) stops the delivery. The cloud acts only on a
//! [`Subscription`] parsed and checked by [`Subscription::parse`].

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::status::ApiError;

/// The prefix of a subscription message's resource: `subscriptions/<store resource>`.
pub const MESSAGE_PREFIX: &str = "subscriptions/";

/// `(group, plural)` of the kinds the node rules deliver to every node that needs them: lists
/// of them are served from the edge store as they are, and a subscription to one is refused
/// (their objects reach a node only as far as the node rules allow: Secrets only when the
/// node's pods reference them).
pub const ALWAYS_DELIVERED: &[(&str, &str)] = &[
    ("", "nodes"),
    ("coordination.k8s.io", "leases"),
    ("storage.k8s.io", "csinodes"),
    ("", "pods"),
    ("", "configmaps"),
    ("", "secrets"),
    ("", "serviceaccounts"),
    ("", "services"),
    ("discovery.k8s.io", "endpointslices"),
    ("storage.k8s.io", "csidrivers"),
    ("node.k8s.io", "runtimeclasses"),
    // The NodeGroup a node belongs to (its site's members, for site-local services).
    ("apps.kubeedge.io", "nodegroups"),
    // The edge serves the CRDs of the custom resources it holds.
    ("apiextensions.k8s.io", "customresourcedefinitions"),
];

/// The most characters of a group, version or resource name.
const PART_MAX: usize = 253;

/// One resource a node subscribes to, checked.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Subscription {
    /// API group (`""` for core).
    pub group: String,
    pub version: String,
    /// Plural resource name (`networkpolicies`).
    pub resource: String,
}

/// The cloud's answer to a subscription.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct SubscribeReply {
    /// `200` (delivered from now on), `403`, `404`, or another API error code.
    pub code: u16,
    /// Why not, for a refusal (the authorizer's reason, or the API's message).
    pub message: String,
    /// The kind is delivered whether or not the node subscribes (a custom resource the cloud is
    /// configured to deliver): the node never drops it.
    pub pinned: bool,
    /// Every object of the kind the node is to hold now (with `apiVersion` and `kind`).
    pub objects: Vec<Value>,
    /// The CustomResourceDefinition of a custom resource, so the edge serves the kind.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub definition: Option<Value>,
}

// === impl Subscription ===

impl Subscription {
    /// A subscription to `group`/`version`/`resource`, each checked: lowercase DNS-style
    /// names (`resource` has no `/`: subresources are not subscribed).
    pub fn new(group: &str, version: &str, resource: &str) -> Result<Subscription, ApiError> {
        check_part("group", group, true)?;
        check_part("version", version, false)?;
        check_part("resource", resource, false)?;
        Ok(Subscription {
            group: group.to_owned(),
            version: version.to_owned(),
            resource: resource.to_owned(),
        })
    }

    /// Parses and checks the JSON content of a subscription message from a node.
    pub fn parse(content: &[u8]) -> Result<Subscription, ApiError> {
        let raw: Subscription = serde_json::from_slice(content)
            .map_err(|e| ApiError::bad_request(format!("malformed subscription: {e}")))?;
        Subscription::new(&raw.group, &raw.version, &raw.resource)
    }

    /// `resource` for the core group, else `resource.group`: the edge store's collection.
    pub fn store_resource(&self) -> String {
        match self.group.is_empty() {
            true => self.resource.clone(),
            false => format!("{}.{}", self.resource, self.group),
        }
    }

    /// The message resource a subscription travels under.
    pub fn message_resource(&self) -> String {
        format!("{MESSAGE_PREFIX}{}", self.store_resource())
    }

    /// `v1` or `group/version`.
    pub fn api_version(&self) -> String {
        match self.group.is_empty() {
            true => self.version.clone(),
            false => format!("{}/{}", self.group, self.version),
        }
    }

    /// True for the kinds the node rules deliver ([`ALWAYS_DELIVERED`]).
    pub fn always_delivered(&self) -> bool {
        is_always_delivered(&self.group, &self.resource)
    }

    /// The JSON content of a subscription message.
    pub fn to_content(&self) -> Vec<u8> {
        // Three strings always serialize.
        serde_json::to_vec(self).expect("a subscription serializes")
    }
}

/// True when the node rules deliver `group`/`resource`.
pub fn is_always_delivered(group: &str, resource: &str) -> bool {
    ALWAYS_DELIVERED
        .iter()
        .any(|(g, r)| *g == group && *r == resource)
}

// === impl SubscribeReply ===

impl SubscribeReply {
    /// A refusal carrying `e`'s code and message.
    pub fn refused(e: &ApiError) -> SubscribeReply {
        SubscribeReply {
            code: e.code,
            message: e.message.clone(),
            ..SubscribeReply::default()
        }
    }

    /// The error a refusal stands for (`Forbidden`, `NotFound`, ...), `None` for a `200`.
    pub fn error(&self) -> Option<ApiError> {
        refusal(self.code, &self.message)
    }

    /// The JSON content of the reply message.
    pub fn to_content(&self) -> Vec<u8> {
        // Strings, numbers and JSON values always serialize.
        serde_json::to_vec(self).expect("a subscribe reply serializes")
    }
}

/// The API error a refusal with `code` and `message` stands for; `None` for a success.
pub fn refusal(code: u16, message: &str) -> Option<ApiError> {
    let reason = match code {
        200..=299 => return None,
        403 => "Forbidden",
        404 => "NotFound",
        400 => "BadRequest",
        503 => "ServiceUnavailable",
        504 => "Timeout",
        _ => "InternalError",
    };
    Some(ApiError::new(code, reason, message))
}

fn check_part(what: &str, value: &str, may_be_empty: bool) -> Result<(), ApiError> {
    let why = if value.is_empty() && !may_be_empty {
        Some("must not be empty")
    } else if value.len() > PART_MAX {
        Some("is too long")
    } else if !value
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
    {
        Some("may contain only lowercase letters, digits, '-' and '.'")
    } else if value.starts_with(['.', '-']) || value.ends_with(['.', '-']) {
        Some("must start and end with a letter or digit")
    } else {
        None
    };
    match why {
        Some(why) => Err(ApiError::bad_request(format!(
            "subscription {what} {value:?} {why}"
        ))),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_subscription_parses_from_its_content_and_names_its_store_resource() {
        let sub = Subscription::new("networking.k8s.io", "v1", "networkpolicies").unwrap();
        let parsed = Subscription::parse(&sub.to_content()).unwrap();
        assert_eq!(parsed, sub);
        assert_eq!(
            sub.message_resource(),
            "subscriptions/networkpolicies.networking.k8s.io"
        );
        assert_eq!(sub.api_version(), "networking.k8s.io/v1");
        let core = Subscription::new("", "v1", "namespaces").unwrap();
        assert_eq!(core.store_resource(), "namespaces");
        assert!(!core.always_delivered());
        assert!(
            Subscription::new("", "v1", "secrets")
                .unwrap()
                .always_delivered()
        );
    }

    #[test]
    fn a_subscription_with_bad_names_is_refused_with_what_was_wrong() {
        for (g, v, r) in [
            ("", "v1", ""),
            ("", "", "pods"),
            ("x", "v1", "pods/log"),
            ("X", "v1", "foos"),
            ("..", "v1", "foos"),
        ] {
            let e = Subscription::new(g, v, r).unwrap_err();
            assert_eq!(e.code, 400, "{g}/{v}/{r}");
            assert!(e.message.starts_with("subscription "), "{}", e.message);
        }
        let e = Subscription::parse(b"[1]").unwrap_err();
        assert!(
            e.message.contains("malformed subscription"),
            "{}",
            e.message
        );
        let e =
            Subscription::parse(br#"{"group":"","version":"v1","resource":"a/b"}"#).unwrap_err();
        assert!(e.message.contains("resource"), "{}", e.message);
    }

    #[test]
    fn a_refusal_keeps_its_code_and_message() {
        let reply = SubscribeReply::refused(&ApiError::new(403, "Forbidden", "no"));
        let back: SubscribeReply = serde_json::from_slice(&reply.to_content()).unwrap();
        let e = back.error().unwrap();
        assert_eq!(
            (e.code, e.reason.as_str(), e.message.as_str()),
            (403, "Forbidden", "no")
        );
        assert!(
            SubscribeReply {
                code: 200,
                ..Default::default()
            }
            .error()
            .is_none()
        );
    }
}
