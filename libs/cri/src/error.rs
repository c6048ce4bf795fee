//! Errors of the CRI client: the socket did not answer, a call failed, or the endpoint is not a
//! unix socket.

/// A CRI step that failed.
#[derive(Debug, thiserror::Error)]
pub enum CriError {
    /// The runtime's socket could not be reached, or did not answer `Version`.
    #[error("cannot reach the CRI runtime at {endpoint}")]
    Connect {
        endpoint: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A CRI call returned an error status.
    #[error("CRI {op} failed: {}", source.message())]
    Call {
        op: &'static str,
        #[source]
        source: tonic::Status,
    },
    /// The endpoint is neither `unix:///absolute/path` nor an absolute path.
    #[error("CRI endpoint {0:?} is not unix:///absolute/path or an absolute path")]
    BadEndpoint(String),
}

// === impl CriError ===

impl CriError {
    /// The runtime answered that the object (sandbox, container, image) does not exist.
    pub fn is_not_found(&self) -> bool {
        matches!(self, CriError::Call { source, .. } if source.code() == tonic::Code::NotFound)
    }

    /// The gRPC status code of a failed call, if the error is one.
    pub fn code(&self) -> Option<tonic::Code> {
        match self {
            CriError::Call { source, .. } => Some(source.code()),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn call_error_names_the_op_and_knows_not_found() {
        let err = CriError::Call {
            op: "RunPodSandbox",
            source: tonic::Status::not_found("sandbox \"x\" not found"),
        };
        assert_eq!(
            err.to_string(),
            "CRI RunPodSandbox failed: sandbox \"x\" not found"
        );
        assert!(err.is_not_found());
        assert_eq!(err.code(), Some(tonic::Code::NotFound));
        assert!(!CriError::BadEndpoint("tcp://x".into()).is_not_found());
    }
}
