//! The checks every daemon binary passes: it starts from a YAML file, logs its listeners, serves
//! health and metrics, stops on SIGTERM, prints its default and minimal configs, and names the
//! file, line and key of a bad config.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use crate::{ChildGuard, eventually, http_get};

/// Starts `bin` with `config` (YAML text, `{tmp}` replaced by a fresh temporary directory that
/// `prepare` may fill first), checks `/healthz` and `/metrics`, sends SIGTERM and expects a clean
/// exit within five seconds.
pub async fn starts_serves_and_stops(bin: &Path, config: &str, prepare: impl FnOnce(&Path)) {
    let dir = tempfile::tempdir().unwrap();
    prepare(dir.path());
    let path = dir.path().join("config.yaml");
    std::fs::write(&path, config.replace("{tmp}", dir.path().to_str().unwrap())).unwrap();
    let mut child = Command::new(bin)
        .args(["--config", path.to_str().unwrap(), "--log-format", "json"])
        .env("RUST_LOG", "info")
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let mut guard = ChildGuard(child);
    let addr = monitor_address(stderr);
    let (status, body) = http_get(addr, "/healthz").await.unwrap();
    assert_eq!((status, body.as_str()), (200, "ok"));
    let (status, body) = http_get(addr, "/metrics").await.unwrap();
    assert_eq!(status, 200);
    assert!(body.contains("beehive_dropped_messages_total 0"), "{body}");
    let pid = guard.0.id().to_string();
    let killed = Command::new("kill").args(["-TERM", &pid]).status().unwrap();
    assert!(killed.success());
    let mut exit = None;
    eventually(
        "the daemon exits after SIGTERM",
        Duration::from_secs(5),
        || {
            exit = guard.0.try_wait().unwrap();
            std::future::ready(exit.is_some())
        },
    )
    .await;
    assert!(exit.unwrap().success(), "exit status {exit:?}");
}

/// `--defaultconfig` and `--minconfig` print YAML that the daemon itself accepts.
pub fn prints_configs_it_accepts(bin: &Path, parse: impl Fn(&str) -> Result<(), String>) {
    for flag in ["--defaultconfig", "--minconfig"] {
        let out = Command::new(bin).arg(flag).output().unwrap();
        assert!(out.status.success(), "{flag} failed");
        let text = String::from_utf8(out.stdout).unwrap();
        assert!(text.contains("apiVersion"), "{flag} printed {text}");
        parse(&text).unwrap_or_else(|e| panic!("{flag} output does not parse: {e}\n{text}"));
    }
}

/// `bin --defaultconfig` with and without `args`: the pairs of lines (trimmed) that differ, but
/// for the `root:` and `portOffset:` lines that record the flags. Both outputs have as many lines.
pub fn defaults_changed_by(bin: &Path, args: &[&str]) -> Vec<(String, String)> {
    let plain = default_config(bin, &[]);
    let moved = default_config(bin, args);
    assert_eq!(
        plain.lines().count(),
        moved.lines().count(),
        "{args:?} adds or removes lines:\n{moved}"
    );
    let recorded = |l: &str| l.starts_with("root:") || l.starts_with("portOffset:");
    plain
        .lines()
        .zip(moved.lines())
        .map(|(a, b)| (a.trim().to_string(), b.trim().to_string()))
        .filter(|(a, b)| a != b && !recorded(a))
        .collect()
}

/// With `--root R`, every default path under `rooted` (the KubeEdge and kubelet locations)
/// becomes `R/<path>`, and nothing else changes. Returns how many paths moved.
pub fn defaults_move_under_root(bin: &Path, rooted: &[&str]) -> usize {
    let root = "/srv/instance-a";
    let under = |v: &str| {
        rooted
            .iter()
            .any(|p| v == *p || v.starts_with(&format!("{p}/")))
    };
    let plain = default_config(bin, &[]);
    let expected: Vec<_> = plain
        .lines()
        .map(str::trim)
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split_once(": "))
        .filter(|(_, v)| under(v))
        .map(|(k, v)| (format!("{k}: {v}"), format!("{k}: {root}{v}")))
        .collect();
    assert_eq!(defaults_changed_by(bin, &["--root", root]), expected);
    let moved = default_config(bin, &["--root", root]);
    assert!(moved.contains(&format!("root: {root}")), "{moved}");
    expected.len()
}

/// With `--port-offset N`, each pair of `expected` lines changes as given, and every line that
/// changes is a port moved by `N`.
pub fn default_ports_move_by(bin: &Path, offset: u16, expected: &[(&str, &str)]) {
    let changed = defaults_changed_by(bin, &["--port-offset", &offset.to_string()]);
    for (from, to) in expected {
        let pair = (from.to_string(), to.to_string());
        assert!(changed.contains(&pair), "{pair:?} not in {changed:?}");
    }
    let port = |l: &str| l.rsplit([':', ' ']).next().unwrap().parse::<u32>().unwrap();
    for (from, to) in &changed {
        assert_eq!(port(to), port(from) + u32::from(offset), "{from} -> {to}");
    }
}

/// `--version` prints the binary's name and version.
pub fn prints_its_version(bin: &Path, name: &str, version: &str) {
    let out = Command::new(bin).arg("--version").output().unwrap();
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!("{name} {version}")
    );
}

/// `--help` names the default config file.
pub fn help_names_the_default_config(bin: &Path, path: &str) {
    let out = Command::new(bin).arg("--help").output().unwrap();
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(help.contains(path), "--help does not name {path}:\n{help}");
    assert!(
        help.contains("--root") && help.contains("--port-offset"),
        "{help}"
    );
}

/// `--defaultconfig` documents every option in a comment above it and prints no `null`.
pub fn documents_every_default(bin: &Path) {
    let text = default_config(bin, &[]);
    let mut previous = "";
    for line in text.lines() {
        let trimmed = line.trim();
        let option = !trimmed.is_empty() && !trimmed.starts_with('#') && !trimmed.starts_with('-');
        if option {
            assert!(
                previous.starts_with('#'),
                "no comment above {trimmed:?}:\n{text}"
            );
        }
        assert!(!trimmed.ends_with(": null"), "{trimmed:?} is null:\n{text}");
        assert!(!trimmed.ends_with(": ~"), "{trimmed:?} is null:\n{text}");
        previous = trimmed;
    }
}

fn default_config(bin: &Path, args: &[&str]) -> String {
    let out = Command::new(bin)
        .arg("--defaultconfig")
        .args(args)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "--defaultconfig {args:?} failed: {err}"
    );
    String::from_utf8(out.stdout).unwrap()
}

/// A bad config fails to start, and the error names the file, the line (when given) and the key.
/// `{tmp}` in the config is replaced by a fresh temporary directory.
pub fn refuses_a_bad_key_by_name(bin: &Path, config: &str, bad_key: &str, line: Option<usize>) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.yaml");
    std::fs::write(&path, config.replace("{tmp}", dir.path().to_str().unwrap())).unwrap();
    let out = Command::new(bin)
        .args(["--config", path.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    let at = match line {
        Some(line) => format!("{}:{line}:", path.display()),
        None => format!("{}:", path.display()),
    };
    assert!(err.contains(&at), "error does not name {at}: {err}");
    assert!(
        err.contains(bad_key),
        "error does not name key {bad_key}: {err}"
    );
}

/// Reads JSON log lines until the monitor listener reports its bound address.
fn monitor_address(stderr: std::process::ChildStderr) -> SocketAddr {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { return };
            let Ok(v) = serde_json::from_str::<serde_json::Value>(&line) else {
                continue;
            };
            let monitor = v["fields"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("monitor server"));
            if let Some(bound) = v["fields"]["bound"].as_str().filter(|_| monitor) {
                let _ = tx.send(bound.parse::<SocketAddr>().unwrap());
            }
        }
    });
    rx.recv_timeout(Duration::from_secs(10))
        .expect("the daemon logged no monitor listener address within 10 s")
}
