//! edgedns on loopback: a store filled as metamanager fills it, the server bound on
//! 127.0.0.1 port 0, queried with hickory's client over UDP and TCP; a stand-in upstream on
//! 127.0.0.1 answers forwarded names. There is no cloud at all: every cluster answer here is an
//! offline one.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use edgedns::{Config, EdgeDns};
use hickory_client::client::{Client, ClientHandle};
use hickory_client::proto::op::{Header, ResponseCode};
use hickory_client::proto::rr::rdata::A;
use hickory_client::proto::rr::{DNSClass, Name, RData, Record, RecordType};
use hickory_client::proto::runtime::TokioRuntimeProvider;
use hickory_client::proto::tcp::TcpClientStream;
use hickory_client::proto::udp::UdpClientStream;
use hickory_client::proto::xfer::DnsResponse;
use hickory_server::ServerFuture;
use hickory_server::authority::MessageResponseBuilder;
use hickory_server::server::{Request, RequestHandler, ResponseHandler, ResponseInfo};
use objstore::{ObjKey, StoreConfig, Writer};
use serde_json::{Value, json};
use tokio::net::UdpSocket;
use tokio_util::sync::CancellationToken;

const WAIT: Duration = Duration::from_secs(5);

/// A running edgedns over a temporary store, with a stand-in upstream.
struct Fixture {
    _dir: tempfile::TempDir,
    writer: Writer,
    udp: SocketAddr,
    tcp: SocketAddr,
    upstream_queries: Arc<AtomicUsize>,
    shutdown: CancellationToken,
}

impl Drop for Fixture {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

/// Starts edgedns (forwarding to a stand-in upstream, or to `upstream` when given) over a
/// store holding the test's objects.
async fn start(upstream: Option<SocketAddr>) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let writer = Writer::open(dir.path().join("edge.db"), StoreConfig::default()).unwrap();
    let shutdown = CancellationToken::new();
    let upstream_queries = Arc::new(AtomicUsize::new(0));
    let upstream = match upstream {
        Some(addr) => addr,
        None => stand_in_upstream(upstream_queries.clone(), shutdown.clone()).await,
    };
    fill(&writer).await;
    let config = Config {
        enable: true,
        listen_address: "127.0.0.1:0".parse().unwrap(),
        upstreams: vec![upstream],
        upstream_timeout: Duration::from_millis(300),
        ..Config::default()
    };
    let (dns, handle) = EdgeDns::bind(config, writer.reader()).await.unwrap();
    let stop = shutdown.clone();
    tokio::spawn(async move { dns.serve(stop).await });
    let fixture = Fixture {
        _dir: dir,
        writer,
        udp: handle.udp_addr(),
        tcp: handle.tcp_addr(),
        upstream_queries,
        shutdown,
    };
    let client = udp(fixture.udp).await;
    testkit::eventually("the zone is read from the store", WAIT, || {
        let mut client = client.clone();
        async move {
            addresses(
                &ask(
                    &mut client,
                    "redis.default.svc.cluster.local.",
                    RecordType::A,
                )
                .await,
            ) == ["10.96.0.10"]
        }
    })
    .await;
    fixture
}

/// Stores `obj` as metamanager stores what the cloud sends.
async fn put(writer: &Writer, resource: &str, obj: Value) {
    let meta = &obj["metadata"];
    let key = ObjKey::new(
        resource,
        meta["namespace"].as_str().unwrap_or(""),
        meta["name"].as_str().unwrap(),
    );
    let bytes = serde_json::to_vec(&obj).unwrap();
    let parsed = metamanager::object::Parsed::from_json(resource, &bytes).unwrap();
    let object = parsed.into_new_object(resource, "1", writer.revision() + 1);
    writer.put(key, object).await.unwrap();
}

const SLICES: &str = "endpointslices.discovery.k8s.io";

fn service(name: &str, spec: Value) -> Value {
    json!({ "apiVersion": "v1", "kind": "Service", "metadata": { "namespace": "default", "name": name }, "spec": spec })
}

fn slice(service: &str, name: &str, endpoints: Value) -> Value {
    json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": { "namespace": "default", "name": name, "labels": { "kubernetes.io/service-name": service } },
        "addressType": "IPv4",
        "ports": [{ "name": "redis", "protocol": "TCP", "port": 6379 }],
        "endpoints": endpoints,
    })
}

/// What the cloud would have sent this node (n1): its Node, a ClusterIP Service, a headless
/// one, and a headless one closed to this node.
async fn fill(writer: &Writer) {
    let node = json!({ "apiVersion": "v1", "kind": "Node", "metadata": { "name": "n1" } });
    put(writer, "nodes", node).await;
    let redis = json!({ "clusterIP": "10.96.0.10", "ports": [{ "name": "redis", "protocol": "TCP", "port": 6379 }] });
    put(writer, "services", service("redis", redis)).await;
    put(
        writer,
        "services",
        service("cache", json!({ "clusterIP": "None" })),
    )
    .await;
    let eps = json!([
        { "addresses": ["10.244.1.5"], "hostname": "cache-0", "nodeName": "n1" },
        { "addresses": ["10.244.2.6"], "hostname": "cache-1", "nodeName": "n2" },
    ]);
    put(writer, SLICES, slice("cache", "cache-x1", eps.clone())).await;
    let mut closed = service("local", json!({ "clusterIP": "None" }));
    closed["metadata"]["annotations"] =
        json!({ "openyurt.io/topologyKeys": "kubernetes.io/hostname" });
    put(writer, "services", closed).await;
    put(writer, SLICES, slice("local", "local-x1", eps)).await;
}

async fn udp(addr: SocketAddr) -> Client {
    let stream = UdpClientStream::builder(addr, TokioRuntimeProvider::new()).build();
    let (client, background) = Client::connect(stream).await.unwrap();
    tokio::spawn(background);
    client
}

async fn tcp(addr: SocketAddr) -> Client {
    let (stream, sender) = TcpClientStream::new(addr, None, None, TokioRuntimeProvider::new());
    let (client, background) = Client::new(stream, sender, None).await.unwrap();
    tokio::spawn(background);
    client
}

async fn ask(client: &mut Client, name: &str, qtype: RecordType) -> DnsResponse {
    let name = Name::from_ascii(name).unwrap();
    client.query(name, DNSClass::IN, qtype).await.unwrap()
}

fn addresses(response: &DnsResponse) -> Vec<String> {
    ips(response.answers())
}

/// The A and AAAA addresses among `records`, sorted.
fn ips(records: &[Record]) -> Vec<String> {
    let mut found: Vec<String> = records
        .iter()
        .filter(|r| matches!(r.record_type(), RecordType::A | RecordType::AAAA))
        .map(|r| r.data().to_string())
        .collect();
    found.sort();
    found
}

fn data(response: &DnsResponse) -> Vec<String> {
    response
        .answers()
        .iter()
        .map(|r| r.data().to_string())
        .collect()
}

#[tokio::test]
async fn service_names_resolve_over_udp_and_tcp_from_the_edge_store() {
    let f = start(None).await;
    for mut client in [udp(f.udp).await, tcp(f.tcp).await] {
        let answer = ask(
            &mut client,
            "redis.default.svc.cluster.local.",
            RecordType::A,
        )
        .await;
        assert_eq!(answer.response_code(), ResponseCode::NoError);
        assert!(answer.authoritative());
        assert_eq!(addresses(&answer), ["10.96.0.10"]);
        let mut headless = ask(
            &mut client,
            "cache.default.svc.cluster.local.",
            RecordType::A,
        )
        .await;
        assert_eq!(addresses(&headless), ["10.244.1.5", "10.244.2.6"]);
        headless = ask(
            &mut client,
            "cache-1.cache.default.svc.cluster.local.",
            RecordType::A,
        )
        .await;
        assert_eq!(addresses(&headless), ["10.244.2.6"]);
    }
}

#[tokio::test]
async fn srv_ptr_nxdomain_and_nodata_are_answered_as_the_dns_spec_says() {
    let f = start(None).await;
    let mut client = udp(f.udp).await;
    let srv = ask(
        &mut client,
        "_redis._tcp.redis.default.svc.cluster.local.",
        RecordType::SRV,
    )
    .await;
    assert_eq!(data(&srv), ["0 100 6379 redis.default.svc.cluster.local."]);
    assert_eq!(ips(srv.additionals()), ["10.96.0.10"]);
    let ptr = ask(&mut client, "10.0.96.10.in-addr.arpa.", RecordType::PTR).await;
    assert_eq!(data(&ptr), ["redis.default.svc.cluster.local."]);
    let ptr = ask(&mut client, "5.1.244.10.in-addr.arpa.", RecordType::PTR).await;
    let mut names = data(&ptr);
    names.sort();
    let both = [
        "cache-0.cache.default.svc.cluster.local.",
        "cache-0.local.default.svc.cluster.local.",
    ];
    assert_eq!(names, both, "the pod backs two headless Services");
    // A search-path expansion that is not a name of the zone (ndots:5 tries these first).
    let nx = ask(
        &mut client,
        "redis.default.svc.cluster.local.default.svc.cluster.local.",
        RecordType::A,
    )
    .await;
    assert_eq!(nx.response_code(), ResponseCode::NXDomain);
    assert_eq!(soa_in_authority(&nx), 1);
    let nodata = ask(
        &mut client,
        "redis.default.svc.cluster.local.",
        RecordType::TXT,
    )
    .await;
    assert_eq!(nodata.response_code(), ResponseCode::NoError);
    assert!(nodata.answers().is_empty());
    assert_eq!(soa_in_authority(&nodata), 1);
    assert_eq!(
        f.upstream_queries.load(Ordering::SeqCst),
        0,
        "the zone is never forwarded"
    );
}

#[tokio::test]
async fn a_headless_record_follows_an_endpoint_slice_change() {
    let f = start(None).await;
    let mut client = udp(f.udp).await;
    let moved = json!([{ "addresses": ["10.244.3.9"], "hostname": "cache-0", "nodeName": "n1" }]);
    put(&f.writer, SLICES, slice("cache", "cache-x1", moved)).await;
    testkit::eventually("cache-0 has its new address", WAIT, || {
        let mut client = client.clone();
        async move {
            let answer = ask(
                &mut client,
                "cache-0.cache.default.svc.cluster.local.",
                RecordType::A,
            )
            .await;
            addresses(&answer) == ["10.244.3.9"]
        }
    })
    .await;
    let gone = ask(
        &mut client,
        "cache-1.cache.default.svc.cluster.local.",
        RecordType::A,
    )
    .await;
    assert_eq!(gone.response_code(), ResponseCode::NXDomain);
    f.writer
        .delete(&ObjKey::new("services", "default", "redis"))
        .await
        .unwrap();
    testkit::eventually("a deleted Service's name is gone", WAIT, || {
        let mut client = client.clone();
        async move {
            let answer = ask(
                &mut client,
                "redis.default.svc.cluster.local.",
                RecordType::A,
            )
            .await;
            answer.response_code() == ResponseCode::NXDomain
        }
    })
    .await;
}

#[tokio::test]
async fn a_closed_headless_service_answers_only_endpoints_this_node_may_reach() {
    let f = start(None).await;
    let mut client = udp(f.udp).await;
    let local = ask(
        &mut client,
        "local.default.svc.cluster.local.",
        RecordType::A,
    )
    .await;
    assert_eq!(
        addresses(&local),
        ["10.244.1.5"],
        "n2's endpoint is filtered for n1"
    );
    let other = ask(
        &mut client,
        "cache-1.local.default.svc.cluster.local.",
        RecordType::A,
    )
    .await;
    assert_eq!(other.response_code(), ResponseCode::NXDomain);
}

#[tokio::test]
async fn a_closed_headless_service_follows_where_this_node_stands() {
    let f = start(None).await;
    let mut client = udp(f.udp).await;
    // The node's own Node changes (here: the store now says it is n2): the site filter's
    // inputs moved, and the zone is read again under the new filter.
    f.writer
        .delete(&ObjKey::new("nodes", "", "n1"))
        .await
        .unwrap();
    let node = json!({ "apiVersion": "v1", "kind": "Node", "metadata": { "name": "n2" } });
    put(&f.writer, "nodes", node).await;
    testkit::eventually("the closed Service shows n2's endpoint", WAIT, || {
        let mut client = client.clone();
        async move {
            let local = ask(
                &mut client,
                "local.default.svc.cluster.local.",
                RecordType::A,
            )
            .await;
            addresses(&local) == ["10.244.2.6"]
        }
    })
    .await;
    let open = ask(
        &mut client,
        "cache.default.svc.cluster.local.",
        RecordType::A,
    )
    .await;
    assert_eq!(
        addresses(&open),
        ["10.244.1.5", "10.244.2.6"],
        "open Services are unchanged"
    );
}

#[tokio::test]
async fn other_names_are_forwarded_and_answered_from_the_cache_within_their_ttl() {
    let f = start(None).await;
    let mut client = udp(f.udp).await;
    for _ in 0..3 {
        let answer = ask(&mut client, "www.example.org.", RecordType::A).await;
        assert_eq!(addresses(&answer), ["192.0.2.7"]);
        assert!(!answer.authoritative());
    }
    assert_eq!(
        f.upstream_queries.load(Ordering::SeqCst),
        1,
        "cached after the first"
    );
    let missing = ask(&mut client, "missing.example.org.", RecordType::A).await;
    assert_eq!(missing.response_code(), ResponseCode::NXDomain);
}

#[tokio::test]
async fn cluster_names_resolve_with_no_cloud_and_no_upstream() {
    // An upstream that never answers: a bound socket nobody reads.
    let silent = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let f = start(Some(silent.local_addr().unwrap())).await;
    let mut client = tcp(f.tcp).await;
    let answer = ask(
        &mut client,
        "redis.default.svc.cluster.local.",
        RecordType::A,
    )
    .await;
    assert_eq!(addresses(&answer), ["10.96.0.10"]);
    let forwarded = ask(&mut client, "www.example.org.", RecordType::A).await;
    assert_eq!(forwarded.response_code(), ResponseCode::ServFail);
}

fn soa_in_authority(response: &DnsResponse) -> usize {
    let soa = |r: &&Record| r.record_type() == RecordType::SOA;
    response.name_servers().iter().filter(soa).count()
}

/// A stand-in for the node's resolver: `www.example.org` A 192.0.2.7 (TTL 300), NXDOMAIN for
/// anything else; counts the queries it gets.
struct Upstream {
    queries: Arc<AtomicUsize>,
}

#[async_trait::async_trait]
impl RequestHandler for Upstream {
    async fn handle_request<R: ResponseHandler>(
        &self,
        request: &Request,
        mut response: R,
    ) -> ResponseInfo {
        self.queries.fetch_add(1, Ordering::SeqCst);
        let query = request.request_info().unwrap().query;
        let mut header = Header::response_from_request(request.header());
        header.set_recursion_available(true);
        let name = Name::from(query.name());
        let known = name == Name::from_ascii("www.example.org.").unwrap();
        let answers = match known && query.query_type() == RecordType::A {
            true => vec![Record::from_rdata(
                name,
                300,
                RData::A(A::new(192, 0, 2, 7)),
            )],
            false => Vec::new(),
        };
        if !known {
            header.set_response_code(ResponseCode::NXDomain);
        }
        let builder = MessageResponseBuilder::from_message_request(request);
        let message = builder.build(header, answers.iter(), [], [], []);
        response.send_response(message).await.unwrap()
    }
}

async fn stand_in_upstream(queries: Arc<AtomicUsize>, shutdown: CancellationToken) -> SocketAddr {
    let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let addr = socket.local_addr().unwrap();
    let mut server = ServerFuture::new(Upstream { queries });
    server.register_socket(socket);
    tokio::spawn(async move {
        shutdown.cancelled().await;
        let _ = server.shutdown_gracefully().await;
    });
    addr
}
