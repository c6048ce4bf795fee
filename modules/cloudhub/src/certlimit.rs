//! The certificate service's limits, with no I/O (each decision takes `now`):
//! - [`Failures`]: failed attempts (wrong tokens, bad CSRs) are counted per client address and
//!   across all addresses, each in a token bucket. An address past its [`BURST`], or the whole
//!   service past [`GLOBAL_BURST`], gets 429 until the bucket refills. At most [`MAX_TRACKED`]
//!   addresses are remembered: a full tracker forgets the addresses whose allowance is whole,
//!   then the one that failed longest ago; the global bucket counts every failure regardless.
//! - [`Renewals`]: a node renews at most once per window (half its certificate lifetime, at
//!   most [`RENEW_WINDOW`]) unless its current certificate is within the last tenth of its
//!   lifetime by the cloud's clock, so a node whose clock runs ahead cannot renew in a loop.

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::{Duration, Instant};

/// Failed attempts an address may make before it is held back.
pub const BURST: u32 = 5;
/// One more attempt per address is allowed after each such pause.
pub const REFILL: Duration = Duration::from_secs(10);
/// Failed attempts all addresses together may make before every address is held back.
pub const GLOBAL_BURST: u32 = 50;
/// One more attempt overall is allowed after each such pause (five a second).
pub const GLOBAL_REFILL: Duration = Duration::from_millis(200);
/// Most addresses remembered.
pub const MAX_TRACKED: usize = 10_000;
/// Longest time a node waits between two renewals (shorter for short lifetimes).
pub const RENEW_WINDOW: Duration = Duration::from_secs(10 * 60);

/// Failed attempts, per address and overall.
#[derive(Debug)]
pub(crate) struct Failures {
    addresses: HashMap<IpAddr, Bucket>,
    global: Bucket,
    max_tracked: usize,
}

/// Why a request is held back, and for how long.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct HeldBack {
    pub wait: Duration,
    pub message: String,
}

/// The last renewal of each node.
#[derive(Debug, Default)]
pub(crate) struct Renewals {
    last: HashMap<String, Instant>,
}

/// A token bucket: `left` attempts, refilled at one per `refill` up to `burst`.
#[derive(Clone, Copy, Debug)]
struct Bucket {
    left: f64,
    at: Instant,
}

// === impl Failures ===

impl Failures {
    pub(crate) fn new(now: Instant) -> Failures {
        Failures::with_capacity(MAX_TRACKED, now)
    }

    fn with_capacity(max_tracked: usize, now: Instant) -> Failures {
        Failures {
            addresses: HashMap::new(),
            global: Bucket::full(GLOBAL_BURST, now),
            max_tracked: max_tracked.max(1),
        }
    }

    /// Whether a request from `ip` must wait, and why.
    pub(crate) fn held_back(&self, ip: IpAddr, now: Instant) -> Option<HeldBack> {
        let global = self.global.refilled(now, GLOBAL_BURST, GLOBAL_REFILL);
        if let Some(wait) = global.wait(GLOBAL_REFILL) {
            return Some(HeldBack {
                wait,
                message: format!(
                    "too many failed attempts at the certificate service from all addresses: retry in {}s",
                    wait.as_secs().max(1)
                ),
            });
        }
        let own = self.addresses.get(&ip)?.refilled(now, BURST, REFILL);
        own.wait(REFILL).map(|wait| HeldBack {
            wait,
            message: format!(
                "too many failed attempts from {ip}: retry in {}s",
                wait.as_secs().max(1)
            ),
        })
    }

    /// Counts one failed attempt from `ip`.
    pub(crate) fn failed(&mut self, ip: IpAddr, now: Instant) {
        self.global = self
            .global
            .refilled(now, GLOBAL_BURST, GLOBAL_REFILL)
            .spend();
        if !self.addresses.contains_key(&ip) && self.addresses.len() >= self.max_tracked {
            self.make_room(now);
        }
        let bucket = self
            .addresses
            .entry(ip)
            .or_insert_with(|| Bucket::full(BURST, now));
        *bucket = bucket.refilled(now, BURST, REFILL).spend();
    }

    /// Forgets the addresses whose allowance is whole; if none, the one that failed longest ago.
    fn make_room(&mut self, now: Instant) {
        self.addresses
            .retain(|_, b| b.refilled(now, BURST, REFILL).left < BURST as f64);
        if self.addresses.len() < self.max_tracked {
            return;
        }
        let oldest = self
            .addresses
            .iter()
            .min_by_key(|(_, b)| b.at)
            .map(|(ip, _)| *ip);
        if let Some(ip) = oldest {
            self.addresses.remove(&ip);
        }
    }
}

// === impl Renewals ===

impl Renewals {
    /// Whether `node` may renew now: `validity` is the lifetime the service issues, `cert` the
    /// presented certificate's (notBefore, notAfter) and `wall` the cloud's clock (Unix
    /// seconds). On refusal, how long to wait.
    pub(crate) fn check(
        &self,
        node: &str,
        now: Instant,
        validity: Duration,
        cert: (i64, i64),
        wall: i64,
    ) -> Result<(), HeldBack> {
        let (not_before, not_after) = cert;
        let last_tenth = not_after - (not_after - not_before).max(0) / 10;
        if wall >= last_tenth {
            return Ok(());
        }
        let window = RENEW_WINDOW.min(validity / 2);
        let Some(last) = self.last.get(node) else {
            return Ok(());
        };
        let since = now.saturating_duration_since(*last);
        if since >= window {
            return Ok(());
        }
        let until_last_tenth = Duration::from_secs((last_tenth - wall).max(0) as u64);
        let wait = (window - since).min(until_last_tenth);
        Err(HeldBack {
            wait,
            message: format!(
                "node {node:?} renewed its certificate {}s ago and may renew once per {}s until its certificate is in the last tenth of its lifetime (its notAfter by the cloud's clock is in {}s): retry in {}s; if this node renews in a loop its clock is probably ahead of the cloud's",
                since.as_secs(),
                window.as_secs(),
                not_after - wall,
                wait.as_secs().max(1)
            ),
        })
    }

    /// Records a renewal of `node`; forgets renewals older than [`RENEW_WINDOW`] when many are
    /// remembered.
    pub(crate) fn renewed(&mut self, node: &str, now: Instant) {
        if self.last.len() >= MAX_TRACKED {
            self.last
                .retain(|_, at| now.saturating_duration_since(*at) < RENEW_WINDOW);
        }
        self.last.insert(node.to_string(), now);
    }
}

// === impl Bucket ===

impl Bucket {
    fn full(burst: u32, now: Instant) -> Bucket {
        Bucket {
            left: burst as f64,
            at: now,
        }
    }

    fn refilled(self, now: Instant, burst: u32, refill: Duration) -> Bucket {
        let gained = now.saturating_duration_since(self.at).as_secs_f64() / refill.as_secs_f64();
        Bucket {
            left: (self.left + gained).min(burst as f64),
            at: now.max(self.at),
        }
    }

    fn spend(self) -> Bucket {
        Bucket {
            left: (self.left - 1.0).max(0.0),
            ..self
        }
    }

    /// How long until one attempt is allowed, if none is now.
    fn wait(self, refill: Duration) -> Option<Duration> {
        (self.left < 1.0).then(|| refill.mul_f64(1.0 - self.left))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(n: u32) -> IpAddr {
        std::net::Ipv4Addr::from(0x0a00_0000 + n).into()
    }

    #[test]
    fn an_address_is_held_back_after_its_burst_of_failures_and_let_in_again_later() {
        let t0 = Instant::now();
        let mut f = Failures::new(t0);
        for _ in 0..BURST {
            assert!(f.held_back(ip(1), t0).is_none());
            f.failed(ip(1), t0);
        }
        let held = f.held_back(ip(1), t0).expect("held back after the burst");
        assert!(
            held.wait <= REFILL && held.wait > Duration::ZERO,
            "{held:?}"
        );
        assert!(held.message.contains("from 10.0.0.1"), "{held:?}");
        assert!(f.held_back(ip(2), t0).is_none(), "other addresses are not");
        assert!(
            f.held_back(ip(1), t0 + REFILL).is_none(),
            "one attempt refilled"
        );
    }

    #[test]
    fn failures_spread_over_many_addresses_exhaust_the_global_budget() {
        // 1,000 guesses from 200 addresses, five each (each address's whole burst), in one go.
        let t0 = Instant::now();
        let mut f = Failures::new(t0);
        let mut refused = 0;
        for n in 0..200 {
            for _ in 0..BURST {
                match f.held_back(ip(n), t0) {
                    Some(_) => refused += 1,
                    None => f.failed(ip(n), t0),
                }
            }
        }
        assert_eq!(refused, 1000 - GLOBAL_BURST as usize);
        let held = f
            .held_back(ip(999), t0)
            .expect("a new address is held back too");
        assert!(held.message.contains("from all addresses"), "{held:?}");
        assert!(
            f.held_back(ip(999), t0 + GLOBAL_REFILL).is_none(),
            "the global budget refills"
        );
    }

    #[test]
    fn a_full_tracker_still_counts_new_addresses_by_forgetting_the_oldest() {
        let t0 = Instant::now();
        let mut f = Failures::with_capacity(3, t0);
        // Addresses 0..3 fill the tracker, each one failure (not whole, so not forgettable).
        for n in 0..3 {
            f.failed(ip(n), t0 + Duration::from_millis(n as u64));
        }
        // A new address past the capacity is still counted up to its burst.
        let t1 = t0 + Duration::from_millis(10);
        for _ in 0..BURST {
            f.failed(ip(7), t1);
        }
        assert!(
            f.held_back(ip(7), t1).is_some(),
            "counted though the tracker was full"
        );
        assert_eq!(f.addresses.len(), 3);
        assert!(
            !f.addresses.contains_key(&ip(0)),
            "the oldest was forgotten"
        );
    }

    #[test]
    fn a_node_renews_once_per_window_unless_its_certificate_is_in_its_last_tenth() {
        let t0 = Instant::now();
        let hour = Duration::from_secs(3600);
        let mut r = Renewals::default();
        // A certificate valid 1000..4600, presented at 2000 (cloud clock): not near its end.
        let cert = (1000, 4600);
        assert!(
            r.check("n1", t0, hour, cert, 2000).is_ok(),
            "the first renewal"
        );
        r.renewed("n1", t0);
        let held = r
            .check("n1", t0 + Duration::from_secs(1), hour, cert, 2001)
            .expect_err("a second one at once");
        assert_eq!(
            held.wait,
            Duration::from_secs(30 * 60 - 1).min(RENEW_WINDOW - Duration::from_secs(1))
        );
        assert!(
            held.message.contains("clock is probably ahead"),
            "{}",
            held.message
        );
        assert!(
            r.check("n2", t0, hour, cert, 2001).is_ok(),
            "other nodes may"
        );
        // Within the last tenth (from 4240), a renewal is let through at once.
        assert!(
            r.check("n1", t0 + Duration::from_secs(2), hour, cert, 4300)
                .is_ok()
        );
        // After the window, too.
        assert!(r.check("n1", t0 + RENEW_WINDOW, hour, cert, 2600).is_ok());
    }

    #[test]
    fn a_short_lifetime_shortens_the_renewal_window() {
        let t0 = Instant::now();
        let mut r = Renewals::default();
        r.renewed("n1", t0);
        let twelve = Duration::from_secs(12);
        let cert = (100, 112);
        assert!(
            r.check("n1", t0 + Duration::from_secs(5), twelve, cert, 105)
                .is_err()
        );
        assert!(
            r.check("n1", t0 + Duration::from_secs(6), twelve, cert, 106)
                .is_ok()
        );
    }
}
