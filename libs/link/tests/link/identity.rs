//! Mutual TLS: the node identity comes from the client certificate, and both ends refuse
//! certificates they do not trust.

use std::time::Duration;

use link::{ClientTls, Conn, LinkError, Transport};
use pki::Ca;

use crate::common::{self, Certs, Pair, accept_one, both_transports, listen, raw_quic, raw_ws};

both_transports!(
    the_server_reads_the_node_name_from_the_client_certificate,
    a_client_without_a_certificate_is_refused,
    a_client_certificate_from_another_ca_is_refused,
    the_client_refuses_a_server_certificate_from_another_ca,
    the_client_refuses_a_server_certificate_for_another_name,
);

async fn the_server_reads_the_node_name_from_the_client_certificate(transport: Transport) {
    let pair = Pair::new(transport).await;
    assert_eq!(pair.server.peer_node(), Some("edge-1"));
    assert_eq!(pair.client.peer_node(), None);
    assert_eq!(pair.server.transport(), transport);
    assert_eq!(pair.client.remote_addr(), pair.listener.local_addr());
    assert!(pair.server.remote_addr().ip().is_loopback());
}

async fn a_client_without_a_certificate_is_refused(transport: Transport) {
    let certs = Certs::new();
    let listener = listen(transport, &certs, common::limits()).await;
    let addr = listener.local_addr();
    let client = async {
        match transport {
            Transport::WebSocket => {
                let config = certs.raw_client_config(false, &[]);
                raw_ws(addr, config).await.map(|_| ())
            }
            Transport::Quic => {
                let config = certs.raw_client_config(false, &[link::QUIC_ALPN]);
                let mut raw = raw_quic(addr, config, link::QUIC_PREAMBLE).await?;
                let mut preamble = [0; 8];
                raw.recv.read_exact(&mut preamble).await?;
                Ok(())
            }
        }
    };
    let (server, client) = tokio::join!(accept_one(&listener), client);
    assert_refused(server);
    assert!(
        client.is_err(),
        "the client got through without a certificate"
    );
}

async fn a_client_certificate_from_another_ca_is_refused(transport: Transport) {
    let certs = Certs::new();
    let stranger = Ca::generate("another-ca", Duration::from_secs(3600)).unwrap();
    let impostor = stranger
        .issue_node("edge-1", Duration::from_secs(3600))
        .unwrap();
    let tls = ClientTls {
        cert_pem: impostor.cert_pem,
        key_pem: impostor.key_pem,
        ..certs.client_tls()
    };
    let (server, client) = handshake(transport, &certs, &tls).await;
    assert_refused(server);
    assert!(
        client.is_err(),
        "the client got through with a stranger's certificate"
    );
}

async fn the_client_refuses_a_server_certificate_from_another_ca(transport: Transport) {
    let certs = Certs::new();
    let stranger = Ca::generate("another-ca", Duration::from_secs(3600)).unwrap();
    let tls = ClientTls {
        ca_pem: stranger.cert_pem().to_string(),
        ..certs.client_tls()
    };
    let (server, client) = handshake(transport, &certs, &tls).await;
    assert_refused(client);
    assert!(server.is_err());
}

async fn the_client_refuses_a_server_certificate_for_another_name(transport: Transport) {
    let certs = Certs::new();
    let tls = ClientTls {
        server_name: "cloud.elsewhere.example".into(),
        ..certs.client_tls()
    };
    let (server, client) = handshake(transport, &certs, &tls).await;
    assert_refused(client);
    assert!(server.is_err());
}

/// Runs both ends of one handshake. A client `Conn` means the server's preamble or upgrade
/// response arrived, so the server really accepted it.
async fn handshake(
    transport: Transport,
    certs: &Certs,
    tls: &ClientTls,
) -> (Result<Conn, LinkError>, Result<Conn, LinkError>) {
    let listener = listen(transport, certs, common::limits()).await;
    let addr = listener.local_addr();
    tokio::join!(
        accept_one(&listener),
        link::connect(transport, addr, tls, common::limits()),
    )
}

fn assert_refused(result: Result<Conn, LinkError>) {
    match result {
        Err(LinkError::Tls(_) | LinkError::Quic(_)) => {}
        Err(other) => panic!("refused for an unexpected reason: {other:?}"),
        Ok(_) => panic!("the handshake succeeded"),
    }
}
