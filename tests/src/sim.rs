//! A simulated edge node for load tests: a real session (its own certificate, mutual TLS, the
//! wire protocol with windowed acks, resync by inventory, pings) over an in-memory store that
//! acks every message as soon as it is applied. Many of them run in one process.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use beehive::{CancellationToken, Operation};
use link::{ClientTls, LinkError, Transport};
use wire::{
    Event, Frame, Hello, InventoryEntry, Limits, Outbound, Role, Session, SessionConfig,
    WindowConfig,
};

/// How a simulated node dials: its own socket per connection, or a shared QUIC socket.
#[derive(Clone, Debug)]
pub enum Dialer {
    Direct(Transport),
    Quic(link::QuicDialer),
}

/// One simulated node.
pub struct SimEdge {
    pub node: String,
    tls: ClientTls,
    /// key → (resourceVersion, when it was applied).
    store: std::sync::Mutex<HashMap<String, (String, Instant)>>,
    pub stats: SimStats,
    /// Whether streams the cloud opens are answered with an endless flow of bytes (a pod's
    /// `logs -f` writing as fast as the link takes it); otherwise they are refused.
    pub bulk_tunnels: AtomicBool,
    /// The pace of that flow, bytes per second; 0: as fast as the link takes it.
    pub bulk_rate: AtomicU64,
}

/// What a simulated node saw.
#[derive(Default)]
pub struct SimStats {
    pub applied: AtomicU64,
    pub connects: AtomicU64,
    pub in_sync: AtomicBool,
    pub inventories: AtomicU64,
    /// Connection attempts that failed before a session was up.
    pub failures: AtomicU64,
    /// When the latest session finished its resync.
    pub synced_at: std::sync::Mutex<Option<Instant>>,
    /// What happened to the connection attempts, in order, for explaining a slow node.
    pub timeline: std::sync::Mutex<Vec<(Instant, String)>>,
}

impl SimStats {
    fn note(&self, what: impl Into<String>) {
        self.timeline
            .lock()
            .unwrap()
            .push((Instant::now(), what.into()));
    }
}

impl SimEdge {
    pub fn new(node: &str, tls: ClientTls) -> Arc<SimEdge> {
        Arc::new(SimEdge {
            node: node.into(),
            tls,
            store: Default::default(),
            stats: SimStats::default(),
            bulk_tunnels: AtomicBool::new(false),
            bulk_rate: AtomicU64::new(0),
        })
    }

    pub fn held(&self) -> usize {
        self.store.lock().unwrap().len()
    }

    /// The resourceVersion held at `key`, and when it was applied.
    pub fn version(&self, key: &str) -> Option<(String, Instant)> {
        self.store.lock().unwrap().get(key).cloned()
    }

    /// How many keys start with `prefix` (`pods/`).
    pub fn count(&self, prefix: &str) -> usize {
        let store = self.store.lock().unwrap();
        store.keys().filter(|k| k.starts_with(prefix)).count()
    }

    /// Connects and serves sessions until `shutdown`, reconnecting with full jitter (base 1 s,
    /// cap 30 s) like edgehub.
    pub async fn run(
        self: Arc<Self>,
        dialer: Dialer,
        addr: SocketAddr,
        shutdown: CancellationToken,
    ) {
        let mut attempt = 0u32;
        while !shutdown.is_cancelled() {
            if attempt > 0 {
                let ceiling = (2f64.powi(attempt as i32 - 1)).min(30.0);
                let wait = Duration::from_secs_f64(rand::random::<f64>() * ceiling);
                tokio::select! {
                    _ = shutdown.cancelled() => return,
                    _ = tokio::time::sleep(wait) => {}
                }
            }
            self.stats.in_sync.store(false, Ordering::Release);
            let connects = self.stats.connects.load(Ordering::Relaxed);
            self.stats.note("dial");
            let ended = self.session(&dialer, addr, &shutdown).await;
            if let Err(e) = &ended {
                self.stats.note(format!("ended: {e}"));
            }
            match ended {
                Ok(()) => return,
                // Like edgehub: after a session that was up, start over from the first ceiling.
                Err(_) if self.stats.connects.load(Ordering::Relaxed) > connects => attempt = 1,
                Err(_) => {
                    self.stats.failures.fetch_add(1, Ordering::Relaxed);
                    attempt = (attempt + 1).min(6);
                }
            }
        }
    }

    async fn session(
        &self,
        dialer: &Dialer,
        addr: SocketAddr,
        shutdown: &CancellationToken,
    ) -> Result<(), LinkError> {
        // edgehub's default handshake timeout.
        let limits = link::Limits {
            handshake_timeout: Duration::from_secs(30),
            ..link::Limits::default()
        };
        let mut conn = match dialer {
            Dialer::Direct(transport) => link::connect(*transport, addr, &self.tls, limits).await?,
            Dialer::Quic(dialer) => dialer.connect(addr, &self.tls, limits).await?,
        };
        if self.bulk_tunnels.load(Ordering::Relaxed)
            && let Some(tunnels) = conn.take_acceptor()
        {
            let rate = self.bulk_rate.load(Ordering::Relaxed);
            tokio::spawn(serve_bulk(tunnels, rate, shutdown.clone()));
        }
        let (mut sink, stream) = conn.split();
        let mut frames = stream.into_channel(64);
        let digest = wire::digest(
            self.store
                .lock()
                .unwrap()
                .iter()
                .map(|(k, (v, _))| (k.clone(), v.clone())),
        );
        let hello = Hello {
            protocol_versions: wire::SUPPORTED_PROTOCOL_VERSIONS.to_vec(),
            node_id: self.node.clone(),
            inventory_digest: digest,
            limits: Limits {
                max_frame: 32 << 20,
                recv_window: 128,
            },
            resume: None,
        };
        sink.send(&Frame::Hello(hello)).await?;
        let welcome = match frames.recv().await {
            Some(Ok(frame)) => wire::read_welcome(frame, wire::SUPPORTED_PROTOCOL_VERSIONS)
                .map_err(|_| LinkError::Closed)?,
            Some(Err(e)) => return Err(e),
            None => return Err(LinkError::Closed),
        };
        self.stats.note("connected");
        self.stats.connects.fetch_add(1, Ordering::Relaxed);
        // Nothing goes up: the queue only serves the session's send side.
        let mut outbound = Outbound::new(1, WindowConfig::default());
        let mut session = Session::new(Role::Edge, SessionConfig::default(), Instant::now());
        loop {
            while let Some(frame) = session
                .poll_transmit(&mut outbound, Instant::now())
                .map_err(|_| LinkError::Closed)?
            {
                sink.feed(&frame).await?;
            }
            sink.flush().await?;
            let deadline = session.poll_timeout(&outbound);
            let frame = tokio::select! {
                _ = shutdown.cancelled() => return Ok(()),
                f = frames.recv() => f,
                _ = tokio::time::sleep_until(deadline.into()) => continue,
            };
            let frame = match frame {
                Some(Ok(f)) => f,
                Some(Err(e)) => return Err(e),
                None => return Err(LinkError::Closed),
            };
            session
                .handle_frame(frame, &mut outbound, Instant::now())
                .map_err(|_| LinkError::Closed)?;
            while let Some(event) = session.poll_event() {
                match event {
                    Event::Data { seq, msg } => {
                        self.apply(&msg);
                        let _ = session.processed(seq, Instant::now());
                    }
                    Event::InventoryRequested => {
                        session.send_inventory(self.inventory(), welcome.limits.max_frame as usize);
                    }
                    Event::ResyncDone { .. } => {
                        self.stats.note("resynced");
                        *self.stats.synced_at.lock().unwrap() = Some(Instant::now());
                        self.stats.in_sync.store(true, Ordering::Release);
                    }
                    Event::Acked(_) | Event::Inventory(_) | Event::Oversized(_) => {}
                }
            }
        }
    }

    fn apply(&self, msg: &beehive::Message) {
        let mut parts = msg.resource().split('/');
        let (Some(ns), Some(res), Some(name)) = (parts.next(), parts.next(), parts.next()) else {
            return;
        };
        let key = wire::object_key(res, Some(ns), name);
        let mut store = self.store.lock().unwrap();
        match msg.router.operation {
            Operation::Delete => {
                store.remove(&key);
            }
            _ => {
                let rv = msg.header.resource_version.as_deref().unwrap_or("");
                store.insert(key, (rv.to_string(), Instant::now()));
            }
        }
        self.stats.applied.fetch_add(1, Ordering::Relaxed);
    }

    fn inventory(&self) -> Vec<InventoryEntry> {
        self.stats.inventories.fetch_add(1, Ordering::Relaxed);
        self.store
            .lock()
            .unwrap()
            .iter()
            .map(|(k, (v, _))| InventoryEntry {
                key: k.clone(),
                resource_version: v.clone(),
            })
            .collect()
    }
}

/// Client TLS settings for `node`, with a certificate issued now by `ca` for a shared key.
/// Writes 64 KiB chunks on every stream the cloud opens until it goes away, at `rate` bytes per
/// second (0: as fast as the stream takes them).
async fn serve_bulk(mut tunnels: link::TunnelAcceptor, rate: u64, shutdown: CancellationToken) {
    use tokio::io::AsyncWriteExt as _;
    const CHUNK: usize = 64 * 1024;
    let pace = (rate > 0).then(|| Duration::from_secs_f64(CHUNK as f64 / rate as f64));
    loop {
        let stream = tokio::select! {
            _ = shutdown.cancelled() => return,
            s = tunnels.accept() => s,
        };
        let Some(mut stream) = stream else { return };
        tokio::spawn(async move {
            let chunk = vec![b'x'; CHUNK];
            let mut next = tokio::time::Instant::now();
            while stream.write_all(&chunk).await.is_ok() {
                if let Some(pace) = pace {
                    next += pace;
                    tokio::time::sleep_until(next).await;
                }
            }
        });
    }
}

pub fn node_tls(ca: &pki::Ca, node: &str) -> ClientTls {
    let issued = ca.issue_node(node, Duration::from_secs(86400)).unwrap();
    ClientTls {
        ca_pem: ca.cert_pem().to_string(),
        cert_pem: issued.cert_pem,
        key_pem: issued.key_pem,
        server_name: "127.0.0.1".into(),
    }
}
