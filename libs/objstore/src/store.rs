//! The public handles: [`Store`] reads, [`Writer`] (one per file) writes.

use std::convert::Infallible;
use std::ops::Deref;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread;

use bytes::Bytes;
use tokio::sync::{mpsc, oneshot, watch};

use crate::cache::ObjectCache;
use crate::config::StoreConfig;
use crate::db;
use crate::digest::{self, Digest};
use crate::error::StoreError;
use crate::filter::{InventoryFilter, ListOptions, ListResult};
use crate::object::{Applied, Mutation, NewObject, ObjKey, StoredObject};
use crate::outbox::{Enqueue, OutboxEntry};
use crate::read::{self, ReadPool};
use crate::watch::{Hub, WatchOptions, Watcher};
use crate::writer::{Batch, Committer, Finish, Job};

/// A read handle on one store file: get, list, watch, inventory, outbox peeks, the revision and
/// whether the store can write. Cheap to clone and hand to everyone who reads; it cannot write
/// (that takes the file's one [`Writer`], which gives these out with [`Writer::reader`]), so
/// the compiler keeps every write on the writer's side.
#[derive(Clone)]
pub struct Store {
    inner: Arc<Inner>,
}

/// The one write handle of a store file: owns the writer thread and is the only way to change
/// objects or the outbox. Not `Clone`: whoever opens the file owns its writes and gives out
/// [`Store`]s to readers. It reads too (it dereferences to its [`Store`]). Dropping it stops the
/// writer thread after the jobs already queued; readers still read the file, and their watchers
/// end.
pub struct Writer {
    store: Store,
    jobs: Option<mpsc::Sender<Job>>,
    thread: Option<thread::JoinHandle<()>>,
}

/// Counters for observing the writer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Committed write transactions (one per group-commit batch).
    pub commits: u64,
    /// Jobs (mutate / mutate_many / outbox calls) answered by committed batches.
    pub jobs: u64,
    /// Revisions consumed (object changes written to the change log).
    pub changes: u64,
    /// Batches rolled back.
    pub failed_batches: u64,
    /// Watchers currently registered for live events.
    pub watchers: usize,
}

struct Inner {
    path: PathBuf,
    shared: Arc<Shared>,
    readers: Arc<ReadPool>,
}

/// State the writer updates and handles read.
pub(crate) struct Shared {
    pub(crate) revision: AtomicU64,
    pub(crate) compacted: AtomicU64,
    pub(crate) hub: Hub,
    pub(crate) cache: Arc<ObjectCache>,
    pub(crate) stats: Counters,
    /// Why the last batch did not commit, until one commits again.
    pub(crate) write_failure: watch::Sender<Option<Arc<rusqlite::Error>>>,
}

#[derive(Default)]
pub(crate) struct Counters {
    pub(crate) commits: AtomicU64,
    pub(crate) jobs: AtomicU64,
    pub(crate) changes: AtomicU64,
    pub(crate) failed_batches: AtomicU64,
}

/// The result of [`Store::mutate_many`]: one entry per item, in order.
pub type ManyResults<T, E> = Vec<Result<Applied<T>, E>>;

// === impl Store ===

impl Store {
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// The latest committed revision (every change up to it is visible to reads and has been
    /// offered to watchers).
    pub fn revision(&self) -> u64 {
        self.inner.shared.revision.load(Ordering::Acquire)
    }

    /// Changes at or below this revision are no longer in the change log.
    pub fn compacted_revision(&self) -> u64 {
        self.inner.shared.compacted.load(Ordering::Acquire)
    }

    pub fn stats(&self) -> Stats {
        let c = &self.inner.shared.stats;
        Stats {
            commits: c.commits.load(Ordering::Relaxed),
            jobs: c.jobs.load(Ordering::Relaxed),
            changes: c.changes.load(Ordering::Relaxed),
            failed_batches: c.failed_batches.load(Ordering::Relaxed),
            watchers: self.inner.shared.hub.watchers(),
        }
    }

    /// Why the store cannot write, `None` while it can: the error of the last write batch
    /// (a full disk, an I/O error), until a batch that writes something (an object, an outbox
    /// entry, a [`Writer::probe`]) commits again; a batch that only reads or keeps commits even
    /// on a full disk and clears nothing. Reads are not affected.
    pub fn write_failure(&self) -> Option<StoreError> {
        let failure = self.inner.shared.write_failure.borrow();
        failure.clone().map(StoreError::StoreWrite)
    }

    /// Resolves once [`Store::write_failure`] is `Some` (at once if it is now).
    pub async fn write_failed(&self) {
        let mut failures = self.inner.shared.write_failure.subscribe();
        // The sender lives in `Shared`, which this handle keeps alive: it cannot close.
        let _ = failures.wait_for(|f| f.is_some()).await;
    }

    pub async fn get(&self, key: &ObjKey) -> Result<Option<Arc<StoredObject>>, StoreError> {
        let key = key.clone();
        let cache = self.inner.shared.cache.clone();
        self.inner
            .readers
            .run(move |conn| read::get(conn, &cache, &key))
            .await
    }

    /// Lists current objects in `(namespace, name)` order, with the snapshot revision.
    pub async fn list(&self, opts: ListOptions) -> Result<ListResult, StoreError> {
        let cache = self.inner.shared.cache.clone();
        self.inner
            .readers
            .run(move |conn| read::list(conn, &cache, &opts))
            .await
    }

    /// Watches changes after `opts.from_revision`: history from the change log, then live.
    /// Fails with [`StoreError::Closed`] once the store's [`Writer`] is gone.
    pub fn watch(&self, opts: WatchOptions) -> Result<Watcher, StoreError> {
        let shared = &self.inner.shared;
        let compacted = shared.compacted.load(Ordering::Acquire);
        shared
            .hub
            .register(opts, compacted, self.inner.readers.clone())
    }

    /// `(key, resourceVersion)` of every object selected by `filter`, in no particular order.
    pub async fn inventory(
        &self,
        filter: InventoryFilter,
    ) -> Result<Vec<(ObjKey, String)>, StoreError> {
        self.inner
            .readers
            .run(move |conn| read::inventory(conn, &filter))
            .await
    }

    /// The [`Digest`] of `inventory(filter)`.
    pub async fn digest(&self, filter: InventoryFilter) -> Result<Digest, StoreError> {
        let entries = self.inventory(filter).await?;
        Ok(digest::of(entries.iter().map(|(k, rv)| (k, rv.as_str()))))
    }

    /// Up to `n` entries, oldest first-enqueue first.
    pub async fn outbox_peek(&self, n: usize) -> Result<Vec<OutboxEntry>, StoreError> {
        self.inner
            .readers
            .run(move |conn| read::outbox_peek(conn, n))
            .await
    }

    pub async fn outbox_len(&self) -> Result<usize, StoreError> {
        self.inner.readers.run(read::outbox_len).await
    }
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("path", &self.inner.path)
            .field("revision", &self.revision())
            .finish_non_exhaustive()
    }
}

// === impl Writer ===

impl Writer {
    /// Opens (creating if needed) the store at `path` and starts its writer thread.
    /// Blocks briefly on file I/O (and `quick_check` when `verify_on_open`).
    pub fn open(path: impl AsRef<Path>, config: StoreConfig) -> Result<Self, StoreError> {
        let path = path.as_ref().to_owned();
        let (conn, meta) = db::open_writer(&path, &config)?;
        let shared = Arc::new(Shared {
            revision: AtomicU64::new(meta.revision),
            compacted: AtomicU64::new(meta.compacted),
            hub: Hub::default(),
            cache: Arc::new(ObjectCache::new(config.cache_objects)),
            stats: Counters::default(),
            write_failure: watch::Sender::new(None),
        });
        shared.hub.start_at(meta.revision);
        let (tx, rx) = mpsc::channel(config.queue_capacity.max(1));
        let thread = Committer::spawn(conn, meta, rx, shared.clone(), path.clone(), &config)
            .map_err(StoreError::Spawn)?;
        let readers = Arc::new(ReadPool::new(path.clone(), config));
        let inner = Inner {
            path,
            shared,
            readers,
        };
        Ok(Writer {
            store: Store {
                inner: Arc::new(inner),
            },
            jobs: Some(tx),
            thread: Some(thread),
        })
    }

    /// A read handle on this store, for anyone who reads but must not write.
    pub fn reader(&self) -> Store {
        self.store.clone()
    }

    /// Writes and commits some 64 KiB of pages and changes nothing anyone can see (no revision,
    /// no change, no outbox entry): tells whether the store can write again after
    /// [`Store::write_failure`].
    pub async fn probe(&self) -> Result<(), StoreError> {
        self.submit(1, |batch| batch.probe()).await
    }

    /// Caps the file at `pages` pages (SQLite's `max_page_count`; never below the current
    /// size), the way a full disk caps it; returns the cap in force.
    #[cfg(any(test, feature = "test-util"))]
    pub async fn set_max_page_count(&self, pages: u64) -> Result<u64, StoreError> {
        let pragma = format!("PRAGMA max_page_count = {pages}");
        let set = self
            .submit(1, move |batch| {
                batch.with_conn(|conn| conn.query_row(&pragma, [], |row| row.get::<_, i64>(0)))
            })
            .await?;
        Ok(set.map_or(0, |n| n as u64))
    }

    /// Read-modify-write of one object inside the writer's transaction.
    ///
    /// `f` gets the current state (including writes made earlier in the same batch) and the
    /// revision a change would get, and decides. `Ok(Err(e))` is the closure's own refusal
    /// (nothing written); `Err(_)` means the batch did not commit. The closure runs on the
    /// writer thread: keep it short and non-blocking.
    pub async fn mutate<T, E, F>(
        &self,
        key: ObjKey,
        f: F,
    ) -> Result<Result<Applied<T>, E>, StoreError>
    where
        F: FnOnce(Option<&StoredObject>, u64) -> Result<(Mutation, T), E> + Send + 'static,
        T: Send + 'static,
        E: Send + 'static,
    {
        let mut results = self.mutate_many(vec![(key, f)]).await?;
        // mutate_many answers exactly one result per item on success.
        Ok(results.pop().expect("one result per item"))
    }

    /// Runs several read-modify-writes, in order, in one transaction: either all of their
    /// outcomes commit or the call fails. Each item's closure sees the earlier items' writes.
    pub async fn mutate_many<T, E, F>(
        &self,
        items: Vec<(ObjKey, F)>,
    ) -> Result<ManyResults<T, E>, StoreError>
    where
        F: FnOnce(Option<&StoredObject>, u64) -> Result<(Mutation, T), E> + Send + 'static,
        T: Send + 'static,
        E: Send + 'static,
    {
        let weight = items.len().max(1);
        self.submit(weight, move |batch| {
            let mut results = Vec::with_capacity(items.len());
            for (key, f) in items {
                match batch.mutate(key, f) {
                    Some(result) => results.push(result),
                    None => break,
                }
            }
            results
        })
        .await
    }

    /// Creates or replaces an object unconditionally.
    pub async fn put(
        &self,
        key: ObjKey,
        object: NewObject,
    ) -> Result<Arc<StoredObject>, StoreError> {
        let applied = self
            .mutate(key, move |_, _| {
                Ok::<_, Infallible>((Mutation::Put(object), ()))
            })
            .await?;
        let Ok(applied) = applied;
        // A committed put always leaves the object present.
        Ok(applied.object.expect("put leaves the object present"))
    }

    /// Deletes an object; returns its last state, `None` if it did not exist.
    pub async fn delete(&self, key: &ObjKey) -> Result<Option<StoredObject>, StoreError> {
        let applied = self
            .mutate(key.clone(), |current, _| {
                Ok::<_, Infallible>((Mutation::Delete, current.cloned()))
            })
            .await?;
        let Ok(Applied { output, .. }) = applied;
        Ok(output)
    }

    /// Queues `payload` under `key`, replacing an unsent payload with the same key (see the
    /// [`outbox`](crate::outbox) module for ordering). Returns the entry id.
    pub async fn outbox_put(
        &self,
        key: impl Into<String>,
        payload: Bytes,
    ) -> Result<u64, StoreError> {
        let key = key.into();
        let id = self
            .submit(1, move |batch| batch.outbox_put(&key, &payload))
            .await?;
        id.ok_or(StoreError::Closed)
    }

    /// Read-modify-write of one object and, in the same transaction, the outbox entry the
    /// closure asks for: either both commit or neither does, so a crash never leaves a change
    /// stored without its queued message (or the reverse). The closure decides as for
    /// [`Writer::mutate`] and may add an [`Enqueue`] (queued as [`Writer::outbox_put`] queues,
    /// coalesced by key); the answer carries the entry's id when one was queued.
    pub async fn mutate_and_queue<T, E, F>(
        &self,
        key: ObjKey,
        f: F,
    ) -> Result<Result<(Applied<T>, Option<u64>), E>, StoreError>
    where
        F: FnOnce(Option<&StoredObject>, u64) -> Result<(Mutation, T, Option<Enqueue>), E>
            + Send
            + 'static,
        T: Send + 'static,
        E: Send + 'static,
    {
        self.submit(1, move |batch| {
            let mut enqueue = None;
            let applied = batch.mutate(key, |current, revision| {
                let (mutation, output, queued) = f(current, revision)?;
                enqueue = queued;
                Ok((mutation, output))
            })?;
            let applied = match applied {
                Ok(applied) => applied,
                Err(e) => return Some(Err(e)),
            };
            let id = match enqueue {
                Some(entry) => Some(batch.outbox_put(&entry.key, &entry.payload)?),
                None => None,
            };
            Some(Ok((applied, id)))
        })
        .await?
        .ok_or(StoreError::Closed)
    }

    /// Removes the entries with these ids (ids of replaced payloads are ignored); returns how
    /// many were removed.
    pub async fn outbox_ack(&self, ids: Vec<u64>) -> Result<usize, StoreError> {
        let removed = self
            .submit(ids.len().max(1), move |batch| batch.outbox_ack(&ids))
            .await?;
        removed.ok_or(StoreError::Closed)
    }

    /// Sends a job to the writer and waits for the batch outcome.
    async fn submit<R, W>(&self, weight: usize, work: W) -> Result<R, StoreError>
    where
        R: Send + 'static,
        W: FnOnce(&mut Batch<'_>) -> R + Send + 'static,
    {
        let (tx, rx) = oneshot::channel();
        let run = move |batch: &mut Batch<'_>| -> Finish {
            let result = work(batch);
            Box::new(move |outcome: Result<(), &StoreError>| {
                let _ = tx.send(outcome.map(|()| result).map_err(StoreError::replicate));
            })
        };
        let job = Job {
            weight,
            run: Box::new(run),
        };
        let jobs = self.jobs.as_ref().ok_or(StoreError::Closed)?;
        jobs.send(job).await.map_err(|_| StoreError::Closed)?;
        rx.await.map_err(|_| StoreError::Closed)?
    }
}

/// Every read of the [`Store`] works on its writer too.
impl Deref for Writer {
    type Target = Store;

    fn deref(&self) -> &Store {
        &self.store
    }
}

impl std::fmt::Debug for Writer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Writer").field(&self.store).finish()
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        // Closing the queue lets the writer thread finish what is queued and exit; wait for it
        // so the file is closed for writes when the writer is gone (unless we are that thread).
        drop(self.jobs.take());
        if let Some(handle) = self.thread.take()
            && handle.thread().id() != thread::current().id()
            && handle.join().is_err()
        {
            tracing::error!(path = %self.store.path().display(), "objstore writer thread panicked");
        }
    }
}
