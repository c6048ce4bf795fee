//! Which connections a server holds, with no I/O: admission, promotion, eviction.
//!
//! A connection is *unauthenticated* from its accept until it is promoted (a verified client
//! certificate, or a request that carried a user), then *authenticated*. Unauthenticated ones
//! share a smaller pool than the total, so `max_total - max_unauthenticated` slots are always
//! left for authenticated ones, and one client address holds at most `max_per_client` of them.
//! When a new connection does not fit, an idle unauthenticated one (no request in flight) makes
//! room: the oldest of the same address when that address is at its cap, else the oldest of the
//! address holding the most (so one flood cannot push out another client's fresh connection).
//! Only when none is idle is the new one refused. Authenticated connections are never evicted.
//!
//! An authenticated connection is then *identified* by the user of its first request: an
//! unprivileged user (not an admin, not a node) holds at most `max_per_user` connections, and
//! all unprivileged users together at most `max_total - max_unauthenticated - reserved`, so
//! `reserved` connections stay free for the admin and the nodes however many identities a
//! flood uses. A connection over either share is refused at its first request and closed.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::IpAddr;

/// What the pool needs to know about a connection it may evict.
pub(crate) trait Evictable {
    /// Whether a request is in flight (such a connection is never evicted).
    fn busy(&self) -> bool;
}

/// The pool's limits (see [`crate::serve::ServeConfig`]).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Limits {
    pub(crate) max_total: usize,
    pub(crate) max_unauthenticated: usize,
    pub(crate) max_per_client: usize,
    /// Connections of one unprivileged user.
    pub(crate) max_per_user: usize,
    /// Connections kept for privileged users (never taken by unprivileged ones).
    pub(crate) reserved: usize,
}

/// The answer to a new connection.
#[derive(Debug)]
pub(crate) enum Admission<T> {
    /// Admitted as `id`; `evicted` (if any) must be closed to make room.
    Admitted {
        id: u64,
        evicted: Option<T>,
    },
    Refused(Refusal),
}

/// Why a new connection was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// Its address holds its share of unauthenticated connections, all with a request in flight.
    PerClient,
    /// The server is full and no unauthenticated connection is idle.
    Full,
    /// Its user holds its share of connections.
    PerUser,
    /// Unprivileged users hold all the connections not reserved for privileged ones.
    Unreserved,
}

/// The connections a server holds.
#[derive(Debug)]
pub(crate) struct Pool<T> {
    limits: Limits,
    next_id: u64,
    /// Unauthenticated connections by id: ascending ids are oldest first.
    waiting: BTreeMap<u64, Waiting<T>>,
    per_client: HashMap<IpAddr, usize>,
    authenticated: HashSet<u64>,
    /// Identified connections of unprivileged users, with their user.
    owners: HashMap<u64, String>,
    per_user: HashMap<String, usize>,
}

#[derive(Debug)]
struct Waiting<T> {
    ip: IpAddr,
    slot: T,
}

// === impl Limits ===

impl Limits {
    /// The limits made consistent: at least one connection, the unauthenticated pool no larger
    /// than the total, the per-client share no larger than the pool.
    pub(crate) fn sane(self) -> Limits {
        let max_total = self.max_total.max(1);
        let max_unauthenticated = self.max_unauthenticated.clamp(1, max_total);
        let max_per_client = self.max_per_client.clamp(1, max_unauthenticated);
        Limits {
            max_total,
            max_unauthenticated,
            max_per_client,
            max_per_user: self.max_per_user.max(1),
            reserved: self.reserved.min(max_total - max_unauthenticated),
        }
    }

    /// Connections all unprivileged users may hold together.
    fn unprivileged(&self) -> usize {
        (self.max_total - self.max_unauthenticated - self.reserved).max(1)
    }
}

// === impl Pool ===

impl<T: Evictable> Pool<T> {
    pub(crate) fn new(limits: Limits) -> Pool<T> {
        Pool {
            limits: limits.sane(),
            next_id: 0,
            waiting: BTreeMap::new(),
            per_client: HashMap::new(),
            authenticated: HashSet::new(),
            owners: HashMap::new(),
            per_user: HashMap::new(),
        }
    }

    /// A new, unauthenticated connection from `ip`.
    pub(crate) fn admit(&mut self, ip: IpAddr, slot: T) -> Admission<T> {
        let held = self.per_client.get(&ip).copied().unwrap_or(0);
        let evicted = if held >= self.limits.max_per_client {
            match self.oldest_idle_of(ip) {
                Some(id) => self.remove_waiting(id),
                None => return Admission::Refused(Refusal::PerClient),
            }
        } else if self.full() {
            match self.idle_of_heaviest_client() {
                Some(id) => self.remove_waiting(id),
                None => return Admission::Refused(Refusal::Full),
            }
        } else {
            None
        };
        let id = self.next_id;
        self.next_id += 1;
        *self.per_client.entry(ip).or_default() += 1;
        self.waiting.insert(id, Waiting { ip, slot });
        Admission::Admitted { id, evicted }
    }

    /// Connection `id` authenticated; false if it is no longer held (evicted or released).
    pub(crate) fn promote(&mut self, id: u64) -> bool {
        if self.remove_waiting(id).is_none() {
            return self.authenticated.contains(&id);
        }
        self.authenticated.insert(id);
        true
    }

    /// Connection `id` carried a request of `user` (`privileged`: an admin or a node): it is
    /// authenticated and, for an unprivileged user, counted under the user unless that is over
    /// a share. A connection keeps the first user it was counted under.
    pub(crate) fn identify(
        &mut self,
        id: u64,
        user: &str,
        privileged: bool,
    ) -> Result<(), Refusal> {
        if !self.promote(id) || privileged || self.owners.contains_key(&id) {
            return Ok(());
        }
        if self.per_user.get(user).copied().unwrap_or(0) >= self.limits.max_per_user {
            return Err(Refusal::PerUser);
        }
        if self.owners.len() >= self.limits.unprivileged() {
            return Err(Refusal::Unreserved);
        }
        self.owners.insert(id, user.to_owned());
        *self.per_user.entry(user.to_owned()).or_default() += 1;
        Ok(())
    }

    /// Connection `id` closed (a no-op for one already evicted).
    pub(crate) fn release(&mut self, id: u64) {
        if self.remove_waiting(id).is_none() {
            self.authenticated.remove(&id);
        }
        if let Some(user) = self.owners.remove(&id)
            && let Some(n) = self.per_user.get_mut(&user)
        {
            *n -= 1;
            if *n == 0 {
                self.per_user.remove(&user);
            }
        }
    }

    /// Unauthenticated connections held.
    pub(crate) fn unauthenticated(&self) -> usize {
        self.waiting.len()
    }

    /// Authenticated connections held.
    pub(crate) fn authenticated(&self) -> usize {
        self.authenticated.len()
    }

    fn full(&self) -> bool {
        let total = self.waiting.len() + self.authenticated.len();
        self.waiting.len() >= self.limits.max_unauthenticated || total >= self.limits.max_total
    }

    fn oldest_idle_of(&self, ip: IpAddr) -> Option<u64> {
        self.waiting
            .iter()
            .find(|(_, w)| w.ip == ip && !w.slot.busy())
            .map(|(id, _)| *id)
    }

    /// The oldest idle connection of the address holding the most unauthenticated ones.
    fn idle_of_heaviest_client(&self) -> Option<u64> {
        let mut best: Option<(u64, usize)> = None;
        for (id, w) in &self.waiting {
            let held = self.per_client.get(&w.ip).copied().unwrap_or(0);
            if best.is_some_and(|(_, most)| held <= most) || w.slot.busy() {
                continue;
            }
            best = Some((*id, held));
        }
        best.map(|(id, _)| id)
    }

    fn remove_waiting(&mut self, id: u64) -> Option<T> {
        let w = self.waiting.remove(&id)?;
        if let Some(n) = self.per_client.get_mut(&w.ip) {
            *n -= 1;
            if *n == 0 {
                self.per_client.remove(&w.ip);
            }
        }
        Some(w.slot)
    }
}

#[cfg(test)]
mod tests;
