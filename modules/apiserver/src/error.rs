//! apiserver errors.

use std::path::PathBuf;

/// The embedded control plane could not start.
#[derive(Debug, thiserror::Error)]
pub enum ApiServerError {
    /// Certificates could not be loaded or made.
    #[error("apiserver certificates")]
    Certs(#[from] pki::PkiError),
    /// The store could not be opened.
    #[error("apiserver store")]
    Store(#[from] objstore::StoreError),
    /// A file could not be read or written.
    #[error("{op} {path}")]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The listener could not be bound.
    #[error("binding the apiserver on {addr}")]
    Bind {
        addr: std::net::SocketAddr,
        #[source]
        source: std::io::Error,
    },
    /// Initial objects (namespaces, stored CRDs) could not be set up.
    #[error("bootstrapping the control plane: {0}")]
    Bootstrap(String),
}
