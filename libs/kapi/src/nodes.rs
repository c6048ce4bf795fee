//! How the API server reaches a node's kubelet API: a [`NodeDialer`] opens a byte stream to the
//! node, over which HTTP/1.1 is spoken (upgrades included, for exec, attach and port-forward),
//! as kube-apiserver speaks to a kubelet. cloudcore's dialer opens a stream over the node's
//! existing session with cloudhub (the tunnel); a node with no session is refused at once with
//! [`DialError::NotConnected`], never after a timeout.
//!
//! Added to a router with [`with_node_dialer`]; without one, the kubelet streams are answered as
//! an unreachable kubelet.

use std::sync::Arc;

use axum::http::{Request, StatusCode};
use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Limited};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};

pub use crate::server::streams::relay::{RelayError, relay};

/// A stream to one node's kubelet API.
pub trait NodeStream: AsyncRead + AsyncWrite + Send + Unpin + 'static {}

impl<T: AsyncRead + AsyncWrite + Send + Unpin + 'static> NodeStream for T {}

/// Why no stream to a node could be opened.
#[derive(Debug, thiserror::Error)]
pub enum DialError {
    /// The node holds no session with this cloudcore.
    #[error("node {node} is not connected to cloudcore")]
    NotConnected { node: String },
    /// The node is connected but the stream could not be opened (too many open, link lost).
    #[error("opening a stream to node {node}: {reason}")]
    Failed { node: String, reason: String },
}

/// Opens streams to nodes' kubelet APIs.
#[async_trait::async_trait]
pub trait NodeDialer: Send + Sync + 'static {
    /// A new stream to the kubelet API of `node`.
    async fn dial(&self, node: &str) -> Result<Box<dyn NodeStream>, DialError>;
}

/// The dialer a router was given, as its handlers find it.
#[derive(Clone)]
pub struct Dialer(pub Arc<dyn NodeDialer>);

/// `router` reaching nodes' kubelet APIs through `dialer`.
pub fn with_node_dialer(router: axum::Router, dialer: Arc<dyn NodeDialer>) -> axum::Router {
    router.layer(axum::Extension(Dialer(dialer)))
}

/// Why a [`get`] from a node's kubelet API failed.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    #[error(transparent)]
    Dial(#[from] DialError),
    #[error("GET {path} from node {node}: {reason}")]
    Http {
        node: String,
        path: String,
        reason: String,
    },
    #[error("GET {path} from node {node}: answered {status}")]
    Status {
        node: String,
        path: String,
        status: StatusCode,
    },
}

/// `GET path` (with its query) from the kubelet API of `node`: the body of a 200 answer, read up
/// to `limit` bytes.
pub async fn get(
    dialer: &dyn NodeDialer,
    node: &str,
    path: &str,
    limit: usize,
) -> Result<Bytes, FetchError> {
    let http = |reason: String| FetchError::Http {
        node: node.to_owned(),
        path: path.to_owned(),
        reason,
    };
    let stream = dialer.dial(node).await?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| http(e.to_string()))?;
    let driver = tokio::spawn(conn);
    let request = Request::get(path)
        .header("host", node)
        .body(Empty::<Bytes>::new())
        .map_err(|e| http(e.to_string()))?;
    let answer = sender
        .send_request(request)
        .await
        .map_err(|e| http(e.to_string()));
    let result = match answer {
        Ok(answer) if answer.status() == StatusCode::OK => Limited::new(answer.into_body(), limit)
            .collect()
            .await
            .map(|b| b.to_bytes())
            .map_err(|e| http(e.to_string())),
        Ok(answer) => Err(FetchError::Status {
            node: node.to_owned(),
            path: path.to_owned(),
            status: answer.status(),
        }),
        Err(e) => Err(e),
    };
    driver.abort();
    result
}
