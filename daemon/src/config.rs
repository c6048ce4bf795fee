//! YAML config files, with errors that say which file, which line and which key.

use std::fmt;
use std::path::{Path, PathBuf};

use serde::Serialize;
use serde::de::DeserializeOwned;

/// A config file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read config file {path}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The file is not valid YAML for this config, or a value is out of range.
    #[error("{path}{}: {message}", Position(*.line, *.column))]
    Invalid {
        path: PathBuf,
        /// 1-based line of the offending value, when known.
        line: Option<usize>,
        column: Option<usize>,
        /// What is wrong, starting with the dotted key path when known.
        message: String,
    },
}

struct Position(Option<usize>, Option<usize>);

impl fmt::Display for Position {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Position(Some(l), Some(c)) => write!(f, ":{l}:{c}"),
            Position(Some(l), None) => write!(f, ":{l}"),
            _ => Ok(()),
        }
    }
}

/// Reads and parses a YAML config file.
pub fn load_yaml<T: DeserializeOwned>(path: &Path) -> Result<T, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    parse_yaml(path, &text)
}

/// Parses YAML text; `path` only names the source in errors.
pub fn parse_yaml<T: DeserializeOwned>(path: &Path, text: &str) -> Result<T, ConfigError> {
    serde_yaml_ng::from_str(text).map_err(|e| {
        let loc = e.location();
        let message = e.to_string();
        // The library appends " at line L column C"; the position is shown up front instead.
        let message = match message.rfind(" at line ") {
            Some(i) if loc.is_some() => message[..i].to_string(),
            _ => message,
        };
        ConfigError::Invalid {
            path: path.to_path_buf(),
            line: loc.as_ref().map(|l| l.line()),
            column: loc.as_ref().map(|l| l.column()),
            message,
        }
    })
}

/// Renders a config as YAML (for `--defaultconfig` and `--minconfig`).
pub fn to_yaml<T: Serialize>(value: &T) -> String {
    // Config structs are plain data with string keys; serializing them cannot fail.
    serde_yaml_ng::to_string(value).expect("config structs serialize to YAML")
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;

    use super::*;

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields, rename_all = "camelCase")]
    struct Top {
        #[allow(dead_code)]
        modules: Modules,
    }

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields, rename_all = "camelCase")]
    struct Modules {
        #[allow(dead_code)]
        cloud_hub: Hub,
    }

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Hub {
        #[allow(dead_code)]
        port: u16,
    }

    #[test]
    fn an_unknown_key_is_named_with_file_line_and_path() {
        let text = "modules:\n  cloudHub:\n    port: 1\n    prot: 2\n";
        let err = parse_yaml::<Top>(Path::new("/etc/x.yaml"), text).unwrap_err();
        let s = err.to_string();
        assert!(s.starts_with("/etc/x.yaml:4:"), "{s}");
        assert!(s.contains("modules.cloudHub"), "{s}");
        assert!(s.contains("prot"), "{s}");
    }

    #[test]
    fn a_bad_value_is_named_with_its_line() {
        let text = "modules:\n  cloudHub:\n    port: 70000\n";
        let err = parse_yaml::<Top>(Path::new("c.yaml"), text).unwrap_err();
        let s = err.to_string();
        assert!(s.starts_with("c.yaml:3:"), "{s}");
        assert!(s.contains("modules.cloudHub.port"), "{s}");
    }

    #[test]
    fn a_missing_file_is_named() {
        let err = load_yaml::<Top>(Path::new("/no/such/file.yaml")).unwrap_err();
        assert!(err.to_string().contains("/no/such/file.yaml"), "{err}");
    }
}
