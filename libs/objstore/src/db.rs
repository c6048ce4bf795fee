//! SQLite plumbing: opening (with corruption handling), schema, and row codecs.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use rusqlite::{Connection, ErrorCode, OpenFlags, OptionalExtension, Row};

use crate::config::{OnCorrupt, StoreConfig};
use crate::error::StoreError;
use crate::object::{ObjKey, StoredObject};

/// Schema version kept in `PRAGMA user_version`.
const SCHEMA_VERSION: i64 = 1;

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS meta (
    name  TEXT PRIMARY KEY,
    value INTEGER NOT NULL
) WITHOUT ROWID;
INSERT OR IGNORE INTO meta (name, value) VALUES ('revision', 0), ('compacted', 0), ('outbox_seq', 0);

CREATE TABLE IF NOT EXISTS objects (
    id        INTEGER PRIMARY KEY,
    resource  TEXT NOT NULL,
    namespace TEXT NOT NULL,
    name      TEXT NOT NULL,
    uid       TEXT NOT NULL,
    rv        TEXT NOT NULL,
    revision  INTEGER NOT NULL,
    labels    TEXT NOT NULL,
    fields    TEXT NOT NULL,
    value     BLOB NOT NULL,
    UNIQUE (resource, namespace, name)
);

CREATE TABLE IF NOT EXISTS field_index (
    resource  TEXT NOT NULL,
    field     TEXT NOT NULL,
    value     TEXT NOT NULL,
    namespace TEXT NOT NULL,
    name      TEXT NOT NULL,
    id        INTEGER NOT NULL,
    PRIMARY KEY (resource, field, value, namespace, name)
) WITHOUT ROWID;

CREATE TABLE IF NOT EXISTS changes (
    revision    INTEGER PRIMARY KEY,
    kind        INTEGER NOT NULL,
    resource    TEXT NOT NULL,
    namespace   TEXT NOT NULL,
    name        TEXT NOT NULL,
    uid         TEXT NOT NULL,
    rv          TEXT NOT NULL,
    labels      TEXT NOT NULL,
    fields      TEXT NOT NULL,
    prev_labels TEXT,
    prev_fields TEXT,
    value       BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS changes_by_resource ON changes (resource, revision);

CREATE TABLE IF NOT EXISTS outbox (
    seq     INTEGER PRIMARY KEY,
    key     TEXT NOT NULL UNIQUE,
    pos     INTEGER NOT NULL,
    payload BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS outbox_by_pos ON outbox (pos);
";

/// The columns `read_object` expects, in order.
pub(crate) const OBJECT_COLUMNS: &str =
    "resource, namespace, name, uid, rv, revision, labels, fields, value";

/// Counters persisted in the `meta` table.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Meta {
    pub(crate) revision: u64,
    pub(crate) compacted: u64,
    pub(crate) outbox_seq: u64,
}

/// Opens the write connection, creating the schema; applies `on_corrupt` when the file is bad.
pub(crate) fn open_writer(
    path: &Path,
    cfg: &StoreConfig,
) -> Result<(Connection, Meta), StoreError> {
    match try_open_writer(path, cfg) {
        Err(StoreError::Corrupt { detail, .. }) if cfg.on_corrupt == OnCorrupt::Rebuild => {
            let moved = move_aside(path)?;
            tracing::warn!(
                path = %path.display(),
                moved_to = %moved.display(),
                detail = %detail,
                "object store file is corrupt; moved it aside and starting empty"
            );
            try_open_writer(path, cfg)
        }
        other => other,
    }
}

/// Opens a read connection to an existing store file.
pub(crate) fn open_reader(path: &Path, cfg: &StoreConfig) -> Result<Connection, StoreError> {
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = Connection::open_with_flags(path, flags).map_err(|e| open_error(path, e))?;
    conn.busy_timeout(cfg.busy_timeout)
        .and_then(|()| {
            conn.execute_batch(
                "PRAGMA query_only = 1; PRAGMA cache_size = -16384; PRAGMA mmap_size = 268435456;",
            )
        })
        .map_err(|e| open_error(path, e))?;
    conn.set_prepared_statement_cache_capacity(64);
    Ok(conn)
}

/// Opens the background checkpointer's connection.
pub(crate) fn open_checkpointer(path: &Path, cfg: &StoreConfig) -> Result<Connection, StoreError> {
    let conn = Connection::open(path).map_err(|e| open_error(path, e))?;
    let pragmas = format!("PRAGMA synchronous = {};", cfg.synchronous.pragma());
    conn.execute_batch(&pragmas)
        .map_err(|e| open_error(path, e))?;
    Ok(conn)
}

fn try_open_writer(path: &Path, cfg: &StoreConfig) -> Result<(Connection, Meta), StoreError> {
    check_header(path)?;
    let conn = Connection::open(path).map_err(|e| open_error(path, e))?;
    conn.busy_timeout(cfg.busy_timeout)
        .map_err(|e| open_error(path, e))?;
    let pragmas = format!(
        "PRAGMA journal_mode = WAL; PRAGMA synchronous = {}; PRAGMA temp_store = MEMORY; PRAGMA cache_size = -65536; PRAGMA wal_autocheckpoint = 8192; PRAGMA journal_size_limit = 67108864;",
        cfg.synchronous.pragma()
    );
    conn.execute_batch(&pragmas)
        .map_err(|e| open_error(path, e))?;
    if cfg.verify_on_open {
        quick_check(&conn, path)?;
    }
    check_version(&conn, path)?;
    conn.execute_batch(SCHEMA)
        .map_err(|e| open_error(path, e))?;
    conn.pragma_update(None, "user_version", SCHEMA_VERSION)
        .map_err(|e| open_error(path, e))?;
    conn.set_prepared_statement_cache_capacity(64);
    let meta = read_meta(&conn).map_err(|e| open_error(path, e))?;
    Ok((conn, meta))
}

/// Rejects a non-empty file that does not start with the SQLite header, before SQLite opens it
/// (SQLite could otherwise clean up a `-wal` next to it, and nothing may be deleted).
fn check_header(path: &Path) -> Result<(), StoreError> {
    const MAGIC: &[u8; 16] = b"SQLite format 3\0";
    let mut file = match std::fs::File::open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        // Let SQLite report the problem with its own error (permissions, a directory, ...).
        Err(_) => return Ok(()),
    };
    let mut header = Vec::with_capacity(MAGIC.len());
    let read = (&mut file)
        .take(MAGIC.len() as u64)
        .read_to_end(&mut header);
    match read {
        Ok(0) => Ok(()),
        Ok(_) if header == MAGIC => Ok(()),
        Ok(_) => Err(StoreError::Corrupt {
            path: path.to_owned(),
            detail: "not an SQLite database (bad file header)".to_owned(),
        }),
        Err(_) => Ok(()),
    }
}

fn quick_check(conn: &Connection, path: &Path) -> Result<(), StoreError> {
    let mut stmt = conn
        .prepare("PRAGMA quick_check")
        .map_err(|e| open_error(path, e))?;
    let problems: Vec<String> = stmt
        .query_map([], |row| row.get::<_, String>(0))
        .and_then(|rows| rows.collect())
        .map_err(|e| open_error(path, e))?;
    if problems.len() == 1 && problems[0] == "ok" {
        return Ok(());
    }
    Err(StoreError::Corrupt {
        path: path.to_owned(),
        detail: format!("quick_check: {}", problems.join("; ")),
    })
}

fn check_version(conn: &Connection, path: &Path) -> Result<(), StoreError> {
    let found: i64 = conn
        .pragma_query_value(None, "user_version", |row| row.get(0))
        .map_err(|e| open_error(path, e))?;
    if found > SCHEMA_VERSION {
        return Err(StoreError::Incompatible {
            path: path.to_owned(),
            found,
            supported: SCHEMA_VERSION,
        });
    }
    Ok(())
}

/// Maps an error met while opening: "not a database" and "malformed" become `Corrupt`.
fn open_error(path: &Path, e: rusqlite::Error) -> StoreError {
    match e.sqlite_error_code() {
        Some(ErrorCode::NotADatabase | ErrorCode::DatabaseCorrupt) => StoreError::Corrupt {
            path: path.to_owned(),
            detail: e.to_string(),
        },
        _ => StoreError::Open {
            path: path.to_owned(),
            source: e,
        },
    }
}

/// Renames `path` and its `-wal`/`-shm` companions to `<path>.corrupt-<unix-seconds>...`.
fn move_aside(path: &Path) -> Result<PathBuf, StoreError> {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let target = PathBuf::from(format!("{}.corrupt-{secs}", path.display()));
    for suffix in ["", "-wal", "-shm"] {
        let from = PathBuf::from(format!("{}{suffix}", path.display()));
        let to = PathBuf::from(format!("{}{suffix}", target.display()));
        match std::fs::rename(&from, &to) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && !suffix.is_empty() => {}
            Err(source) => return Err(StoreError::MoveAside { path: from, source }),
        }
    }
    Ok(target)
}

pub(crate) fn read_meta(conn: &Connection) -> rusqlite::Result<Meta> {
    let get = |name: &str| -> rusqlite::Result<u64> {
        let v: Option<i64> = conn
            .prepare_cached("SELECT value FROM meta WHERE name = ?1")?
            .query_row([name], |row| row.get(0))
            .optional()?;
        Ok(v.unwrap_or(0) as u64)
    };
    Ok(Meta {
        revision: get("revision")?,
        compacted: get("compacted")?,
        outbox_seq: get("outbox_seq")?,
    })
}

pub(crate) fn write_meta(conn: &Connection, name: &str, value: u64) -> rusqlite::Result<()> {
    conn.prepare_cached("UPDATE meta SET value = ?2 WHERE name = ?1")?
        .execute(rusqlite::params![name, value as i64])?;
    Ok(())
}

/// Decodes a row selected with [`OBJECT_COLUMNS`] starting at column `at`.
pub(crate) fn read_object(row: &Row<'_>, at: usize) -> rusqlite::Result<StoredObject> {
    let key = ObjKey {
        resource: row.get(at)?,
        namespace: row.get(at + 1)?,
        name: row.get(at + 2)?,
    };
    let labels = decode_map(row, at + 6)?;
    let fields = decode_map(row, at + 7)?;
    Ok(StoredObject {
        uid: row.get(at + 3)?,
        resource_version: row.get(at + 4)?,
        revision: row.get::<_, i64>(at + 5)? as u64,
        labels,
        fields,
        value: Bytes::from(row.get::<_, Vec<u8>>(at + 8)?),
        key,
    })
}

pub(crate) fn encode_map(map: &BTreeMap<String, String>) -> String {
    if map.is_empty() {
        return "{}".to_owned();
    }
    // A map of strings always serializes.
    serde_json::to_string(map).expect("string map serializes")
}

/// Decodes a JSON string map column; a NULL column is an error (use `decode_opt_map` there).
pub(crate) fn decode_map(row: &Row<'_>, idx: usize) -> rusqlite::Result<BTreeMap<String, String>> {
    let text = row.get_ref(idx)?.as_str()?;
    parse_map(text, idx)
}

/// Decodes a nullable JSON string map column.
pub(crate) fn decode_opt_map(
    row: &Row<'_>,
    idx: usize,
) -> rusqlite::Result<Option<BTreeMap<String, String>>> {
    match row.get_ref(idx)?.as_str_or_null()? {
        None => Ok(None),
        Some(text) => parse_map(text, idx).map(Some),
    }
}

fn parse_map(text: &str, idx: usize) -> rusqlite::Result<BTreeMap<String, String>> {
    if let Some(map) = parse_plain_map(text) {
        return Ok(map);
    }
    serde_json::from_str(text).map_err(|e| {
        rusqlite::Error::FromSqlConversionFailure(idx, rusqlite::types::Type::Text, Box::new(e))
    })
}

/// Fast path for the common case: a flat JSON object of strings without escapes. Returns
/// `None` for anything else (serde_json then decides).
fn parse_plain_map(text: &str) -> Option<BTreeMap<String, String>> {
    let mut rest = text.strip_prefix('{')?.strip_suffix('}')?;
    let mut map = BTreeMap::new();
    while !rest.is_empty() {
        let (key, after) = plain_string(rest)?;
        let (value, after) = plain_string(after.strip_prefix(':')?)?;
        map.insert(key.to_owned(), value.to_owned());
        rest = match after.strip_prefix(',') {
            Some("") => return None,
            Some(more) => more,
            None if after.is_empty() => after,
            None => return None,
        };
    }
    Some(map)
}

/// A leading `"..."` without escapes, and what follows it.
fn plain_string(text: &str) -> Option<(&str, &str)> {
    let body = text.strip_prefix('"')?;
    let end = body.find(['"', '\\'])?;
    if body.as_bytes()[end] != b'"' {
        return None;
    }
    Some((&body[..end], &body[end + 1..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(kv: &[(&str, &str)]) -> BTreeMap<String, String> {
        kv.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn maps_round_trip_through_the_column_encoding() {
        for m in [
            map(&[]),
            map(&[("app", "web")]),
            map(&[("spec.nodeName", "n1"), ("status.phase", "Running")]),
            map(&[
                ("quote\"d", "back\\slash"),
                ("uni", "\u{e9}\u{1}"),
                ("", ""),
            ]),
        ] {
            assert_eq!(parse_map(&encode_map(&m), 0).unwrap(), m);
        }
    }

    #[test]
    fn the_fast_path_declines_what_it_does_not_understand() {
        assert_eq!(
            parse_plain_map(r#"{"a":"b","c":"d"}"#),
            Some(map(&[("a", "b"), ("c", "d")]))
        );
        assert_eq!(parse_plain_map(r#"{"a":"b\"c"}"#), None);
        assert_eq!(parse_plain_map(r#"{"a": "b"}"#), None);
        assert_eq!(parse_plain_map(r#"{"a":1}"#), None);
        assert_eq!(parse_plain_map(r#"{"a":"b",}"#), None);
    }
}
