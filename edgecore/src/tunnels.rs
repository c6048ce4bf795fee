//! The streams cloudhub opens to this node over its link: each carries one HTTP/1.1 connection
//! (upgrades included: exec, attach, port-forward) to the node's kubelet API, which edged serves.
//! Nothing listens on the node's network for it, and only cloudhub can open such a stream (the
//! link refuses streams from anywhere else).

use std::sync::{Arc, OnceLock};

use axum::http::StatusCode;
use axum::response::IntoResponse;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use tokio_util::sync::CancellationToken;

/// The kubelet API, set once edged is up (edgehub, which accepts the streams, starts first).
pub(crate) type KubeletApi = Arc<OnceLock<axum::Router>>;

/// What edgehub hands each stream to: served with the kubelet API, or, with no edged on this
/// node, answered 501 (not retried: it lasts until edged is enabled).
pub(crate) fn server(api: KubeletApi, shutdown: CancellationToken) -> edgehub::TunnelServer {
    Arc::new(move |stream: link::TunnelStream| {
        let router = api.get().cloned().unwrap_or_else(no_kubelet);
        tokio::spawn(serve(stream, router, shutdown.clone()));
    })
}

/// Serves one stream until its connection ends (an upgraded one: until its copy ends) or
/// edgecore stops.
async fn serve(stream: link::TunnelStream, router: axum::Router, shutdown: CancellationToken) {
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
            "this node serves no kubelet API: modules.edged is disabled in its edgecore.yaml\n",
        )
            .into_response()
    })
}
