//! The monitor listener: `/healthz`, `/readyz` and Prometheus `/metrics`.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// Metrics source: the daemon fills a registry on each scrape (fresh values, no global state).
pub type Collect = Arc<dyn Fn(&mut Registry) + Send + Sync>;

/// Binds `addr` and serves the monitor endpoints until `shutdown`; returns the bound address.
pub async fn serve(
    addr: SocketAddr,
    collect: Collect,
    shutdown: CancellationToken,
    tasks: &TaskTracker,
) -> std::io::Result<SocketAddr> {
    let listener = TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    let app = Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(|| async { "ok" }))
        .route("/metrics", get(move || metrics(collect.clone())));
    tasks.spawn(async move {
        let served = axum::serve(listener, app)
            .with_graceful_shutdown(shutdown.cancelled_owned())
            .await;
        if let Err(e) = served {
            tracing::error!(error = %e, "monitor server failed");
        }
    });
    Ok(bound)
}

/// Registers the beehive runtime counters.
pub fn register_beehive(registry: &mut Registry, stats: beehive::Stats) {
    registry.register(
        "beehive_dropped_messages",
        "Messages dropped because a mailbox was full (try_send)",
        ConstCounter::new(stats.dropped),
    );
    registry.register(
        "beehive_late_responses",
        "Responses that arrived after their waiter gave up",
        ConstCounter::new(stats.late_responses),
    );
}

async fn metrics(collect: Collect) -> impl IntoResponse {
    let mut registry = Registry::default();
    collect(&mut registry);
    let mut body = String::new();
    match encode(&mut body, &registry) {
        Ok(()) => (
            StatusCode::OK,
            [(
                header::CONTENT_TYPE,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
            )],
            body,
        )
            .into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}
