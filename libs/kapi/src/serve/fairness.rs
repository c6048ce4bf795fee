//! Requests in flight by priority level, after kube-apiserver's API Priority and Fairness (its
//! `exempt`, `system`/`node-high` and `workload-low` levels, and `global-default` for the
//! anonymous): each level but the exempt one has a share of concurrent requests, and inside it
//! one identity (a user, or for anonymous requests a client address) holds at most its own
//! share, so one caller cannot take a level, and no level can take another's. A request over
//! either share gets `429` with `Retry-After`, as APF answers. Long-running requests (watches)
//! are not counted, as in kube-apiserver; their connections are bounded by the pool.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

use apimachinery::ApiError;
use axum::body::Body;
use axum::extract::Request;
use axum::http::Version;
use axum::middleware::Next;
use axum::response::Response;

use crate::User;
use crate::serve::RemoteAddr;

/// Shares of requests in flight (see [`crate::ServeConfig`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InFlightLimits {
    /// Requests of nodes and system components (`system:nodes`). Default 200.
    pub system: usize,
    /// Requests of every other authenticated user. Default 200.
    pub workload: usize,
    /// Anonymous requests. Default 50.
    pub anonymous: usize,
    /// Requests of one identity, in any level but the exempt one. Default 50.
    pub per_identity: usize,
}

/// Who may take how much: a request's priority level.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Level {
    /// `system:masters`: never limited (the admin, and cloudcore's own controllers).
    Exempt,
    /// Nodes (`system:nodes`).
    System,
    /// Every other authenticated user.
    Workload,
    /// Requests without credentials, counted by client address.
    Anonymous,
}

/// The requests in flight of one server.
#[derive(Debug)]
pub(crate) struct InFlight {
    limits: InFlightLimits,
    state: Mutex<Counts>,
}

#[derive(Debug, Default)]
struct Counts {
    by_level: HashMap<Level, usize>,
    by_identity: HashMap<(Level, String), usize>,
}

/// One request counted in flight, until dropped.
#[derive(Debug)]
pub(crate) struct Permit {
    owner: Arc<InFlight>,
    level: Level,
    identity: String,
}

/// A response body that keeps its request counted in flight until it is dropped.
struct Holding {
    body: Body,
    _permit: Permit,
}

/// Why a request was not let in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Rejected {
    /// Its identity holds its share of the level.
    Identity,
    /// The level holds its share.
    Level,
}

/// Seconds a client is told to wait before it tries again.
const RETRY_AFTER_SECS: u32 = 1;

// === impl InFlightLimits ===

impl Default for InFlightLimits {
    fn default() -> Self {
        InFlightLimits {
            system: 200,
            workload: 200,
            anonymous: 50,
            per_identity: 50,
        }
    }
}

// === impl Level ===

impl Level {
    /// The level of `user` (anonymous users are in `system:unauthenticated`).
    pub fn of(user: &User) -> Level {
        let in_group = |g: &str| user.groups.iter().any(|have| have == g);
        if in_group("system:masters") {
            Level::Exempt
        } else if in_group("system:nodes") {
            Level::System
        } else if in_group("system:unauthenticated") {
            Level::Anonymous
        } else {
            Level::Workload
        }
    }

    /// The identity counted in the level: the user, or the client address if anonymous.
    pub(crate) fn identity(self, user: &User, ip: Option<IpAddr>) -> String {
        match (self, ip) {
            (Level::Anonymous, Some(ip)) => ip.to_string(),
            _ => user.name.clone(),
        }
    }
}

// === impl InFlight ===

impl InFlight {
    pub(crate) fn new(limits: InFlightLimits) -> Arc<InFlight> {
        Arc::new(InFlight {
            limits,
            state: Mutex::new(Counts::default()),
        })
    }

    /// Counts a request of `identity` at `level` in flight, if both shares have room.
    pub(crate) fn try_acquire(
        self: &Arc<Self>,
        level: Level,
        identity: String,
    ) -> Result<Option<Permit>, Rejected> {
        let share = match level {
            Level::Exempt => return Ok(None),
            Level::System => self.limits.system,
            Level::Workload => self.limits.workload,
            Level::Anonymous => self.limits.anonymous,
        };
        let mut counts = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let key = (level, identity);
        if counts.by_identity.get(&key).copied().unwrap_or(0) >= self.limits.per_identity.max(1) {
            return Err(Rejected::Identity);
        }
        if counts.by_level.get(&level).copied().unwrap_or(0) >= share.max(1) {
            return Err(Rejected::Level);
        }
        *counts.by_level.entry(level).or_default() += 1;
        let (level, identity) = key;
        *counts
            .by_identity
            .entry((level, identity.clone()))
            .or_default() += 1;
        Ok(Some(Permit {
            owner: Arc::clone(self),
            level,
            identity,
        }))
    }

    /// Requests counted at `level` now.
    #[cfg(test)]
    fn at(&self, level: Level) -> usize {
        let counts = self.state.lock().unwrap_or_else(|e| e.into_inner());
        counts.by_level.get(&level).copied().unwrap_or(0)
    }
}

// === impl Permit ===

impl Drop for Permit {
    fn drop(&mut self) {
        let mut counts = self.owner.state.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = counts.by_level.get_mut(&self.level) {
            *n -= 1;
        }
        let key = (self.level, std::mem::take(&mut self.identity));
        if let Some(n) = counts.by_identity.get_mut(&key) {
            *n -= 1;
            if *n == 0 {
                counts.by_identity.remove(&key);
            }
        }
    }
}

impl http_body::Body for Holding {
    type Data = bytes::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<bytes::Bytes>, axum::Error>>> {
        std::pin::Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

/// Whether a request is long-running (a watch): not counted in flight.
pub(crate) fn long_running(req: &Request) -> bool {
    let watch_param = req.uri().query().is_some_and(|q| {
        q.split('&')
            .any(|kv| matches!(kv, "watch=true" | "watch=1" | "watch=True"))
    });
    watch_param || req.uri().path().contains("/watch/")
}

/// The `429` for a request over its share, with `Retry-After` (as APF answers); an HTTP/1
/// connection is closed after it when `close` (the request's body was not read).
pub fn too_many_requests(message: String, version: Version, close: bool) -> Response {
    let error = ApiError::too_many_requests(message, RETRY_AFTER_SECS);
    super::refusal(error, version, close)
}

/// Middleware for a server that authenticates: put it inside the authentication layer (it
/// reads the request's [`User`]). It counts the request's connection under the user who
/// authenticated it (the pool's per-user connection cap) and the request under its priority
/// level, and answers `429` to what is over a share.
pub async fn fair_share(req: Request, next: Next) -> Response {
    let Some(user) = req.extensions().get::<User>().cloned() else {
        return next.run(req).await;
    };
    let version = req.version();
    if let Some(connection) = req.extensions().get::<crate::Connection>()
        && let Err(why) = connection.identify(&user)
    {
        connection.close_soon();
        return too_many_requests(why, version, true);
    }
    let Some(in_flight) = req.extensions().get::<Arc<InFlight>>().cloned() else {
        return next.run(req).await;
    };
    if long_running(&req) {
        return next.run(req).await;
    }
    let level = Level::of(&user);
    let ip = req.extensions().get::<RemoteAddr>().map(|r| r.0.ip());
    let identity = level.identity(&user, ip);
    let permit = match in_flight.try_acquire(level, identity) {
        Ok(permit) => permit,
        Err(why) => {
            if let Some(connection) = req.extensions().get::<crate::Connection>() {
                connection.over_share();
            }
            let whose = match why {
                Rejected::Identity => "this client's share of requests in flight is taken",
                Rejected::Level => "the priority level's share of requests in flight is taken",
            };
            return too_many_requests(
                format!("too many requests: {whose}; try again later"),
                version,
                true,
            );
        }
    };
    let resp = next.run(req).await;
    match permit {
        Some(permit) => resp.map(|body| {
            Body::new(Holding {
                body,
                _permit: permit,
            })
        }),
        None => resp,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(name: &str, groups: &[&str]) -> User {
        User {
            name: name.into(),
            groups: groups.iter().map(|g| g.to_string()).collect(),
        }
    }

    fn limits() -> InFlightLimits {
        InFlightLimits {
            system: 4,
            workload: 3,
            anonymous: 2,
            per_identity: 2,
        }
    }

    #[test]
    fn users_fall_into_levels_by_their_groups() {
        let admin = user("admin", &["system:masters", "system:authenticated"]);
        let node = user("system:node:n1", &["system:nodes", "system:authenticated"]);
        let sa = user("system:serviceaccount:default:x", &["system:authenticated"]);
        let anonymous = user("system:anonymous", &["system:unauthenticated"]);
        assert_eq!(Level::of(&admin), Level::Exempt);
        assert_eq!(Level::of(&node), Level::System);
        assert_eq!(Level::of(&sa), Level::Workload);
        assert_eq!(Level::of(&anonymous), Level::Anonymous);
        let ip = Some(IpAddr::from([127, 0, 0, 2]));
        assert_eq!(Level::Anonymous.identity(&anonymous, ip), "127.0.0.2");
        assert_eq!(Level::Workload.identity(&sa, ip), sa.name);
    }

    #[test]
    fn one_identity_holds_its_share_and_no_more() {
        let in_flight = InFlight::new(limits());
        let a = in_flight.try_acquire(Level::Workload, "a".into()).unwrap();
        let b = in_flight.try_acquire(Level::Workload, "a".into()).unwrap();
        assert_eq!(
            in_flight
                .try_acquire(Level::Workload, "a".into())
                .unwrap_err(),
            Rejected::Identity
        );
        let other = in_flight.try_acquire(Level::Workload, "b".into()).unwrap();
        assert_eq!(
            in_flight
                .try_acquire(Level::Workload, "c".into())
                .unwrap_err(),
            Rejected::Level,
            "the level's share is taken"
        );
        // Other levels are untouched, the exempt one is never counted.
        assert!(in_flight.try_acquire(Level::System, "n".into()).is_ok());
        for _ in 0..100 {
            assert!(matches!(
                in_flight.try_acquire(Level::Exempt, "admin".into()),
                Ok(None)
            ));
        }
        drop((a, b, other));
        assert_eq!(
            in_flight.at(Level::Workload),
            0,
            "permits give their room back"
        );
        assert!(in_flight.try_acquire(Level::Workload, "a".into()).is_ok());
    }

    #[test]
    fn watches_are_long_running() {
        let req = |uri: &str| Request::builder().uri(uri).body(Body::empty()).unwrap();
        assert!(long_running(&req("/api/v1/pods?watch=true")));
        assert!(long_running(&req("/api/v1/pods?limit=1&watch=1")));
        assert!(long_running(&req("/api/v1/watch/pods")));
        assert!(!long_running(&req("/api/v1/pods?watchers=true")));
        assert!(!long_running(&req("/api/v1/namespaces/default/configmaps")));
    }
}
