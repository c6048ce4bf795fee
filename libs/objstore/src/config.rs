//! Store configuration.

use std::time::Duration;

/// How the store is opened and how its writer batches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreConfig {
    /// SQLite `synchronous` mode. Default [`Synchronous::Full`]: an acknowledged write survives
    /// power loss, not only a process crash.
    pub synchronous: Synchronous,
    /// How long a connection waits for a lock held by another connection. Default 5 s.
    pub busy_timeout: Duration,
    /// Most mutations one group-commit transaction takes. Default 1024.
    pub max_batch: usize,
    /// Write jobs that may wait for the writer before `mutate` callers wait for room. Default 8192.
    pub queue_capacity: usize,
    /// Read connections in the pool. Default 4.
    pub readers: usize,
    /// Change-log revisions kept for watch replay; older rows are compacted by the writer.
    /// Default 100 000.
    pub retention: u64,
    /// What to do when the file is not a usable database. Default [`OnCorrupt::Fail`].
    pub on_corrupt: OnCorrupt,
    /// Most decoded objects kept in memory and shared by lists and gets (0 disables the
    /// cache). Default 65 536.
    pub cache_objects: usize,
    /// Run `PRAGMA quick_check` when opening, so a truncated file is caught at start instead of
    /// at the first unlucky read. Default true.
    pub verify_on_open: bool,
}

/// SQLite `synchronous` setting for the write connection (WAL mode).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Synchronous {
    /// fsync the WAL on every commit: acknowledged writes survive power loss.
    #[default]
    Full,
    /// fsync only at checkpoints: acknowledged writes survive a process crash, but the last
    /// commits may be lost on power loss.
    Normal,
}

/// What `Writer::open` does with a file that is not a usable database.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnCorrupt {
    /// Return [`StoreError::Corrupt`](crate::StoreError::Corrupt) naming the path.
    #[default]
    Fail,
    /// Rename the file (and its `-wal`/`-shm`) to `<path>.corrupt-<unix-seconds>[-wal|-shm]`,
    /// log a warning and start with an empty store. Nothing is ever deleted.
    Rebuild,
}

// === impl StoreConfig ===

impl Default for StoreConfig {
    fn default() -> Self {
        Self {
            synchronous: Synchronous::Full,
            busy_timeout: Duration::from_secs(5),
            max_batch: 1024,
            queue_capacity: 8192,
            readers: 4,
            retention: 100_000,
            on_corrupt: OnCorrupt::Fail,
            cache_objects: 65_536,
            verify_on_open: true,
        }
    }
}

// === impl Synchronous ===

impl Synchronous {
    pub(crate) fn pragma(self) -> &'static str {
        match self {
            Self::Full => "FULL",
            Self::Normal => "NORMAL",
        }
    }
}
