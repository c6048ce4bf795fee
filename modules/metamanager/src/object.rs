//! From a Kubernetes object's JSON to what the store indexes: uid, resourceVersion, labels and
//! the selectable fields clients filter on.

use std::collections::{BTreeMap, HashMap};
use std::sync::OnceLock;

use apimachinery::ResourceInfo;

use objstore::{NewObject, ObjKey};
use serde_json::Value;

use crate::error::MetaError;

/// Where a message's resource points: `<namespace>/<resource>/<name>`, namespace empty for
/// cluster-scoped objects, resource as `plural` or `plural.group` (`pods`, `leases.coordination.k8s.io`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    pub namespace: String,
    pub resource: String,
    /// Empty for a whole collection (list queries).
    pub name: String,
}

/// An object parsed from JSON, ready to store.
pub struct Parsed {
    pub uid: String,
    pub resource_version: String,
    pub value: Value,
}

// === impl Target ===

impl Target {
    pub fn parse(resource: &str) -> Result<Target, MetaError> {
        let bad = || MetaError::BadResource(resource.to_string());
        let mut parts = resource.split('/');
        let (Some(namespace), Some(res)) = (parts.next(), parts.next()) else {
            return Err(bad());
        };
        let name = parts.next().unwrap_or("");
        if res.is_empty() || parts.next().is_some() {
            return Err(bad());
        }
        Ok(Target {
            namespace: namespace.into(),
            resource: res.into(),
            name: name.into(),
        })
    }

    pub fn key(&self) -> ObjKey {
        ObjKey::new(
            self.resource.clone(),
            self.namespace.clone(),
            self.name.clone(),
        )
    }

    /// The message resource for a stored key.
    pub fn format(key: &ObjKey) -> String {
        format!("{}/{}/{}", key.namespace, key.resource, key.name)
    }
}

// === impl Parsed ===

impl Parsed {
    pub fn from_json(resource: &str, bytes: &[u8]) -> Result<Parsed, MetaError> {
        let value: Value =
            serde_json::from_slice(bytes).map_err(|source| MetaError::BadContent {
                resource: resource.into(),
                source,
            })?;
        if !value.is_object() {
            let source = serde::de::Error::custom("expected a JSON object");
            return Err(MetaError::BadContent {
                resource: resource.into(),
                source,
            });
        }
        let meta = &value["metadata"];
        Ok(Parsed {
            uid: str_at(meta, "uid").to_string(),
            resource_version: str_at(meta, "resourceVersion").to_string(),
            value,
        })
    }

    /// The record to store: the JSON with `metadata.resourceVersion` set to the local revision
    /// (what local clients see and resume watches from), the cloud's version kept beside it.
    pub fn into_new_object(mut self, resource: &str, cloud_rv: &str, revision: u64) -> NewObject {
        let (labels, fields) = index(resource, &self.value);
        if let Some(meta) = self
            .value
            .get_mut("metadata")
            .and_then(Value::as_object_mut)
        {
            meta.insert(
                "resourceVersion".into(),
                Value::String(revision.to_string()),
            );
        }
        NewObject {
            uid: self.uid,
            resource_version: cloud_rv.to_string(),
            labels,
            fields,
            // Serializing a Value cannot fail.
            value: serde_json::to_vec(&self.value)
                .expect("a JSON value serializes")
                .into(),
        }
    }
}

/// Labels and the selectable fields of an object: the ones the API server selects the
/// resource by (`apimachinery`'s catalog, so the edge and the cloud agree), none for resources
/// the catalog does not know.
pub fn index(resource: &str, obj: &Value) -> (BTreeMap<String, String>, BTreeMap<String, String>) {
    let fields = catalog()
        .get(resource)
        .map(|info| apimachinery::fields::selectable_fields(info, obj))
        .unwrap_or_default();
    (apimachinery::fields::labels_of(obj), fields)
}

/// The built-in resources by store name.
fn catalog() -> &'static HashMap<String, ResourceInfo> {
    static CATALOG: OnceLock<HashMap<String, ResourceInfo>> = OnceLock::new();
    CATALOG.get_or_init(|| {
        apimachinery::catalog::builtins()
            .into_iter()
            .map(|info| (info.store_resource(), info))
            .collect()
    })
}

/// Compares cloud resourceVersions: numeric when both are numbers (as the API server's are),
/// otherwise any different version counts as newer (they are opaque).
pub fn is_newer(incoming: &str, current: &str) -> bool {
    match (incoming.parse::<u64>(), current.parse::<u64>()) {
        (Ok(i), Ok(c)) => i > c,
        _ => incoming != current,
    }
}

fn str_at<'a>(v: &'a Value, key: &str) -> &'a str {
    v.get(key).and_then(Value::as_str).unwrap_or("")
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn resources_parse_with_and_without_namespace_and_name() {
        let t = Target::parse("default/pods/nginx").unwrap();
        assert_eq!(
            (t.namespace.as_str(), t.resource.as_str(), t.name.as_str()),
            ("default", "pods", "nginx")
        );
        let t = Target::parse("/nodes/edge-1").unwrap();
        assert_eq!((t.namespace.as_str(), t.name.as_str()), ("", "edge-1"));
        let t = Target::parse("default/pods").unwrap();
        assert_eq!(t.name, "");
        assert_eq!(
            Target::format(
                &Target::parse("kube-system/leases.coordination.k8s.io/n1")
                    .unwrap()
                    .key()
            ),
            "kube-system/leases.coordination.k8s.io/n1"
        );
        for bad in ["", "pods", "a//b", "a/b/c/d"] {
            assert!(Target::parse(bad).is_err(), "{bad:?} parsed");
        }
    }

    #[test]
    fn pods_are_indexed_by_node_and_phase_and_labels() {
        let pod = json!({"metadata": {"labels": {"app": "web", "n": 1}}, "spec": {"nodeName": "n1"}, "status": {"phase": "Running"}});
        let (labels, fields) = index("pods", &pod);
        assert_eq!(labels.get("app").map(String::as_str), Some("web"));
        assert!(
            !labels.contains_key("n"),
            "non-string label values are not labels"
        );
        assert_eq!(fields.get("spec.nodeName").map(String::as_str), Some("n1"));
        assert_eq!(
            fields.get("status.phase").map(String::as_str),
            Some("Running")
        );
        // As the API server selects: an unset boolean is false.
        assert_eq!(
            fields.get("spec.hostNetwork").map(String::as_str),
            Some("false")
        );
    }

    #[test]
    fn the_stored_json_carries_the_local_revision() {
        let p = Parsed::from_json(
            "pods",
            br#"{"metadata":{"uid":"u1","resourceVersion":"900"}}"#,
        )
        .unwrap();
        assert_eq!((p.uid.as_str(), p.resource_version.as_str()), ("u1", "900"));
        let obj = p.into_new_object("pods", "900", 7);
        assert_eq!(obj.resource_version, "900");
        let v: Value = serde_json::from_slice(&obj.value).unwrap();
        assert_eq!(v["metadata"]["resourceVersion"], "7");
    }

    #[test]
    fn numeric_versions_compare_as_numbers_and_opaque_ones_by_difference() {
        assert!(is_newer("10", "9"));
        assert!(!is_newer("9", "10"));
        assert!(!is_newer("10", "10"));
        assert!(is_newer("b", "a"));
        assert!(!is_newer("a", "a"));
    }

    #[test]
    fn non_object_content_is_refused_with_the_resource_named() {
        let err = Parsed::from_json("default/pods/x", b"[1]").err().unwrap();
        assert!(err.to_string().contains("default/pods/x"), "{err}");
        assert!(Parsed::from_json("r", b"{").is_err());
    }
}
