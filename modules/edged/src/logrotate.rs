//! Container log rotation, as the kubelet's container log manager does it. Every
//! `containerLogMonitorInterval` each running container's current log (CRI `ContainerStatus`'s
//! `logPath`) is checked; one of `containerLogMaxSize` or more is renamed to
//! `<log>.<UTC yyyymmdd-hhmmss>` and the runtime is told to reopen it (CRI
//! `ReopenContainerLog`), so it writes on into a new file; the older rotated files are gzipped
//! and the oldest deleted so that at most `containerLogMaxFiles` remain, the current one
//! included. What to do is planned by [`plan`] (pure); [`rotate`] does it.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use cri::{Runtime, api};
use tokio_util::sync::CancellationToken;

use crate::clock::Clock;
use crate::error::EdgedError;
use crate::spec::MANAGED;

/// How large a log may grow and how many files of it are kept.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Policy {
    /// Rotate at this size, in bytes.
    pub max_size: u64,
    /// Files kept, the current log included (at least 2).
    pub max_files: u32,
}

/// What to do to one container's log files, in this order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    /// Leftovers of an interrupted compression, rotated files already compressed, and the
    /// oldest rotated files beyond the limit.
    pub delete: Vec<PathBuf>,
    /// Rotated files to gzip into `<file>.gz`.
    pub compress: Vec<PathBuf>,
    /// The name to rename the current log to before the runtime reopens it; `None` when the
    /// log is small enough.
    pub rotate_to: Option<PathBuf>,
}

const GZ: &str = ".gz";
const TMP: &str = ".tmp";

/// Plans the rotation of `log`, `size` bytes long, whose directory holds files `siblings`
/// (names only), at `now`. Nothing is done to a log below the limit, nor to one rotated within
/// the same second (its new name is taken; it rotates at the next check).
pub fn plan(log: &Path, size: u64, siblings: &[String], policy: Policy, now: SystemTime) -> Plan {
    let mut plan = Plan::default();
    let dir = log.parent().unwrap_or(Path::new(""));
    let base = log
        .file_name()
        .map(|n| n.to_string_lossy())
        .unwrap_or_default();
    let prefix = format!("{base}.");
    let name = format!("{prefix}{}", stamp(now));
    let taken = siblings
        .iter()
        .any(|s| *s == name || *s == format!("{name}{GZ}"));
    if size < policy.max_size || taken {
        return plan;
    }
    let mut rotated: Vec<&String> = siblings.iter().filter(|s| s.starts_with(&prefix)).collect();
    rotated.sort();
    let compressed = |s: &String| siblings.contains(&format!("{s}{GZ}"));
    let (unused, mut kept): (Vec<&String>, Vec<&String>) = rotated
        .into_iter()
        .partition(|s| s.ends_with(TMP) || compressed(s));
    plan.delete.extend(unused.iter().map(|s| dir.join(s)));
    // Room for the file being rotated now and the current one.
    let keep = (policy.max_files as usize).saturating_sub(2);
    let excess = kept.len().saturating_sub(keep);
    plan.delete
        .extend(kept.drain(..excess).map(|s| dir.join(s)));
    let uncompressed = kept.iter().filter(|s| !s.ends_with(GZ));
    plan.compress.extend(uncompressed.map(|s| dir.join(s)));
    plan.rotate_to = Some(dir.join(name));
    plan
}

/// Checks every running container's log every `interval` until shutdown.
pub async fn run(
    cri: Arc<dyn Runtime>,
    clock: Clock,
    policy: Policy,
    interval: Duration,
    shutdown: CancellationToken,
) {
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            biased;
            _ = shutdown.cancelled() => return,
            _ = tick.tick() => {
                if let Err(e) = rotate_all(&*cri, &clock, policy).await {
                    tracing::warn!(error = %e, "listing containers for log rotation failed");
                }
            }
        }
    }
}

/// Rotates the log of each running container edged made that needs it.
pub async fn rotate_all(
    cri: &dyn Runtime,
    clock: &Clock,
    policy: Policy,
) -> Result<(), EdgedError> {
    let running = api::ContainerStateValue {
        state: api::ContainerState::ContainerRunning as i32,
    };
    let filter = api::ContainerFilter {
        state: Some(running),
        label_selector: [(MANAGED.to_string(), "true".to_string())].into(),
        ..Default::default()
    };
    for c in cri.list_containers(Some(filter)).await? {
        let log = match cri.container_status(&c.id).await {
            Ok(status) if !status.log_path.is_empty() => PathBuf::from(status.log_path),
            Ok(_) => continue,
            Err(e) if e.is_not_found() => continue,
            Err(e) => return Err(e.into()),
        };
        if let Err(e) = rotate(cri, &c.id, &log, policy, clock.now()).await {
            tracing::warn!(container = %c.id, log = %log.display(), error = %e, "rotating a container log failed");
        }
    }
    Ok(())
}

/// Rotates container `id`'s log `log` if it reached the limit: deletes and compresses what
/// [`plan`] says, renames the log and has the runtime reopen it (renaming it back if the runtime
/// cannot). A missing log is reopened, as the kubelet does.
pub async fn rotate(
    cri: &dyn Runtime,
    id: &str,
    log: &Path,
    policy: Policy,
    now: SystemTime,
) -> Result<(), EdgedError> {
    let size = match std::fs::metadata(log) {
        Ok(m) => m.len(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            cri.reopen_container_log(id).await?;
            return Ok(());
        }
        Err(e) => return Err(io("reading the size of", log, e)),
    };
    let dir = log.parent().unwrap_or(Path::new("."));
    let siblings = names(dir)?;
    let plan = plan(log, size, &siblings, policy, now);
    for file in &plan.delete {
        match std::fs::remove_file(file) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(io("deleting", file, e));
            }
            _ => {}
        }
    }
    let compress = plan.compress.clone();
    tokio::task::spawn_blocking(move || compress.iter().try_for_each(|f| gzip(f)))
        .await
        .map_err(|e| io("compressing logs in", dir, std::io::Error::other(e)))??;
    if let Some(to) = &plan.rotate_to {
        std::fs::rename(log, to).map_err(|e| io("renaming", log, e))?;
        if let Err(e) = cri.reopen_container_log(id).await {
            // The runtime still writes to the renamed file: give it its name back.
            std::fs::rename(to, log).map_err(|e| io("renaming back", to, e))?;
            return Err(e.into());
        }
        tracing::debug!(container = id, rotated = %to.display(), "container log rotated");
    }
    Ok(())
}

/// The names of the files in `dir`.
fn names(dir: &Path) -> Result<Vec<String>, EdgedError> {
    let entries = std::fs::read_dir(dir).map_err(|e| io("listing", dir, e))?;
    Ok(entries
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect())
}

/// Compresses `file` into `<file>.gz` (written as `<file>.gz.tmp` first, so an interrupted
/// compression leaves a file the next plan deletes) and removes it.
fn gzip(file: &Path) -> Result<(), EdgedError> {
    let gz = PathBuf::from(format!("{}{GZ}", file.display()));
    let tmp = PathBuf::from(format!("{}{TMP}", gz.display()));
    let write = || -> std::io::Result<()> {
        let mut input = std::fs::File::open(file)?;
        let output = std::fs::File::create(&tmp)?;
        let mut encoder = flate2::write::GzEncoder::new(output, flate2::Compression::default());
        std::io::copy(&mut input, &mut encoder)?;
        encoder.finish()?.flush()
    };
    write().map_err(|e| io("compressing", file, e))?;
    std::fs::rename(&tmp, &gz).map_err(|e| io("renaming", &tmp, e))?;
    std::fs::remove_file(file).map_err(|e| io("deleting", file, e))
}

/// `now` in UTC as the kubelet stamps rotated logs: `20060102-150405`.
fn stamp(now: SystemTime) -> String {
    let ts = k8s_openapi::jiff::Timestamp::try_from(now);
    let ts = ts.unwrap_or(k8s_openapi::jiff::Timestamp::UNIX_EPOCH);
    ts.strftime("%Y%m%d-%H%M%S").to_string()
}

fn io(what: &'static str, path: &Path, source: std::io::Error) -> EdgedError {
    EdgedError::Io {
        what,
        path: path.to_path_buf(),
        source,
    }
}

#[cfg(test)]
mod tests;
