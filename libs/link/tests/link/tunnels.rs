//! Tunnel streams: the server opens byte streams to the client on the connection that carries
//! the frames; they carry bytes both ways, half-close, are bounded in number, never hold up the
//! frames, and fail at once when the connection is gone.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures::FutureExt;
use link::{
    FrameSink, FrameStream, LinkError, MAX_TUNNEL_STREAMS, Transport, TunnelAcceptor, TunnelOpener,
    TunnelStream,
};
use ring::digest::{SHA256, digest};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::time::Instant;
use wire::{Frame, FrameReader};

use crate::common::{
    self, Certs, Pair, accept_one, both_transports, data, eventually, listen, raw_mux, raw_quic,
    within,
};

const MIB: usize = 1024 * 1024;

both_transports!(
    only_the_server_opens_and_only_the_client_accepts,
    a_tunnel_stream_echoes_a_mebibyte_both_ways,
    sixteen_concurrent_tunnel_streams_each_carry_their_own_bytes,
    a_half_closed_tunnel_stream_still_carries_the_answer,
    frames_keep_flowing_while_a_tunnel_stream_is_stalled,
    opening_past_the_limit_fails_at_once_until_a_stream_closes,
    open_after_the_connection_ended_fails_at_once,
    the_acceptor_ends_with_the_connection,
    dropping_a_tunnel_stream_resets_it,
    a_client_without_an_acceptor_refuses_tunnel_streams,
);

/// The frame halves of both ends, kept so the connection stays up.
struct Ends {
    server_tx: FrameSink,
    server_rx: FrameStream,
    client_tx: FrameSink,
    client_rx: FrameStream,
}

async fn tunnels(transport: Transport) -> (Ends, TunnelOpener, TunnelAcceptor) {
    let Pair {
        server,
        mut client,
        listener: _,
    } = Pair::new(transport).await;
    let opener = server
        .opener()
        .expect("a server-side connection opens tunnels");
    let acceptor = client
        .take_acceptor()
        .expect("a client-side connection accepts");
    let (server_tx, server_rx) = server.split();
    let (client_tx, client_rx) = client.split();
    let ends = Ends {
        server_tx,
        server_rx,
        client_tx,
        client_rx,
    };
    (ends, opener, acceptor)
}

async fn only_the_server_opens_and_only_the_client_accepts(transport: Transport) {
    let Pair {
        mut server,
        mut client,
        ..
    } = Pair::new(transport).await;
    assert!(server.opener().is_some());
    assert!(server.take_acceptor().is_none());
    assert!(client.opener().is_none());
    assert!(client.take_acceptor().is_some());
    assert!(
        client.take_acceptor().is_none(),
        "the acceptor is taken once"
    );
}

async fn a_tunnel_stream_echoes_a_mebibyte_both_ways(transport: Transport) {
    let (_ends, opener, mut acceptor) = tunnels(transport).await;
    let echo = tokio::spawn(async move { echo(acceptor.accept().await.unwrap()).await });
    let sent = pattern(1, MIB);
    let back = exchange(opener.open().await.unwrap(), sent.clone()).await;
    let (echoed_len, echoed_digest) = echo.await.unwrap();
    assert_eq!(echoed_len, MIB, "the client received the whole mebibyte");
    assert_eq!(
        echoed_digest,
        sha256(&sent),
        "the client received it intact"
    );
    assert_eq!(back.len(), MIB);
    assert_eq!(sha256(&back), sha256(&sent), "the echo came back intact");
}

async fn sixteen_concurrent_tunnel_streams_each_carry_their_own_bytes(transport: Transport) {
    const STREAMS: usize = 16;
    let (_ends, opener, mut acceptor) = tunnels(transport).await;
    tokio::spawn(async move {
        while let Some(stream) = acceptor.accept().await {
            tokio::spawn(echo(stream));
        }
    });
    let mut streams = Vec::new();
    for i in 0..STREAMS {
        streams.push(opener.open().await.unwrap());
        assert_eq!(opener.open_streams(), i + 1);
    }
    let exchanges = streams.into_iter().enumerate().map(|(i, stream)| {
        let sent = pattern(i as u64 + 10, 128 * 1024 + i);
        tokio::spawn(async move { (exchange(stream, sent.clone()).await, sent) })
    });
    for exchange in exchanges.collect::<Vec<_>>() {
        let (back, sent) = exchange.await.unwrap();
        assert_eq!(sha256(&back), sha256(&sent));
    }
    eventually("the closed streams are counted out", || {
        opener.open_streams() == 0
    })
    .await;
}

async fn a_half_closed_tunnel_stream_still_carries_the_answer(transport: Transport) {
    let (_ends, opener, mut acceptor) = tunnels(transport).await;
    let mut cloud = opener.open().await.unwrap();
    cloud.write_all(b"GET /healthz").await.unwrap();
    cloud.shutdown().await.unwrap();
    let mut edge = acceptor.accept().await.unwrap();
    let mut request = Vec::new();
    edge.read_to_end(&mut request).await.unwrap();
    assert_eq!(
        request, b"GET /healthz",
        "the edge read the request to its end"
    );
    edge.write_all(b"ok").await.unwrap();
    edge.shutdown().await.unwrap();
    let mut answer = Vec::new();
    cloud.read_to_end(&mut answer).await.unwrap();
    assert_eq!(answer, b"ok", "the answer crossed after the request's end");
}

async fn frames_keep_flowing_while_a_tunnel_stream_is_stalled(transport: Transport) {
    const STALLED: usize = 8 * MIB;
    const FRAMES: u64 = 2_000;
    let (ends, opener, mut acceptor) = tunnels(transport).await;
    let mut stalled = opener.open().await.unwrap();
    // The edge takes the stream and does not read it.
    let mut unread = acceptor.accept().await.unwrap();
    let written = Arc::new(AtomicUsize::new(0));
    let writer = tokio::spawn({
        let written = written.clone();
        async move {
            for chunk in pattern(3, STALLED).chunks(64 * 1024) {
                stalled.write_all(chunk).await.unwrap();
                written.fetch_add(chunk.len(), Ordering::Relaxed);
            }
            stalled.shutdown().await.unwrap();
        }
    });
    eventually("the tunnel's writer got some bytes out", || {
        written.load(Ordering::Relaxed) >= 128 * 1024
    })
    .await;
    // 2,000 frames of 1 KiB each way: far more than a stream's window.
    let Ends {
        server_tx,
        server_rx,
        client_tx,
        client_rx,
    } = ends;
    let down = tokio::spawn(burst(server_tx, FRAMES));
    let up = tokio::spawn(burst(client_tx, FRAMES));
    let (client_rx, server_rx) = tokio::join!(
        expect_frames(client_rx, FRAMES),
        expect_frames(server_rx, FRAMES)
    );
    let _keep = (down.await.unwrap(), up.await.unwrap(), client_rx, server_rx);
    // What the writer got out is bounded by the stream's window (256 KiB); the rest waits.
    let out = written.load(Ordering::Relaxed);
    assert!(
        out <= 512 * 1024 && !writer.is_finished(),
        "the stalled tunnel took {out} bytes"
    );
    // Once read, the stalled stream delivers everything.
    let mut got = Vec::new();
    unread.read_to_end(&mut got).await.unwrap();
    assert_eq!(sha256(&got), sha256(&pattern(3, STALLED)));
    writer.await.unwrap();
}

async fn opening_past_the_limit_fails_at_once_until_a_stream_closes(transport: Transport) {
    let (_ends, opener, mut acceptor) = tunnels(transport).await;
    let mut open = Vec::new();
    for _ in 0..MAX_TUNNEL_STREAMS {
        let stream = opener.open().await.unwrap();
        open.push((stream, acceptor.accept().await.unwrap()));
    }
    let started = Instant::now();
    let refused = opener.open().await;
    assert!(
        matches!(
            refused,
            Err(LinkError::TunnelLimit {
                max: MAX_TUNNEL_STREAMS
            })
        ),
        "{refused:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(1));
    // Both ends close one stream; a new one can be opened.
    let (mut cloud, mut edge) = open.pop().unwrap();
    cloud.shutdown().await.unwrap();
    edge.shutdown().await.unwrap();
    edge.read_to_end(&mut Vec::new()).await.unwrap();
    cloud.read_to_end(&mut Vec::new()).await.unwrap();
    drop((cloud, edge));
    let mut reopened = None;
    let deadline = Instant::now() + crate::common::PATIENCE;
    while reopened.is_none() && Instant::now() < deadline {
        match opener.open().await {
            Ok(stream) => reopened = Some(stream),
            Err(LinkError::TunnelLimit { .. }) => {
                tokio::time::sleep(Duration::from_millis(10)).await
            }
            Err(e) => panic!("{e:?}"),
        }
    }
    let mut stream = reopened.expect("a stream opens once one closed");
    stream.write_all(b"again").await.unwrap();
    let mut edge = acceptor.accept().await.unwrap();
    let mut got = [0; 5];
    edge.read_exact(&mut got).await.unwrap();
    assert_eq!(&got, b"again");
}

async fn open_after_the_connection_ended_fails_at_once(transport: Transport) {
    let (ends, opener, _acceptor) = tunnels(transport).await;
    let Ends {
        server_tx,
        mut server_rx,
        client_tx,
        client_rx,
    } = ends;
    client_tx.close("bye").await;
    drop(client_rx);
    while let Ok(Some(_)) = server_rx.recv().await {}
    drop((server_tx, server_rx));
    let started = Instant::now();
    let refused = opener.open().await;
    assert!(
        matches!(refused, Err(LinkError::ConnectionEnded)),
        "{refused:?}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "took {:?}",
        started.elapsed()
    );
}

async fn the_acceptor_ends_with_the_connection(transport: Transport) {
    let (ends, _opener, mut acceptor) = tunnels(transport).await;
    ends.server_tx.close("bye").await;
    assert!(acceptor.accept().await.is_none());
}

async fn dropping_a_tunnel_stream_resets_it(transport: Transport) {
    let (_ends, opener, mut acceptor) = tunnels(transport).await;
    let cloud = opener.open().await.unwrap();
    let mut edge = acceptor.accept().await.unwrap();
    drop(cloud);
    // The edge's writes fail once the reset arrived.
    let deadline = Instant::now() + crate::common::PATIENCE;
    loop {
        assert!(Instant::now() < deadline, "the edge's writes never failed");
        let write = async {
            edge.write_all(&[0; 1024]).await?;
            edge.flush().await
        };
        if write.await.is_err() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    eventually("the dropped stream is counted out", || {
        opener.open_streams() == 0
    })
    .await;
}

async fn a_client_without_an_acceptor_refuses_tunnel_streams(transport: Transport) {
    let Pair { server, client, .. } = Pair::new(transport).await;
    let opener = server.opener().unwrap();
    // The client splits its connection without taking the acceptor.
    let _client = client.split();
    let _server = server.split();
    let mut stream = opener.open().await.unwrap();
    stream.write_all(b"GET /healthz").await.unwrap();
    let mut answer = Vec::new();
    let read = stream.read_to_end(&mut answer).await;
    assert!(answer.is_empty(), "{answer:?}");
    drop((read, stream));
    eventually("the refused stream is counted out", || {
        opener.open_streams() == 0
    })
    .await;
}

/// Reads `stream` to its end, writing every byte back, then ends its write side; returns the
/// length and digest of what it read.
async fn echo(stream: TunnelStream) -> (usize, Vec<u8>) {
    let (mut rx, mut tx) = tokio::io::split(stream);
    let mut seen = Vec::new();
    let mut chunk = vec![0; 32 * 1024];
    loop {
        let n = rx.read(&mut chunk).await.unwrap();
        if n == 0 {
            break;
        }
        seen.extend_from_slice(&chunk[..n]);
        tx.write_all(&chunk[..n]).await.unwrap();
    }
    tx.shutdown().await.unwrap();
    (seen.len(), sha256(&seen))
}

/// Writes `sent` and ends the write side while reading the stream to its end.
async fn exchange(stream: TunnelStream, sent: Vec<u8>) -> Vec<u8> {
    let (mut rx, mut tx) = tokio::io::split(stream);
    let write = async move {
        tx.write_all(&sent).await.unwrap();
        tx.shutdown().await.unwrap();
        tx
    };
    let read = async move {
        let mut back = Vec::new();
        rx.read_to_end(&mut back).await.unwrap();
        back
    };
    let (_tx, back) = tokio::join!(write, read);
    back
}

async fn burst(mut tx: FrameSink, count: u64) -> FrameSink {
    for seq in 1..=count {
        tx.feed(&data(seq, 1024)).await.unwrap();
    }
    tx.flush().await.unwrap();
    tx
}

async fn expect_frames(mut rx: FrameStream, count: u64) -> FrameStream {
    for expected in 1..=count {
        match rx.recv().await.unwrap() {
            Some(Frame::Data { seq, .. }) => assert_eq!(seq, expected),
            other => panic!(
                "expected data frame {expected}, got {:?}",
                other.map(|f| f.kind())
            ),
        }
    }
    rx
}

/// `len` bytes that differ with `seed` (xorshift).
fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut state = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state as u8
        })
        .collect()
}

fn sha256(bytes: &[u8]) -> Vec<u8> {
    digest(&SHA256, bytes).as_ref().to_vec()
}

#[test]
fn tunnel_streams_can_move_between_tasks() {
    fn byte_stream<T: AsyncRead + AsyncWrite + Unpin + Send + 'static>() {}
    fn handle<T: Send + Sync + 'static>() {}
    byte_stream::<TunnelStream>();
    handle::<TunnelOpener>();
    handle::<TunnelAcceptor>();
}

#[tokio::test]
async fn a_quic_client_cannot_open_a_second_stream_and_its_frames_go_on() {
    within(async {
        let certs = Certs::new();
        let listener = listen(Transport::Quic, &certs, common::limits()).await;
        let config = certs.raw_client_config(true, &[link::QUIC_ALPN]);
        let client = raw_quic(listener.local_addr(), config, link::QUIC_PREAMBLE);
        let (server, raw) = tokio::join!(accept_one(&listener), client);
        let (mut server_tx, mut server_rx) = server.unwrap().split();
        let mut raw = raw.unwrap();
        let mut preamble = [0; 8];
        raw.recv.read_exact(&mut preamble).await.unwrap();
        // The server's limits leave the client its frame stream and no other.
        assert!(raw.conn.open_bi().now_or_never().is_none());
        assert!(raw.conn.open_uni().now_or_never().is_none());
        frames_go_on(&mut server_tx, &mut server_rx, &mut raw.send, &mut raw.recv).await;
    })
    .await
}

#[tokio::test]
async fn a_websocket_client_cannot_open_a_second_stream_and_its_frames_go_on() {
    within(async {
        let certs = Certs::new();
        let listener = listen(Transport::WebSocket, &certs, common::limits()).await;
        let config = certs.raw_client_config(true, &[]);
        let client = raw_mux(listener.local_addr(), config);
        let (server, raw) = tokio::join!(accept_one(&listener), client);
        let (mut server_tx, mut server_rx) = server.unwrap().split();
        let mut raw = raw.unwrap();
        let mut extra = raw.open().await.unwrap();
        extra.write_all(b"let me in").await.unwrap();
        extra.flush().await.unwrap();
        // The server resets the stream: the client reads its end, nothing else.
        let mut answer = Vec::new();
        extra.read_to_end(&mut answer).await.unwrap();
        assert!(answer.is_empty(), "{answer:?}");
        let (mut recv, mut send) = tokio::io::split(&mut raw.frames);
        frames_go_on(&mut server_tx, &mut server_rx, &mut send, &mut recv).await;
    })
    .await
}

/// A frame crosses each way between a link server and a raw client's frame stream.
async fn frames_go_on(
    server_tx: &mut FrameSink,
    server_rx: &mut FrameStream,
    raw_send: &mut (impl AsyncWrite + Unpin),
    raw_recv: &mut (impl AsyncRead + Unpin),
) {
    let max = wire::DEFAULT_MAX_FRAME;
    let ping = Frame::Ping { nonce: 7 };
    raw_send
        .write_all(&wire::encode_prefixed(&ping, max).unwrap())
        .await
        .unwrap();
    raw_send.flush().await.unwrap();
    assert_eq!(server_rx.recv().await.unwrap(), Some(ping));
    server_tx.send(&Frame::Pong { nonce: 7 }).await.unwrap();
    let mut reader = FrameReader::new(max);
    let mut chunk = [0; 1024];
    let pong = loop {
        if let Some(frame) = reader.next_frame().unwrap() {
            break frame;
        }
        let n = raw_recv.read(&mut chunk).await.unwrap();
        assert!(n > 0, "the frame stream ended");
        reader.push(&chunk[..n]);
    };
    assert_eq!(pong, Frame::Pong { nonce: 7 });
}
