//! PKI errors.

/// A certificate or key could not be made, read or used.
#[derive(Debug, thiserror::Error)]
pub enum PkiError {
    /// rcgen refused to generate or sign.
    #[error("generating a certificate failed")]
    Generate(#[from] rcgen::Error),
    /// A PEM file held no certificate or key, or a malformed one.
    #[error("no valid {what} in PEM input")]
    Pem { what: &'static str },
    /// A PEM file holds no valid certificate or key of the kind asked for.
    #[error("{} holds no valid {what}", path.display())]
    PemFile {
        what: &'static str,
        path: std::path::PathBuf,
        #[source]
        source: Box<PkiError>,
    },
    /// A file could not be read or written.
    #[error("{op} {path}")]
    Io {
        op: &'static str,
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// rustls refused the certificates or keys.
    #[error("building the TLS config failed")]
    Tls(#[from] rustls::Error),
    /// The client-certificate verifier could not be built from the CA.
    #[error("building the client certificate verifier failed")]
    Verifier(#[from] rustls::server::VerifierBuilderError),
    /// A certificate signing request is malformed or asks for a name it may not have.
    #[error("certificate signing request refused: {0}")]
    Csr(String),
    /// A certificate signing request's key is of a kind the CA does not take.
    #[error("certificate signing request refused: unsupported {kind} (supported: {supported})")]
    UnsupportedKey {
        kind: String,
        supported: &'static str,
    },
}
