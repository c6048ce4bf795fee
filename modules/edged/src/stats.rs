//! The kubelet's resource statistics for the kubelet API: `GET /stats/summary` ([`summary`],
//! the Summary JSON of `k8s.io/kubelet/pkg/apis/stats/v1alpha1`) and `GET /metrics/resource`
//! ([`resource_metrics`], the Prometheus text metrics-server reads). Containers and pods come
//! from CRI (`ListContainerStats`, `ListPodSandboxStats`), the node from `/proc` and `statfs`.
//! Runtimes report cumulative CPU time only, so `usageNanoCores` is the growth since the
//! previous scrape, kept per container, pod and node ([`rate::Rates`]), as the kubelet does.

mod metrics;
mod node;
mod pods;
mod rate;
mod types;

use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::Shared;
use crate::error::EdgedError;

#[allow(unused_imports)] // the kubelet API (modules/edged/src/kubelet) uses it
pub(crate) use metrics::{CONTENT_TYPE as METRICS_CONTENT_TYPE, render as render_metrics};
pub(crate) use types::Summary;
use types::{CpuStats, NodeStats};

/// What the statistics keep between scrapes: the previous CPU samples.
#[derive(Debug, Default)]
pub(crate) struct Stats {
    rates: Mutex<rate::Rates>,
}

/// The rate key of the node's CPU.
const NODE_KEY: &str = "node";

/// `GET /stats/summary`: the node's and its pods' usage now.
pub(crate) async fn summary(shared: &Shared) -> Result<Summary, EdgedError> {
    let config = &shared.config;
    let sources = Sources {
        cri: &*shared.cri,
        stats: &shared.stats,
        node: &shared.node,
        root: &config.root_directory,
        logs: &config.pod_logs_directory,
    };
    collect(&sources, shared.clock.now()).await
}

/// `GET /metrics/resource` (content type [`METRICS_CONTENT_TYPE`]): the Prometheus text
/// metrics-server reads; a failed scrape answers `resource_scrape_error 1` (and the deprecated
/// `scrape_error 1`) and no other sample, as the kubelet does.
pub(crate) async fn resource_metrics(shared: &Shared) -> String {
    let summary = summary(shared).await;
    if let Err(e) = &summary {
        tracing::warn!(error = %e, "collecting resource metrics failed");
    }
    render_metrics(summary.as_ref().ok())
}

/// Where the statistics come from.
pub(crate) struct Sources<'a> {
    /// The container runtime.
    pub cri: &'a dyn cri::Runtime,
    /// The previous samples.
    pub stats: &'a Stats,
    /// The node's name.
    pub node: &'a str,
    /// The kubelet's root directory (the node's filesystem).
    pub root: &'a Path,
    /// The pod logs directory.
    pub logs: &'a Path,
}

/// The summary of the node and its pods at `now` (the node's samples are stamped `now`; the
/// runtime stamps its own).
pub(crate) async fn collect(sources: &Sources<'_>, now: SystemTime) -> Result<Summary, EdgedError> {
    let pods = pods::collect(sources, now).await?;
    let reading = node::read(now);
    let mut rates = sources
        .stats
        .rates
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    let cpu = reading.cpu_used.map(|used| CpuStats {
        time: time(now),
        usage_nano_cores: rates.observe(NODE_KEY, unix_nanos(now), used),
        usage_core_nano_seconds: Some(used),
    });
    let mut live: std::collections::HashSet<String> = pods.keys.into_iter().collect();
    live.insert(NODE_KEY.into());
    rates.retain(&live);
    drop(rates);
    Ok(Summary {
        node: NodeStats {
            node_name: sources.node.to_string(),
            start_time: time(reading.booted.unwrap_or(SystemTime::UNIX_EPOCH)),
            cpu,
            memory: reading.memory,
            network: reading.network,
            fs: node::filesystem(sources.root, now),
        },
        pods: pods.stats,
    })
}

/// `t` as a Kubernetes time.
fn time(t: SystemTime) -> Time {
    let ts = k8s_openapi::jiff::Timestamp::try_from(t);
    Time(ts.unwrap_or(k8s_openapi::jiff::Timestamp::UNIX_EPOCH))
}

/// `t` in nanoseconds since the epoch.
fn unix_nanos(t: SystemTime) -> i64 {
    let since = t.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
    i64::try_from(since.as_nanos()).unwrap_or(i64::MAX)
}

/// A CRI time (nanoseconds since the epoch).
fn at(nanos: i64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_nanos(nanos.max(0) as u64)
}

#[cfg(test)]
mod tests;
