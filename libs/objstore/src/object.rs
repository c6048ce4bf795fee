//! The records the store keeps: keys, stored objects, and the mutations writers ask for.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use bytes::Bytes;

/// Identifies one object. All three parts are opaque to the store.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ObjKey {
    /// The collection, e.g. `pods`, `apps/deployments`, `example.com/widgets`.
    pub resource: String,
    /// The namespace, `""` for cluster-scoped objects.
    pub namespace: String,
    /// The object name.
    pub name: String,
}

/// One object as stored, at the revision that last changed it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredObject {
    pub key: ObjKey,
    /// The object's uid, as given by the writer.
    pub uid: String,
    /// The object's resourceVersion, as given by the writer (opaque to the store).
    pub resource_version: String,
    /// The local revision of the change that produced this state (for a deletion event: the
    /// revision of the deletion).
    pub revision: u64,
    /// Labels, used by label filters.
    pub labels: BTreeMap<String, String>,
    /// Selectable fields, e.g. `spec.nodeName -> n1`; every entry is indexed.
    pub fields: BTreeMap<String, String>,
    /// The object's JSON, stored and returned verbatim.
    pub value: Bytes,
}

/// The state a writer wants an object to have after a [`Mutation::Put`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NewObject {
    pub uid: String,
    pub resource_version: String,
    pub labels: BTreeMap<String, String>,
    pub fields: BTreeMap<String, String>,
    pub value: Bytes,
}

/// What a mutate closure decided to do with the object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mutation {
    /// Create or replace the object; consumes one revision.
    Put(NewObject),
    /// Delete the object; consumes one revision if it existed, otherwise acts as `Keep`.
    Delete,
    /// Leave everything as is; consumes no revision and writes nothing.
    Keep,
}

/// The committed outcome of one mutation.
#[derive(Debug, Clone)]
pub struct Applied<T> {
    /// The object's state after the mutation (`None` when absent or deleted).
    pub object: Option<Arc<StoredObject>>,
    /// The revision this mutation got, `None` when it changed nothing.
    pub revision: Option<u64>,
    /// What the closure returned next to its [`Mutation`].
    pub output: T,
}

// === impl ObjKey ===

impl ObjKey {
    pub fn new(
        resource: impl Into<String>,
        namespace: impl Into<String>,
        name: impl Into<String>,
    ) -> Self {
        Self {
            resource: resource.into(),
            namespace: namespace.into(),
            name: name.into(),
        }
    }
}

impl fmt::Display for ObjKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.namespace.is_empty() {
            write!(f, "{}/{}", self.resource, self.name)
        } else {
            write!(f, "{}/{}/{}", self.resource, self.namespace, self.name)
        }
    }
}

// === impl StoredObject ===

impl StoredObject {
    /// The value of a selectable field; `metadata.name` and `metadata.namespace` come from the key.
    pub fn field(&self, name: &str) -> Option<&str> {
        field_value(&self.key, &self.fields, name)
    }
}

// === impl NewObject ===

impl NewObject {
    /// An object with just a value; uid, resourceVersion, labels and fields are empty.
    pub fn from_value(value: impl Into<Bytes>) -> Self {
        Self {
            value: value.into(),
            ..Self::default()
        }
    }

    pub fn uid(mut self, uid: impl Into<String>) -> Self {
        self.uid = uid.into();
        self
    }

    pub fn resource_version(mut self, rv: impl Into<String>) -> Self {
        self.resource_version = rv.into();
        self
    }

    pub fn label(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.labels.insert(key.into(), value.into());
        self
    }

    pub fn field(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.fields.insert(key.into(), value.into());
        self
    }
}

/// Resolves a selectable field against a key and its field map.
pub(crate) fn field_value<'a>(
    key: &'a ObjKey,
    fields: &'a BTreeMap<String, String>,
    name: &str,
) -> Option<&'a str> {
    match name {
        "metadata.name" => Some(&key.name),
        "metadata.namespace" => Some(&key.namespace),
        _ => fields.get(name).map(String::as_str),
    }
}
