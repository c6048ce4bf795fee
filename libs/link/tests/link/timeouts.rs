//! Dead or stalled peers cost a bounded time: writes fail after the write timeout, handshakes
//! after the handshake timeout, and a stalled client never holds up accept.

use std::net::SocketAddr;
use std::time::Duration;

use link::{FrameSink, Limits, LinkError, Transport};
use tokio::net::TcpStream;
use tokio::time::Instant;
use wire::Frame;

use crate::common::{self, Certs, Pair, accept_one, both_transports, data, listen, raw_quic};

both_transports!(a_peer_that_never_reads_makes_writes_fail_within_the_write_timeout);

async fn a_peer_that_never_reads_makes_writes_fail_within_the_write_timeout(transport: Transport) {
    let quick = Limits {
        write_timeout: Duration::from_millis(300),
        ..common::limits()
    };
    let pair = Pair::with_limits(transport, common::limits(), quick).await;
    // The server holds its connection open and never reads.
    let _server = pair.server;
    let (tx, _rx) = pair.client.split();
    let (mut tx, err, last_write) = write_until_failure(tx).await;
    assert!(matches!(err, LinkError::WriteTimeout { .. }), "{err:?}");
    assert!(
        last_write < Duration::from_secs(2),
        "the failing write took {last_write:?}"
    );
    let after = tx.send(&Frame::Ping { nonce: 1 }).await;
    assert!(matches!(after, Err(LinkError::Closed)), "{after:?}");
}

#[tokio::test]
async fn a_websocket_client_that_sends_nothing_times_out_without_blocking_accept() {
    common::within(async {
        let certs = Certs::new();
        // Long enough for the real client's handshake on a busy machine.
        let limits = Limits {
            handshake_timeout: Duration::from_secs(1),
            ..common::limits()
        };
        let listener = listen(Transport::WebSocket, &certs, limits).await;
        let addr = listener.local_addr();
        let _silent = TcpStream::connect(addr).await.unwrap();
        let stalled = listener.accept().await.unwrap();
        // A real client is served while the first one is still stalled.
        let tls = certs.client_tls();
        let (server, client) = tokio::join!(
            accept_one(&listener),
            link::connect(Transport::WebSocket, addr, &tls, limits)
        );
        assert_eq!(server.unwrap().peer_node(), Some("edge-1"));
        client.unwrap();
        let err = stalled.establish().await.err().unwrap();
        assert!(matches!(err, LinkError::HandshakeTimeout { .. }), "{err:?}");
    })
    .await
}

#[tokio::test]
async fn a_quic_client_that_never_opens_its_stream_times_out() {
    common::within(async {
        let certs = Certs::new();
        let limits = Limits {
            handshake_timeout: Duration::from_millis(300),
            ..common::limits()
        };
        let listener = listen(Transport::Quic, &certs, limits).await;
        let config = certs.raw_client_config(true, &[link::QUIC_ALPN]);
        // An empty preamble opens no stream: the peer never learns of it.
        let client = raw_quic(listener.local_addr(), config, b"");
        let (server, _client) = tokio::join!(accept_one(&listener), client);
        let err = server.err().unwrap();
        assert!(matches!(err, LinkError::HandshakeTimeout { .. }), "{err:?}");
    })
    .await
}

#[tokio::test]
async fn connecting_to_a_silent_server_times_out() {
    common::within(async {
        let certs = Certs::new();
        // A TCP listener that accepts (in the kernel) and never answers.
        let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr: SocketAddr = silent.local_addr().unwrap();
        let limits = Limits {
            handshake_timeout: Duration::from_millis(300),
            ..common::limits()
        };
        let result = link::connect(Transport::WebSocket, addr, &certs.client_tls(), limits).await;
        assert!(matches!(
            result.err(),
            Some(LinkError::HandshakeTimeout { .. })
        ));
    })
    .await
}

/// Feeds 16 KiB frames, flushing every 16, until a write fails. Returns the sink, the error and
/// how long the failing call took.
pub async fn write_until_failure(mut tx: FrameSink) -> (FrameSink, LinkError, Duration) {
    let frame = data(1, 16 * 1024);
    for n in 1u64.. {
        let start = Instant::now();
        let result = match n % 16 {
            0 => tx.send(&frame).await,
            _ => tx.feed(&frame).await,
        };
        if let Err(e) = result {
            return (tx, e, start.elapsed());
        }
    }
    unreachable!("the loop only ends by returning")
}
