//! What can go wrong in edged.

/// An edged failure.
#[derive(Debug, thiserror::Error)]
pub enum EdgedError {
    /// The container runtime could not be reached or refused a call.
    #[error(transparent)]
    Runtime(#[from] cri::CriError),
    /// Reading the edge store failed.
    #[error("reading the edge store: {0}")]
    Store(#[from] objstore::StoreError),
    /// The node's API (lwproxy) refused or failed a request.
    #[error("the node's API: {0}")]
    Api(#[from] kube::Error),
    /// A file of a pod's volume or log could not be written.
    #[error("{what} {path}: {source}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// The file or directory.
        path: std::path::PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// A pod that cannot run as written (a missing configmap key, a bad volume): the reason
    /// goes into the container's waiting state.
    #[error("{reason}: {message}")]
    Pod {
        /// The waiting reason (`CreateContainerConfigError`, `ErrImagePull`, ...).
        reason: &'static str,
        /// What was wrong.
        message: String,
    },
    /// The configuration is unusable.
    #[error("modules.edged: {0}")]
    Config(String),
}

impl EdgedError {
    /// A pod-level problem with its waiting reason.
    pub(crate) fn pod(reason: &'static str, message: impl Into<String>) -> Self {
        EdgedError::Pod {
            reason,
            message: message.into(),
        }
    }
}
