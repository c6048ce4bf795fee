//! DNS benchmark for edgedns (BENCHMARKS.md, "Edge networking (issue 24)"): queries/s and
//! latency percentiles of the node-local server for a Service name, next to a forwarded name
//! answered from the cache (a stand-in upstream on 127.0.0.1 answers it once).
//!
//! `cargo run --release -p edgedns --example dnsbench -- [seconds] [in-flight] [services]`
//! (defaults 5, 8, 1000). Each in-flight slot is a UDP socket sending one query and waiting
//! for its answer; queries and answers are encoded and decoded with hickory-proto.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use edgedns::{Config, EdgeDns};
use hickory_proto::op::{Message, MessageType, OpCode, Query, ResponseCode};
use hickory_proto::rr::{Name, RData, Record, RecordType};
use hickory_server::ServerFuture;
use hickory_server::authority::MessageResponseBuilder;
use hickory_server::server::{Request, RequestHandler, ResponseHandler, ResponseInfo};
use objstore::{NewObject, ObjKey, StoreConfig, Synchronous, Writer};
use serde_json::json;
use tokio::net::UdpSocket;
use tokio_util::sync::CancellationToken;

#[tokio::main]
async fn main() {
    let args: Vec<u64> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let seconds = args.first().copied().unwrap_or(5);
    let in_flight = args.get(1).copied().unwrap_or(8) as usize;
    let services = args.get(2).copied().unwrap_or(1000);
    let dir = tempfile::tempdir().expect("a temporary directory");
    let config = StoreConfig {
        synchronous: Synchronous::Normal,
        ..StoreConfig::default()
    };
    let writer = Writer::open(dir.path().join("edge.db"), config).expect("the store opens");
    for i in 0..services {
        let svc = json!({ "metadata": { "namespace": "default", "name": format!("svc-{i}") },
            "spec": { "clusterIP": format!("10.96.{}.{}", i / 250, i % 250 + 1) } });
        let key = ObjKey::new("services", "default", format!("svc-{i}"));
        let value = serde_json::to_vec(&svc).expect("JSON encodes");
        writer
            .put(key, NewObject::from_value(value))
            .await
            .expect("stored");
    }
    let shutdown = CancellationToken::new();
    let upstream = stand_in_upstream().await;
    let dns_config = Config {
        enable: true,
        listen_address: "127.0.0.1:0".parse().expect("an address"),
        upstreams: vec![upstream],
        ..Config::default()
    };
    let (dns, handle) = EdgeDns::bind(dns_config, writer.reader())
        .await
        .expect("bound");
    let stop = shutdown.clone();
    tokio::spawn(async move { dns.serve(stop).await });
    let server = handle.udp_addr();
    let service = format!("svc-{}.default.svc.cluster.local.", services / 2);
    wait_for(server, &service).await;
    wait_for(server, "www.example.org.").await;
    println!(
        "edgedns on {server}: {services} Services, {in_flight} queries in flight, {seconds}s each"
    );
    for name in [service.as_str(), "www.example.org."] {
        let run = load(server, name, in_flight, Duration::from_secs(seconds)).await;
        println!(
            "{name:<45} {:>9.0} q/s  p50 {:>6.0} µs  p99 {:>6.0} µs  p99.9 {:>6.0} µs  ({} queries, {} errors)",
            run.qps, run.p50, run.p99, run.p999, run.queries, run.errors
        );
    }
    shutdown.cancel();
}

/// The outcome of one load run.
struct Run {
    qps: f64,
    p50: f64,
    p99: f64,
    p999: f64,
    queries: usize,
    errors: usize,
}

/// `in_flight` UDP clients asking `name` (A) for `duration`.
async fn load(server: SocketAddr, name: &str, in_flight: usize, duration: Duration) -> Run {
    let start = Instant::now();
    let deadline = start + duration;
    let mut tasks = Vec::new();
    for slot in 0..in_flight {
        let name = Name::from_ascii(name).expect("a name");
        tasks.push(tokio::spawn(async move {
            let socket = UdpSocket::bind("127.0.0.1:0").await.expect("bound");
            socket.connect(server).await.expect("connected");
            let (mut latencies, mut errors) = (Vec::new(), 0usize);
            let mut buf = vec![0u8; 4096];
            let mut id = (slot as u16).wrapping_mul(4099);
            while Instant::now() < deadline {
                id = id.wrapping_add(1);
                let query = query(id, &name);
                let sent = Instant::now();
                socket.send(&query).await.expect("sent");
                let got = tokio::time::timeout(Duration::from_secs(1), socket.recv(&mut buf)).await;
                let ok = match got {
                    Ok(Ok(n)) => Message::from_vec(&buf[..n]).is_ok_and(|m| {
                        m.id() == id
                            && m.response_code() == ResponseCode::NoError
                            && !m.answers().is_empty()
                    }),
                    _ => false,
                };
                match ok {
                    true => latencies.push(sent.elapsed()),
                    false => errors += 1,
                }
            }
            (latencies, errors)
        }));
    }
    let (mut all, mut errors) = (Vec::new(), 0);
    for task in tasks {
        let (latencies, e) = task.await.expect("a load task");
        all.extend(latencies);
        errors += e;
    }
    let elapsed = start.elapsed().as_secs_f64();
    all.sort();
    let at = |p: f64| {
        all.get(((all.len() as f64 * p) as usize).min(all.len().saturating_sub(1)))
            .map_or(0.0, |d| d.as_secs_f64() * 1e6)
    };
    Run {
        qps: all.len() as f64 / elapsed,
        p50: at(0.50),
        p99: at(0.99),
        p999: at(0.999),
        queries: all.len(),
        errors,
    }
}

/// An A query for `name`, encoded by hickory-proto.
fn query(id: u16, name: &Name) -> Vec<u8> {
    let mut message = Message::new();
    message
        .set_id(id)
        .set_message_type(MessageType::Query)
        .set_op_code(OpCode::Query)
        .set_recursion_desired(true)
        .add_query(Query::query(name.clone(), RecordType::A));
    message.to_vec().expect("a query encodes")
}

/// Asks until `name` is answered (the zone is read, the upstream is up).
async fn wait_for(server: SocketAddr, name: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if load(server, name, 1, Duration::from_millis(50))
            .await
            .queries
            > 0
        {
            return;
        }
    }
    panic!("{name} was not answered within 10s");
}

/// A stand-in upstream: every A question gets 192.0.2.7 with TTL 300.
struct Upstream;

#[async_trait::async_trait]
impl RequestHandler for Upstream {
    async fn handle_request<R: ResponseHandler>(
        &self,
        request: &Request,
        mut response: R,
    ) -> ResponseInfo {
        let query = request.request_info().expect("one question").query;
        let header = hickory_proto::op::Header::response_from_request(request.header());
        let name = Name::from(query.name());
        let answer = [Record::from_rdata(
            name,
            300,
            RData::A(hickory_proto::rr::rdata::A::new(192, 0, 2, 7)),
        )];
        let builder = MessageResponseBuilder::from_message_request(request);
        let message = builder.build(header, answer.iter(), [], [], []);
        response.send_response(message).await.expect("answered")
    }
}

async fn stand_in_upstream() -> SocketAddr {
    let socket = UdpSocket::bind("127.0.0.1:0").await.expect("bound");
    let addr = socket.local_addr().expect("an address");
    let mut server = ServerFuture::new(Upstream);
    server.register_socket(socket);
    tokio::spawn(async move { server.block_until_done().await });
    addr
}
