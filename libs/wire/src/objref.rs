//! Which object a key or a message names: [`ObjectRef`] and its two string forms.
//!
//! | form | shape | used by |
//! |---|---|---|
//! | key ([`ObjectRef::key`]) | `<resource>/<namespace>/<name>` | digests, inventories, keyed queues, stores |
//! | message resource ([`ObjectRef::message_resource`]) | `<namespace>/<resource>/<name>` | the resource of a [`beehive::Message`] about one object |
//!
//! The resource is the plural as the store keeps it (`pods`, `widgets.example.com`); a
//! cluster-scoped object has an empty namespace (`nodes//edge-1`, `/nodes/edge-1`). No segment
//! contains `/`, and resource and name are never empty, so each form parses back to the same
//! [`ObjectRef`].

use std::fmt;
use std::str::FromStr;

use crate::error::ResourceError;

/// One object: its plural resource, its namespace (empty for cluster-scoped objects) and name.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectRef {
    pub resource: String,
    /// Empty for a cluster-scoped object.
    pub namespace: String,
    pub name: String,
}

/// The canonical object key used by digests and inventories: `resource/namespace/name`, with an
/// empty namespace for cluster-scoped objects (what [`ObjectRef::key`] gives, without building
/// the [`ObjectRef`]).
pub fn object_key(resource: &str, namespace: Option<&str>, name: &str) -> String {
    format!("{resource}/{}/{name}", namespace.unwrap_or(""))
}

// === impl ObjectRef ===

impl ObjectRef {
    /// The object `name` of `resource` in `namespace` (empty: cluster-scoped).
    pub fn new(
        resource: impl Into<String>,
        namespace: impl Into<String>,
        name: impl Into<String>,
    ) -> ObjectRef {
        ObjectRef {
            resource: resource.into(),
            namespace: namespace.into(),
            name: name.into(),
        }
    }

    /// The key form: `resource/namespace/name`.
    pub fn key(&self) -> String {
        self.to_string()
    }

    /// The message resource form: `namespace/resource/name`.
    pub fn message_resource(&self) -> String {
        format!("{}/{}/{}", self.namespace, self.resource, self.name)
    }

    /// Parses the key form `resource/namespace/name`.
    pub fn from_key(key: &str) -> Result<ObjectRef, ResourceError> {
        match three_segments(key) {
            Some((resource, namespace, name)) if !resource.is_empty() && !name.is_empty() => {
                Ok(ObjectRef::new(resource, namespace, name))
            }
            _ => Err(ResourceError::BadKey(key.to_owned())),
        }
    }

    /// Parses the message resource form `namespace/resource/name`.
    pub fn from_message_resource(resource: &str) -> Result<ObjectRef, ResourceError> {
        match three_segments(resource) {
            Some((namespace, plural, name)) if !plural.is_empty() && !name.is_empty() => {
                Ok(ObjectRef::new(plural, namespace, name))
            }
            _ => Err(ResourceError::BadMessageResource(resource.to_owned())),
        }
    }
}

/// The key form.
impl fmt::Display for ObjectRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}/{}", self.resource, self.namespace, self.name)
    }
}

/// Parses the key form ([`ObjectRef::from_key`]).
impl FromStr for ObjectRef {
    type Err = ResourceError;

    fn from_str(key: &str) -> Result<ObjectRef, ResourceError> {
        ObjectRef::from_key(key)
    }
}

/// `a/b/c`: exactly three segments, any of them possibly empty.
fn three_segments(s: &str) -> Option<(&str, &str, &str)> {
    let mut parts = s.split('/');
    match (parts.next(), parts.next(), parts.next(), parts.next()) {
        (Some(a), Some(b), Some(c), None) => Some((a, b, c)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::testing::assert_refused_by_name;

    #[test]
    fn key_is_what_object_key_builds() {
        let pod = ObjectRef::new("pods", "default", "nginx");
        assert_eq!(pod.key(), "pods/default/nginx");
        assert_eq!(pod.key(), object_key("pods", Some("default"), "nginx"));
        assert_eq!(pod.to_string(), pod.key());
        let node = ObjectRef::new("nodes", "", "edge-1");
        assert_eq!(node.key(), "nodes//edge-1");
        assert_eq!(node.key(), object_key("nodes", None, "edge-1"));
    }

    #[test]
    fn message_resource_puts_the_namespace_first() {
        let pod = ObjectRef::new("pods", "default", "nginx");
        assert_eq!(pod.message_resource(), "default/pods/nginx");
        let node = ObjectRef::new("nodes", "", "edge-1");
        assert_eq!(node.message_resource(), "/nodes/edge-1");
    }

    #[test]
    fn the_two_forms_parse_to_the_same_object() {
        let lease = ObjectRef::new("leases.coordination.k8s.io", "kube-node-lease", "n1");
        assert_eq!(ObjectRef::from_key(&lease.key()), Ok(lease.clone()));
        assert_eq!(
            ObjectRef::from_message_resource(&lease.message_resource()),
            Ok(lease.clone())
        );
        assert_eq!("nodes//n1".parse(), Ok(ObjectRef::new("nodes", "", "n1")));
    }

    #[test]
    fn malformed_keys_are_refused_by_name() {
        let bad = [
            "",
            "pods",
            "pods/default",
            "pods/default/",
            "/default/a",
            "a/b/c/d",
        ];
        assert_refused_by_name(&bad, ObjectRef::from_key, ResourceError::BadKey);
    }

    #[test]
    fn malformed_message_resources_are_refused_by_name() {
        let bad = [
            "",
            "default/pods",
            "default//a",
            "default/pods/",
            "node/n1/default/pods/a",
        ];
        let parse = ObjectRef::from_message_resource;
        assert_refused_by_name(&bad, parse, ResourceError::BadMessageResource);
    }

    fn object_ref() -> impl Strategy<Value = ObjectRef> {
        (
            "[a-z][a-z.]{0,15}",
            "[a-z0-9-]{0,12}",
            "[a-z0-9][a-z0-9.-]{0,20}",
        )
            .prop_map(|(resource, namespace, name)| ObjectRef::new(resource, namespace, name))
    }

    proptest! {
        #[test]
        fn keys_round_trip(r in object_ref()) {
            prop_assert_eq!(ObjectRef::from_key(&r.key()), Ok(r.clone()));
            prop_assert_eq!(r.key().parse::<ObjectRef>(), Ok(r));
        }

        #[test]
        fn message_resources_round_trip(r in object_ref()) {
            prop_assert_eq!(ObjectRef::from_message_resource(&r.message_resource()), Ok(r));
        }
    }
}
