//! Per-client caps on what a server holds at once: open watches, and other requests in flight
//! (a request is in flight until its response body is sent or dropped, so a big list counts
//! for as long as it streams). A client is its remote IP address ([`crate::RemoteAddr`]);
//! requests without one (in-process calls) are not counted. A request over a cap is answered
//! 429 `TooManyRequests` with a `Status` saying which cap, and `Retry-After: 1`; on HTTP/1 the
//! connection is closed after it, so refused clients do not keep connections idle.
//!
//! This sits in front of the routes as a layer of its own, apart from the connection pool of
//! [`crate::serve`]: the pool caps connections, this caps what they ask for.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use apimachinery::ApiError;
use axum::Router;
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;

use crate::RemoteAddr;
use crate::serve::Guarded;

/// The caps, per client IP address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClientLimits {
    /// Watches open at once.
    pub max_watches: usize,
    /// Other requests in flight at once.
    pub max_requests: usize,
}

/// Counts what each client holds against [`ClientLimits`]; clone it to share the counts.
#[derive(Clone, Debug)]
pub struct ClientLimiter(Arc<Inner>);

#[derive(Debug)]
struct Inner {
    limits: ClientLimits,
    held: Mutex<HashMap<IpAddr, Held>>,
    refused: AtomicU64,
}

/// What one client holds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Held {
    watches: usize,
    requests: usize,
}

/// Which cap a request counts against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Watch,
    Request,
}

/// One counted request, given back when dropped.
#[derive(Debug)]
struct Permit {
    limiter: ClientLimiter,
    ip: IpAddr,
    kind: Kind,
}

// === impl ClientLimiter ===

impl ClientLimiter {
    pub fn new(limits: ClientLimits) -> ClientLimiter {
        ClientLimiter(Arc::new(Inner {
            limits,
            held: Mutex::default(),
            refused: AtomicU64::new(0),
        }))
    }

    /// `router` with every request counted against the caps.
    pub fn layer(&self, router: Router) -> Router {
        router.layer(axum::middleware::from_fn_with_state(self.clone(), limit))
    }

    /// Requests refused so far.
    pub fn refused(&self) -> u64 {
        self.0.refused.load(Ordering::Relaxed)
    }

    /// Watches and other requests `ip` holds now.
    pub fn held(&self, ip: IpAddr) -> (usize, usize) {
        let held = self.lock().get(&ip).copied().unwrap_or_default();
        (held.watches, held.requests)
    }

    fn admit(&self, ip: IpAddr, kind: Kind) -> Result<Permit, ApiError> {
        let limits = self.0.limits;
        let mut all = self.lock();
        let held = all.entry(ip).or_default();
        let (count, max, what) = match kind {
            Kind::Watch => (&mut held.watches, limits.max_watches, "watches open"),
            Kind::Request => (
                &mut held.requests,
                limits.max_requests,
                "requests in flight",
            ),
        };
        if *count >= max {
            self.0.refused.fetch_add(1, Ordering::Relaxed);
            let message = format!(
                "too many {what} from {ip}: the limit is {max} per client; retry once some end"
            );
            return Err(ApiError::too_many_requests(message, 1));
        }
        *count += 1;
        Ok(Permit {
            limiter: self.clone(),
            ip,
            kind,
        })
    }

    fn release(&self, ip: IpAddr, kind: Kind) {
        let mut all = self.lock();
        if let Some(held) = all.get_mut(&ip) {
            match kind {
                Kind::Watch => held.watches = held.watches.saturating_sub(1),
                Kind::Request => held.requests = held.requests.saturating_sub(1),
            }
            if *held == Held::default() {
                all.remove(&ip);
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<IpAddr, Held>> {
        self.0.held.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        self.limiter.release(self.ip, self.kind);
    }
}

/// Counts the request against its client's cap for as long as its response body lives, or
/// answers 429.
async fn limit(State(limiter): State<ClientLimiter>, req: Request, next: Next) -> Response {
    let Some(RemoteAddr(remote)) = req.extensions().get::<RemoteAddr>().copied() else {
        return next.run(req).await;
    };
    let kind = if crate::server::is_watch(req.uri()) {
        Kind::Watch
    } else {
        Kind::Request
    };
    let ip = remote.ip().to_canonical();
    match limiter.admit(ip, kind) {
        Ok(permit) => {
            let resp = next.run(req).await;
            // Counted until the response body ends (a watch: until it closes).
            resp.map(|body| Guarded::body(body, permit))
        }
        Err(e) => {
            tracing::debug!(%ip, error = %e, "request refused");
            crate::serve::refusal(e, req.version(), true)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limiter() -> ClientLimiter {
        ClientLimiter::new(ClientLimits {
            max_watches: 2,
            max_requests: 1,
        })
    }

    #[test]
    fn each_client_has_its_own_caps_and_gets_them_back_when_permits_drop() {
        let limiter = limiter();
        let (a, b): (IpAddr, IpAddr) = ("127.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
        let w1 = limiter.admit(a, Kind::Watch).unwrap();
        let _w2 = limiter.admit(a, Kind::Watch).unwrap();
        let refused = limiter.admit(a, Kind::Watch).unwrap_err();
        assert_eq!(
            (refused.code, refused.reason.as_str()),
            (429, "TooManyRequests")
        );
        assert!(
            refused
                .message
                .contains("too many watches open from 127.0.0.1")
        );
        assert!(refused.message.contains("the limit is 2"));
        let _r = limiter
            .admit(a, Kind::Request)
            .expect("requests have their own cap");
        assert!(limiter.admit(a, Kind::Request).is_err());
        let _other = limiter
            .admit(b, Kind::Watch)
            .expect("another client is not affected");
        assert_eq!(limiter.held(a), (2, 1));

        drop(w1);
        let _w3 = limiter
            .admit(a, Kind::Watch)
            .expect("a closed watch frees its place");
        assert_eq!(limiter.refused(), 2);
    }

    #[test]
    fn a_client_holding_nothing_is_forgotten() {
        let limiter = limiter();
        let ip: IpAddr = "::1".parse().unwrap();
        drop(limiter.admit(ip, Kind::Request).unwrap());
        assert!(limiter.lock().is_empty());
    }
}
