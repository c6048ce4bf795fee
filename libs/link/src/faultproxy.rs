//! A TCP proxy that injects faults, for tests and the load generator: it forwards every
//! connection it accepts to a target and can delay each direction, blackhole traffic (sockets
//! stay open, nothing moves: a half-open path) and cut every connection at once. It knows nothing
//! of TLS, so it serves the WebSocket transport (QUIC is UDP).
//!
//! ```no_run
//! # async fn demo(cloud: std::net::SocketAddr) -> std::io::Result<()> {
//! use std::time::Duration;
//! use link::faultproxy::{Direction, FaultProxy};
//!
//! let proxy = FaultProxy::start(cloud).await?;
//! // dial proxy.local_addr() instead of cloud ...
//! proxy.set_delay(Direction::ToTarget, Duration::from_millis(50));
//! proxy.blackhole(); // the link goes silent
//! proxy.resume();    // and comes back, no bytes lost
//! proxy.cut();       // every connection is closed now
//! # Ok(()) }
//! ```

use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// Bytes read at a time.
const CHUNK: usize = 16 * 1024;

/// Chunks held per direction (read but not yet written, e.g. while delayed).
const QUEUE: usize = 64;

/// Pause after a failed accept (e.g. out of file descriptors) before trying again.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(10);

/// A running proxy. Dropping it stops it and closes its connections.
pub struct FaultProxy {
    local_addr: SocketAddr,
    target: SocketAddr,
    faults: watch::Sender<Faults>,
    live: Arc<AtomicUsize>,
    shutdown: CancellationToken,
}

/// A direction of traffic through the proxy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    /// From the connecting client to the target.
    ToTarget,
    /// From the target back to the client.
    ToClient,
}

/// The faults in force; every connection watches them.
#[derive(Clone, Copy, Debug, Default)]
struct Faults {
    to_target: Duration,
    to_client: Duration,
    blackhole: bool,
    /// Bumped by every cut; a connection ends when it changes.
    cuts: u64,
}

/// One direction of one connection.
struct Pump {
    from: OwnedReadHalf,
    to: OwnedWriteHalf,
    direction: Direction,
    faults: watch::Receiver<Faults>,
}

enum Chunk {
    Data { due: Instant, bytes: Vec<u8> },
    End,
}

/// Counts a connection as live while it exists.
struct LiveGuard(Arc<AtomicUsize>);

// === impl FaultProxy ===

impl FaultProxy {
    /// A proxy on `127.0.0.1:0` forwarding to `target`.
    pub async fn start(target: SocketAddr) -> io::Result<FaultProxy> {
        FaultProxy::bind((Ipv4Addr::LOCALHOST, 0).into(), target).await
    }

    /// A proxy on `listen` forwarding to `target`.
    pub async fn bind(listen: SocketAddr, target: SocketAddr) -> io::Result<FaultProxy> {
        let listener = TcpListener::bind(listen).await?;
        let proxy = FaultProxy {
            local_addr: listener.local_addr()?,
            target,
            faults: watch::Sender::new(Faults::default()),
            live: Arc::new(AtomicUsize::new(0)),
            shutdown: CancellationToken::new(),
        };
        tokio::spawn(accept_loop(
            listener,
            target,
            proxy.faults.subscribe(),
            proxy.live.clone(),
            proxy.shutdown.clone(),
        ));
        Ok(proxy)
    }

    /// Where clients connect.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Where connections are forwarded.
    pub fn target(&self) -> SocketAddr {
        self.target
    }

    /// Delays every byte read from now on in `direction` by `delay` (zero: no delay). Delay adds
    /// latency, not a throughput limit: chunks are delayed in a pipeline.
    pub fn set_delay(&self, direction: Direction, delay: Duration) {
        self.faults.send_modify(|f| match direction {
            Direction::ToTarget => f.to_target = delay,
            Direction::ToClient => f.to_client = delay,
        });
    }

    /// Stops forwarding in both directions on every connection, new ones included, while keeping
    /// the sockets open. Bytes already read are held, not dropped, until [`resume`](Self::resume).
    pub fn blackhole(&self) {
        self.faults.send_modify(|f| f.blackhole = true);
    }

    /// Closes every current connection now. New connections are accepted as before.
    pub fn cut(&self) {
        self.faults.send_modify(|f| f.cuts += 1);
    }

    /// Forwards normally again: no blackhole, no delays.
    pub fn resume(&self) {
        self.faults.send_modify(|f| {
            f.blackhole = false;
            f.to_target = Duration::ZERO;
            f.to_client = Duration::ZERO;
        });
    }

    /// Connections currently open through the proxy.
    pub fn connections(&self) -> usize {
        self.live.load(Ordering::SeqCst)
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

// === impl Faults ===

impl Faults {
    fn delay(&self, direction: Direction) -> Duration {
        match direction {
            Direction::ToTarget => self.to_target,
            Direction::ToClient => self.to_client,
        }
    }
}

// === impl Pump ===

impl Pump {
    /// Moves bytes until the reading side ends, then half-closes the writing side.
    async fn run(self) -> io::Result<()> {
        let Pump {
            from,
            to,
            direction,
            faults,
        } = self;
        let (tx, rx) = mpsc::channel(QUEUE);
        tokio::try_join!(
            read_side(from, tx, direction, faults.clone()),
            write_side(to, rx, faults),
        )?;
        Ok(())
    }
}

// === impl LiveGuard ===

impl LiveGuard {
    fn new(live: Arc<AtomicUsize>) -> LiveGuard {
        live.fetch_add(1, Ordering::SeqCst);
        LiveGuard(live)
    }
}

impl Drop for LiveGuard {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

async fn accept_loop(
    listener: TcpListener,
    target: SocketAddr,
    faults: watch::Receiver<Faults>,
    live: Arc<AtomicUsize>,
    shutdown: CancellationToken,
) {
    loop {
        let accepted = tokio::select! {
            _ = shutdown.cancelled() => return,
            accepted = listener.accept() => accepted,
        };
        match accepted {
            Ok((client, _)) => {
                let guard = LiveGuard::new(live.clone());
                let conn = serve(client, target, faults.clone(), guard);
                tokio::spawn(shutdown.clone().run_until_cancelled_owned(conn));
            }
            Err(e) => {
                tracing::debug!(error = %e, "faultproxy accept failed");
                tokio::time::sleep(ACCEPT_BACKOFF).await;
            }
        }
    }
}

/// One proxied connection: ends when both directions have ended, when one fails, or on a cut.
async fn serve(
    client: TcpStream,
    target: SocketAddr,
    mut faults: watch::Receiver<Faults>,
    _guard: LiveGuard,
) {
    let generation = faults.borrow_and_update().cuts;
    let mut cut = faults.clone();
    let cut = async move { cut.wait_for(|f| f.cuts != generation).await.map(|_| ()) };
    let forward = async {
        let server = TcpStream::connect(target).await?;
        let _ = client.set_nodelay(true);
        let _ = server.set_nodelay(true);
        let (client_read, client_write) = client.into_split();
        let (server_read, server_write) = server.into_split();
        let up = Pump {
            from: client_read,
            to: server_write,
            direction: Direction::ToTarget,
            faults: faults.clone(),
        };
        let down = Pump {
            from: server_read,
            to: client_write,
            direction: Direction::ToClient,
            faults,
        };
        tokio::try_join!(up.run(), down.run()).map(|_| ())
    };
    tokio::select! {
        _ = cut => {}
        result = forward => {
            if let Err(e) = result {
                tracing::debug!(error = %e, "faultproxy connection ended");
            }
        }
    }
}

async fn read_side(
    mut from: OwnedReadHalf,
    tx: mpsc::Sender<Chunk>,
    direction: Direction,
    mut faults: watch::Receiver<Faults>,
) -> io::Result<()> {
    loop {
        flowing(&mut faults).await?;
        let mut bytes = vec![0; CHUNK];
        let n = from.read(&mut bytes).await?;
        if n == 0 {
            // The writer may be gone already if the other side failed; nothing left to do then.
            let _ = tx.send(Chunk::End).await;
            return Ok(());
        }
        bytes.truncate(n);
        let due = Instant::now() + faults.borrow().delay(direction);
        if tx.send(Chunk::Data { due, bytes }).await.is_err() {
            return Ok(());
        }
    }
}

async fn write_side(
    mut to: OwnedWriteHalf,
    mut rx: mpsc::Receiver<Chunk>,
    mut faults: watch::Receiver<Faults>,
) -> io::Result<()> {
    while let Some(chunk) = rx.recv().await {
        match chunk {
            Chunk::Data { due, bytes } => {
                tokio::time::sleep_until(due).await;
                flowing(&mut faults).await?;
                to.write_all(&bytes).await?;
            }
            Chunk::End => break,
        }
    }
    to.shutdown().await
}

/// Waits while the proxy is blackholed; fails when the proxy is gone.
async fn flowing(faults: &mut watch::Receiver<Faults>) -> io::Result<()> {
    faults
        .wait_for(|f| !f.blackhole)
        .await
        .map(|_| ())
        .map_err(|_| io::Error::new(io::ErrorKind::ConnectionAborted, "faultproxy stopped"))
}

#[cfg(test)]
mod tests;
