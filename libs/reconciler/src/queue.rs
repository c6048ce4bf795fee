//! A controller's work queue: keys to reconcile, each at most once in the queue and never
//! twice at the same time (a few different keys at once, [`WORKERS`]);
//! what a reconcile returns ([`Action`]) says when to look again, and a failure is retried
//! after an exponential back-off per key (reset by the next success). [`WorkQueue`] is the pure
//! bookkeeping, driven by an explicit `now`; [`work`] the loop around it.

use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};
use std::fmt::Display;
use std::time::Duration;

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// What a reconcile asks for next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Nothing until a watched change queues the key again.
    AwaitChange,
    /// Reconcile again after this long (earlier if a change queues it).
    Requeue(Duration),
}

/// The delay before retrying a key after its `n`th failure in a row: `base`, doubling each
/// time, at most `max` (kube-controller-manager's per-item exponential back-off).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Backoff {
    pub base: Duration,
    pub max: Duration,
}

/// Where keys are sent to a [`work`] loop (cheap to clone).
#[derive(Clone, Debug)]
pub struct Queue {
    tx: mpsc::UnboundedSender<(String, Option<Instant>)>,
}

/// The receiving end of a [`Queue`], for [`work`].
pub struct Receiver {
    pub(crate) rx: mpsc::UnboundedReceiver<(String, Option<Instant>)>,
}

/// The [`work`] loop has ended.
#[derive(Debug)]
pub struct Closed;

/// How many keys a [`work`] loop reconciles at once (kube-controller-manager's
/// `--concurrent-*-syncs` default for most workload controllers).
pub const WORKERS: usize = 5;

/// Keys waiting: ready now, or due later.
pub struct WorkQueue {
    ready: VecDeque<String>,
    queued: HashSet<String>,
    /// Keys being reconciled now.
    running: HashSet<String>,
    /// Keys queued while being reconciled: ready again once that reconcile ends.
    dirty: HashSet<String>,
    delayed: BTreeSet<(Instant, String)>,
    due: HashMap<String, Instant>,
    /// Failures in a row per key.
    failures: HashMap<String, u32>,
    backoff: Backoff,
}

/// A queue and the receiver its [`work`] loop reads.
pub fn queue() -> (Queue, Receiver) {
    let (tx, rx) = mpsc::unbounded_channel();
    (Queue { tx }, Receiver { rx })
}

/// Runs `reconcile` for each key sent to the queue, [`WORKERS`] different keys at once, until
/// shutdown, rescheduling each by its [`Action`] and retrying failures with
/// [`Backoff::DEFAULT`].
pub async fn work<F, Fut, E>(
    rx: Receiver,
    what: &'static str,
    shutdown: CancellationToken,
    reconcile: F,
) where
    F: FnMut(String) -> Fut,
    Fut: Future<Output = Result<Action, E>>,
    E: Display,
{
    work_with(rx, what, Backoff::DEFAULT, shutdown, reconcile).await
}

/// Like [`work`], with the given back-off.
pub async fn work_with<F, Fut, E>(
    mut rx: Receiver,
    what: &'static str,
    backoff: Backoff,
    shutdown: CancellationToken,
    mut reconcile: F,
) where
    F: FnMut(String) -> Fut,
    Fut: Future<Output = Result<Action, E>>,
    E: Display,
{
    let mut queue = WorkQueue::new(backoff);
    let mut running = FuturesUnordered::new();
    loop {
        while let Ok(sent) = rx.rx.try_recv() {
            queue.take(sent);
        }
        while running.len() < WORKERS {
            let Some(k) = queue.pop(Instant::now()) else {
                break;
            };
            let done = reconcile(k.clone());
            running.push(async move { (k, done.await) });
        }
        let due = queue.next_due();
        tokio::select! {
            biased;
            _ = shutdown.cancelled() => return,
            Some((k, outcome)) = running.next(), if !running.is_empty() => {
                let outcome = outcome.map_err(|e| {
                    tracing::info!(object = %k, controller = what, error = %e, "reconcile failed; retrying");
                });
                queue.finished(&k, outcome, Instant::now());
            }
            sent = rx.rx.recv() => match sent {
                Some(sent) => queue.take(sent),
                None => return,
            },
            _ = sleep_until(due), if due.is_some() && running.len() < WORKERS => {}
        }
    }
}

async fn sleep_until(due: Option<Instant>) {
    if let Some(at) = due {
        tokio::time::sleep_until(at).await;
    }
}

// === impl Action ===

impl Action {
    /// Reconcile again after `after`.
    pub fn requeue(after: Duration) -> Action {
        Action::Requeue(after)
    }

    /// Nothing until a change.
    pub fn await_change() -> Action {
        Action::AwaitChange
    }

    /// The earlier of two requeues (a requeue is sooner than waiting for a change).
    pub fn sooner(self, other: Action) -> Action {
        match (self, other) {
            (Action::Requeue(a), Action::Requeue(b)) => Action::Requeue(a.min(b)),
            (Action::AwaitChange, o) => o,
            (s, Action::AwaitChange) => s,
        }
    }
}

// === impl Backoff ===

impl Backoff {
    /// 100 ms, doubling up to 5 minutes.
    pub const DEFAULT: Backoff = Backoff {
        base: Duration::from_millis(100),
        max: Duration::from_secs(300),
    };

    /// The delay after `failures` failures in a row (at least one).
    pub fn delay(&self, failures: u32) -> Duration {
        let doublings = failures.saturating_sub(1).min(31);
        self.base
            .checked_mul(1 << doublings)
            .map_or(self.max, |d| d.min(self.max))
    }
}

// === impl Queue ===

impl Queue {
    /// Queues `key` now. Errs once the work loop has ended.
    pub fn send(&self, key: String) -> Result<(), Closed> {
        self.tx.send((key, None)).map_err(|_| Closed)
    }

    /// Queues `key` after `after` (sooner if it is sent before).
    pub fn later(&self, key: &str, after: Duration) {
        let _ = self
            .tx
            .send((key.to_string(), Some(Instant::now() + after)));
    }
}

// === impl WorkQueue ===

impl WorkQueue {
    /// An empty queue retrying failures with `backoff`.
    pub fn new(backoff: Backoff) -> WorkQueue {
        WorkQueue {
            ready: VecDeque::new(),
            queued: HashSet::new(),
            running: HashSet::new(),
            dirty: HashSet::new(),
            delayed: BTreeSet::new(),
            due: HashMap::new(),
            failures: HashMap::new(),
            backoff,
        }
    }

    /// Queues `key` now; one already ready stays where it is, one due later is made ready, one
    /// being reconciled is ready again when that ends.
    pub fn add(&mut self, key: String) {
        if let Some(at) = self.due.remove(&key) {
            self.delayed.remove(&(at, key.clone()));
        }
        if self.running.contains(&key) {
            self.dirty.insert(key);
            return;
        }
        if self.queued.insert(key.clone()) {
            self.ready.push_back(key);
        }
    }

    /// Queues `key` at `at`, unless it is ready or due sooner already.
    pub fn add_at(&mut self, key: String, at: Instant) {
        if self.queued.contains(&key) || self.due.get(&key).is_some_and(|d| *d <= at) {
            return;
        }
        if let Some(old) = self.due.insert(key.clone(), at) {
            self.delayed.remove(&(old, key.clone()));
        }
        self.delayed.insert((at, key));
    }

    /// The next key to reconcile at `now`, if any is ready or due.
    pub fn pop(&mut self, now: Instant) -> Option<String> {
        while let Some((at, _)) = self.delayed.first() {
            if *at > now {
                break;
            }
            let Some((_, key)) = self.delayed.pop_first() else {
                break;
            };
            self.due.remove(&key);
            self.add(key);
        }
        let key = self.ready.pop_front()?;
        self.queued.remove(&key);
        self.running.insert(key.clone());
        Some(key)
    }

    /// When the next delayed key is due.
    pub fn next_due(&self) -> Option<Instant> {
        self.delayed.first().map(|(at, _)| *at)
    }

    /// Records how the reconcile of `key` ended at `now`: a success's action is followed and
    /// resets the back-off; a failure retries after the back-off of its failures in a row.
    pub fn finished(&mut self, key: &str, outcome: Result<Action, ()>, now: Instant) {
        self.running.remove(key);
        if self.dirty.remove(key) {
            self.add(key.to_string());
        }
        match outcome {
            Ok(action) => {
                self.failures.remove(key);
                if let Action::Requeue(after) = action {
                    self.add_at(key.to_string(), now + after);
                }
            }
            Err(()) => {
                let n = self.failures.entry(key.to_string()).or_default();
                *n = n.saturating_add(1);
                let delay = self.backoff.delay(*n);
                self.add_at(key.to_string(), now + delay);
            }
        }
    }

    /// Failures in a row of `key`.
    pub fn failures(&self, key: &str) -> u32 {
        self.failures.get(key).copied().unwrap_or(0)
    }

    fn take(&mut self, (key, at): (String, Option<Instant>)) {
        match at {
            Some(at) => self.add_at(key, at),
            None => self.add(key),
        }
    }
}

#[cfg(test)]
mod tests;
