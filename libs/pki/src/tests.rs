use std::net::SocketAddr;
use std::sync::Arc;

use rustls::pki_types::ServerName;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::{TlsAcceptor, TlsConnector};

use super::*;

const DAY: Duration = Duration::from_secs(86400);

/// Serves one TLS connection; reports the node name of the client certificate.
async fn serve_once(
    config: rustls::ServerConfig,
) -> (
    SocketAddr,
    tokio::task::JoinHandle<Result<Option<String>, String>>,
) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let acceptor = TlsAcceptor::from(Arc::new(config));
    let task = tokio::spawn(async move {
        let (tcp, _) = listener.accept().await.unwrap();
        let mut tls = acceptor.accept(tcp).await.map_err(|e| e.to_string())?;
        let node = tls
            .get_ref()
            .1
            .peer_certificates()
            .and_then(|c| c.first())
            .and_then(node_name);
        tls.write_all(b"hi").await.map_err(|e| e.to_string())?;
        tls.shutdown().await.map_err(|e| e.to_string())?;
        Ok(node)
    });
    (addr, task)
}

async fn dial(addr: SocketAddr, config: rustls::ClientConfig, host: &str) -> Result<(), String> {
    let tcp = TcpStream::connect(addr).await.unwrap();
    let name = ServerName::try_from(host.to_string()).unwrap();
    let mut tls = TlsConnector::from(Arc::new(config))
        .connect(name, tcp)
        .await
        .map_err(|e| e.to_string())?;
    let mut buf = Vec::new();
    tls.read_to_end(&mut buf).await.map_err(|e| e.to_string())?;
    assert_eq!(buf, b"hi");
    Ok(())
}

#[tokio::test]
async fn mutual_tls_carries_the_node_identity_from_the_certificate() {
    let ca = Ca::generate("test-ca", DAY).unwrap();
    let server = ca
        .issue_server(&["127.0.0.1".into(), "cloudhub.local".into()], DAY)
        .unwrap();
    let node = ca.issue_node("edge-1", DAY).unwrap();
    let sc = server_config(Some(ca.cert_pem()), &server.cert_pem, &server.key_pem, &[]).unwrap();
    let (addr, task) = serve_once(sc).await;
    let cc = client_config(ca.cert_pem(), Some((&node.cert_pem, &node.key_pem)), &[]).unwrap();
    dial(addr, cc, "127.0.0.1").await.unwrap();
    assert_eq!(task.await.unwrap().unwrap().as_deref(), Some("edge-1"));
}

#[tokio::test]
async fn a_client_without_a_certificate_is_refused_when_mtls_is_on() {
    let ca = Ca::generate("test-ca", DAY).unwrap();
    let server = ca.issue_server(&["127.0.0.1".into()], DAY).unwrap();
    let sc = server_config(Some(ca.cert_pem()), &server.cert_pem, &server.key_pem, &[]).unwrap();
    let (addr, task) = serve_once(sc).await;
    let cc = client_config(ca.cert_pem(), None, &[]).unwrap();
    let _ = dial(addr, cc, "127.0.0.1").await;
    assert!(
        task.await.unwrap().is_err(),
        "the server accepted a client with no certificate"
    );
}

#[tokio::test]
async fn a_certificate_from_another_ca_is_refused_both_ways() {
    let ca = Ca::generate("test-ca", DAY).unwrap();
    let rogue = Ca::generate("rogue-ca", DAY).unwrap();
    let server = ca.issue_server(&["127.0.0.1".into()], DAY).unwrap();
    let rogue_node = rogue.issue_node("edge-1", DAY).unwrap();
    let sc = server_config(Some(ca.cert_pem()), &server.cert_pem, &server.key_pem, &[]).unwrap();
    let (addr, task) = serve_once(sc).await;
    let cc = client_config(
        ca.cert_pem(),
        Some((&rogue_node.cert_pem, &rogue_node.key_pem)),
        &[],
    )
    .unwrap();
    let _ = dial(addr, cc, "127.0.0.1").await;
    assert!(
        task.await.unwrap().is_err(),
        "the server accepted a node certificate of another CA"
    );

    // The edge checks the server too: a server certificate from the rogue CA is refused.
    let rogue_server = rogue.issue_server(&["127.0.0.1".into()], DAY).unwrap();
    let sc = server_config(None, &rogue_server.cert_pem, &rogue_server.key_pem, &[]).unwrap();
    let (addr, _task) = serve_once(sc).await;
    let cc = client_config(ca.cert_pem(), None, &[]).unwrap();
    assert!(dial(addr, cc, "127.0.0.1").await.is_err());
}

#[tokio::test]
async fn the_edge_checks_the_address_it_dialled() {
    let ca = Ca::generate("test-ca", DAY).unwrap();
    let server = ca.issue_server(&["cloudhub.local".into()], DAY).unwrap();
    let sc = server_config(None, &server.cert_pem, &server.key_pem, &[]).unwrap();
    let (addr, _task) = serve_once(sc).await;
    let cc = client_config(ca.cert_pem(), None, &[]).unwrap();
    let err = dial(addr, cc, "127.0.0.1").await.unwrap_err();
    assert!(
        err.contains("NotValidForName") || err.contains("not valid for"),
        "{err}"
    );
}

#[test]
fn node_name_needs_the_node_prefix_and_group() {
    let ca = Ca::generate("test-ca", DAY).unwrap();
    let node = ca.issue_node("edge-7", DAY).unwrap();
    assert_eq!(
        node_name(&first_cert(&node.cert_pem).unwrap()).as_deref(),
        Some("edge-7")
    );
    let server = ca.issue_server(&["x.local".into()], DAY).unwrap();
    assert_eq!(node_name(&first_cert(&server.cert_pem).unwrap()), None);
    assert_eq!(node_name(&first_cert(ca.cert_pem()).unwrap()), None);
}

#[test]
fn a_csr_is_signed_only_for_the_node_it_names() {
    let ca = Ca::generate("test-ca", DAY).unwrap();
    let (csr, _key) = node_csr("edge-3").unwrap();
    let cert = ca.sign_node_csr(&csr, "edge-3", DAY).unwrap();
    assert_eq!(
        node_name(&first_cert(&cert).unwrap()).as_deref(),
        Some("edge-3")
    );
    let err = ca.sign_node_csr(&csr, "edge-4", DAY).unwrap_err();
    assert!(err.to_string().contains("system:node:edge-4"), "{err}");
    assert!(matches!(
        ca.sign_node_csr("garbage", "edge-3", DAY),
        Err(PkiError::Csr(_))
    ));
}

#[test]
fn a_ca_round_trips_through_files() {
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = (
        dir.path().join("ca/rootCA.crt"),
        dir.path().join("ca/rootCA.key"),
    );
    let made = Ca::load_or_generate(&cert, &key, "kubeedge").unwrap();
    let loaded = Ca::load_or_generate(&cert, &key, "kubeedge").unwrap();
    assert_eq!(made.cert_pem(), loaded.cert_pem());
    assert!(matches!(
        Ca::from_pem("nope", "nope"),
        Err(PkiError::Pem { .. })
    ));
}
