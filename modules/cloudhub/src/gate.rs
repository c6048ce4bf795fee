//! Who may start a handshake: at most `maxHandshakesPerAddress` from one source address at
//! once (a flood of half-open connections from one address is turned away at accept, before
//! TLS), and a bounded set of addresses that held a valid session before ("known good"), for
//! which `reservedHandshakes` of the handshake slots are kept: a flood from many addresses
//! cannot take the slots a returning node needs.

use std::collections::{HashMap, HashSet, VecDeque};
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

/// The handshake gate of one cloudhub.
#[derive(Debug)]
pub(crate) struct Gate {
    per_address: usize,
    known_capacity: usize,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    in_progress: HashMap<IpAddr, usize>,
    known: HashSet<IpAddr>,
    /// `known`, oldest first: the first forgotten when the set is full.
    order: VecDeque<IpAddr>,
}

/// One handshake in progress from an address, until dropped.
#[derive(Debug)]
pub(crate) struct Ticket {
    gate: Arc<Gate>,
    ip: IpAddr,
}

// === impl Gate ===

impl Gate {
    /// A gate letting `per_address` handshakes run per address and remembering up to
    /// `known_capacity` good addresses.
    pub(crate) fn new(per_address: usize, known_capacity: usize) -> Arc<Gate> {
        Arc::new(Gate {
            per_address: per_address.max(1),
            known_capacity,
            state: Mutex::new(State::default()),
        })
    }

    /// A handshake from `ip` may start, unless the address has its share running.
    pub(crate) fn enter(self: &Arc<Self>, ip: IpAddr) -> Option<Ticket> {
        let ip = canonical(ip);
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let running = state.in_progress.entry(ip).or_default();
        if *running >= self.per_address {
            return None;
        }
        *running += 1;
        Some(Ticket {
            gate: Arc::clone(self),
            ip,
        })
    }

    /// Whether `ip` held a valid session before.
    pub(crate) fn is_known(&self, ip: IpAddr) -> bool {
        let state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        state.known.contains(&canonical(ip))
    }

    /// `ip` holds a valid session: it is known good from now on (the oldest known address is
    /// forgotten when the set is full).
    pub(crate) fn remember(&self, ip: IpAddr) {
        if self.known_capacity == 0 {
            return;
        }
        let ip = canonical(ip);
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if !state.known.insert(ip) {
            return;
        }
        state.order.push_back(ip);
        while state.order.len() > self.known_capacity {
            if let Some(old) = state.order.pop_front() {
                state.known.remove(&old);
            }
        }
    }
}

// === impl Ticket ===

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut state = self.gate.state.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = state.in_progress.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                state.in_progress.remove(&self.ip);
            }
        }
    }
}

/// The address a client is counted under (an IPv4-mapped IPv6 address as IPv4).
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(last: u8) -> IpAddr {
        IpAddr::from([127, 0, 0, last])
    }

    #[test]
    fn one_address_runs_its_share_of_handshakes_and_no_more() {
        let gate = Gate::new(2, 10);
        let a = gate.enter(ip(2)).unwrap();
        let _b = gate.enter(ip(2)).unwrap();
        assert!(
            gate.enter(ip(2)).is_none(),
            "the third from one address waits"
        );
        assert!(
            gate.enter(ip(1)).is_some(),
            "other addresses are not affected"
        );
        drop(a);
        assert!(
            gate.enter(ip(2)).is_some(),
            "a finished handshake gives its place back"
        );
    }

    #[test]
    fn an_ipv4_mapped_address_counts_as_its_ipv4_address() {
        let gate = Gate::new(1, 10);
        let _v4 = gate.enter(ip(2)).unwrap();
        let mapped = IpAddr::V6(std::net::Ipv4Addr::new(127, 0, 0, 2).to_ipv6_mapped());
        assert!(gate.enter(mapped).is_none());
    }

    #[test]
    fn known_addresses_are_bounded_and_the_oldest_is_forgotten() {
        let gate = Gate::new(1, 2);
        assert!(!gate.is_known(ip(1)));
        gate.remember(ip(1));
        gate.remember(ip(2));
        gate.remember(ip(1));
        assert!(gate.is_known(ip(1)) && gate.is_known(ip(2)));
        gate.remember(ip(3));
        assert!(!gate.is_known(ip(1)), "the oldest is forgotten");
        assert!(gate.is_known(ip(2)) && gate.is_known(ip(3)));
    }
}
