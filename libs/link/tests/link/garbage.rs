//! Bad bytes from a peer end that connection's stream with an error, never a panic, and an
//! oversized frame (or WebSocket message) is refused from its header, before its body is
//! buffered.

use link::{Conn, FrameStream, Limits, LinkError, Listener, Transport};
use tokio::io::AsyncWriteExt;
use tokio_tungstenite::tungstenite::Message;

use crate::common::{self, Certs, RawMux, RawQuic, accept_one, listen, raw_mux, raw_quic, within};

const SMALL: usize = 1024;

#[tokio::test]
async fn garbage_on_the_websocket_frame_stream_fails_recv() {
    within(async {
        let (mut rx, mut raw, _listener) = websocket_with_raw_client().await;
        raw.frames
            .write_all(&[0, 0, 0, 4, 0xde, 0xad, 0xbe, 0xef])
            .await
            .unwrap();
        raw.frames.flush().await.unwrap();
        let err = rx.recv().await.unwrap_err();
        assert!(matches!(err, LinkError::Frame(_)), "{err:?}");
        assert!(matches!(rx.recv().await, Err(LinkError::Closed)));
    })
    .await
}

#[tokio::test]
async fn a_websocket_binary_message_that_is_no_multiplexer_frame_fails_recv() {
    within(async {
        let (mut rx, raw, _listener) = websocket_with_raw_client().await;
        // A yamux header of protocol version 7.
        let garbage = vec![7, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0];
        raw.send_message(Message::Binary(garbage.into())).await;
        let err = rx.recv().await.unwrap_err();
        assert!(matches!(err, LinkError::Mux(_)), "{err:?}");
        assert!(matches!(rx.recv().await, Err(LinkError::Closed)));
    })
    .await
}

#[tokio::test]
async fn a_websocket_text_message_fails_recv() {
    within(async {
        let (mut rx, raw, _listener) = websocket_with_raw_client().await;
        raw.send_message(Message::text("{\"hello\": 1}")).await;
        let err = rx.recv().await.unwrap_err();
        assert!(
            matches!(err, LinkError::UnexpectedMessage { kind: "text" }),
            "{err:?}"
        );
    })
    .await
}

#[tokio::test]
async fn an_oversized_frame_on_the_websocket_frame_stream_fails_recv() {
    within(async {
        let (mut rx, mut raw, _listener) = websocket_with_raw_client().await;
        let frame = wire::encode_prefixed(&common::data(1, 2 * SMALL), 1 << 20).unwrap();
        raw.frames.write_all(&frame).await.unwrap();
        raw.frames.flush().await.unwrap();
        let err = rx.recv().await.unwrap_err();
        assert!(
            matches!(err, LinkError::Oversized { max: SMALL, .. }),
            "{err:?}"
        );
    })
    .await
}

#[tokio::test]
async fn an_oversized_declared_length_on_the_websocket_frame_stream_fails_before_its_body() {
    within(async {
        let (mut rx, mut raw, _listener) = websocket_with_raw_client().await;
        // Declares 1 GiB and sends none of it.
        raw.frames
            .write_all(&(1u32 << 30).to_be_bytes())
            .await
            .unwrap();
        raw.frames.flush().await.unwrap();
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
        let (mut rx, raw, _listener) = websocket_with_raw_client().await;
        // FIN + binary, masked, 64-bit length 1 GiB, mask key; then no body at all.
        let mut header = vec![0x82, 0x80 | 127];
        header.extend_from_slice(&(1u64 << 30).to_be_bytes());
        header.extend_from_slice(&[1, 2, 3, 4]);
        raw.send_raw(&header).await;
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

/// A link server with a small frame limit and a raw WebSocket client past the preambles.
async fn websocket_with_raw_client() -> (FrameStream, RawMux, Listener) {
    let certs = Certs::new();
    let listener = listen(Transport::WebSocket, &certs, small_limits()).await;
    let config = certs.raw_client_config(true, &[]);
    let client = raw_mux(listener.local_addr(), config);
    let (server, raw) = tokio::join!(accept_one(&listener), client);
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
