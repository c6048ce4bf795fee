//! lwproxy errors.

use std::net::SocketAddr;

/// lwproxy could not start.
#[derive(Debug, thiserror::Error)]
pub enum LwProxyError {
    /// The TLS settings do not go together.
    #[error("modules.lwProxy: {0}")]
    Config(String),
    /// The serving certificate, key or client CA could not be loaded.
    #[error("lwproxy certificates")]
    Certs(#[from] pki::PkiError),
    /// The listener could not be bound.
    #[error("binding lwproxy on {addr}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    /// The CRDs held in the edge store could not be read.
    #[error("reading the CRDs held in the edge store")]
    Store(#[from] objstore::StoreError),
    /// The subscriptions held in the edge store could not be read.
    #[error("reading the subscriptions held in the edge store")]
    Subscriptions(#[from] metamanager::MetaError),
}
