//! `--root` and `--port-offset`: where a daemon's default paths and ports move, so that two
//! instances can run side by side on one machine without overriding each path and port.
//!
//! It works on any config as YAML: the loaded config and the default config are walked
//! together, and only a value still equal to its default moves. A path under one of
//! [`ROOTED`] gets the root put in front (`/etc/kubeedge/ca/rootCA.crt` becomes
//! `<root>/etc/kubeedge/ca/rootCA.crt`); a port (a `port` key, or the port of a `host:port`
//! value) gets the offset added. Values that differ from their defaults are kept as written.

use std::path::{Path, PathBuf};

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_yaml_ng::Value;

/// The default locations that `--root` moves: KubeEdge's and the kubelet's.
pub const ROOTED: &[&str] = &[
    "/etc/kubeedge",
    "/var/lib/kubeedge",
    "/var/lib/kubelet",
    "/var/log/pods",
    "/var/log/kubeedge",
];

/// Where default paths and ports move.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Layout {
    /// Put in front of every default path under [`ROOTED`].
    pub root: Option<PathBuf>,
    /// Added to every default port.
    pub port_offset: u16,
}

/// A default port moved past 65535, or the config did not survive the round trip.
#[derive(Debug, thiserror::Error)]
pub enum LayoutError {
    /// A default port plus the offset is not a port.
    #[error("{key}: port {port} + port offset {offset} is above 65535")]
    PortOverflow { key: String, port: u64, offset: u16 },
    /// The config could not be turned into YAML values and back.
    #[error("applying the root and port offset: {0}")]
    RoundTrip(#[from] serde_yaml_ng::Error),
}

// === impl Layout ===

impl Layout {
    /// Whether nothing moves.
    pub fn is_identity(&self) -> bool {
        self.root.is_none() && self.port_offset == 0
    }

    /// `path` under the root when it is one of the [`ROOTED`] locations, else `path`.
    pub fn path(&self, path: &Path) -> PathBuf {
        match &self.root {
            Some(root) if is_rooted(path) => {
                root.join(path.strip_prefix("/").expect("rooted paths are absolute"))
            }
            _ => path.to_path_buf(),
        }
    }

    /// `config` with its default paths and ports moved.
    pub fn apply<T: Serialize + DeserializeOwned + Default>(
        &self,
        config: T,
    ) -> Result<T, LayoutError> {
        if self.is_identity() {
            return Ok(config);
        }
        let mut value = serde_yaml_ng::to_value(&config)?;
        let defaults = serde_yaml_ng::to_value(T::default())?;
        self.walk(&mut value, &defaults, &mut Vec::new())?;
        Ok(serde_yaml_ng::from_value(value)?)
    }

    fn walk(
        &self,
        value: &mut Value,
        default: &Value,
        keys: &mut Vec<String>,
    ) -> Result<(), LayoutError> {
        match (value, default) {
            (Value::Mapping(map), Value::Mapping(defaults)) => {
                for (k, v) in map.iter_mut() {
                    let Some(d) = defaults.get(k) else { continue };
                    keys.push(k.as_str().unwrap_or_default().to_string());
                    self.walk(v, d, keys)?;
                    keys.pop();
                }
            }
            (Value::Sequence(items), Value::Sequence(defaults)) => {
                for (i, (v, d)) in items.iter_mut().zip(defaults).enumerate() {
                    keys.push(i.to_string());
                    self.walk(v, d, keys)?;
                    keys.pop();
                }
            }
            (value, default) if *value == *default => self.leaf(value, keys)?,
            _ => {}
        }
        Ok(())
    }

    /// Moves one value that still has its default.
    fn leaf(&self, value: &mut Value, keys: &[String]) -> Result<(), LayoutError> {
        let key = keys.last().map(String::as_str).unwrap_or_default();
        let offset = |port: u64| {
            let moved = port + u64::from(self.port_offset);
            match moved <= u64::from(u16::MAX) {
                true => Ok(moved),
                false => Err(LayoutError::PortOverflow {
                    key: keys.join("."),
                    port,
                    offset: self.port_offset,
                }),
            }
        };
        match value {
            Value::Number(n) if is_port_key(key) && self.port_offset > 0 => {
                if let Some(port) = n.as_u64().filter(|p| *p > 0) {
                    *value = Value::from(offset(port)?);
                }
            }
            Value::String(s) if s.starts_with('/') => {
                let moved = self.path(Path::new(s.as_str()));
                *s = moved.to_string_lossy().into_owned();
            }
            Value::String(s) if self.port_offset > 0 => {
                let mut parts = Vec::new();
                for part in s.split(',') {
                    let (scheme, rest) = match part.trim().split_once("://") {
                        Some((scheme, rest)) => (format!("{scheme}://"), rest),
                        None => (String::new(), part.trim()),
                    };
                    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
                    parts.push(match host_port(authority) {
                        Some((host, port)) => format!("{scheme}{host}:{}{path}", offset(port)?),
                        None => part.to_string(),
                    });
                }
                *s = parts.join(",");
            }
            _ => {}
        }
        Ok(())
    }
}

/// Whether `path` is one of [`ROOTED`] or below one.
fn is_rooted(path: &Path) -> bool {
    ROOTED.iter().any(|prefix| path.starts_with(prefix))
}

/// Keys whose numbers are ports: `port`, `certPort`, ...
fn is_port_key(key: &str) -> bool {
    key == "port" || key.ends_with("Port")
}

/// `host:port` with a non-zero port (`127.0.0.1:10000`, `[::1]:6443`, `cloud:10000`).
fn host_port(s: &str) -> Option<(&str, u64)> {
    let (host, port) = s.rsplit_once(':')?;
    let bracketed = host.starts_with('[') && host.ends_with(']');
    let valid_host = !host.is_empty() && !host.contains('/') && (bracketed || !host.contains(':'));
    let port: u16 = port.parse().ok().filter(|_| valid_host)?;
    (port > 0).then_some((host, u64::from(port)))
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;

    use super::*;

    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    #[serde(default, rename_all = "camelCase")]
    struct Conf {
        ca: PathBuf,
        db: PathBuf,
        runtime: String,
        elsewhere: PathBuf,
        bind_address: String,
        servers: Vec<String>,
        port: u16,
        cert_port: u16,
        ephemeral: String,
        advertise: String,
        url: String,
        socket: String,
    }

    impl Default for Conf {
        fn default() -> Self {
            Conf {
                ca: "/etc/kubeedge/ca/rootCA.crt".into(),
                db: "/var/lib/kubeedge/edgecore.db".into(),
                runtime: "unix:///run/containerd/containerd.sock".into(),
                elsewhere: "/opt/data".into(),
                bind_address: "127.0.0.1:10352".into(),
                servers: vec!["127.0.0.1:10000".into(), "[::1]:10001".into()],
                port: 10000,
                cert_port: 10002,
                ephemeral: "127.0.0.1:0".into(),
                advertise: "::1".into(),
                url: "https://127.0.0.1:10002/path".into(),
                socket: "unix:///run/x.sock".into(),
            }
        }
    }

    fn layout(root: &str, port_offset: u16) -> Layout {
        Layout {
            root: Some(root.into()),
            port_offset,
        }
    }

    #[test]
    fn default_paths_under_kubeedge_locations_move_under_the_root() {
        let moved = layout("/srv/a", 0).apply(Conf::default()).unwrap();
        assert_eq!(moved.ca, Path::new("/srv/a/etc/kubeedge/ca/rootCA.crt"));
        assert_eq!(moved.db, Path::new("/srv/a/var/lib/kubeedge/edgecore.db"));
        assert_eq!(moved.elsewhere, Path::new("/opt/data"));
        assert_eq!(moved.runtime, Conf::default().runtime);
        assert_eq!(moved.port, 10000, "no offset, no port moves");
    }

    #[test]
    fn values_set_apart_from_their_defaults_are_kept_as_written() {
        let config = Conf {
            ca: "/etc/kubeedge/other/ca.crt".into(),
            bind_address: "0.0.0.0:9999".into(),
            port: 20000,
            ..Conf::default()
        };
        let moved = layout("/srv/a", 5).apply(config.clone()).unwrap();
        assert_eq!((moved.ca, moved.port), (config.ca, 20000));
        assert_eq!(moved.bind_address, "0.0.0.0:9999");
        assert_eq!(moved.db, Path::new("/srv/a/var/lib/kubeedge/edgecore.db"));
    }

    #[test]
    fn the_port_offset_moves_every_default_port_but_ephemeral_ones() {
        let moved = Layout {
            root: None,
            port_offset: 100,
        }
        .apply(Conf::default())
        .unwrap();
        assert_eq!(moved.bind_address, "127.0.0.1:10452");
        assert_eq!(moved.servers, ["127.0.0.1:10100", "[::1]:10101"]);
        assert_eq!((moved.port, moved.cert_port), (10100, 10102));
        assert_eq!(moved.ephemeral, "127.0.0.1:0");
        assert_eq!(moved.advertise, "::1", "an IPv6 address is not host:port");
        assert_eq!(moved.url, "https://127.0.0.1:10102/path");
        assert_eq!(moved.socket, "unix:///run/x.sock");
        assert_eq!(moved.ca, Conf::default().ca, "no root, no path moves");
    }

    #[test]
    fn a_port_pushed_past_65535_is_refused_by_key() {
        let err = layout("/r", 60000).apply(Conf::default()).unwrap_err();
        assert!(
            err.to_string().starts_with("bindAddress: port 10352"),
            "{err}"
        );
    }
}
