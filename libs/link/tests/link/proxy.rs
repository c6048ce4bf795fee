//! The WebSocket link through the fault proxy: latency, a half-open path, a cut.

use std::time::Duration;

use link::faultproxy::{Direction, FaultProxy};
use link::{Conn, Limits, LinkError, Transport};
use tokio::time::Instant;
use wire::Frame;

use crate::common::{self, Certs, accept_one, listen, within};
use crate::timeouts::write_until_failure;

/// A server and a client connected through a fault proxy.
struct Proxied {
    proxy: FaultProxy,
    server: Conn,
    client: Conn,
}

#[tokio::test]
async fn delay_in_the_proxy_adds_latency_to_the_link() {
    within(async {
        let p = proxied(common::limits()).await;
        let (_server_tx, mut server_rx) = p.server.split();
        let (mut client_tx, _client_rx) = p.client.split();
        p.proxy
            .set_delay(Direction::ToTarget, Duration::from_millis(150));
        let start = Instant::now();
        client_tx.send(&Frame::Ping { nonce: 1 }).await.unwrap();
        assert_eq!(
            server_rx.recv().await.unwrap(),
            Some(Frame::Ping { nonce: 1 })
        );
        assert!(start.elapsed() >= Duration::from_millis(150));
    })
    .await
}

#[tokio::test]
async fn a_blackholed_link_makes_writes_fail_and_recovers_nothing_until_resumed() {
    within(async {
        let quick = Limits {
            write_timeout: Duration::from_millis(300),
            ..common::limits()
        };
        let p = proxied(quick).await;
        let (_server_tx, mut server_rx) = p.server.split();
        let (client_tx, _client_rx) = p.client.split();
        p.proxy.blackhole();
        let (_tx, err, _) = write_until_failure(client_tx).await;
        assert!(matches!(err, LinkError::WriteTimeout { .. }), "{err:?}");
        assert_eq!(p.proxy.connections(), 1, "a blackhole keeps sockets open");
        p.proxy.resume();
        // What was written before the timeout now flows again.
        assert!(matches!(
            server_rx.recv().await,
            Ok(Some(Frame::Data { seq: 1, .. }))
        ));
    })
    .await
}

#[tokio::test]
async fn a_cut_ends_the_link_at_both_ends() {
    within(async {
        let p = proxied(common::limits()).await;
        let (_server_tx, mut server_rx) = p.server.split();
        let (_client_tx, mut client_rx) = p.client.split();
        p.proxy.cut();
        assert!(!matches!(server_rx.recv().await, Ok(Some(_))));
        assert!(!matches!(client_rx.recv().await, Ok(Some(_))));
    })
    .await
}

async fn proxied(client_limits: Limits) -> Proxied {
    let certs = Certs::new();
    let listener = listen(Transport::WebSocket, &certs, common::limits()).await;
    let proxy = FaultProxy::start(listener.local_addr()).await.unwrap();
    let tls = certs.client_tls();
    let (server, client) = tokio::join!(
        accept_one(&listener),
        link::connect(
            Transport::WebSocket,
            proxy.local_addr(),
            &tls,
            client_limits
        ),
    );
    Proxied {
        proxy,
        server: server.unwrap(),
        client: client.unwrap(),
    }
}
