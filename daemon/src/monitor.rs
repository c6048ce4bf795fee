//! The monitor listener: `/healthz`, `/readyz` and Prometheus `/metrics`.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
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

/// Awaited before each scrape, for values that take I/O to read (which `Collect` then reads).
pub type Refresh = Arc<dyn Fn() -> Pin<Box<dyn Future<Output = ()> + Send>> + Send + Sync>;

/// One readiness check: `Err(reason)` while its part of the daemon cannot do its work.
pub type Check = Arc<dyn Fn() -> Result<(), String> + Send + Sync>;

/// The checks behind `/readyz`. With none, the daemon is ready once it serves.
#[derive(Clone, Default)]
pub struct Readiness {
    checks: Vec<(String, Check)>,
}

// === impl Readiness ===

impl Readiness {
    /// Adds the check `name` (e.g. `edge-store`).
    pub fn with(
        mut self,
        name: impl Into<String>,
        check: impl Fn() -> Result<(), String> + Send + Sync + 'static,
    ) -> Self {
        self.checks.push((name.into(), Arc::new(check)));
        self
    }

    /// kube-apiserver's `/readyz?verbose` shape: a `[+]name ok` or `[-]name failed: reason`
    /// line per check, then `readyz check passed` (200) or `readyz check failed` (503).
    pub fn report(&self) -> (StatusCode, String) {
        let mut body = String::new();
        let mut ready = true;
        for (name, check) in &self.checks {
            match check() {
                Ok(()) => body.push_str(&format!("[+]{name} ok\n")),
                Err(reason) => {
                    ready = false;
                    body.push_str(&format!("[-]{name} failed: {reason}\n"));
                }
            }
        }
        match ready {
            true => (StatusCode::OK, body + "readyz check passed\n"),
            false => (
                StatusCode::SERVICE_UNAVAILABLE,
                body + "readyz check failed\n",
            ),
        }
    }
}

/// Binds `addr` and serves the monitor endpoints until `shutdown`; returns the bound address.
pub async fn serve(
    addr: SocketAddr,
    collect: Collect,
    refresh: Option<Refresh>,
    readiness: Readiness,
    shutdown: CancellationToken,
    tasks: &TaskTracker,
) -> std::io::Result<SocketAddr> {
    let listener = TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    let app = Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(move || async move { readiness.report() }))
        .route(
            "/metrics",
            get(move || metrics(collect.clone(), refresh.clone())),
        );
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

async fn metrics(collect: Collect, refresh: Option<Refresh>) -> impl IntoResponse {
    if let Some(refresh) = refresh {
        refresh().await;
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readiness_fails_naming_each_failed_check_and_its_reason() {
        let readiness = Readiness::default()
            .with("edge-store", || {
                Err("edge store cannot write: disk full".into())
            })
            .with("link", || Ok(()));
        let (code, body) = readiness.report();
        assert_eq!(code, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(
            body,
            "[-]edge-store failed: edge store cannot write: disk full\n[+]link ok\nreadyz check failed\n"
        );
        let (code, body) = Readiness::default().with("link", || Ok(())).report();
        assert_eq!(
            (code, body.as_str()),
            (StatusCode::OK, "[+]link ok\nreadyz check passed\n")
        );
    }
}
