//! One link session, edge side: dial and hello, then the loop that applies downstream data
//! through metamanager, acks it once committed, answers inventory requests, drains the outbox
//! and forwards local requests.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use beehive::{Context, Mailbox, Message, MsgId, Operation};
use link::FrameSink;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use wire::{
    Event, Frame, Hello, InventoryEntry, KeepaliveConfig, Limits, Outbound, Pushed, RecvConfig,
    Role, SessionConfig, WindowConfig,
};

use crate::{EdgeHub, HubError, LinkState, NAME};

/// The clock: tokio's, so a paused runtime drives sessions in virtual time.
fn now() -> Instant {
    tokio::time::Instant::now().into_std()
}

/// A connection that got its welcome.
pub(crate) struct Established {
    /// The certificate this connection presented.
    cert_pem: String,
    sink: FrameSink,
    frames: link::FrameChannel,
    welcome: wire::Welcome,
    /// The streams cloudhub opens on this connection (its tunnel to this node's kubelet API).
    tunnels: Option<link::TunnelAcceptor>,
}

/// Dials `server`, says hello and reads the welcome.
pub(crate) async fn dial(hub: &EdgeHub, server: &str) -> Result<Established, HubError> {
    let (transport, _, handshake, write) = hub.config.endpoints();
    let addr = tokio::net::lookup_host(server)
        .await
        .map_err(|source| HubError::Resolve {
            server: server.into(),
            source,
        })?
        .next()
        .ok_or_else(|| HubError::Resolve {
            server: server.into(),
            source: std::io::Error::other("no address"),
        })?;
    let mut tls = hub.identity();
    tls.server_name = hub
        .config
        .server_name
        .clone()
        .unwrap_or_else(|| host_of(server).to_string());
    let limits = link::Limits {
        max_frame: hub.config.max_frame as usize,
        handshake_timeout: handshake,
        write_timeout: write,
    };
    let mut conn = link::connect(transport, addr, &tls, limits).await?;
    let tunnels = conn.take_acceptor();
    let (mut sink, stream) = conn.split();
    let mut frames = stream.into_channel(256);
    let hello = Hello {
        protocol_versions: wire::SUPPORTED_PROTOCOL_VERSIONS.to_vec(),
        node_id: hub.node.clone(),
        inventory_digest: hub.meta.digest().await?,
        limits: Limits {
            max_frame: hub.config.max_frame,
            recv_window: hub.config.window,
        },
        resume: None,
    };
    sink.send(&Frame::Hello(hello)).await?;
    let first = tokio::time::timeout(handshake, frames.recv())
        .await
        .map_err(|_| HubError::NoWelcome)?;
    let welcome = match first {
        Some(Ok(frame)) => wire::read_welcome(frame, wire::SUPPORTED_PROTOCOL_VERSIONS)?,
        Some(Err(e)) => return Err(e.into()),
        None => return Err(HubError::PeerClosed("closed before welcome".into())),
    };
    Ok(Established {
        cert_pem: tls.cert_pem,
        sink,
        frames,
        welcome,
        tunnels,
    })
}

/// Runs a session until the link drops or edgecore shuts down.
pub(crate) async fn run(
    hub: &EdgeHub,
    ctx: &Context,
    mailbox: &mut Mailbox,
    shutdown: &CancellationToken,
    established: Established,
    server: &str,
) -> Result<(), HubError> {
    let Established {
        cert_pem,
        sink,
        mut frames,
        welcome,
        tunnels,
    } = established;
    if let (Some(tunnels), Some(serve)) = (tunnels, hub.tunnels.clone()) {
        hub.tasks
            .spawn(accept_tunnels(tunnels, serve, shutdown.clone()));
    }
    let window = WindowConfig {
        window: hub.config.window,
        ..WindowConfig::default()
    };
    let mut outbound = Outbound::new(hub.config.window as usize * 4, window);
    outbound.set_peer_window(welcome.limits.recv_window);
    // What this end's sink sends and what the cloud reads, whichever is smaller.
    outbound.set_max_frame(hub.config.max_frame.min(welcome.limits.max_frame) as usize);
    let config = SessionConfig {
        recv: RecvConfig {
            window: hub.config.window,
            ..RecvConfig::default()
        },
        keepalive: KeepaliveConfig {
            interval: hub.config.heartbeat,
            timeout: hub.config.keepalive_timeout,
        },
        ..SessionConfig::default()
    };
    let mut session = Session {
        hub,
        cert_pem,
        ctx,
        sink,
        outbound,
        core: wire::Session::new(Role::Edge, config, now()),
        to_meta: spawn_forwarder(hub.downstream.clone(), &hub.tasks, shutdown.clone()),
        at_meta: HashMap::new(),
        taken: Taken::default(),
        requests: HashSet::new(),
        bucket: TokenBucket::new(hub.config.message_qps, hub.config.message_burst, now()),
        outbox_dirty: true,
        peer_max_frame: welcome.limits.max_frame as usize,
        batch: Vec::new(),
    };
    hub.state.send_replace(LinkState::Connected {
        session_id: welcome.session_id,
        server: server.to_string(),
    });
    let now_unix = crate::metrics::unix_now();
    hub.stats.last_sync.store(now_unix, Ordering::Relaxed);
    tracing::info!(%server, session_id = welcome.session_id, "linked to cloudhub");
    let result = session.run_loop(&mut frames, mailbox, shutdown).await;
    session.fail_requests();
    if matches!(result, Err(HubError::Shutdown)) {
        session.sink.close("edgecore shutting down").await;
    }
    result
}

/// Hands each stream cloudhub opens on this connection to `serve`, until the connection ends.
async fn accept_tunnels(
    mut tunnels: link::TunnelAcceptor,
    serve: crate::TunnelServer,
    shutdown: CancellationToken,
) {
    loop {
        let stream = tokio::select! {
            biased;
            _ = shutdown.cancelled() => return,
            stream = tunnels.accept() => stream,
        };
        match stream {
            Some(stream) => serve(stream),
            None => return,
        }
    }
}

struct Session<'a> {
    hub: &'a EdgeHub,
    /// The certificate this session's connection presented.
    cert_pem: String,
    ctx: &'a Context,
    sink: FrameSink,
    /// Upstream queue and window; per session (the durable queue is the outbox).
    outbound: Outbound,
    core: wire::Session,
    to_meta: mpsc::UnboundedSender<Message>,
    /// Downstream messages handed to metamanager, by id, with their seq.
    at_meta: HashMap<MsgId, u64>,
    /// Outbox entries taken this session.
    taken: Taken,
    /// Sync requests from local modules waiting for the cloud's reply.
    requests: HashSet<MsgId>,
    bucket: TokenBucket,
    outbox_dirty: bool,
    peer_max_frame: usize,
    batch: Vec<Frame>,
}

/// The outbox entries a session took into its upstream queue (until the cloud acks them).
#[derive(Default)]
struct Taken {
    /// Upstream messages from the outbox, by id, with their outbox entry id.
    sent: HashMap<MsgId, u64>,
    /// Outbox entry ids taken.
    ids: HashSet<u64>,
}

// === impl Session ===

impl Session<'_> {
    async fn run_loop(
        &mut self,
        frames: &mut link::FrameChannel,
        mailbox: &mut Mailbox,
        shutdown: &CancellationToken,
    ) -> Result<(), HubError> {
        let mut local = Vec::with_capacity(256);
        loop {
            self.refill_from_outbox().await?;
            self.flush_due(now()).await?;
            let deadline = self.next_deadline();
            tokio::select! {
                biased;
                _ = shutdown.cancelled() => return Err(HubError::Shutdown),
                frame = frames.recv() => match frame {
                    Some(Ok(frame)) => self.on_frame(frame).await?,
                    Some(Err(e)) => return Err(e.into()),
                    None => return Err(HubError::PeerClosed("connection closed".into())),
                },
                n = mailbox.recv_many(&mut local, 256) => {
                    if n == 0 {
                        return Err(HubError::Shutdown);
                    }
                    for msg in local.drain(..) {
                        self.on_local(msg)?;
                    }
                }
                _ = self.hub.meta.outbox_changed() => self.outbox_dirty = true,
                () = self.hub.renewed.notified() => {
                    // A renewal made before this connection was dialled is already in use.
                    if self.hub.identity().cert_pem != self.cert_pem {
                        return Err(HubError::Renewed);
                    }
                }
                _ = tokio::time::sleep_until(tokio::time::Instant::from_std(deadline)) => {}
            }
        }
    }

    async fn flush_due(&mut self, now: Instant) -> Result<(), HubError> {
        while let Some(frame) = self.core.poll_transmit(&mut self.outbound, now)? {
            self.batch.push(frame);
        }
        // Transmitting reports only messages too large to send (the others come from frames).
        while let Some(event) = self.core.poll_event() {
            if let Event::Oversized(dropped) = event {
                self.on_oversized(*dropped).await?;
            }
        }
        self.report_stats();
        if self.batch.is_empty() {
            return Ok(());
        }
        for frame in self.batch.drain(..) {
            self.sink.feed(&frame).await?;
        }
        self.sink.flush().await?;
        Ok(())
    }

    /// Adds what the core counted since the last report to the hub's stats.
    fn report_stats(&mut self) {
        let new = self.core.take_stats();
        let stats = &self.hub.stats;
        let sent = new.sent + new.retransmits;
        stats.upstream_sent.fetch_add(sent, Ordering::Relaxed);
        stats.upstream_acked.fetch_add(new.acked, Ordering::Relaxed);
        stats.downstream.fetch_add(new.received, Ordering::Relaxed);
        stats
            .duplicates
            .fetch_add(new.duplicates, Ordering::Relaxed);
    }

    fn next_deadline(&self) -> Instant {
        let outbox = (self.outbox_dirty && self.has_room()).then(|| self.bucket.next_token());
        let core = self.core.poll_timeout(&self.outbound);
        outbox.map_or(core, |o| o.min(core))
    }

    fn has_room(&self) -> bool {
        self.outbound.queue().len() + self.outbound.window().len() < self.hub.config.window as usize
    }

    /// Moves outbox entries into the upstream window, within the rate limit.
    async fn refill_from_outbox(&mut self) -> Result<(), HubError> {
        if !self.outbox_dirty || !self.has_room() {
            return Ok(());
        }
        let tokens = self
            .bucket
            .take_up_to(self.hub.config.window as usize, now());
        if tokens == 0 {
            return Ok(());
        }
        let entries = self
            .hub
            .meta
            .store()
            .outbox_peek(tokens + self.taken.ids.len())
            .await?;
        let fresh: Vec<_> = entries
            .into_iter()
            .filter(|e| !self.taken.ids.contains(&e.id))
            .collect();
        self.outbox_dirty = fresh.len() >= tokens;
        self.bucket.give_back(tokens.saturating_sub(fresh.len()));
        let mut left = fresh.len().min(tokens);
        for entry in fresh.into_iter().take(tokens) {
            left -= 1;
            match beehive::codec::decode(&entry.payload) {
                Ok(msg) => {
                    if !self
                        .taken
                        .take(&mut self.outbound, entry.id, entry.key, msg)
                    {
                        // Left untaken: a later refill, once the queue has room, takes it.
                        self.outbox_dirty = true;
                        self.bucket.give_back(left + 1);
                        break;
                    }
                }
                Err(e) => {
                    tracing::error!(outbox_id = entry.id, error = %e, "undecodable outbox entry dropped");
                    self.hub.meta.outbox_ack(vec![entry.id]).await?;
                }
            }
        }
        Ok(())
    }

    async fn on_frame(&mut self, frame: Frame) -> Result<(), HubError> {
        let now = now();
        self.core.handle_frame(frame, &mut self.outbound, now)?;
        while let Some(event) = self.core.poll_event() {
            match event {
                Event::Data { seq, msg } => self.on_data(seq, *msg, now)?,
                Event::Acked(acked) => self.on_acked(&acked).await?,
                Event::InventoryRequested => self.send_inventory().await?,
                Event::ResyncDone { upserts, deletes } => {
                    tracing::info!(upserts, deletes, "in sync with the cloud");
                }
                Event::Oversized(dropped) => self.on_oversized(*dropped).await?,
                Event::Inventory(_) => unreachable!("the edge role never receives an inventory"),
            }
        }
        Ok(())
    }

    fn on_data(&mut self, seq: u64, msg: Message, now: Instant) -> Result<(), HubError> {
        if let Some(parent) = msg.parent_id() {
            // The cloud's answer to a request from a local module.
            self.requests.remove(&parent);
            if self.ctx.respond(msg).is_err() {
                tracing::debug!(%parent, "reply from the cloud came after its waiter gave up");
            }
            return Ok(self.core.processed(seq, now)?);
        }
        match msg.router.operation {
            Operation::Insert | Operation::Update | Operation::Delete => {
                let mut msg = msg;
                msg.router.source = NAME.into();
                msg.header.sync = false;
                self.at_meta.insert(msg.id(), seq);
                let _ = self.to_meta.send(msg);
                Ok(())
            }
            _ => {
                let group = msg.router.group.clone();
                if let Err(e) = self.ctx.try_send_to_group(&group, msg) {
                    tracing::warn!(%group, error = %e, "downstream message for no local module dropped");
                }
                Ok(self.core.processed(seq, now)?)
            }
        }
    }

    /// The cloud acked upstream messages: the outbox entries they came from are done.
    async fn on_acked(&mut self, acked: &[wire::Acked]) -> Result<(), HubError> {
        let now = crate::metrics::unix_now();
        self.hub.stats.last_sync.store(now, Ordering::Relaxed);
        let done: Vec<u64> = acked
            .iter()
            .filter_map(|a| self.taken.acked(a.msg_id))
            .collect();
        if !done.is_empty() {
            self.hub.meta.outbox_ack(done).await?;
            self.outbox_dirty = true;
        }
        Ok(())
    }

    /// A message from a local module: metamanager's commit report, or something for the cloud.
    fn on_local(&mut self, msg: Message) -> Result<(), HubError> {
        if let Some(parent) = msg.parent_id()
            && let Some(seq) = self.at_meta.remove(&parent)
        {
            if msg.router.operation == Operation::Error {
                tracing::warn!(%parent, error = %String::from_utf8_lossy(&msg.content), "downstream message refused by metamanager");
            }
            return Ok(self.core.processed(seq, now())?);
        }
        if msg.parent_id().is_some() {
            return Ok(()); // a commit report from an earlier session: the cloud resends that message
        }
        if msg.header.sync {
            self.requests.insert(msg.id());
        }
        let key = format!("req/{}", msg.id());
        if let Err(full) = self.outbound.push(key, msg) {
            let msg = *full.msg;
            let resp = msg.error_response(NAME, "edgehub upstream queue is full; try again");
            let _ = self.ctx.respond(resp);
        }
        Ok(())
    }

    /// An upstream message too large for the link was dropped unsent: a local module waiting
    /// for its reply gets an error now, an outbox entry is removed (it could never go), and
    /// either way the upstream queue moves on.
    async fn on_oversized(&mut self, dropped: wire::Oversized) -> Result<(), HubError> {
        let wire::Oversized { key, msg, len, max } = dropped;
        self.hub
            .stats
            .upstream_oversized
            .fetch_add(1, Ordering::Relaxed);
        tracing::error!(node_id = %self.hub.node, key = %key, size = len, limit = max, "upstream message exceeds the link's frame limit; dropped unsent");
        if self.requests.remove(&msg.id()) {
            let text =
                format!("the request of {len} bytes exceeds the link's frame limit of {max} bytes");
            let _ = self.ctx.respond(msg.error_response(NAME, text));
        }
        if let Some(entry) = self.taken.acked(msg.id()) {
            self.hub.meta.outbox_ack(vec![entry]).await?;
            self.outbox_dirty = true;
        }
        Ok(())
    }

    async fn send_inventory(&mut self) -> Result<(), HubError> {
        let held = self.hub.meta.inventory().await?;
        self.hub.stats.inventories.fetch_add(1, Ordering::Relaxed);
        tracing::info!(objects = held.len(), "sending inventory for resync");
        let entries = held.into_iter().map(|(k, rv)| InventoryEntry {
            key: wire::object_key(&k.resource, Some(&k.namespace), &k.name),
            resource_version: rv,
        });
        self.core.send_inventory(entries, self.peer_max_frame);
        Ok(())
    }

    /// Local modules waiting for the cloud get an answer now rather than at their timeout.
    fn fail_requests(&mut self) {
        for id in self.requests.drain() {
            let mut resp = Message::new()
                .route(NAME, "", "", Operation::Error)
                .with_content(crate::LINK_LOST);
            resp.header.parent_id = Some(id);
            let _ = self.ctx.respond(resp);
        }
    }
}

// === impl Taken ===

impl Taken {
    /// Queues outbox entry `entry_id` (`key`, `msg`) upstream and marks it taken. A full queue
    /// leaves it untaken and returns false: the entry stays in the outbox for a later refill.
    fn take(&mut self, outbound: &mut Outbound, entry_id: u64, key: String, msg: Message) -> bool {
        let msg_id = msg.id();
        match outbound.push(key, msg) {
            Ok(Pushed::Replaced(older)) => {
                // The outbox replaced that payload too (a new id for the same key): its entry
                // is gone, nothing will ack it.
                if let Some(id) = self.sent.remove(&older.id()) {
                    self.ids.remove(&id);
                }
            }
            Ok(Pushed::Queued | Pushed::AlreadyInFlight) => {}
            Err(full) => {
                tracing::debug!(outbox_id = entry_id, key = %full.key, "upstream queue full; outbox entry left for later");
                return false;
            }
        }
        self.sent.insert(msg_id, entry_id);
        self.ids.insert(entry_id);
        true
    }

    /// The cloud acked message `msg_id`: the id of its outbox entry, if it came from the outbox.
    fn acked(&mut self, msg_id: MsgId) -> Option<u64> {
        let id = self.sent.remove(&msg_id)?;
        self.ids.remove(&id);
        Some(id)
    }
}

/// Hands downstream messages to metamanager in order, off the session loop, so the loop never
/// waits on metamanager's mailbox (the window bounds how many are queued here). It runs under
/// `tasks` until its session drops the sender or `shutdown` (what it has not handed over is not
/// acked, so the cloud sends it again).
fn spawn_forwarder(
    downstream: metamanager::Downstream,
    tasks: &TaskTracker,
    shutdown: CancellationToken,
) -> mpsc::UnboundedSender<Message> {
    let (tx, mut rx) = mpsc::unbounded_channel::<Message>();
    tasks.spawn(async move {
        loop {
            let sent = tokio::select! {
                biased;
                _ = shutdown.cancelled() => break,
                msg = rx.recv() => match msg {
                    Some(msg) => downstream.send(msg),
                    None => break,
                },
            };
            let sent = tokio::select! {
                biased;
                _ = shutdown.cancelled() => break,
                sent = sent => sent,
            };
            if let Err(e) = sent {
                tracing::error!(error = %e, "metamanager is gone; downstream message not applied");
            }
        }
    });
    tx
}

fn host_of(server: &str) -> &str {
    match server.rsplit_once(':') {
        Some((host, _)) => host.trim_start_matches('[').trim_end_matches(']'),
        None => server,
    }
}

/// A token bucket for the outbox drain rate.
struct TokenBucket {
    rate: f64,
    burst: f64,
    tokens: f64,
    at: Instant,
}

impl TokenBucket {
    fn new(qps: u32, burst: u32, now: Instant) -> Self {
        let burst = f64::from(burst.max(1));
        TokenBucket {
            rate: f64::from(qps.max(1)),
            burst,
            tokens: burst,
            at: now,
        }
    }

    fn refill(&mut self, now: Instant) {
        let elapsed = now.saturating_duration_since(self.at).as_secs_f64();
        self.tokens = (self.tokens + elapsed * self.rate).min(self.burst);
        self.at = now;
    }

    /// Takes up to `max` whole tokens.
    fn take_up_to(&mut self, max: usize, now: Instant) -> usize {
        self.refill(now);
        let n = (self.tokens.floor() as usize).min(max);
        self.tokens -= n as f64;
        n
    }

    fn give_back(&mut self, n: usize) {
        self.tokens = (self.tokens + n as f64).min(self.burst);
    }

    /// When the next whole token is there.
    fn next_token(&self) -> Instant {
        let missing = (1.0 - self.tokens).max(0.0);
        self.at + Duration::from_secs_f64(missing / self.rate)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bucket_allows_a_burst_then_the_rate() {
        let t0 = Instant::now();
        let mut b = TokenBucket::new(10, 5, t0);
        assert_eq!(b.take_up_to(100, t0), 5);
        assert_eq!(b.take_up_to(100, t0), 0);
        assert_eq!(b.next_token(), t0 + Duration::from_millis(100));
        assert_eq!(b.take_up_to(100, t0 + Duration::from_millis(350)), 3);
        b.give_back(2);
        assert_eq!(b.take_up_to(1, t0 + Duration::from_millis(350)), 1);
    }

    #[test]
    fn an_outbox_entry_that_finds_the_queue_full_is_left_untaken_and_taken_later() {
        let now = Instant::now();
        let mut outbound = Outbound::new(2, WindowConfig::default());
        let status = |n: u32| {
            Message::new().route(
                NAME,
                "meta",
                format!("default/pods/p{n}"),
                Operation::Update,
            )
        };
        let mut taken = Taken::default();
        assert!(taken.take(&mut outbound, 1, "k1".into(), status(1)));
        assert!(taken.take(&mut outbound, 2, "k2".into(), status(2)));
        let third = status(3);
        let third_id = third.id();
        assert!(!taken.take(&mut outbound, 3, "k3".into(), third));
        assert!(
            !taken.ids.contains(&3),
            "a refused entry must not count as taken"
        );
        // The queue drains into the window and is acked; the entry is taken on the next try.
        while outbound.poll_transmit(now).is_some() {}
        assert!(taken.take(&mut outbound, 3, "k3".into(), status(3)));
        assert!(taken.ids.contains(&3));
        assert_eq!(
            taken.acked(third_id),
            None,
            "the refused message was never sent"
        );
    }

    #[tokio::test]
    async fn the_shutdown_wait_covers_a_forwarder_still_handing_messages_over() {
        // A metamanager that never runs: its downstream queue (room for one) fills and stays full.
        let dir = tempfile::tempdir().unwrap();
        let writer = objstore::Writer::open(dir.path().join("edge.db"), Default::default());
        let handle = metamanager::Handle::new(writer.unwrap());
        let config = metamanager::Config {
            max_batch: 1,
            ..Default::default()
        };
        let stuck = metamanager::MetaManager::new(config, handle);
        let (tasks, shutdown) = (TaskTracker::new(), CancellationToken::new());
        let to_meta = spawn_forwarder(stuck.downstream(), &tasks, shutdown.clone());
        for n in 0..3 {
            let msg = Message::new().route(
                NAME,
                "meta",
                format!("default/pods/p{n}"),
                Operation::Update,
            );
            to_meta.send(msg).unwrap();
        }
        drop(to_meta);
        tasks.close();
        let early = tokio::time::timeout(Duration::from_millis(300), tasks.wait()).await;
        assert!(
            early.is_err(),
            "the wait ended while the forwarder was still sending"
        );
        shutdown.cancel();
        tokio::time::timeout(Duration::from_secs(5), tasks.wait())
            .await
            .expect("a shutdown ends the forwarder");
    }

    #[test]
    fn hosts_come_out_of_server_addresses() {
        assert_eq!(host_of("cloud.example:10000"), "cloud.example");
        assert_eq!(host_of("127.0.0.1:10000"), "127.0.0.1");
        assert_eq!(host_of("[::1]:10000"), "::1");
    }
}
