//! Bad bytes from a peer end that connection's stream with an error, never a panic, and an
//! oversized frame is refused from its header, before its body is buffered.

use futures::SinkExt;
use link::{Conn, FrameStream, Limits, LinkError, Listener, Transport};
use tokio::io::AsyncWriteExt;
use tokio_tungstenite::tungstenite::Message;

use crate::common::{self, Certs, RawQuic, RawWs, accept_one, listen, raw_quic, raw_ws, within};

const SMALL: usize = 1024;

#[tokio::test]
async fn a_websocket_binary_message_of_garbage_fails_recv() {
    within(async {
        let (mut rx, mut raw, _listener) = websocket_with_raw_client().await;
        let garbage = vec![0xde, 0xad, 0xbe, 0xef];
        raw.send(Message::Binary(garbage.into())).await.unwrap();
        let err = rx.recv().await.unwrap_err();
        assert!(matches!(err, LinkError::Frame(_)), "{err:?}");
        assert!(matches!(rx.recv().await, Err(LinkError::Closed)));
    })
    .await
}

#[tokio::test]
async fn a_websocket_text_message_fails_recv() {
    within(async {
        let (mut rx, mut raw, _listener) = websocket_with_raw_client().await;
        raw.send(Message::text("{\"hello\": 1}")).await.unwrap();
        let err = rx.recv().await.unwrap_err();
        assert!(
            matches!(err, LinkError::UnexpectedMessage { kind: "text" }),
            "{err:?}"
        );
    })
    .await
}

#[tokio::test]
async fn an_oversized_websocket_message_fails_recv() {
    within(async {
        let (mut rx, mut raw, _listener) = websocket_with_raw_client().await;
        let frame = wire::encode(&common::data(1, 2 * SMALL));
        raw.send(Message::Binary(frame.into())).await.unwrap();
        let err = rx.recv().await.unwrap_err();
        assert!(
            matches!(err, LinkError::Oversized { max: SMALL, .. }),
            "{err:?}"
        );
    })
    .await
}

#[tokio::test]
async fn a_websocket_header_declaring_a_gigabyte_fails_before_any_body_arrives() {
    within(async {
        let (mut rx, mut raw, _listener) = websocket_with_raw_client().await;
        // FIN + binary, masked, 64-bit length 1 GiB, mask key; then no body at all.
        let mut header = vec![0x82, 0x80 | 127];
        header.extend_from_slice(&(1u64 << 30).to_be_bytes());
        header.extend_from_slice(&[1, 2, 3, 4]);
        let tls = raw.get_mut();
        tls.write_all(&header).await.unwrap();
        tls.flush().await.unwrap();
        let err = rx.recv().await.unwrap_err();
        assert!(matches!(err, LinkError::Oversized { .. }), "{err:?}");
    })
    .await
}

#[tokio::test]
async fn garbage_on_the_quic_stream_fails_recv() {
    within(async {
        let (mut rx, mut raw, _listener) = quic_with_raw_client().await;
        raw.send
            .write_all(&[0, 0, 0, 4, 0xde, 0xad, 0xbe, 0xef])
            .await
            .unwrap();
        let err = rx.recv().await.unwrap_err();
        assert!(matches!(err, LinkError::Frame(_)), "{err:?}");
        assert!(matches!(rx.recv().await, Err(LinkError::Closed)));
    })
    .await
}

#[tokio::test]
async fn an_oversized_declared_length_on_the_quic_stream_fails_before_its_body() {
    within(async {
        let (mut rx, mut raw, _listener) = quic_with_raw_client().await;
        // Declares 1 GiB and sends none of it.
        raw.send
            .write_all(&(1u32 << 30).to_be_bytes())
            .await
            .unwrap();
        let err = rx.recv().await.unwrap_err();
        assert!(
            matches!(err, LinkError::Oversized { max: SMALL, .. }),
            "{err:?}"
        );
    })
    .await
}

#[tokio::test]
async fn a_quic_stream_that_ends_inside_a_frame_fails_recv() {
    within(async {
        let (mut rx, mut raw, _listener) = quic_with_raw_client().await;
        raw.send.write_all(&[0, 0, 0, 100, 1, 2, 3]).await.unwrap();
        raw.send.finish().unwrap();
        let err = rx.recv().await.unwrap_err();
        assert!(
            matches!(err, LinkError::Truncated { buffered: 3 }),
            "{err:?}"
        );
    })
    .await
}

#[tokio::test]
async fn a_quic_stream_without_the_preamble_is_refused() {
    within(async {
        let certs = Certs::new();
        let listener = listen(Transport::Quic, &certs, small_limits()).await;
        let config = certs.raw_client_config(true, &[link::QUIC_ALPN]);
        let client = raw_quic(listener.local_addr(), config, b"GET / HTTP/1.1\r\n");
        let (server, _client) = tokio::join!(accept_one(&listener), client);
        assert!(
            matches!(server, Err(LinkError::Preamble)),
            "{:?}",
            server.err()
        );
    })
    .await
}

fn small_limits() -> Limits {
    Limits {
        max_frame: SMALL,
        ..common::limits()
    }
}

/// A link server with a small frame limit and a raw WebSocket client connected to it.
async fn websocket_with_raw_client() -> (FrameStream, RawWs, Listener) {
    let certs = Certs::new();
    let listener = listen(Transport::WebSocket, &certs, small_limits()).await;
    let config = certs.raw_client_config(true, &[]);
    let (server, raw) = tokio::join!(accept_one(&listener), raw_ws(listener.local_addr(), config));
    (receiver(server), raw.unwrap(), listener)
}

/// A link server with a small frame limit and a raw QUIC client past the preamble.
async fn quic_with_raw_client() -> (FrameStream, RawQuic, Listener) {
    let certs = Certs::new();
    let listener = listen(Transport::Quic, &certs, small_limits()).await;
    let config = certs.raw_client_config(true, &[link::QUIC_ALPN]);
    let client = raw_quic(listener.local_addr(), config, link::QUIC_PREAMBLE);
    let (server, raw) = tokio::join!(accept_one(&listener), client);
    (receiver(server), raw.unwrap(), listener)
}

/// The receiving half; the sending half is dropped (the tests only feed the server).
fn receiver(server: Result<Conn, LinkError>) -> FrameStream {
    let (_tx, rx) = server.unwrap().split();
    rx
}
