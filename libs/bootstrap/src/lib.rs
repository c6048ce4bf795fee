//! bootstrap: how a node joins. The token format ([`token`]), what the certificate service
//! keeps in the Kubernetes API ([`store`]: hashed tokens with a TTL, the published CA, one
//! record per joined node, the revoked nodes: [`revoke`]), and the small HTTPS client ([`https`]) `keadm join` and edgehub's
//! certificate renewal use to reach the certificate service (`:10002`).
#![forbid(unsafe_code)]

pub mod https;
pub mod revoke;
pub mod store;
pub mod token;

pub use jiff::Timestamp;
pub use revoke::Revocations;
pub use store::{Refusal, StoreError, TokenInfo};
pub use token::{Credential, Malformed, Token, ca_hash};

/// The certificate service's paths.
pub mod paths {
    /// `GET`: the CA certificate (PEM).
    pub const CA: &str = "/ca.crt";
    /// `POST` a CSR (PEM): with `Authorization: Bearer <token>` to join, or over mutual TLS
    /// with the current node certificate to renew. Answers the certificate (PEM).
    pub const EDGE_CERT: &str = "/edge.crt";
}
