//! objstore: the SQLite object store shared by the edge store (metamanager) and the embedded
//! Kubernetes API server. The writer hands it read-modify-write closures; readers list, get and
//! watch; the upstream outbox edgehub drains lives in the same file.
//!
//! # Design
//!
//! **One file, one writer.** A [`Writer`] owns one SQLite database in WAL mode
//! (`synchronous=FULL` by default, see [`StoreConfig`]). A dedicated std thread owns the only
//! write connection; every write is a job sent to it over a bounded channel.
//!
//! **One writer, many readers** (as kube-runtime's reflector splits `Writer` and `Store`). The
//! [`Writer`] is not `Clone`: whoever opens the file owns its writes (metamanager at the edge,
//! the API server's backend in the cloud) and hands out [`Store`]s, cheap clonable read handles
//! with no write method, so code that was only given a [`Store`] cannot change the file.
//! Dropping the [`Writer`] stops the writer thread; readers go on reading and their watchers end.
//!
//! ```compile_fail
//! // A reader has no way to write.
//! async fn write(reader: objstore::Store, key: objstore::ObjKey, obj: objstore::NewObject) {
//!     reader.put(key, obj).await;
//! }
//! ```
//!
//! ```compile_fail
//! // Nor can the writer be copied to give someone else write access.
//! fn share(writer: &objstore::Writer) -> objstore::Writer {
//!     writer.clone()
//! }
//! ```
//!
//! **Group commit.** The writer takes every job already queued (up to
//! [`StoreConfig::max_batch`] mutations), runs them in order inside one `BEGIN IMMEDIATE`
//! transaction, commits once (one fsync for the whole batch), publishes the changes to
//! watchers, and only then answers each caller. If anything fails (SQLite error, a panicking
//! closure, the commit) the transaction rolls back and every caller of the batch gets the
//! error: an `Ok` always means "on disk". [`Stats::commits`] counts transactions.
//!
//! **Read-modify-write.** [`Writer::mutate`] runs a closure on the writer thread with the
//! object's current state, which includes writes made earlier in the same batch, and the
//! revision a change would get. The closure returns a [`Mutation`] (`Put`, `Delete`, `Keep`)
//! plus a value for the caller, so preconditions (optimistic concurrency, "never overwrite a
//! newer version", uid-checked deletes) are evaluated atomically. [`Writer::mutate_many`] runs
//! many in one transaction; [`Writer::put`] and [`Writer::delete`] are the unconditional forms.
//!
//! **Revisions.** One global counter, persisted in the same transaction as the change: every
//! `Put` and every effective `Delete` takes the next value; `Keep` takes none. It survives
//! restarts and is never reused, not even after deletes and compaction. The resourceVersion
//! stored with an object is whatever the writer gave (opaque); the apiserver can use the
//! revision handed to its closure, the edge keeps the cloud's.
//!
//! **Change log.** Each change also appends a row (revision, key, ADDED/MODIFIED/DELETED, the
//! object, for deletions its last state, and the previous labels/fields when they changed) in
//! the same transaction. The writer compacts rows older than [`StoreConfig::retention`]
//! revisions, a bounded step per batch; [`Store::compacted_revision`] is the floor.
//!
//! **Reads.** [`Store::get`], [`Store::list`] and [`Store::inventory`] run on a small pool of
//! WAL reader connections in `spawn_blocking`, so they never wait for the writer. A list reads
//! its items and the revision in one read transaction. Every entry of an object's `fields` map
//! is indexed (`spec.nodeName`, `status.phase`, ...); label and predicate filters run in Rust.
//! Decoded objects are kept in a bounded cache keyed by row id and checked by revision (a
//! revision names exactly one state, so the cache can miss but never lie): lists and gets hand
//! out shared `Arc<StoredObject>`s, and the writer hands its closures the cached state.
//!
//! **Checkpoints.** A background thread copies WAL pages into the database file (`PASSIVE`
//! checkpoints, at most every 100 ms), so the commit path mostly pays only the WAL fsync; the
//! writer's own `wal_autocheckpoint` is a rare backstop that lets the WAL restart.
//!
//! **Watch.** [`Store::watch`] replays the change log after `from_revision` and then switches
//! to live events without gap or duplicate (see [`watch`]). A revision below the compaction
//! floor fails with [`StoreError::Expired`]. Each watcher has a bounded buffer; the writer
//! only ever `try_send`s, and a watcher whose buffer is full is ended with
//! [`StoreError::WatcherLagged`] instead of slowing anything down. Filters follow Kubernetes:
//! an object that starts matching arrives as ADDED, one that stops matching as DELETED.
//!
//! **Inventory digest.** [`digest`] is the link protocol's order-independent hash of `(key,
//! resourceVersion)` pairs (`wire::digest`, one implementation) over the store's keys, so the
//! cloud computes the same value from its own data.
//!
//! **Closures and predicates run on the writer thread** (mutate closures, and watch predicates
//! when live events are fanned out): keep them short, and never call back into the store from
//! them.
//!
//! **Outbox.** [`Writer::outbox_put`] / [`Store::outbox_peek`] / [`Writer::outbox_ack`] keep the
//! upstream queue in the same database, written through the same group commit, coalesced by
//! key (see [`outbox`]). [`Writer::mutate_and_queue`] writes an object change and its outbox
//! entry in one transaction.
//!
//! **Bad files.** A garbage or truncated file fails with [`StoreError::Corrupt`] naming the
//! path, or, with [`OnCorrupt::Rebuild`], is moved aside to `<path>.corrupt-<unix-ts>` and
//! replaced by an empty store (logged as a warning; nothing is deleted).

#![forbid(unsafe_code)]

mod cache;
mod checkpoint;
mod config;
mod db;
pub mod digest;
mod error;
mod filter;
mod object;
pub mod outbox;
mod read;
mod store;
pub mod watch;
mod writer;

pub use config::{OnCorrupt, StoreConfig, Synchronous};
pub use digest::Digest;
pub use error::StoreError;
pub use filter::{Filter, InventoryFilter, ListOptions, ListResult, Predicate};
pub use object::{Applied, Mutation, NewObject, ObjKey, StoredObject};
pub use outbox::{Enqueue, OutboxEntry};
pub use store::{ManyResults, Stats, Store, Writer};
pub use watch::{EventKind, WatchEvent, WatchOptions, Watcher};
