//! The pods' usage from CRI. Containers come from `ListContainerStats`; a pod's CPU, memory
//! and network from `ListPodSandboxStats` when the runtime serves it. containerd 1.6 answers
//! that call only for sandboxes with a cgroup parent, so when it fails the pod's CPU and memory
//! are the sums of its containers' (what the kubelet's fallback reads from the pod's cgroup,
//! less the pause process) and its network is left out.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::time::SystemTime;

use cri::api;

use super::node::filesystem;
use super::types::{ContainerStats, CpuStats, FsStats, MemoryStats, NetworkStats, PodStats};
use super::types::{InterfaceStats, PodReference};
use super::{Sources, at, time};
use crate::error::EdgedError;
use crate::spec::{CONTAINER_NAME, MANAGED, POD_NAME, POD_NAMESPACE, POD_UID, PodId};

/// The pods' statistics and the rate keys they used.
pub struct Collected {
    /// One entry per pod with a ready sandbox.
    pub stats: Vec<PodStats>,
    /// The container ids and `pod/<uid>` keys seen (the others' samples are dropped).
    pub keys: Vec<String>,
}

/// Reads the usage of every pod edged runs and of its running containers; `now` stamps what
/// the runtime does not (the log files).
pub async fn collect(sources: &Sources<'_>, now: SystemTime) -> Result<Collected, EdgedError> {
    let cri = sources.cri;
    let managed = HashMap::from([(MANAGED.to_string(), "true".to_string())]);
    let ready = api::PodSandboxStateValue {
        state: api::PodSandboxState::SandboxReady as i32,
    };
    let sandboxes = cri
        .list_pod_sandboxes(Some(api::PodSandboxFilter {
            state: Some(ready),
            label_selector: managed.clone(),
            ..Default::default()
        }))
        .await?;
    let running = api::ContainerStateValue {
        state: api::ContainerState::ContainerRunning as i32,
    };
    let started: HashMap<String, i64> = cri
        .list_containers(Some(api::ContainerFilter {
            state: Some(running),
            label_selector: managed.clone(),
            ..Default::default()
        }))
        .await?
        .into_iter()
        .map(|c| (c.id, c.created_at))
        .collect();
    let containers = cri
        .list_container_stats(Some(api::ContainerStatsFilter {
            label_selector: managed.clone(),
            ..Default::default()
        }))
        .await?;
    let filter = api::PodSandboxStatsFilter {
        label_selector: managed,
        ..Default::default()
    };
    let by_sandbox: HashMap<String, api::LinuxPodSandboxStats> =
        match cri.list_pod_sandbox_stats(Some(filter)).await {
            Ok(all) => all
                .into_iter()
                .filter_map(|s| Some((s.attributes?.id, s.linux?)))
                .collect(),
            Err(e) => {
                tracing::debug!(error = %e, "no sandbox stats: pods are their containers' sums");
                HashMap::new()
            }
        };
    let containers = containers.into_iter().filter(|c| {
        let id = c.attributes.as_ref().map(|a| a.id.as_str());
        started.contains_key(id.unwrap_or_default())
    });
    let inputs = Inputs {
        sandboxes: latest(sandboxes),
        started: &started,
        by_sandbox: &by_sandbox,
        now,
    };
    Ok(assemble(sources, inputs, containers.collect()))
}

/// The newest ready sandbox of each pod, by uid.
fn latest(sandboxes: Vec<api::PodSandbox>) -> BTreeMap<String, api::PodSandbox> {
    let mut by_uid: BTreeMap<String, api::PodSandbox> = BTreeMap::new();
    for s in sandboxes {
        let uid = s.labels.get(POD_UID).cloned().unwrap_or_default();
        if by_uid.get(&uid).is_none_or(|o| o.created_at < s.created_at) {
            by_uid.insert(uid, s);
        }
    }
    by_uid
}

/// What the runtime reported besides the containers' statistics.
struct Inputs<'a> {
    /// The newest ready sandbox of each pod, by uid.
    sandboxes: BTreeMap<String, api::PodSandbox>,
    /// When each running container was created, by id.
    started: &'a HashMap<String, i64>,
    /// Each sandbox's statistics, by id, if the runtime gave them.
    by_sandbox: &'a HashMap<String, api::LinuxPodSandboxStats>,
    /// Now, by edged's clock.
    now: SystemTime,
}

/// Puts each container's statistics into its pod's and computes the CPU rates.
fn assemble(
    sources: &Sources<'_>,
    inputs: Inputs<'_>,
    containers: Vec<api::ContainerStats>,
) -> Collected {
    let (started, by_sandbox) = (inputs.started, inputs.by_sandbox);
    let mut rates = sources
        .stats
        .rates
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    let mut keys = Vec::new();
    let mut per_pod: HashMap<String, Vec<(ContainerStats, Option<api::CpuUsage>)>> = HashMap::new();
    for c in containers {
        let Some(attributes) = c.attributes.as_ref() else {
            continue;
        };
        let label = |k: &str| attributes.labels.get(k).cloned().unwrap_or_default();
        let id = PodId {
            namespace: label(POD_NAMESPACE),
            name: label(POD_NAME),
            uid: label(POD_UID),
        };
        let name = attributes.metadata.as_ref().map(|m| m.name.clone());
        let name = name.unwrap_or_else(|| label(CONTAINER_NAME));
        keys.push(attributes.id.clone());
        let cpu = c.cpu;
        let stats = ContainerStats {
            start_time: time(at(started.get(&attributes.id).copied().unwrap_or(0))),
            cpu: cpu
                .as_ref()
                .and_then(|u| cpu_stats(&mut rates, &attributes.id, u)),
            memory: c.memory.as_ref().map(memory_stats),
            rootfs: c
                .writable_layer
                .as_ref()
                .map(|w| writable_layer(w, c.cpu.as_ref())),
            logs: logs(&id.log_dir(sources.logs).join(&name), inputs.now),
            name,
        };
        per_pod.entry(id.uid).or_default().push((stats, cpu));
    }
    let mut stats = Vec::new();
    for (uid, sandbox) in inputs.sandboxes {
        let mut containers = per_pod.remove(&uid).unwrap_or_default();
        containers.sort_by(|a, b| a.0.name.cmp(&b.0.name));
        let key = format!("pod/{uid}");
        let linux = by_sandbox.get(&sandbox.id);
        let usage = linux.and_then(|l| l.cpu);
        let usage = usage.or_else(|| sum_cpu(containers.iter().filter_map(|c| c.1.as_ref())));
        let memory = linux.and_then(|l| l.memory.as_ref()).map(memory_stats);
        let memory = memory.or_else(|| sum_memory(containers.iter().map(|c| &c.0)));
        let meta = sandbox.metadata.unwrap_or_default();
        stats.push(PodStats {
            pod_ref: PodReference {
                name: meta.name,
                namespace: meta.namespace,
                uid: uid.clone(),
            },
            start_time: time(at(sandbox.created_at)),
            cpu: usage.and_then(|u| cpu_stats(&mut rates, &key, &u)),
            memory,
            network: linux
                .and_then(|l| l.network.as_ref())
                .and_then(network_stats),
            containers: containers.into_iter().map(|c| c.0).collect(),
        });
        keys.push(key);
    }
    Collected { stats, keys }
}

/// CPU statistics of `usage`, its rate computed from the previous sample of `key` unless the
/// runtime gave one.
fn cpu_stats(rates: &mut super::rate::Rates, key: &str, usage: &api::CpuUsage) -> Option<CpuStats> {
    let used = usage.usage_core_nano_seconds.as_ref()?.value;
    let observed = rates.observe(key, usage.timestamp, used);
    let given = usage.usage_nano_cores.as_ref().map(|v| v.value);
    Some(CpuStats {
        time: time(at(usage.timestamp)),
        usage_nano_cores: given.or(observed),
        usage_core_nano_seconds: Some(used),
    })
}

fn memory_stats(m: &api::MemoryUsage) -> MemoryStats {
    MemoryStats {
        time: time(at(m.timestamp)),
        available_bytes: m.available_bytes.as_ref().map(|v| v.value),
        usage_bytes: m.usage_bytes.as_ref().map(|v| v.value),
        working_set_bytes: m.working_set_bytes.as_ref().map(|v| v.value),
        rss_bytes: m.rss_bytes.as_ref().map(|v| v.value),
    }
}

fn network_stats(n: &api::NetworkUsage) -> Option<NetworkStats> {
    let interface = |i: &api::NetworkInterfaceUsage| InterfaceStats {
        name: i.name.clone(),
        rx_bytes: i.rx_bytes.as_ref().map(|v| v.value),
        rx_errors: i.rx_errors.as_ref().map(|v| v.value),
        tx_bytes: i.tx_bytes.as_ref().map(|v| v.value),
        tx_errors: i.tx_errors.as_ref().map(|v| v.value),
    };
    Some(NetworkStats {
        time: time(at(n.timestamp)),
        default: interface(n.default_interface.as_ref()?),
        interfaces: n.interfaces.iter().map(interface).collect(),
    })
}

/// The writable layer's usage, with its filesystem's size when the mountpoint is readable;
/// stamped with the CPU sample's time when the runtime gives none (containerd 1.6).
fn writable_layer(w: &api::FilesystemUsage, cpu: Option<&api::CpuUsage>) -> FsStats {
    let stamp = if w.timestamp > 0 {
        w.timestamp
    } else {
        cpu.map_or(0, |c| c.timestamp)
    };
    let t = at(stamp);
    let mountpoint = w.fs_id.as_ref().map(|f| Path::new(&f.mountpoint));
    let fs = mountpoint
        .filter(|m| m.is_dir())
        .and_then(|m| filesystem(m, t));
    let fs = fs.unwrap_or_else(|| empty_fs(t));
    FsStats {
        used_bytes: w.used_bytes.as_ref().map(|v| v.value),
        inodes_used: w.inodes_used.as_ref().map(|v| v.value),
        ..fs
    }
}

/// The container's log files (every restart's) on the logs filesystem.
fn logs(dir: &Path, now: SystemTime) -> Option<FsStats> {
    let fs = filesystem(dir, now)?;
    let files: Vec<u64> = std::fs::read_dir(dir)
        .map(|d| {
            d.flatten()
                .filter_map(|e| e.metadata().ok())
                .map(|m| m.len())
                .collect()
        })
        .unwrap_or_default();
    Some(FsStats {
        used_bytes: Some(files.iter().sum()),
        inodes_used: Some(files.len() as u64),
        ..fs
    })
}

fn empty_fs(t: SystemTime) -> FsStats {
    FsStats {
        time: time(t),
        available_bytes: None,
        capacity_bytes: None,
        used_bytes: None,
        inodes_free: None,
        inodes: None,
        inodes_used: None,
    }
}

/// The containers' CPU added up, stamped with the newest sample.
fn sum_cpu<'a>(usages: impl Iterator<Item = &'a api::CpuUsage>) -> Option<api::CpuUsage> {
    usages.fold(None, |acc: Option<api::CpuUsage>, u| {
        let used = u.usage_core_nano_seconds.as_ref().map_or(0, |v| v.value);
        let mut acc = acc.unwrap_or_default();
        let total = acc.usage_core_nano_seconds.map_or(0, |v| v.value) + used;
        acc.usage_core_nano_seconds = Some(api::UInt64Value { value: total });
        acc.timestamp = acc.timestamp.max(u.timestamp);
        Some(acc)
    })
}

/// The containers' memory added up, stamped with the newest sample.
fn sum_memory<'a>(containers: impl Iterator<Item = &'a ContainerStats>) -> Option<MemoryStats> {
    let add = |a: Option<u64>, b: Option<u64>| Some(a.unwrap_or(0) + b?);
    containers
        .filter_map(|c| c.memory.clone())
        .reduce(|a, b| MemoryStats {
            time: if a.time.0 > b.time.0 { a.time } else { b.time },
            available_bytes: None,
            usage_bytes: add(a.usage_bytes, b.usage_bytes),
            working_set_bytes: add(a.working_set_bytes, b.working_set_bytes),
            rss_bytes: add(a.rss_bytes, b.rss_bytes),
        })
        .map(|m| MemoryStats {
            available_bytes: None,
            ..m
        })
}
