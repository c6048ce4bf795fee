//! loadgen: many simulated edge nodes, each a real mutual-TLS session with its own certificate,
//! an in-memory store and real acks, against a real cloudhub. Scenarios:
//!
//! - `throughput`: one node, N distinct 1 KiB objects, acked messages per second (optionally
//!   with added round-trip delay through a fault proxy, WebSocket only);
//! - `idle`: N idle QUIC sessions held by a cloudhub in a child process, its resident memory
//!   per session;
//! - `storm`: N nodes holding objects, cloudcore restarted, time until all are resynced and how
//!   many objects were sent again;
//! - `fanout`: the whole cloud (embedded control plane, edgecontroller, cloudhub) with N nodes
//!   holding P pods each that mount one shared configmap; the configmap is updated and the time
//!   until each node committed the new version is reported;
//! - `latency`: a real cloudcore and edgecore; pods created in the cloud (by the `kube` crate,
//!   then by the kubectl binary), timed until a watcher on the edge's lwproxy sees them ADDED.

use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use beehive::CancellationToken;
use clap::{Parser, Subcommand};
use e2e::bench::rss_kib;
use e2e::controller::Desired;
use e2e::sim::{Dialer, SimEdge, node_tls};
use e2e::{Pki, Ports, cloud};
use link::Transport;

/// cloudcore's allocator (see its `main.rs`): the cloud runs in this process or in a child that
/// is this binary. `--features system-alloc` leaves the system's, for heaptrack.
#[cfg(not(feature = "system-alloc"))]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
struct Args {
    #[command(subcommand)]
    scenario: Scenario,
}

#[derive(Subcommand)]
enum Scenario {
    /// Acked messages per second over one session.
    Throughput {
        #[arg(long, default_value = "websocket")]
        transport: Transport,
        #[arg(long, default_value_t = 200_000)]
        messages: u64,
        #[arg(long, default_value_t = 1024)]
        payload: usize,
        /// Added round-trip time in milliseconds (WebSocket only: a TCP fault proxy adds it).
        #[arg(long, default_value_t = 0)]
        rtt_ms: u64,
        /// Rounds over the same session, each a new version of every object; the median is
        /// reported (a round of 100,000 lasts about a second, so single rounds are noisy). New
        /// objects each round would measure the simulated node's in-memory map growing instead:
        /// rehashing 458,752 entries stalls it past the 200 ms retransmission timeout.
        #[arg(long, default_value_t = 5)]
        rounds: u64,
        /// Meanwhile, a tunnel stream to the node carries bytes as fast as it can (a `logs -f`
        /// of a pod writing fast), read by the cloud to the end: the frames' rate beside it.
        #[arg(long)]
        tunnel_bulk: bool,
        /// The pace of that stream in MB/s (a log written at that rate); 0: as fast as it goes.
        #[arg(long, default_value_t = 0)]
        tunnel_mbs: u64,
    },
    /// Idle sessions one cloudhub holds, and its memory per session.
    Idle {
        #[arg(long, default_value_t = 10_000)]
        nodes: usize,
        /// QUIC (one UDP socket holds any number of sessions) or WebSocket (a file descriptor
        /// per session at each end, so at most the open-files limit).
        #[arg(long, default_value = "quic")]
        transport: Transport,
        /// Simulated nodes share this many QUIC client sockets.
        #[arg(long, default_value_t = 64)]
        sockets: usize,
        /// cloudhub's `maxConcurrentHandshakes` (default: cloudhub's).
        #[arg(long)]
        max_handshakes: Option<usize>,
    },
    /// All nodes reconnect after a cloudcore restart.
    Storm {
        #[arg(long, default_value_t = 10_000)]
        nodes: usize,
        #[arg(long, default_value_t = 3)]
        objects: u64,
        #[arg(long, default_value_t = 64)]
        sockets: usize,
        /// cloudhub's `maxConcurrentHandshakes` (default: cloudhub's).
        #[arg(long)]
        max_handshakes: Option<usize>,
    },
    /// The embedded control plane through the `kube` crate: create, list, update, watch fan-out.
    Api {
        #[arg(long, default_value_t = 10_000)]
        pods: usize,
        #[arg(long, default_value_t = 100)]
        watchers: usize,
    },
    /// One configmap referenced on every node is updated: time until every node has it.
    Fanout {
        #[arg(long, default_value_t = 1_000)]
        nodes: usize,
        #[arg(long, default_value_t = 10)]
        pods: usize,
        #[arg(long, default_value_t = 16)]
        sockets: usize,
        /// Updates to time, one after the other.
        #[arg(long, default_value_t = 5)]
        rounds: usize,
    },
    /// Create in the cloud → ADDED at a watcher on the edge's lwproxy.
    Latency {
        /// Pods created through the `kube` crate, one at a time.
        #[arg(long, default_value_t = 500)]
        pods: usize,
        /// Pods created by running `kubectl create -f -`, one at a time.
        #[arg(long, default_value_t = 50)]
        kubectl: usize,
    },
    /// (internal) A cloudcore for `idle`, in its own process.
    ServeCloud {
        #[arg(long)]
        dir: std::path::PathBuf,
        /// QUIC port (0: any).
        #[arg(long, default_value_t = 0)]
        quic_port: u16,
        /// Desired state: nodes `storm-0..N` each hold `objects` pods (deterministic, so a
        /// restarted process knows the same state).
        #[arg(long, default_value_t = 0)]
        nodes: usize,
        #[arg(long, default_value_t = 0)]
        objects: u64,
        /// cloudhub's `maxConcurrentHandshakes` (default: cloudhub's).
        #[arg(long)]
        max_handshakes: Option<usize>,
        /// The listener whose address the READY line gives.
        #[arg(long, default_value = "quic")]
        transport: Transport,
    },
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    // RUST_LOG=cloudhub=debug (say) logs to stderr: the cloud child inherits it.
    if std::env::var_os("RUST_LOG").is_some() {
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_writer(std::io::stderr)
            .init();
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async move {
        match args.scenario {
            Scenario::Throughput {
                transport,
                messages,
                payload,
                rtt_ms,
                rounds,
                tunnel_bulk,
                tunnel_mbs,
            } => {
                let bulk = tunnel_bulk.then_some(tunnel_mbs * 1_000_000);
                throughput(transport, messages, payload, rtt_ms, rounds, bulk).await
            }
            Scenario::Idle {
                nodes,
                transport,
                sockets,
                max_handshakes,
            } => idle(nodes, transport, sockets, max_handshakes).await,
            Scenario::Storm {
                nodes,
                objects,
                sockets,
                max_handshakes,
            } => storm(nodes, objects, sockets, max_handshakes).await,
            Scenario::Api { pods, watchers } => api_bench(pods, watchers).await,
            Scenario::Fanout {
                nodes,
                pods,
                sockets,
                rounds,
            } => fanout(nodes, pods, sockets, rounds).await,
            Scenario::Latency { pods, kubectl } => latency(pods, kubectl).await,
            Scenario::ServeCloud {
                dir,
                quic_port,
                nodes,
                objects,
                max_handshakes,
                transport,
            } => serve_cloud(&dir, quic_port, nodes, objects, max_handshakes, transport).await,
        }
    })
}

async fn throughput(
    transport: Transport,
    messages: u64,
    payload: usize,
    rtt_ms: u64,
    rounds: u64,
    bulk: Option<u64>,
) -> anyhow::Result<()> {
    let tunnel_bulk = bulk.is_some();
    let pki = Pki::new();
    let cloud = cloud(&pki, Desired::new(), Ports::default()).await;
    let mut addr = cloud.addr(transport);
    let _proxy = if rtt_ms > 0 {
        anyhow::ensure!(
            transport == Transport::WebSocket,
            "--rtt-ms needs the WebSocket transport"
        );
        let proxy = link::faultproxy::FaultProxy::start(addr).await?;
        let half = Duration::from_micros(rtt_ms * 500);
        proxy.set_delay(link::faultproxy::Direction::ToTarget, half);
        proxy.set_delay(link::faultproxy::Direction::ToClient, half);
        addr = proxy.local_addr();
        Some(proxy)
    } else {
        None
    };
    let node = "bench-0";
    let sim = SimEdge::new(node, node_tls(&pki.ca, node));
    sim.bulk_tunnels.store(tunnel_bulk, Ordering::Relaxed);
    sim.bulk_rate.store(bulk.unwrap_or(0), Ordering::Relaxed);
    let shutdown = CancellationToken::new();
    tokio::spawn(
        sim.clone()
            .run(Dialer::Direct(transport), addr, shutdown.clone()),
    );
    wait_for("the node to connect", Duration::from_secs(30), || {
        cloud.hub().sessions() == 1
    })
    .await?;
    let bulk_bytes = Arc::new(std::sync::atomic::AtomicU64::new(0));
    if tunnel_bulk {
        let mut stream = cloud.hub().open_tunnel(node).await?;
        let counted = bulk_bytes.clone();
        tokio::spawn(async move {
            use tokio::io::AsyncReadExt as _;
            let mut buf = vec![0u8; 64 * 1024];
            while let Ok(n) = stream.read(&mut buf).await {
                if n == 0 {
                    return;
                }
                counted.fetch_add(n as u64, Ordering::Relaxed);
            }
        });
    }
    let bulk_since = Instant::now();
    // Messages go straight into cloudhub's mailbox, as edgecontroller sends them; the content
    // is one shared 1 KiB buffer, so the figure is the link's, not the producer's.
    let body = beehive::Bytes::from(vec![b'x'; payload]);
    let hub = cloud.hub().clone();
    let mut rates = Vec::new();
    for round in 0..rounds.max(1) {
        let ctx = cloud.running.context();
        let body = body.clone();
        let start = Instant::now();
        let producer = tokio::spawn(async move {
            for i in 0..messages {
                let msg = beehive::Message::new()
                    .route(
                        "edgecontroller",
                        "resource",
                        format!("node/{node}/default/pods/p{i}"),
                        beehive::Operation::Update,
                    )
                    .with_resource_version((round * messages + i + 1).to_string())
                    .with_content(body.clone());
                ctx.send(cloudhub::NAME, msg)
                    .await
                    .expect("cloudhub takes messages");
            }
        });
        wait_for("every message acked", Duration::from_secs(600), || {
            hub.node(node)
                .is_some_and(|c| c.acked >= messages * (round + 1))
        })
        .await?;
        let elapsed = start.elapsed();
        producer.await?;
        rates.push(messages as f64 / elapsed.as_secs_f64());
    }
    let c = hub.node(node).unwrap();
    let mut sorted = rates.clone();
    sorted.sort_by(f64::total_cmp);
    let rounds: Vec<String> = rates.iter().map(|r| format!("{r:.0}")).collect();
    let bulk_mb_s =
        bulk_bytes.load(Ordering::Relaxed) as f64 / 1e6 / bulk_since.elapsed().as_secs_f64();
    println!(
        "throughput transport={transport} payload={payload}B rtt={rtt_ms}ms messages={messages} acked_per_s={:.0} (median of {} rounds: {}) retransmits={}{}",
        sorted[sorted.len() / 2],
        rates.len(),
        rounds.join(" "),
        c.retransmits,
        if tunnel_bulk {
            format!(" beside a tunnel stream carrying {bulk_mb_s:.0} MB/s")
        } else {
            String::new()
        }
    );
    shutdown.cancel();
    cloud.stop().await;
    Ok(())
}

async fn idle(
    nodes: usize,
    transport: Transport,
    sockets: usize,
    max_handshakes: Option<usize>,
) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let mut child = cloud_command()?
        .args(["serve-cloud", "--dir", dir.path().to_str().unwrap()])
        .args(["--transport", transport.as_str()])
        .args(handshakes_arg(max_handshakes))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()?;
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let (addr, pid) = read_ready(&mut lines)?;
    let sessions = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = sessions.clone();
    std::thread::spawn(move || {
        for line in lines.map_while(Result::ok) {
            if let Some(n) = line.strip_prefix("SESSIONS ").and_then(|n| n.parse().ok()) {
                counter.store(n, Ordering::Relaxed);
            }
        }
    });
    let pki = Pki::open(dir.path());
    let rss_before = rss_kib(pid)?;
    let tcp_kernel_pages_before = tcp_kernel_pages();
    let shutdown = CancellationToken::new();
    let dialers = quic_dialers(sockets)?;
    let start = Instant::now();
    for i in 0..nodes {
        let node = format!("idle-{i}");
        let sim = SimEdge::new(&node, node_tls(&pki.ca, &node));
        let dialer = match transport {
            Transport::Quic => Dialer::Quic(dialers[i % dialers.len()].clone()),
            Transport::WebSocket => Dialer::Direct(Transport::WebSocket),
        };
        tokio::spawn(sim.run(dialer, addr, shutdown.clone()));
        if i % 500 == 499 {
            // Pace the handshakes a little so the accept queue is not flooded.
            wait_for("sessions to catch up", Duration::from_secs(300), || {
                sessions.load(Ordering::Relaxed) + 2_000 > i
            })
            .await?;
        }
    }
    wait_for("every node connected", Duration::from_secs(900), || {
        sessions.load(Ordering::Relaxed) >= nodes
    })
    .await?;
    let connected_in = start.elapsed();
    tokio::time::sleep(Duration::from_secs(3)).await; // let allocations settle before measuring
    let rss_after = rss_kib(pid)?;
    println!(
        "idle transport={transport} sessions={nodes} connect_time={:.1}s cloud_rss_before={}KiB cloud_rss_after={}KiB per_session={:.1}KiB",
        connected_in.as_secs_f64(),
        rss_before,
        rss_after,
        (rss_after - rss_before) as f64 / nodes as f64
    );
    // TCP's buffers live in the kernel, outside any process's resident memory.
    if transport == Transport::WebSocket
        && let (Some(before), Some(after)) = (tcp_kernel_pages_before, tcp_kernel_pages())
    {
        println!(
            "kernel TCP memory (both ends of every connection, all of the machine): {}KiB, {:.1}KiB per session",
            after.saturating_sub(before) * 4,
            after.saturating_sub(before) as f64 * 4.0 / nodes as f64
        );
    }
    shutdown.cancel();
    // Closing stdin stops the cloud; a profiler wrapping it gets the time to write its data.
    drop(child.stdin.take());
    let deadline = Instant::now() + Duration::from_secs(30);
    while child.try_wait()?.is_none() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let _ = child.kill();
    let _ = child.wait();
    Ok(())
}

async fn storm(
    nodes: usize,
    objects: u64,
    sockets: usize,
    max_handshakes: Option<usize>,
) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let cloud1 = CloudProcess::start(dir.path(), 0, nodes, objects, max_handshakes)?;
    let addr = cloud1.addr;
    let pki = Pki::open(dir.path());
    let dialers = quic_dialers(sockets)?;
    let shutdown = CancellationToken::new();
    let mut sims = Vec::with_capacity(nodes);
    for i in 0..nodes {
        let node = format!("storm-{i}");
        let sim = SimEdge::new(&node, node_tls(&pki.ca, &node));
        tokio::spawn(sim.clone().run(
            Dialer::Quic(dialers[i % dialers.len()].clone()),
            addr,
            shutdown.clone(),
        ));
        sims.push(sim);
        if i % 500 == 499 {
            wait_for("sessions to catch up", Duration::from_secs(300), || {
                cloud1.sessions() + 2_000 > i
            })
            .await?;
        }
    }
    wait_for(
        "every node connected and holding its objects",
        Duration::from_secs(900),
        || {
            cloud1.sessions() >= nodes
                && sims
                    .iter()
                    .all(|s| s.held() as u64 == objects && s.stats.in_sync.load(Ordering::Relaxed))
        },
    )
    .await?;
    // Restart cloudcore as a service manager would: the process stops, a new one starts on the
    // same address with the same desired state.
    let stopping = Instant::now();
    cloud1.stop();
    let cloud2 = CloudProcess::start(dir.path(), addr.port(), nodes, objects, max_handshakes)?;
    let restart = Instant::now();
    let down = restart - stopping;
    wait_for(
        "every node reconnected and in sync",
        Duration::from_secs(900),
        || {
            cloud2.sessions() >= nodes
                && sims.iter().all(|s| {
                    s.stats.connects.load(Ordering::Relaxed) >= 2
                        && s.stats.in_sync.load(Ordering::Relaxed)
                })
        },
    )
    .await?;
    let elapsed = restart.elapsed();
    tokio::time::sleep(Duration::from_millis(600)).await; // one more report from the child
    let resent = cloud2.sent.load(Ordering::Relaxed);
    let inventories: u64 = sims
        .iter()
        .map(|s| s.stats.inventories.load(Ordering::Relaxed))
        .sum();
    let failures: u64 = sims
        .iter()
        .map(|s| s.stats.failures.load(Ordering::Relaxed))
        .sum();
    let mut synced: Vec<f64> = sims
        .iter()
        .filter_map(|s| *s.stats.synced_at.lock().unwrap())
        .map(|at| at.saturating_duration_since(restart).as_secs_f64())
        .collect();
    synced.sort_by(f64::total_cmp);
    // The slowest node's story: what its connection attempts ran into.
    if let Some(slowest) = sims
        .iter()
        .max_by_key(|s| *s.stats.synced_at.lock().unwrap())
    {
        let timeline = slowest.stats.timeline.lock().unwrap();
        let story: Vec<String> = timeline
            .iter()
            .filter(|(at, _)| *at + down >= restart)
            .map(|(at, what)| {
                let t = at.saturating_duration_since(restart).as_secs_f64()
                    - if *at < restart {
                        (restart - *at).as_secs_f64()
                    } else {
                        0.0
                    };
                format!("{t:+.1}s {what}")
            })
            .collect();
        println!("slowest node {}: {}", slowest.node, story.join("; "));
    }

    let pct =
        |p: f64| synced[((synced.len() as f64 * p).ceil() as usize).clamp(1, synced.len()) - 1];
    println!(
        "storm nodes={nodes} objects_per_node={objects} all_resynced_in={:.1}s (from the restarted cloudcore process listening; p50 {:.1}s, p90 {:.1}s, p99 {:.1}s) objects_resent={resent} inventory_exchanges={inventories} (first connect included) failed_attempts={failures} cloud_down_for={:.1}s",
        elapsed.as_secs_f64(),
        pct(0.5),
        pct(0.9),
        pct(0.99),
        down.as_secs_f64(),
    );
    shutdown.cancel();
    cloud2.stop();
    Ok(())
}

async fn serve_cloud(
    dir: &std::path::Path,
    quic_port: u16,
    nodes: usize,
    objects: u64,
    max_handshakes: Option<usize>,
    transport: Transport,
) -> anyhow::Result<()> {
    let pki = if dir.join("ca/rootCA.crt").exists() {
        Pki::open(dir)
    } else {
        let pki = Pki::new();
        pki::write_pem(&dir.join("ca/rootCA.crt"), pki.ca.cert_pem())?;
        pki::write_pem(&dir.join("ca/rootCA.key"), &pki.ca.key_pem())?;
        pki
    };
    let desired = Desired::new();
    for i in 0..nodes {
        for j in 0..objects {
            desired.put_pod_silently(&format!("storm-{i}"), &format!("o{j}"), 1 + j);
        }
    }
    let ports = Ports {
        quic: quic_port,
        ..Ports::default()
    };
    // The harness pings every 2 s so that tests notice a dead peer quickly; a benchmark of many
    // idle nodes runs cloudhub's defaults (15 s), as a real cloudcore does.
    let hub = cloudhub::Config::default();
    let cloud = e2e::cloud_with(&pki, desired, ports, |c| {
        c.modules.cloud_hub.keepalive_interval = hub.keepalive_interval;
        c.modules.cloud_hub.keepalive_timeout = hub.keepalive_timeout;
        // The benchmarks measure capacity: no node limit in their way.
        c.modules.cloud_hub.node_limit = 1_000_000;
        if let Some(n) = max_handshakes {
            c.modules.cloud_hub.max_concurrent_handshakes = n;
        }
    })
    .await;
    println!("READY {} {}", cloud.addr(transport), std::process::id());
    std::io::stdout().flush()?;
    let hub = cloud.hub().clone();
    tokio::spawn(async move {
        loop {
            let sent: u64 = (0..nodes)
                .filter_map(|i| hub.node(&format!("storm-{i}")))
                .map(|c| c.sent)
                .sum();
            println!("SESSIONS {}", hub.sessions());
            println!("SENT {sent}");
            let _ = std::io::stdout().flush();
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    });
    // Runs until the parent closes stdin (or kills it).
    tokio::task::spawn_blocking(|| std::io::stdin().lines().count()).await?;
    cloud.stop().await;
    Ok(())
}

/// A cloudcore in a child process of this binary, and what it reports.
struct CloudProcess {
    child: std::process::Child,
    addr: SocketAddr,
    sessions: Arc<std::sync::atomic::AtomicUsize>,
    sent: Arc<std::sync::atomic::AtomicU64>,
}

impl CloudProcess {
    fn start(
        dir: &std::path::Path,
        quic_port: u16,
        nodes: usize,
        objects: u64,
        max_handshakes: Option<usize>,
    ) -> anyhow::Result<CloudProcess> {
        let mut child = cloud_command()?
            .args(["serve-cloud", "--dir", dir.to_str().unwrap()])
            .args([
                "--quic-port",
                &quic_port.to_string(),
                "--nodes",
                &nodes.to_string(),
                "--objects",
                &objects.to_string(),
            ])
            .args(handshakes_arg(max_handshakes))
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()?;
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let (addr, _) = read_ready(&mut lines)?;
        let sessions = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let sent = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let (s2, t2) = (sessions.clone(), sent.clone());
        std::thread::spawn(move || {
            for line in lines.map_while(Result::ok) {
                if let Some(n) = line.strip_prefix("SESSIONS ").and_then(|n| n.parse().ok()) {
                    s2.store(n, Ordering::Relaxed);
                } else if let Some(n) = line.strip_prefix("SENT ").and_then(|n| n.parse().ok()) {
                    t2.store(n, Ordering::Relaxed);
                }
            }
        });
        Ok(CloudProcess {
            child,
            addr,
            sessions,
            sent,
        })
    }

    fn sessions(&self) -> usize {
        self.sessions.load(Ordering::Relaxed)
    }

    /// Stops the process as a service manager restart does: it closes every session, then exits.
    fn stop(mut self) {
        drop(self.child.stdin.take());
        let _ = self.child.wait();
    }
}

/// The cloud process's address and process id, from its `READY <addr> <pid>` line (a profiler
/// wrapping it may print lines of its own first).
fn read_ready(
    lines: &mut impl Iterator<Item = std::io::Result<String>>,
) -> anyhow::Result<(SocketAddr, u32)> {
    for line in lines {
        let line = line?;
        if let Some(ready) = line.strip_prefix("READY ") {
            let (addr, pid) = ready.split_once(' ').context("READY <addr> <pid>")?;
            return Ok((addr.parse()?, pid.parse()?));
        }
    }
    anyhow::bail!("the cloud process ended without a READY line")
}

/// The command that runs this binary as the cloud child process. `LOADGEN_CLOUD_WRAP` (words
/// separated by spaces, e.g. `heaptrack -o /tmp/cloud`) runs it under a profiler; the memory
/// figure of `idle` is then the profiler's process, not the cloud's.
fn cloud_command() -> anyhow::Result<std::process::Command> {
    let exe = std::env::current_exe()?;
    let wrap = std::env::var("LOADGEN_CLOUD_WRAP").unwrap_or_default();
    let mut words = wrap.split_whitespace();
    Ok(match words.next() {
        Some(program) => {
            let mut command = std::process::Command::new(program);
            command.args(words).arg(exe);
            command
        }
        None => std::process::Command::new(exe),
    })
}

fn quic_dialers(n: usize) -> anyhow::Result<Vec<link::QuicDialer>> {
    (0..n.max(1))
        .map(|_| Ok(link::QuicDialer::bind("127.0.0.1:0".parse()?)?))
        .collect()
}

async fn wait_for(
    what: &str,
    limit: Duration,
    mut done: impl FnMut() -> bool,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + limit;
    while !done() {
        anyhow::ensure!(
            Instant::now() < deadline,
            "timed out after {limit:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}

async fn api_bench(pods: usize, watchers: usize) -> anyhow::Result<()> {
    use futures::{StreamExt, TryStreamExt};
    use k8s_openapi::api::core::v1::{ConfigMap, Pod};
    use kube::api::{Api, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};

    let pki = Pki::new();
    let cloud = cloud(&pki, Desired::new(), Ports::default()).await;
    let client = cloud.kube().await;
    let api: Api<Pod> = Api::namespaced(client.clone(), "default");
    let pod = |i: usize| -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": format!("p{i}"), "labels": {"app": "bench", "shard": (i % 10).to_string()}},
            "spec": {"nodeName": format!("node-{}", i % 10), "containers": [{"name": "c", "image": "busybox:1.36", "args": ["sleep", "3600"]}]},
        }))
        .unwrap()
    };
    let start = Instant::now();
    futures::stream::iter(0..pods)
        .map(|i| {
            let api = api.clone();
            async move { api.create(&PostParams::default(), &pod(i)).await }
        })
        .buffer_unordered(64)
        .try_collect::<Vec<_>>()
        .await?;
    let create_rate = pods as f64 / start.elapsed().as_secs_f64();

    let mut full = Vec::new();
    let mut by_node = Vec::new();
    for _ in 0..20 {
        let t = Instant::now();
        let list = api.list(&ListParams::default()).await?;
        full.push(t.elapsed());
        anyhow::ensure!(list.items.len() == pods, "listed {} pods", list.items.len());
        let t = Instant::now();
        let list = api
            .list(&ListParams::default().fields("spec.nodeName=node-3"))
            .await?;
        by_node.push(t.elapsed());
        anyhow::ensure!(
            list.items.len() == pods / 10,
            "listed {} pods of node-3",
            list.items.len()
        );
    }
    full.sort();
    by_node.sort();

    let updates = pods.min(5_000);
    let start = Instant::now();
    futures::stream::iter(0..updates)
        .map(|i| {
            let api = api.clone();
            async move {
                let patch =
                    Patch::Merge(serde_json::json!({"metadata": {"labels": {"touched": "yes"}}}));
                api.patch(&format!("p{i}"), &PatchParams::default(), &patch)
                    .await
            }
        })
        .buffer_unordered(64)
        .try_collect::<Vec<_>>()
        .await?;
    let update_rate = updates as f64 / start.elapsed().as_secs_f64();
    let rss = rss_kib(std::process::id())?;

    // Watch fan-out: `watchers` watches on configmaps, then timed creates.
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let rv = cms
        .list(&ListParams::default().limit(1))
        .await?
        .metadata
        .resource_version
        .unwrap_or_default();
    let created_at = Arc::new(std::sync::Mutex::new(std::collections::HashMap::<
        String,
        Instant,
    >::new()));
    let latencies = Arc::new(std::sync::Mutex::new(Vec::<Duration>::new()));
    let writes = 200usize;
    let mut tasks = Vec::new();
    for _ in 0..watchers {
        let (cms, rv, created_at, latencies) = (
            cms.clone(),
            rv.clone(),
            created_at.clone(),
            latencies.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let mut stream = cms
                .watch(&WatchParams::default().timeout(290), &rv)
                .await
                .unwrap()
                .boxed();
            let mut got = 0;
            while let Some(Ok(event)) = stream.next().await {
                if let WatchEvent::Added(cm) = event {
                    let name = cm.metadata.name.unwrap_or_default();
                    if let Some(t0) = created_at.lock().unwrap().get(&name) {
                        latencies.lock().unwrap().push(t0.elapsed());
                    }
                    got += 1;
                    if got == writes {
                        return;
                    }
                }
            }
        }));
    }
    tokio::time::sleep(Duration::from_millis(500)).await; // let every watch connect
    for i in 0..writes {
        let name = format!("w{i}");
        created_at
            .lock()
            .unwrap()
            .insert(name.clone(), Instant::now());
        let cm: ConfigMap =
            serde_json::from_value(serde_json::json!({"metadata": {"name": name}}))?;
        cms.create(&PostParams::default(), &cm).await?;
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    for t in tasks {
        let _ = tokio::time::timeout(Duration::from_secs(60), t).await;
    }
    let mut lat = latencies.lock().unwrap().clone();
    lat.sort();
    let pct = |v: &[Duration], p: usize| {
        v.get(v.len().saturating_sub(1).min(v.len() * p / 100))
            .copied()
            .unwrap_or_default()
    };
    println!(
        "api pods={pods} create_per_s={create_rate:.0} list_all_p50={:.1?} list_all_p99={:.1?} list_node_p50={:.1?} list_node_p99={:.1?} patch_per_s={update_rate:.0} rss_with_pods={}MiB watch_fanout watchers={watchers} deliveries={} p50={:.2?} p99={:.2?}",
        pct(&full, 50),
        pct(&full, 99),
        pct(&by_node, 50),
        pct(&by_node, 99),
        rss / 1024,
        lat.len(),
        pct(&lat, 50),
        pct(&lat, 99),
    );
    cloud.stop().await;
    Ok(())
}

async fn fanout(nodes: usize, pods: usize, sockets: usize, rounds: usize) -> anyhow::Result<()> {
    use futures::{StreamExt, TryStreamExt};
    use k8s_openapi::api::core::v1::{ConfigMap, Pod};
    use kube::api::{Api, Patch, PatchParams, PostParams};

    let pki = Pki::new();
    let cloud = e2e::k8s_cloud(&pki, Ports::default()).await;
    let client = cloud.kube().await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let cm = serde_json::from_value(
        serde_json::json!({"metadata": {"name": "shared"}, "data": {"round": "0"}}),
    )?;
    cms.create(&PostParams::default(), &cm).await?;
    let addr = cloud.addr(Transport::Quic);
    let dialers = quic_dialers(sockets)?;
    let shutdown = CancellationToken::new();
    let sims: Vec<Arc<SimEdge>> = (0..nodes)
        .map(|i| {
            let node = format!("fan-{i}");
            let sim = SimEdge::new(&node, node_tls(&pki.ca, &node));
            let dialer = Dialer::Quic(dialers[i % dialers.len()].clone());
            tokio::spawn(sim.clone().run(dialer, addr, shutdown.clone()));
            sim
        })
        .collect();
    // Nodes register themselves on first connect; each then holds its own Node.
    wait_for("every node registered", Duration::from_secs(600), || {
        sims.iter().all(|s| s.count("nodes/") == 1)
    })
    .await?;
    let started = Instant::now();
    let pod_api: Api<Pod> = Api::namespaced(client.clone(), "default");
    futures::stream::iter(0..nodes * pods)
        .map(|i| {
            let pod_api = pod_api.clone();
            async move {
                let pod: Pod = serde_json::from_value(serde_json::json!({
                    "metadata": {"name": format!("fan-{}-{}", i / pods, i % pods)},
                    "spec": {
                        "nodeName": format!("fan-{}", i / pods),
                        "containers": [{"name": "c", "image": "busybox"}],
                        "volumes": [{"name": "cfg", "configMap": {"name": "shared"}}],
                    },
                }))?;
                pod_api.create(&PostParams::default(), &pod).await?;
                anyhow::Ok(())
            }
        })
        .buffer_unordered(32)
        .try_collect::<Vec<()>>()
        .await?;
    wait_for(
        "every node holds its pods and the configmap",
        Duration::from_secs(600),
        || {
            sims.iter()
                .all(|s| s.count("pods/") == pods && s.count("configmaps/") == 1)
        },
    )
    .await?;
    println!(
        "fanout setup: {nodes} nodes, {} pods created and delivered in {:.1}s",
        nodes * pods,
        started.elapsed().as_secs_f64()
    );
    let key = wire::object_key("configmaps", Some("default"), "shared");
    for round in 1..=rounds {
        let start = Instant::now();
        let patch = serde_json::json!({"data": {"round": round.to_string()}});
        let updated = cms
            .patch("shared", &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
        let rv = updated
            .metadata
            .resource_version
            .context("no resourceVersion")?;
        wait_for(
            "every node holds the update",
            Duration::from_secs(120),
            || {
                sims.iter()
                    .all(|s| s.version(&key).is_some_and(|(v, _)| v == rv))
            },
        )
        .await?;
        let mut ms: Vec<f64> = sims
            .iter()
            .filter_map(|s| s.version(&key))
            .map(|(_, at)| at.saturating_duration_since(start).as_secs_f64() * 1e3)
            .collect();
        ms.sort_by(f64::total_cmp);
        let pct = |p: f64| ms[((ms.len() as f64 * p).ceil() as usize).clamp(1, ms.len()) - 1];
        println!(
            "fanout round {round}: configmap update committed on {} nodes: p50 {:.0} ms, p99 {:.0} ms, last {:.0} ms",
            ms.len(),
            pct(0.50),
            pct(0.99),
            pct(1.0)
        );
    }
    shutdown.cancel();
    cloud.stop().await;
    Ok(())
}

async fn latency(pods: usize, kubectl: usize) -> anyhow::Result<()> {
    use futures::StreamExt;
    use k8s_openapi::api::core::v1::Pod;
    use kube::api::{Api, PostParams};
    use kube::runtime::watcher;

    let pki = Pki::new();
    let cloud = e2e::k8s_cloud(&pki, Ports::default()).await;
    let transport = Transport::WebSocket;
    let db = pki.path("edge.db");
    let edge = e2e::edge(e2e::edge_config(
        &pki.node("edge-1"),
        cloud.addr(transport),
        transport,
        &db,
    ))
    .await;
    let url = edge.running.lwproxy().context("lwproxy runs")?.url();
    let at_edge: Api<Pod> = Api::namespaced(
        kube::Client::try_from(kube::Config::new(url.parse()?))?,
        "default",
    );
    let (seen_tx, mut seen) = tokio::sync::mpsc::unbounded_channel::<(String, Instant)>();
    tokio::spawn(async move {
        let stream = watcher(at_edge, watcher::Config::default());
        futures::pin_mut!(stream);
        while let Some(event) = stream.next().await {
            if let Ok(watcher::Event::Apply(p) | watcher::Event::InitApply(p)) = event {
                let _ = seen_tx.send((p.metadata.name.unwrap_or_default(), Instant::now()));
            }
        }
    });
    let client = cloud.kube().await;
    let api: Api<Pod> = Api::namespaced(client, "default");
    let manifest = |name: &str| {
        serde_json::json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"nodeName": "edge-1", "containers": [{"name": "c", "image": "busybox"}]},
        })
    };
    let mut wait_seen = async |name: &str| -> anyhow::Result<Instant> {
        loop {
            let (seen_name, at) = tokio::time::timeout(Duration::from_secs(30), seen.recv())
                .await
                .context("no ADDED at the edge within 30s")?
                .context("the watcher ended")?;
            if seen_name == name {
                return Ok(at);
            }
        }
    };
    let mut by_kube = Vec::with_capacity(pods);
    for i in 0..pods {
        let name = format!("lat-{i}");
        let pod: Pod = serde_json::from_value(manifest(&name))?;
        let start = Instant::now();
        api.create(&PostParams::default(), &pod).await?;
        by_kube.push(wait_seen(&name).await? - start);
    }
    let kubeconfig = cloud
        .running
        .kubeconfig()
        .context("embedded kubeconfig")?
        .to_owned();
    let mut by_kubectl = Vec::with_capacity(kubectl);
    for i in 0..kubectl {
        let name = format!("ctl-{i}");
        let start = Instant::now();
        let mut child = std::process::Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .args(["create", "-f", "-", "-o", "name"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .spawn()
            .context("running kubectl")?;
        child
            .stdin
            .take()
            .context("kubectl stdin")?
            .write_all(manifest(&name).to_string().as_bytes())?;
        let seen_at = wait_seen(&name).await?;
        anyhow::ensure!(child.wait()?.success(), "kubectl create failed");
        by_kubectl.push(seen_at - start);
    }
    report_latency("kube crate create", &mut by_kube);
    report_latency("kubectl create (process start included)", &mut by_kubectl);
    edge.stop().await;
    cloud.stop().await;
    Ok(())
}

fn report_latency(what: &str, samples: &mut [Duration]) {
    if samples.is_empty() {
        return;
    }
    samples.sort();
    let pct = |p: f64| e2e::bench::percentile_ms(samples, p);
    println!(
        "latency {what} → ADDED at the edge watcher, n={}: p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
        samples.len(),
        pct(0.5),
        pct(0.99),
        pct(1.0)
    );
}

/// `--max-handshakes N` for the cloud child, if given.
fn handshakes_arg(max_handshakes: Option<usize>) -> Vec<String> {
    max_handshakes
        .map(|n| vec!["--max-handshakes".to_string(), n.to_string()])
        .unwrap_or_default()
}

/// Pages of TCP buffer memory the kernel holds (`/proc/net/sockstat`, `TCP: ... mem N`).
fn tcp_kernel_pages() -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/net/sockstat").ok()?;
    let tcp = stat.lines().find(|l| l.starts_with("TCP:"))?;
    let mut words = tcp.split_whitespace();
    words.find(|w| *w == "mem")?;
    words.next()?.parse().ok()
}
