//! Bad files at the store path.

use std::path::Path;

use objstore::{OnCorrupt, StoreConfig, StoreError, Writer};

use crate::common::{pod, pod_key};

fn expect_corrupt(path: &Path) -> String {
    let err = Writer::open(path, StoreConfig::default()).unwrap_err();
    assert!(
        matches!(&err, StoreError::Corrupt { path: p, .. } if p == path),
        "{err:?}"
    );
    let message = err.to_string();
    assert!(message.contains(&path.display().to_string()), "{message}");
    message
}

#[test]
fn a_garbage_file_is_reported_as_corrupt_naming_the_path() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store.db");
    std::fs::write(&path, vec![0x5a; 8192]).unwrap();
    expect_corrupt(&path);
    assert_eq!(
        std::fs::read(&path).unwrap(),
        vec![0x5a; 8192],
        "the file was left alone"
    );
}

#[tokio::test]
async fn a_truncated_file_is_reported_as_corrupt() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store.db");
    {
        let store = Writer::open(&path, StoreConfig::default()).unwrap();
        for i in 0..300 {
            let name = format!("p{i}");
            store
                .put(pod_key("ns", &name), pod(&name, "n1", 1))
                .await
                .unwrap();
        }
    }
    let len = std::fs::metadata(&path).unwrap().len();
    assert!(len > 8 * 4096, "database is only {len} bytes");
    let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    file.set_len(len / 2).unwrap();
    drop(file);
    expect_corrupt(&path);
}

#[test]
fn a_missing_directory_is_an_open_error_naming_the_path() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("missing").join("store.db");
    let err = Writer::open(&path, StoreConfig::default()).unwrap_err();
    assert!(matches!(err, StoreError::Open { .. }), "{err:?}");
    assert!(err.to_string().contains("missing"));
}

#[tokio::test]
async fn rebuild_moves_the_corrupt_file_aside_and_starts_empty() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store.db");
    std::fs::write(&path, b"definitely not sqlite, just some bytes to keep").unwrap();
    std::fs::write(dir.path().join("store.db-wal"), b"wal junk").unwrap();
    let config = StoreConfig {
        on_corrupt: OnCorrupt::Rebuild,
        ..StoreConfig::default()
    };
    let store = Writer::open(&path, config).unwrap();
    assert_eq!(store.revision(), 0);
    store
        .put(pod_key("ns", "a"), pod("a", "n1", 1))
        .await
        .unwrap();

    let names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    let moved = names
        .iter()
        .find(|n| n.starts_with("store.db.corrupt-") && !n.ends_with("-wal"))
        .unwrap_or_else(|| panic!("no moved-aside file in {names:?}"));
    let kept = std::fs::read(dir.path().join(moved)).unwrap();
    assert_eq!(kept, b"definitely not sqlite, just some bytes to keep");
    assert!(
        names
            .iter()
            .any(|n| n.starts_with("store.db.corrupt-") && n.ends_with("-wal")),
        "{names:?}"
    );
}
