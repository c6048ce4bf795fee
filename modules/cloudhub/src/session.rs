//! One node's session: handshake, resync, then the loop that moves downstream data under the
//! window, hands upstream data to the controller and acks it once handled, and pings.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use beehive::{Context, Message, MsgId, Operation, SyncError};
use link::{FrameSink, Incoming};
use tokio::sync::mpsc;
use tracing::Instrument;
use wire::{Event, Frame, Hello, HelloCheck, NodeResource, ResyncStart, Role, ToController};

use crate::error::HubError;
use crate::node::NodeSlot;
use crate::{Shared, downstream_key};

/// What an upstream handler task reports back to its session.
enum Handled {
    /// The message was handled (successfully or with a permanent error); ack it, and send the
    /// reply down if there is one.
    Done {
        seq: u64,
        reply: Option<Box<Message>>,
    },
    /// A transient failure: forget the seq so the edge's retransmission is taken again.
    Retry { seq: u64 },
}

/// The state of one live session: the I/O-free core and what this shell adds (the socket, the
/// controller, the node's shared queue).
struct Session<'a> {
    shared: &'a Shared,
    ctx: &'a Context,
    slot: Arc<NodeSlot>,
    sink: FrameSink,
    core: wire::Session,
    handled_tx: mpsc::UnboundedSender<Handled>,
    /// Ids queued before the digest was asked; dropped when the digests match.
    before_digest: Option<HashSet<MsgId>>,
    /// The controller was asked for the node's digest: it counts the node as connected from
    /// then on, so the end of the session is reported even if it never got to `connected`.
    asked_digest: bool,
    batch: Vec<Frame>,
}

/// The clock: tokio's, so a paused runtime drives sessions in virtual time.
fn now() -> Instant {
    tokio::time::Instant::now().into_std()
}

/// Serves one incoming connection to its end, logging how it ended.
pub(crate) async fn serve(
    incoming: Incoming,
    ticket: crate::gate::Ticket,
    shared: Arc<Shared>,
    ctx: Context,
) {
    let remote = incoming.remote_addr();
    let span = tracing::info_span!("session", %remote, node_id = tracing::field::Empty);
    async move {
        match run(incoming, ticket, &shared, &ctx).await {
            Ok(()) => tracing::info!("session ended: the node closed it"),
            Err(HubError::Shutdown) => tracing::debug!("session ended: cloudcore is stopping"),
            Err(HubError::Replaced) => tracing::info!("session replaced by a newer one"),
            Err(e) => tracing::info!(error = %e, cause = ?std::error::Error::source(&e).map(|c| c.to_string()), "session ended"),
        }
    }
    .instrument(span)
    .await
}

/// The handshakes, once a handshake permit is free; a connection that waited a whole handshake
/// timeout for one is refused. An address that held a valid session before may also take one
/// of the reserved permits. `ticket` (the address's share) is given back once the handshakes
/// are over.
async fn establish(
    incoming: Incoming,
    ticket: crate::gate::Ticket,
    shared: &Shared,
) -> Result<link::Conn, HubError> {
    let wait = shared.config.handshake_timeout;
    let waiting = Waiting::count(&shared.handshakes_waiting);
    let known = shared.gate.is_known(incoming.remote_addr().ip());
    let acquire = async {
        let open = shared.handshakes.clone().acquire_owned();
        if !known {
            return open.await;
        }
        tokio::select! {
            permit = open => permit,
            permit = shared.reserved_handshakes.clone().acquire_owned() => permit,
        }
    };
    let acquired = tokio::time::timeout(wait, acquire).await;
    drop(waiting);
    let permit = match acquired {
        Ok(Ok(permit)) => permit,
        Ok(Err(_)) | Err(_) => {
            shared.handshakes_refused.fetch_add(1, Ordering::Relaxed);
            incoming.refuse();
            return Err(HubError::Busy(wait));
        }
    };
    let conn = incoming.establish().await;
    drop((permit, ticket));
    Ok(conn?)
}

/// Counts one connection waiting for a handshake slot for as long as it lives (a shutdown may
/// drop the wait midway).
struct Waiting<'a>(&'a std::sync::atomic::AtomicUsize);

impl<'a> Waiting<'a> {
    fn count(counter: &'a std::sync::atomic::AtomicUsize) -> Self {
        counter.fetch_add(1, Ordering::Relaxed);
        Waiting(counter)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A connection whose node is known and whose hello was read.
struct Admitted {
    node: String,
    sink: FrameSink,
    frames: link::FrameChannel,
    hello: Hello,
    bytes: link::ByteCounters,
    /// Opens streams to the node's kubelet API on this connection.
    tunnels: Option<link::TunnelOpener>,
}

/// The handshakes, the node's name from its certificate, and its hello.
async fn admit(
    incoming: Incoming,
    ticket: crate::gate::Ticket,
    shared: &Shared,
) -> Result<Admitted, HubError> {
    // A shutdown drops a handshake in progress, which closes the connection at once; finished
    // after the process is gone, it would leave the node waiting for its idle timeout.
    let conn = tokio::select! {
        biased;
        _ = shared.shutdown.cancelled() => return Err(HubError::Shutdown),
        conn = establish(incoming, ticket, shared) => conn?,
    };
    let Some(node) = conn.peer_node().map(str::to_string) else {
        let (sink, _) = conn.split();
        sink.close("client certificate is not a node certificate")
            .await;
        return Err(HubError::NotANode);
    };
    tracing::Span::current().record("node_id", node.as_str());
    if let Some(at) = shared.revoked.covers(&node, conn.peer_certificate()) {
        return Err(refuse_revoked(conn, &node, at).await);
    }
    let bytes = conn.bytes();
    let tunnels = conn.opener();
    // A reader task decodes frames while the session writes (reading in the session's own
    // `select!` would save the task and its channel, 1.4 KiB per session, but costs about a
    // tenth of the throughput).
    let (mut sink, stream) = conn.split();
    let mut frames = stream.into_channel(256);
    let hello = tokio::select! {
        biased;
        _ = shared.shutdown.cancelled() => Err(HubError::Shutdown),
        hello = read_hello(&mut frames, shared) => hello,
    };
    let hello = match hello {
        Ok(hello) => hello,
        Err(e) => {
            sink.close(&e.to_string()).await;
            return Err(e);
        }
    };
    if hello.node_id != node {
        let err = wire::HandshakeError::NodeMismatch {
            claimed: hello.node_id.clone(),
            certified: node,
        };
        let _ = sink.send(&err.to_refuse()).await;
        sink.close("impersonation refused").await;
        return Err(err.into());
    }
    Ok(Admitted {
        node,
        sink,
        frames,
        hello,
        bytes,
        tunnels,
    })
}

/// Refuses the session of a revoked certificate, telling the node to stay away a while.
async fn refuse_revoked(conn: link::Conn, node: &str, at: i64) -> HubError {
    let err = wire::HandshakeError::Refused {
        reason: format!(
            "node {node:?} was revoked at Unix time {at} (`keadm revoke`): its certificate is no longer accepted; join it again with a new token"
        ),
        retry_after: Some(std::time::Duration::from_secs(300)),
    };
    let (mut sink, _) = conn.split();
    let _ = sink.send(&err.to_refuse()).await;
    sink.close("node certificate revoked").await;
    err.into()
}

async fn run(
    incoming: Incoming,
    ticket: crate::gate::Ticket,
    shared: &Shared,
    ctx: &Context,
) -> Result<(), HubError> {
    let remote = incoming.remote_addr();
    // What runs before and after the session loop is boxed: a future is as large as its
    // largest step, and a session's task lives as long as its node stays connected (one
    // cloudhub holds many thousands, most of them idle in the loop).
    let Admitted {
        node,
        sink,
        mut frames,
        hello,
        bytes,
        tunnels,
    } = Box::pin(admit(incoming, ticket, shared)).await?;
    let slot = shared.nodes.slot(&node);
    let session_id = shared.next_session_id();
    let cancel = shared.shutdown.child_token();
    if let Some((_, old)) = slot
        .current
        .lock()
        .expect("session lock poisoned")
        .replace((session_id, cancel.clone()))
    {
        old.cancel();
    }
    let _live = slot.live.lock().await;
    *slot.live_bytes.lock().expect("bytes lock poisoned") = Some(bytes);
    let (handled_tx, handled_rx) = mpsc::unbounded_channel();
    let config = wire::SessionConfig {
        recv: wire::RecvConfig {
            window: shared.config.window,
            ..Default::default()
        },
        keepalive: shared.keepalive_config(),
        max_inventory: wire::DEFAULT_MAX_INVENTORY,
    };
    let mut session = Session {
        shared,
        ctx,
        slot: slot.clone(),
        sink,
        core: wire::Session::new(Role::Cloud, config, now()),
        handled_tx,
        before_digest: None,
        asked_digest: false,
        batch: Vec::new(),
    };
    let result = Box::pin(session.open(&hello, session_id)).await;
    let result = match result {
        Ok(()) => {
            // A valid session: the address may use the reserved handshake slots from now on.
            shared.gate.remember(remote.ip());
            *slot.tunnels.lock().expect("tunnels lock poisoned") = tunnels.map(|t| (session_id, t));
            session.run_loop(&mut frames, handled_rx, &cancel).await
        }
        Err(e) => Err(e),
    };
    Box::pin(session.finish(session_id, &result)).await;
    result
}

// === impl Session ===

impl Session<'_> {
    /// Takes over the node's queue, answers the hello and starts the resync.
    async fn open(&mut self, hello: &Hello, session_id: u64) -> Result<(), HubError> {
        {
            let mut ob = self.slot.outbound.lock().expect("outbound lock poisoned");
            ob.reset_for_new_session();
            ob.set_peer_window(hello.limits.recv_window);
            // What this end's sink sends and what the edge reads, whichever is smaller.
            let limit = self.shared.config.max_frame.min(hello.limits.max_frame);
            ob.set_max_frame(limit as usize);
            self.before_digest = Some(ob.queue().ids().collect());
        }
        self.slot.overflowed.store(false, Ordering::Release);
        self.asked_digest = true;
        let desired = self
            .shared
            .desired_digest(self.ctx, &self.slot.name)
            .await?;
        let check = HelloCheck {
            certified_node_id: &self.slot.name,
            supported: wire::SUPPORTED_PROTOCOL_VERSIONS,
            session_id,
            limits: self.shared.limits(),
            desired_digest: desired.unwrap_or(hello.inventory_digest),
        };
        let accepted = match wire::answer_hello(hello, &check) {
            Ok(a) => a,
            Err(e) => {
                let _ = self.sink.send(&e.to_refuse()).await;
                return Err(e.into());
            }
        };
        self.sink.send(&Frame::Welcome(accepted.welcome)).await?;
        self.start_resync(accepted.resync, desired.is_some());
        self.slot.connected.store(true, Ordering::Release);
        self.shared.sessions.fetch_add(1, Ordering::Relaxed);
        let node = self.slot.name.clone();
        self.shared
            .notify_controller(self.ctx, ToController::Connected { node });
        tracing::info!(session_id, "node connected");
        Ok(())
    }

    fn start_resync(&mut self, start: ResyncStart, have_controller: bool) {
        let before = self.before_digest.take().unwrap_or_default();
        if start == ResyncStart::UpToDate && have_controller {
            // The edge holds what it should: whatever was queued before is already there.
            let mut ob = self.slot.outbound.lock().expect("outbound lock poisoned");
            ob.retain(|_, msg| !before.contains(&msg.id()));
        }
        if start == ResyncStart::NeedInventory {
            self.slot.stats.resyncs.fetch_add(1, Ordering::Relaxed);
        }
        self.core.start_resync(start);
    }

    async fn run_loop(
        &mut self,
        frames: &mut link::FrameChannel,
        mut handled: mpsc::UnboundedReceiver<Handled>,
        cancel: &tokio_util::sync::CancellationToken,
    ) -> Result<(), HubError> {
        loop {
            self.flush_due(now()).await?;
            let deadline = self.next_deadline();
            tokio::select! {
                biased;
                _ = cancel.cancelled() => {
                    let replaced = !self.shared.shutdown.is_cancelled();
                    let reason = if replaced { "replaced by a newer session" } else { "cloudhub shutting down" };
                    self.core.close(reason);
                    let _ = Box::pin(self.flush_due(now())).await;
                    return Err(if replaced { HubError::Replaced } else { HubError::Shutdown });
                }
                frame = frames.recv() => match frame {
                    Some(Ok(frame)) => self.on_frame(frame).await?,
                    Some(Err(e)) => return Err(e.into()),
                    None => return Err(HubError::PeerClosed("connection closed".into())),
                },
                Some(done) = handled.recv() => self.on_handled(done)?,
                _ = self.slot.wake.notified() => {}
                _ = tokio::time::sleep_until(tokio::time::Instant::from_std(deadline)) => {}
            }
        }
    }

    /// Sends everything that is due now: data under the window, acks, pings, resync frames.
    async fn flush_due(&mut self, now: Instant) -> Result<(), HubError> {
        if self.slot.overflowed.swap(false, Ordering::AcqRel) && !self.core.inventory_pending() {
            tracing::warn!("downstream queue overflowed; resyncing the node by inventory");
            self.slot.stats.resyncs.fetch_add(1, Ordering::Relaxed);
            self.core.request_inventory();
        }
        self.slot.admit_held_replies();
        self.take_transmits(now)?;
        // Room the transmits made goes to held replies first.
        if self.slot.admit_held_replies() {
            self.take_transmits(now)?;
        }
        self.report_stats();
        if self.batch.is_empty() {
            return Ok(());
        }
        for frame in self.batch.drain(..) {
            if let Frame::ResyncDone { upserts, deletes } = &frame
                && upserts + deletes > 0
            {
                tracing::info!(upserts, deletes, "resync complete");
            }
            self.sink.feed(&frame).await?;
        }
        self.sink.flush().await?;
        Ok(())
    }

    fn take_transmits(&mut self, now: Instant) -> Result<(), HubError> {
        {
            let mut ob = self.slot.outbound.lock().expect("outbound lock poisoned");
            while let Some(frame) = self.core.poll_transmit(&mut ob, now)? {
                self.batch.push(frame);
            }
        }
        // Transmitting reports only messages too large to send (the others come from frames).
        while let Some(event) = self.core.poll_event() {
            if let Event::Oversized(dropped) = event {
                self.on_oversized(*dropped);
            }
        }
        Ok(())
    }

    /// A queued message was too large for the link and was dropped unsent: reported, counted,
    /// and if it was the reply to one of the node's requests, the request is answered with an
    /// error instead, so the node's writer does not wait for a reply that never comes.
    fn on_oversized(&mut self, dropped: wire::Oversized) {
        let wire::Oversized { key, msg, len, max } = dropped;
        let node = &self.slot.name;
        self.slot.stats.oversized.fetch_add(1, Ordering::Relaxed);
        tracing::error!(node_id = %node, key = %key, size = len, limit = max, "downstream message exceeds the link's frame limit; dropped unsent");
        let Some(parent) = msg.parent_id() else {
            return;
        };
        let text = format!(
            "the cloud's reply of {len} bytes exceeds the link's frame limit of {max} bytes \
             and was dropped; the request may have been carried out"
        );
        let mut reply = Message::new()
            .route(
                msg.router.source.clone(),
                msg.router.group.clone(),
                msg.router.resource.clone(),
                Operation::Error,
            )
            .with_content(text);
        reply.header.parent_id = Some(parent);
        let key = format!("reply/{}", reply.id());
        self.shared.nodes.push_reply(node, key, reply);
    }

    /// Adds what the core counted since the last report to the node's stats.
    fn report_stats(&mut self) {
        let new = self.core.take_stats();
        let stats = &self.slot.stats;
        stats.sent.fetch_add(new.sent, Ordering::Relaxed);
        stats
            .retransmits
            .fetch_add(new.retransmits, Ordering::Relaxed);
        stats.acked.fetch_add(new.acked, Ordering::Relaxed);
        stats.upstream.fetch_add(new.received, Ordering::Relaxed);
    }

    fn next_deadline(&self) -> Instant {
        let ob = self.slot.outbound.lock().expect("outbound lock poisoned");
        self.core.poll_timeout(&ob)
    }

    async fn on_frame(&mut self, frame: Frame) -> Result<(), HubError> {
        {
            let mut ob = self.slot.outbound.lock().expect("outbound lock poisoned");
            self.core.handle_frame(frame, &mut ob, now())?;
        }
        while let Some(event) = self.core.poll_event() {
            match event {
                Event::Data { seq, msg } => self.on_data(seq, *msg),
                // Boxed, as it is rare and its future is large (see `run`).
                Event::Inventory(inventory) => Box::pin(self.on_inventory(inventory)).await?,
                // Counted by the core; the controller's resync needs no per-ack news.
                Event::Acked(_) => {}
                Event::Oversized(dropped) => self.on_oversized(*dropped),
                Event::InventoryRequested | Event::ResyncDone { .. } => {
                    unreachable!("the cloud role never reports edge events")
                }
            }
        }
        Ok(())
    }

    fn on_data(&mut self, seq: u64, msg: Message) {
        let handler = self.shared.upstream_handler(self.ctx, &msg);
        let ctx = self.ctx.clone();
        let node = self.slot.name.clone();
        let timeout = self.shared.config.controller_timeout;
        let done = self.handled_tx.clone();
        // Tracked: a shutdown waits for the handlers in flight (their messages were taken).
        self.shared.tasks.spawn(async move {
            let outcome = handle_upstream(&ctx, &handler, &node, seq, msg, timeout).await;
            let _ = done.send(outcome);
        });
    }

    fn on_handled(&mut self, done: Handled) -> Result<(), HubError> {
        match done {
            Handled::Done { seq, reply } => {
                self.core.processed(seq, now())?;
                if let Some(reply) = reply {
                    let key = format!("reply/{}", reply.id());
                    let held = self.shared.nodes.push_reply(&self.slot.name, key, *reply);
                    if held > 0 {
                        tracing::debug!(
                            held,
                            "downstream queue full; reply held until it has room"
                        );
                    }
                }
            }
            Handled::Retry { seq } => self.core.forget(seq),
        }
        Ok(())
    }

    async fn on_inventory(&mut self, inventory: wire::Inventory) -> Result<(), HubError> {
        {
            // Drop queued versions the edge already holds, and deletes of what it does not hold.
            let mut ob = self.slot.outbound.lock().expect("outbound lock poisoned");
            ob.retain(|key, msg| !already_held(&inventory, key, msg));
        }
        let held = inventory.len();
        let diff = self
            .shared
            .resync_diff(self.ctx, &self.slot.name, inventory)
            .await?;
        let keys: Vec<String> = diff.iter().map(downstream_key).collect();
        let plan = wire::ResyncPlan {
            upserts: keys
                .iter()
                .zip(&diff)
                .filter(|(_, m)| m.router.operation != Operation::Delete)
                .map(|(k, _)| k.clone())
                .collect(),
            deletes: keys
                .iter()
                .zip(&diff)
                .filter(|(_, m)| m.router.operation == Operation::Delete)
                .map(|(k, _)| k.clone())
                .collect(),
        };
        tracing::info!(
            held,
            upserts = plan.upserts.len(),
            deletes = plan.deletes.len(),
            "resync planned"
        );
        for (key, msg) in keys.into_iter().zip(diff) {
            // A key already queued or in flight gets the controller's latest version through
            // the normal path; sending the diff's copy too would deliver it twice.
            let covered = {
                let ob = self.slot.outbound.lock().expect("outbound lock poisoned");
                ob.queue().pending(&key).is_some() || ob.queue().is_in_flight(&key)
            };
            if !covered && let Err(full) = self.shared.nodes.push(&self.slot.name, key, msg) {
                // Counted, and the node is resynced again once this resync is done.
                tracing::warn!(key = %full.key, "downstream queue full during a resync");
            }
        }
        self.core.resync_planned(&plan);
        Ok(())
    }

    async fn finish(self, session_id: u64, result: &Result<(), HubError>) {
        {
            let mut current = self.slot.current.lock().expect("session lock poisoned");
            if current.as_ref().is_some_and(|(id, _)| *id == session_id) {
                *current = None;
            }
        }
        {
            let mut tunnels = self.slot.tunnels.lock().expect("tunnels lock poisoned");
            if tunnels.as_ref().is_some_and(|(id, _)| *id == session_id) {
                *tunnels = None;
            }
        }
        self.core
            .finish(&mut self.slot.outbound.lock().expect("outbound lock poisoned"));
        self.slot.retire_bytes();
        let was_connected = self.slot.connected.swap(false, Ordering::AcqRel);
        if was_connected {
            self.shared.sessions.fetch_sub(1, Ordering::Relaxed);
        }
        if was_connected || self.asked_digest {
            let node = self.slot.name.clone();
            self.shared
                .notify_controller(self.ctx, ToController::Disconnected { node });
        }
        match result {
            Err(e)
                if !matches!(
                    e,
                    HubError::Replaced | HubError::Shutdown | HubError::PeerClosed(_)
                ) =>
            {
                self.sink.close(&e.to_string()).await;
            }
            _ => {}
        }
    }
}

async fn read_hello(frames: &mut link::FrameChannel, shared: &Shared) -> Result<Hello, HubError> {
    let first = tokio::time::timeout(shared.config.handshake_timeout, frames.recv())
        .await
        .map_err(|_| HubError::NoHello("no frame within the handshake timeout".into()))?;
    match first {
        Some(Ok(Frame::Hello(hello))) => Ok(hello),
        Some(Ok(other)) => Err(HubError::NoHello(format!(
            "first frame was {}",
            other.kind()
        ))),
        Some(Err(e)) => Err(e.into()),
        None => Err(HubError::NoHello("connection closed before hello".into())),
    }
}

/// Hands one upstream message to its module and turns the answer into what the session does.
async fn handle_upstream(
    ctx: &Context,
    handler: &str,
    node: &str,
    seq: u64,
    mut msg: Message,
    timeout: std::time::Duration,
) -> Handled {
    let sync = msg.header.sync;
    msg.router.resource = NodeResource::new(node, &msg.router.resource)
        .to_string()
        .into();
    let reply = match ctx.send_sync(handler, msg.clone(), timeout).await {
        Ok(mut resp) => {
            // The answer goes back with the resource the edge sent.
            if let Ok(NodeResource {
                rest: Some(rest), ..
            }) = NodeResource::parse(&resp.router.resource)
            {
                resp.router.resource = rest.into();
            }
            (sync || resp.router.operation == Operation::Error).then(|| Box::new(resp))
        }
        Err(SyncError::NoSuchModule(_)) => {
            let text = format!(
                "no cloud module handles upstream messages for {}",
                msg.resource()
            );
            Some(Box::new(msg.error_response("cloudhub", text)))
        }
        Err(e) => {
            tracing::warn!(seq, error = %e, "upstream message not handled; the edge will resend it");
            return Handled::Retry { seq };
        }
    };
    Handled::Done { seq, reply }
}

/// True when the edge already holds what `msg` would bring it to.
fn already_held(inventory: &wire::Inventory, key: &str, msg: &Message) -> bool {
    match (&msg.router.operation, inventory.get(key)) {
        (Operation::Delete, held) => held.is_none(),
        (_, Some(rv)) => msg.header.resource_version.as_deref() == Some(rv.as_str()),
        (_, None) => false,
    }
}
