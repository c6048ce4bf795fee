//! Selection of objects, shared by `list` and `watch`.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use crate::object::{ObjKey, StoredObject, field_value};

/// An arbitrary extra condition (e.g. a parsed set-based label selector).
pub type Predicate = Arc<dyn Fn(&StoredObject) -> bool + Send + Sync>;

/// Which objects a list or watch selects, besides the resource. All parts must match.
#[derive(Clone, Default)]
pub struct Filter {
    /// Only this namespace (`Some("")` selects cluster-scoped objects).
    pub namespace: Option<String>,
    /// Equality on one selectable field, served by the field index for `list`
    /// (`metadata.name` / `metadata.namespace` are matched against the key).
    pub field: Option<(String, String)>,
    /// Label equality constraints.
    pub labels: BTreeMap<String, String>,
    /// Any other condition, checked last.
    pub predicate: Option<Predicate>,
}

/// What `Store::list` selects and how it pages.
#[derive(Debug, Clone, Default)]
pub struct ListOptions {
    /// The collection to list (required).
    pub resource: String,
    pub filter: Filter,
    /// At most this many items; `None` lists everything.
    pub limit: Option<usize>,
    /// Start after this `(namespace, name)`; items come in `(namespace, name)` order.
    pub continue_after: Option<(String, String)>,
}

/// One page of a list, read in one read transaction.
#[derive(Debug, Clone, Default)]
pub struct ListResult {
    /// The store revision of the snapshot the items were read from.
    pub revision: u64,
    pub items: Vec<Arc<StoredObject>>,
    /// Set when `limit` cut the list short: pass it as `continue_after` for the next page.
    pub continue_after: Option<(String, String)>,
}

/// Which keys `Store::inventory` reports.
#[derive(Debug, Clone, Default)]
pub struct InventoryFilter {
    /// Only this collection; `None` means every collection.
    pub resource: Option<String>,
    /// Only this namespace.
    pub namespace: Option<String>,
}

// === impl Filter ===

impl Filter {
    /// Checks namespace, field and labels against a key and its labels/fields (no predicate).
    pub(crate) fn matches_meta(
        &self,
        key: &ObjKey,
        labels: &BTreeMap<String, String>,
        fields: &BTreeMap<String, String>,
    ) -> bool {
        if self
            .namespace
            .as_ref()
            .is_some_and(|ns| *ns != key.namespace)
        {
            return false;
        }
        if let Some((name, want)) = &self.field
            && field_value(key, fields, name) != Some(want.as_str())
        {
            return false;
        }
        self.labels
            .iter()
            .all(|(k, v)| labels.get(k).is_some_and(|have| have == v))
    }

    /// Checks everything, the predicate included.
    pub fn matches(&self, obj: &StoredObject) -> bool {
        self.matches_meta(&obj.key, &obj.labels, &obj.fields)
            && self.predicate.as_ref().is_none_or(|p| p(obj))
    }
}

impl fmt::Debug for Filter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Filter")
            .field("namespace", &self.namespace)
            .field("field", &self.field)
            .field("labels", &self.labels)
            .field("predicate", &self.predicate.as_ref().map(|_| ".."))
            .finish()
    }
}

// === impl ListOptions ===

impl ListOptions {
    pub fn new(resource: impl Into<String>) -> Self {
        Self {
            resource: resource.into(),
            ..Self::default()
        }
    }

    pub fn namespace(mut self, namespace: impl Into<String>) -> Self {
        self.filter.namespace = Some(namespace.into());
        self
    }

    pub fn field(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.filter.field = Some((name.into(), value.into()));
        self
    }

    pub fn label(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.filter.labels.insert(key.into(), value.into());
        self
    }

    pub fn predicate(mut self, p: impl Fn(&StoredObject) -> bool + Send + Sync + 'static) -> Self {
        self.filter.predicate = Some(Arc::new(p));
        self
    }

    pub fn limit(mut self, limit: usize) -> Self {
        self.limit = Some(limit);
        self
    }

    pub fn continue_after(mut self, namespace: impl Into<String>, name: impl Into<String>) -> Self {
        self.continue_after = Some((namespace.into(), name.into()));
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obj(ns: &str, labels: &[(&str, &str)], fields: &[(&str, &str)]) -> StoredObject {
        let map = |kv: &[(&str, &str)]| {
            kv.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        StoredObject {
            key: ObjKey::new("pods", ns, "p"),
            uid: String::new(),
            resource_version: String::new(),
            revision: 1,
            labels: map(labels),
            fields: map(fields),
            value: Default::default(),
        }
    }

    #[test]
    fn empty_filter_matches_everything() {
        assert!(Filter::default().matches(&obj("a", &[], &[])));
    }

    #[test]
    fn all_parts_must_match() {
        let opts = ListOptions::new("pods")
            .namespace("a")
            .field("spec.nodeName", "n1")
            .label("app", "web");
        let good = obj("a", &[("app", "web")], &[("spec.nodeName", "n1")]);
        assert!(opts.filter.matches(&good));
        assert!(
            !opts
                .filter
                .matches(&obj("b", &[("app", "web")], &[("spec.nodeName", "n1")]))
        );
        assert!(
            !opts
                .filter
                .matches(&obj("a", &[("app", "db")], &[("spec.nodeName", "n1")]))
        );
        assert!(!opts.filter.matches(&obj("a", &[("app", "web")], &[])));
    }

    #[test]
    fn metadata_fields_come_from_the_key() {
        let opts = ListOptions::new("pods").field("metadata.namespace", "a");
        assert!(opts.filter.matches(&obj("a", &[], &[])));
        let opts = ListOptions::new("pods").field("metadata.name", "q");
        assert!(!opts.filter.matches(&obj("a", &[], &[])));
    }

    #[test]
    fn predicate_is_checked_last() {
        let opts = ListOptions::new("pods").predicate(|o| o.labels.contains_key("x"));
        assert!(!opts.filter.matches(&obj("a", &[], &[])));
        assert!(opts.filter.matches(&obj("a", &[("x", "")], &[])));
    }
}
