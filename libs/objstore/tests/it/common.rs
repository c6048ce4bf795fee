//! Shared helpers: temp stores, object builders, the deadline tests wait with.

use std::sync::Arc;
use std::time::Duration;

use objstore::{NewObject, ObjKey, StoreConfig, StoreError, WatchEvent, Watcher, Writer};
use tempfile::TempDir;

pub const DEADLINE: Duration = Duration::from_secs(5);

pub struct TempStore {
    pub dir: TempDir,
    /// Shared so that tests can write from several tasks; it reads too.
    pub store: Arc<Writer>,
}

impl TempStore {
    pub fn new() -> Self {
        Self::with(StoreConfig::default())
    }

    pub fn with(config: StoreConfig) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Writer::open(dir.path().join("store.db"), config).expect("open store");
        Self {
            dir,
            store: Arc::new(store),
        }
    }

    /// Drops the handle (waiting for the writer to stop) and opens the same file again.
    pub fn reopen(self, config: StoreConfig) -> Self {
        let Self { dir, store } = self;
        drop(store);
        let store = Writer::open(dir.path().join("store.db"), config).expect("reopen store");
        Self {
            dir,
            store: Arc::new(store),
        }
    }
}

pub fn pod_key(ns: &str, name: &str) -> ObjKey {
    ObjKey::new("pods", ns, name)
}

/// A pod-like object bound to `node`, with a small JSON value.
pub fn pod(name: &str, node: &str, rv: u64) -> NewObject {
    let value = format!(
        r#"{{"metadata":{{"name":"{name}","resourceVersion":"{rv}"}},"spec":{{"nodeName":"{node}"}}}}"#
    );
    NewObject::from_value(value)
        .uid(format!("uid-{name}"))
        .resource_version(rv.to_string())
        .field("spec.nodeName", node)
}

/// The next event, failing the test if none arrives within the deadline.
pub async fn next_event(w: &mut Watcher) -> Result<WatchEvent, StoreError> {
    tokio::time::timeout(DEADLINE, w.next())
        .await
        .expect("watch event within deadline")
        .expect("watch still open")
}
