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
