//! Serving the REST routes: accept connections on a bound listener (TLS first when configured),
//! one task per connection under a semaphore, HTTP/1.1 or HTTP/2. A client certificate a TLS
//! client presented reaches the routes as a [`PeerCertificate`] request extension (the caller's
//! authentication layer turns it into a [`crate::User`]). Watches never end on their own, so at
//! shutdown open connections are dropped rather than drained.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::{Extension, Router};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// Connections served at once; further clients wait in the listen backlog.
const MAX_CONNECTIONS: usize = 1024;
/// Time a client has to finish the TLS handshake.
const HANDSHAKE: Duration = Duration::from_secs(10);

/// The first certificate a TLS client presented, on each request of its connection.
#[derive(Clone, Debug)]
pub struct PeerCertificate(pub rustls::pki_types::CertificateDer<'static>);

/// Accepts connections until `shutdown`; every connection runs on `tasks`.
pub async fn serve(
    listener: TcpListener,
    tls: Option<Arc<rustls::ServerConfig>>,
    app: Router,
    shutdown: CancellationToken,
    tasks: TaskTracker,
) {
    let acceptor = tls.map(TlsAcceptor::from);
    let limit = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        let permit = tokio::select! {
            biased;
            _ = shutdown.cancelled() => return,
            // The semaphore is never closed.
            p = limit.clone().acquire_owned() => p.expect("semaphore open"),
        };
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
        let (acceptor, app, shutdown) = (acceptor.clone(), app.clone(), shutdown.clone());
        tasks.spawn(async move {
            let _permit = permit;
            let Some(acceptor) = acceptor else {
                return connection(tcp, remote, app, shutdown).await;
            };
            match tokio::time::timeout(HANDSHAKE, acceptor.accept(tcp)).await {
                Ok(Ok(tls)) => {
                    let peer = tls.get_ref().1.peer_certificates().and_then(|c| c.first());
                    let app = match peer {
                        Some(cert) => {
                            app.layer(Extension(PeerCertificate(cert.clone().into_owned())))
                        }
                        None => app,
                    };
                    connection(tls, remote, app, shutdown).await
                }
                Ok(Err(e)) => tracing::debug!(%remote, error = %e, "TLS handshake failed"),
                Err(_) => tracing::debug!(%remote, "TLS handshake timed out"),
            }
        });
    }
}

/// Serves HTTP on one connection until it closes or `shutdown`.
async fn connection<I>(io: I, remote: SocketAddr, app: Router, shutdown: CancellationToken)
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
    let conn =
        builder.serve_connection_with_upgrades(TokioIo::new(io), TowerToHyperService::new(app));
    tokio::select! {
        r = conn => if let Err(e) = r {
            tracing::debug!(%remote, error = %e, "connection ended with an error");
        },
        _ = shutdown.cancelled() => {}
    }
}
