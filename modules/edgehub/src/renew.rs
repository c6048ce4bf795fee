//! Certificate renewal: at a random point between 70% and 90% of the node certificate's
//! lifetime, a new key and CSR go to the certificate service over mutual TLS with the current
//! certificate (no token). The new key and certificate are written in place of the old ones,
//! the link's TLS identity is swapped, and the current session is ended so that edgehub dials
//! again at once with the new certificate. Nothing is lost by that: downstream messages not
//! yet acked are sent again by the cloud, the outbox keeps what the cloud has not acked, and
//! duplicates are dropped by message id.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio_util::sync::CancellationToken;

use crate::EdgeHub;

/// First pause after a failed renewal; doubles up to [`MAX_RETRY`].
const FIRST_RETRY: Duration = Duration::from_secs(5);
const MAX_RETRY: Duration = Duration::from_secs(300);
/// How long one renewal request may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// When to renew a certificate valid from `not_before` to `not_after` (Unix seconds), with
/// `fraction` of its lifetime passed (drawn from 0.7..0.9).
pub(crate) fn renewal_point(not_before: i64, not_after: i64, fraction: f64) -> i64 {
    let life = (not_after - not_before).max(0) as f64;
    not_before + (life * fraction) as i64
}

/// Renews the certificate each time it reaches its renewal point, until shutdown.
pub(crate) async fn run(hub: &EdgeHub, shutdown: &CancellationToken) {
    loop {
        let cert = hub.identity().cert_pem;
        let (not_before, not_after) = match pki::validity(&cert) {
            Ok(v) => v,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the node certificate's validity; it will not be renewed");
                return;
            }
        };
        let at = renewal_point(not_before, not_after, rand::random_range(0.7..0.9));
        let wait = Duration::from_secs(at.saturating_sub(unix_now()).max(0) as u64);
        tracing::info!(
            node_id = %hub.node,
            expires_in_secs = not_after - unix_now(),
            renew_in_secs = wait.as_secs(),
            "node certificate renewal scheduled"
        );
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(wait) => {}
        }
        let mut pause = FIRST_RETRY;
        loop {
            match renew(hub).await {
                Ok(until) => {
                    tracing::info!(node_id = %hub.node, valid_until = until, "node certificate renewed; reconnecting with it");
                    hub.renewed.notify_one();
                    break;
                }
                Err(e) => {
                    tracing::warn!(node_id = %hub.node, error = %e, retry_in = ?pause, "node certificate renewal failed")
                }
            }
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tokio::time::sleep(pause) => {}
            }
            pause = (pause * 2).min(MAX_RETRY);
        }
    }
}

/// One renewal; returns the new certificate's expiry (Unix seconds).
async fn renew(hub: &EdgeHub) -> Result<i64, String> {
    let addr = hub
        .config
        .http_server
        .trim_end_matches('/')
        .strip_prefix("https://")
        .ok_or_else(|| {
            format!(
                "modules.edgeHub.httpServer {:?} is not https://<host>:<port>",
                hub.config.http_server
            )
        })?
        .to_string();
    let current = hub.identity();
    let (csr, key) = pki::node_csr(&hub.node).map_err(|e| e.to_string())?;
    let tls = pki::client_config(
        &current.ca_pem,
        Some((&current.cert_pem, &current.key_pem)),
        &[b"http/1.1"],
    )
    .map_err(|e| e.to_string())?;
    let resp = bootstrap::https::request(
        &addr,
        Arc::new(tls),
        http::Method::POST,
        bootstrap::paths::EDGE_CERT,
        &[("content-type", "application/x-pem-file".into())],
        csr.into_bytes(),
        REQUEST_TIMEOUT,
    )
    .await
    .map_err(|e| e.to_string())?;
    let body = String::from_utf8_lossy(&resp.body).into_owned();
    if resp.status != 200 {
        return Err(format!(
            "the certificate service answered {}: {body}",
            resp.status
        ));
    }
    let signed = pki::first_cert(&body).map_err(|e| e.to_string())?;
    if pki::node_name(&signed).as_deref() != Some(hub.node.as_str()) {
        return Err("the certificate service returned a certificate for another node".into());
    }
    let (_, until) = pki::validity(&body).map_err(|e| e.to_string())?;
    // The key first: a crash between the two writes leaves the old certificate with a new
    // key, which the next start reports, rather than a certificate no key matches silently.
    pki::write_pem(&hub.config.tls_private_key_file, &key).map_err(|e| e.to_string())?;
    pki::write_pem(&hub.config.tls_cert_file, &body).map_err(|e| e.to_string())?;
    hub.set_identity(body, key);
    Ok(until)
}

fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::renewal_point;

    #[test]
    fn renewal_falls_within_seventy_to_ninety_percent_of_the_lifetime() {
        assert_eq!(renewal_point(1000, 2000, 0.7), 1700);
        assert_eq!(renewal_point(1000, 2000, 0.9), 1900);
        assert_eq!(
            renewal_point(2000, 1000, 0.8),
            2000,
            "an inverted window renews at once"
        );
    }
}
