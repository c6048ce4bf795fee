//! The server's shutdown as a raw HTTP/1.1 watch client sees it: the watch stream ends after a
//! whole event with the chunked terminator, a normal end of stream, not a cut connection.

mod support;

use std::time::Duration;

use kapi::{ServeConfig, ServeStats};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use support::{harness, pod};

const WAIT: Duration = Duration::from_secs(10);

/// Reads from `tcp` into `seen` until it holds `what`.
async fn read_until(tcp: &mut TcpStream, seen: &mut Vec<u8>, what: &[u8]) {
    let mut buf = [0u8; 4096];
    while !seen.windows(what.len()).any(|w| w == what) {
        let n = tokio::time::timeout(WAIT, tcp.read(&mut buf))
            .await
            .expect("bytes within the wait")
            .expect("a read");
        assert!(
            n > 0,
            "the stream ended before {:?}",
            String::from_utf8_lossy(what)
        );
        seen.extend_from_slice(&buf[..n]);
    }
}

#[tokio::test]
async fn at_shutdown_an_open_watch_ends_with_the_chunked_terminator() {
    let h = harness();
    h.put("pods", pod("default", "p1", "n1")).await;
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind loopback");
    let addr = listener.local_addr().expect("an address");
    let (shutdown, tasks) = (CancellationToken::new(), TaskTracker::new());
    let server = tokio::spawn(kapi::serve(
        listener,
        None,
        h.router(),
        ServeConfig::default(),
        ServeStats::default(),
        shutdown.clone(),
        tasks.clone(),
    ));

    let mut tcp = TcpStream::connect(addr).await.expect("connected");
    let request = "GET /api/v1/namespaces/default/pods?watch=true HTTP/1.1\r\nHost: kapi\r\n\r\n";
    tcp.write_all(request.as_bytes()).await.expect("sent");
    let mut seen = Vec::new();
    read_until(&mut tcp, &mut seen, b"transfer-encoding: chunked").await;
    read_until(&mut tcp, &mut seen, b"\"ADDED\"").await;
    read_until(&mut tcp, &mut seen, b"\n\r\n").await; // the end of the event's chunk

    shutdown.cancel();
    let mut rest = Vec::new();
    tokio::time::timeout(WAIT, tcp.read_to_end(&mut rest))
        .await
        .expect("the connection closes within the wait")
        .expect("closed cleanly, not reset");
    seen.extend_from_slice(&rest);
    let text = String::from_utf8_lossy(&seen);
    assert!(
        text.ends_with("\n\r\n0\r\n\r\n"),
        "no terminator after the last event: {text:?}"
    );
    server.await.expect("the accept loop ends");
    tasks.close();
    tokio::time::timeout(WAIT, tasks.wait())
        .await
        .expect("the connection task ends");
}
