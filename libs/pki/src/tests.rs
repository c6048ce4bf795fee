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

/// A CSR for `system:node:edge-521` with a P-521 key (made with `openssl req -newkey ec
/// -pkeyopt ec_paramgen_curve:P-521`).
const P521_CSR: &str = "-----BEGIN CERTIFICATE REQUEST-----
MIIBeTCB2wIBADA2MR0wGwYDVQQDDBRzeXN0ZW06bm9kZTplZGdlLTUyMTEVMBMG
A1UECgwMc3lzdGVtOm5vZGVzMIGbMBAGByqGSM49AgEGBSuBBAAjA4GGAAQBaJwQ
8fgiGuiVrpHeRxO/xIU5u/RqEJpKEVG2vux5NcPTtOgfvDsHk4MFhvfvV8nOzGy9
wEQtgs3s8W0TW7n37gIALlo0Be8b0BrqUcLNFYAP5cUKhmxb3bVj3PmPe42RdSkn
J3OD6lTxNq+p+ROxali2s/6oqLv8c+02otWzImgdgtSgADAKBggqhkjOPQQDAgOB
jAAwgYgCQgFR0RvYypHabDeWcaV/5bkIu65ACYeP5hUgC4kNS/Je8m1+kvMniy4Q
BVvmYswir+bpt3sbWAJsk8A/xAGF4tLpUwJCASwCGoKWUd6v9MF9nP3C1TKneu+r
NV08g7fsxLJ9aEtxlGwKLC3uy4B36679IbjTy8Lkd2mqEbSxTSlvNYumem7q
-----END CERTIFICATE REQUEST-----
";

#[test]
fn a_csr_with_an_unsupported_curve_is_refused_naming_the_curve() {
    let ca = Ca::generate("test-ca", DAY).unwrap();
    for err in [
        csr_node_name(P521_CSR).unwrap_err(),
        ca.sign_node_csr(P521_CSR, "edge-521", DAY).unwrap_err(),
    ] {
        let text = err.to_string();
        assert!(text.contains("unsupported curve P-521"), "{text}");
        assert!(
            text.contains("supported: ECDSA P-256, ECDSA P-384, RSA, Ed25519"),
            "{text}"
        );
        assert!(!text.contains("signature"), "{text}");
    }
    let (csr, _) = node_csr("edge-256").unwrap();
    check_csr_key(&csr).expect("the CSRs keadm makes (P-256) are supported");
}

#[test]
fn a_certificate_signed_after_a_revocation_starts_at_or_after_it() {
    let ca = Ca::generate("test-ca", DAY).unwrap();
    let (csr, _) = node_csr("edge-5").unwrap();
    let plain = ca.sign_node_csr(&csr, "edge-5", DAY).unwrap();
    let (from, _) = validity(&plain).unwrap();
    // Signed just now: backdated a little, so a revocation a second ago would cover it.
    let revoked_at = from + 10;
    assert!(revoked_by(from, revoked_at));
    let after = ca
        .sign_node_csr_after(&csr, "edge-5", DAY, Some(revoked_at))
        .unwrap();
    let (from, until) = validity(&after).unwrap();
    assert_eq!(from, revoked_at);
    assert!(!revoked_by(from, revoked_at));
    assert!(until > from);
}

#[test]
fn a_not_yet_valid_certificate_error_names_both_times() {
    let tls = rustls::Error::InvalidCertificate(rustls::CertificateError::NotValidYetContext {
        time: rustls::pki_types::UnixTime::since_unix_epoch(std::time::Duration::from_secs(1000)),
        not_before: rustls::pki_types::UnixTime::since_unix_epoch(std::time::Duration::from_secs(
            1600,
        )),
    });
    let io = std::io::Error::new(std::io::ErrorKind::InvalidData, tls);
    let found = clock_behind(&io).expect("found inside the io error");
    assert_eq!(found.behind_secs(), 600);
    assert!(
        found
            .to_string()
            .contains("at least 600 s behind the cloud")
    );
    let other = std::io::Error::other("refused");
    assert_eq!(clock_behind(&other), None);
}
