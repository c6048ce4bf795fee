//! A background checkpointer, so copying WAL pages into the database file (and its fsync)
//! mostly happens off the writer's commit path.
//!
//! The writer pokes it after each commit; it runs a `PASSIVE` checkpoint on its own connection,
//! then waits at least [`PACE`] before the next one (pages rewritten in between are copied once).
//! The writer keeps a large `wal_autocheckpoint` as a backstop: it fires rarely, finds most
//! frames already copied, and lets SQLite restart the WAL from the beginning.

use std::path::PathBuf;
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::thread;
use std::time::{Duration, Instant};

use rusqlite::Connection;

use crate::config::StoreConfig;
use crate::db;

/// Minimum time between two background checkpoints.
const PACE: Duration = Duration::from_millis(100);

/// The writer's side: pokes the checkpointer; dropping it stops the thread.
pub(crate) struct Checkpointer {
    poke: Option<SyncSender<()>>,
    thread: Option<thread::JoinHandle<()>>,
}

// === impl Checkpointer ===

impl Checkpointer {
    /// Starts the thread; without one (spawn or open failure) the writer's autocheckpoint does
    /// all the work, which is slower but correct.
    pub(crate) fn start(path: PathBuf, config: &StoreConfig) -> Self {
        let conn = match db::open_checkpointer(&path, config) {
            Ok(conn) => conn,
            Err(e) => {
                tracing::warn!(error = %e, "objstore background checkpointer not started");
                return Self::none();
            }
        };
        let (poke, pokes) = std::sync::mpsc::sync_channel(1);
        let spawned = thread::Builder::new()
            .name("objstore-ckpt".into())
            .spawn(move || run(conn, pokes));
        match spawned {
            Ok(handle) => Self {
                poke: Some(poke),
                thread: Some(handle),
            },
            Err(e) => {
                tracing::warn!(error = %e, "objstore background checkpointer not started");
                Self::none()
            }
        }
    }

    fn none() -> Self {
        Self {
            poke: None,
            thread: None,
        }
    }

    /// Tells the checkpointer there are new WAL frames; never blocks.
    pub(crate) fn poke(&self) {
        if let Some(poke) = &self.poke {
            match poke.try_send(()) {
                Ok(()) | Err(TrySendError::Full(())) | Err(TrySendError::Disconnected(())) => {}
            }
        }
    }
}

impl Drop for Checkpointer {
    fn drop(&mut self) {
        drop(self.poke.take());
        if let Some(handle) = self.thread.take()
            && handle.join().is_err()
        {
            tracing::error!("objstore checkpointer thread panicked");
        }
    }
}

fn run(conn: Connection, pokes: Receiver<()>) {
    while pokes.recv().is_ok() {
        if let Err(e) = conn.execute_batch("PRAGMA wal_checkpoint(PASSIVE);") {
            tracing::warn!(error = %e, "objstore background checkpoint failed");
        }
        let next = Instant::now() + PACE;
        loop {
            let left = next.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            match pokes.recv_timeout(left) {
                Err(RecvTimeoutError::Disconnected) => return,
                Ok(()) | Err(RecvTimeoutError::Timeout) => {}
            }
        }
    }
}
