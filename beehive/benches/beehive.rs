//! beehive throughput and latency, printed as a table.
//!
//! Run with `cargo bench -p beehive`. Each figure runs on a current-thread tokio runtime (all
//! modules on one core) and on a two-worker multi-thread runtime.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use beehive::{
    CancellationToken, Context, Mailbox, Message, Module, ModuleError, Operation, Runtime,
};
use tokio::sync::Notify;

/// Counts messages; wakes the bench when the target count is reached. Answers sync messages.
struct Sink {
    name: String,
    group: &'static str,
    seen: Arc<AtomicU64>,
    target: u64,
    done: Arc<Notify>,
}

#[beehive::async_trait]
impl Module for Sink {
    fn name(&self) -> &str {
        &self.name
    }
    fn group(&self) -> &str {
        self.group
    }
    async fn run(
        &self,
        ctx: Context,
        mb: &mut Mailbox,
        shutdown: CancellationToken,
    ) -> Result<(), ModuleError> {
        // One cancellation future for the whole loop: making a new one per message registers a
        // waiter under a lock each time.
        let cancelled = shutdown.cancelled();
        tokio::pin!(cancelled);
        let mut batch = Vec::with_capacity(64);
        loop {
            let n = tokio::select! {
                biased;
                _ = &mut cancelled => return Ok(()),
                n = mb.recv_many(&mut batch, 64) => n,
            };
            if n == 0 {
                return Ok(());
            }
            for m in batch.drain(..) {
                if m.header.sync {
                    let _ = ctx.respond(m.response("sink", beehive::Bytes::new()));
                    continue;
                }
                if self.seen.fetch_add(1, Ordering::Relaxed) + 1 == self.target {
                    self.done.notify_one();
                }
            }
        }
    }
}

fn message() -> Message {
    Message::new()
        .route("bench", "bus", "default/pod/nginx", Operation::Update)
        .with_content(beehive::Bytes::from_static(&[0u8; 64]))
}

/// A sink's message count and its "target reached" signal.
type Probe = (Arc<AtomicU64>, Arc<Notify>);

fn sinks(n: usize, target: u64) -> (Runtime, Vec<Probe>) {
    let mut rt = Runtime::new();
    let mut probes = Vec::new();
    for i in 0..n {
        let seen = Arc::new(AtomicU64::new(0));
        let done = Arc::new(Notify::new());
        rt.register(Sink {
            name: format!("sink{i}"),
            group: "bus",
            seen: seen.clone(),
            target,
            done: done.clone(),
        });
        probes.push((seen, done));
    }
    (rt, probes)
}

async fn point_to_point(n: u64) -> f64 {
    let (rt, probes) = sinks(1, n);
    let running = rt.start(CancellationToken::new()).unwrap();
    let ctx = running.context();
    let template = message();
    let start = Instant::now();
    let done = probes[0].1.notified();
    for _ in 0..n {
        ctx.send("sink0", template.clone()).await.unwrap();
    }
    done.await;
    let rate = n as f64 / start.elapsed().as_secs_f64();
    running.shutdown(Duration::from_secs(1)).await;
    rate
}

async fn fan_out(n: u64, members: usize) -> f64 {
    let (rt, probes) = sinks(members, n);
    let running = rt.start(CancellationToken::new()).unwrap();
    let ctx = running.context();
    let template = message();
    let start = Instant::now();
    for _ in 0..n {
        ctx.send_to_group("bus", template.clone()).await.unwrap();
    }
    for (seen, done) in &probes {
        if seen.load(Ordering::Relaxed) < n {
            done.notified().await;
        }
    }
    let rate = n as f64 / start.elapsed().as_secs_f64();
    running.shutdown(Duration::from_secs(1)).await;
    rate
}

struct SyncFigures {
    p50: Duration,
    p99: Duration,
    lost: u64,
}

async fn send_sync(n: usize) -> SyncFigures {
    let (rt, _) = sinks(1, u64::MAX);
    let running = rt.start(CancellationToken::new()).unwrap();
    let ctx = running.context();
    let mut lat = Vec::with_capacity(n);
    let mut lost = 0u64;
    for _ in 0..n {
        let t = Instant::now();
        match ctx
            .send_sync("sink0", message(), Duration::from_secs(5))
            .await
        {
            Ok(_) => lat.push(t.elapsed()),
            Err(_) => lost += 1,
        }
    }
    lost += ctx.stats().late_responses;
    lat.sort_unstable();
    running.shutdown(Duration::from_secs(1)).await;
    SyncFigures {
        p50: lat[lat.len() / 2],
        p99: lat[lat.len() * 99 / 100],
        lost,
    }
}

fn run_on(label: &str, rt: tokio::runtime::Runtime) {
    // Spawned, so that on the multi-thread runtime the sender runs on a worker like a module does.
    let on_worker = |f| rt.block_on(async { tokio::spawn(f).await.unwrap() });
    let p2p =
        on_worker(Box::pin(point_to_point(2_000_000)) as Pin<Box<dyn Future<Output = f64> + Send>>);
    let fan = on_worker(Box::pin(fan_out(200_000, 8)));
    let sync = rt.block_on(async { tokio::spawn(send_sync(200_000)).await.unwrap() });
    println!(
        "{label:<22} {:>14.0} {:>22.0} {:>12.2?} {:>12.2?} {:>8}",
        p2p, fan, sync.p50, sync.p99, sync.lost
    );
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` passes nothing that matters here,
    // so keep the quick path quick.
    if std::env::args().any(|a| a == "--test" || a == "--list") {
        return;
    }
    println!(
        "{:<22} {:>14} {:>22} {:>12} {:>12} {:>8}",
        "runtime", "p2p msgs/s", "group(8) sends/s", "sync p50", "sync p99", "lost"
    );
    for _ in 0..3 {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        run_on("current_thread", rt);
    }
    for _ in 0..3 {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        run_on("multi_thread(2)", rt);
    }
}
