//! Watch: history replay from the change log, then live events fanned out by the writer.
//!
//! The writer publishes each committed batch to the [`Hub`] under one lock, and a new watcher
//! registers under that same lock. The watcher notes the last published revision `P`: changes in
//! `(from_revision, P]` are replayed from the change log, changes after `P` arrive live through a
//! bounded channel. The two ranges neither overlap nor leave a gap.

use std::collections::{BTreeMap, VecDeque};
use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::mpsc;
use tokio::sync::mpsc::error::TrySendError;

use crate::error::StoreError;
use crate::filter::{Filter, Predicate};
use crate::object::StoredObject;
use crate::read::ReadPool;

/// Change-log rows read per replay page.
const REPLAY_PAGE: usize = 512;

/// What happened to an object, as seen through a watch filter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventKind {
    Added,
    Modified,
    Deleted,
}

/// One change delivered to a watcher.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatchEvent {
    /// The revision of the change (strictly increasing within a watch).
    pub revision: u64,
    pub kind: EventKind,
    /// The object after the change; for a deletion its last state, with `revision` set to the
    /// deletion's revision. An object that stopped matching the filter is delivered as
    /// `Deleted` carrying its new state.
    pub object: Arc<StoredObject>,
}

/// What to watch and from where.
#[derive(Debug, Clone)]
pub struct WatchOptions {
    /// Deliver every change with a revision greater than this one.
    pub from_revision: u64,
    /// Only this collection; `None` watches every collection.
    pub resource: Option<String>,
    pub filter: Filter,
    /// Live events the watcher may have pending before it is ended with
    /// [`StoreError::WatcherLagged`] (events committed while history is still being replayed
    /// count too). Default 1024.
    pub buffer: usize,
}

/// A stream of [`WatchEvent`]s. Ends with `None` when the store closes, or with one terminal
/// error (`Expired`, `WatcherLagged`, a read error) after which it yields `None`.
pub struct Watcher {
    resource: Option<String>,
    filter: Filter,
    readers: Arc<ReadPool>,
    /// Change-log range still to replay: `(after, until]`.
    replay: Option<(u64, u64)>,
    pending: VecDeque<WatchEvent>,
    live: mpsc::Receiver<WatchEvent>,
    lagged: Arc<AtomicBool>,
    buffer: usize,
    last_revision: u64,
    done: bool,
}

/// One committed change, as the writer publishes it and the change log stores it.
#[derive(Debug, Clone)]
pub(crate) struct Change {
    pub(crate) revision: u64,
    pub(crate) kind: EventKind,
    pub(crate) object: Arc<StoredObject>,
    /// Labels before a modification, when they differ from the object's.
    pub(crate) prev_labels: Option<BTreeMap<String, String>>,
    /// Fields before a modification, when they differ from the object's.
    pub(crate) prev_fields: Option<BTreeMap<String, String>>,
}

/// The registry of live watchers, fed by the writer.
#[derive(Default)]
pub(crate) struct Hub {
    state: Mutex<HubState>,
}

#[derive(Default)]
struct HubState {
    published: u64,
    slots: Vec<Slot>,
    /// The writer stopped: no live event will come.
    closed: bool,
}

struct Slot {
    after: u64,
    resource: Option<String>,
    filter: Filter,
    tx: mpsc::Sender<WatchEvent>,
    lagged: Arc<AtomicBool>,
}

// === impl EventKind ===

impl EventKind {
    /// The Kubernetes watch event type.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Added => "ADDED",
            Self::Modified => "MODIFIED",
            Self::Deleted => "DELETED",
        }
    }

    pub(crate) fn code(self) -> i64 {
        match self {
            Self::Added => 1,
            Self::Modified => 2,
            Self::Deleted => 3,
        }
    }

    pub(crate) fn from_code(code: i64) -> Option<Self> {
        match code {
            1 => Some(Self::Added),
            2 => Some(Self::Modified),
            3 => Some(Self::Deleted),
            _ => None,
        }
    }
}

// === impl WatchOptions ===

impl WatchOptions {
    /// Watch everything after `from_revision`.
    pub fn from_revision(from_revision: u64) -> Self {
        Self {
            from_revision,
            resource: None,
            filter: Filter::default(),
            buffer: 1024,
        }
    }

    pub fn resource(mut self, resource: impl Into<String>) -> Self {
        self.resource = Some(resource.into());
        self
    }

    pub fn namespace(mut self, namespace: impl Into<String>) -> Self {
        self.filter.namespace = Some(namespace.into());
        self
    }

    pub fn field(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.filter.field = Some((name.into(), value.into()));
        self
    }

    pub fn label(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.filter.labels.insert(key.into(), value.into());
        self
    }

    pub fn predicate(mut self, p: impl Fn(&StoredObject) -> bool + Send + Sync + 'static) -> Self {
        let p: Predicate = Arc::new(p);
        self.filter.predicate = Some(p);
        self
    }

    pub fn buffer(mut self, buffer: usize) -> Self {
        self.buffer = buffer;
        self
    }
}

// === impl Watcher ===

impl Watcher {
    /// The next event, a terminal error, or `None` once the watch has ended.
    pub async fn next(&mut self) -> Option<Result<WatchEvent, StoreError>> {
        if self.done {
            return None;
        }
        loop {
            if let Some(event) = self.pending.pop_front() {
                self.last_revision = event.revision;
                return Some(Ok(event));
            }
            if let Some(range) = self.replay {
                if let Err(e) = self.replay_page(range).await {
                    self.done = true;
                    return Some(Err(e));
                }
                continue;
            }
            return self.next_live().await;
        }
    }

    /// Turns the watcher into a `futures::Stream`.
    pub fn into_stream(self) -> impl futures::Stream<Item = Result<WatchEvent, StoreError>> + Send {
        futures::stream::unfold(
            self,
            |mut w| async move { w.next().await.map(|item| (item, w)) },
        )
    }

    /// Whether the history replay is over and every event it found was handed out: from here
    /// on, every change up to the store revision at registration has been offered.
    pub fn replayed(&self) -> bool {
        self.replay.is_none() && self.pending.is_empty()
    }

    /// The revision of the last event handed out (the start revision before the first one).
    pub fn last_revision(&self) -> u64 {
        self.last_revision
    }

    async fn next_live(&mut self) -> Option<Result<WatchEvent, StoreError>> {
        match self.live.recv().await {
            Some(event) => {
                self.last_revision = event.revision;
                Some(Ok(event))
            }
            None => {
                self.done = true;
                self.lagged
                    .load(Ordering::Acquire)
                    .then_some(Err(StoreError::WatcherLagged {
                        buffer: self.buffer,
                        last_revision: self.last_revision,
                    }))
            }
        }
    }

    async fn replay_page(&mut self, (after, until): (u64, u64)) -> Result<(), StoreError> {
        let resource = self.resource.clone();
        let page = self
            .readers
            .run(move |conn| crate::read::changes_page(conn, after, until, resource, REPLAY_PAGE))
            .await?;
        if page.compacted > after {
            return Err(StoreError::Expired {
                requested: after,
                compacted: page.compacted,
            });
        }
        let last = page.changes.last().map(|c| c.revision);
        self.replay = match last {
            Some(last) if page.changes.len() == REPLAY_PAGE && last < until => Some((last, until)),
            _ => None,
        };
        let (resource, filter) = (self.resource.as_deref(), &self.filter);
        let events = page
            .changes
            .iter()
            .filter_map(|c| event_for(c, resource, filter));
        self.pending.extend(events);
        Ok(())
    }
}

impl std::fmt::Debug for Watcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Watcher")
            .field("resource", &self.resource)
            .field("filter", &self.filter)
            .field("last_revision", &self.last_revision)
            .field("done", &self.done)
            .finish_non_exhaustive()
    }
}

// === impl Store (following) ===

impl crate::Store {
    /// Keeps something derived from the store in line with it, until the store closes: `pass`
    /// rebuilds it from a full read, then `apply` takes every change `opts` selects after the
    /// revision the pass started from. When the watch fails (it fell behind, or the change log
    /// was compacted past it), another full pass follows `retry` later. `what` names the
    /// follower in the log. To stop earlier, drop the future (select it against a shutdown).
    pub async fn follow<P, A>(
        &self,
        what: &str,
        opts: WatchOptions,
        retry: std::time::Duration,
        pass: impl Fn() -> P,
        apply: impl Fn(WatchEvent) -> A,
    ) where
        P: std::future::Future<Output = Result<(), StoreError>>,
        A: std::future::Future<Output = ()>,
    {
        loop {
            let from = self.revision();
            if let Err(e) = pass().await {
                tracing::warn!(error = %e, "{what}: reading the store failed");
            }
            let watched = async {
                let mut watcher = self.watch(WatchOptions {
                    from_revision: from,
                    ..opts.clone()
                })?;
                while let Some(event) = watcher.next().await {
                    apply(event?).await;
                }
                Ok::<(), StoreError>(())
            };
            match watched.await {
                Ok(()) => return, // the store closed
                Err(e) => tracing::debug!(error = %e, "{what}: watch ended; reading again"),
            }
            tokio::time::sleep(retry).await;
        }
    }
}

// === impl Hub ===

impl Hub {
    /// Registers a watcher; fails with `Expired` when `from_revision` is below `compacted`.
    pub(crate) fn register(
        &self,
        opts: WatchOptions,
        compacted: u64,
        readers: Arc<ReadPool>,
    ) -> Result<Watcher, StoreError> {
        if opts.from_revision < compacted {
            return Err(StoreError::Expired {
                requested: opts.from_revision,
                compacted,
            });
        }
        let buffer = opts.buffer.max(1);
        let (tx, live) = mpsc::channel(buffer);
        let lagged = Arc::new(AtomicBool::new(false));
        let mut state = self.lock();
        if state.closed {
            return Err(StoreError::Closed);
        }
        let published = state.published;
        state.slots.push(Slot {
            after: opts.from_revision.max(published),
            resource: opts.resource.clone(),
            filter: opts.filter.clone(),
            tx,
            lagged: lagged.clone(),
        });
        drop(state);
        let replay = (opts.from_revision < published).then_some((opts.from_revision, published));
        Ok(Watcher {
            resource: opts.resource,
            filter: opts.filter,
            readers,
            replay,
            pending: VecDeque::new(),
            live,
            lagged,
            buffer,
            last_revision: opts.from_revision,
            done: false,
        })
    }

    /// Sets the initial published revision (at open, before any watcher exists).
    pub(crate) fn start_at(&self, revision: u64) {
        self.lock().published = revision;
    }

    /// Offers a committed batch to every watcher, dropping closed and lagging ones, then runs
    /// `after` (still under the lock) so the committed revision moves together with `published`.
    pub(crate) fn publish(&self, changes: &[Arc<Change>], revision: u64, after: impl FnOnce()) {
        let mut state = self.lock();
        if !changes.is_empty() {
            state.slots.retain(|slot| slot.offer(changes));
        }
        state.published = revision;
        after();
    }

    /// Ends every watcher (after the events it already has) and refuses new ones: the writer
    /// stopped, so nothing would ever reach them live.
    pub(crate) fn close(&self) {
        let mut state = self.lock();
        state.closed = true;
        state.slots.clear();
    }

    /// Number of registered watchers.
    pub(crate) fn watchers(&self) -> usize {
        self.lock().slots.len()
    }

    fn lock(&self) -> MutexGuard<'_, HubState> {
        // The lock guards plain data and no code panics while holding it except a user
        // predicate; recover the data in that case instead of poisoning the writer.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

// === impl Slot ===

impl Slot {
    /// Sends the matching events without waiting; returns false when the slot must go.
    fn offer(&self, changes: &[Arc<Change>]) -> bool {
        for change in changes.iter().filter(|c| c.revision > self.after) {
            // A panicking user predicate must not take the writer down: drop this watcher.
            let matched = panic::catch_unwind(AssertUnwindSafe(|| {
                event_for(change, self.resource.as_deref(), &self.filter)
            }));
            let Ok(Some(event)) = matched else {
                if matched.is_err() {
                    tracing::warn!("watch predicate panicked; ending that watcher");
                    return false;
                }
                continue;
            };
            match self.tx.try_send(event) {
                Ok(()) => {}
                Err(TrySendError::Full(_)) => {
                    self.lagged.store(true, Ordering::Release);
                    return false;
                }
                Err(TrySendError::Closed(_)) => return false,
            }
        }
        true
    }
}

/// The event a watcher with this filter sees for a change, following the Kubernetes selector
/// rules: start matching → `Added`, stop matching → `Deleted`, neither → nothing.
///
/// The previous state of a modification is known by its labels and fields only, so the
/// predicate is evaluated on the new object with the previous labels and fields.
pub(crate) fn event_for(
    change: &Change,
    resource: Option<&str>,
    filter: &Filter,
) -> Option<WatchEvent> {
    let object = &change.object;
    if resource.is_some_and(|r| r != object.key.resource) {
        return None;
    }
    let now = filter.matches(object);
    let kind = match change.kind {
        EventKind::Added | EventKind::Deleted => now.then_some(change.kind)?,
        EventKind::Modified => match (previously_matched(change, filter, now), now) {
            (true, true) => EventKind::Modified,
            (false, true) => EventKind::Added,
            (true, false) => EventKind::Deleted,
            (false, false) => return None,
        },
    };
    Some(WatchEvent {
        revision: change.revision,
        kind,
        object: object.clone(),
    })
}

fn previously_matched(change: &Change, filter: &Filter, now: bool) -> bool {
    if change.prev_labels.is_none() && change.prev_fields.is_none() {
        return now;
    }
    let object = &change.object;
    let labels = change.prev_labels.as_ref().unwrap_or(&object.labels);
    let fields = change.prev_fields.as_ref().unwrap_or(&object.fields);
    if !filter.matches_meta(&object.key, labels, fields) {
        return false;
    }
    let Some(predicate) = &filter.predicate else {
        return true;
    };
    let before = StoredObject {
        labels: labels.clone(),
        fields: fields.clone(),
        ..StoredObject::clone(object)
    };
    predicate(&before)
}
