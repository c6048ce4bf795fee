//! Connection hardening of the two HTTP servers (the embedded API server and lwproxy): floods
//! of idle connections do not lock real clients out, idle connections are closed, watches are
//! not, and the request limits answer as kube-apiserver does (200 headers served, a too-large
//! body a 413 `Status`).

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use e2e::controller::Desired;
use e2e::{Pki, Ports};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, ListParams, PostParams, WatchEvent, WatchParams};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

/// How long a real client may take to be answered while the flood is held.
const SERVED_WITHIN: Duration = Duration::from_secs(1);
/// The short timeouts of the timeout tests.
const SHORT: Duration = Duration::from_secs(1);
const WAIT: Duration = Duration::from_secs(10);
/// How long the flood waits for one connection or handshake.
const FLOOD_STEP: Duration = Duration::from_secs(2);

/// The floods run one at a time: two at once on two cores would measure each other.
static FLOODING: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A connection held open that never sends a request.
#[allow(dead_code)] // held only to be dropped at the end
enum Idle {
    Tcp(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_from_one_or_many_addresses_do_not_lock_the_admin_out() {
    let _one_at_a_time = FLOODING.lock().await;
    let pki = Pki::new();
    let cloud = e2e::cloud(&pki, Desired::new(), Ports::default()).await;
    let api = cloud.running.api().unwrap();
    let tls = Some(connector(api.ca_pem()));

    let held = flood(api.addr(), &sources(1), 2000, tls.as_ref()).await;
    lists_promptly::<Namespace>(cloud.kube().await).await;
    drop(held);

    let evicted = api.connections().evicted();
    let held = flood(api.addr(), &sources(40), 50, tls.as_ref()).await;
    lists_promptly::<Namespace>(cloud.kube().await).await;
    assert!(
        api.connections().evicted() > evicted,
        "room was made by eviction"
    );
    drop(held);
    cloud.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_do_not_lock_local_clients_out_of_lwproxy() {
    let _one_at_a_time = FLOODING.lock().await;
    let dir = tempfile::tempdir().unwrap();
    let edge = e2e::edge(lwproxy_only(dir.path())).await;
    let proxy = edge.running.lwproxy().unwrap().clone();
    let client = || {
        let config = kube::Config::new(proxy.url().parse().unwrap());
        kube::Client::try_from(config).unwrap()
    };

    let held = flood(proxy.addr(), &sources(1), 2000, None).await;
    // A kind the node rules deliver: served from the store with no cloud (a kind never
    // synced, such as namespaces, is a 503 offline).
    lists_promptly::<ConfigMap>(client()).await;
    drop(held);

    let held = flood(proxy.addr(), &sources(40), 50, None).await;
    // A kind the node rules deliver: served from the store with no cloud (a kind never
    // synced, such as namespaces, is a 503 offline).
    lists_promptly::<ConfigMap>(client()).await;
    assert!(
        proxy.connections().evicted() > 0,
        "room was made by eviction"
    );
    drop(held);
    edge.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_without_a_request_are_closed_after_the_timeouts() {
    let pki = Pki::new();
    let cloud = e2e::cloud_with(&pki, Desired::new(), Ports::default(), short_timeouts).await;
    let api = cloud.running.api().unwrap();
    let tls = connector(api.ca_pem());
    let localhost = Ipv4Addr::LOCALHOST;

    // A connection that finished the TLS handshake and never sends a request.
    let mut silent = handshake(&tls, connect_from(localhost, api.addr()).await.unwrap())
        .await
        .unwrap();
    let started = Instant::now();
    let mut buf = Vec::new();
    closed_by_server(&mut silent, &mut buf).await;
    assert!(started.elapsed() >= SHORT / 2, "closed too early");

    // A keep-alive connection after its first request.
    let mut kept = handshake(&tls, connect_from(localhost, api.addr()).await.unwrap())
        .await
        .unwrap();
    let token = api.token();
    let request = format!(
        "GET /version HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {token}\r\n\r\n"
    );
    kept.write_all(request.as_bytes()).await.unwrap();
    let mut response = Vec::new();
    closed_by_server(&mut kept, &mut response).await;
    let response = String::from_utf8_lossy(&response);
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    assert!(api.connections().timed_out() >= 2);
    cloud.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_with_no_events_outlives_the_idle_timeout() {
    let pki = Pki::new();
    let cloud = e2e::cloud_with(&pki, Desired::new(), Ports::default(), short_timeouts).await;
    let configmaps: Api<ConfigMap> = Api::namespaced(cloud.kube().await, "default");
    let selector = "watch=idle";
    let listed = configmaps
        .list(&ListParams::default().labels(selector))
        .await
        .unwrap();
    let version = listed.metadata.resource_version.unwrap();
    let params = WatchParams::default().labels(selector).disable_bookmarks();
    let mut events = configmaps.watch(&params, &version).await.unwrap().boxed();

    let quiet = tokio::time::timeout(SHORT * 3, events.try_next()).await;
    assert!(quiet.is_err(), "the watch ended or sent {quiet:?}");

    let writer: Api<ConfigMap> = Api::namespaced(cloud.kube().await, "default");
    let cm: ConfigMap = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "late", "labels": {"watch": "idle"}},
    }))
    .unwrap();
    writer.create(&PostParams::default(), &cm).await.unwrap();
    let event = tokio::time::timeout(WAIT, events.try_next())
        .await
        .expect("the event arrives on the old watch")
        .unwrap();
    assert!(matches!(event, Some(WatchEvent::Added(_))), "{event:?}");
    cloud.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_request_headers_are_served() {
    let pki = Pki::new();
    let cloud = e2e::cloud(&pki, Desired::new(), Ports::default()).await;
    let mut request = http::Request::get("/api/v1/namespaces");
    for i in 0..200 {
        request = request.header(format!("x-extra-{i}"), "value");
    }
    let text = cloud
        .kube()
        .await
        .request_text(request.body(Vec::new()).unwrap())
        .await
        .expect("200 headers are served");
    assert!(text.contains("NamespaceList"), "{text}");
    cloud.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_four_mebibyte_body_over_tls_gets_a_413_status() {
    let pki = Pki::new();
    let cloud = e2e::cloud(&pki, Desired::new(), Ports::default()).await;
    let api = cloud.running.api().unwrap();
    let big = serde_json::json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "big"},
        "data": {"blob": "x".repeat(4 << 20)},
    });
    let body = serde_json::to_vec(&big).unwrap();

    // As the kube crate sends it (reading the answer while it writes).
    let request = http::Request::post("/api/v1/namespaces/default/configmaps")
        .header("content-type", "application/json")
        .body(body.clone())
        .unwrap();
    match cloud.kube().await.request_text(request).await {
        Err(kube::Error::Api(status)) => assert_eq!(status.code, 413, "{status:?}"),
        other => panic!("expected a 413 Status, got {other:?}"),
    }

    // Over HTTP/2, as curl sends it (an unread body reset the stream: curl exit 92).
    let dir = tempfile::tempdir().unwrap();
    let (ca, file) = (dir.path().join("ca.crt"), dir.path().join("big.json"));
    std::fs::write(&ca, api.ca_pem()).unwrap();
    std::fs::write(&file, &body).unwrap();
    let url = format!(
        "https://localhost:{}/api/v1/namespaces/default/configmaps",
        api.addr().port()
    );
    let out = tokio::process::Command::new("curl")
        .args(["-sS", "--http2", "--cacert"])
        .arg(&ca)
        .args(["-H", &format!("Authorization: Bearer {}", api.token())])
        .args(["-H", "Content-Type: application/json", "--data-binary"])
        .arg(format!("@{}", file.display()))
        .arg(url)
        .output()
        .await
        .expect("curl is installed");
    let answer = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "curl: {stderr}");
    assert!(answer.contains(r#""code":413"#), "{answer}");
    cloud.stop().await;
}

/// How long the slow-body test gives a request body.
const BODY_TIMEOUT: Duration = Duration::from_secs(3);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_bodies_of_one_user_do_not_lock_out_the_admin_or_a_node_and_get_408() {
    let _one_at_a_time = FLOODING.lock().await;
    let pki = Pki::new();
    let cloud = e2e::cloud_with(&pki, Desired::new(), Ports::default(), |c| {
        let api = &mut c.modules.api_server;
        api.request_body_timeout = BODY_TIMEOUT;
        api.max_connections = 300;
        api.max_unauthenticated_connections = 64;
    })
    .await;
    let api = cloud.running.api().unwrap();
    let token = no_role_token(&cloud).await;
    let tls = connector(api.ca_pem());

    // Every connection the server takes carries a request whose body comes a byte at a time.
    let slow: Vec<_> = futures::stream::iter(0..300)
        .map(|_| slow_body(api.addr(), &tls, &token))
        .buffer_unordered(32)
        .filter_map(|c| async move { c })
        .collect()
        .await;
    let started = Instant::now();
    lists_promptly::<Namespace>(cloud.kube().await).await;
    let node = impersonating(&cloud, "system:node:edge-1", "system:nodes").await;
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(node);
    let got = tokio::time::timeout(SERVED_WITHIN, nodes.get_opt("edge-1"))
        .await
        .expect("the node is answered promptly");
    assert!(got.is_ok(), "the node's read is served: {got:?}");

    // The slow bodies that were taken get a 408 Status once the body timeout passed, those over
    // a share a 429 (a connection evicted before its request was read gets nothing).
    let answers = futures::future::join_all(slow.into_iter().map(answer_of)).await;
    let timed_out = answers
        .iter()
        .filter(|a| a.starts_with("HTTP/1.1 408"))
        .count();
    assert!(timed_out > 0, "{:?}", answers.first());
    let odd: Vec<&str> = answers
        .iter()
        .filter(|a| !a.is_empty())
        .filter(|a| !a.starts_with("HTTP/1.1 408") && !a.starts_with("HTTP/1.1 429"))
        .map(|a| &a[..a.len().min(60)])
        .collect();
    assert!(odd.is_empty(), "every slow request is answered: {odd:?}");
    assert!(started.elapsed() < BODY_TIMEOUT + WAIT);
    assert!(api.connections().body_timeouts() > 0);
    assert!(
        api.connections().over_share() > 0,
        "the user's requests over its share were refused"
    );
    cloud.stop().await;
}

/// A token of service account `default/idle`, which has no roles.
async fn no_role_token(cloud: &e2e::Cloud) -> String {
    use k8s_openapi::api::authentication::v1::TokenRequest;
    use k8s_openapi::api::core::v1::ServiceAccount;
    let accounts: Api<ServiceAccount> = Api::namespaced(cloud.kube().await, "default");
    let pp = PostParams::default();
    let account = serde_json::from_value(serde_json::json!({"metadata": {"name": "idle"}}));
    accounts.create(&pp, &account.unwrap()).await.unwrap();
    let request: TokenRequest =
        serde_json::from_value(serde_json::json!({"spec": {"audiences": []}})).unwrap();
    let issued = accounts.create_token_request("idle", &pp, &request);
    issued.await.unwrap().status.expect("a token").token
}

/// The admin's client acting as `user` in `group` (as the admin may).
async fn impersonating(cloud: &e2e::Cloud, user: &str, group: &str) -> kube::Client {
    let path = cloud.running.kubeconfig().unwrap();
    let kubeconfig = kube::config::Kubeconfig::read_from(path).unwrap();
    let mut config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .unwrap();
    config.auth_info.impersonate = Some(user.to_owned());
    config.auth_info.impersonate_groups = Some(vec![group.to_owned()]);
    kube::Client::try_from(config).unwrap()
}

/// A TLS connection with a create whose 1000-byte body stops after its first byte.
async fn slow_body(
    to: SocketAddr,
    tls: &TlsConnector,
    token: &str,
) -> Option<TlsStream<TcpStream>> {
    let tcp = tokio::time::timeout(FLOOD_STEP, connect_from(Ipv4Addr::LOCALHOST, to));
    let mut stream = handshake(tls, tcp.await.ok()?.ok()?).await.ok()?;
    let head = format!(
        "POST /api/v1/namespaces/default/configmaps HTTP/1.1\r\nHost: localhost\r\n\
         Authorization: Bearer {token}\r\nContent-Type: application/json\r\n\
         Content-Length: 1000\r\n\r\n{{"
    );
    stream.write_all(head.as_bytes()).await.ok()?;
    stream.flush().await.ok()?;
    Some(stream)
}

/// What the server answered on `stream` before it closed it (empty if it closed it silently).
async fn answer_of(mut stream: TlsStream<TcpStream>) -> String {
    let mut buf = Vec::new();
    let _ = tokio::time::timeout(BODY_TIMEOUT + WAIT, stream.read_to_end(&mut buf)).await;
    String::from_utf8_lossy(&buf).into_owned()
}

/// `count` loopback source addresses from 127.0.0.2 (127.0.0.1 is the real client's).
fn sources(count: u8) -> Vec<Ipv4Addr> {
    (2..2 + count)
        .map(|i| Ipv4Addr::new(127, 0, 0, i))
        .collect()
}

/// Opens `per_source` connections from each source that send no request; with `tls`, three
/// in five finish the TLS handshake (those first: a server without limits accepts them and
/// never lets them go). 64 are opened at a time. Connections the server refuses or closes are
/// left as they are.
async fn flood(
    to: SocketAddr,
    sources: &[Ipv4Addr],
    per_source: usize,
    tls: Option<&TlsConnector>,
) -> Vec<Idle> {
    let with_tls = if tls.is_some() { per_source * 3 / 5 } else { 0 };
    let mut plan = Vec::new();
    for (handshake, count) in [(true, with_tls), (false, per_source - with_tls)] {
        for source in sources {
            plan.extend(std::iter::repeat_n((*source, handshake), count));
        }
    }
    futures::stream::iter(plan)
        .map(|(source, handshake)| open_idle(source, to, tls.filter(|_| handshake)))
        .buffer_unordered(64)
        .filter_map(|idle| async move { idle })
        .collect()
        .await
}

/// One idle connection, if the server takes it within [`FLOOD_STEP`].
async fn open_idle(source: Ipv4Addr, to: SocketAddr, tls: Option<&TlsConnector>) -> Option<Idle> {
    let connect = tokio::time::timeout(FLOOD_STEP, connect_from(source, to));
    let tcp = connect.await.ok()?.ok()?;
    let Some(tls) = tls else {
        return Some(Idle::Tcp(tcp));
    };
    let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
    let stream = tokio::time::timeout(FLOOD_STEP, tls.connect(name, tcp));
    Some(Idle::Tls(Box::new(stream.await.ok()?.ok()?)))
}

async fn connect_from(source: Ipv4Addr, to: SocketAddr) -> std::io::Result<TcpStream> {
    let socket = TcpSocket::new_v4()?;
    socket.bind(SocketAddr::new(source.into(), 0))?;
    socket.connect(to).await
}

fn connector(ca_pem: &str) -> TlsConnector {
    let config = pki::client_config(ca_pem, None, &[b"http/1.1"]).unwrap();
    TlsConnector::from(Arc::new(config))
}

async fn handshake(tls: &TlsConnector, tcp: TcpStream) -> std::io::Result<TlsStream<TcpStream>> {
    let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
    tokio::time::timeout(WAIT, tls.connect(name, tcp))
        .await
        .map_err(|_| std::io::ErrorKind::TimedOut)?
}

/// Reads (into `buf`) until the server closes the connection.
async fn closed_by_server(stream: &mut (impl AsyncRead + Unpin), buf: &mut Vec<u8>) {
    let read = tokio::time::timeout(WAIT, stream.read_to_end(buf)).await;
    assert!(read.is_ok(), "the server kept the connection open");
}

async fn lists_promptly<K>(client: kube::Client)
where
    K: kube::Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let started = Instant::now();
    let objects: Api<K> = Api::all(client);
    let listed = tokio::time::timeout(SERVED_WITHIN, objects.list(&ListParams::default()))
        .await
        .unwrap_or_else(|_| panic!("no answer within {SERVED_WITHIN:?}"));
    listed.expect("listed");
    eprintln!("answered in {:?}", started.elapsed());
}

fn short_timeouts(config: &mut cloudcore::Config) {
    let api = &mut config.modules.api_server;
    api.read_header_timeout = SHORT;
    api.idle_timeout = SHORT;
}

/// An edgecore with lwproxy on an ephemeral port and no link to a cloud.
fn lwproxy_only(dir: &std::path::Path) -> edgecore::Config {
    let mut config = edgecore::Config::default();
    config.common_config.monitor_server.enable = false;
    config.common_config.shutdown_grace_period = Duration::from_secs(5);
    config.database.data_source = dir.join("edge.db");
    config.modules.edge_hub.enable = false;
    config.modules.lw_proxy.server = ([127, 0, 0, 1], 0).into();
    config
}
