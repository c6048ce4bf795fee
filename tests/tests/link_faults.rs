//! The link under faults: an edge killed mid-stream, a cloud restarted under connected nodes,
//! a lossy or silent path, and peers that lie or break the protocol.

use std::sync::Arc;
use std::time::Duration;

use e2e::controller::Desired;
use e2e::{Pki, Ports, cloud, edge, edge_config};
use link::Transport;
use link::faultproxy::{Direction, FaultProxy};
use testkit::eventually;

const CONVERGE: Duration = Duration::from_secs(60);
const EDGECORE: &str = env!("CARGO_BIN_EXE_e2e-edgecore");

/// What the edge store at `db` holds, read through a second connection.
async fn held_on_disk(db: &std::path::Path) -> std::collections::BTreeMap<String, String> {
    let config = objstore::StoreConfig {
        verify_on_open: false,
        ..Default::default()
    };
    let store = objstore::Writer::open(db, config).unwrap();
    e2e::held(&store).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edge_killed_mid_stream_converges_without_losing_or_resending_anything() {
    let pki = Pki::new();
    let cloud = cloud(&pki, Desired::new(), Ports::default()).await;
    let node = "edge-kill";
    let config = edge_config(
        &pki.node(node),
        cloud.addr(Transport::WebSocket),
        Transport::WebSocket,
        &pki.path("edge.db"),
    );
    let mut child = e2e::spawn_edgecore(EDGECORE, &config, pki.dir.path());
    for i in 0..3_000u64 {
        cloud.desired.put_pod(node, &format!("p{i}"), 10 + i).await;
    }
    let hub = cloud.hub().clone();
    eventually("the edge acks a first part", CONVERGE, || {
        let acked = hub.node(node).map_or(0, |c| c.acked);
        std::future::ready(acked >= 300)
    })
    .await;
    child.0.kill().unwrap();
    child.0.wait().unwrap();
    eventually("the cloud notices the edge is gone", CONVERGE, || {
        std::future::ready(!hub.node(node).unwrap().connected)
    })
    .await;
    // Counted once the old session is over: what it sent is final.
    let at_kill = hub.node(node).unwrap();
    let held = held_on_disk(&pki.path("edge.db")).await;
    let expected = cloud.desired.expected(node);
    assert!(
        held.len() as u64 >= at_kill.acked,
        "acked {} but only {} on disk",
        at_kill.acked,
        held.len()
    );
    assert!(
        held.iter().all(|(k, rv)| expected.get(k) == Some(rv)),
        "the edge holds something it was never sent"
    );

    let _child = e2e::spawn_edgecore(EDGECORE, &config, pki.dir.path());
    eventually("the restarted edge converges", CONVERGE, || async {
        held_on_disk(&pki.path("edge.db")).await == expected
    })
    .await;
    let after = hub.node(node).unwrap();
    let missing = (expected.len() - held.len()) as u64;
    assert_eq!(
        after.sent - at_kill.sent,
        missing,
        "only what the edge lacked was sent again"
    );
    assert_eq!(
        after.resyncs - at_kill.resyncs,
        1,
        "one resync by inventory on reconnect"
    );
    cloud.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_cloud_restart_nodes_resync_by_digest_and_nothing_unchanged_is_resent() {
    let pki = Pki::new();
    let desired = Desired::new();
    let cloud1 = cloud(&pki, desired.clone(), Ports::default()).await;
    let (ws, quic) = (
        cloud1.addr(Transport::WebSocket),
        cloud1.addr(Transport::Quic),
    );
    let a = edge(edge_config(
        &pki.node("a"),
        ws,
        Transport::WebSocket,
        &pki.path("a.db"),
    ))
    .await;
    let b = edge(edge_config(
        &pki.node("b"),
        quic,
        Transport::Quic,
        &pki.path("b.db"),
    ))
    .await;
    for i in 0..500u64 {
        desired.put_pod("a", &format!("p{i}"), 100 + i).await;
        desired.put_pod("b", &format!("p{i}"), 100 + i).await;
    }
    eventually("both edges converge", CONVERGE, || async {
        a.held().await == desired.expected("a") && b.held().await == desired.expected("b")
    })
    .await;
    let ports = cloud1.ports();
    cloud1.stop().await;
    // While the cloud is down, what node a should hold changes.
    desired.put_pod_silently("a", "while-down", 7);

    let cloud2 = cloud(&pki, desired.clone(), ports).await;
    let hub = cloud2.hub().clone();
    eventually("both edges are back and in sync", CONVERGE, || async {
        hub.sessions() == 2 && a.held().await == desired.expected("a")
    })
    .await;
    let (ca, cb) = (hub.node("a").unwrap(), hub.node("b").unwrap());
    assert_eq!(
        (cb.sent, cb.resyncs),
        (0, 0),
        "equal digests: nothing sent to b"
    );
    assert_eq!(
        (ca.sent, ca.resyncs),
        (1, 1),
        "only the changed object went to a"
    );
    assert_eq!(b.held().await, desired.expected("b"));
    a.stop().await;
    b.stop().await;
    cloud2.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delay_silence_and_cuts_on_the_path_end_in_convergence() {
    let pki = Pki::new();
    let cloud = cloud(&pki, Desired::new(), Ports::default()).await;
    let proxy = FaultProxy::start(cloud.addr(Transport::WebSocket))
        .await
        .unwrap();
    let node = "edge-faults";
    let mut config = edge_config(
        &pki.node(node),
        proxy.local_addr(),
        Transport::WebSocket,
        &pki.path("e.db"),
    );
    config.modules.edge_hub.heartbeat = Duration::from_millis(300);
    config.modules.edge_hub.keepalive_timeout = Duration::from_secs(1);
    let edge = edge(config).await;
    proxy.set_delay(Direction::ToTarget, Duration::from_millis(25));
    proxy.set_delay(Direction::ToClient, Duration::from_millis(25));
    for i in 0..300u64 {
        cloud.desired.put_pod(node, &format!("p{i}"), 1 + i).await;
    }
    eventually("converges over a 50 ms round trip", CONVERGE, || async {
        edge.held().await == cloud.desired.expected(node)
    })
    .await;

    // A silent, half-open path: the edge's keepalive notices, the link comes back on its own.
    proxy.blackhole();
    for i in 0..300u64 {
        cloud
            .desired
            .put_pod(node, &format!("p{i}"), 1_000 + i)
            .await;
    }
    cloud.desired.delete_pod(node, "p0").await;
    let link = edge.running.hub().unwrap().state();
    eventually(
        "the edge's keepalive declares the silent link dead",
        CONVERGE,
        || std::future::ready(*link.borrow() == edgehub::LinkState::Disconnected),
    )
    .await;
    proxy.resume();
    eventually("converges after the silence", CONVERGE, || async {
        edge.held().await == cloud.desired.expected(node)
    })
    .await;

    // Every connection cut at once, mid-stream.
    for i in 0..300u64 {
        cloud
            .desired
            .put_pod(node, &format!("p{i}"), 5_000 + i)
            .await;
    }
    proxy.cut();
    eventually("converges after the cut", CONVERGE, || async {
        edge.held().await == cloud.desired.expected(node)
    })
    .await;
    edge.stop().await;
    cloud.stop().await;
}

/// Dials cloudhub as `cert_node` and says hello as `claimed`; returns the cloud's first answer.
async fn hello_as(
    pki: &Pki,
    addr: std::net::SocketAddr,
    cert_node: &str,
    claimed: &str,
) -> (wire::Frame, link::FrameSink, link::FrameChannel) {
    hello_with_window(pki, addr, cert_node, claimed, 16).await
}

/// [`hello_as`] with the receive window the hello announces.
async fn hello_with_window(
    pki: &Pki,
    addr: std::net::SocketAddr,
    cert_node: &str,
    claimed: &str,
    recv_window: u32,
) -> (wire::Frame, link::FrameSink, link::FrameChannel) {
    let conn = dial_ws(pki, addr, cert_node).await.unwrap();
    let (mut sink, stream) = conn.split();
    let mut frames = stream.into_channel(16);
    let hello = wire::Hello {
        protocol_versions: wire::SUPPORTED_PROTOCOL_VERSIONS.to_vec(),
        node_id: claimed.into(),
        inventory_digest: wire::Digest::EMPTY,
        limits: wire::Limits {
            max_frame: 1 << 20,
            recv_window,
        },
        resume: None,
    };
    sink.send(&wire::Frame::Hello(hello)).await.unwrap();
    let first = tokio::time::timeout(Duration::from_secs(10), frames.recv())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    (first, sink, frames)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_cannot_claim_another_nodes_name() {
    let pki = Pki::new();
    let cloud = cloud(&pki, Desired::new(), Ports::default()).await;
    let (answer, _, _) =
        hello_as(&pki, cloud.addr(Transport::WebSocket), "mallory", "victim").await;
    match answer {
        wire::Frame::Refuse { reason, .. } => assert!(
            reason.contains("victim") && reason.contains("mallory"),
            "{reason}"
        ),
        other => panic!("impersonation answered with {other:?}"),
    }
    assert_eq!(cloud.hub().sessions(), 0);
    assert!(cloud.hub().node("victim").is_none_or(|c| !c.connected));
    cloud.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_that_breaks_the_protocol_loses_its_session_and_no_one_else_does() {
    let pki = Pki::new();
    let cloud = cloud(&pki, Desired::new(), Ports::default()).await;
    let addr = cloud.addr(Transport::WebSocket);
    let good = edge(edge_config(
        &pki.node("good"),
        addr,
        Transport::WebSocket,
        &pki.path("good.db"),
    ))
    .await;
    let (welcome, mut sink, mut frames) = hello_as(&pki, addr, "bad", "bad").await;
    assert!(matches!(welcome, wire::Frame::Welcome(_)), "{welcome:?}");
    // Acknowledge data that was never sent.
    sink.send(&wire::Frame::Ack(wire::Ack {
        cumulative: 999,
        selective: vec![],
    }))
    .await
    .unwrap();
    let mut closed = false;
    while let Ok(Some(frame)) = tokio::time::timeout(Duration::from_secs(10), frames.recv()).await {
        match frame {
            Ok(wire::Frame::Close { reason }) => {
                assert!(reason.contains("protocol"), "{reason}");
                closed = true;
            }
            Ok(_) => continue,
            Err(_) => break,
        }
    }
    assert!(closed, "the cloud did not close the session with a reason");
    for i in 0..50u64 {
        cloud.desired.put_pod("good", &format!("p{i}"), 1 + i).await;
    }
    eventually("the well-behaved node is unaffected", CONVERGE, || async {
        good.held().await == cloud.desired.expected("good")
    })
    .await;
    assert!(cloud.hub().node("good").unwrap().connected);
    good.stop().await;
    cloud.stop().await;
}

/// A status a local module (edged) reports for a pod: it goes through metamanager's outbox.
async fn report_status(edge: &e2e::Edge, pod: &str, phase: &str) {
    let msg = beehive::Message::new()
        .route(
            "edged",
            "meta",
            format!("default/pods/{pod}"),
            beehive::Operation::Update,
        )
        .with_content(format!(r#"{{"status":{{"phase":"{phase}"}}}}"#));
    let resp = edge
        .running
        .context()
        .send_sync(metamanager::NAME, msg, Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(
        resp.router.operation,
        beehive::Operation::Response,
        "metamanager queued the status"
    );
}

fn last_phase(desired: &Desired, pod: &str) -> Option<String> {
    let suffix = format!("default/pods/{pod}");
    desired
        .upstream()
        .iter()
        .rfind(|m| m.resource().ends_with(&suffix))
        .map(|m| String::from_utf8_lossy(&m.content).to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn statuses_queued_while_offline_reach_the_cloud_after_reconnect_coalesced() {
    let pki = Pki::new();
    let desired = Desired::new();
    let cloud1 = cloud(&pki, desired.clone(), Ports::default()).await;
    let node = "edge-up";
    let edge = edge(edge_config(
        &pki.node(node),
        cloud1.addr(Transport::WebSocket),
        Transport::WebSocket,
        &pki.path("up.db"),
    ))
    .await;
    let outbox = edge.running.meta().store().clone();
    eventually("linked", CONVERGE, || {
        std::future::ready(cloud1.hub().sessions() == 1)
    })
    .await;

    report_status(&edge, "web", "Running").await;
    eventually(
        "an online status reaches the cloud and leaves the outbox",
        CONVERGE,
        || async {
            last_phase(&desired, "web").is_some_and(|p| p.contains("Running"))
                && outbox.outbox_len().await.unwrap() == 0
        },
    )
    .await;
    let upstream = desired.upstream();
    assert!(
        upstream
            .iter()
            .all(|m| m.resource().starts_with(&format!("node/{node}/"))),
        "cloudhub names the node"
    );

    let ports = cloud1.ports();
    cloud1.stop().await;
    for phase in ["Pending", "ContainerCreating", "Failed"] {
        report_status(&edge, "offline-pod", phase).await;
    }
    assert_eq!(
        outbox.outbox_len().await.unwrap(),
        1,
        "newer statuses replaced the unsent older ones"
    );
    let seen_before = desired.upstream().len();

    let cloud2 = cloud(&pki, desired.clone(), ports).await;
    eventually(
        "the queued status drains after reconnect",
        CONVERGE,
        || async {
            last_phase(&desired, "offline-pod").is_some_and(|p| p.contains("Failed"))
                && outbox.outbox_len().await.unwrap() == 0
        },
    )
    .await;
    assert_eq!(
        desired.upstream().len(),
        seen_before + 1,
        "only the newest status was sent"
    );
    let replies = cloud2.hub().node(node).unwrap().sent;
    assert_eq!(replies, 0, "statuses need no reply sent back down");
    edge.stop().await;
    cloud2.stop().await;
}

/// Dials over WebSocket with `node`'s certificate and a generous handshake timeout of its own.
async fn dial_ws(
    pki: &Pki,
    addr: std::net::SocketAddr,
    node: &str,
) -> Result<link::Conn, link::LinkError> {
    let files = pki.node(node);
    let tls = link::ClientTls {
        ca_pem: std::fs::read_to_string(&files.ca).unwrap(),
        cert_pem: std::fs::read_to_string(&files.cert).unwrap(),
        key_pem: std::fs::read_to_string(&files.key).unwrap(),
        server_name: "127.0.0.1".into(),
    };
    let limits = link::Limits {
        handshake_timeout: Duration::from_secs(20),
        ..link::Limits::default()
    };
    link::connect(Transport::WebSocket, addr, &tls, limits).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handshakes_over_the_limit_wait_their_turn_and_are_refused_after_a_handshake_timeout() {
    let pki = Pki::new();
    let cloud = e2e::cloud_with(&pki, Desired::new(), Ports::default(), |c| {
        c.modules.cloud_hub.max_concurrent_handshakes = 1;
        c.modules.cloud_hub.handshake_timeout = Duration::from_secs(2);
    })
    .await;
    let addr = cloud.addr(Transport::WebSocket);

    // A client that opens TCP and says nothing holds the one handshake slot. The next waits
    // for it, and gets it once the silent one goes away.
    let hub = cloud.hub().clone();
    let silent = tokio::net::TcpStream::connect(addr).await.unwrap();
    eventually("the silent client holds the slot", CONVERGE, || {
        std::future::ready(hub.handshakes() == (1, 0))
    })
    .await;
    let waiting = dial_ws(&pki, addr, "patient");
    tokio::pin!(waiting);
    tokio::select! {
        done = &mut waiting => panic!("the handshake limit let a second handshake run: {done:?}"),
        _ = eventually("the node waits for the slot", CONVERGE, || std::future::ready(hub.handshakes() == (1, 1))) => {}
    }
    drop(silent);
    waiting.await.expect("the waiting node got its turn");
    assert_eq!(hub.handshakes_refused(), 0);

    // Two silent clients hold the slot for a handshake timeout each, one after the other: a
    // node behind them is refused when its own wait reaches the handshake timeout, long before
    // its 20 s dial timeout, so it can back off and come back.
    let _first = tokio::net::TcpStream::connect(addr).await.unwrap();
    eventually("the first silent client holds the slot", CONVERGE, || {
        std::future::ready(hub.handshakes() == (1, 0))
    })
    .await;
    // A margin, not a wait for an event: the second's wait has to outlast the first's handshake
    // timeout by more than the timer's resolution, or it could be refused in the first's place.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let _second = tokio::net::TcpStream::connect(addr).await.unwrap();
    eventually("the second silent client waits", CONVERGE, || {
        std::future::ready(hub.handshakes() == (1, 1))
    })
    .await;
    let started = std::time::Instant::now();
    let refused = dial_ws(&pki, addr, "late").await;
    assert!(refused.is_err(), "a node past the handshake limit got in");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "refused after {:?}, not at the handshake timeout",
        started.elapsed()
    );
    assert_eq!(cloud.hub().handshakes_refused(), 1);
    let mut registry = prometheus_client::registry::Registry::default();
    cloud.hub().register_metrics(&mut registry);
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
    assert!(
        text.contains("cloudhub_handshakes_refused_total 1"),
        "{text}"
    );
    cloud.stop().await;
}

/// A cloud module that holds the one message it gets and answers it, once released, only after
/// it has stopped: the answer comes while cloudcore shuts down.
struct Holder {
    held: Arc<std::sync::Mutex<Option<beehive::Message>>>,
    got: Arc<tokio::sync::Notify>,
    release: Arc<tokio::sync::Notify>,
    answered: Arc<std::sync::atomic::AtomicBool>,
}

#[beehive::async_trait]
impl beehive::Module for Holder {
    fn name(&self) -> &str {
        "holder"
    }

    fn group(&self) -> &str {
        "holder"
    }

    async fn run(
        &self,
        ctx: beehive::Context,
        mailbox: &mut beehive::Mailbox,
        shutdown: beehive::CancellationToken,
    ) -> Result<(), beehive::ModuleError> {
        loop {
            tokio::select! {
                biased;
                _ = shutdown.cancelled() => break,
                m = mailbox.recv() => match m {
                    Some(m) => {
                        *self.held.lock().unwrap() = Some(m);
                        self.got.notify_one();
                    }
                    None => break,
                },
            }
        }
        if let Some(msg) = self.held.lock().unwrap().take() {
            let (release, answered) = (self.release.clone(), self.answered.clone());
            tokio::spawn(async move {
                release.notified().await;
                answered.store(true, std::sync::atomic::Ordering::SeqCst);
                let _ = ctx.respond(msg.response("holder", "done"));
            });
        }
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cloud_shutdown_waits_for_the_upstream_handler_in_flight() {
    use std::sync::atomic::Ordering::SeqCst;

    let pki = Pki::new();
    let holder = Holder {
        held: Default::default(),
        got: Default::default(),
        release: Default::default(),
        answered: Default::default(),
    };
    let (got, release, answered) = (
        holder.got.clone(),
        holder.release.clone(),
        holder.answered.clone(),
    );
    let mut config = e2e::cloud_config(&pki, Ports::default());
    config.modules.edge_controller.enable = false;
    let desired = Desired::new();
    let extra: Vec<Arc<dyn beehive::Module>> = vec![
        e2e::controller::Controller::module(desired.clone()),
        Arc::new(holder),
    ];
    let shutdown = beehive::CancellationToken::new();
    let running = cloudcore::start_with(config, shutdown.clone(), extra)
        .await
        .unwrap();
    let addr = running.hub().unwrap().websocket_addr().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let edge = edge(edge_config(
        &pki.node("n1"),
        addr,
        Transport::WebSocket,
        &dir.path().join("n1.db"),
    ))
    .await;
    // Linked at both ends: the cloud holds the session and the edge's hub sends (a request
    // handed to edgehub before its end is up is refused at once).
    eventually("the edge is linked", CONVERGE, || async {
        let edge_up = matches!(
            *edge.running.hub().unwrap().state().borrow(),
            edgehub::LinkState::Connected { .. }
        );
        running.hub().unwrap().sessions() == 1 && edge_up
    })
    .await;

    // An upstream request the holder keeps; the edge waits for its answer in the background.
    let ask = beehive::Message::new()
        .route(
            "edged",
            "holder",
            "default/things/a",
            beehive::Operation::Query,
        )
        .to("holder");
    let ctx = edge.running.context();
    let waiting = tokio::spawn(async move {
        ctx.send_sync(edgehub::NAME, ask, Duration::from_secs(30))
            .await
    });
    tokio::time::timeout(Duration::from_secs(10), got.notified())
        .await
        .expect("the request reached the holder");

    // The cloud stops while the request is handled: the stop waits for its handler.
    shutdown.cancel();
    let mut stop = tokio::spawn(daemon::Core::from(running).stop());
    let early = tokio::time::timeout(Duration::from_millis(500), &mut stop).await;
    assert!(
        early.is_err(),
        "cloudcore stopped while an upstream handler was in flight"
    );
    release.notify_one();
    let stuck = tokio::time::timeout(Duration::from_secs(10), stop)
        .await
        .expect("cloudcore stopped once the handler finished")
        .unwrap();
    assert!(answered.load(SeqCst));
    assert!(stuck.is_empty(), "modules that did not stop: {stuck:?}");
    waiting.abort();
    edge.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reply_that_finds_the_nodes_queue_full_is_delivered_once_there_is_room() {
    let pki = Pki::new();
    let cloud = e2e::cloud_with(&pki, Desired::new(), Ports::default(), |c| {
        c.modules.cloud_hub.queue_capacity = 2;
    })
    .await;
    let addr = cloud.addr(Transport::WebSocket);
    // A node that takes one message at a time and acks only when the test says so.
    let (welcome, mut sink, mut frames) = hello_with_window(&pki, addr, "n1", "n1", 1).await;
    assert!(matches!(welcome, wire::Frame::Welcome(_)), "{welcome:?}");
    let counters = || cloud.hub().node("n1").unwrap_or_default();
    eventually("the node is connected", CONVERGE, || async {
        counters().connected
    })
    .await;
    cloud.desired.put_pod("n1", "p0", 1).await;
    eventually("one pod in flight", CONVERGE, || async {
        counters().in_flight == 1
    })
    .await;
    cloud.desired.put_pod("n1", "p1", 2).await;
    cloud.desired.put_pod("n1", "p2", 3).await;
    eventually("the queue is full", CONVERGE, || async {
        counters().queued == 2
    })
    .await;
    assert_eq!(counters().dropped, 0);

    // A request whose reply finds the queue full.
    let mut ask =
        beehive::Message::new().route("edged", "x", "default/things/a", beehive::Operation::Query);
    ask.header.sync = true;
    let ask_id = ask.id();
    sink.send(&wire::Frame::Data {
        seq: 1,
        msg: Box::new(ask),
    })
    .await
    .unwrap();
    eventually("the request was handled", CONVERGE, || async {
        !cloud.desired.upstream().is_empty()
    })
    .await;

    // The node acks what it gets; the reply arrives among the pods.
    let replied = tokio::time::timeout(Duration::from_secs(20), async {
        while let Some(Ok(frame)) = frames.recv().await {
            match frame {
                wire::Frame::Data { msg, .. } if msg.parent_id() == Some(ask_id) => return true,
                wire::Frame::Data { seq, .. } => sink
                    .send(&wire::Frame::Ack(wire::Ack {
                        cumulative: seq,
                        selective: vec![],
                    }))
                    .await
                    .unwrap(),
                wire::Frame::Ping { nonce } => {
                    sink.send(&wire::Frame::Pong { nonce }).await.unwrap()
                }
                _ => {}
            }
        }
        false
    })
    .await;
    assert_eq!(replied, Ok(true), "the reply never reached the node");
    cloud.stop().await;
}

/// The frame limit of the oversized-object test: small, so objects over it are cheap to make.
const SMALL_FRAME: u32 = 64 << 10;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_object_over_the_frame_limit_is_dropped_and_the_node_keeps_its_link() {
    let pki = Pki::new();
    let desired = Desired::new();
    let cloud = e2e::cloud_with(&pki, desired.clone(), Ports::default(), |c| {
        c.modules.cloud_hub.max_frame = SMALL_FRAME;
    })
    .await;
    let node = "edge-huge";
    let edge = edge(edge_config(
        &pki.node(node),
        cloud.addr(Transport::WebSocket),
        Transport::WebSocket,
        &pki.path("huge.db"),
    ))
    .await;
    let hub = cloud.hub().clone();
    eventually("linked", CONVERGE, || {
        std::future::ready(hub.sessions() == 1)
    })
    .await;

    // An object over the limit, then a small one behind it in the node's queue.
    let huge = serde_json::json!({"metadata": {"name": "huge"}, "data": "x".repeat(2 * SMALL_FRAME as usize)});
    desired
        .put_object(node, "huge", 1, serde_json::to_vec(&huge).unwrap())
        .await;
    desired.put_pod(node, "small", 2).await;
    eventually(
        "the small object behind the huge one arrives",
        CONVERGE,
        || async { edge.held().await.contains_key("pods/default/small") },
    )
    .await;
    let counters = hub.node(node).unwrap();
    assert_eq!(counters.oversized, 1, "the huge object was dropped once");
    assert!(!edge.held().await.contains_key("pods/default/huge"));

    // Fixed, the object goes down like any other.
    desired.put_pod(node, "huge", 3).await;
    eventually("the fixed object arrives", CONVERGE, || async {
        edge.held()
            .await
            .get("pods/default/huge")
            .map(String::as_str)
            == Some("3")
    })
    .await;

    // A write whose reply is over the limit is answered with an error, not left to time out.
    desired.reply_with(2 * SMALL_FRAME as usize);
    let write = || {
        beehive::Message::new()
            .route(
                "lwproxy",
                "resource",
                "default/configmaps/cm",
                beehive::Operation::Insert,
            )
            .with_content(r#"{"verb":"create"}"#)
    };
    let ctx = edge.running.context();
    let answer = ctx
        .send_sync(edgehub::NAME, write(), Duration::from_secs(20))
        .await
        .expect("answered before the timeout");
    assert_eq!(answer.router.operation, beehive::Operation::Error);
    let text = String::from_utf8_lossy(&answer.content).to_string();
    assert!(text.contains("frame limit"), "{text}");
    desired.reply_with(0);
    let answer = ctx
        .send_sync(edgehub::NAME, write(), Duration::from_secs(20))
        .await
        .unwrap();
    assert_eq!(answer.router.operation, beehive::Operation::Response);

    let connects = edge
        .running
        .hub()
        .unwrap()
        .stats()
        .connects
        .load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(connects, 1, "the node never lost its link");
    assert_eq!(hub.node(node).unwrap().oversized, 2);
    edge.stop().await;
    cloud.stop().await;
}

/// A cloud with few handshake slots (8, 2 of them kept for known addresses, 4 per address),
/// so a flood fills them quickly.
async fn small_handshake_cloud(pki: &Pki) -> e2e::Cloud {
    e2e::cloud_with(pki, Desired::new(), Ports::default(), |c| {
        let hub = &mut c.modules.cloud_hub;
        hub.max_concurrent_handshakes = 8;
        hub.reserved_handshakes = 2;
        hub.max_handshakes_per_address = 4;
        hub.handshake_timeout = Duration::from_secs(6);
    })
    .await
}

/// How long a node may take to link while another address floods the handshakes.
const LINK_WITHIN: Duration = Duration::from_secs(4);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handshake_flood_from_one_address_does_not_keep_a_node_from_linking() {
    let pki = Pki::new();
    let cloud = small_handshake_cloud(&pki).await;
    let addr = cloud.addr(Transport::WebSocket);

    // Half-open connections from 127.0.0.2 that never start TLS, opened before the node dials.
    let flooder = std::net::Ipv4Addr::new(127, 0, 0, 2);
    let held: Vec<_> = futures::future::join_all((0..200).map(|_| async move {
        let socket = tokio::net::TcpSocket::new_v4().ok()?;
        socket.bind((flooder, 0).into()).ok()?;
        socket.connect(addr).await.ok()
    }))
    .await;
    assert!(held.iter().flatten().count() > 100, "the flood connected");

    let started = std::time::Instant::now();
    let node = "edge-flooded";
    let edge = edge(edge_config(
        &pki.node(node),
        addr,
        Transport::WebSocket,
        &pki.path("flooded.db"),
    ))
    .await;
    let hub = cloud.hub().clone();
    eventually("the node links despite the flood", LINK_WITHIN, || {
        std::future::ready(hub.node(node).is_some_and(|c| c.connected))
    })
    .await;
    eprintln!("linked in {:?}", started.elapsed());
    assert!(
        hub.handshakes_refused_per_address() > 0,
        "the flood's connections beyond its share were closed at accept"
    );
    drop(held);
    edge.stop().await;
    cloud.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_linked_before_relinks_through_a_flood_from_many_addresses() {
    let pki = Pki::new();
    let cloud = small_handshake_cloud(&pki).await;
    let addr = cloud.addr(Transport::WebSocket);
    let node = "edge-returning";
    let config = edge_config(
        &pki.node(node),
        addr,
        Transport::WebSocket,
        &pki.path("returning.db"),
    );
    let first = edge(config.clone()).await;
    let hub = cloud.hub().clone();
    eventually("the node links", CONVERGE, || {
        std::future::ready(hub.node(node).is_some_and(|c| c.connected))
    })
    .await;
    first.stop().await;
    eventually("the cloud sees it go", CONVERGE, || {
        std::future::ready(hub.node(node).is_some_and(|c| !c.connected))
    })
    .await;

    // Each of ten addresses within its share, together more than all the open slots.
    let held: Vec<_> = futures::future::join_all((0..40u8).map(|i| async move {
        let source = std::net::Ipv4Addr::new(127, 0, 0, 2 + i % 10);
        let socket = tokio::net::TcpSocket::new_v4().ok()?;
        socket.bind((source, 0).into()).ok()?;
        socket.connect(addr).await.ok()
    }))
    .await;
    assert!(held.iter().flatten().count() > 30, "the flood connected");

    let again = edge(config).await;
    eventually(
        "the returning node links through a reserved slot",
        LINK_WITHIN,
        || std::future::ready(hub.node(node).is_some_and(|c| c.connected)),
    )
    .await;
    drop(held);
    again.stop().await;
    cloud.stop().await;
}
