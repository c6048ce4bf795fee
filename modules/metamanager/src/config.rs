//! The `database` and `modules.metaManager` sections of `edgecore.yaml`.

use std::path::PathBuf;

use objstore::{OnCorrupt, StoreConfig, Synchronous};
use serde::{Deserialize, Serialize};

/// `modules.metaManager`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct Config {
    /// Run the module. Default true.
    pub enable: bool,
    /// Most messages applied in one transaction. Default 256.
    pub max_batch: usize,
}

/// `database`: the edge store file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct DatabaseConfig {
    /// SQLite file. Default `/var/lib/kubeedge/edgecore.db`.
    pub data_source: PathBuf,
    /// `full` (default: acked writes survive power loss) or `normal` (survive a crash only).
    pub synchronous: SyncMode,
    /// Change-log revisions kept for watch resumption. Default 100000.
    pub change_log_retention: u64,
    /// What to do with a file that is not a usable database: `fail` (default) or `rebuild`,
    /// which moves it aside to `<file>.corrupt-<unix-seconds>` and starts empty; the cloud then
    /// sends everything again (the store is a replica).
    pub on_corrupt: CorruptMode,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum SyncMode {
    Full,
    Normal,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum CorruptMode {
    Fail,
    Rebuild,
}

// === impl Config ===

impl Default for Config {
    fn default() -> Self {
        Config {
            enable: true,
            max_batch: 256,
        }
    }
}

// === impl DatabaseConfig ===

impl DatabaseConfig {
    /// The store settings this section asks for.
    pub fn store_config(&self) -> StoreConfig {
        StoreConfig {
            synchronous: match self.synchronous {
                SyncMode::Full => Synchronous::Full,
                SyncMode::Normal => Synchronous::Normal,
            },
            retention: self.change_log_retention,
            on_corrupt: match self.on_corrupt {
                CorruptMode::Fail => OnCorrupt::Fail,
                CorruptMode::Rebuild => OnCorrupt::Rebuild,
            },
            ..StoreConfig::default()
        }
    }
}

impl Default for DatabaseConfig {
    fn default() -> Self {
        DatabaseConfig {
            data_source: PathBuf::from("/var/lib/kubeedge/edgecore.db"),
            synchronous: SyncMode::Full,
            change_log_retention: 100_000,
            on_corrupt: CorruptMode::Fail,
        }
    }
}
