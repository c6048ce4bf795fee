//! What the benchmark binaries share: a process's resident memory and latency percentiles.

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
