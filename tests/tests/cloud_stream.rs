//! cloudcore's kubelet-compatible endpoint (`modules.cloudStream`) driven as a real cluster's
//! kube-apiserver drives a kubelet: cloudcore runs in real-cluster mode (its kubeconfig is another
//! cloudcore's embedded control plane, standing in for the cluster), an edgecore with edged runs a
//! pod on a private containerd, and the test is kube-apiserver: HTTPS with a kubelet client
//! certificate from the configured CA, `Host: <node address>:<port>`, the kubelet's URL shapes
//! (containerLogs, stats/summary, exec upgraded to SPDY/3.1 and to WebSocket), also inside an
//! egress selector's `HTTPConnect` tunnel. A certificate from
//! another CA, or none, fails the handshake; a common name not allowed is a 403; an address no node
//! has is a 404 naming it; a node that is not connected is a 503 naming it, at once.
//! Needs root, containerd, runc, the CNI plugins and busybox-static, as the edged tests do.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use e2e::edged_site::{busybox, edged_config, pod, status};
use e2e::{Pki, Ports};
use futures::StreamExt;
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, PostParams};
use rustls::pki_types::ServerName;
use serde_json::{Value, json};
use testkit::containerd::Containerd;
use testkit::eventually;
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

const WAIT: Duration = Duration::from_secs(60);
const HOUR: Duration = Duration::from_secs(3600);
const NODE: &str = "stream-edge";
/// kubeadm's common name for kube-apiserver's kubelet client certificate.
const KUBELET_CLIENT: &str = "kube-apiserver-kubelet-client";

/// A client certificate `ca` signs for `cn`, as kubeadm makes kube-apiserver's.
fn client_cert(ca: &pki::Ca, cn: &str) -> pki::CertifiedKey {
    let (csr, key_pem) = pki::new_request(cn, Some("system:masters"), &[]).unwrap();
    let usages = [pki::Usage::DigitalSignature, pki::Usage::ClientAuth];
    let cert_pem = ca.sign_request(&csr, &usages, HOUR).unwrap();
    pki::CertifiedKey { cert_pem, key_pem }
}

/// TLS towards cloudStream (whose certificate cloudhub's CA issued), presenting `identity`.
fn connector(server_ca: &Path, identity: Option<&pki::CertifiedKey>) -> TlsConnector {
    let ca = std::fs::read_to_string(server_ca).unwrap();
    let identity = identity.map(|c| (c.cert_pem.as_str(), c.key_pem.as_str()));
    let config = pki::client_config(&ca, identity, &[b"http/1.1"]).unwrap();
    TlsConnector::from(Arc::new(config))
}

/// kube-apiserver's side of one kubelet request: its TLS identity and where it connects.
struct Kubelet {
    tls: TlsConnector,
    addr: SocketAddr,
}

/// An answer: status, headers, and the body unless the request was upgraded.
type Answer = (u16, http::HeaderMap, String);

impl Kubelet {
    async fn connect(&self) -> anyhow::Result<tokio_rustls::client::TlsStream<TcpStream>> {
        let tcp = TcpStream::connect(self.addr).await?;
        let server = ServerName::try_from("127.0.0.1").unwrap();
        Ok(self.tls.connect(server, tcp).await?)
    }

    /// `GET path` with `host` as `Host` and the `extra` headers, over a new connection.
    async fn get(&self, host: &str, path: &str, extra: &[(&str, &str)]) -> anyhow::Result<Answer> {
        let tls = self.connect().await?;
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls)).await?;
        tokio::spawn(conn.with_upgrades());
        let mut request = hyper::Request::get(path).header("host", host);
        for (name, value) in extra {
            request = request.header(*name, *value);
        }
        let answer = sender
            .send_request(request.body(Empty::<Bytes>::new())?)
            .await?;
        let (status, headers) = (answer.status().as_u16(), answer.headers().clone());
        if status == 101 {
            return Ok((status, headers, String::new()));
        }
        let body = answer.into_body().collect().await?.to_bytes();
        Ok((status, headers, String::from_utf8_lossy(&body).into_owned()))
    }

    /// `GET path` inside an egress selector's `HTTPConnect` tunnel: `CONNECT target`, then TLS
    /// to the endpoint as the kubelet inside it, with the same certificate.
    async fn get_through_connect(&self, target: &str, path: &str) -> anyhow::Result<(u16, String)> {
        let tls = self.connect().await?;
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls)).await?;
        tokio::spawn(conn.with_upgrades());
        let connect = hyper::Request::connect(target)
            .header("host", target)
            .body(Empty::<Bytes>::new())?;
        let mut answer = sender.send_request(connect).await?;
        if answer.status() != 200 {
            let body = answer.into_body().collect().await?.to_bytes();
            return Ok((0, String::from_utf8_lossy(&body).into_owned()));
        }
        let tunnel = TokioIo::new(hyper::upgrade::on(&mut answer).await?);
        let server = ServerName::try_from("127.0.0.1").unwrap();
        let inner = self.tls.connect(server, tunnel).await?;
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(inner)).await?;
        tokio::spawn(conn);
        let request = hyper::Request::get(path)
            .header("host", target)
            .body(Empty::<Bytes>::new())?;
        let answer = sender.send_request(request).await?;
        let status = answer.status().as_u16();
        let body = answer.into_body().collect().await?.to_bytes();
        Ok((status, String::from_utf8_lossy(&body).into_owned()))
    }

    /// An exec over WebSocket offering `v5.channel.k8s.io` then `v4.channel.k8s.io`, as kubectl
    /// 1.32 does: the protocol agreed on, stdout, and the status on channel 3.
    async fn ws_exec(&self, host: &str, path: &str) -> anyhow::Result<(String, String, Value)> {
        let tls = self.connect().await?;
        let mut request = format!("wss://{host}{path}").into_client_request()?;
        request.headers_mut().insert(
            "sec-websocket-protocol",
            "v5.channel.k8s.io, v4.channel.k8s.io".parse()?,
        );
        let (mut ws, answer) = tokio_tungstenite::client_async(request, tls).await?;
        let protocol = answer
            .headers()
            .get("sec-websocket-protocol")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        let (mut stdout, mut status) = (Vec::new(), Vec::new());
        while let Some(message) = ws.next().await {
            match message {
                Ok(Message::Binary(data)) => match data.split_first() {
                    Some((1, out)) => stdout.extend_from_slice(out),
                    Some((3, json)) => status.extend_from_slice(json),
                    _ => {}
                },
                Ok(Message::Close(_)) => break,
                Ok(_) => {}
                // The server may close without the closing handshake, after the status.
                Err(_) if !status.is_empty() => break,
                Err(e) => return Err(e.into()),
            }
        }
        let status = serde_json::from_slice(&status)?;
        Ok((protocol, String::from_utf8(stdout)?, status))
    }
}

/// Starts pod `web` (a ticking log) on the node and waits until it runs; returns its uid.
async fn web_pod(pods: &Api<Pod>) -> String {
    let script = "i=0; while true; do echo tick-$i; i=$((i+1)); sleep 0.2; done";
    let p = pod("web", NODE, json!({"containers": [busybox("web", script)]}));
    let created = pods.create(&PostParams::default(), &p).await.unwrap();
    eventually("the pod is Running", WAIT, || async {
        let st = status(pods, "web").await;
        st["phase"] == "Running" && st["containerStatuses"][0]["ready"] == true
    })
    .await;
    created.metadata.uid.unwrap()
}

/// The node's InternalIP in the cluster, once its status reports one.
async fn internal_ip(nodes: &Api<Node>) -> String {
    let ip = || async {
        let node = nodes.get_opt(NODE).await.ok().flatten()?;
        let addresses = node.status?.addresses?;
        let ip = addresses.into_iter().find(|a| a.type_ == "InternalIP")?;
        Some(ip.address)
    };
    eventually("the node reports its InternalIP", WAIT, || async {
        ip().await.is_some()
    })
    .await;
    ip().await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_apiserver_reaches_an_edge_pod_through_cloud_stream_with_its_kubelet_client_certificate()
 {
    if let Err(why) = Containerd::available() {
        panic!("edged tests need a private containerd: {why}");
    }
    let containerd = Containerd::start().await.expect("containerd starts");
    // The "real cluster": another cloudcore's embedded control plane.
    let cluster_pki = Pki::new();
    let cluster = e2e::k8s_cloud(&cluster_pki, Ports::default()).await;
    let cluster_kubeconfig = cluster.running.kubeconfig().unwrap().to_path_buf();

    // kube-apiserver's kubelet client CA, written where cloudStream reads it.
    let pki = Pki::new();
    let kubelet_ca = pki::Ca::generate("kubernetes", HOUR).unwrap();
    let client_ca_file = pki.path("kubernetes/ca.crt");
    pki::write_pem(&client_ca_file, kubelet_ca.cert_pem()).unwrap();
    let cloud = e2e::k8s_cloud_with(&pki, Ports::default(), |c| {
        c.kube_api_config.kube_config = cluster_kubeconfig.clone();
        // The cluster's own cloudcore runs the platform controllers already.
        c.modules.sites.enable = false;
        let s = &mut c.modules.cloud_stream;
        s.enable = true;
        s.address = [127, 0, 0, 1].into();
        s.stream_port = 0;
        s.tls_stream_cert_file = pki.path("cloud/stream.crt");
        s.tls_stream_private_key_file = pki.path("cloud/stream.key");
        s.client_ca_file = client_ca_file.clone();
        s.allowed_common_names = vec![KUBELET_CLIENT.into()];
    })
    .await;
    assert!(
        cloud.running.api().is_none(),
        "cloudcore runs in real-cluster mode"
    );
    let stream_addr = cloud.running.stream_addr().expect("cloudStream listens");
    let dir = tempfile::tempdir().unwrap();
    let edge = e2e::edge(edged_config(&pki, &cloud, NODE, dir.path(), &containerd)).await;

    let kube = cluster.kube().await;
    let pods: Api<Pod> = Api::namespaced(kube.clone(), "default");
    let uid = web_pod(&pods).await;
    let host = format!("{}:10250", internal_ip(&Api::all(kube)).await);
    let server_ca = pki.path("ca/rootCA.crt");
    let apiserver = Kubelet {
        tls: connector(&server_ca, Some(&client_cert(&kubelet_ca, KUBELET_CLIENT))),
        addr: stream_addr,
    };

    // containerLogs, as kube-apiserver asks for `kubectl logs --tail=2`.
    let logs = "/containerLogs/default/web/web?tailLines=2";
    eventually("two ticks are logged", WAIT, || async {
        let (code, _, body) = apiserver.get(&host, logs, &[]).await.unwrap();
        code == 200 && body.lines().count() == 2 && body.lines().all(|l| l.starts_with("tick-"))
    })
    .await;
    // The node's own endpoints pass through as well.
    let (code, _, body) = apiserver.get(&host, "/stats/summary", &[]).await.unwrap();
    assert_eq!(code, 200, "{body}");
    let summary: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(summary["node"]["nodeName"], NODE, "{body}");

    // exec upgraded to SPDY/3.1 (kubectl before 1.30, and kube-apiserver towards kubelets).
    let exec = format!("/exec/default/web/{uid}/web?command=true&stdout=1");
    let spdy = [
        ("connection", "Upgrade"),
        ("upgrade", "SPDY/3.1"),
        ("x-stream-protocol-version", "v4.channel.k8s.io"),
    ];
    let (code, headers, body) = apiserver.get(&host, &exec, &spdy).await.unwrap();
    assert_eq!(code, 101, "{body}");
    assert_eq!(headers["upgrade"], "SPDY/3.1");
    assert_eq!(headers["x-stream-protocol-version"], "v4.channel.k8s.io");

    // exec over WebSocket: output and exit status.
    let script = "command=sh&command=-c&command=echo%20hi%3B%20exit%203";
    let path = format!("/exec/default/web/web?{script}&stdout=1&stderr=1");
    let (protocol, stdout, status) = apiserver.ws_exec(&host, &path).await.unwrap();
    assert!(protocol.ends_with(".channel.k8s.io"), "{protocol}");
    assert_eq!(stdout, "hi\n");
    assert_eq!(status["reason"], "NonZeroExitCode", "{status}");
    assert_eq!(status["details"]["causes"][0]["message"], "3", "{status}");

    // An egress selector's HTTPConnect tunnel to the node's address: cloudcore is the kubelet
    // inside it.
    let (code, body) = apiserver.get_through_connect(&host, logs).await.unwrap();
    assert_eq!(code, 200, "{body}");
    let ticks = body.lines().filter(|l| l.starts_with("tick-")).count();
    assert_eq!(ticks, 2, "{body}");

    // Only kube-apiserver's certificate gets anything.
    let other_ca = pki::Ca::generate("another", HOUR).unwrap();
    for (what, identity) in [
        (
            "a certificate from another CA",
            Some(client_cert(&other_ca, KUBELET_CLIENT)),
        ),
        ("no certificate", None),
    ] {
        let stranger = Kubelet {
            tls: connector(&server_ca, identity.as_ref()),
            addr: stream_addr,
        };
        let refused = stranger.get(&host, logs, &[]).await;
        assert!(refused.is_err(), "{what} was answered: {refused:?}");
    }
    let not_listed = Kubelet {
        tls: connector(&server_ca, Some(&client_cert(&kubelet_ca, "someone-else"))),
        addr: stream_addr,
    };
    let (code, _, body) = not_listed.get(&host, logs, &[]).await.unwrap();
    assert_eq!(code, 403, "{body}");
    assert!(body.contains("someone-else"), "{body}");

    // An address no node has.
    let (code, _, body) = apiserver.get("192.0.2.77:10250", logs, &[]).await.unwrap();
    assert_eq!(code, 404, "{body}");
    assert!(body.contains("192.0.2.77"), "{body}");

    // The node gone: refused at once, by name.
    edge.stop().await;
    eventually("cloudhub sees the node gone", WAIT, || async {
        cloud.hub().node(NODE).is_some_and(|n| !n.connected)
    })
    .await;
    let started = Instant::now();
    let (code, _, body) = apiserver.get(&host, logs, &[]).await.unwrap();
    assert!(started.elapsed() < Duration::from_secs(2));
    assert_eq!(code, 503, "{body}");
    assert!(
        body.contains(NODE) && body.contains("not connected"),
        "{body}"
    );
    cloud.stop().await;
    cluster.stop().await;
}
