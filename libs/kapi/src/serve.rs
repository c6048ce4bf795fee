//! Serving the REST routes: accept connections on a bound listener (TLS first when configured),
//! one task per connection, HTTP/1.1 or HTTP/2. A client certificate a TLS client presented
//! reaches the routes as a [`PeerCertificate`] request extension (the caller's authentication
//! layer turns it into a [`crate::User`]). At shutdown every connection is shut down
//! gracefully: watches, which never end on their own, are ended at a frame boundary
//! ([`drain`]), so clients see a normal end of stream; a connection still open after
//! [`CLOSE_GRACE`] is dropped.
//!
//! Connections are held within [`ServeConfig`]'s limits ([`pool`]): the accept loop never
//! waits for room; a connection is unauthenticated until its client certificate was verified
//! or one of its requests carried a user (the routes call [`Connection::authenticated`]), and
//! only idle unauthenticated connections are evicted to make room, so a flood of connections
//! that never send a request cannot lock clients out. Each connection has a TLS handshake
//! deadline, a header-read timeout and an idle timeout ([`activity`]), and each request body a
//! read deadline ([`deadline`]: a body not received in time gets `408` and its connection is
//! closed).
//!
//! Who may hold how much (after kube-apiserver's API Priority and Fairness, [`fairness`]): a
//! server that authenticates puts [`fair_share`] inside its authentication layer. Each
//! unprivileged user then holds at most `max_connections_per_user` connections and a share of
//! the connections not `reserved_connections` for the admin (`system:masters`) and the nodes
//! (`system:nodes`), and requests in flight are limited per priority level and per identity;
//! what is over a share gets `429` with `Retry-After`.

mod activity;
mod deadline;
mod drain;
mod fairness;
mod pool;

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use activity::{Activity, Timeouts, Watched};

pub(crate) use activity::Guarded;
use deadline::Deadline;
use drain::Draining;
pub(crate) use drain::Endless;
use fairness::InFlight;
pub use fairness::{InFlightLimits, Level, fair_share, too_many_requests};
use pool::{Admission, Evictable, Limits, Pool, Refusal};

/// How long a connection closed for a timeout or at shutdown gets to finish (the end of its
/// watches, an HTTP/2 GOAWAY).
const CLOSE_GRACE: Duration = Duration::from_secs(1);

/// Limits and timeouts of [`serve`]. The defaults suit both servers.
#[derive(Clone, Debug)]
pub struct ServeConfig {
    /// Connections held at once. Default 1024.
    pub max_connections: usize,
    /// Of which unauthenticated (so `max_connections - max_unauthenticated` are kept for
    /// authenticated ones). Default 256.
    pub max_unauthenticated: usize,
    /// Unauthenticated connections from one IP address. Default 64.
    pub max_unauthenticated_per_client: usize,
    /// Time a client has to finish the TLS handshake. Default 10 s.
    pub handshake_timeout: Duration,
    /// Time a client has to send a whole request head: from the connection's start for the
    /// first request, from the first byte for later ones (kube-apiserver's
    /// `ReadHeaderTimeout`). Default 32 s.
    pub header_read_timeout: Duration,
    /// Time a connection with no request in flight waits for the next one (kube-apiserver's
    /// `IdleTimeout`). Default 90 s.
    pub idle_timeout: Duration,
    /// Header fields in an HTTP/1 request head (hyper's default is 100; Go has no count limit,
    /// only 1 MiB of head). hyper allocates this many slots each time it parses a head, so it
    /// stays moderate. Default 1024.
    pub max_headers: usize,
    /// Bytes of a request head (HTTP/1 read buffer, HTTP/2 header list). Default 1 MiB + 4 KiB
    /// (Go's `DefaultMaxHeaderBytes` and its slack).
    pub max_header_bytes: usize,
    /// Time a request body has to arrive, from the request head; a body not received by then
    /// gets `408` and its connection is closed. Default 60 s.
    pub body_read_timeout: Duration,
    /// Connections of one unprivileged user (see [`fair_share`]). Default 100.
    pub max_connections_per_user: usize,
    /// Connections only the admin and the nodes may take (see [`fair_share`]). Default 128.
    pub reserved_connections: usize,
    /// Requests in flight by priority level and identity (see [`fair_share`]).
    pub in_flight: InFlightLimits,
}

/// Counters of a server's connections, shared with [`serve`] (clone it before serving).
#[derive(Clone, Debug, Default)]
pub struct ServeStats(Arc<Counters>);

#[derive(Debug, Default)]
struct Counters {
    refused: AtomicU64,
    evicted: AtomicU64,
    timed_out: AtomicU64,
    body_timeouts: AtomicU64,
    over_share: AtomicU64,
    unauthenticated: AtomicUsize,
    authenticated: AtomicUsize,
}

/// The first certificate a TLS client presented, on each request of its connection.
#[derive(Clone, Debug)]
pub struct PeerCertificate(pub rustls::pki_types::CertificateDer<'static>);

/// The address a request's connection came from, on each request.
#[derive(Clone, Copy, Debug)]
pub struct RemoteAddr(pub SocketAddr);

/// The connection a request came on, as a request extension: the routes call
/// [`Connection::authenticated`] once a request carried a user.
#[derive(Clone, Debug)]
pub struct Connection(Arc<Held>);

/// A connection's place in the pool, released when the connection's task ends.
#[derive(Debug)]
struct Held {
    id: u64,
    pool: Arc<Mutex<Pool<Slot>>>,
    stats: ServeStats,
    promoted: std::sync::atomic::AtomicBool,
    /// Counted under its user (or privileged): later requests need not ask the pool again.
    identified: std::sync::atomic::AtomicBool,
    /// Closes the connection.
    close: CancellationToken,
}

/// What the pool holds of a connection.
#[derive(Debug)]
struct Slot {
    activity: Arc<Activity>,
    close: CancellationToken,
}

/// Shared by the connection tasks of one server.
struct Server {
    acceptor: Option<TlsAcceptor>,
    app: Router,
    config: ServeConfig,
    stats: ServeStats,
    pool: Arc<Mutex<Pool<Slot>>>,
    in_flight: Arc<InFlight>,
    shutdown: CancellationToken,
}

/// Accepts connections until `shutdown`; every connection runs on `tasks`.
pub async fn serve(
    listener: TcpListener,
    tls: Option<Arc<rustls::ServerConfig>>,
    app: Router,
    config: ServeConfig,
    stats: ServeStats,
    shutdown: CancellationToken,
    tasks: TaskTracker,
) {
    let limits = Limits {
        max_total: config.max_connections,
        max_unauthenticated: config.max_unauthenticated,
        max_per_client: config.max_unauthenticated_per_client,
        max_per_user: config.max_connections_per_user,
        reserved: config.reserved_connections,
    };
    let in_flight = InFlight::new(config.in_flight);
    let server = Arc::new(Server {
        acceptor: tls.map(TlsAcceptor::from),
        app,
        config,
        stats,
        pool: Arc::new(Mutex::new(Pool::new(limits))),
        in_flight,
        shutdown: shutdown.clone(),
    });
    loop {
        let accepted = tokio::select! {
            biased;
            _ = shutdown.cancelled() => return,
            a = listener.accept() => a,
        };
        match accepted {
            Ok((tcp, remote)) => server.admit(tcp, remote, &tasks),
            Err(e) => {
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

// === impl ServeConfig ===

impl Default for ServeConfig {
    fn default() -> Self {
        ServeConfig {
            max_connections: 1024,
            max_unauthenticated: 256,
            max_unauthenticated_per_client: 64,
            handshake_timeout: Duration::from_secs(10),
            header_read_timeout: Duration::from_secs(32),
            idle_timeout: Duration::from_secs(90),
            max_headers: 1024,
            max_header_bytes: (1 << 20) + 4096,
            body_read_timeout: Duration::from_secs(60),
            max_connections_per_user: 100,
            reserved_connections: 128,
            in_flight: InFlightLimits::default(),
        }
    }
}

// === impl ServeStats ===

impl ServeStats {
    /// New connections closed at once: their address's share was all busy, or the server was
    /// full with no idle unauthenticated connection to evict.
    pub fn refused(&self) -> u64 {
        self.0.refused.load(Ordering::Relaxed)
    }

    /// Idle unauthenticated connections closed to make room for a new one.
    pub fn evicted(&self) -> u64 {
        self.0.evicted.load(Ordering::Relaxed)
    }

    /// Connections closed by the header-read or idle timeout.
    pub fn timed_out(&self) -> u64 {
        self.0.timed_out.load(Ordering::Relaxed)
    }

    /// Requests whose body did not arrive within the body read timeout (answered `408`).
    pub fn body_timeouts(&self) -> u64 {
        self.0.body_timeouts.load(Ordering::Relaxed)
    }

    /// Requests and connections over their share (answered `429`).
    pub fn over_share(&self) -> u64 {
        self.0.over_share.load(Ordering::Relaxed)
    }

    /// Unauthenticated connections held now.
    pub fn unauthenticated(&self) -> usize {
        self.0.unauthenticated.load(Ordering::Relaxed)
    }

    /// Authenticated connections held now.
    pub fn authenticated(&self) -> usize {
        self.0.authenticated.load(Ordering::Relaxed)
    }

    fn count(&self, counter: fn(&Counters) -> &AtomicU64) {
        counter(&self.0).fetch_add(1, Ordering::Relaxed);
    }

    fn held(&self, pool: &Pool<Slot>) {
        let c = &self.0;
        c.unauthenticated
            .store(pool.unauthenticated(), Ordering::Relaxed);
        c.authenticated
            .store(pool.authenticated(), Ordering::Relaxed);
    }
}

// === impl Connection ===

impl Connection {
    /// The connection proved who it is: it is never evicted from now on.
    pub fn authenticated(&self) {
        let held = &self.0;
        if held.promoted.swap(true, Ordering::Relaxed) {
            return;
        }
        let mut pool = held.pool.lock().unwrap_or_else(|e| e.into_inner());
        pool.promote(held.id);
        held.stats.held(&pool);
    }

    /// A request of `user` came on the connection: it counts under that user (the first one
    /// that asks), unless the user or the unprivileged users together hold their share of
    /// connections; then the error says so and the connection should be closed.
    pub fn identify(&self, user: &crate::User) -> Result<(), String> {
        let held = &self.0;
        if held.identified.load(Ordering::Relaxed) {
            return Ok(());
        }
        let level = Level::of(user);
        if level == Level::Anonymous {
            // Stays unauthenticated: bounded per address and evictable.
            return Ok(());
        }
        let privileged = matches!(level, Level::Exempt | Level::System);
        let mut pool = held.pool.lock().unwrap_or_else(|e| e.into_inner());
        let counted = pool.identify(held.id, &user.name, privileged);
        held.stats.held(&pool);
        drop(pool);
        match counted {
            Ok(()) => {
                held.promoted.store(true, Ordering::Relaxed);
                held.identified.store(true, Ordering::Relaxed);
                Ok(())
            }
            Err(why) => {
                held.stats.count(|c| &c.over_share);
                Err(match why {
                    Refusal::PerUser => format!(
                        "too many connections: user {:?} holds its share of connections",
                        user.name
                    ),
                    _ => "too many connections: the connections open to users like this one are all taken".to_owned(),
                })
            }
        }
    }

    /// A request of this connection was over its share.
    pub(crate) fn over_share(&self) {
        self.0.stats.count(|c| &c.over_share);
    }

    /// Closes the connection after [`CLOSE_GRACE`], time for the answer under way to go out.
    pub fn close_soon(&self) {
        let close = self.0.close.clone();
        tokio::spawn(async move {
            tokio::time::sleep(CLOSE_GRACE).await;
            close.cancel();
        });
    }
}

// === impl Held ===

impl Drop for Held {
    fn drop(&mut self) {
        let mut pool = self.pool.lock().unwrap_or_else(|e| e.into_inner());
        pool.release(self.id);
        self.stats.held(&pool);
    }
}

// === impl Slot ===

impl Evictable for Slot {
    fn busy(&self) -> bool {
        self.activity.busy()
    }
}

// === impl Server ===

impl Server {
    /// Finds room for a new connection (or refuses it) and spawns its task.
    fn admit(self: &Arc<Self>, tcp: TcpStream, remote: SocketAddr, tasks: &TaskTracker) {
        let activity = Activity::new();
        let close = CancellationToken::new();
        let slot = Slot {
            activity: Arc::clone(&activity),
            close: close.clone(),
        };
        let id = {
            let mut pool = self.pool.lock().unwrap_or_else(|e| e.into_inner());
            let admission = pool.admit(canonical(remote.ip()), slot);
            self.stats.held(&pool);
            match admission {
                Admission::Admitted { id, evicted } => {
                    if let Some(evicted) = evicted {
                        evicted.close.cancel();
                        self.stats.count(|c| &c.evicted);
                        tracing::debug!(%remote, "an idle unauthenticated connection evicted");
                    }
                    id
                }
                Admission::Refused(why) => {
                    self.stats.count(|c| &c.refused);
                    match why {
                        Refusal::PerClient => {
                            tracing::debug!(%remote, "connection refused: its address holds its share of unauthenticated connections")
                        }
                        Refusal::Full | Refusal::PerUser | Refusal::Unreserved => {
                            tracing::debug!(%remote, "connection refused: no room and no idle connection to evict")
                        }
                    }
                    return;
                }
            }
        };
        let held = Connection(Arc::new(Held {
            id,
            pool: Arc::clone(&self.pool),
            stats: self.stats.clone(),
            promoted: Default::default(),
            identified: Default::default(),
            close: close.clone(),
        }));
        let server = Arc::clone(self);
        tasks.spawn(async move {
            tokio::select! {
                () = server.run(tcp, remote, held, activity) => {}
                _ = close.cancelled() => {}
            }
        });
    }

    /// The TLS handshake (if any), then HTTP until the connection ends.
    async fn run(
        &self,
        tcp: TcpStream,
        remote: SocketAddr,
        held: Connection,
        activity: Arc<Activity>,
    ) {
        let Some(acceptor) = &self.acceptor else {
            return self.http(tcp, remote, held, activity, None).await;
        };
        let deadline = self.config.handshake_timeout;
        match tokio::time::timeout(deadline, acceptor.accept(tcp)).await {
            Ok(Ok(tls)) => {
                let peer = tls.get_ref().1.peer_certificates().and_then(|c| c.first());
                let cert = peer.map(|c| PeerCertificate(c.clone().into_owned()));
                if cert.is_some() {
                    // The TLS config verified it against the client CA.
                    held.authenticated();
                }
                self.http(tls, remote, held, activity, cert).await
            }
            Ok(Err(e)) => tracing::debug!(%remote, error = %e, "TLS handshake failed"),
            Err(_) => tracing::debug!(%remote, "TLS handshake timed out"),
        }
    }

    /// Serves HTTP on one connection until it closes, times out, or `shutdown`.
    async fn http<I>(
        &self,
        io: I,
        remote: SocketAddr,
        held: Connection,
        activity: Arc<Activity>,
        cert: Option<PeerCertificate>,
    ) where
        I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let context = PerRequest {
            connection: held,
            activity: Arc::clone(&activity),
            cert,
            remote: RemoteAddr(remote),
            shutdown: self.shutdown.clone(),
            in_flight: Arc::clone(&self.in_flight),
            body_timeout: self.config.body_read_timeout,
            stats: self.stats.clone(),
        };
        let app = self
            .app
            .clone()
            .layer(axum::middleware::from_fn_with_state(context, per_request));
        let builder = self.builder();
        let io = TokioIo::new(Watched::new(io, Arc::clone(&activity)));
        let conn = builder.serve_connection_with_upgrades(io, TowerToHyperService::new(app));
        tokio::pin!(conn);
        let timeouts = Timeouts {
            header: self.config.header_read_timeout,
            idle: self.config.idle_timeout,
        };
        tokio::select! {
            r = conn.as_mut() => if let Err(e) = r {
                tracing::debug!(%remote, error = %e, "connection ended with an error");
            },
            () = activity.watchdog(timeouts) => {
                self.stats.count(|c| &c.timed_out);
                tracing::debug!(%remote, "connection closed: no request within its timeout");
                conn.as_mut().graceful_shutdown();
                let _ = tokio::time::timeout(CLOSE_GRACE, conn).await;
            }
            _ = self.shutdown.cancelled() => {
                conn.as_mut().graceful_shutdown();
                if tokio::time::timeout(CLOSE_GRACE, conn).await.is_err() {
                    tracing::debug!(%remote, "connection dropped: still open after the shutdown grace");
                }
            }
        }
    }

    fn builder(&self) -> auto::Builder<TokioExecutor> {
        let mut builder = auto::Builder::new(TokioExecutor::new());
        let head_bytes = self.config.max_header_bytes;
        builder
            .http1()
            .max_headers(self.config.max_headers)
            .max_buf_size(head_bytes.max(8192));
        builder
            .http2()
            .max_header_list_size(u32::try_from(head_bytes).unwrap_or(u32::MAX));
        builder
    }
}

/// What each request of a connection is given.
#[derive(Clone)]
struct PerRequest {
    connection: Connection,
    activity: Arc<Activity>,
    cert: Option<PeerCertificate>,
    remote: RemoteAddr,
    /// Ends [`Endless`] bodies.
    shutdown: CancellationToken,
    in_flight: Arc<InFlight>,
    body_timeout: Duration,
    stats: ServeStats,
}

/// Adds the connection, its client's address (and certificate) to the request, keeps the request in
/// flight until its response body is dropped, and ends an [`Endless`] body at shutdown.
async fn per_request(State(ctx): State<PerRequest>, req: Request, next: Next) -> Response {
    let in_flight = ctx.activity.start();
    let version = req.version();
    let (mut parts, body) = req.into_parts();
    let (body, expired) = Deadline::wrap(body, ctx.body_timeout);
    parts.extensions.insert(ctx.connection);
    parts.extensions.insert(ctx.remote);
    parts.extensions.insert(ctx.in_flight);
    if let Some(cert) = ctx.cert {
        parts.extensions.insert(cert);
    }
    let resp = next.run(Request::from_parts(parts, body)).await;
    if expired.expired() {
        ctx.stats.count(|c| &c.body_timeouts);
        tracing::debug!(remote = %ctx.remote.0, "request body not received within its timeout");
        return deadline::request_timeout(ctx.body_timeout, version);
    }
    let endless = resp.extensions().get::<Endless>().is_some();
    resp.map(|body| match endless {
        true => Guarded::body(Body::new(Draining::new(body, ctx.shutdown)), in_flight),
        false => Guarded::body(body, in_flight),
    })
}

/// `error` as its `Status` answer (with `Retry-After` for a 429); when `close`, an HTTP/1
/// connection is closed after it (its request body was not read).
pub(crate) fn refusal(
    error: apimachinery::ApiError,
    version: axum::http::Version,
    close: bool,
) -> Response {
    let mut resp = crate::server::error_response(error);
    if close && version <= axum::http::Version::HTTP_11 {
        let headers = resp.headers_mut();
        headers.insert(
            axum::http::header::CONNECTION,
            axum::http::HeaderValue::from_static("close"),
        );
    }
    resp
}

/// The address a client is counted under (an IPv4-mapped IPv6 address as IPv4).
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}
