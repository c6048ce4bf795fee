//! edgecore runs edgedns when `modules.edgeDNS` is enabled: a Service in the edge store is
//! answered on the address edgecore reports, with no cloud.

use std::time::Duration;

use hickory_proto::op::{Message, Query, ResponseCode};
use hickory_proto::rr::{Name, RecordType};
use objstore::ObjKey;
use serde_json::json;
use tokio::net::UdpSocket;
use tokio_util::sync::CancellationToken;

/// Asks `server` for the A records of `name`; the answer's code and addresses.
async fn ask(server: std::net::SocketAddr, name: &str) -> (ResponseCode, Vec<String>) {
    let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let mut query = Message::new();
    query.set_id(7).set_recursion_desired(true);
    query.add_query(Query::query(Name::from_ascii(name).unwrap(), RecordType::A));
    socket
        .send_to(&query.to_vec().unwrap(), server)
        .await
        .unwrap();
    let mut buf = vec![0; 4096];
    let n = tokio::time::timeout(Duration::from_secs(2), socket.recv(&mut buf))
        .await
        .expect("an answer within 2s")
        .unwrap();
    let answer = Message::from_vec(&buf[..n]).unwrap();
    let ips = answer
        .answers()
        .iter()
        .map(|r| r.data().to_string())
        .collect();
    (answer.response_code(), ips)
}

#[tokio::test]
async fn edgecore_answers_cluster_names_from_its_store_when_edge_dns_is_on() {
    let dir = tempfile::tempdir().unwrap();
    let silent = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let mut config = edgecore::Config::default();
    config.common_config.monitor_server.enable = false;
    config.database.data_source = dir.path().join("edge.db");
    config.modules.edge_hub.enable = false;
    config.modules.lw_proxy.enable = false;
    config.modules.edge_dns.enable = true;
    config.modules.edge_dns.listen_address = "127.0.0.1:0".parse().unwrap();
    config.modules.edge_dns.upstreams = vec![silent.local_addr().unwrap()];
    let shutdown = CancellationToken::new();
    let running = edgecore::start(config, shutdown.clone()).await.unwrap();
    let server = running.dns().expect("edgeDNS is enabled").udp_addr();

    let svc = json!({ "apiVersion": "v1", "kind": "Service",
        "metadata": { "namespace": "default", "name": "redis" },
        "spec": { "clusterIP": "10.96.0.10" } });
    let key = ObjKey::new("services", "default", "redis");
    running.meta().put_local(key, svc, None).await.unwrap();
    let name = "redis.default.svc.cluster.local.";
    testkit::eventually(
        "the Service is answered",
        Duration::from_secs(5),
        || async {
            ask(server, name).await == (ResponseCode::NoError, vec!["10.96.0.10".to_owned()])
        },
    )
    .await;
    let (code, _) = ask(server, "nope.default.svc.cluster.local.").await;
    assert_eq!(code, ResponseCode::NXDomain);

    shutdown.cancel();
    let stopped = tokio::time::timeout(Duration::from_secs(10), daemon::Core::from(running).stop());
    stopped.await.expect("edgecore stops");
    UdpSocket::bind(server)
        .await
        .expect("the DNS address is free again after stop");
}
