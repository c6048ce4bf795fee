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
    /// The key that signs service-account tokens could not be read or made.
    #[error("service-account key {path}")]
    ServiceAccountKey {
        path: PathBuf,
        #[source]
        source: TokenError,
    },
    /// Initial objects (namespaces, stored CRDs) could not be set up.
    #[error("bootstrapping the control plane: {0}")]
    Bootstrap(String),
}

/// A bearer token that is not a service-account token in force, or a key that cannot sign them.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    /// Not three base64url parts holding a JSON header and the expected claims.
    #[error("malformed token")]
    Malformed,
    /// Signed with another algorithm than ES256 (or not at all).
    #[error("unsupported token algorithm {0:?}")]
    Algorithm(String),
    /// The signature does not verify with the service-account key.
    #[error("token signature does not verify")]
    Signature,
    /// Issued by someone else.
    #[error("token issued by {0:?}")]
    Issuer(String),
    /// Not meant for the API.
    #[error("token audiences {0:?} do not include the API")]
    Audience(Vec<String>),
    /// Past its `exp`.
    #[error("token has expired")]
    Expired,
    /// Before its `nbf`.
    #[error("token is not valid yet")]
    NotYetValid,
    /// Its service account, or the object it is bound to, is gone or was replaced.
    #[error("token has been invalidated: {0}")]
    Invalidated(String),
    /// The objects it names could not be read.
    #[error("token objects could not be read: {0}")]
    Lookup(String),
    /// The service-account key could not be made, read or used.
    #[error("service-account key: {0}")]
    Key(String),
}
