//! The certificate service (`modules.cloudHub.https`, `:10002`): how a node gets and renews its
//! certificate. `GET /ca.crt` gives the CA certificate (the joining node checks it against the
//! hash in its token). `POST /edge.crt` with a CSR (PEM) signs a node certificate (CN
//! `system:node:<name>`, O `system:nodes`, valid `edgeCertSigningDuration`):
//! - with `Authorization: Bearer <token>`: a join. The token must exist in the Kubernetes API,
//!   be neither expired nor revoked, and the node name must not have joined before (a record per
//!   joined node, see [`bootstrap::store`]); each refusal says which of these failed.
//! - over mutual TLS with a certificate this CA signed for the same node: a renewal, no token.
//!
//! Failed attempts are rate limited per client address: after [`BURST`] failures, further
//! requests from that address get 429 with `Retry-After` until the allowance refills (one
//! attempt every [`REFILL`]). Refusals carry a Kubernetes `Status` body.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
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

use crate::error::HubError;

/// Failed attempts an address may make before it is held back.
pub const BURST: u32 = 5;
/// One more attempt is allowed after each such pause.
pub const REFILL: Duration = Duration::from_secs(10);
/// Most addresses remembered; the fullest allowances are forgotten first.
const MAX_TRACKED: usize = 10_000;

/// What the routes share.
struct Service {
    ca: Ca,
    kube: Option<kube::Client>,
    validity: Duration,
    failures: Mutex<HashMap<IpAddr, Allowance>>,
}

/// A token bucket of failed attempts.
#[derive(Clone, Copy, Debug)]
struct Allowance {
    left: f64,
    at: Instant,
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
        failures: Mutex::new(HashMap::new()),
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
    if let Some(wait) = service.held_back(ip, Instant::now()) {
        let secs = wait.as_secs().max(1);
        let mut resp = status(
            StatusCode::TOO_MANY_REQUESTS,
            "TooManyRequests",
            &format!("too many failed attempts from {ip}: retry in {secs}s"),
        );
        resp.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(secs));
        return resp;
    }
    let outcome = match peer.and_then(|Extension(c)| pki::node_name(&c.0)) {
        Some(node) => service.renew(&node, &body),
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
                service.failed(ip, Instant::now());
            }
            tracing::info!(%remote, reason = failure.reason, message = %failure.message, "certificate request refused");
            status(failure.code, failure.reason, &failure.message)
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
}

impl Failure {
    fn bad_csr(e: pki::PkiError) -> Failure {
        Failure {
            code: StatusCode::BAD_REQUEST,
            reason: "BadRequest",
            message: e.to_string(),
            counts: true,
        }
    }

    fn unavailable(e: impl std::fmt::Display) -> Failure {
        Failure {
            code: StatusCode::SERVICE_UNAVAILABLE,
            reason: "ServiceUnavailable",
            message: format!("the Kubernetes API cannot be used: {e}"),
            counts: false,
        }
    }

    fn refused(r: Refusal) -> Failure {
        Failure {
            code: StatusCode::UNAUTHORIZED,
            reason: match &r {
                Refusal::Malformed(_) => "TokenMalformed",
                Refusal::Unknown { .. } => "TokenUnknown",
                Refusal::WrongSecret { .. } => "TokenInvalid",
                Refusal::Expired { .. } => "TokenExpired",
                Refusal::Revoked { .. } => "TokenRevoked",
            },
            message: r.to_string(),
            counts: true,
        }
    }
}

impl Service {
    /// Renewal: the CSR must be for the node whose certificate the client presented.
    fn renew(&self, node: &str, csr: &str) -> Result<(String, String), Failure> {
        let asked = pki::csr_node_name(csr).map_err(Failure::bad_csr)?;
        if asked != node {
            return Err(Failure {
                code: StatusCode::FORBIDDEN,
                reason: "Forbidden",
                message: format!(
                    "node {node:?} may renew only its own certificate, not one for {asked:?}"
                ),
                counts: true,
            });
        }
        let cert = self
            .ca
            .sign_node_csr(csr, node, self.validity)
            .map_err(Failure::bad_csr)?;
        Ok((node.to_string(), cert))
    }

    /// A join with a bootstrap token.
    async fn join(&self, headers: &HeaderMap, csr: &str) -> Result<(String, String), Failure> {
        let bearer = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        let Some(bearer) = bearer else {
            return Err(Failure {
                code: StatusCode::UNAUTHORIZED,
                reason: "Unauthorized",
                message: "no credentials: send a bootstrap token (Authorization: Bearer <token>, from `keadm gettoken`) or present the node's certificate".into(),
                counts: true,
            });
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
        let cert = match self.ca.sign_node_csr(csr, &node, self.validity) {
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

    /// How long `ip` must wait, if it has no failed attempt left.
    fn held_back(&self, ip: IpAddr, now: Instant) -> Option<Duration> {
        let failures = self.failures.lock().unwrap_or_else(|p| p.into_inner());
        let allowance = failures.get(&ip)?.refilled(now);
        (allowance.left < 1.0).then(|| REFILL.mul_f64(1.0 - allowance.left))
    }

    fn failed(&self, ip: IpAddr, now: Instant) {
        let mut failures = self.failures.lock().unwrap_or_else(|p| p.into_inner());
        if failures.len() >= MAX_TRACKED && !failures.contains_key(&ip) {
            failures.retain(|_, a| a.refilled(now).left < BURST as f64);
            if failures.len() >= MAX_TRACKED {
                return;
            }
        }
        let entry = failures.entry(ip).or_insert(Allowance {
            left: BURST as f64,
            at: now,
        });
        *entry = entry.refilled(now);
        entry.left = (entry.left - 1.0).max(0.0);
    }
}

fn already(why: String) -> Failure {
    Failure {
        code: StatusCode::CONFLICT,
        reason: "AlreadyExists",
        message: why,
        counts: false,
    }
}

impl Allowance {
    fn refilled(self, now: Instant) -> Allowance {
        let gained = now.saturating_duration_since(self.at).as_secs_f64() / REFILL.as_secs_f64();
        Allowance {
            left: (self.left + gained).min(BURST as f64),
            at: now,
        }
    }
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
            failures: Mutex::new(HashMap::new()),
        }
    }

    #[test]
    fn an_address_is_held_back_after_its_burst_of_failures_and_let_in_again_later() {
        let s = service();
        let ip: IpAddr = [10, 0, 0, 1].into();
        let t0 = Instant::now();
        for _ in 0..BURST {
            assert!(s.held_back(ip, t0).is_none());
            s.failed(ip, t0);
        }
        let wait = s.held_back(ip, t0).expect("held back after the burst");
        assert!(wait <= REFILL && wait > Duration::ZERO, "{wait:?}");
        assert!(
            s.held_back([10, 0, 0, 2].into(), t0).is_none(),
            "other addresses are not"
        );
        assert!(
            s.held_back(ip, t0 + REFILL).is_none(),
            "one attempt refilled"
        );
    }

    #[test]
    fn a_renewal_is_only_for_the_node_presenting_its_certificate() {
        let s = service();
        let (csr, _) = pki::node_csr("edge-1").unwrap();
        let (node, cert) = s.renew("edge-1", &csr).map_err(|f| f.message).unwrap();
        assert_eq!(node, "edge-1");
        assert_eq!(
            pki::node_name(&pki::first_cert(&cert).unwrap()).as_deref(),
            Some("edge-1")
        );
        let other = s.renew("edge-2", &csr).expect_err("refused");
        assert_eq!(other.code, StatusCode::FORBIDDEN);
    }
}
