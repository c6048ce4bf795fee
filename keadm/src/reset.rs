//! `keadm reset`: undoes `keadm join` on this machine. It stops edgecore (its systemd unit, or
//! the process `join` started), removes the pods edged created (sandboxes and containers
//! labelled `edged.kubeedge.io/managed=true`) from the container runtime, then the config,
//! certificates and data. The node stays in the cluster: remove it there with `keadm revoke
//! <name>` (which refuses its certificates, too).

use std::io::BufRead as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use clap::Args;

use crate::join::{EdgePaths, systemctl};
use crate::{Dirs, step};

/// The label edged puts on every sandbox and container it runs.
const MANAGED: (&str, &str) = ("edged.kubeedge.io/managed", "true");
/// How long edgecore has to stop after SIGTERM.
const STOP_GRACE: Duration = Duration::from_secs(20);

#[derive(Args, Debug, Clone)]
pub struct ResetArgs {
    #[command(flatten)]
    pub dirs: Dirs,
    /// Do not ask for confirmation.
    #[arg(long)]
    pub force: bool,
}

pub async fn run(args: &ResetArgs) -> anyhow::Result<()> {
    let paths = EdgePaths::new(&args.dirs);
    let config: Option<edgecore::Config> = match paths.config.exists() {
        true => Some(daemon::load_yaml(&paths.config)?),
        false => None,
    };
    if config.is_none() && !paths.pid.exists() && !paths.unit.exists() {
        step(format!(
            "nothing to reset: no {} here",
            paths.config.display()
        ));
        return Ok(());
    }
    if !args.force && !confirm(&paths)? {
        anyhow::bail!("reset cancelled");
    }
    stop_edgecore(&paths)?;
    let mut remove: Vec<PathBuf> = vec![
        paths.config.clone(),
        paths.cert.clone(),
        paths.key.clone(),
        paths.ca_cert.clone(),
        paths.pid.clone(),
        paths.unit.clone(),
        paths.log.clone(),
    ];
    if let Some(config) = &config {
        let edged = &config.modules.edged;
        if edged.enable {
            remove_pods(&edged.remote_runtime_endpoint).await;
        }
        let db = &config.database.data_source;
        for suffix in ["", "-wal", "-shm", "-journal"] {
            let mut p = db.as_os_str().to_owned();
            p.push(suffix);
            remove.push(PathBuf::from(p));
        }
        unmount_under(&edged.root_directory);
        remove.push(edged.root_directory.clone());
        remove.push(edged.pod_logs_directory.clone());
        remove.push(edged.static_pod_path.clone());
    }
    for path in &remove {
        remove_path(path)?;
    }
    for dir in [
        args.dirs.config_dir.join("config"),
        args.dirs.config_dir.join("certs"),
        args.dirs.config_dir.join("ca"),
        args.dirs.config_dir.clone(),
        args.dirs.data_dir.clone(),
    ] {
        // Only when empty: other things (cloudcore's files) may live there.
        let _ = std::fs::remove_dir(&dir);
    }
    step(
        "reset done; to remove the node from the cluster too (and refuse its certificates): keadm revoke <name>, on the cloud",
    );
    Ok(())
}

fn confirm(paths: &EdgePaths) -> anyhow::Result<bool> {
    eprint!(
        "keadm reset stops edgecore, removes the pods it runs, {} and the node's certificates and data. Continue? [y/N] ",
        paths.config.display()
    );
    let mut line = String::new();
    std::io::stdin().lock().read_line(&mut line)?;
    Ok(matches!(line.trim(), "y" | "Y" | "yes"))
}

fn stop_edgecore(paths: &EdgePaths) -> anyhow::Result<()> {
    if let Ok(unit) = std::fs::read_to_string(&paths.unit) {
        let unit = unit.trim();
        step(format!("stopping and removing systemd unit {unit}"));
        if let Err(e) = systemctl(&["disable", "--now", unit]) {
            step(format!("warning: {e}"));
        }
        remove_path(Path::new(&format!("/etc/systemd/system/{unit}.service")))?;
        let _ = systemctl(&["daemon-reload"]);
    }
    let Ok(text) = std::fs::read_to_string(&paths.pid) else {
        return Ok(());
    };
    let Ok(pid) = text.trim().parse::<i32>() else {
        return Ok(());
    };
    let proc_dir = PathBuf::from(format!("/proc/{pid}"));
    let cmdline = std::fs::read(proc_dir.join("cmdline")).unwrap_or_default();
    if !String::from_utf8_lossy(&cmdline).contains("edgecore") {
        step(format!("edgecore (pid {pid}) is not running"));
        return Ok(());
    }
    let Some(pid) = rustix::process::Pid::from_raw(pid) else {
        return Ok(());
    };
    step(format!("stopping edgecore (pid {})", pid.as_raw_nonzero()));
    let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
    let deadline = Instant::now() + STOP_GRACE;
    while proc_dir.exists() && Instant::now() < deadline {
        if is_zombie(&proc_dir) {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    if proc_dir.exists() && !is_zombie(&proc_dir) {
        step("edgecore did not stop in time: killing it");
        let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
    }
    Ok(())
}

fn is_zombie(proc_dir: &Path) -> bool {
    std::fs::read_to_string(proc_dir.join("stat"))
        .map(|s| {
            s.rsplit_once(')')
                .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z'))
        })
        .unwrap_or(true)
}

/// Stops and removes every sandbox and container edged made.
async fn remove_pods(endpoint: &str) {
    let cri = match cri::Cri::connect(endpoint).await {
        Ok(c) => c,
        Err(e) => {
            step(format!(
                "warning: cannot reach the container runtime at {endpoint} to remove edged's pods: {e}"
            ));
            return;
        }
    };
    let managed = |labels: &std::collections::HashMap<String, String>| {
        labels.get(MANAGED.0).map(String::as_str) == Some(MANAGED.1)
    };
    let containers = cri.list_containers(None).await.unwrap_or_default();
    for c in containers.iter().filter(|c| managed(&c.labels)) {
        let _ = cri.stop_container(&c.id, 10).await;
        let _ = cri.remove_container(&c.id).await;
    }
    let sandboxes = cri.list_pod_sandboxes(None).await.unwrap_or_default();
    let mut removed = 0;
    for s in sandboxes.iter().filter(|s| managed(&s.labels)) {
        let _ = cri.stop_pod_sandbox(&s.id).await;
        if cri.remove_pod_sandbox(&s.id).await.is_ok() {
            removed += 1;
        }
    }
    step(format!("removed {removed} pod(s) edged ran"));
}

/// Unmounts what edged mounted under its root directory (tmpfs volumes), deepest first.
fn unmount_under(root: &Path) {
    let Ok(mounts) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return;
    };
    let mut points: Vec<PathBuf> = mounts
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .map(|p| PathBuf::from(p.replace("\\040", " ")))
        .filter(|p| p.starts_with(root))
        .collect();
    points.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
    for p in points {
        if let Err(e) = rustix::mount::unmount(&p, rustix::mount::UnmountFlags::DETACH) {
            step(format!("warning: cannot unmount {}: {e}", p.display()));
        }
    }
}

fn remove_path(path: &Path) -> anyhow::Result<()> {
    let meta = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    let removed = match meta.is_dir() {
        true => std::fs::remove_dir_all(path),
        false => std::fs::remove_file(path),
    };
    removed.with_context(|| format!("removing {}", path.display()))
}
