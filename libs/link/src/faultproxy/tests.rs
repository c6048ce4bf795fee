use std::future::Future;

use testkit::eventually;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::timeout;

use super::*;

const PATIENCE: Duration = Duration::from_secs(5);

/// A TCP server on 127.0.0.1:0 that echoes every byte back.
async fn echo_server() -> SocketAddr {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((conn, _)) = listener.accept().await {
            tokio::spawn(async move {
                let (mut r, mut w) = conn.into_split();
                let _ = tokio::io::copy(&mut r, &mut w).await;
            });
        }
    });
    addr
}

async fn proxied_echo() -> FaultProxy {
    FaultProxy::start(echo_server().await).await.unwrap()
}

async fn dial(proxy: &FaultProxy) -> TcpStream {
    TcpStream::connect(proxy.local_addr()).await.unwrap()
}

/// Sends `msg` and reads the echo, failing after PATIENCE.
async fn echo(conn: &mut TcpStream, msg: &[u8]) -> Duration {
    let start = Instant::now();
    conn.write_all(msg).await.unwrap();
    let mut got = vec![0; msg.len()];
    timeout(PATIENCE, conn.read_exact(&mut got))
        .await
        .expect("no echo in time")
        .unwrap();
    assert_eq!(got, msg);
    start.elapsed()
}

/// True if the peer closed the connection (EOF or reset) within PATIENCE.
async fn closed(conn: &mut TcpStream) -> bool {
    let mut buf = [0; 16];
    matches!(
        timeout(PATIENCE, conn.read(&mut buf)).await,
        Ok(Ok(0) | Err(_))
    )
}

async fn within(fut: impl Future<Output = ()>) {
    timeout(PATIENCE * 2, fut).await.expect("test timed out")
}

#[tokio::test]
async fn bytes_pass_through_unchanged() {
    within(async {
        let proxy = proxied_echo().await;
        let mut conn = dial(&proxy).await;
        echo(&mut conn, b"hello").await;
        let big: Vec<u8> = (0..200_000u32).map(|i| i as u8).collect();
        echo(&mut conn, &big).await;
        assert_eq!(proxy.connections(), 1);
    })
    .await
}

#[tokio::test]
async fn delay_adds_latency_per_direction() {
    within(async {
        let proxy = proxied_echo().await;
        let mut conn = dial(&proxy).await;
        proxy.set_delay(Direction::ToTarget, Duration::from_millis(100));
        assert!(echo(&mut conn, b"a").await >= Duration::from_millis(100));
        proxy.set_delay(Direction::ToClient, Duration::from_millis(100));
        assert!(echo(&mut conn, b"b").await >= Duration::from_millis(200));
    })
    .await
}

#[tokio::test]
async fn blackhole_stops_traffic_while_sockets_stay_open() {
    within(async {
        let proxy = proxied_echo().await;
        let mut conn = dial(&proxy).await;
        echo(&mut conn, b"before").await;
        proxy.blackhole();
        conn.write_all(b"during").await.unwrap();
        let mut buf = [0; 6];
        let silent = timeout(Duration::from_millis(200), conn.read(&mut buf)).await;
        assert!(silent.is_err(), "bytes crossed a blackhole: {silent:?}");
        assert_eq!(proxy.connections(), 1, "the connection must stay open");
        proxy.resume();
        timeout(PATIENCE, conn.read_exact(&mut buf))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(&buf, b"during", "held bytes arrive after resume");
    })
    .await
}

#[tokio::test]
async fn cut_closes_every_connection_and_new_ones_still_work() {
    within(async {
        let proxy = proxied_echo().await;
        let mut a = dial(&proxy).await;
        let mut b = dial(&proxy).await;
        echo(&mut a, b"a").await;
        echo(&mut b, b"b").await;
        proxy.cut();
        assert!(closed(&mut a).await);
        assert!(closed(&mut b).await);
        eventually("no connections left", PATIENCE, || async {
            proxy.connections() == 0
        })
        .await;
        let mut c = dial(&proxy).await;
        echo(&mut c, b"c").await;
    })
    .await
}

#[tokio::test]
async fn resume_clears_delays() {
    within(async {
        let proxy = proxied_echo().await;
        let mut conn = dial(&proxy).await;
        proxy.set_delay(Direction::ToTarget, Duration::from_secs(3600));
        proxy.set_delay(Direction::ToClient, Duration::from_secs(3600));
        proxy.resume();
        echo(&mut conn, b"fast").await;
    })
    .await
}

#[tokio::test]
async fn dropping_the_proxy_closes_its_connections() {
    within(async {
        let proxy = proxied_echo().await;
        let mut conn = dial(&proxy).await;
        echo(&mut conn, b"x").await;
        drop(proxy);
        assert!(closed(&mut conn).await);
    })
    .await
}

#[tokio::test]
async fn a_client_half_close_reaches_the_target() {
    within(async {
        let proxy = proxied_echo().await;
        let mut conn = dial(&proxy).await;
        conn.write_all(b"last words").await.unwrap();
        conn.shutdown().await.unwrap();
        let mut got = Vec::new();
        timeout(PATIENCE, conn.read_to_end(&mut got))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(got, b"last words");
    })
    .await
}
