//! The single writer: a std thread that owns the write connection and group-commits jobs.
//!
//! Each loop takes every job already queued (up to `max_batch` mutations) and runs them, in
//! order, inside one `BEGIN IMMEDIATE` transaction, then commits once. Only after the commit
//! returns are the changes published to watchers and the callers answered. If anything fails
//! (SQLite error, a panicking closure, the commit itself) the transaction is rolled back and
//! every job of the batch gets the error.

use std::panic::{self, AssertUnwindSafe};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::thread;

use rusqlite::Connection;
use tokio::sync::mpsc;

use crate::cache::{CacheUpdate, ObjectCache};
use crate::checkpoint::Checkpointer;
use crate::db::{self, Meta};
use crate::error::StoreError;
use crate::object::{Applied, Mutation, NewObject, ObjKey, StoredObject};
use crate::outbox;
use crate::store::Shared;
use crate::watch::{Change, EventKind};

/// Change-log rows deleted per compaction step (one step per batch at most).
const COMPACT_STEP: u64 = 4096;

/// What a probe writes: about a batch of small objects.
const PROBE_BYTES: i64 = 64 * 1024;

/// Answers a job's caller once the batch outcome is known.
pub(crate) type Finish = Box<dyn FnOnce(Result<(), &StoreError>) + Send>;

/// A unit of work for the writer.
pub(crate) struct Job {
    /// Roughly how many mutations the job holds; batches are capped by the sum.
    pub(crate) weight: usize,
    /// Runs inside the batch transaction and returns how to answer the caller.
    pub(crate) run: Box<dyn FnOnce(&mut Batch<'_>) -> Finish + Send>,
}

/// The open group-commit transaction, as jobs see it.
pub(crate) struct Batch<'c> {
    conn: &'c Connection,
    cache: &'c ObjectCache,
    meta: Meta,
    changes: Vec<Arc<Change>>,
    cache_updates: Vec<CacheUpdate>,
    failure: Option<StoreError>,
    /// Whether the batch wrote anything (an object, an outbox row, a probe): only a commit
    /// that wrote shows that writes work again.
    wrote: bool,
}

pub(crate) struct Committer {
    conn: Connection,
    checkpointer: Checkpointer,
    rx: mpsc::Receiver<Job>,
    shared: Arc<Shared>,
    meta: Meta,
    max_batch: usize,
    retention: u64,
}

/// An object row loaded inside the transaction.
struct Current {
    id: i64,
    object: Arc<StoredObject>,
}

// === impl Batch ===

impl<'c> Batch<'c> {
    fn new(conn: &'c Connection, cache: &'c ObjectCache, meta: Meta) -> Self {
        Self {
            conn,
            cache,
            meta,
            changes: Vec::new(),
            cache_updates: Vec::new(),
            failure: None,
            wrote: false,
        }
    }

    /// Runs one read-modify-write. `None` when the batch has failed (now or earlier).
    pub(crate) fn mutate<T, E, F>(&mut self, key: ObjKey, f: F) -> Option<Result<Applied<T>, E>>
    where
        F: FnOnce(Option<&StoredObject>, u64) -> Result<(Mutation, T), E>,
    {
        if self.failure.is_some() {
            return None;
        }
        match self.try_mutate(key, f) {
            Ok(result) => Some(result),
            Err(e) => {
                self.failure = Some(e);
                None
            }
        }
    }

    /// Enqueues an outbox payload; returns its id. `None` when the batch has failed.
    pub(crate) fn outbox_put(&mut self, key: &str, payload: &[u8]) -> Option<u64> {
        let seq = self.meta.outbox_seq + 1;
        self.guard(|conn| outbox::put(conn, seq, key, payload))?;
        self.meta.outbox_seq = seq;
        self.wrote = true;
        Some(seq)
    }

    /// Takes [`PROBE_BYTES`] of new pages and gives them back in the same transaction: the
    /// commit writes them, so it needs room in the file and on the disk, and changes nothing.
    pub(crate) fn probe(&mut self) {
        let probed = self.guard(|conn| {
            conn.prepare_cached("INSERT INTO meta (name, value) VALUES ('probe', zeroblob(?1))")?
                .execute([PROBE_BYTES])?;
            conn.prepare_cached("DELETE FROM meta WHERE name = 'probe'")?
                .execute([])
        });
        self.wrote |= probed.is_some();
    }

    /// Removes acknowledged outbox entries. `None` when the batch has failed.
    pub(crate) fn outbox_ack(&mut self, ids: &[u64]) -> Option<usize> {
        let removed = self.guard(|conn| outbox::ack(conn, ids))?;
        self.wrote |= removed > 0;
        Some(removed)
    }

    /// Runs `f` on the write connection inside the batch (tests set pragmas with it).
    #[cfg(any(test, feature = "test-util"))]
    pub(crate) fn with_conn<R>(
        &mut self,
        f: impl FnOnce(&Connection) -> rusqlite::Result<R>,
    ) -> Option<R> {
        self.guard(f)
    }

    fn guard<R>(&mut self, f: impl FnOnce(&Connection) -> rusqlite::Result<R>) -> Option<R> {
        if self.failure.is_some() {
            return None;
        }
        match f(self.conn) {
            Ok(r) => Some(r),
            Err(e) => {
                self.failure = Some(write_error(e));
                None
            }
        }
    }

    fn try_mutate<T, E, F>(
        &mut self,
        key: ObjKey,
        f: F,
    ) -> Result<Result<Applied<T>, E>, StoreError>
    where
        F: FnOnce(Option<&StoredObject>, u64) -> Result<(Mutation, T), E>,
    {
        let current = load(self.conn, self.cache, &key).map_err(write_error)?;
        let revision = self.meta.revision + 1;
        let decided = panic::catch_unwind(AssertUnwindSafe(|| {
            f(current.as_ref().map(|c| &*c.object), revision)
        }));
        let (mutation, output) = match decided {
            Err(_) => return Err(StoreError::MutatorPanicked),
            Ok(Err(e)) => return Ok(Err(e)),
            Ok(Ok(decided)) => decided,
        };
        let (object, changed) = match (mutation, current) {
            (Mutation::Keep, current) => (current.map(|c| c.object), None),
            (Mutation::Delete, None) => (None, None),
            (Mutation::Delete, Some(current)) => {
                self.delete(current).map_err(write_error)?;
                self.wrote = true;
                (None, Some(revision))
            }
            (Mutation::Put(new), current) => {
                let object = self.put(key, current, new).map_err(write_error)?;
                self.wrote = true;
                (Some(object), Some(revision))
            }
        };
        Ok(Ok(Applied {
            object,
            revision: changed,
            output,
        }))
    }

    fn put(
        &mut self,
        key: ObjKey,
        current: Option<Current>,
        new: NewObject,
    ) -> rusqlite::Result<Arc<StoredObject>> {
        self.meta.revision += 1;
        let object = StoredObject {
            key,
            uid: new.uid,
            resource_version: new.resource_version,
            revision: self.meta.revision,
            labels: new.labels,
            fields: new.fields,
            value: new.value,
        };
        let id = upsert_row(self.conn, current.as_ref().map(|c| c.id), &object)?;
        let prev = current.map(|c| c.object);
        if prev.as_ref().map(|p| &p.fields) != Some(&object.fields) {
            if let Some(prev) = &prev {
                unindex(self.conn, prev)?;
            }
            index(self.conn, id, &object)?;
        }
        let object = Arc::new(object);
        let change = match prev {
            None => change(EventKind::Added, &object, None, None),
            Some(prev) => {
                let labels = (prev.labels != object.labels).then(|| prev.labels.clone());
                let fields = (prev.fields != object.fields).then(|| prev.fields.clone());
                change(EventKind::Modified, &object, labels, fields)
            }
        };
        self.log(change)?;
        self.cache_updates
            .push(CacheUpdate::Set(id, object.clone()));
        Ok(object)
    }

    fn delete(&mut self, current: Current) -> rusqlite::Result<()> {
        self.meta.revision += 1;
        self.conn
            .prepare_cached("DELETE FROM objects WHERE id = ?1")?
            .execute([current.id])?;
        unindex(self.conn, &current.object)?;
        let last = Arc::new(StoredObject {
            revision: self.meta.revision,
            ..StoredObject::clone(&current.object)
        });
        self.log(change(EventKind::Deleted, &last, None, None))?;
        self.cache_updates.push(CacheUpdate::Remove(current.id));
        Ok(())
    }

    /// Appends a change-log row and queues the change for watchers.
    fn log(&mut self, change: Change) -> rusqlite::Result<()> {
        let o = &change.object;
        let prev_labels = change.prev_labels.as_ref().map(db::encode_map);
        let prev_fields = change.prev_fields.as_ref().map(db::encode_map);
        self.conn
            .prepare_cached(
                "INSERT INTO changes (revision, kind, resource, namespace, name, uid, rv, labels, \
                 fields, prev_labels, prev_fields, value) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
            )?
            .execute(rusqlite::params![
                change.revision as i64,
                change.kind.code(),
                o.key.resource,
                o.key.namespace,
                o.key.name,
                o.uid,
                o.resource_version,
                db::encode_map(&o.labels),
                db::encode_map(&o.fields),
                prev_labels,
                prev_fields,
                &o.value[..],
            ])?;
        self.changes.push(Arc::new(change));
        Ok(())
    }
}

// === impl Committer ===

impl Committer {
    pub(crate) fn spawn(
        conn: Connection,
        meta: Meta,
        rx: mpsc::Receiver<Job>,
        shared: Arc<Shared>,
        path: std::path::PathBuf,
        config: &crate::StoreConfig,
    ) -> std::io::Result<thread::JoinHandle<()>> {
        let checkpointer = Checkpointer::start(path, config);
        let writer = Self {
            conn,
            checkpointer,
            rx,
            shared,
            meta,
            max_batch: config.max_batch.max(1),
            retention: config.retention,
        };
        thread::Builder::new()
            .name("objstore-writer".into())
            .spawn(move || writer.run())
    }

    fn run(mut self) {
        while let Some(first) = self.rx.blocking_recv() {
            let jobs = self.drain(first);
            self.run_batch(jobs);
        }
        // No change can come any more: end the watchers (readers may outlive the writer).
        self.shared.hub.close();
        tracing::debug!("objstore writer stopped");
    }

    /// Takes whatever is queued right now, up to `max_batch` mutations.
    fn drain(&mut self, first: Job) -> Vec<Job> {
        let mut weight = first.weight;
        let mut jobs = vec![first];
        while weight < self.max_batch {
            match self.rx.try_recv() {
                Ok(job) => {
                    weight += job.weight;
                    jobs.push(job);
                }
                Err(_) => break,
            }
        }
        jobs
    }

    fn run_batch(&mut self, jobs: Vec<Job>) {
        let job_count = jobs.len() as u64;
        let mut batch = Batch::new(&self.conn, &self.shared.cache, self.meta);
        if let Err(e) = self.conn.execute_batch("BEGIN IMMEDIATE") {
            batch.failure = Some(write_error(e));
        }
        let finishers: Vec<Finish> = jobs.into_iter().map(|job| (job.run)(&mut batch)).collect();
        let Batch {
            meta,
            changes,
            cache_updates,
            failure,
            wrote,
            ..
        } = batch;
        let outcome = match failure {
            Some(e) => Err(e),
            None => self.commit(meta),
        };
        match &outcome {
            Ok(meta) => self.committed(*meta, &changes, cache_updates, job_count, wrote),
            Err(e) => self.rollback(e),
        }
        let result = outcome.as_ref().map(|_| ());
        for finish in finishers {
            finish(result);
        }
    }

    /// Persists the counters, compacts a step if due, and commits.
    fn commit(&self, mut meta: Meta) -> Result<Meta, StoreError> {
        let conn = &self.conn;
        if meta.revision != self.meta.revision {
            db::write_meta(conn, "revision", meta.revision).map_err(write_error)?;
        }
        if meta.outbox_seq != self.meta.outbox_seq {
            db::write_meta(conn, "outbox_seq", meta.outbox_seq).map_err(write_error)?;
        }
        if let Some(upto) = compaction_target(&meta, self.retention) {
            compact(conn, upto).map_err(write_error)?;
            meta.compacted = upto;
        }
        conn.execute_batch("COMMIT").map_err(write_error)?;
        Ok(meta)
    }

    fn committed(
        &mut self,
        meta: Meta,
        changes: &[Arc<Change>],
        cache_updates: Vec<CacheUpdate>,
        jobs: u64,
        wrote: bool,
    ) {
        self.meta = meta;
        self.checkpointer.poke();
        let shared = &self.shared;
        // A batch that wrote nothing (reads, `Keep`s) commits even on a full disk: it does not
        // show that writes work again.
        if wrote {
            set_write_failure(shared, None);
        }
        shared.cache.apply(cache_updates);
        shared.compacted.store(meta.compacted, Ordering::Release);
        shared.hub.publish(changes, meta.revision, || {
            shared.revision.store(meta.revision, Ordering::Release);
        });
        shared.stats.commits.fetch_add(1, Ordering::Relaxed);
        shared.stats.jobs.fetch_add(jobs, Ordering::Relaxed);
        shared
            .stats
            .changes
            .fetch_add(changes.len() as u64, Ordering::Relaxed);
    }

    fn rollback(&self, failure: &StoreError) {
        if !self.conn.is_autocommit()
            && let Err(e) = self.conn.execute_batch("ROLLBACK")
        {
            tracing::warn!(error = %e, "rolling back a failed objstore batch");
        }
        if let StoreError::StoreWrite(e) = failure {
            set_write_failure(&self.shared, Some(e.clone()));
        }
        self.shared
            .stats
            .failed_batches
            .fetch_add(1, Ordering::Relaxed);
    }
}

/// Records why writes fail (`None`: they succeed again).
fn set_write_failure(shared: &Shared, failure: Option<Arc<rusqlite::Error>>) {
    shared.write_failure.send_if_modified(|held| {
        let flipped = held.is_some() != failure.is_some();
        *held = failure;
        flipped
    });
}

/// The revision to compact up to, when the log has grown past `retention` plus some slack.
fn compaction_target(meta: &Meta, retention: u64) -> Option<u64> {
    let slack = (retention / 64).clamp(1, 1024);
    let floor = meta.revision.checked_sub(retention)?;
    (floor >= meta.compacted + slack).then(|| floor.min(meta.compacted + COMPACT_STEP))
}

fn compact(conn: &Connection, upto: u64) -> rusqlite::Result<()> {
    conn.prepare_cached("DELETE FROM changes WHERE revision <= ?1")?
        .execute([upto as i64])?;
    db::write_meta(conn, "compacted", upto)
}

fn change(
    kind: EventKind,
    object: &Arc<StoredObject>,
    prev_labels: Option<std::collections::BTreeMap<String, String>>,
    prev_fields: Option<std::collections::BTreeMap<String, String>>,
) -> Change {
    Change {
        revision: object.revision,
        kind,
        object: object.clone(),
        prev_labels,
        prev_fields,
    }
}

fn load(conn: &Connection, cache: &ObjectCache, key: &ObjKey) -> rusqlite::Result<Option<Current>> {
    let Some((id, revision)) = crate::read::locate(conn, key)? else {
        return Ok(None);
    };
    let object = match cache.get(id, revision) {
        Some(object) => object,
        None => Arc::new(crate::read::object_by_id(conn, id)?),
    };
    Ok(Some(Current { id, object }))
}

/// Writes the object row; returns its row id.
fn upsert_row(conn: &Connection, id: Option<i64>, o: &StoredObject) -> rusqlite::Result<i64> {
    let labels = db::encode_map(&o.labels);
    let fields = db::encode_map(&o.fields);
    let Some(id) = id else {
        conn.prepare_cached(
            "INSERT INTO objects (resource, namespace, name, uid, rv, revision, labels, fields, value) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
        )?
        .execute(rusqlite::params![
            o.key.resource,
            o.key.namespace,
            o.key.name,
            o.uid,
            o.resource_version,
            o.revision as i64,
            labels,
            fields,
            &o.value[..],
        ])?;
        return Ok(conn.last_insert_rowid());
    };
    conn.prepare_cached(
        "UPDATE objects SET uid = ?2, rv = ?3, revision = ?4, labels = ?5, fields = ?6, value = ?7 \
         WHERE id = ?1",
    )?
    .execute(rusqlite::params![
        id,
        o.uid,
        o.resource_version,
        o.revision as i64,
        labels,
        fields,
        &o.value[..],
    ])?;
    Ok(id)
}

fn index(conn: &Connection, id: i64, o: &StoredObject) -> rusqlite::Result<()> {
    let mut stmt = conn.prepare_cached(
        "INSERT OR REPLACE INTO field_index (resource, field, value, namespace, name, id) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    )?;
    for (field, value) in &o.fields {
        stmt.execute(rusqlite::params![
            o.key.resource,
            field,
            value,
            o.key.namespace,
            o.key.name,
            id
        ])?;
    }
    Ok(())
}

fn unindex(conn: &Connection, o: &StoredObject) -> rusqlite::Result<()> {
    let mut stmt = conn.prepare_cached(
        "DELETE FROM field_index \
         WHERE resource = ?1 AND field = ?2 AND value = ?3 AND namespace = ?4 AND name = ?5",
    )?;
    for (field, value) in &o.fields {
        stmt.execute(rusqlite::params![
            o.key.resource,
            field,
            value,
            o.key.namespace,
            o.key.name
        ])?;
    }
    Ok(())
}

fn write_error(e: rusqlite::Error) -> StoreError {
    StoreError::StoreWrite(Arc::new(e))
}

#[cfg(test)]
mod tests;
