//! The per-kind state of subscriptions, with no I/O: what a read of a kind gets, what to ask
//! the cloud, what is idle. Time comes in as `now`.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use apimachinery::ApiError;
use apimachinery::subscribe::Subscription;

/// How the edge stands with one subscribed kind.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum KindState {
    /// Asked (or to be asked); its objects are not all here yet.
    Pending,
    /// The cloud's initial sync is stored: served from the store.
    Synced,
    /// The cloud refused it (`403`, `404`, ...) at `at`.
    Refused {
        code: u16,
        message: String,
        at: Instant,
    },
}

/// One kind.
#[derive(Clone, Debug)]
pub(crate) struct Entry {
    pub state: KindState,
    /// The last read of the kind.
    pub last_use: Instant,
    /// Watches of the kind open now.
    pub open: usize,
    /// Delivered whatever the node does (never dropped for idleness).
    pub pinned: bool,
    /// A subscribe request is on its way.
    pub in_flight: bool,
    /// Why the last subscribe request got no answer (`None`: it got one, or none was sent).
    pub failure: Option<String>,
}

/// What a read of a kind gets.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Admit {
    /// Served from the store.
    Serve,
    /// Refused with this error.
    Refuse(ApiError),
    /// Send a subscribe request, then wait for the kind.
    Ask,
    /// A subscribe request is on its way: wait for the kind.
    Wait,
}

/// Every kind the node reads through subscriptions.
#[derive(Debug, Default)]
pub(crate) struct Table {
    kinds: HashMap<Subscription, Entry>,
}

// === impl Table ===

impl Table {
    /// Kinds synced before a restart: served from the store, last read `last_use`.
    pub fn restore(&mut self, sub: Subscription, last_use: Instant, pinned: bool) {
        let entry = Entry {
            state: KindState::Synced,
            last_use,
            open: 0,
            pinned,
            in_flight: false,
            failure: None,
        };
        self.kinds.insert(sub, entry);
    }

    /// A read of `sub` at `now`, with the link `online` or not; refusals older than
    /// `refusal_ttl` are asked again.
    pub fn admit(
        &mut self,
        sub: &Subscription,
        now: Instant,
        online: bool,
        refusal_ttl: Duration,
    ) -> Admit {
        let entry = self.kinds.entry(sub.clone()).or_insert_with(|| Entry {
            state: KindState::Pending,
            last_use: now,
            open: 0,
            pinned: false,
            in_flight: false,
            failure: None,
        });
        entry.last_use = now;
        match &entry.state {
            KindState::Synced => return Admit::Serve,
            KindState::Refused { at, .. } if now.duration_since(*at) < refusal_ttl || !online => {
                return Admit::Refuse(refusal(sub, &entry.state));
            }
            KindState::Refused { .. } | KindState::Pending => {}
        }
        match (entry.in_flight, online) {
            (true, _) => Admit::Wait,
            (false, true) => {
                entry.state = KindState::Pending;
                entry.in_flight = true;
                entry.failure = None;
                Admit::Ask
            }
            (false, false) => Admit::Refuse(never_synced(sub)),
        }
    }

    /// Where a waiting read of `sub` stands: `None` while the subscribe is on its way.
    pub fn settled(&self, sub: &Subscription) -> Option<Result<(), ApiError>> {
        let Some(entry) = self.kinds.get(sub) else {
            return Some(Err(ApiError::service_unavailable(format!(
                "the subscription to {} was dropped",
                sub.store_resource()
            ))));
        };
        match (&entry.state, entry.in_flight) {
            (KindState::Synced, _) => Some(Ok(())),
            (KindState::Refused { .. }, _) => Some(Err(refusal(sub, &entry.state))),
            (KindState::Pending, true) => None,
            (KindState::Pending, false) => Some(Err(ApiError::service_unavailable(format!(
                "{} was never synced to this node and the cloud did not answer its \
                 subscription: {}",
                sub.store_resource(),
                entry.failure.as_deref().unwrap_or("no answer")
            )))),
        }
    }

    /// The cloud's answer: synced (pinned or not), or refused.
    pub fn answered(&mut self, sub: &Subscription, answer: Result<bool, ApiError>, now: Instant) {
        let entry = self.kinds.entry(sub.clone()).or_insert_with(|| Entry {
            state: KindState::Pending,
            last_use: now,
            open: 0,
            pinned: false,
            in_flight: false,
            failure: None,
        });
        entry.in_flight = false;
        entry.failure = None;
        match answer {
            Ok(pinned) => {
                entry.state = KindState::Synced;
                entry.pinned = pinned;
            }
            Err(e) => {
                entry.state = KindState::Refused {
                    code: e.code,
                    message: e.message,
                    at: now,
                }
            }
        }
    }

    /// The subscribe request got no answer (`why`); a kind already synced stays served.
    pub fn failed(&mut self, sub: &Subscription, why: String) {
        if let Some(entry) = self.kinds.get_mut(sub) {
            entry.in_flight = false;
            entry.failure = Some(why);
        }
    }

    /// The link came up: refusals are forgotten (asked again at the next read), and the kinds
    /// held are returned, marked in flight, to be asked again (a restarted cloud does not know
    /// them; an answer also brings what changed meanwhile).
    pub fn reconnected(&mut self) -> Vec<Subscription> {
        self.kinds
            .retain(|_, e| !matches!(e.state, KindState::Refused { .. }));
        let mut again = Vec::new();
        for (sub, entry) in &mut self.kinds {
            if entry.state == KindState::Synced && !entry.in_flight {
                entry.in_flight = true;
                again.push(sub.clone());
            }
        }
        again
    }

    /// The synced kinds due for renewal (asked again: the cloud checks the node's RBAC again,
    /// and a cloud that lost them hears of them again), marked in flight.
    pub fn renewals(&mut self) -> Vec<Subscription> {
        let mut due = Vec::new();
        for (sub, entry) in &mut self.kinds {
            if entry.state == KindState::Synced && !entry.in_flight && !entry.pinned {
                entry.in_flight = true;
                due.push(sub.clone());
            }
        }
        due
    }

    /// A watch of `sub` opened (`true`) or closed.
    pub fn watching(&mut self, sub: &Subscription, opened: bool, now: Instant) {
        if let Some(entry) = self.kinds.get_mut(sub) {
            entry.last_use = now;
            match opened {
                true => entry.open += 1,
                false => entry.open = entry.open.saturating_sub(1),
            }
        }
    }

    /// Synced kinds nobody read for `idle` and with no watch open (pinned ones never).
    pub fn idle(&self, now: Instant, idle: Duration) -> Vec<Subscription> {
        self.kinds
            .iter()
            .filter(|(_, e)| e.state == KindState::Synced && !e.pinned && !e.in_flight)
            .filter(|(_, e)| e.open == 0 && now.duration_since(e.last_use) >= idle)
            .map(|(s, _)| s.clone())
            .collect()
    }

    /// True when `sub` is subscribed, asked or refused.
    pub fn contains(&self, sub: &Subscription) -> bool {
        self.kinds.contains_key(sub)
    }

    /// Forgets `sub` (dropped).
    pub fn remove(&mut self, sub: &Subscription) {
        self.kinds.remove(sub);
    }

    /// How many kinds are in each state (`synced`, `pending`, `refused`).
    pub fn counts(&self) -> BTreeMap<&'static str, u64> {
        let mut counts = BTreeMap::from([("pending", 0), ("refused", 0), ("synced", 0)]);
        for entry in self.kinds.values() {
            let state = match entry.state {
                KindState::Pending => "pending",
                KindState::Synced => "synced",
                KindState::Refused { .. } => "refused",
            };
            *counts.entry(state).or_default() += 1;
        }
        counts
    }
}

/// The 503 for a kind never synced while the cloud is away.
pub(crate) fn never_synced(sub: &Subscription) -> ApiError {
    ApiError::service_unavailable(format!(
        "{} was never synced to this node and the cloud is not reachable",
        sub.store_resource()
    ))
}

fn refusal(sub: &Subscription, state: &KindState) -> ApiError {
    match state {
        KindState::Refused { code, message, .. } => {
            apimachinery::subscribe::refusal(*code, message).unwrap_or_else(|| {
                ApiError::internal(format!("{} was refused", sub.store_resource()))
            })
        }
        _ => ApiError::internal(format!("{} is not refused", sub.store_resource())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TTL: Duration = Duration::from_secs(300);

    fn sub() -> Subscription {
        Subscription::new("networking.k8s.io", "v1", "networkpolicies").unwrap()
    }

    #[test]
    fn the_first_read_asks_the_others_wait_and_all_are_served_once_synced() {
        let (mut t, now) = (Table::default(), Instant::now());
        assert_eq!(t.admit(&sub(), now, true, TTL), Admit::Ask);
        assert_eq!(t.admit(&sub(), now, true, TTL), Admit::Wait);
        assert_eq!(t.settled(&sub()), None);
        t.answered(&sub(), Ok(false), now);
        assert_eq!(t.settled(&sub()), Some(Ok(())));
        assert_eq!(
            t.admit(&sub(), now, false, TTL),
            Admit::Serve,
            "offline too"
        );
    }

    #[test]
    fn a_kind_never_synced_is_a_503_offline_and_a_failed_ask_says_why() {
        let (mut t, now) = (Table::default(), Instant::now());
        let Admit::Refuse(e) = t.admit(&sub(), now, false, TTL) else {
            panic!("refused offline")
        };
        assert_eq!(e.code, 503);
        assert_eq!(
            e.message,
            "networkpolicies.networking.k8s.io was never synced to this node and the cloud is not reachable"
        );
        assert_eq!(t.admit(&sub(), now, true, TTL), Admit::Ask);
        t.failed(&sub(), "link lost".into());
        let e = t.settled(&sub()).unwrap().unwrap_err();
        assert!(e.message.contains("link lost"), "{}", e.message);
    }

    #[test]
    fn a_refusal_is_kept_for_its_ttl_then_asked_again_and_forgotten_on_reconnect() {
        let (mut t, now) = (Table::default(), Instant::now());
        t.admit(&sub(), now, true, TTL);
        t.answered(&sub(), Err(ApiError::new(403, "Forbidden", "no")), now);
        let Admit::Refuse(e) = t.admit(&sub(), now + TTL / 2, true, TTL) else {
            panic!("refused")
        };
        assert_eq!((e.code, e.message.as_str()), (403, "no"));
        assert_eq!(t.admit(&sub(), now + TTL, true, TTL), Admit::Ask);
        t.answered(&sub(), Err(ApiError::new(404, "NotFound", "gone")), now);
        assert!(t.reconnected().is_empty());
        assert_eq!(t.admit(&sub(), now, true, TTL), Admit::Ask);
    }

    #[test]
    fn only_synced_kinds_unread_for_the_idle_time_and_unwatched_are_idle() {
        let (mut t, now) = (Table::default(), Instant::now());
        let idle = Duration::from_secs(60);
        t.admit(&sub(), now, true, TTL);
        assert!(t.idle(now + idle * 2, idle).is_empty(), "pending");
        t.answered(&sub(), Ok(false), now);
        assert!(t.idle(now + idle / 2, idle).is_empty());
        t.watching(&sub(), true, now);
        assert!(t.idle(now + idle * 2, idle).is_empty(), "a watch is open");
        t.watching(&sub(), false, now);
        assert_eq!(t.idle(now + idle, idle), [sub()]);
        t.answered(&sub(), Ok(true), now);
        assert!(t.idle(now + idle * 2, idle).is_empty(), "pinned");
        assert_eq!(t.reconnected(), [sub()]);
        assert_eq!(t.counts()["synced"], 1);
    }

    #[test]
    fn a_renewal_keeps_serving_the_kind_until_the_cloud_refuses_it() {
        let (mut t, now) = (Table::default(), Instant::now());
        t.admit(&sub(), now, true, TTL);
        t.answered(&sub(), Ok(false), now);
        assert_eq!(t.renewals(), [sub()]);
        assert!(t.renewals().is_empty(), "already in flight");
        assert_eq!(t.admit(&sub(), now, true, TTL), Admit::Serve);
        t.failed(&sub(), "no link".into());
        assert_eq!(
            t.admit(&sub(), now, true, TTL),
            Admit::Serve,
            "kept on no answer"
        );
        assert_eq!(t.renewals(), [sub()]);
        t.answered(&sub(), Err(ApiError::new(403, "Forbidden", "revoked")), now);
        let Admit::Refuse(e) = t.admit(&sub(), now, true, TTL) else {
            panic!("refused")
        };
        assert_eq!(e.code, 403);
    }
}
