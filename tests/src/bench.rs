//! What the benchmark binaries share: a process's resident memory, latency percentiles and
//! waiting for the control plane and a node.

use std::time::Duration;

use anyhow::Context as _;

/// Resident memory (`VmRSS`) of process `pid`, in KiB.
pub fn rss_kib(pid: u32) -> anyhow::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let line = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .context("no VmRSS")?;
    Ok(line
        .split_whitespace()
        .nth(1)
        .context("VmRSS value")?
        .parse()?)
}

/// CPU time process `pid` has used (user + system, `/proc/<pid>/stat`), in clock ticks
/// (1/100 s on Linux).
pub fn cpu_ticks(pid: u32) -> anyhow::Result<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // The command name is in parentheses and may hold spaces: fields count from after it.
    let rest = stat.rsplit_once(')').context("no command name")?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the whole line, 12 and 13 after the name.
    let field = |i: usize| -> anyhow::Result<u64> {
        Ok(fields.get(i).context("short stat line")?.parse()?)
    };
    Ok(field(11)? + field(12)?)
}

/// The share of one core `pid` uses over `period` (ticks of 1/100 s), in percent.
pub async fn cpu_percent(pid: u32, period: std::time::Duration) -> anyhow::Result<f64> {
    let before = cpu_ticks(pid)?;
    tokio::time::sleep(period).await;
    let used = cpu_ticks(pid)? - before;
    Ok(used as f64 / period.as_secs_f64())
}

/// The `p` quantile (0 < p ≤ 1, nearest rank) of `sorted`, in milliseconds.
pub fn percentile_ms(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i].as_secs_f64() * 1e3
}

/// A `kube` client from the admin kubeconfig a starting control plane writes, once the API
/// answers (within 60 s).
pub async fn connect(kubeconfig: &std::path::Path) -> anyhow::Result<kube::Client> {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok(k) = kube::config::Kubeconfig::read_from(kubeconfig) {
            let config = kube::Config::from_custom_kubeconfig(k, &Default::default()).await?;
            let client = kube::Client::try_from(config)?;
            if client.apiserver_version().await.is_ok() {
                return Ok(client);
            }
        }
        anyhow::ensure!(
            std::time::Instant::now() < deadline,
            "the control plane did not answer in 60 s"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits until node `node` reports the `Ready` condition `True` in the API, within `limit`.
pub async fn wait_node_ready(
    client: &kube::Client,
    node: &str,
    limit: Duration,
) -> anyhow::Result<()> {
    let nodes: kube::Api<k8s_openapi::api::core::v1::Node> = kube::Api::all(client.clone());
    let deadline = std::time::Instant::now() + limit;
    loop {
        if let Some(n) = nodes.get_opt(node).await? {
            let ready = n
                .status
                .and_then(|s| s.conditions)
                .unwrap_or_default()
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == "True");
            if ready {
                return Ok(());
            }
        }
        anyhow::ensure!(
            std::time::Instant::now() < deadline,
            "node {node} did not report Ready in {limit:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
