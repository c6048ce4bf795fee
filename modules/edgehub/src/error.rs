//! edgehub errors.

/// edgehub could not start, connect, or keep a session.
#[derive(Debug, thiserror::Error)]
pub enum HubError {
    /// A certificate or key file could not be read or used.
    #[error("edgehub certificates")]
    Certs(#[from] pki::PkiError),
    /// The node certificate does not name a node, or names another node than configured.
    #[error("node identity: {0}")]
    Identity(String),
    /// No cloudhub endpoint is configured.
    #[error("modules.edgeHub has no server to dial")]
    NoServer,
    /// An endpoint could not be resolved.
    #[error("resolving {server}")]
    Resolve {
        server: String,
        #[source]
        source: std::io::Error,
    },
    /// The connection failed (TCP, TLS, QUIC, bad frame).
    #[error("link")]
    Link(#[from] link::LinkError),
    /// cloudhub refused the hello, or answered something else.
    #[error("handshake")]
    Handshake(#[from] wire::HandshakeError),
    /// The node certificate was renewed: the session ends so the next one uses it.
    #[error("the node certificate was renewed")]
    Renewed,
    /// cloudhub sent nothing in time after the hello.
    #[error("no welcome within the handshake timeout")]
    NoWelcome,
    /// The edge store failed.
    #[error("edge store")]
    Store(#[from] metamanager::MetaError),
    /// The outbox could not be read or acked.
    #[error("outbox")]
    Outbox(#[from] objstore::StoreError),
    /// cloudhub broke the protocol.
    #[error("protocol violation: {0}")]
    Protocol(String),
    /// cloudhub stopped answering pings.
    #[error("cloud silent for longer than the keepalive timeout")]
    PeerDead,
    /// cloudhub closed the session.
    #[error("cloud closed the session: {0}")]
    PeerClosed(String),
    /// edgecore is shutting down.
    #[error("shutting down")]
    Shutdown,
}

impl From<wire::SessionError> for HubError {
    fn from(e: wire::SessionError) -> Self {
        match e {
            wire::SessionError::PeerDead => HubError::PeerDead,
            wire::SessionError::PeerClosed(reason) => HubError::PeerClosed(reason),
            other => HubError::Protocol(other.to_string()),
        }
    }
}
