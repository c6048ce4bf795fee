//! Frames cross in both directions, in order, and connections end cleanly.

use std::time::Duration;

use link::{FrameSink, FrameStream, Limits, LinkError, Transport};
use wire::Frame;

use crate::common::{self, Pair, both_transports, data, sample_frames};

both_transports!(
    every_frame_kind_crosses_in_both_directions,
    ten_thousand_frames_arrive_in_order_both_ways,
    close_sends_a_close_frame_then_ends_the_stream,
    an_oversized_frame_is_refused_locally_and_the_sink_stays_usable,
    a_closed_listener_accepts_nothing_but_its_connections_live_on,
);

async fn every_frame_kind_crosses_in_both_directions(transport: Transport) {
    let pair = Pair::new(transport).await;
    let (mut server_tx, mut server_rx) = pair.server.split();
    let (mut client_tx, mut client_rx) = pair.client.split();
    for frame in sample_frames() {
        client_tx.send(&frame).await.unwrap();
        assert_eq!(server_rx.recv().await.unwrap(), Some(frame.clone()));
        server_tx.send(&frame).await.unwrap();
        assert_eq!(client_rx.recv().await.unwrap(), Some(frame));
    }
}

async fn ten_thousand_frames_arrive_in_order_both_ways(transport: Transport) {
    const COUNT: u64 = 10_000;
    let pair = Pair::new(transport).await;
    let (server_tx, server_rx) = pair.server.split();
    let (client_tx, client_rx) = pair.client.split();
    let up = tokio::spawn(burst(client_tx, COUNT));
    let down = tokio::spawn(burst(server_tx, COUNT));
    let (received_up, received_down) = tokio::join!(
        expect_in_order(server_rx, COUNT),
        expect_in_order(client_rx, COUNT)
    );
    assert_eq!((received_up, received_down), (COUNT, COUNT));
    up.await.unwrap();
    down.await.unwrap();
}

async fn close_sends_a_close_frame_then_ends_the_stream(transport: Transport) {
    let pair = Pair::new(transport).await;
    let (_server_tx, mut server_rx) = pair.server.split();
    let (mut client_tx, _client_rx) = pair.client.split();
    client_tx.send(&Frame::Ping { nonce: 9 }).await.unwrap();
    client_tx.close("node shutting down").await;
    assert_eq!(
        server_rx.recv().await.unwrap(),
        Some(Frame::Ping { nonce: 9 })
    );
    let close = Frame::Close {
        reason: "node shutting down".into(),
    };
    assert_eq!(server_rx.recv().await.unwrap(), Some(close));
    assert_eq!(server_rx.recv().await.unwrap(), None);
    assert_eq!(server_rx.recv().await.unwrap(), None, "the end is sticky");
}

async fn an_oversized_frame_is_refused_locally_and_the_sink_stays_usable(transport: Transport) {
    let small = Limits {
        max_frame: 1024,
        ..common::limits()
    };
    let pair = Pair::with_limits(transport, small, small).await;
    let (_server_tx, mut server_rx) = pair.server.split();
    let (mut client_tx, _client_rx) = pair.client.split();
    let err = client_tx.send(&data(1, 2048)).await.unwrap_err();
    assert!(
        matches!(err, LinkError::Oversized { max: 1024, .. }),
        "{err:?}"
    );
    client_tx.send(&Frame::Ping { nonce: 2 }).await.unwrap();
    assert_eq!(
        server_rx.recv().await.unwrap(),
        Some(Frame::Ping { nonce: 2 })
    );
}

async fn a_closed_listener_accepts_nothing_but_its_connections_live_on(transport: Transport) {
    let pair = Pair::new(transport).await;
    let waiting = {
        let listener = &pair.listener;
        async move { listener.accept().await }
    };
    let (accepted, ()) = tokio::join!(waiting, async {
        tokio::task::yield_now().await;
        pair.listener.close();
    });
    assert!(matches!(accepted, Err(LinkError::Closed)));
    assert!(matches!(
        pair.listener.accept().await,
        Err(LinkError::Closed)
    ));
    let (mut server_tx, _server_rx) = pair.server.split();
    let (_client_tx, mut client_rx) = pair.client.split();
    server_tx.send(&Frame::Pong { nonce: 3 }).await.unwrap();
    let got = tokio::time::timeout(Duration::from_secs(5), client_rx.recv()).await;
    assert_eq!(got.unwrap().unwrap(), Some(Frame::Pong { nonce: 3 }));
}

/// Feeds `count` data frames with small payloads, flushing every 100 and at the end.
async fn burst(mut tx: FrameSink, count: u64) -> FrameSink {
    for seq in 1..=count {
        tx.feed(&data(seq, 64)).await.unwrap();
        if seq % 100 == 0 {
            tx.flush().await.unwrap();
        }
    }
    tx.flush().await.unwrap();
    tx
}

/// Receives `count` data frames and checks that their seqs run 1, 2, 3, ...
async fn expect_in_order(mut rx: FrameStream, count: u64) -> u64 {
    for want in 1..=count {
        match rx.recv().await.unwrap() {
            Some(Frame::Data { seq, msg }) => {
                assert_eq!(seq, want);
                assert_eq!(msg.content.len(), 64);
            }
            other => panic!("expected data frame {want}, got {other:?}"),
        }
    }
    count
}
