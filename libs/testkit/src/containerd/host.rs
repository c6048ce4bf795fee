//! The host side of the harness: finding its processes, mounts, bridge, iptables rules and CNI
//! files, and removing them. Every function here is best effort: it warns and goes on.

use std::collections::BTreeSet;
use std::ffi::OsStr;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rustix::process::{Pid, Signal};
use sha2::{Digest, Sha256};

use super::warn;

const CNI_RESULTS: &str = "/var/lib/cni/results";
const SHIM_SOCKETS: &str = "/run/containerd/s";
const SHIM: &str = "containerd-shim-runc-v2";
const IP_FORWARD: &str = "/proc/sys/net/ipv4/ip_forward";
/// Chains portmap shares between all networks; removed only when no host port is left.
const HOSTPORT_CHAINS: [&str; 3] = [
    "CNI-HOSTPORT-DNAT",
    "CNI-HOSTPORT-MASQ",
    "CNI-HOSTPORT-SETMARK",
];

/// The absolute path of `name` on PATH (or the usual sbin directories root has).
pub(super) fn which(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let usual = OsStr::new("/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin");
    std::env::split_paths(&path)
        .chain(std::env::split_paths(usual))
        .map(|dir| dir.join(name))
        .find(|file| {
            std::fs::metadata(file)
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

/// Every process with a command line (not kernel threads or zombies): pid and arguments.
pub(super) fn processes() -> Vec<(u32, Vec<String>)> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| {
            let pid = entry.file_name().to_str()?.parse().ok()?;
            let raw = std::fs::read(entry.path().join("cmdline")).ok()?;
            let args: Vec<String> = raw
                .split(|b| *b == 0)
                .filter(|a| !a.is_empty())
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect();
            (!args.is_empty()).then_some((pid, args))
        })
        .collect()
}

pub(super) fn signal(pid: u32, signal: Signal) {
    let Some(pid) = i32::try_from(pid).ok().and_then(Pid::from_raw) else {
        return;
    };
    if let Err(e) = rustix::process::kill_process(pid, signal) {
        warn(format_args!("signalling {pid:?}: {e}"));
    }
}

/// SIGKILLs the shims started with `-address <socket>` and waits (bounded) until they are gone.
pub(super) fn kill_shims(socket: &Path) {
    let socket = socket.to_string_lossy();
    let shims: Vec<u32> = processes()
        .into_iter()
        .filter(|(_, args)| {
            args.windows(2)
                .any(|w| w[0] == "-address" && w[1] == socket)
        })
        .map(|(pid, _)| pid)
        .collect();
    for pid in &shims {
        signal(*pid, Signal::KILL);
    }
    let deadline = Instant::now() + Duration::from_secs(3);
    while shims.iter().any(|pid| alive(*pid)) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `runc delete -f` every container under each namespace directory of `runc_root`.
pub(super) fn delete_runc_containers(runc: &Path, runc_root: &Path) {
    let Ok(namespaces) = std::fs::read_dir(runc_root) else {
        return;
    };
    for namespace in namespaces.flatten().map(|e| e.path()) {
        let Ok(out) = Command::new(runc)
            .arg("--root")
            .arg(&namespace)
            .args(["list", "-q"])
            .output()
        else {
            continue;
        };
        for id in String::from_utf8_lossy(&out.stdout).split_whitespace() {
            let deleted = Command::new(runc)
                .arg("--root")
                .arg(&namespace)
                .args(["delete", "-f", id])
                .stdout(Stdio::null())
                .status();
            if !deleted.is_ok_and(|s| s.success()) {
                warn(format_args!("runc delete -f {id} failed"));
            }
        }
    }
}

/// Removes the sockets shims leave in /run/containerd/s when killed: each is named by
/// sha256("<containerd socket>/<namespace>/<id>") of a task bundle under `state`.
pub(super) fn remove_shim_sockets(socket: &Path, state: &Path) {
    let tasks = state.join("io.containerd.runtime.v2.task");
    for namespace in std::fs::read_dir(tasks).into_iter().flatten().flatten() {
        for task in std::fs::read_dir(namespace.path())
            .into_iter()
            .flatten()
            .flatten()
        {
            let key = format!(
                "{}/{}/{}",
                socket.display(),
                namespace.file_name().to_string_lossy(),
                task.file_name().to_string_lossy()
            );
            let file = Path::new(SHIM_SOCKETS).join(format!("{:x}", Sha256::digest(key)));
            let _ = std::fs::remove_file(file);
        }
    }
}

/// The mount points at or under `root`, deepest first.
pub(super) fn mounts_under(root: &Path) -> impl Iterator<Item = PathBuf> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let mut mounts: Vec<PathBuf> = info
        .lines()
        .filter_map(|line| line.split(' ').nth(4))
        .map(|field| PathBuf::from(unescape_mount_path(field)))
        .filter(|point| point.starts_with(root))
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    mounts.sort_by_key(|point| std::cmp::Reverse(point.components().count()));
    mounts.into_iter()
}

/// Lazily unmounts (`umount -l`) everything under `root`, deepest first, until nothing is left.
pub(super) fn unmount_under(root: &Path) {
    for _ in 0..5 {
        let mounts: Vec<PathBuf> = mounts_under(root).collect();
        if mounts.is_empty() {
            return;
        }
        for point in mounts {
            // EINVAL: already gone with a parent that was detached first.
            let _ = rustix::mount::unmount(&point, rustix::mount::UnmountFlags::DETACH);
        }
    }
    for point in mounts_under(root) {
        warn(format_args!("still mounted: {}", point.display()));
    }
}

pub(super) fn link_exists(name: &str) -> bool {
    Path::new("/sys/class/net").join(name).exists()
}

/// Whether the routing table has a route to `<prefix>.0`.
pub(super) fn route_exists(prefix: [u8; 3]) -> bool {
    let [a, b, c] = prefix;
    let destination = format!("{:08X}", u32::from_le_bytes([a, b, c, 0]));
    let routes = std::fs::read_to_string("/proc/net/route").unwrap_or_default();
    routes
        .lines()
        .any(|line| line.split_whitespace().nth(1) == Some(destination.as_str()))
}

/// `ip link del <bridge>`; without iproute2 the bridge stays, with a warning.
pub(super) fn delete_bridge(bridge: &str) {
    if !link_exists(bridge) {
        return;
    }
    let Some(ip) = which("ip") else {
        warn(format_args!(
            "cannot delete bridge {bridge}: `ip` (package iproute2) is missing"
        ));
        return;
    };
    if !run(Command::new(ip).args(["link", "del", bridge])) {
        warn(format_args!("ip link del {bridge} failed"));
    }
}

/// The `iptables -S` rules (nat and filter tables) that contain one of `matchers`.
pub(super) fn iptables_rules(matchers: &[String]) -> impl Iterator<Item = (&'static str, String)> {
    ["nat", "filter"].into_iter().flat_map(move |table| {
        let matchers = matchers.to_vec();
        list_rules(table).into_iter().filter_map(move |rule| {
            let padded = format!("{rule} ");
            let ours = rule.starts_with("-A ") && matchers.iter().any(|m| padded.contains(m));
            ours.then_some((table, rule))
        })
    })
}

/// Deletes this network's iptables rules, the per-pod chains (CNI-DN-*, CNI-SN-*) they belong
/// to or jump to, and portmap's shared chains once no host port is left in them.
pub(super) fn remove_iptables_rules(matchers: &[String]) {
    let Some(iptables) = which("iptables") else {
        return;
    };
    let mut chains = BTreeSet::new();
    for (table, rule) in iptables_rules(matchers).collect::<Vec<_>>() {
        let args = split_rule(&rule);
        for chain in [args.get(1), jump_target(&args)].into_iter().flatten() {
            if chain.starts_with("CNI-DN-") || chain.starts_with("CNI-SN-") {
                chains.insert((table, chain.clone()));
            }
        }
        delete_rule(&iptables, table, args);
    }
    for (table, chain) in chains {
        remove_chain(&iptables, table, &chain);
    }
    let dnat_rules = list_rules("nat");
    let dnat_in_use = dnat_rules
        .iter()
        .any(|r| r.starts_with("-A CNI-HOSTPORT-DNAT "));
    let dnat_exists = dnat_rules.iter().any(|r| r == "-N CNI-HOSTPORT-DNAT");
    if dnat_exists && !dnat_in_use {
        for chain in HOSTPORT_CHAINS {
            remove_chain(&iptables, "nat", chain);
        }
    }
}

/// Removes the CNI result cache files of `network` and of the loopback network of the same
/// sandboxes.
pub(super) fn remove_cni_results(network: &str) {
    let prefix = format!("{network}-");
    for file in cni_results(network).collect::<Vec<_>>() {
        let name = file
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned();
        // <network>-<sandbox id>-<interface>
        if let Some((id, _)) = name[prefix.len()..].rsplit_once('-') {
            let loopback = Path::new(CNI_RESULTS).join(format!("cni-loopback-{id}-lo"));
            let _ = std::fs::remove_file(loopback);
        }
        let _ = std::fs::remove_file(file);
    }
}

/// The CNI result cache files of `network`.
pub(super) fn cni_results(network: &str) -> impl Iterator<Item = PathBuf> {
    let prefix = format!("{network}-");
    std::fs::read_dir(CNI_RESULTS)
        .into_iter()
        .flatten()
        .flatten()
        .filter(move |e| e.file_name().to_string_lossy().starts_with(&prefix))
        .map(|e| e.path())
}

pub(super) fn ip_forward() -> Option<String> {
    std::fs::read_to_string(IP_FORWARD)
        .ok()
        .map(|v| v.trim().to_string())
}

/// Turns IP forwarding off again if it was off before the harness started and no other
/// harness's bridge is up (the bridge plugin turns it on; a bridge of ours needs it no more).
pub(super) fn restore_ip_forward(before: Option<&str>) {
    if before != Some("0") || ip_forward().as_deref() != Some("1") {
        return;
    }
    let links = std::fs::read_dir("/sys/class/net")
        .into_iter()
        .flatten()
        .flatten();
    if links
        .into_iter()
        .any(|l| l.file_name().to_string_lossy().starts_with("kecri"))
    {
        return;
    }
    if let Err(e) = std::fs::write(IP_FORWARD, "0") {
        warn(format_args!("restoring {IP_FORWARD}: {e}"));
    }
}

/// Removes the shared directories containerd, CNI and runc create outside the root (shim
/// sockets, CNI results, the `k8s.io` cgroups) when they are empty and no shim runs anywhere.
pub(super) fn remove_empty_shared_dirs() {
    let shim_running = processes().iter().any(|(_, args)| args[0].ends_with(SHIM));
    if shim_running {
        return;
    }
    let cgroups = std::fs::read_dir("/sys/fs/cgroup")
        .into_iter()
        .flatten()
        .flatten();
    let dirs = [SHIM_SOCKETS, "/run/containerd", CNI_RESULTS, "/var/lib/cni"].map(PathBuf::from);
    for dir in dirs
        .into_iter()
        .chain(cgroups.map(|c| c.path().join("k8s.io")))
    {
        // Fails, as it should, on a directory that is not empty.
        let _ = std::fs::remove_dir(dir);
    }
}

fn alive(pid: u32) -> bool {
    // The state is the field after the parenthesised command name.
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let state = stat
        .rsplit_once(") ")
        .and_then(|(_, rest)| rest.chars().next());
    state.is_some_and(|s| s != 'Z' && s != 'X')
}

fn list_rules(table: &str) -> Vec<String> {
    let Some(iptables) = which("iptables") else {
        return Vec::new();
    };
    let out = Command::new(iptables)
        .args(["-w", "-t", table, "-S"])
        .output();
    let stdout = out.map(|o| o.stdout).unwrap_or_default();
    String::from_utf8_lossy(&stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

fn delete_rule(iptables: &Path, table: &str, mut args: Vec<String>) {
    args[0] = "-D".to_string();
    if !run(Command::new(iptables).args(["-w", "-t", table]).args(&args)) {
        warn(format_args!(
            "iptables -t {table} {} failed",
            args.join(" ")
        ));
    }
}

/// Deletes every rule that jumps to `chain`, then flushes and deletes it.
fn remove_chain(iptables: &Path, table: &str, chain: &str) {
    for rule in list_rules(table) {
        let args = split_rule(&rule);
        if args[0] == "-A" && jump_target(&args).is_some_and(|t| t == chain) {
            delete_rule(iptables, table, args);
        }
    }
    let ipt = |op: &str| run(Command::new(iptables).args(["-w", "-t", table, op, chain]));
    if !(ipt("-F") && ipt("-X")) {
        warn(format_args!(
            "removing iptables chain {table}/{chain} failed"
        ));
    }
}

fn jump_target(args: &[String]) -> Option<&String> {
    let at = args.iter().position(|a| a == "-j" || a == "-g")?;
    args.get(at + 1)
}

/// Splits an `iptables -S` line into arguments: words, or "double quoted" with `\"` escapes.
fn split_rule(rule: &str) -> Vec<String> {
    let mut args = Vec::new();
    let mut chars = rule.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            ' ' => continue,
            '"' => {
                let mut arg = String::new();
                while let Some(c) = chars.next() {
                    match c {
                        '\\' => arg.extend(chars.next()),
                        '"' => break,
                        c => arg.push(c),
                    }
                }
                args.push(arg);
            }
            c => {
                let mut arg = String::from(c);
                while let Some(c) = chars.next_if(|c| *c != ' ') {
                    arg.push(c);
                }
                args.push(arg);
            }
        }
    }
    args
}

/// `\040`-style octal escapes in /proc/self/mountinfo paths.
fn unescape_mount_path(field: &str) -> String {
    let mut out = Vec::with_capacity(field.len());
    let bytes = field.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes.get(i + 1..i + 4).and_then(|d| {
            let digits = std::str::from_utf8(d).ok()?;
            u8::from_str_radix(digits, 8).ok()
        });
        match (bytes[i], octal) {
            (b'\\', Some(byte)) => {
                out.push(byte);
                i += 4;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn run(command: &mut Command) -> bool {
    command
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iptables_lines_split_into_arguments() {
        let rule = r#"-A CNI-HOSTPORT-DNAT -p tcp -m comment --comment "dnat name: \"kecri-1\" id: \"ab\"" -j CNI-DN-123"#;
        let args = split_rule(rule);
        assert_eq!(args[..2], ["-A", "CNI-HOSTPORT-DNAT"]);
        assert_eq!(args[7], r#"dnat name: "kecri-1" id: "ab""#);
        assert_eq!(jump_target(&args).map(String::as_str), Some("CNI-DN-123"));
    }

    #[test]
    fn mount_paths_are_unescaped() {
        assert_eq!(unescape_mount_path(r"/tmp/a\040b/c"), "/tmp/a b/c");
        assert_eq!(unescape_mount_path(r"/x\y"), r"/x\y");
    }
}
