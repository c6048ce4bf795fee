//! Bidirectional liveness: each end pings on an interval and declares the peer dead when it has
//! heard nothing at all (any frame counts) for the timeout. Unlike KubeEdge, where only the cloud
//! checks and the edge notices a dead path only when a write fails, both ends run this.

use std::time::{Duration, Instant};

/// Settings of a [`Keepalive`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeepaliveConfig {
    /// How often to ping. Default 15 s (KubeEdge's heartbeat).
    pub interval: Duration,
    /// How long silence may last before the peer counts as dead. Default 45 s.
    pub timeout: Duration,
}

/// Ping schedule and silence detection for one session.
#[derive(Debug)]
pub struct Keepalive {
    config: KeepaliveConfig,
    last_heard: Instant,
    next_ping: Instant,
    outstanding: Option<(u64, Instant)>,
    next_nonce: u64,
    rtt: Option<Duration>,
}

/// What the session should do now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeepaliveAction {
    /// Nothing until [`Keepalive::poll_timeout`].
    Wait,
    /// Send `Ping { nonce }`.
    Ping(u64),
    /// The peer has been silent for the timeout: end the session.
    PeerDead,
}

// === impl KeepaliveConfig ===

impl Default for KeepaliveConfig {
    fn default() -> Self {
        KeepaliveConfig {
            interval: Duration::from_secs(15),
            timeout: Duration::from_secs(45),
        }
    }
}

// === impl Keepalive ===

impl Keepalive {
    pub fn new(config: KeepaliveConfig, now: Instant) -> Self {
        Keepalive {
            next_ping: now + config.interval,
            config,
            last_heard: now,
            outstanding: None,
            next_nonce: 1,
            rtt: None,
        }
    }

    /// Any frame arrived from the peer.
    pub fn on_frame(&mut self, now: Instant) {
        self.last_heard = self.last_heard.max(now);
    }

    /// A `Pong` arrived; a matching nonce gives a round-trip sample.
    pub fn on_pong(&mut self, nonce: u64, now: Instant) {
        self.on_frame(now);
        if let Some((sent_nonce, sent_at)) = self.outstanding
            && sent_nonce == nonce
        {
            self.rtt = Some(now.saturating_duration_since(sent_at));
            self.outstanding = None;
        }
    }

    /// What to do at `now`.
    pub fn poll(&mut self, now: Instant) -> KeepaliveAction {
        if now >= self.last_heard + self.config.timeout {
            return KeepaliveAction::PeerDead;
        }
        if now < self.next_ping {
            return KeepaliveAction::Wait;
        }
        let nonce = self.next_nonce;
        self.next_nonce += 1;
        self.outstanding = Some((nonce, now));
        self.next_ping = now + self.config.interval;
        KeepaliveAction::Ping(nonce)
    }

    /// When [`poll`](Self::poll) next has something to say.
    pub fn poll_timeout(&self) -> Instant {
        self.next_ping.min(self.last_heard + self.config.timeout)
    }

    /// The round-trip time of the last answered ping.
    pub fn rtt(&self) -> Option<Duration> {
        self.rtt
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    #[test]
    fn pings_on_the_interval() {
        let t0 = Instant::now();
        let mut k = Keepalive::new(KeepaliveConfig::default(), t0);
        assert_eq!(k.poll(t0), KeepaliveAction::Wait);
        assert_eq!(k.poll_timeout(), t0 + secs(15));
        assert_eq!(k.poll(t0 + secs(15)), KeepaliveAction::Ping(1));
        assert_eq!(k.poll(t0 + secs(16)), KeepaliveAction::Wait);
        k.on_frame(t0 + secs(20));
        assert_eq!(k.poll(t0 + secs(30)), KeepaliveAction::Ping(2));
    }

    #[test]
    fn silent_peer_is_declared_dead_after_the_timeout() {
        let t0 = Instant::now();
        let mut k = Keepalive::new(KeepaliveConfig::default(), t0);
        k.on_frame(t0 + secs(10));
        assert_ne!(k.poll(t0 + secs(54)), KeepaliveAction::PeerDead);
        assert_eq!(k.poll(t0 + secs(55)), KeepaliveAction::PeerDead);
    }

    #[test]
    fn matching_pong_measures_round_trip() {
        let t0 = Instant::now();
        let mut k = Keepalive::new(KeepaliveConfig::default(), t0);
        let KeepaliveAction::Ping(nonce) = k.poll(t0 + secs(15)) else {
            panic!("no ping")
        };
        k.on_pong(nonce + 1, t0 + secs(16));
        assert_eq!(k.rtt(), None);
        k.on_pong(nonce, t0 + secs(16));
        assert_eq!(k.rtt(), Some(secs(1)));
    }
}
