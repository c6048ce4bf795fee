//! cloudhub: the cloud end of the link. Edge nodes dial it over WebSocket (:10000) or QUIC
//! (:10001) with mutual TLS; a node's identity is the `system:node:<name>` certificate it
//! presents, and a hello claiming another name is refused. Each node gets one live session and
//! a keyed downstream queue that outlives sessions. Cloud modules put downstream messages in
//! cloudhub's mailbox with resource `node/<node>/<namespace>/<resource>/<name>` (a
//! [`wire::NodeResource`] around an [`wire::ObjectRef::message_resource`]); cloudhub sends
//! them under a window of many messages in flight and retransmits until the edge acks them (an
//! ack means the edge committed them). Upstream messages from an edge go to the module named in
//! their destination, else to the controller module, with resource `node/<node>/...`; cloudhub
//! acks them to the edge once that module answered.
//!
//! # The controller protocol
//!
//! The controller module (default `edgecontroller`) knows what each node should hold. cloudhub
//! talks to it in [`wire::ToController`] messages (resources, operations and encodings are
//! tabled in `wire`'s `control` module; every resource is a [`wire::NodeResource`]). It asks,
//! with `send_sync`:
//! - [`wire::ToController::Digest`] → the [`wire::Digest`] of the `(key, resourceVersion)` pairs
//!   the node should hold ([`wire::read_digest_answer`]);
//! - [`wire::ToController::Resync`] with what the edge holds → the upserts and deletes (resources
//!   in the [`wire::ObjectRef::message_resource`] form) that bring the edge to the desired state
//!   ([`wire::read_resync_answer`]).
//!
//! Equal digests at connect mean nothing is sent at all; otherwise only the differences are. It
//! also tells it [`wire::ToController::Connected`] / [`wire::ToController::Disconnected`]; a
//! session that asked for the digest reports `Disconnected` when it ends, even if it never got
//! to `Connected`. Without a controller module there is no resync: queued messages are simply
//! delivered.
#![forbid(unsafe_code)]

mod certlimit;
mod certs;
mod certserver;
mod config;
mod error;
mod gate;
mod metrics;
mod node;
mod revoked;
mod session;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use beehive::{Context, Mailbox, Message, Module, ModuleError, Operation};
use link::{Listener, ServerTls, Transport};
use pki::Ca;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use wire::{Digest, KeepaliveConfig, Limits, NodeResource, ObjectRef, ToController, WindowConfig};

pub use config::{Config, Listener as ListenerConfig};
pub use error::{HubError, TunnelError};

/// Module name.
pub const NAME: &str = "cloudhub";
/// Module group.
pub const GROUP: &str = "cloudhub";

/// The cloudhub module: listeners are bound by [`CloudHub::bind`], served once it runs.
pub struct CloudHub {
    shared: Arc<Shared>,
    listeners: std::sync::Mutex<Vec<Listener>>,
}

/// A handle for the daemon and tests: bound addresses, the CA, counters.
#[derive(Clone)]
pub struct Handle {
    shared: Arc<Shared>,
    websocket: Option<SocketAddr>,
    quic: Option<SocketAddr>,
    https: Option<SocketAddr>,
    ca_pem: String,
}

/// Counters of one node, as seen from the cloud.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeCounters {
    pub connected: bool,
    pub queued: usize,
    pub in_flight: usize,
    pub sent: u64,
    pub retransmits: u64,
    pub acked: u64,
    pub dropped: u64,
    /// Messages dropped unsent: their frame exceeded the link's limit.
    pub oversized: u64,
    pub resyncs: u64,
    pub upstream: u64,
    pub bytes_sent: u64,
    pub bytes_received: u64,
}

/// State shared by the module loop, the accept loops and the sessions.
pub(crate) struct Shared {
    config: Config,
    nodes: node::Nodes,
    sessions: AtomicUsize,
    session_ids: AtomicU64,
    /// One permit per handshake in progress (the slots anyone may take).
    handshakes: Arc<Semaphore>,
    /// The slots kept for addresses that held a valid session before.
    reserved_handshakes: Arc<Semaphore>,
    /// Handshakes per address, and the known-good addresses.
    gate: Arc<gate::Gate>,
    /// Connections closed at accept: their address ran its share of handshakes.
    handshakes_refused_per_address: AtomicU64,
    /// Connections refused after waiting a whole handshake timeout for a permit.
    handshakes_refused: AtomicU64,
    /// Connections waiting for a permit.
    handshakes_waiting: AtomicUsize,
    /// The revoked nodes, refused at the handshake.
    revoked: revoked::Revoked,
    shutdown: CancellationToken,
    tasks: TaskTracker,
}

// === impl CloudHub ===

impl CloudHub {
    /// Prepares certificates and binds the enabled listeners.
    pub async fn bind(
        config: Config,
        shutdown: CancellationToken,
    ) -> Result<(CloudHub, Handle), HubError> {
        CloudHub::bind_with(config, shutdown, None).await
    }

    /// Like [`CloudHub::bind`]; `kube` is the Kubernetes API the certificate service keeps its
    /// tokens and join records in (without it, joins are refused; renewals work).
    pub async fn bind_with(
        config: Config,
        shutdown: CancellationToken,
        kube: Option<kube::Client>,
    ) -> Result<(CloudHub, Handle), HubError> {
        let certs = certs::ensure(&config)?;
        let tls = ServerTls {
            ca_pem: certs.ca.cert_pem().to_string(),
            cert_pem: certs.server.cert_pem.clone(),
            key_pem: certs.server.key_pem.clone(),
        };
        let limits = link::Limits {
            max_frame: config.max_frame as usize,
            handshake_timeout: config.handshake_timeout,
            write_timeout: config.write_timeout,
        };
        let mut listeners = Vec::new();
        let (mut websocket, mut quic) = (None, None);
        if config.websocket.enable {
            let l = bind_one(
                Transport::WebSocket,
                config.websocket.socket_addr(),
                &tls,
                limits,
            )
            .await?;
            websocket = Some(l.local_addr());
            listeners.push(l);
        }
        if config.quic.enable {
            let l = bind_one(Transport::Quic, config.quic.socket_addr(), &tls, limits).await?;
            quic = Some(l.local_addr());
            listeners.push(l);
        }
        let tasks = TaskTracker::new();
        let revocations = kube.clone();
        let https = match config.https.enable {
            true => Some(
                certserver::start(
                    config.https.socket_addr(),
                    Ca::from_pem(certs.ca.cert_pem(), &certs.ca.key_pem())?,
                    &certs.server,
                    kube,
                    config.edge_cert_signing_duration,
                    shutdown.clone(),
                    &tasks,
                )
                .await?,
            ),
            false => None,
        };
        let window = WindowConfig {
            window: config.window,
            ..WindowConfig::default()
        };
        let shared = Arc::new(Shared {
            nodes: node::Nodes::new(config.queue_capacity, window),
            sessions: AtomicUsize::new(0),
            session_ids: AtomicU64::new(rand::random::<u32>() as u64 * 1_000_000),
            handshakes: Arc::new(Semaphore::new(open_handshakes(&config))),
            reserved_handshakes: Arc::new(Semaphore::new(
                config.max_concurrent_handshakes.max(1) - open_handshakes(&config),
            )),
            gate: gate::Gate::new(config.max_handshakes_per_address, config.known_addresses),
            handshakes_refused_per_address: AtomicU64::new(0),
            handshakes_refused: AtomicU64::new(0),
            handshakes_waiting: AtomicUsize::new(0),
            revoked: revoked::Revoked::default(),
            shutdown,
            tasks,
            config,
        });
        if let Some(client) = revocations {
            shared.tasks.spawn(revoked::watch(shared.clone(), client));
        }
        let handle = Handle {
            shared: shared.clone(),
            websocket,
            quic,
            https,
            ca_pem: certs.ca.cert_pem().to_string(),
        };
        Ok((
            CloudHub {
                shared,
                listeners: std::sync::Mutex::new(listeners),
            },
            handle,
        ))
    }

    fn route_downstream(&self, msg: Message) {
        let Ok(NodeResource {
            node,
            rest: Some(rest),
        }) = NodeResource::parse(msg.resource())
        else {
            tracing::warn!(msg_id = %msg.id(), resource = msg.resource(), "downstream message without node/<name>/ prefix dropped");
            return;
        };
        let (node, rest) = (node.to_owned(), rest.to_owned());
        let mut msg = msg;
        msg.router.resource = rest.into();
        let key = downstream_key(&msg);
        if let Err(full) = self.shared.nodes.push(&node, key, msg) {
            tracing::warn!(node_id = %node, key = %full.key, "downstream queue full; the node will be resynced");
        }
    }
}

async fn bind_one(
    transport: Transport,
    addr: SocketAddr,
    tls: &ServerTls,
    limits: link::Limits,
) -> Result<Listener, HubError> {
    let name = match transport {
        Transport::WebSocket => "websocket",
        Transport::Quic => "quic",
    };
    let listener = Listener::bind(transport, addr, tls, limits)
        .await
        .map_err(|source| HubError::Bind {
            transport: name,
            addr,
            source,
        })?;
    tracing::info!(transport = name, bound = %listener.local_addr(), "cloudhub listening");
    Ok(listener)
}

#[beehive::async_trait]
impl Module for CloudHub {
    fn name(&self) -> &str {
        NAME
    }

    fn group(&self) -> &str {
        GROUP
    }

    fn enabled(&self) -> bool {
        self.shared.config.enable
    }

    async fn run(
        &self,
        ctx: Context,
        mailbox: &mut Mailbox,
        shutdown: CancellationToken,
    ) -> Result<(), ModuleError> {
        let listeners =
            std::mem::take(&mut *self.listeners.lock().expect("listener lock poisoned"));
        let permits = Arc::new(Semaphore::new(self.shared.config.node_limit));
        for listener in listeners {
            let (shared, ctx, permits) = (self.shared.clone(), ctx.clone(), permits.clone());
            self.shared
                .tasks
                .spawn(accept_loop(listener, shared, ctx, permits));
        }
        let cancelled = shutdown.cancelled();
        tokio::pin!(cancelled);
        let mut batch = Vec::with_capacity(256);
        loop {
            let n = tokio::select! {
                biased;
                _ = &mut cancelled => break,
                n = mailbox.recv_many(&mut batch, 256) => n,
            };
            if n == 0 {
                break;
            }
            for msg in batch.drain(..) {
                self.route_downstream(msg);
            }
        }
        self.shared.shutdown.cancel();
        self.shared.tasks.close();
        self.shared.tasks.wait().await;
        Ok(())
    }
}

async fn accept_loop(
    listener: Listener,
    shared: Arc<Shared>,
    ctx: Context,
    permits: Arc<Semaphore>,
) {
    loop {
        let incoming = tokio::select! {
            biased;
            _ = shared.shutdown.cancelled() => break,
            incoming = listener.accept() => incoming,
        };
        let incoming = match incoming {
            Ok(i) => i,
            Err(e) => {
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let remote = incoming.remote_addr();
        let Some(ticket) = shared.gate.enter(remote.ip()) else {
            shared
                .handshakes_refused_per_address
                .fetch_add(1, Ordering::Relaxed);
            tracing::debug!(%remote, "the address runs its share of handshakes; connection closed");
            incoming.refuse();
            continue;
        };
        let Ok(permit) = permits.clone().try_acquire_owned() else {
            tracing::warn!(remote = %incoming.remote_addr(), "node limit reached; connection refused");
            shared.tasks.spawn(refuse_busy(incoming, ticket));
            continue;
        };
        let (shared2, ctx) = (shared.clone(), ctx.clone());
        shared.tasks.spawn(async move {
            session::serve(incoming, ticket, shared2, ctx).await;
            drop(permit);
        });
    }
    listener.close();
}

/// Handshake slots any address may take: all but the reserved ones (at least one).
fn open_handshakes(config: &Config) -> usize {
    let all = config.max_concurrent_handshakes.max(1);
    all.saturating_sub(config.reserved_handshakes).max(1)
}

/// Tells a node over the limit to come back later.
async fn refuse_busy(incoming: link::Incoming, ticket: gate::Ticket) {
    let established = incoming.establish().await;
    drop(ticket);
    if let Ok(conn) = established {
        let (mut sink, _) = conn.split();
        let busy = wire::Frame::Refuse {
            reason: "node limit reached".into(),
            retry_after_ms: Some(5_000),
        };
        let _ = sink.send(&busy).await;
        sink.close("node limit reached").await;
    }
}

// === impl Shared ===

impl Shared {
    fn next_session_id(&self) -> u64 {
        self.session_ids.fetch_add(1, Ordering::Relaxed)
    }

    fn limits(&self) -> Limits {
        Limits {
            max_frame: self.config.max_frame,
            recv_window: self.config.window,
        }
    }

    fn keepalive_config(&self) -> KeepaliveConfig {
        KeepaliveConfig {
            interval: self.config.keepalive_interval,
            timeout: self.config.keepalive_timeout,
        }
    }

    fn has_controller(&self, ctx: &Context) -> bool {
        ctx.has_module(&self.config.controller_module)
    }

    /// Which module handles an upstream message: its destination if that module exists, else
    /// the controller.
    fn upstream_handler(&self, ctx: &Context, msg: &Message) -> String {
        let dest = msg.router.destination.as_str();
        if !dest.is_empty() && dest != NAME && ctx.has_module(dest) {
            dest.to_string()
        } else {
            self.config.controller_module.clone()
        }
    }

    /// Tells the controller [`ToController::Connected`] or [`ToController::Disconnected`].
    fn notify_controller(&self, ctx: &Context, event: ToController) {
        if self.has_controller(ctx) {
            let event = event.to_message(NAME, GROUP);
            let _ = ctx.try_send(&self.config.controller_module, event);
        }
    }

    /// What the node should hold, per the controller; `None` without a controller.
    async fn desired_digest(&self, ctx: &Context, node: &str) -> Result<Option<Digest>, HubError> {
        if !self.has_controller(ctx) {
            return Ok(None);
        }
        let ask = ToController::Digest {
            node: node.to_owned(),
        };
        let resp = self.ask_controller(ctx, ask).await?;
        let digest = wire::read_digest_answer(&resp).map_err(controller_answer)?;
        Ok(Some(digest))
    }

    /// The messages that bring a node holding `held` to what it should hold.
    async fn resync_diff(
        &self,
        ctx: &Context,
        node: &str,
        held: wire::Inventory,
    ) -> Result<Vec<Message>, HubError> {
        if !self.has_controller(ctx) {
            return Ok(Vec::new());
        }
        let ask = ToController::Resync {
            node: node.to_owned(),
            held,
        };
        let resp = self.ask_controller(ctx, ask).await?;
        wire::read_resync_answer(&resp).map_err(controller_answer)
    }

    async fn ask_controller(&self, ctx: &Context, ask: ToController) -> Result<Message, HubError> {
        let resp = ctx
            .send_sync(
                &self.config.controller_module,
                ask.to_message(NAME, GROUP),
                self.config.controller_timeout,
            )
            .await
            .map_err(|e| HubError::Protocol(format!("controller did not answer: {e}")))?;
        match resp.router.operation {
            Operation::Error => Err(HubError::Protocol(format!(
                "controller refused: {}",
                String::from_utf8_lossy(&resp.content)
            ))),
            _ => Ok(resp),
        }
    }
}

// === impl Handle ===

impl Handle {
    /// Where the WebSocket listener is bound, if enabled.
    pub fn websocket_addr(&self) -> Option<SocketAddr> {
        self.websocket
    }

    /// Where the QUIC listener is bound, if enabled.
    pub fn quic_addr(&self) -> Option<SocketAddr> {
        self.quic
    }

    /// Where the certificate service is bound, if enabled.
    pub fn https_addr(&self) -> Option<SocketAddr> {
        self.https
    }

    /// The CA certificate edges must trust (and whose node certificates cloudhub accepts).
    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }

    /// Nodes with a live session.
    pub fn sessions(&self) -> usize {
        self.shared.sessions.load(Ordering::Relaxed)
    }

    /// Connections refused because `maxConcurrentHandshakes` handshakes were in progress for a
    /// whole handshake timeout.
    pub fn handshakes_refused(&self) -> u64 {
        self.shared.handshakes_refused.load(Ordering::Relaxed)
    }

    /// Connections closed at accept because their address ran `maxHandshakesPerAddress`
    /// handshakes.
    pub fn handshakes_refused_per_address(&self) -> u64 {
        self.shared
            .handshakes_refused_per_address
            .load(Ordering::Relaxed)
    }

    /// Handshakes in progress, and connections waiting for their turn.
    pub fn handshakes(&self) -> (usize, usize) {
        let s = &self.shared;
        let running = s.config.max_concurrent_handshakes.max(1)
            - s.handshakes.available_permits()
            - s.reserved_handshakes.available_permits();
        (running, s.handshakes_waiting.load(Ordering::Relaxed))
    }

    /// A new stream to the kubelet API of `node`, over its live session (HTTP/1.1 is spoken
    /// over it). A node without a session is refused at once.
    pub async fn open_tunnel(&self, node: &str) -> Result<link::TunnelStream, TunnelError> {
        let not_connected = || TunnelError::NotConnected {
            node: node.to_owned(),
        };
        let slot = self.shared.nodes.get(node).ok_or_else(not_connected)?;
        let opener = slot
            .tunnels
            .lock()
            .expect("tunnels lock poisoned")
            .as_ref()
            .map(|(_, opener)| opener.clone())
            .ok_or_else(not_connected)?;
        opener.open().await.map_err(|source| TunnelError::Open {
            node: node.to_owned(),
            source,
        })
    }

    /// Counters of one node, `None` if cloudhub never heard of it.
    pub fn node(&self, node: &str) -> Option<NodeCounters> {
        self.shared.nodes.get(node).map(|slot| counters(&slot))
    }

    /// Registers cloudhub's metrics.
    pub fn register_metrics(&self, registry: &mut prometheus_client::registry::Registry) {
        metrics::register(
            registry,
            self.sessions(),
            self.handshakes_refused(),
            self.handshakes(),
            self.shared
                .nodes
                .all()
                .iter()
                .map(|s| (s.name.clone(), counters(s))),
        );
    }
}

fn counters(slot: &node::NodeSlot) -> NodeCounters {
    let (queued, in_flight) = slot.depth();
    let (bytes_sent, bytes_received) = slot.bytes();
    let s = &slot.stats;
    NodeCounters {
        connected: slot.connected.load(Ordering::Relaxed),
        queued,
        in_flight,
        sent: s.sent.load(Ordering::Relaxed),
        retransmits: s.retransmits.load(Ordering::Relaxed),
        acked: s.acked.load(Ordering::Relaxed),
        dropped: s.dropped.load(Ordering::Relaxed),
        oversized: s.oversized.load(Ordering::Relaxed),
        resyncs: s.resyncs.load(Ordering::Relaxed),
        upstream: s.upstream.load(Ordering::Relaxed),
        bytes_sent,
        bytes_received,
    }
}

/// An answer from the controller that does not decode.
fn controller_answer(e: wire::ControlError) -> HubError {
    HubError::Protocol(format!("controller answer: {e}"))
}

/// The queue key of a downstream message: the object's key ([`ObjectRef::key`]) for objects
/// (resources in the [`ObjectRef::message_resource`] form), the message id otherwise.
pub(crate) fn downstream_key(msg: &Message) -> String {
    match ObjectRef::from_message_resource(msg.resource()) {
        Ok(object) => object.key(),
        Err(_) => format!("msg/{}", msg.id()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn objects_are_keyed_canonically_and_other_messages_by_id() {
        let m = Message::new().route("x", "g", "default/pods/a", Operation::Update);
        assert_eq!(downstream_key(&m), "pods/default/a");
        let m = Message::new().route("x", "g", "/nodes/n1", Operation::Update);
        assert_eq!(downstream_key(&m), "nodes//n1");
        let m = Message::new().route("x", "g", "something", Operation::Response);
        assert_eq!(downstream_key(&m), format!("msg/{}", m.id()));
    }
}
