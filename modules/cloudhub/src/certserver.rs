//! The certificate service (`modules.cloudHub.https`, `:10002`): how a node gets and renews its
//! certificate. `GET /ca.crt` gives the CA certificate (the joining node checks it against the
//! hash in its token). `POST /edge.crt` with a CSR (PEM) signs a node certificate (CN
//! `system:node:<name>`, O `system:nodes`, valid `edgeCertSigningDuration`):
//! - with `Authorization: Bearer <token>`: a join. The token must exist in the Kubernetes API,
//!   be neither expired nor revoked, and the node name must not have joined before (a record per
//!   joined node, see [`bootstrap::store`]); each refusal says which of these failed.
//! - over mutual TLS with a certificate this CA signed for the same node: a renewal, no token.
//!   Refused (403) when the node was revoked after that certificate was issued
//!   ([`bootstrap::revoke`]), and held back (429) when the node renewed within the renewal
//!   window and its certificate is not near its end ([`certlimit::Renewals`]).
//!
//! A token that does not exist and one whose secret is wrong get the same answer, so guesses do
//! not reveal which token ids exist. Failed attempts are rate limited per client address and
//! overall ([`certlimit::Failures`]): 429 with `Retry-After` until the allowance refills.
//! Refusals carry a Kubernetes `Status` body. Every answer carries the service's clock in its
//! `Date` header, which the edge compares with its own.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::{Extension, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use bootstrap::{Credential, Refusal, StoreError, Timestamp, paths, store};
use kapi::{Connection, PeerCertificate, RemoteAddr};
use pki::Ca;
use tokio::net::TcpListener;

use crate::certlimit::{Failures, HeldBack, Renewals};
use crate::error::HubError;

/// What the routes share.
struct Service {
    ca: Ca,
    kube: Option<kube::Client>,
    validity: Duration,
    failures: Mutex<Failures>,
    renewals: Mutex<Renewals>,
}

/// Binds the certificate service's listener; serving starts at once on `tasks`.
pub(crate) async fn start(
    addr: SocketAddr,
    ca: Ca,
    server: &pki::CertifiedKey,
    kube: Option<kube::Client>,
    validity: Duration,
    shutdown: tokio_util::sync::CancellationToken,
    tasks: &tokio_util::task::TaskTracker,
) -> Result<SocketAddr, HubError> {
    let tls = pki::server_config_optional_client(
        ca.cert_pem(),
        &server.cert_pem,
        &server.key_pem,
        &[b"h2", b"http/1.1"],
    )?;
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|source| HubError::BindHttps { addr, source })?;
    let bound = listener
        .local_addr()
        .map_err(|source| HubError::BindHttps { addr, source })?;
    if let Some(client) = &kube {
        tasks.spawn(publish_ca(
            client.clone(),
            ca.cert_pem().to_string(),
            shutdown.clone(),
        ));
    }
    let service = Arc::new(Service {
        ca,
        kube,
        validity,
        failures: Mutex::new(Failures::new(Instant::now())),
        renewals: Mutex::new(Renewals::default()),
    });
    let app = Router::new()
        .route(paths::CA, get(ca_cert))
        .route(paths::EDGE_CERT, post(edge_cert))
        .with_state(service);
    tasks.spawn(kapi::serve(
        listener,
        Some(Arc::new(tls)),
        app,
        kapi::ServeConfig::default(),
        kapi::ServeStats::default(),
        shutdown,
        tasks.clone(),
    ));
    tracing::info!(bound = %bound, "certificate service listening (keadm join, certificate renewal)");
    Ok(bound)
}

/// Publishes the CA for `keadm gettoken`, retrying until the API takes it.
async fn publish_ca(
    client: kube::Client,
    ca_pem: String,
    shutdown: tokio_util::sync::CancellationToken,
) {
    let mut pause = Duration::from_millis(200);
    loop {
        match store::publish_ca(&client, &ca_pem).await {
            Ok(()) => return,
            Err(e) => tracing::warn!(error = %e, "cannot publish the CA certificate yet; retrying"),
        }
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(pause) => {}
        }
        pause = (pause * 2).min(Duration::from_secs(30));
    }
}

async fn ca_cert(State(service): State<Arc<Service>>) -> Response {
    (
        [(header::CONTENT_TYPE, "application/x-pem-file")],
        service.ca.cert_pem().to_string(),
    )
        .into_response()
}

async fn edge_cert(
    State(service): State<Arc<Service>>,
    Extension(RemoteAddr(remote)): Extension<RemoteAddr>,
    Extension(connection): Extension<Connection>,
    peer: Option<Extension<PeerCertificate>>,
    headers: HeaderMap,
    body: String,
) -> Response {
    let ip = remote.ip();
    let held = service.lock_failures().held_back(ip, Instant::now());
    if let Some(held) = held {
        return too_many(held);
    }
    let peer = peer.and_then(|Extension(c)| pki::node_name(&c.0).map(|node| (node, c.0)));
    let outcome = match peer {
        Some((node, cert)) => service.renew(&node, &cert, &body).await,
        None => service.join(&headers, &body).await,
    };
    match outcome {
        Ok((node, cert)) => {
            connection.authenticated();
            tracing::info!(node_id = %node, %remote, "node certificate signed");
            ([(header::CONTENT_TYPE, "application/x-pem-file")], cert).into_response()
        }
        Err(failure) => {
            if failure.counts {
                service.lock_failures().failed(ip, Instant::now());
            }
            tracing::info!(%remote, reason = failure.reason, message = %failure.message, "certificate request refused");
            let mut resp = status(failure.code, failure.reason, &failure.message);
            if let Some(wait) = failure.retry_after {
                resp.headers_mut().insert(
                    header::RETRY_AFTER,
                    HeaderValue::from(wait.as_secs().max(1)),
                );
            }
            resp
        }
    }
}

/// A refused request.
struct Failure {
    code: StatusCode,
    reason: &'static str,
    message: String,
    /// Whether it counts against the address's allowance (a wrong credential does).
    counts: bool,
    /// When to ask again, if that can help.
    retry_after: Option<Duration>,
}

impl Failure {
    fn new(code: StatusCode, reason: &'static str, message: String, counts: bool) -> Failure {
        Failure {
            code,
            reason,
            message,
            counts,
            retry_after: None,
        }
    }

    fn bad_csr(e: pki::PkiError) -> Failure {
        Failure::new(StatusCode::BAD_REQUEST, "BadRequest", e.to_string(), true)
    }

    fn unavailable(e: impl std::fmt::Display) -> Failure {
        let message = format!("the Kubernetes API cannot be used: {e}");
        Failure::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "ServiceUnavailable",
            message,
            false,
        )
    }

    fn forbidden(message: String) -> Failure {
        Failure::new(StatusCode::FORBIDDEN, "Forbidden", message, true)
    }

    fn refused(r: Refusal) -> Failure {
        let reason = match &r {
            Refusal::Malformed(_) => "TokenMalformed",
            // One reason and one message whether the id exists or not.
            Refusal::Invalid { .. } => "TokenInvalid",
            Refusal::Expired { .. } => "TokenExpired",
            Refusal::Revoked { .. } => "TokenRevoked",
        };
        Failure::new(StatusCode::UNAUTHORIZED, reason, r.to_string(), true)
    }
}

impl Service {
    fn lock_failures(&self) -> std::sync::MutexGuard<'_, Failures> {
        self.failures.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn lock_renewals(&self) -> std::sync::MutexGuard<'_, Renewals> {
        self.renewals.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Renewal: the CSR must be for the node whose certificate `cert` the client presented,
    /// that certificate not revoked, and the node not renewing again too soon.
    async fn renew(
        &self,
        node: &str,
        cert: &pki::Der<'static>,
        csr: &str,
    ) -> Result<(String, String), Failure> {
        let asked = pki::csr_node_name(csr).map_err(Failure::bad_csr)?;
        if asked != node {
            return Err(Failure::forbidden(format!(
                "node {node:?} may renew only its own certificate, not one for {asked:?}"
            )));
        }
        let presented = pki::validity_der(cert).map_err(Failure::bad_csr)?;
        let revoked_at = self.revoked_at(node).await?;
        if let Some(at) = revoked_at.filter(|at| pki::revoked_by(presented.0, *at)) {
            return Err(Failure::forbidden(revoked(node, at)));
        }
        let wall = Timestamp::now().as_second();
        self.lock_renewals()
            .check(node, Instant::now(), self.validity, presented, wall)
            .map_err(|held| Failure {
                retry_after: Some(held.wait),
                ..Failure::new(
                    StatusCode::TOO_MANY_REQUESTS,
                    "TooManyRequests",
                    held.message,
                    false,
                )
            })?;
        let cert = self
            .ca
            .sign_node_csr_after(csr, node, self.validity, revoked_at)
            .map_err(Failure::bad_csr)?;
        self.lock_renewals().renewed(node, Instant::now());
        Ok((node.to_string(), cert))
    }

    /// When `node` was revoked, if it was (never without a Kubernetes API).
    async fn revoked_at(&self, node: &str) -> Result<Option<i64>, Failure> {
        let Some(client) = &self.kube else {
            return Ok(None);
        };
        let revocations = bootstrap::revoke::revocations(client)
            .await
            .map_err(Failure::unavailable)?;
        Ok(revocations.revoked_at(node))
    }

    /// A join with a bootstrap token.
    async fn join(&self, headers: &HeaderMap, csr: &str) -> Result<(String, String), Failure> {
        let bearer = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        let Some(bearer) = bearer else {
            return Err(Failure::new(
                StatusCode::UNAUTHORIZED,
                "Unauthorized",
                "no credentials: send a bootstrap token (Authorization: Bearer <token>, from `keadm gettoken`) or present the node's certificate".into(),
                true,
            ));
        };
        let credential = Credential::parse(bearer).map_err(|e| Failure::refused(e.into()))?;
        let node = pki::csr_node_name(csr).map_err(Failure::bad_csr)?;
        let Some(client) = &self.kube else {
            return Err(Failure::unavailable("cloudhub runs without one"));
        };
        store::check_token(client, &credential, Timestamp::now())
            .await
            .map_err(Failure::unavailable)?
            .map_err(Failure::refused)?;
        if let Some(why) = store::already_joined(client, &node)
            .await
            .map_err(Failure::unavailable)?
        {
            return Err(already(why));
        }
        match store::claim(client, &node, csr, &credential.id).await {
            Ok(()) => {}
            Err(StoreError::AlreadyJoined(why)) => return Err(already(why)),
            Err(e) => return Err(Failure::unavailable(e)),
        }
        // A node revoked before gets a certificate its revocation does not cover.
        let revoked_at = self.revoked_at(&node).await?;
        let cert = match self
            .ca
            .sign_node_csr_after(csr, &node, self.validity, revoked_at)
        {
            Ok(c) => c,
            Err(e) => {
                store::release(client, &node).await;
                return Err(Failure::bad_csr(e));
            }
        };
        if let Err(e) = store::complete(client, &node, &cert).await {
            tracing::warn!(node_id = %node, error = %e, "the join record could not be completed; the certificate is issued anyway");
        }
        Ok((node, cert))
    }
}

fn already(why: String) -> Failure {
    Failure::new(StatusCode::CONFLICT, "AlreadyExists", why, false)
}

fn revoked(node: &str, at: i64) -> String {
    let when = Timestamp::from_second(at)
        .map(|t| t.to_string())
        .unwrap_or_else(|_| at.to_string());
    format!(
        "node {node:?} was revoked at {when} (`keadm revoke`): certificates issued for it before then are not renewed; join it again with a new token"
    )
}

/// A 429 with `Retry-After`.
fn too_many(held: HeldBack) -> Response {
    let mut resp = status(
        StatusCode::TOO_MANY_REQUESTS,
        "TooManyRequests",
        &held.message,
    );
    resp.headers_mut().insert(
        header::RETRY_AFTER,
        HeaderValue::from(held.wait.as_secs().max(1)),
    );
    resp
}

/// A Kubernetes `Status` answer.
fn status(code: StatusCode, reason: &str, message: &str) -> Response {
    let body = serde_json::json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code.as_u16(),
    });
    (
        code,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn service() -> Service {
        Service {
            ca: Ca::generate("test", Duration::from_secs(3600)).unwrap(),
            kube: None,
            validity: Duration::from_secs(3600),
            failures: Mutex::new(Failures::new(Instant::now())),
            renewals: Mutex::new(Renewals::default()),
        }
    }

    fn presented(s: &Service, node: &str) -> pki::Der<'static> {
        let issued = s.ca.issue_node(node, s.validity).unwrap();
        pki::first_cert(&issued.cert_pem).unwrap()
    }

    #[tokio::test]
    async fn a_renewal_is_only_for_the_node_presenting_its_certificate() {
        let s = service();
        let (csr, _) = pki::node_csr("edge-1").unwrap();
        let (node, cert) = s
            .renew("edge-1", &presented(&s, "edge-1"), &csr)
            .await
            .map_err(|f| f.message)
            .unwrap();
        assert_eq!(node, "edge-1");
        assert_eq!(
            pki::node_name(&pki::first_cert(&cert).unwrap()).as_deref(),
            Some("edge-1")
        );
        let other = s
            .renew("edge-2", &presented(&s, "edge-2"), &csr)
            .await
            .expect_err("refused");
        assert_eq!(other.code, StatusCode::FORBIDDEN);
    }

    #[tokio::test]
    async fn a_second_renewal_at_once_is_held_back_with_retry_after() {
        let s = service();
        let cert = presented(&s, "edge-1");
        let (csr, _) = pki::node_csr("edge-1").unwrap();
        s.renew("edge-1", &cert, &csr)
            .await
            .map_err(|f| f.message)
            .unwrap();
        let again = s.renew("edge-1", &cert, &csr).await.expect_err("too soon");
        assert_eq!(again.code, StatusCode::TOO_MANY_REQUESTS);
        assert!(again.retry_after.is_some_and(|w| w > Duration::ZERO));
    }
}
