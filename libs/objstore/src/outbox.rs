//! The upstream outbox: a keyed, coalescing queue in the same database as the objects.
//!
//! Ordering and coalescing rules:
//! - entries are handed out oldest *first enqueue* first: the position of a key is fixed when it
//!   is first enqueued and kept while the key stays in the outbox;
//! - a put with a key that is still queued replaces the payload (latest status wins) and gives
//!   the entry a new id, so an ack for the id of the replaced payload removes nothing and the
//!   newer payload is still sent;
//! - ids are never reused (the counter is persisted), so a late duplicate ack is harmless.

use bytes::Bytes;
use rusqlite::{Connection, OptionalExtension};

/// One queued upstream message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutboxEntry {
    /// Identifies this payload version; pass it to `outbox_ack` once the peer accepted it.
    pub id: u64,
    /// The coalescing key (e.g. `pods/status/ns/name`).
    pub key: String,
    pub payload: Bytes,
}

/// An outbox entry to queue together with an object change
/// ([`Writer::mutate_and_queue`](crate::Writer::mutate_and_queue)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Enqueue {
    /// The coalescing key.
    pub key: String,
    pub payload: Bytes,
}

/// Enqueues or replaces `key` with id `seq`, inside the writer's transaction.
pub(crate) fn put(conn: &Connection, seq: u64, key: &str, payload: &[u8]) -> rusqlite::Result<()> {
    let existing: Option<i64> = conn
        .prepare_cached("SELECT seq FROM outbox WHERE key = ?1")?
        .query_row([key], |row| row.get(0))
        .optional()?;
    match existing {
        Some(old) => {
            conn.prepare_cached("UPDATE outbox SET seq = ?1, payload = ?2 WHERE seq = ?3")?
                .execute(rusqlite::params![seq as i64, payload, old])?;
        }
        None => {
            conn.prepare_cached(
                "INSERT INTO outbox (seq, key, pos, payload) VALUES (?1, ?2, ?1, ?3)",
            )?
            .execute(rusqlite::params![seq as i64, key, payload])?;
        }
    }
    Ok(())
}

/// Removes the entries with these ids; returns how many were removed.
pub(crate) fn ack(conn: &Connection, ids: &[u64]) -> rusqlite::Result<usize> {
    let mut stmt = conn.prepare_cached("DELETE FROM outbox WHERE seq = ?1")?;
    let mut removed = 0;
    for id in ids {
        removed += stmt.execute([*id as i64])?;
    }
    Ok(removed)
}
