//! A native kubelet behind the tunnel (`modules.edgeStream`, edged off): the cloud's kubelet
//! streams reach a stand-in kubelet (HTTPS on loopback, requiring a client certificate, its own
//! serving certificate pinned) through cloudcore's `nodes/<n>/proxy/...` and through an
//! exec-style upgrade of the embedded API; a kubelet that is gone is a 502 naming the endpoint.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use e2e::{Pki, Ports, edge, edge_config, k8s_cloud};
use edgecore::edgestream::KubeletEndpoint;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, PostParams};
use kube::client::ConfigExt as _;
use rustls::pki_types::ServerName;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const HOUR: Duration = Duration::from_secs(3600);
const WAIT: Duration = Duration::from_secs(30);
const NODE: &str = "edge-native";
/// The common name of the certificate edgecore presents to the kubelet.
const EDGECORE_CN: &str = "kubeedge-edgestream";

/// A stand-in kubelet on 127.0.0.1: HTTPS requiring a client certificate `client_ca` signed.
/// A plain request is answered `200` with `<method> <path and query> as <client CN>`; an
/// upgrade is answered `101` (the path in `x-seen-path`) and then echoes what it reads.
async fn stand_in_kubelet(
    serving: &pki::CertifiedKey,
    client_ca: &str,
) -> (SocketAddr, tokio::task::JoinHandle<()>) {
    let tls = pki::server_config(
        Some(client_ca),
        &serving.cert_pem,
        &serving.key_pem,
        &[b"http/1.1"],
    )
    .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(tls));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let task = tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                return;
            };
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let cn = tls
                    .get_ref()
                    .1
                    .peer_certificates()
                    .and_then(|certs| pki::subject(certs.first()?))
                    .map(|(cn, _)| cn)
                    .unwrap_or_default();
                let service = hyper::service::service_fn(move |req| answer(req, cn.clone()));
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(tls), service)
                    .with_upgrades()
                    .await;
            });
        }
    });
    (addr, task)
}

async fn answer(
    mut req: Request<Incoming>,
    cn: String,
) -> Result<Response<Full<Bytes>>, std::convert::Infallible> {
    let path = req
        .uri()
        .path_and_query()
        .map_or("/", |p| p.as_str())
        .to_owned();
    let Some(upgrade) = req.headers().get("upgrade").cloned() else {
        let text = format!("{} {path} as {cn}", req.method());
        return Ok(Response::new(Full::from(text)));
    };
    let upgraded = hyper::upgrade::on(&mut req);
    tokio::spawn(async move {
        let Ok(upgraded) = upgraded.await else { return };
        let mut io = TokioIo::new(upgraded);
        let mut buf = [0u8; 1024];
        while let Ok(n @ 1..) = io.read(&mut buf).await {
            if io.write_all(&buf[..n]).await.is_err() {
                return;
            }
        }
    });
    let resp = Response::builder()
        .status(StatusCode::SWITCHING_PROTOCOLS)
        .header("connection", "Upgrade")
        .header("upgrade", upgrade)
        .header("x-seen-path", path)
        .body(Full::default())
        .unwrap();
    Ok(resp)
}

/// An exec upgrade of pod `web` through the embedded API (as kubectl sends it, over SPDY):
/// the answer's status and `x-seen-path`, and what the upgraded stream echoes of `ping`.
async fn exec_through_the_api(kubeconfig: &std::path::Path) -> (u16, String, Vec<u8>) {
    let raw: serde_json::Value =
        serde_yaml_ng::from_str(&std::fs::read_to_string(kubeconfig).unwrap()).unwrap();
    let token = raw["users"][0]["user"]["token"]
        .as_str()
        .unwrap()
        .to_owned();
    let kubeconfig = kube::config::Kubeconfig::read_from(kubeconfig).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .unwrap();
    let mut tls = config.rustls_client_config().unwrap();
    tls.alpn_protocols = vec![b"http/1.1".to_vec()];
    let authority = config.cluster_url.authority().unwrap().clone();
    let tcp = TcpStream::connect(authority.as_str()).await.unwrap();
    let server = ServerName::try_from(authority.host().to_owned()).unwrap();
    let tls = tokio_rustls::TlsConnector::from(Arc::new(tls))
        .connect(server, tcp)
        .await
        .unwrap();
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
        .await
        .unwrap();
    tokio::spawn(conn.with_upgrades());
    let request = Request::post(
        "/api/v1/namespaces/default/pods/web/exec?command=cat&stdin=true&stdout=true",
    )
    .header("host", authority.as_str())
    .header("authorization", format!("Bearer {token}"))
    .header("connection", "Upgrade")
    .header("upgrade", "SPDY/3.1")
    .header("x-stream-protocol-version", "v4.channel.k8s.io")
    .body(Empty::<Bytes>::new())
    .unwrap();
    let mut answer = sender.send_request(request).await.unwrap();
    let status = answer.status().as_u16();
    let seen = answer
        .headers()
        .get("x-seen-path")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    if status != 101 {
        let body = answer.into_body().collect().await.unwrap().to_bytes();
        return (
            status,
            String::from_utf8_lossy(&body).into_owned(),
            Vec::new(),
        );
    }
    let mut io = TokioIo::new(hyper::upgrade::on(&mut answer).await.unwrap());
    io.write_all(b"ping").await.unwrap();
    let mut echoed = vec![0u8; 4];
    tokio::time::timeout(Duration::from_secs(10), io.read_exact(&mut echoed))
        .await
        .expect("the echo within 10s")
        .unwrap();
    (status, seen, echoed)
}

/// A client certificate `ca` signs for `cn`.
fn client_cert(ca: &pki::Ca, cn: &str) -> pki::CertifiedKey {
    let (csr, key_pem) = pki::new_request(cn, None, &[]).unwrap();
    let usages = [pki::Usage::DigitalSignature, pki::Usage::ClientAuth];
    let cert_pem = ca.sign_request(&csr, &usages, HOUR).unwrap();
    pki::CertifiedKey { cert_pem, key_pem }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cloud_reaches_a_native_kubelet_on_the_node_loopback_through_edge_stream() {
    let pki = Pki::new();
    // The kubelet's serving certificate holds the node's hostname only, as a self-signed
    // kubelet's does: pinned, with serverName.
    let kubelet_ca = pki::Ca::generate("edge-native-ca", HOUR).unwrap();
    let serving = kubelet_ca.issue_server(&[NODE.into()], HOUR).unwrap();
    let client_ca = pki::Ca::generate("kubelet-client-ca", HOUR).unwrap();
    let identity = client_cert(&client_ca, EDGECORE_CN);
    let (kubelet, stand_in) = stand_in_kubelet(&serving, client_ca.cert_pem()).await;
    for (rel, pem) in [
        ("kubelet/ca.crt", kubelet_ca.cert_pem()),
        ("kubelet/client.crt", &identity.cert_pem),
        ("kubelet/client.key", &identity.key_pem),
    ] {
        pki::write_pem(&pki.path(rel), pem).unwrap();
    }

    let cloud = k8s_cloud(&pki, Ports::default()).await;
    let dir = tempfile::tempdir().unwrap();
    let transport = link::Transport::WebSocket;
    let mut config = edge_config(
        &pki.node(NODE),
        cloud.addr(transport),
        transport,
        &dir.path().join("edge.db"),
    );
    let s = &mut config.modules.edge_stream;
    s.enable = true;
    s.kubelet_endpoint =
        KubeletEndpoint::try_from(format!("https://127.0.0.1:{}", kubelet.port())).unwrap();
    s.tls_ca_file = pki.path("kubelet/ca.crt");
    s.server_name = NODE.into();
    s.tls_cert_file = pki.path("kubelet/client.crt");
    s.tls_private_key_file = pki.path("kubelet/client.key");
    let edge = edge(config).await;
    edge.linked().await;

    // nodes/<n>/proxy: the path and query reach the kubelet, with edgecore's certificate.
    let client = cloud.kube().await;
    let proxied = || {
        Request::get(format!("/api/v1/nodes/{NODE}/proxy/stats/summary?only=cpu"))
            .body(Vec::new())
            .unwrap()
    };
    testkit::eventually("nodes/proxy reaches the kubelet", WAIT, || async {
        client.request_text(proxied()).await.is_ok()
    })
    .await;
    let text = client.request_text(proxied()).await.unwrap();
    assert_eq!(
        text,
        format!("GET /stats/summary?only=cpu as {EDGECORE_CN}")
    );

    // An exec-style upgrade through the embedded API: 101, then bytes both ways.
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let pod = pods
        .create(&PostParams::default(), &e2e::plain_pod("web", NODE))
        .await
        .unwrap();
    let uid = pod.metadata.uid.unwrap();
    let (status, seen, echoed) = exec_through_the_api(cloud.running.kubeconfig().unwrap()).await;
    assert_eq!(status, 101, "{seen}");
    assert!(
        seen.starts_with(&format!("/exec/default/web/{uid}/c?")),
        "{seen}"
    );
    assert_eq!(echoed, b"ping");

    // The kubelet gone: a 502 naming the endpoint.
    stand_in.abort();
    let _ = stand_in.await;
    let err = client
        .request_text(proxied())
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("modules.edgeStream.kubeletEndpoint"), "{err}");
    assert!(err.contains(&kubelet.port().to_string()), "{err}");

    edge.stop().await;
    cloud.stop().await;
}
