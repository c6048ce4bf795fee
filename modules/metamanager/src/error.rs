//! metamanager errors.

/// A message could not be applied or answered.
#[derive(Debug, thiserror::Error)]
pub enum MetaError {
    /// The message resource is not `<namespace>/<resource>/<name>` (or `<namespace>/<resource>`
    /// for a list query).
    #[error("malformed resource {0:?}: expected <namespace>/<resource>/<name>")]
    BadResource(String),
    /// The content is not the JSON object the operation needs.
    #[error("content of {resource} is not a JSON object")]
    BadContent {
        resource: String,
        #[source]
        source: serde_json::Error,
    },
    /// The operation is not one metamanager handles.
    #[error("operation {0} is not handled by metamanager")]
    Unsupported(String),
    /// metamanager stopped before it took (or answered) a downstream write.
    #[error("metamanager is not running")]
    Gone,
    /// The store failed; nothing was applied.
    #[error("edge store")]
    Store(#[from] objstore::StoreError),
}
