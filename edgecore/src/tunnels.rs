//! The streams cloudhub opens to this node over its link: each carries one HTTP/1.1 connection
//! (upgrades included: exec, attach, port-forward) to the node's kubelet API, which edged serves,
//! or, with `modules.edgeStream`, a native kubelet on the node's loopback ([`Forward`]).
//! Nothing listens on the node's network for it, and only cloudhub can open such a stream (the
//! link refuses streams from anywhere else).

use std::sync::{Arc, OnceLock};

use axum::http::StatusCode;
use axum::response::IntoResponse;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use tokio_util::sync::CancellationToken;

use crate::edgestream::Forward;

/// The kubelet API, set once edged is up (edgehub, which accepts the streams, starts first).
pub(crate) type KubeletApi = Arc<OnceLock<axum::Router>>;

/// What edgehub hands each stream to: served with edged's kubelet API, joined with the native
/// kubelet's (`forward`), or, with neither on this node, answered 501 (not retried: it lasts
/// until one is enabled).
pub(crate) fn server(
    api: KubeletApi,
    forward: Option<Arc<Forward>>,
    shutdown: CancellationToken,
) -> edgehub::TunnelServer {
    Arc::new(move |stream: link::TunnelStream| {
        let shutdown = shutdown.clone();
        match (api.get().cloned(), &forward) {
            (Some(router), _) => drop(tokio::spawn(serve(stream, router, shutdown))),
            (None, Some(forward)) => {
                let forward = forward.clone();
                tokio::spawn(async move { forward.join(stream, shutdown).await });
            }
            (None, None) => drop(tokio::spawn(serve(stream, no_kubelet(), shutdown))),
        }
    })
}

/// Serves one stream until its connection ends (an upgraded one: until its copy ends) or
/// edgecore stops.
pub(crate) async fn serve(
    stream: link::TunnelStream,
    router: axum::Router,
    shutdown: CancellationToken,
) {
    let conn = hyper::server::conn::http1::Builder::new()
        .serve_connection(TokioIo::new(stream), TowerToHyperService::new(router))
        .with_upgrades();
    tokio::pin!(conn);
    let ended = tokio::select! {
        ended = conn.as_mut() => ended,
        _ = shutdown.cancelled() => {
            conn.as_mut().graceful_shutdown();
            conn.await
        }
    };
    if let Err(e) = ended {
        tracing::debug!(error = %e, "kubelet API stream ended");
    }
}

/// The answer of a node whose kubelet API is not served (`modules.edged` off).
fn no_kubelet() -> axum::Router {
    axum::Router::new().fallback(|| async {
        (
            StatusCode::NOT_IMPLEMENTED,
            "this node serves no kubelet API: modules.edged is disabled in its edgecore.yaml, and so is modules.edgeStream (a native kubelet behind it)\n",
        )
            .into_response()
    })
}
