//! The read side: a small pool of WAL reader connections used from `spawn_blocking`.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use rusqlite::types::Value;
use rusqlite::{Connection, OptionalExtension, params_from_iter};
use tokio::sync::Semaphore;

use crate::cache::ObjectCache;
use crate::config::StoreConfig;
use crate::db::{self, OBJECT_COLUMNS};
use crate::error::StoreError;
use crate::filter::{InventoryFilter, ListOptions, ListResult};
use crate::object::{ObjKey, StoredObject};
use crate::outbox::OutboxEntry;
use crate::watch::{Change, EventKind};

/// Read connections, opened lazily, at most `readers` in use at once.
pub(crate) struct ReadPool {
    path: PathBuf,
    config: StoreConfig,
    idle: Mutex<Vec<Connection>>,
    permits: Semaphore,
}

/// A page of the change log plus the compaction floor seen in the same read transaction.
pub(crate) struct ChangePage {
    pub(crate) changes: Vec<Change>,
    pub(crate) compacted: u64,
}

// === impl ReadPool ===

impl ReadPool {
    pub(crate) fn new(path: PathBuf, config: StoreConfig) -> Self {
        let permits = Semaphore::new(config.readers.max(1));
        Self {
            path,
            config,
            idle: Mutex::new(Vec::new()),
            permits,
        }
    }

    /// Runs `f` on a pooled connection in `spawn_blocking`.
    pub(crate) async fn run<R, F>(self: &Arc<Self>, f: F) -> Result<R, StoreError>
    where
        R: Send + 'static,
        F: FnOnce(&Connection) -> Result<R, StoreError> + Send + 'static,
    {
        let _permit = self
            .permits
            .acquire()
            .await
            .map_err(|_| StoreError::Closed)?;
        let pool = Arc::clone(self);
        tokio::task::spawn_blocking(move || {
            let conn = pool.checkout()?;
            let result = f(&conn);
            pool.checkin(conn);
            result
        })
        .await
        .map_err(|_| StoreError::Closed)?
    }

    fn checkout(&self) -> Result<Connection, StoreError> {
        let idle = self.idle.lock().unwrap_or_else(|p| p.into_inner()).pop();
        match idle {
            Some(conn) => Ok(conn),
            None => db::open_reader(&self.path, &self.config),
        }
    }

    fn checkin(&self, conn: Connection) {
        self.idle
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(conn);
    }
}

pub(crate) fn get(
    conn: &Connection,
    cache: &ObjectCache,
    key: &ObjKey,
) -> Result<Option<Arc<StoredObject>>, StoreError> {
    let tx = conn
        .unchecked_transaction()
        .map_err(StoreError::StoreRead)?;
    let Some((id, revision)) = locate(&tx, key).map_err(StoreError::StoreRead)? else {
        return Ok(None);
    };
    resolve(&tx, cache, id, revision).map(Some)
}

/// The row id and revision of an object.
pub(crate) fn locate(conn: &Connection, key: &ObjKey) -> rusqlite::Result<Option<(i64, u64)>> {
    let sql =
        "SELECT id, revision FROM objects WHERE resource = ?1 AND namespace = ?2 AND name = ?3";
    conn.prepare_cached(sql)?
        .query_row([&key.resource, &key.namespace, &key.name], |row| {
            Ok((row.get(0)?, row.get::<_, i64>(1)? as u64))
        })
        .optional()
}

/// Decodes the object in row `id`.
pub(crate) fn object_by_id(conn: &Connection, id: i64) -> rusqlite::Result<StoredObject> {
    let sql = format!("SELECT {OBJECT_COLUMNS} FROM objects WHERE id = ?1");
    conn.prepare_cached(&sql)?
        .query_row([id], |row| db::read_object(row, 0))
}

/// Row `id` at `revision`: shared from the cache, or decoded (and offered to the cache).
fn resolve(
    conn: &Connection,
    cache: &ObjectCache,
    id: i64,
    revision: u64,
) -> Result<Arc<StoredObject>, StoreError> {
    if let Some(object) = cache.get(id, revision) {
        return Ok(object);
    }
    let object = Arc::new(object_by_id(conn, id).map_err(StoreError::StoreRead)?);
    cache.offer(id, &object);
    Ok(object)
}

/// Lists in `(namespace, name)` order, reading the revision in the same transaction.
pub(crate) fn list(
    conn: &Connection,
    cache: &ObjectCache,
    opts: &ListOptions,
) -> Result<ListResult, StoreError> {
    let tx = conn
        .unchecked_transaction()
        .map_err(StoreError::StoreRead)?;
    let revision = db::read_meta(&tx).map_err(StoreError::StoreRead)?.revision;
    let (sql, args) = list_query(opts);
    let mut stmt = tx.prepare_cached(&sql).map_err(StoreError::StoreRead)?;
    let mut rows = stmt
        .query(params_from_iter(args))
        .map_err(StoreError::StoreRead)?;
    let want = opts.limit.unwrap_or(usize::MAX);
    let mut items = Vec::new();
    let mut more = false;
    while let Some(row) = rows.next().map_err(StoreError::StoreRead)? {
        let id: i64 = row.get(0).map_err(StoreError::StoreRead)?;
        let rev: i64 = row.get(1).map_err(StoreError::StoreRead)?;
        let obj = resolve(&tx, cache, id, rev as u64)?;
        if !opts.filter.matches(&obj) {
            continue;
        }
        if items.len() == want {
            more = true;
            break;
        }
        items.push(obj);
    }
    let continue_after = more
        .then(|| items.last())
        .flatten()
        .map(|o| (o.key.namespace.clone(), o.key.name.clone()));
    Ok(ListResult {
        revision,
        items,
        continue_after,
    })
}

/// A list query under construction: `SELECT id, revision ...` plus `AND` clauses.
struct ListQuery {
    sql: String,
    args: Vec<Value>,
    /// The alias whose `namespace`/`name` columns the clauses and the order use.
    table: &'static str,
}

/// Builds the list SQL: through the field index when a (non-metadata) field is given.
fn list_query(opts: &ListOptions) -> (String, Vec<Value>) {
    let mut q = ListQuery::base(opts);
    if let Some(ns) = &opts.filter.namespace {
        q.and("namespace", "=", ns);
    }
    match opts.filter.field.as_ref().map(|(f, v)| (f.as_str(), v)) {
        Some(("metadata.name", name)) => q.and("name", "=", name),
        Some(("metadata.namespace", ns)) => q.and("namespace", "=", ns),
        _ => {}
    }
    match (&opts.continue_after, &opts.filter.namespace) {
        // Within one namespace compare names only, so SQLite walks the index in order.
        (Some((after_ns, name)), Some(ns)) if after_ns == ns => q.and("name", ">", name),
        (Some((after_ns, name)), _) => q.after(after_ns, name),
        (None, _) => {}
    }
    let t = q.table;
    q.sql += &format!(" ORDER BY {t}.namespace, {t}.name");
    (q.sql, q.args)
}

// === impl ListQuery ===

impl ListQuery {
    fn base(opts: &ListOptions) -> Self {
        let mut args = vec![Value::Text(opts.resource.clone())];
        let indexed = opts
            .filter
            .field
            .as_ref()
            .filter(|(f, _)| !f.starts_with("metadata."));
        let Some((field, value)) = indexed else {
            let sql = "SELECT id, revision FROM objects WHERE resource = ?1".to_owned();
            return Self {
                sql,
                args,
                table: "objects",
            };
        };
        args.push(Value::Text(field.clone()));
        args.push(Value::Text(value.clone()));
        let sql = "SELECT o.id, o.revision FROM field_index f JOIN objects o ON o.id = f.id \
                   WHERE f.resource = ?1 AND f.field = ?2 AND f.value = ?3";
        Self {
            sql: sql.to_owned(),
            args,
            table: "f",
        }
    }

    fn and(&mut self, column: &str, op: &str, value: &str) {
        self.args.push(Value::Text(value.to_owned()));
        self.sql += &format!(" AND {}.{column} {op} ?{}", self.table, self.args.len());
    }

    /// `(namespace, name) > (ns, name)`.
    fn after(&mut self, ns: &str, name: &str) {
        self.args.push(Value::Text(ns.to_owned()));
        self.args.push(Value::Text(name.to_owned()));
        let (t, a, b) = (self.table, self.args.len() - 1, self.args.len());
        self.sql += &format!(" AND ({t}.namespace, {t}.name) > (?{a}, ?{b})");
    }
}

pub(crate) fn inventory(
    conn: &Connection,
    filter: &InventoryFilter,
) -> Result<Vec<(ObjKey, String)>, StoreError> {
    let sql = "SELECT resource, namespace, name, rv FROM objects \
               WHERE (?1 IS NULL OR resource = ?1) AND (?2 IS NULL OR namespace = ?2)";
    let mut stmt = conn.prepare_cached(sql).map_err(StoreError::StoreRead)?;
    let rows = stmt
        .query_map([&filter.resource, &filter.namespace], |row| {
            let key = ObjKey {
                resource: row.get(0)?,
                namespace: row.get(1)?,
                name: row.get(2)?,
            };
            Ok((key, row.get(3)?))
        })
        .map_err(StoreError::StoreRead)?;
    rows.collect::<rusqlite::Result<_>>()
        .map_err(StoreError::StoreRead)
}

/// Change-log rows in `(after, until]`, oldest first, at most `limit`.
pub(crate) fn changes_page(
    conn: &Connection,
    after: u64,
    until: u64,
    resource: Option<String>,
    limit: usize,
) -> Result<ChangePage, StoreError> {
    let tx = conn
        .unchecked_transaction()
        .map_err(StoreError::StoreRead)?;
    let compacted = db::read_meta(&tx).map_err(StoreError::StoreRead)?.compacted;
    let sql = "SELECT revision, kind, resource, namespace, name, uid, rv, revision, labels, fields, \
               value, prev_labels, prev_fields FROM changes \
               WHERE revision > ?1 AND revision <= ?2 AND (?3 IS NULL OR resource = ?3) \
               ORDER BY revision LIMIT ?4";
    let mut stmt = tx.prepare_cached(sql).map_err(StoreError::StoreRead)?;
    let args = rusqlite::params![after as i64, until as i64, resource, limit as i64];
    let rows = stmt
        .query_map(args, read_change)
        .map_err(StoreError::StoreRead)?;
    let changes = rows
        .collect::<rusqlite::Result<_>>()
        .map_err(StoreError::StoreRead)?;
    Ok(ChangePage { changes, compacted })
}

fn read_change(row: &rusqlite::Row<'_>) -> rusqlite::Result<Change> {
    let code: i64 = row.get(1)?;
    let kind = EventKind::from_code(code)
        .ok_or_else(|| rusqlite::Error::IntegralValueOutOfRange(1, code))?;
    Ok(Change {
        revision: row.get::<_, i64>(0)? as u64,
        kind,
        object: Arc::new(db::read_object(row, 2)?),
        prev_labels: db::decode_opt_map(row, 11)?,
        prev_fields: db::decode_opt_map(row, 12)?,
    })
}

pub(crate) fn outbox_peek(conn: &Connection, n: usize) -> Result<Vec<OutboxEntry>, StoreError> {
    let sql = "SELECT seq, key, payload FROM outbox ORDER BY pos LIMIT ?1";
    let mut stmt = conn.prepare_cached(sql).map_err(StoreError::StoreRead)?;
    let rows = stmt
        .query_map([n as i64], |row| {
            Ok(OutboxEntry {
                id: row.get::<_, i64>(0)? as u64,
                key: row.get(1)?,
                payload: Bytes::from(row.get::<_, Vec<u8>>(2)?),
            })
        })
        .map_err(StoreError::StoreRead)?;
    rows.collect::<rusqlite::Result<_>>()
        .map_err(StoreError::StoreRead)
}

pub(crate) fn outbox_len(conn: &Connection) -> Result<usize, StoreError> {
    conn.prepare_cached("SELECT count(*) FROM outbox")
        .and_then(|mut stmt| stmt.query_row([], |row| row.get::<_, i64>(0)))
        .map(|n| n as usize)
        .map_err(StoreError::StoreRead)
}
