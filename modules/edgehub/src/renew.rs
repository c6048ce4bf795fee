//! Certificate renewal: at a random point between 70% and 90% of the node certificate's
//! lifetime, a new key and CSR go to the certificate service over mutual TLS with the current
//! certificate (no token). The new key and certificate are written in place of the old ones,
//! the link's TLS identity is swapped, and the current session is ended so that edgehub dials
//! again at once with the new certificate. Nothing is lost by that: downstream messages not
//! yet acked are sent again by the cloud, the outbox keeps what the cloud has not acked, and
//! duplicates are dropped by message id.
//!
//! The certificate's times are the cloud's clock. The renewal point is moved by the skew
//! between this clock and the cloud's, measured from the `Date` of each answer of the
//! certificate service (logged once when it passes [`SKEW_TOLERANCE`]), so an edge clock ahead
//! of the cloud's does not see every new certificate as due at once. A renewal after which the
//! next one is still due at once backs off exponentially (up to [`MAX_BACKOFF`]) instead of
//! looping; a 429 from the service is waited out for its `Retry-After`. [`Planner`] holds
//! these decisions, with no I/O: each takes the local `now`.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio_util::sync::CancellationToken;

use crate::EdgeHub;

/// First pause after a failed renewal; doubles up to [`MAX_RETRY`].
const FIRST_RETRY: Duration = Duration::from_secs(5);
const MAX_RETRY: Duration = Duration::from_secs(300);
/// How long one renewal request may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// First pause after a renewal that left the next one due at once; doubles up to
/// [`MAX_BACKOFF`].
pub(crate) const FIRST_BACKOFF: Duration = Duration::from_secs(10);
pub(crate) const MAX_BACKOFF: Duration = Duration::from_secs(3600);
/// A skew this large is logged (once).
pub(crate) const SKEW_TOLERANCE: i64 = 60;

/// The renewal decisions between renewals.
#[derive(Debug, Default)]
pub(crate) struct Planner {
    /// This clock minus the cloud's, seconds, from the last answer that told the cloud's time.
    skew: Option<i64>,
    /// The pause after the last renewal that did not move the renewal point past now.
    backoff: Option<Duration>,
    skew_logged: bool,
}

/// A skew worth one log line: both clocks, Unix seconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Skew {
    pub local: i64,
    pub cloud: i64,
}

/// A renewal that did not happen, and when to ask again if the service said.
#[derive(Debug)]
struct RenewError {
    message: String,
    retry_after: Option<Duration>,
}

/// When to renew a certificate valid from `not_before` to `not_after` (Unix seconds), with
/// `fraction` of its lifetime passed (drawn from 0.7..0.9).
pub(crate) fn renewal_point(not_before: i64, not_after: i64, fraction: f64) -> i64 {
    let life = (not_after - not_before).max(0) as f64;
    not_before + (life * fraction) as i64
}

// === impl Planner ===

impl Planner {
    /// How long to wait at local time `now` before renewing the certificate valid `validity`
    /// (Unix seconds, the cloud's clock) at `fraction` of its lifetime. `just_renewed`: this
    /// certificate came from the renewal before; if it is due at once again, that renewal did
    /// not move the renewal point and the wait backs off.
    pub(crate) fn wait(
        &mut self,
        validity: (i64, i64),
        fraction: f64,
        now: i64,
        just_renewed: bool,
    ) -> Duration {
        let (not_before, not_after) = validity;
        let at =
            renewal_point(not_before, not_after, fraction).saturating_add(self.skew.unwrap_or(0));
        let due = at.saturating_sub(now);
        if due > 0 {
            self.backoff = None;
            return Duration::from_secs(due as u64);
        }
        if !just_renewed {
            return Duration::ZERO;
        }
        let backoff = self
            .backoff
            .map_or(FIRST_BACKOFF, |b| (b * 2).min(MAX_BACKOFF));
        self.backoff = Some(backoff);
        backoff
    }

    /// Takes the cloud's time `cloud` as the service answered at local time `local`; returns
    /// the skew to log, the first time it passes [`SKEW_TOLERANCE`].
    pub(crate) fn answered(&mut self, local: i64, cloud: Option<i64>) -> Option<Skew> {
        let cloud = cloud?;
        let skew = local - cloud;
        self.skew = Some(skew);
        if skew.abs() < SKEW_TOLERANCE || self.skew_logged {
            return None;
        }
        self.skew_logged = true;
        Some(Skew { local, cloud })
    }
}

impl std::fmt::Display for Skew {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let skew = self.local - self.cloud;
        let way = if skew > 0 { "ahead of" } else { "behind" };
        write!(
            f,
            "the edge clock is {} s {way} the cloud (edge: {}, cloud: {}); certificate renewal is scheduled by the cloud's clock, set this machine's time (NTP)",
            skew.abs(),
            timestamp(self.local),
            timestamp(self.cloud)
        )
    }
}

fn timestamp(secs: i64) -> String {
    bootstrap::Timestamp::from_second(secs)
        .map(|t| t.to_string())
        .unwrap_or_else(|_| secs.to_string())
}

/// Renews the certificate each time it reaches its renewal point, until shutdown.
pub(crate) async fn run(hub: &EdgeHub, shutdown: &CancellationToken) {
    let mut planner = Planner::default();
    let mut just_renewed = false;
    loop {
        let cert = hub.identity().cert_pem;
        let (not_before, not_after) = match pki::validity(&cert) {
            Ok(v) => v,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the node certificate's validity; it will not be renewed");
                return;
            }
        };
        let fraction = rand::random_range(0.7..0.9);
        let now = hub.local_now();
        let wait = planner.wait((not_before, not_after), fraction, now, just_renewed);
        tracing::info!(
            node_id = %hub.node,
            expires_in_secs = not_after - now,
            renew_in_secs = wait.as_secs(),
            "node certificate renewal scheduled"
        );
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(wait) => {}
        }
        let mut pause = FIRST_RETRY;
        loop {
            hub.stats
                .renewals
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            match renew(hub, &mut planner).await {
                Ok(until) => {
                    tracing::info!(node_id = %hub.node, valid_until = until, "node certificate renewed; reconnecting with it");
                    hub.renewed.notify_one();
                    just_renewed = true;
                    break;
                }
                Err(e) => {
                    let wait = e.retry_after.map_or(pause, |r| r.max(pause));
                    tracing::warn!(node_id = %hub.node, error = %e.message, retry_in = ?wait, "node certificate renewal failed");
                    tokio::select! {
                        _ = shutdown.cancelled() => return,
                        _ = tokio::time::sleep(wait) => {}
                    }
                }
            }
            pause = (pause * 2).min(MAX_RETRY);
        }
    }
}

impl From<String> for RenewError {
    fn from(message: String) -> Self {
        RenewError {
            message,
            retry_after: None,
        }
    }
}

/// One renewal; returns the new certificate's expiry (Unix seconds).
async fn renew(hub: &EdgeHub, planner: &mut Planner) -> Result<i64, RenewError> {
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
    if let Some(skew) = planner.answered(hub.local_now(), bootstrap::https::server_time(&resp)) {
        tracing::warn!(node_id = %hub.node, local = skew.local, cloud = skew.cloud, "{skew}");
    }
    let body = String::from_utf8_lossy(&resp.body).into_owned();
    if resp.status != 200 {
        let retry_after = resp
            .headers
            .get(http::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(Duration::from_secs);
        return Err(RenewError {
            message: format!("the certificate service answered {}: {body}", resp.status),
            retry_after,
        });
    }
    let signed = pki::first_cert(&body).map_err(|e| e.to_string())?;
    if pki::node_name(&signed).as_deref() != Some(hub.node.as_str()) {
        return Err(String::from(
            "the certificate service returned a certificate for another node",
        )
        .into());
    }
    let (_, until) = pki::validity(&body).map_err(|e| e.to_string())?;
    // The key first: a crash between the two writes leaves the old certificate with a new
    // key, which the next start reports, rather than a certificate no key matches silently.
    pki::write_pem(&hub.config.tls_private_key_file, &key).map_err(|e| e.to_string())?;
    pki::write_pem(&hub.config.tls_cert_file, &body).map_err(|e| e.to_string())?;
    hub.set_identity(body, key);
    Ok(until)
}

pub(crate) fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    const DAY: i64 = 86400;

    /// Renews like [`run`] with a clock `skew` seconds ahead of the cloud's (negative: behind),
    /// against a service issuing `life`-second certificates and telling its time when
    /// `tells_time`; returns how many renewals happen in `span` seconds of cloud time.
    fn renewals_in(skew: i64, life: i64, tells_time: bool, span: i64) -> u32 {
        let mut planner = Planner::default();
        let mut cloud = 1_000_000_000;
        let end = cloud + span;
        // A certificate issued an hour (or its whole life) ago, as a restart finds it.
        let mut cert = (
            cloud - 3600.min(life / 2),
            cloud - 3600.min(life / 2) + life,
        );
        let (mut renewals, mut just_renewed) = (0, false);
        loop {
            let wait = planner.wait(cert, 0.8, cloud + skew, just_renewed);
            cloud += wait.as_secs() as i64;
            if cloud >= end {
                return renewals;
            }
            renewals += 1;
            planner.answered(cloud + skew, tells_time.then_some(cloud));
            cert = (cloud - life / 10, cloud + life);
            just_renewed = true;
            cloud += 1;
        }
    }

    #[test]
    fn an_edge_400_days_ahead_renews_once_then_by_the_cloud_clock() {
        // Year-long certificates; over 40 s and over 200 days: one renewal at start only.
        assert_eq!(renewals_in(400 * DAY, 365 * DAY, true, 40), 1);
        assert_eq!(renewals_in(400 * DAY, 365 * DAY, true, 200 * DAY), 1);
    }

    #[test]
    fn an_edge_56_minutes_ahead_with_hour_long_certificates_renews_about_once_an_hour() {
        assert_eq!(renewals_in(56 * 60, 3600, true, 40), 1);
        // 80% of an hour: about every 48 minutes; 10 hours → 13 renewals or so, not thousands.
        let n = renewals_in(56 * 60, 3600, true, 10 * 3600);
        assert!((12..=14).contains(&n), "{n}");
    }

    #[test]
    fn without_the_cloud_time_a_renewal_that_does_not_move_the_point_backs_off() {
        // The skew is unknown: every new certificate looks due at once; the waits double.
        let n = renewals_in(400 * DAY, 365 * DAY, false, 40);
        assert!(n <= 3, "{n} renewals in 40 s");
        let n = renewals_in(400 * DAY, 365 * DAY, false, DAY);
        assert!(
            n <= 40,
            "{n} renewals in a day (bounded by the one-hour cap)"
        );
    }

    #[test]
    fn an_edge_behind_the_cloud_renews_by_the_cloud_clock_too() {
        let mut planner = Planner::default();
        planner.answered(1000, Some(1000 + DAY));
        // Issued now by the cloud (its clock: 1000 + DAY), valid 10 days: 80% is 8 days away.
        let wait = planner.wait((1000 + DAY, 1000 + 11 * DAY), 0.8, 1000, true);
        assert_eq!(wait.as_secs() as i64, 8 * DAY);
    }

    #[test]
    fn the_skew_is_logged_once_with_both_times() {
        let mut planner = Planner::default();
        assert_eq!(planner.answered(1000, Some(1010)), None, "within tolerance");
        let skew = planner.answered(5000, Some(1000)).expect("logged");
        assert_eq!(
            skew,
            Skew {
                local: 5000,
                cloud: 1000
            }
        );
        let text = skew.to_string();
        assert!(text.contains("4000 s ahead of the cloud"), "{text}");
        assert!(text.contains("1970-01-01T01:23:20Z"), "{text}");
        assert_eq!(planner.answered(5001, Some(1001)), None, "only once");
        assert!(
            Skew {
                local: 100,
                cloud: 700
            }
            .to_string()
            .contains("600 s behind the cloud")
        );
    }

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
