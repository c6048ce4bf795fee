//! One resource's objects as its watch left them ([`Cache`]): by key, by controller owner, and
//! the subscribers told of every change. One writer (the resource's watch task, through
//! [`Cache::apply`]), any number of readers and subscribers.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};

use futures::Stream;
use kube::Resource;
use kube::runtime::reflector::Store;
use kube::runtime::reflector::store::Writer;
use kube::runtime::watcher::{self, Event};

use crate::queue::Queue;
use crate::{controller_of, key};

/// A resource's objects as the last watch events left them.
pub struct Cache<K> {
    objects: RwLock<Objects<K>>,
    /// A full list has been read.
    synced: AtomicBool,
    /// Called for every change, in subscription order, after `objects` has it.
    handlers: Mutex<Vec<Handler<K>>>,
    /// A relist being read: what it returned so far.
    relist: Mutex<Option<HashMap<String, Arc<K>>>>,
    /// What of each object is kept (all of it, or what the controllers read).
    keep: fn(K) -> K,
}

/// A change the watch saw: the object now (or as it was when deleted) and before.
pub struct Change<K> {
    pub now: Arc<K>,
    pub before: Option<Arc<K>>,
    pub deleted: bool,
}

impl<K> Clone for Change<K> {
    fn clone(&self) -> Self {
        Change {
            now: self.now.clone(),
            before: self.before.clone(),
            deleted: self.deleted,
        }
    }
}

/// A subscriber: told of each change; must be quick and must not subscribe to the same cache.
type Handler<K> = Box<dyn FnMut(&Change<K>) + Send>;

/// The objects and their owner index, changed together.
struct Objects<K> {
    by_key: HashMap<String, Arc<K>>,
    /// Keys of the objects each controller (by uid) owns.
    owned: HashMap<String, HashSet<String>>,
}

// === impl Cache ===

impl<K: Resource> Cache<K> {
    /// An empty cache keeping what `keep` leaves of each object.
    pub fn new(keep: fn(K) -> K) -> Cache<K> {
        Cache {
            objects: RwLock::new(Objects {
                by_key: HashMap::new(),
                owned: HashMap::new(),
            }),
            synced: AtomicBool::new(false),
            handlers: Mutex::new(Vec::new()),
            relist: Mutex::new(None),
            keep,
        }
    }

    /// The object at `key` ([`crate::key`]).
    pub fn get(&self, key: &str) -> Option<Arc<K>> {
        self.read().by_key.get(key).cloned()
    }

    /// Every object.
    pub fn all(&self) -> Vec<Arc<K>> {
        self.read().by_key.values().cloned().collect()
    }

    /// The objects whose controller reference names `uid` (an index lookup, not a scan).
    pub fn owned_by(&self, uid: &str) -> Vec<Arc<K>> {
        let objects = self.read();
        let Some(keys) = objects.owned.get(uid) else {
            return Vec::new();
        };
        keys.iter()
            .filter_map(|k| objects.by_key.get(k).cloned())
            .collect()
    }

    /// How many objects there are.
    pub fn len(&self) -> usize {
        self.read().by_key.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether a full list has been read (before that, the cache is not the cluster).
    pub fn synced(&self) -> bool {
        self.synced.load(Ordering::Acquire)
    }

    /// Calls `handler` for every change from now on, after first telling it of every object
    /// held (as changes with nothing before), so a late subscriber misses nothing.
    pub fn subscribe(&self, mut handler: impl FnMut(&Change<K>) + Send + 'static) {
        let mut handlers = lock(&self.handlers);
        for now in self.all() {
            handler(&Change {
                now,
                before: None,
                deleted: false,
            });
        }
        handlers.push(Box::new(handler));
    }

    /// Queues the key of every object that changes: how a controller follows the objects it
    /// reconciles.
    pub fn keyed(&self, queue: &Queue) {
        let queue = queue.clone();
        self.subscribe(move |c| {
            let _ = queue.send(key(&*c.now));
        });
    }

    /// Queues `namespace/name` of the `kind` controlling each object that changes (now or
    /// before): how a controller follows the objects it owns.
    pub fn owners(&self, kind: &'static str, queue: &Queue) {
        let queue = queue.clone();
        self.subscribe(move |c| queue_owner(&queue, kind, c));
    }

    /// Every object that changes, from the objects held on: a trigger stream for a kube-runtime
    /// `Controller` (`Controller::for_stream`, `owns_stream`, `watches_stream`).
    pub fn stream(&self) -> impl Stream<Item = Arc<K>> + Send + 'static
    where
        K: Send + Sync + 'static,
    {
        let (tx, rx) = futures::channel::mpsc::unbounded();
        self.subscribe(move |c| {
            let _ = tx.unbounded_send(c.now.clone());
        });
        rx
    }

    /// The cache as a kube-runtime reflector `Store` and a trigger stream of every change, for a
    /// kube-runtime `Controller` over the shared watch (`Controller::for_stream(trigger,
    /// store)`, `owns_stream`, `watches_stream`; kube's `unstable-runtime-stream-control`
    /// feature). The `Store` holds its own `Arc`s of the objects (kube's writer copies each
    /// one), so it suits the small kinds; it is ready (`wait_until_ready`) once this cache has
    /// read a full list and, when the kind was empty then, seen its first object.
    pub fn reflect(
        self: &Arc<Self>,
    ) -> (
        Store<K>,
        impl Stream<Item = Result<K, watcher::Error>> + Send + 'static,
    )
    where
        K: Clone + Resource<DynamicType = ()> + Send + Sync + 'static,
    {
        let writer = Arc::new(Mutex::new(Writer::<K>::default()));
        let store = lock(&writer).as_reader();
        let (tx, rx) = futures::channel::mpsc::unbounded();
        let (cache, into, ready) = (
            Arc::downgrade(self),
            writer.clone(),
            Arc::new(AtomicBool::new(false)),
        );
        let done = ready.clone();
        self.subscribe(move |c| {
            let obj = (*c.now).clone();
            let mut writer = lock(&into);
            writer.apply_watcher_event(&match c.deleted {
                true => Event::Delete(obj.clone()),
                false => Event::Apply(obj.clone()),
            });
            if !done.load(Ordering::Acquire) && cache.upgrade().is_some_and(|c| c.synced()) {
                mark_ready(&mut writer);
                done.store(true, Ordering::Release);
            }
            let _ = tx.unbounded_send(Ok(obj));
        });
        if self.synced() && !ready.swap(true, Ordering::AcqRel) {
            mark_ready(&mut lock(&writer));
        }
        (store, rx)
    }

    /// Takes one watch event: the objects change, then every subscriber is told.
    pub fn apply(&self, event: Event<K>) {
        let mut handlers = lock(&self.handlers);
        let changes = match event {
            Event::Init => {
                *lock(&self.relist) = Some(HashMap::new());
                return;
            }
            Event::InitApply(obj) => {
                if let Some(fresh) = lock(&self.relist).as_mut() {
                    let obj = (self.keep)(obj);
                    fresh.insert(key(&obj), Arc::new(obj));
                }
                return;
            }
            Event::InitDone => match lock(&self.relist).take() {
                Some(fresh) => self.replace(fresh),
                None => return,
            },
            Event::Apply(obj) => {
                let now = Arc::new((self.keep)(obj));
                let before = self.write().insert(key(&*now), now.clone());
                vec![Change {
                    now,
                    before,
                    deleted: false,
                }]
            }
            Event::Delete(obj) => {
                let obj = (self.keep)(obj);
                let before = self.write().remove(&key(&obj));
                vec![Change {
                    now: Arc::new(obj),
                    before,
                    deleted: true,
                }]
            }
        };
        for change in &changes {
            for handler in handlers.iter_mut() {
                handler(change);
            }
        }
    }

    /// Installs a relist's objects; the changes: what is new or changed, and what went.
    fn replace(&self, fresh: HashMap<String, Arc<K>>) -> Vec<Change<K>> {
        let mut objects = self.write();
        let old = std::mem::take(&mut objects.by_key);
        objects.owned.clear();
        for (k, obj) in &fresh {
            objects.index(k, obj);
        }
        objects.by_key = fresh;
        self.synced.store(true, Ordering::Release);
        let mut changes = Vec::new();
        for (k, now) in &objects.by_key {
            let before = old.get(k).cloned();
            let same = before
                .as_ref()
                .is_some_and(|b| b.meta().resource_version == now.meta().resource_version);
            if !same {
                changes.push(Change {
                    now: now.clone(),
                    before,
                    deleted: false,
                });
            }
        }
        for (k, gone) in old {
            if !objects.by_key.contains_key(&k) {
                changes.push(Change {
                    now: gone,
                    before: None,
                    deleted: true,
                });
            }
        }
        changes
    }

    fn read(&self) -> RwLockReadGuard<'_, Objects<K>> {
        // Plain data, no user code runs under the lock.
        self.objects.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> RwLockWriteGuard<'_, Objects<K>> {
        self.objects.write().unwrap_or_else(|e| e.into_inner())
    }
}

// === impl Objects ===

impl<K: Resource> Objects<K> {
    fn insert(&mut self, k: String, obj: Arc<K>) -> Option<Arc<K>> {
        self.index(&k, &obj);
        let before = self.by_key.insert(k.clone(), obj);
        if let Some(b) = &before {
            self.unindex_if_moved(&k, b);
        }
        before
    }

    fn remove(&mut self, k: &str) -> Option<Arc<K>> {
        let before = self.by_key.remove(k)?;
        if let Some(uid) = controller_of(&*before).map(|o| o.uid.clone()) {
            self.unindex(&uid, k);
        }
        Some(before)
    }

    fn index(&mut self, k: &str, obj: &K) {
        if let Some(o) = controller_of(obj) {
            self.owned
                .entry(o.uid.clone())
                .or_default()
                .insert(k.to_string());
        }
    }

    /// Drops the index entry `before` had, when the object now held at `k` has another owner.
    fn unindex_if_moved(&mut self, k: &str, before: &K) {
        let Some(old) = controller_of(before).map(|o| o.uid.clone()) else {
            return;
        };
        let now = self.by_key.get(k).and_then(|o| controller_of(&**o));
        if now.is_none_or(|o| o.uid != old) {
            self.unindex(&old, k);
        }
    }

    fn unindex(&mut self, uid: &str, k: &str) {
        if let Some(keys) = self.owned.get_mut(uid) {
            keys.remove(k);
            if keys.is_empty() {
                self.owned.remove(uid);
            }
        }
    }
}

/// Sends to `queue` the key of the `kind` controlling the object of `change` (now or before).
pub fn queue_owner<K: Resource>(queue: &Queue, kind: &str, change: &Change<K>) {
    for obj in [Some(&change.now), change.before.as_ref()]
        .into_iter()
        .flatten()
    {
        if let Some(o) = controller_of(&**obj).filter(|o| o.kind == kind) {
            let ns = obj.meta().namespace.as_deref().unwrap_or_default();
            let _ = queue.send(format!("{ns}/{}", o.name));
        }
    }
}

/// Signals a kube writer ready, its objects unchanged (a relist of what it holds).
fn mark_ready<K>(writer: &mut Writer<K>)
where
    K: Clone + Resource<DynamicType = ()>,
{
    let held = writer.as_reader().state();
    writer.apply_watcher_event(&Event::Init);
    for obj in held {
        writer.apply_watcher_event(&Event::InitApply((*obj).clone()));
    }
    writer.apply_watcher_event(&Event::InitDone);
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Plain data; a handler that panicked leaves nothing half-changed behind the lock.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests;
