//! testkit: helpers shared by the tests of every crate: one bounded `eventually`, a child process
//! that is killed when dropped, a tiny HTTP GET, and the checks every daemon's CLI must pass.
//! With the `containerd` feature: a private containerd with busybox images, for tests that run
//! real containers over CRI.
#![forbid(unsafe_code)]

#[cfg(feature = "containerd")]
pub mod containerd;
pub mod daemon_cli;
#[cfg(feature = "containerd")]
pub mod image;

use std::future::Future;
use std::net::SocketAddr;
use std::process::Child;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Polls `check` every 10 ms until it returns true; panics naming `what` after `timeout`.
pub async fn eventually<F, Fut>(what: &str, timeout: Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if check().await {
            return;
        }
        if tokio::time::Instant::now() >= deadline {
            panic!("timed out after {timeout:?} waiting for: {what}");
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A child process killed (SIGKILL) and reaped when dropped.
pub struct ChildGuard(pub Child);

impl Drop for ChildGuard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `GET path` over plain HTTP/1.1; returns the status code and the body.
pub async fn http_get(addr: SocketAddr, path: &str) -> std::io::Result<(u16, String)> {
    let mut stream = tokio::net::TcpStream::connect(addr).await?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await?;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).await?;
    let text = String::from_utf8_lossy(&raw);
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("no HTTP status line in {head:?}")))?;
    Ok((status, body.to_string()))
}
