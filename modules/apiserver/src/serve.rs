//! HTTPS serving: TLS with optional client certificates, then HTTP/1.1 or HTTP/2, each request
//! authenticated before it reaches the REST routes.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{Request, Response, header};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tower::ServiceExt;

use crate::auth::{Authenticator, user_from_cert};

/// Time a client has to finish the TLS handshake.
const HANDSHAKE: Duration = Duration::from_secs(10);

/// Accepts connections until `shutdown`; every connection runs on `tasks`.
pub(crate) async fn serve(
    listener: TcpListener,
    tls: Arc<rustls::ServerConfig>,
    app: Router,
    auth: Arc<Authenticator>,
    shutdown: CancellationToken,
    tasks: TaskTracker,
) {
    let acceptor = TlsAcceptor::from(tls);
    loop {
        let accepted = tokio::select! {
            biased;
            _ = shutdown.cancelled() => return,
            a = listener.accept() => a,
        };
        let (tcp, remote) = match accepted {
            Ok(a) => a,
            Err(e) => {
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let (acceptor, app, auth, shutdown) = (
            acceptor.clone(),
            app.clone(),
            auth.clone(),
            shutdown.clone(),
        );
        tasks.spawn(async move {
            let tls = match tokio::time::timeout(HANDSHAKE, acceptor.accept(tcp)).await {
                Ok(Ok(tls)) => tls,
                Ok(Err(e)) => return tracing::debug!(%remote, error = %e, "TLS handshake failed"),
                Err(_) => return tracing::debug!(%remote, "TLS handshake timed out"),
            };
            let cert_user = tls.get_ref().1.peer_certificates().and_then(|c| c.first()).and_then(user_from_cert);
            let service = tower::service_fn(move |req: Request<hyper::body::Incoming>| {
                let (app, auth, cert_user) = (app.clone(), auth.clone(), cert_user.clone());
                async move { Ok::<_, Infallible>(handle(app, &auth, cert_user.as_ref(), req).await) }
            });
            let builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
            let conn = builder.serve_connection_with_upgrades(TokioIo::new(tls), TowerToHyperService::new(service));
            tokio::select! {
                r = conn => if let Err(e) = r { tracing::debug!(%remote, error = %e, "connection ended with an error") },
                _ = shutdown.cancelled() => {}
            }
        });
    }
}

/// Authenticates one request and hands it to the routes.
async fn handle(
    app: Router,
    auth: &Authenticator,
    cert_user: Option<&kapi::User>,
    mut req: Request<hyper::body::Incoming>,
) -> Response<Body> {
    let authorization = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    match auth.user(authorization, cert_user) {
        Ok(user) => {
            req.extensions_mut().insert(user);
            match app.oneshot(req.map(Body::new)).await {
                Ok(resp) => resp,
                Err(never) => match never {},
            }
        }
        Err(e) => status_response(&e),
    }
}

fn status_response(e: &apimachinery::ApiError) -> Response<Body> {
    let body = serde_json::to_vec(&e.to_status()).expect("a Status serializes");
    Response::builder()
        .status(e.code)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(body))
        .expect("a valid response")
}
