//! The CRI configs of a pod's sandbox and containers, computed from the pod spec (pure: the
//! worker resolves env values and volume paths first).

use std::borrow::Cow;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

use cri::api;
use k8s_openapi::api::core::v1::{Container, Pod};

use crate::plan::{Desired, RestartPolicy};
use apimachinery::quantity;

/// Label on every sandbox and container edged creates; nothing without it is ever touched.
pub const MANAGED: &str = "edged.kubeedge.io/managed";
/// The pod uid label (the kubelet's).
pub const POD_UID: &str = "io.kubernetes.pod.uid";
/// The pod name label.
pub const POD_NAME: &str = "io.kubernetes.pod.name";
/// The pod namespace label.
pub const POD_NAMESPACE: &str = "io.kubernetes.pod.namespace";
/// The container name label.
pub const CONTAINER_NAME: &str = "io.kubernetes.container.name";

/// What identifies a pod on the node.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PodId {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// Uid.
    pub uid: String,
}

// === impl PodId ===

impl PodId {
    /// The pod's identity; `None` without a name or uid.
    pub fn of(pod: &Pod) -> Option<PodId> {
        let m = &pod.metadata;
        Some(PodId {
            namespace: m.namespace.clone().unwrap_or_else(|| "default".into()),
            name: m.name.clone()?,
            uid: m.uid.clone()?,
        })
    }

    /// `<namespace>/<name>`.
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    /// The pod's log directory, in the kubelet's layout.
    pub fn log_dir(&self, root: &Path) -> PathBuf {
        root.join(format!("{}_{}_{}", self.namespace, self.name, self.uid))
    }
}

/// What the pod wants running.
pub fn desired(pod: &Pod, run: bool) -> Desired {
    let spec = pod.spec.as_ref();
    let names = |cs: Option<&Vec<Container>>| {
        cs.map(|cs| cs.iter().map(|c| c.name.clone()).collect())
            .unwrap_or_default()
    };
    let restart = match spec.and_then(|s| s.restart_policy.as_deref()) {
        Some("Never") => RestartPolicy::Never,
        Some("OnFailure") => RestartPolicy::OnFailure,
        _ => RestartPolicy::Always,
    };
    let ephemeral = spec.and_then(|s| s.ephemeral_containers.as_ref());
    Desired {
        run,
        init: names(spec.and_then(|s| s.init_containers.as_ref())),
        containers: names(spec.map(|s| &s.containers)),
        ephemeral: ephemeral
            .map(|cs| cs.iter().map(|c| c.name.clone()).collect())
            .unwrap_or_default(),
        restart,
        kill: Default::default(),
    }
}

/// Whether the pod uses the host's network.
pub fn host_network(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.host_network)
        .unwrap_or(false)
}

/// A container of the pod by name (init or app).
pub fn container<'a>(pod: &'a Pod, name: &str) -> Option<&'a Container> {
    let spec = pod.spec.as_ref()?;
    spec.init_containers
        .iter()
        .flatten()
        .chain(&spec.containers)
        .find(|c| c.name == name)
}

/// A container of the pod by name, ephemeral ones (`kubectl debug`) included, which are
/// read as the plain container they describe.
pub fn any_container<'a>(pod: &'a Pod, name: &str) -> Option<Cow<'a, Container>> {
    if let Some(c) = container(pod, name) {
        return Some(Cow::Borrowed(c));
    }
    let spec = pod.spec.as_ref()?;
    let e = spec
        .ephemeral_containers
        .iter()
        .flatten()
        .find(|c| c.name == name)?;
    // An ephemeral container has a container's fields (a subset) plus its target.
    let mut fields = serde_json::to_value(e).ok()?;
    fields.as_object_mut()?.remove("targetContainerName");
    serde_json::from_value(fields).ok().map(Cow::Owned)
}

/// The container whose processes ephemeral container `name` sees (`targetContainerName`).
pub fn ephemeral_target<'a>(pod: &'a Pod, name: &str) -> Option<&'a str> {
    let spec = pod.spec.as_ref()?;
    let e = spec
        .ephemeral_containers
        .iter()
        .flatten()
        .find(|c| c.name == name)?;
    e.target_container_name.as_deref()
}

/// The sandbox config of attempt `attempt`.
pub fn sandbox_config(
    pod: &Pod,
    id: &PodId,
    attempt: u32,
    logs: &Path,
    dns: &DnsSettings,
) -> api::PodSandboxConfig {
    let spec = pod.spec.clone().unwrap_or_default();
    let host_net = spec.host_network.unwrap_or(false);
    let hostname = if host_net {
        // runc cannot set a hostname without its own UTS namespace; the kubelet sends none.
        String::new()
    } else {
        let name = spec.hostname.clone().unwrap_or_else(|| id.name.clone());
        name.chars().take(63).collect()
    };
    let mut labels: HashMap<String, String> = pod
        .metadata
        .labels
        .clone()
        .unwrap_or_default()
        .into_iter()
        .collect();
    labels.extend(identity_labels(id));
    let ns_mode = |host: Option<bool>, otherwise| {
        if host.unwrap_or(false) {
            api::NamespaceMode::Node as i32
        } else {
            otherwise as i32
        }
    };
    let namespaces = api::NamespaceOption {
        network: ns_mode(spec.host_network, api::NamespaceMode::Pod),
        pid: ns_mode(spec.host_pid, api::NamespaceMode::Container),
        ipc: ns_mode(spec.host_ipc, api::NamespaceMode::Pod),
        ..Default::default()
    };
    let privileged = spec
        .containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
        .any(|c| {
            c.security_context
                .as_ref()
                .and_then(|s| s.privileged)
                .unwrap_or(false)
        });
    let pod_sc = spec.security_context.clone().unwrap_or_default();
    api::PodSandboxConfig {
        metadata: Some(api::PodSandboxMetadata {
            name: id.name.clone(),
            uid: id.uid.clone(),
            namespace: id.namespace.clone(),
            attempt,
        }),
        hostname,
        log_directory: id.log_dir(logs).to_string_lossy().into_owned(),
        dns_config: dns_config(pod, &id.namespace, dns),
        port_mappings: port_mappings(&spec.containers),
        labels,
        annotations: pod
            .metadata
            .annotations
            .clone()
            .unwrap_or_default()
            .into_iter()
            .collect(),
        linux: Some(api::LinuxPodSandboxConfig {
            security_context: Some(api::LinuxSandboxSecurityContext {
                namespace_options: Some(namespaces),
                privileged,
                run_as_user: pod_sc.run_as_user.map(|value| api::Int64Value { value }),
                run_as_group: pod_sc.run_as_group.map(|value| api::Int64Value { value }),
                supplemental_groups: pod_sc.supplemental_groups.unwrap_or_default(),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The cluster DNS settings pods with `dnsPolicy: ClusterFirst` get.
#[derive(Clone, Debug, Default)]
pub struct DnsSettings {
    /// DNS servers; none: the host's resolver settings.
    pub servers: Vec<String>,
    /// The cluster domain.
    pub domain: String,
}

fn dns_config(pod: &Pod, namespace: &str, dns: &DnsSettings) -> Option<api::DnsConfig> {
    let spec = pod.spec.as_ref()?;
    let policy = spec.dns_policy.as_deref().unwrap_or("ClusterFirst");
    let cluster = match policy {
        "ClusterFirst" => !spec.host_network.unwrap_or(false),
        "ClusterFirstWithHostNet" => true,
        _ => false,
    };
    let mut config = api::DnsConfig::default();
    if cluster && !dns.servers.is_empty() {
        let d = &dns.domain;
        config.servers = dns.servers.clone();
        config.searches = vec![
            format!("{namespace}.svc.{d}"),
            format!("svc.{d}"),
            d.clone(),
        ];
        config.options = vec!["ndots:5".into()];
    }
    if let Some(custom) = &spec.dns_config {
        config
            .servers
            .extend(custom.nameservers.iter().flatten().cloned());
        config
            .searches
            .extend(custom.searches.iter().flatten().cloned());
        for o in custom.options.iter().flatten() {
            let name = o.name.clone().unwrap_or_default();
            config.options.push(match &o.value {
                Some(v) => format!("{name}:{v}"),
                None => name,
            });
        }
    }
    let empty =
        config.servers.is_empty() && config.searches.is_empty() && config.options.is_empty();
    (!empty || policy == "None").then_some(config)
}

fn port_mappings(containers: &[Container]) -> Vec<api::PortMapping> {
    containers
        .iter()
        .flat_map(|c| c.ports.iter().flatten())
        .filter_map(|p| {
            let host_port = p.host_port.filter(|&h| h > 0)?;
            let protocol = match p.protocol.as_deref() {
                Some("UDP") => api::Protocol::Udp,
                Some("SCTP") => api::Protocol::Sctp,
                _ => api::Protocol::Tcp,
            };
            Some(api::PortMapping {
                protocol: protocol as i32,
                container_port: p.container_port,
                host_port,
                host_ip: p.host_ip.clone().unwrap_or_default(),
            })
        })
        .collect()
}

fn identity_labels(id: &PodId) -> [(String, String); 4] {
    [
        (POD_NAME.into(), id.name.clone()),
        (POD_NAMESPACE.into(), id.namespace.clone()),
        (POD_UID.into(), id.uid.clone()),
        (MANAGED.into(), "true".into()),
    ]
}

/// The config of a container's attempt `attempt`, with its resolved env and mounts.
pub fn container_config(
    id: &PodId,
    c: &Container,
    attempt: u32,
    envs: Vec<(String, String)>,
    mounts: Vec<api::Mount>,
) -> api::ContainerConfig {
    let mut labels: HashMap<String, String> = identity_labels(id).into_iter().collect();
    labels.insert(CONTAINER_NAME.into(), c.name.clone());
    api::ContainerConfig {
        metadata: Some(api::ContainerMetadata {
            name: c.name.clone(),
            attempt,
        }),
        image: Some(api::ImageSpec {
            image: c.image.clone().unwrap_or_default(),
            ..Default::default()
        }),
        command: c.command.clone().unwrap_or_default(),
        args: c.args.clone().unwrap_or_default(),
        working_dir: c.working_dir.clone().unwrap_or_default(),
        envs: envs
            .into_iter()
            .map(|(key, value)| api::KeyValue { key, value })
            .collect(),
        mounts,
        labels,
        log_path: format!("{}/{attempt}.log", c.name),
        stdin: c.stdin.unwrap_or(false),
        stdin_once: c.stdin_once.unwrap_or(false),
        tty: c.tty.unwrap_or(false),
        linux: Some(api::LinuxContainerConfig {
            resources: Some(resources(c)),
            security_context: Some(security_context(c)),
        }),
        ..Default::default()
    }
}

/// cgroup settings from the container's requests and limits (as the kubelet maps them).
fn resources(c: &Container) -> api::LinuxContainerResources {
    let r = c.resources.clone().unwrap_or_default();
    let get = |m: &Option<
        std::collections::BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>,
    >,
               k: &str| { m.as_ref().and_then(|m| m.get(k)).map(|q| q.0.clone()) };
    let cpu_request = get(&r.requests, "cpu").or_else(|| get(&r.limits, "cpu"));
    let cpu_limit = get(&r.limits, "cpu");
    let memory_limit = get(&r.limits, "memory");
    const PERIOD: i64 = 100_000;
    let shares = cpu_request
        .and_then(|q| quantity::milli(&q))
        .map_or(2, |m| (m * 1024 / 1000).max(2));
    let quota = cpu_limit
        .and_then(|q| quantity::milli(&q))
        .map_or(0, |m| (m * PERIOD / 1000).max(1000));
    api::LinuxContainerResources {
        cpu_period: if quota > 0 { PERIOD } else { 0 },
        cpu_quota: quota,
        cpu_shares: shares,
        memory_limit_in_bytes: memory_limit.and_then(|q| quantity::units(&q)).unwrap_or(0),
        oom_score_adj: 0,
        ..Default::default()
    }
}

fn security_context(c: &Container) -> api::LinuxContainerSecurityContext {
    let sc = c.security_context.clone().unwrap_or_default();
    let caps = sc.capabilities.clone().unwrap_or_default();
    api::LinuxContainerSecurityContext {
        capabilities: Some(api::Capability {
            add_capabilities: caps.add.unwrap_or_default(),
            drop_capabilities: caps.drop.unwrap_or_default(),
            ..Default::default()
        }),
        privileged: sc.privileged.unwrap_or(false),
        run_as_user: sc.run_as_user.map(|value| api::Int64Value { value }),
        run_as_group: sc.run_as_group.map(|value| api::Int64Value { value }),
        readonly_rootfs: sc.read_only_root_filesystem.unwrap_or(false),
        no_new_privs: !sc.allow_privilege_escalation.unwrap_or(true),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn pod(spec: serde_json::Value) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "web", "namespace": "shop", "uid": "u1", "labels": {"app": "web"}},
            "spec": spec,
        }))
        .unwrap()
    }

    #[test]
    fn a_sandbox_carries_the_pod_identity_log_dir_and_host_ports() {
        let p = pod(json!({"containers": [{"name": "c", "image": "busybox",
            "ports": [{"containerPort": 80, "hostPort": 8080}, {"containerPort": 81}]}]}));
        let id = PodId::of(&p).unwrap();
        let s = sandbox_config(
            &p,
            &id,
            2,
            Path::new("/var/log/pods"),
            &DnsSettings::default(),
        );
        let m = s.metadata.unwrap();
        assert_eq!(
            (
                m.name.as_str(),
                m.namespace.as_str(),
                m.uid.as_str(),
                m.attempt
            ),
            ("web", "shop", "u1", 2)
        );
        assert_eq!(s.hostname, "web");
        assert_eq!(s.log_directory, "/var/log/pods/shop_web_u1");
        assert_eq!(s.labels["app"], "web");
        assert_eq!(s.labels[POD_UID], "u1");
        assert_eq!(s.port_mappings.len(), 1);
        assert_eq!(
            (
                s.port_mappings[0].container_port,
                s.port_mappings[0].host_port
            ),
            (80, 8080)
        );
        assert!(
            s.dns_config.is_none(),
            "no cluster DNS configured: the host's"
        );
    }

    #[test]
    fn a_host_network_sandbox_gets_no_hostname_and_the_node_namespace() {
        let p = pod(json!({"hostNetwork": true, "containers": [{"name": "c"}]}));
        let id = PodId::of(&p).unwrap();
        let s = sandbox_config(&p, &id, 0, Path::new("/l"), &DnsSettings::default());
        assert_eq!(s.hostname, "");
        let ns = s
            .linux
            .unwrap()
            .security_context
            .unwrap()
            .namespace_options
            .unwrap();
        assert_eq!(ns.network, api::NamespaceMode::Node as i32);
    }

    #[test]
    fn limits_become_cgroup_settings() {
        let p = pod(json!({"containers": [{"name": "c", "resources": {
            "requests": {"cpu": "250m"}, "limits": {"cpu": "500m", "memory": "64Mi"}},
            "securityContext": {"runAsUser": 1000, "readOnlyRootFilesystem": true}}]}));
        let id = PodId::of(&p).unwrap();
        let c = container_config(&id, container(&p, "c").unwrap(), 3, vec![], vec![]);
        let linux = c.linux.unwrap();
        let r = linux.resources.unwrap();
        assert_eq!(
            (r.cpu_shares, r.cpu_quota, r.cpu_period),
            (256, 50_000, 100_000)
        );
        assert_eq!(r.memory_limit_in_bytes, 64 << 20);
        let sc = linux.security_context.unwrap();
        assert_eq!(sc.run_as_user.map(|u| u.value), Some(1000));
        assert!(sc.readonly_rootfs);
        assert_eq!(c.log_path, "c/3.log");
    }

    #[test]
    fn cluster_first_pods_get_the_cluster_dns_when_one_is_configured() {
        let p = pod(json!({"containers": [{"name": "c"}]}));
        let dns = DnsSettings {
            servers: vec!["10.96.0.10".into()],
            domain: "cluster.local".into(),
        };
        let c = dns_config(&p, "shop", &dns).unwrap();
        assert_eq!(c.servers, ["10.96.0.10"]);
        assert_eq!(c.searches[0], "shop.svc.cluster.local");
    }
}
