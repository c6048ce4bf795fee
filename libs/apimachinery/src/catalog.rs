//! The resources the embedded control plane serves, and the ones CRDs add.

use serde_json::Value;

mod builtin;
mod builtin_auth;
mod crd;

/// One resource (one group/version/plural).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResourceInfo {
    /// API group, `""` for the core group.
    pub group: String,
    pub version: String,
    pub kind: String,
    /// e.g. `PodList`.
    pub list_kind: String,
    pub plural: String,
    pub singular: String,
    pub namespaced: bool,
    pub short_names: Vec<String>,
    pub categories: Vec<String>,
    /// Discovery verbs: get, list, watch, create, update, patch, delete, deletecollection.
    pub verbs: Vec<String>,
    /// Subresources served: `status`, `binding` (pods), `finalize` (namespaces), ...
    pub subresources: Vec<String>,
    /// Selectable fields beyond `metadata.name` and `metadata.namespace`.
    pub selectable_fields: Vec<String>,
    /// `kubectl get` columns, in Table order; the first is usually `Name` (format `name`).
    pub columns: Vec<Column>,
    /// True when the resource comes from a CustomResourceDefinition.
    pub custom: bool,
    /// A custom resource's structural schema (its version's `openAPIV3Schema`): server-side
    /// apply reads its list and map types from it.
    pub structure: Option<std::sync::Arc<Value>>,
    /// The same schema compiled once, for validation, defaulting and pruning.
    pub schema: Option<std::sync::Arc<crate::crdschema::Schema>>,
}

/// A printer column (as in a CRD's `additionalPrinterColumns`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Column {
    pub name: String,
    /// OpenAPI type: string, integer, number, boolean, date.
    pub type_: String,
    pub format: String,
    pub description: String,
    /// 0: shown by default; above: only with `-o wide`.
    pub priority: i32,
    /// For custom resources: the JSONPath of the value. Empty for built-ins (computed).
    pub json_path: String,
}

/// A CRD could not be turned into resources.
#[derive(Debug, thiserror::Error)]
#[error("invalid CustomResourceDefinition: {0}")]
pub struct CrdError(pub String);

/// The discovery verbs of a fully writable resource, in discovery order.
pub const ALL_VERBS: &[&str] = &[
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];

/// `metadata.name`'s description in the OpenAPI schema, used for `Name` columns.
pub(crate) const NAME_DESCRIPTION: &str = "Name must be unique within a namespace. It is \
    required when creating resources, although some resources may allow a client to request \
    the generation of an appropriate name automatically. Name is primarily intended for \
    creation idempotence and configuration definition. Cannot be updated. More info: \
    https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names";

/// `metadata.creationTimestamp`'s description, used for `Age` columns.
pub(crate) const CREATION_TIMESTAMP_DESCRIPTION: &str = "CreationTimestamp is a timestamp \
    representing the server time when this object was created. It is not guaranteed to be set \
    in happens-before order across separate operations. Clients may not set this value. It is \
    represented in RFC3339 form and is in UTC.\n\nPopulated by the system. Read-only. Null for \
    lists. More info: \
    https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata";

// === impl ResourceInfo ===

impl ResourceInfo {
    /// A resource with the defaults kube-apiserver would give: list kind `<Kind>List`, singular
    /// the lowercase kind, all verbs, no short names, categories, subresources, selectable
    /// fields, and `Name`/`Age` columns.
    pub fn new(group: &str, version: &str, kind: &str, plural: &str, namespaced: bool) -> Self {
        ResourceInfo {
            group: group.to_owned(),
            version: version.to_owned(),
            kind: kind.to_owned(),
            list_kind: format!("{kind}List"),
            plural: plural.to_owned(),
            singular: kind.to_lowercase(),
            namespaced,
            short_names: Vec::new(),
            categories: Vec::new(),
            verbs: strings(ALL_VERBS),
            subresources: Vec::new(),
            selectable_fields: Vec::new(),
            columns: vec![Column::name(), Column::age()],
            custom: false,
            structure: None,
            schema: None,
        }
    }

    /// `v1` for the core group, else `group/version`.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// The name of the collection in the object store and in edge message resources: `plural`
    /// for the core group, else `plural.group` (e.g. `leases.coordination.k8s.io`).
    pub fn store_resource(&self) -> String {
        if self.group.is_empty() {
            self.plural.clone()
        } else {
            format!("{}.{}", self.plural, self.group)
        }
    }

    /// Whether `name` is a selectable field of this resource (including `metadata.name` and,
    /// for namespaced resources, `metadata.namespace`).
    pub fn is_selectable(&self, name: &str) -> bool {
        name == "metadata.name"
            || (name == "metadata.namespace" && self.namespaced)
            || self.selectable_fields.iter().any(|f| f == name)
    }

    /// Whether the resource serves `subresource` (`status`, `binding`, ...).
    pub fn has_subresource(&self, subresource: &str) -> bool {
        self.subresources.iter().any(|s| s == subresource)
    }

    pub(crate) fn short_names(mut self, names: &[&str]) -> Self {
        self.short_names = strings(names);
        self
    }

    pub(crate) fn categories(mut self, categories: &[&str]) -> Self {
        self.categories = strings(categories);
        self
    }

    pub(crate) fn verbs(mut self, verbs: &[&str]) -> Self {
        self.verbs = strings(verbs);
        self
    }

    pub(crate) fn subresources(mut self, subresources: &[&str]) -> Self {
        self.subresources = strings(subresources);
        self
    }

    pub(crate) fn selectable(mut self, fields: &[&str]) -> Self {
        self.selectable_fields = strings(fields);
        self
    }

    pub(crate) fn columns(mut self, columns: Vec<Column>) -> Self {
        self.columns = columns;
        self
    }
}

// === impl Column ===

impl Column {
    /// A `string` column shown by default.
    pub fn new(name: &str, description: &str) -> Column {
        Column {
            name: name.to_owned(),
            type_: "string".to_owned(),
            format: String::new(),
            description: description.to_owned(),
            priority: 0,
            json_path: String::new(),
        }
    }

    /// The `Name` column (`format: name`).
    pub fn name() -> Column {
        Column::new("Name", NAME_DESCRIPTION).format("name")
    }

    /// The `Age` column of the built-in printers.
    pub fn age() -> Column {
        Column::new("Age", CREATION_TIMESTAMP_DESCRIPTION)
    }

    /// Only shown with `-o wide` (priority 1).
    pub fn wide(mut self) -> Column {
        self.priority = 1;
        self
    }

    pub fn type_(mut self, type_: &str) -> Column {
        self.type_ = type_.to_owned();
        self
    }

    pub fn format(mut self, format: &str) -> Column {
        self.format = format.to_owned();
        self
    }

    pub fn json_path(mut self, json_path: &str) -> Column {
        self.json_path = json_path.to_owned();
        self
    }
}

/// Every built-in resource the embedded control plane serves, as a 1.32 kube-apiserver does:
/// core/v1, apps/v1, batch/v1, autoscaling/v2 and v1, policy/v1, networking.k8s.io/v1,
/// storage.k8s.io/v1, scheduling.k8s.io/v1, node.k8s.io/v1, certificates.k8s.io/v1,
/// admissionregistration.k8s.io/v1, apiregistration.k8s.io/v1, coordination.k8s.io/v1,
/// discovery.k8s.io/v1, events.k8s.io/v1, apiextensions.k8s.io/v1, and the authentication,
/// authorization and RBAC groups.
pub fn builtins() -> Vec<ResourceInfo> {
    builtin::all()
        .into_iter()
        .chain(builtin_auth::all())
        .collect()
}

/// The resources (one per served version) a CustomResourceDefinition object defines.
pub fn from_crd(crd: &Value) -> Result<Vec<ResourceInfo>, CrdError> {
    crd::resources(crd)
}

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| (*s).to_owned()).collect()
}

#[cfg(test)]
mod tests;
