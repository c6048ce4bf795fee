//! e2e: the harness for end-to-end tests that boot real daemons in-process on loopback.
#![forbid(unsafe_code)]

use std::path::{Path, PathBuf};

/// The repository's `conf/` folder.
pub fn conf_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../conf")
}
