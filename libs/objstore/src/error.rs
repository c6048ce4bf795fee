//! The one error type of the store.

use std::path::PathBuf;
use std::sync::Arc;

/// Everything that can go wrong in the object store.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The database file could not be opened or configured (permissions, missing directory, ...).
    #[error("opening object store {}", path.display())]
    Open {
        path: PathBuf,
        #[source]
        source: rusqlite::Error,
    },

    /// The file at `path` is not a usable SQLite database (garbage, truncated, failed integrity check).
    #[error("object store {} is corrupt: {detail}", path.display())]
    Corrupt { path: PathBuf, detail: String },

    /// A corrupt file could not be moved aside while rebuilding.
    #[error("moving corrupt object store {} aside", path.display())]
    MoveAside {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    /// The file was written by a newer schema version than this build understands.
    #[error("object store {} has schema version {found}, this build supports up to {supported}", path.display())]
    Incompatible {
        path: PathBuf,
        found: i64,
        supported: i64,
    },

    /// A write transaction failed; every job of the batch was failed with it and nothing was committed.
    #[error("object store write failed")]
    StoreWrite(#[source] Arc<rusqlite::Error>),

    /// A read query failed.
    #[error("object store read failed")]
    StoreRead(#[source] rusqlite::Error),

    /// A mutate closure panicked; the whole batch it was part of was rolled back.
    #[error("a mutate closure panicked; the batch was rolled back")]
    MutatorPanicked,

    /// The requested revision is older than the oldest change still in the log.
    #[error("too old resource version: {requested} ({compacted})")]
    Expired { requested: u64, compacted: u64 },

    /// The watcher's buffer filled up and it was ended so the writer never waits on it; re-watch from `last_revision`.
    #[error("watcher fell behind (buffer of {buffer} events full after revision {last_revision})")]
    WatcherLagged { buffer: usize, last_revision: u64 },

    /// The writer thread could not be started.
    #[error("starting the object store writer thread")]
    Spawn(#[source] std::io::Error),

    /// The store was shut down (writer thread gone, or the runtime is shutting down).
    #[error("object store is closed")]
    Closed,
}

// === impl StoreError ===

impl StoreError {
    /// True when a watch client should relist: the revision is compacted or the watcher lagged
    /// (a REST layer maps both to `410 Expired`).
    pub fn is_expired(&self) -> bool {
        matches!(self, Self::Expired { .. } | Self::WatcherLagged { .. })
    }

    /// A copy of a batch-level error for each job of the failed batch.
    pub(crate) fn replicate(&self) -> Self {
        match self {
            Self::StoreWrite(e) => Self::StoreWrite(e.clone()),
            Self::MutatorPanicked => Self::MutatorPanicked,
            _ => Self::Closed,
        }
    }
}
