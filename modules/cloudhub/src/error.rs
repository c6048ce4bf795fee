//! cloudhub errors.

/// cloudhub could not start, or a session ended abnormally.
#[derive(Debug, thiserror::Error)]
pub enum HubError {
    /// The CA or server certificate could not be loaded or made.
    #[error("preparing cloudhub certificates")]
    Certs(#[from] pki::PkiError),
    /// A listener could not be bound.
    #[error("binding the {transport} listener on {addr}")]
    Bind {
        transport: &'static str,
        addr: std::net::SocketAddr,
        #[source]
        source: link::LinkError,
    },
    /// The certificate service's listener could not be bound.
    #[error("binding the certificate service (https) on {addr}")]
    BindHttps {
        addr: std::net::SocketAddr,
        #[source]
        source: std::io::Error,
    },
    /// The connection failed (TLS, socket, bad frame).
    #[error("link")]
    Link(#[from] link::LinkError),
    /// The client certificate names no node.
    #[error(
        "the client certificate is not a node certificate (CN system:node:<name>, O system:nodes)"
    )]
    NotANode,
    /// The first frame was not a hello, or it did not come in time.
    #[error("no hello: {0}")]
    NoHello(String),
    /// The hello was refused (impersonation, no common version).
    #[error("hello refused")]
    Handshake(#[from] wire::HandshakeError),
    /// The peer broke the protocol (bad ack, data beyond the window, oversized inventory).
    #[error("protocol violation: {0}")]
    Protocol(String),
    /// The peer stopped answering pings.
    #[error("peer silent for longer than the keepalive timeout")]
    PeerDead,
    /// The peer closed the session.
    #[error("peer closed the session: {0}")]
    PeerClosed(String),
    /// A newer session of the same node took over.
    #[error("replaced by a newer session of the same node")]
    Replaced,
    /// Too many handshakes were in progress for too long; the connection was refused.
    #[error("refused: too many handshakes in progress for {0:?}")]
    Busy(std::time::Duration),
    /// cloudhub is shutting down.
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

/// Why no stream to a node's kubelet API could be opened.
#[derive(Debug, thiserror::Error)]
pub enum TunnelError {
    /// The node holds no session with this cloudhub.
    #[error("node {node} is not connected to cloudcore")]
    NotConnected { node: String },
    /// The session is there but the stream could not be opened.
    #[error("opening a stream to node {node}")]
    Open {
        node: String,
        #[source]
        source: link::LinkError,
    },
}
