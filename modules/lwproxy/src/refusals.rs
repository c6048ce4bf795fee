//! Refusals leave a trace: every answer of 400 or more that lwproxy gives a client over its
//! socket is counted by code (`lwproxy_refused_requests`), and logged once per client, code and
//! reason in each [`LOG_EVERY`] (method, path, code, why), so a kubelet's retry loop against an
//! unreachable cloud shows in the node's own log without flooding it.

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::Response;
use serde_json::Value;

/// How often one client's refusal of one kind is logged again.
pub(crate) const LOG_EVERY: Duration = Duration::from_secs(60);
/// How many (client, code, reason) keys are remembered; past it the oldest go.
const REMEMBERED: usize = 1024;
/// Error bodies larger than this are passed on unread (a Status is a few hundred bytes).
const READ_AT_MOST: usize = 64 * 1024;

/// What lwproxy refused, by code, and when each kind was last logged.
#[derive(Clone, Default)]
pub struct Refusals(Arc<Mutex<Inner>>);

impl std::fmt::Debug for Refusals {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Refusals").field(&self.by_code()).finish()
    }
}

#[derive(Default)]
struct Inner {
    by_code: BTreeMap<u16, u64>,
    logged: HashMap<(IpAddr, u16, String), Instant>,
}

// === impl Refusals ===

impl Refusals {
    /// `app` with its refusals counted and logged.
    pub(crate) fn layer(&self, app: axum::Router) -> axum::Router {
        app.layer(axum::middleware::from_fn_with_state(self.clone(), observe))
    }

    /// Refusals answered so far, by HTTP code.
    pub fn by_code(&self) -> BTreeMap<u16, u64> {
        self.lock().by_code.clone()
    }

    /// Counts one refusal; true when it is to be logged (first of its kind from this client
    /// in [`LOG_EVERY`]).
    fn record(&self, client: IpAddr, code: u16, reason: &str, now: Instant) -> bool {
        let mut inner = self.lock();
        *inner.by_code.entry(code).or_default() += 1;
        let key = (client, code, reason.to_owned());
        if inner
            .logged
            .get(&key)
            .is_some_and(|at| now.duration_since(*at) < LOG_EVERY)
        {
            return false;
        }
        if inner.logged.len() >= REMEMBERED {
            inner
                .logged
                .retain(|_, at| now.duration_since(*at) < LOG_EVERY);
        }
        if inner.logged.len() < REMEMBERED {
            inner.logged.insert(key, now);
        }
        true
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

async fn observe(State(refusals): State<Refusals>, req: Request, next: Next) -> Response {
    let client = req
        .extensions()
        .get::<kapi::RemoteAddr>()
        .map(|r| r.0.ip().to_canonical());
    let (method, path) = (req.method().clone(), req.uri().path().to_owned());
    let resp = next.run(req).await;
    let code = resp.status().as_u16();
    let Some(client) = client.filter(|_| code >= 400) else {
        return resp;
    };
    // A Status body of known, small length is read for its reason; any other body goes on
    // untouched.
    let small = resp
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<usize>().ok())
        .is_some_and(|n| n <= READ_AT_MOST);
    let (resp, status) = match small {
        true => {
            let (parts, body) = resp.into_parts();
            let bytes = axum::body::to_bytes(body, READ_AT_MOST)
                .await
                .unwrap_or_default();
            let status: Value = serde_json::from_slice(&bytes).unwrap_or_default();
            (Response::from_parts(parts, Body::from(bytes)), status)
        }
        false => (resp, Value::Null),
    };
    let reason = status["reason"].as_str().unwrap_or("Unknown");
    if refusals.record(client, code, reason, Instant::now()) {
        let why = status["message"].as_str().unwrap_or_default();
        tracing::warn!(%client, %method, path, code, reason, why, "request refused");
    }
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_is_counted_each_time_and_logged_once_a_minute_per_client_and_reason() {
        let refusals = Refusals::default();
        let (a, b) = (IpAddr::from([127, 0, 0, 1]), IpAddr::from([127, 0, 0, 2]));
        let t0 = Instant::now();
        assert!(refusals.record(a, 503, "ServiceUnavailable", t0));
        assert!(!refusals.record(a, 503, "ServiceUnavailable", t0 + Duration::from_secs(1)));
        assert!(
            refusals.record(a, 403, "Forbidden", t0),
            "another code is its own kind"
        );
        assert!(
            refusals.record(b, 503, "ServiceUnavailable", t0),
            "another client too"
        );
        assert!(refusals.record(a, 503, "ServiceUnavailable", t0 + LOG_EVERY));
        assert_eq!(refusals.by_code(), BTreeMap::from([(403, 1), (503, 4)]));
    }

    #[test]
    fn the_remembered_kinds_are_bounded() {
        let refusals = Refusals::default();
        let t0 = Instant::now();
        for i in 0..(REMEMBERED as u32 + 10) {
            refusals.record(IpAddr::from(i.to_be_bytes()), 503, "x", t0);
        }
        assert!(refusals.lock().logged.len() <= REMEMBERED);
    }
}
