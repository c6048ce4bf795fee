//! edgecore serves lwproxy on the address it reports; without edgehub it is never linked, so
//! reads are served and writes refused.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

/// `POST path` with a JSON body over plain HTTP/1.1; the status code and the body.
async fn http_post(addr: SocketAddr, path: &str, body: &str) -> (u16, String) {
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let request = format!(
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut raw = String::new();
    stream.read_to_string(&mut raw).await.unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap();
    let code = head.split_whitespace().nth(1).unwrap().parse().unwrap();
    (code, body.to_owned())
}

#[tokio::test]
async fn lwproxy_serves_reads_and_refuses_writes_without_edgehub() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = edgecore::Config::default();
    config.common_config.monitor_server.enable = false;
    config.database.data_source = dir.path().join("edge.db");
    config.modules.edge_hub.enable = false;
    config.modules.lw_proxy.server = "127.0.0.1:0".parse().unwrap();
    let shutdown = CancellationToken::new();
    let running = edgecore::start(config, shutdown.clone()).await.unwrap();
    let proxy = running.lwproxy().expect("lwproxy is enabled by default");
    let addr = proxy.addr();
    assert_ne!(addr.port(), 0);
    assert_eq!(proxy.url(), format!("http://{addr}"));

    let (code, body) = testkit::http_get(addr, "/api/v1/namespaces/default/pods")
        .await
        .unwrap();
    assert_eq!(code, 200, "{body}");
    assert!(body.contains(r#""kind":"PodList""#), "{body}");
    let (code, _) = testkit::http_get(addr, "/version").await.unwrap();
    assert_eq!(code, 200);
    let pod = r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p"},"spec":{}}"#;
    let (code, body) = http_post(addr, "/api/v1/namespaces/default/pods", pod).await;
    assert_eq!(code, 503, "{body}");
    assert!(body.contains("the cloud is unreachable"), "{body}");

    shutdown.cancel();
    let stopped = tokio::time::timeout(Duration::from_secs(10), daemon::Core::from(running).stop());
    stopped.await.expect("edgecore stops");
}
