//! The `modules.edged` section of `edgecore.yaml` (field names follow KubeEdge's edged and the
//! kubelet's configuration).

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// `modules.edged`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct Config {
    /// Run the node's pods. Default false: a native kubelet against lwproxy is the alternative.
    pub enable: bool,
    /// The node's name. Default empty: the name in the node's certificate (edgehub's identity).
    pub hostname_override: String,
    /// Labels edged puts on its Node (`keadm join --labels`). Default none.
    pub node_labels: std::collections::BTreeMap<String, String>,
    /// The CRI runtime (containerd) socket. Default `unix:///run/containerd/containerd.sock`.
    pub remote_runtime_endpoint: String,
    /// The kubelet's root: pod volumes live under `<rootDirectory>/pods/<uid>/volumes`.
    /// Default `/var/lib/kubelet`.
    pub root_directory: PathBuf,
    /// Container logs, in the kubelet's layout `<dir>/<ns>_<pod>_<uid>/<container>/<n>.log`.
    /// Default `/var/log/pods`.
    pub pod_logs_directory: PathBuf,
    /// How often the node's status is computed and sent when it changed (it is sent at least
    /// every 5 minutes). Default `10s`.
    #[serde(with = "daemon::duration")]
    pub node_status_update_frequency: Duration,
    /// The node Lease's duration; it is renewed every quarter of it. Default 40.
    pub node_lease_duration_seconds: u32,
    /// How often the runtime is relisted to notice containers that exited (the kubelet's
    /// PLEG period). Default `1s`.
    #[serde(with = "daemon::duration")]
    pub relist_period: Duration,
    /// Pods this node accepts (node capacity `pods`). Default 110.
    pub max_pods: u32,
    /// The cluster's DNS servers given to pods with `dnsPolicy: ClusterFirst`. Default none
    /// (the host's resolver settings are used).
    #[serde(rename = "clusterDNS")]
    pub cluster_dns: Vec<String>,
    /// The cluster's DNS domain. Default `cluster.local`.
    pub cluster_domain: String,
    /// Static pods: a directory of pod manifests (YAML or JSON, one pod per file) edged runs
    /// without the cloud, each with a mirror pod in the API. Empty: none. Default
    /// `/etc/kubeedge/manifests`.
    pub static_pod_path: PathBuf,
    /// How often the static pod directory is read again. Default `20s`.
    #[serde(with = "daemon::duration")]
    pub file_check_frequency: Duration,
    /// A running container's log is rotated once it reaches this size (a Kubernetes quantity
    /// such as `10Mi`; more than 0). Default `10Mi`.
    #[serde(with = "LogSize")]
    pub container_log_max_size: u64,
    /// Log files kept per container, the current one included (at least 2); the rotated ones
    /// but the newest are gzipped. Default 5.
    #[serde(deserialize_with = "max_files")]
    pub container_log_max_files: u32,
    /// How often the containers' log sizes are checked. Default `10s`.
    #[serde(
        serialize_with = "daemon::duration::serialize",
        deserialize_with = "monitor_interval"
    )]
    #[schemars(with = "daemon::duration")]
    pub container_log_monitor_interval: Duration,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            enable: false,
            hostname_override: String::new(),
            node_labels: Default::default(),
            remote_runtime_endpoint: "unix:///run/containerd/containerd.sock".into(),
            root_directory: "/var/lib/kubelet".into(),
            pod_logs_directory: "/var/log/pods".into(),
            node_status_update_frequency: Duration::from_secs(10),
            node_lease_duration_seconds: 40,
            relist_period: Duration::from_secs(1),
            max_pods: 110,
            cluster_dns: Vec::new(),
            cluster_domain: "cluster.local".into(),
            static_pod_path: "/etc/kubeedge/manifests".into(),
            file_check_frequency: Duration::from_secs(20),
            container_log_max_size: 10 * 1024 * 1024,
            container_log_max_files: 5,
            container_log_monitor_interval: Duration::from_secs(10),
        }
    }
}

/// Serde for `containerLogMaxSize`: a Kubernetes quantity (`10Mi`, `500k`, `1048576`) of more
/// than 0 bytes, written back in the largest binary unit that holds it exactly.
struct LogSize;

impl LogSize {
    fn serialize<S: Serializer>(bytes: &u64, s: S) -> Result<S::Ok, S::Error> {
        let units = ["", "Ki", "Mi", "Gi", "Ti"];
        let (mut value, mut unit) = (*bytes, 0);
        while value >= 1024 && value % 1024 == 0 && unit + 1 < units.len() {
            value /= 1024;
            unit += 1;
        }
        s.serialize_str(&format!("{value}{}", units[unit]))
    }

    fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Bytes(u64),
            Text(String),
        }
        let bytes = match Raw::deserialize(d)? {
            Raw::Bytes(n) => Some(n),
            Raw::Text(t) => {
                apimachinery::quantity::units(t.trim()).and_then(|n| u64::try_from(n).ok())
            }
        };
        bytes.filter(|n| *n > 0).ok_or_else(|| {
            serde::de::Error::custom(
                "containerLogMaxSize must be a Kubernetes quantity of more than 0 bytes, such as 10Mi",
            )
        })
    }
}

impl schemars::JsonSchema for LogSize {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Quantity".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({"type": "string"})
    }
}

/// `containerLogMaxFiles`: at least 2, the current log and one rotated (as the kubelet checks).
fn max_files<'de, D: Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    let n = u32::deserialize(d)?;
    if n < 2 {
        return Err(serde::de::Error::custom(format!(
            "containerLogMaxFiles must be at least 2 (the current log and one rotated), got {n}"
        )));
    }
    Ok(n)
}

/// `containerLogMonitorInterval`: a duration of more than 0.
fn monitor_interval<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    let interval = daemon::duration::deserialize(d)?;
    if interval.is_zero() {
        return Err(serde::de::Error::custom(
            "containerLogMonitorInterval must be more than 0",
        ));
    }
    Ok(interval)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(yaml: &str) -> Result<Config, String> {
        serde_yaml_ng::from_str(yaml).map_err(|e| e.to_string())
    }

    #[test]
    fn log_rotation_keys_parse_as_the_kubelet_writes_them() {
        let c = parse(
            "containerLogMaxSize: 50Mi\ncontainerLogMaxFiles: 3\ncontainerLogMonitorInterval: 5s\n",
        );
        let c = c.unwrap();
        assert_eq!(c.container_log_max_size, 50 * 1024 * 1024);
        assert_eq!(c.container_log_max_files, 3);
        assert_eq!(c.container_log_monitor_interval, Duration::from_secs(5));
        assert_eq!(
            parse("containerLogMaxSize: 1k\n")
                .unwrap()
                .container_log_max_size,
            1000
        );
        assert_eq!(
            parse("containerLogMaxSize: 4096\n")
                .unwrap()
                .container_log_max_size,
            4096
        );
        let defaults = parse("{}").unwrap();
        assert_eq!(defaults.container_log_max_size, 10 * 1024 * 1024);
        assert_eq!(defaults.container_log_max_files, 5);
        let written = serde_yaml_ng::to_string(&defaults).unwrap();
        assert!(written.contains("containerLogMaxSize: 10Mi"), "{written}");
        assert_eq!(parse(&written).unwrap(), defaults);
    }

    #[test]
    fn a_bad_log_rotation_value_names_its_key() {
        for (yaml, key) in [
            ("containerLogMaxSize: ten\n", "containerLogMaxSize"),
            ("containerLogMaxSize: 0\n", "containerLogMaxSize"),
            ("containerLogMaxSize: -1Mi\n", "containerLogMaxSize"),
            ("containerLogMaxFiles: 1\n", "containerLogMaxFiles"),
            (
                "containerLogMonitorInterval: 0s\n",
                "containerLogMonitorInterval",
            ),
        ] {
            let err = parse(yaml).unwrap_err();
            assert!(err.contains(key), "{yaml}: {err}");
        }
    }
}
