//! Per-client caps at the edge endpoint: watches past `maxWatchesPerClient` are refused with a
//! 429 (and their connection closed), while the client's open watches and its other requests
//! are still served.

mod support;

use testkit::eventually;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use support::{Edge, Node, WAIT, pod};

const WATCHES: usize = 3;

/// Sends a GET on a new connection and returns the connection and the response head.
async fn open(edge: &Edge, path: &str) -> (TcpStream, String) {
    let mut conn = TcpStream::connect(edge.proxy.addr()).await.unwrap();
    let request =
        format!("GET {path} HTTP/1.1\r\nhost: 127.0.0.1\r\naccept: application/json\r\n\r\n");
    conn.write_all(request.as_bytes()).await.unwrap();
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        let mut byte = [0u8; 1];
        let n = tokio::time::timeout(WAIT, conn.read(&mut byte))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(n, 1, "the connection closed before a response head");
        head.push(byte[0]);
    }
    (conn, String::from_utf8(head).unwrap())
}

/// Reads until `needle` arrived on `conn`.
async fn read_until(conn: &mut TcpStream, needle: &str) -> String {
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    while !String::from_utf8_lossy(&seen).contains(needle) {
        let n = tokio::time::timeout(WAIT, conn.read(&mut buf))
            .await
            .unwrap()
            .unwrap();
        assert!(
            n > 0,
            "closed before {needle:?}: {}",
            String::from_utf8_lossy(&seen)
        );
        seen.extend_from_slice(&buf[..n]);
    }
    String::from_utf8_lossy(&seen).into_owned()
}

#[tokio::test]
async fn a_watch_past_the_cap_is_429_while_open_watches_and_other_requests_are_served() {
    let node = Node::new();
    let config = lwproxy::Config {
        max_watches_per_client: WATCHES,
        ..Edge::config()
    };
    let edge = node.start_with(true, config).await;
    let watch = "/api/v1/namespaces/default/pods?watch=true";
    let mut watches = Vec::new();
    for _ in 0..WATCHES {
        let (conn, head) = open(&edge, watch).await;
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        watches.push(conn);
    }

    let (mut refused, head) = open(&edge, watch).await;
    assert!(head.starts_with("HTTP/1.1 429"), "{head}");
    assert!(
        head.to_ascii_lowercase().contains("retry-after: 1"),
        "{head}"
    );
    let body = read_until(&mut refused, "}").await;
    assert!(body.contains("\"reason\":\"TooManyRequests\""), "{body}");
    assert!(
        body.contains("too many watches open from 127.0.0.1"),
        "{body}"
    );
    let mut rest = Vec::new();
    let closed = tokio::time::timeout(WAIT, refused.read_to_end(&mut rest)).await;
    assert!(closed.is_ok(), "the refused connection is closed");
    assert_eq!(edge.proxy.client_limits().refused(), 1);

    // The same client's other requests, and its open watches, are still answered.
    let (_list, head) = open(&edge, "/api/v1/namespaces/default/pods").await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    edge.downstream("pods", pod("web", "n1", "10")).await;
    for conn in &mut watches {
        read_until(conn, "\"name\":\"web\"").await;
    }

    // A closed watch frees its place.
    drop(watches.pop());
    eventually("a watch opens again once one closed", WAIT, || async {
        open(&edge, watch).await.1.starts_with("HTTP/1.1 200")
    })
    .await;
    edge.stop().await;
}
