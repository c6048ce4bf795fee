//! keadm end to end on loopback: `keadm init` makes the cloud's files, cloudcore starts from
//! them, `keadm gettoken` issues a token, `keadm join` gets a node certificate from the
//! certificate service and writes edgecore.yaml, and edgecore starts from it and links. The
//! refusals (wrong CA hash, expired, revoked and malformed tokens, a name already joined, a
//! machine already joined, an address not in the certificate) each say what went wrong; an
//! unknown token and a wrong secret get the same answer. A node certificate renewed during
//! traffic loses no message; an edge whose clock runs far ahead renews a bounded number of
//! times. A revoked node (`keadm revoke`) is cut off and stays off; its name joins again afresh.

use std::path::{Path, PathBuf};
use std::time::Duration;

use beehive::CancellationToken;
use clap::Parser as _;
use e2e::Edge;
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Api;
use kube::api::PostParams;
use testkit::eventually;

/// A cloudcore started from the files `keadm init` wrote.
struct Cloud {
    running: cloudcore::Running,
    shutdown: CancellationToken,
    config_dir: PathBuf,
}

impl Cloud {
    async fn init(dir: &Path, extra: &[&str]) -> Cloud {
        let config_dir = dir.join("cloud/etc");
        let mut args = vec![
            "keadm".to_string(),
            "init".into(),
            "--config-dir".into(),
            config_dir.display().to_string(),
            "--data-dir".into(),
            dir.join("cloud/var").display().to_string(),
            "--advertise-address".into(),
            "127.0.0.1".into(),
            // Not localhost: a join that dials localhost meets a certificate not naming it.
            "--dns-names".into(),
            "cloud.kubeedge.test".into(),
        ];
        for set in [
            "commonConfig.monitorServer.enable=false",
            "modules.cloudHub.websocket.address=127.0.0.1",
            "modules.cloudHub.websocket.port=0",
            "modules.cloudHub.https.address=127.0.0.1",
            "modules.cloudHub.https.port=0",
            "modules.apiServer.bindAddress=127.0.0.1:0",
        ]
        .iter()
        .chain(extra)
        {
            args.push("--set".into());
            args.push(set.to_string());
        }
        keadm(&args).await.expect("keadm init");
        let config: cloudcore::Config =
            daemon::load_yaml(&config_dir.join("config/cloudcore.yaml")).unwrap();
        let shutdown = CancellationToken::new();
        let running = cloudcore::start(config, shutdown.clone()).await.unwrap();
        Cloud {
            running,
            shutdown,
            config_dir,
        }
    }

    fn hub(&self) -> &cloudhub::Handle {
        self.running.hub().unwrap()
    }

    async fn kube(&self) -> kube::Client {
        let path = self.running.kubeconfig().unwrap();
        let kubeconfig = kube::config::Kubeconfig::read_from(path).unwrap();
        let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
            .await
            .unwrap();
        kube::Client::try_from(config).unwrap()
    }

    /// `keadm gettoken --ttl <ttl>`; waits for cloudcore to have published its CA.
    async fn token(&self, ttl: &str) -> String {
        let cli = keadm::Cli::try_parse_from([
            "keadm",
            "gettoken",
            "--config-dir",
            &self.config_dir.display().to_string(),
            "--ttl",
            ttl,
        ])
        .unwrap();
        let keadm::Command::Gettoken(args) = cli.command else {
            unreachable!("parsed a gettoken command")
        };
        let token = std::sync::Mutex::new(None);
        eventually(
            "cloudcore publishes its CA",
            Duration::from_secs(10),
            || {
                let args = args.clone();
                let token = &token;
                async move {
                    match keadm::issue_token(&args).await {
                        Ok(t) => {
                            *token.lock().unwrap() = Some(t.to_string());
                            true
                        }
                        Err(_) => false,
                    }
                }
            },
        )
        .await;
        token.into_inner().unwrap().unwrap()
    }

    /// `keadm join` of node `node` into `dir/<node>`, not starting edgecore.
    async fn join(&self, dir: &Path, node: &str, token: &str, host: &str) -> anyhow::Result<()> {
        let ws = self.hub().websocket_addr().unwrap().port();
        let https = self.hub().https_addr().unwrap().port();
        let args: Vec<String> = [
            "keadm",
            "join",
            "--cloudcore-ipport",
            &format!("{host}:{ws}"),
            "--certport",
            &https.to_string(),
            "--token",
            token,
            "--edgenode-name",
            node,
            "--config-dir",
            &dir.join(node).join("etc").display().to_string(),
            "--data-dir",
            &dir.join(node).join("var").display().to_string(),
            "--no-start",
            "--set",
            "commonConfig.monitorServer.enable=false",
            "--set",
            "modules.lwProxy.server=127.0.0.1:0",
            // No container runtime in these tests.
            "--set",
            "modules.edged.enable=false",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        keadm(&args).await
    }

    async fn stop(self) {
        self.shutdown.cancel();
        daemon::Core::from(self.running).stop().await;
    }
}

async fn keadm(args: &[String]) -> anyhow::Result<()> {
    keadm::run(keadm::Cli::try_parse_from(args)?).await
}

/// edgecore started in-process from the edgecore.yaml `keadm join` wrote.
async fn edge(dir: &Path, node: &str) -> Edge {
    let path = dir.join(node).join("etc/config/edgecore.yaml");
    let config: edgecore::Config = daemon::load_yaml(&path).unwrap();
    e2e::edge(config).await
}

async fn linked(edge: &Edge) {
    let mut state = edge.running.hub().unwrap().state();
    eventually(
        "the joined node links to cloudhub",
        Duration::from_secs(20),
        || {
            let linked = matches!(
                *state.borrow_and_update(),
                edgehub::LinkState::Connected { .. }
            );
            async move { linked }
        },
    )
    .await;
}

fn refused(result: anyhow::Result<()>) -> String {
    format!("{:#}", result.expect_err("refused"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_joins_with_a_token_and_links_with_the_certificate_it_got() {
    let dir = tempfile::tempdir().unwrap();
    let cloud = Cloud::init(dir.path(), &[]).await;
    // Running init again with the same flags changes nothing; other flags need --force.
    let ca = std::fs::read(cloud.config_dir.join("ca/rootCA.crt")).unwrap();
    let again = ["keadm", "init", "--config-dir"]
        .iter()
        .map(|s| s.to_string())
        .chain([
            cloud.config_dir.display().to_string(),
            "--data-dir".into(),
            dir.path().join("cloud/var").display().to_string(),
            "--advertise-address".into(),
            "10.1.2.3".into(),
        ])
        .collect::<Vec<_>>();
    let err = refused(keadm(&again).await);
    assert!(err.contains("without --force"), "{err}");
    assert_eq!(
        std::fs::read(cloud.config_dir.join("ca/rootCA.crt")).unwrap(),
        ca
    );

    let token = cloud.token("1h").await;
    cloud
        .join(dir.path(), "edge-a", &token, "127.0.0.1")
        .await
        .unwrap();
    let cert = std::fs::read_to_string(dir.path().join("edge-a/etc/certs/edgecore.crt")).unwrap();
    let der = pki::first_cert(&cert).unwrap();
    assert_eq!(pki::node_name(&der).as_deref(), Some("edge-a"));
    let (_, orgs) = pki::subject(&der).unwrap();
    assert_eq!(orgs, vec!["system:nodes".to_string()]);
    let (from, until) = pki::validity(&cert).unwrap();
    assert!(
        (until - from - 365 * 86400).abs() < 3600,
        "valid a year by default"
    );
    let key = dir.path().join("edge-a/etc/certs/edgecore.key");
    use std::os::unix::fs::PermissionsExt as _;
    assert_eq!(
        std::fs::metadata(&key).unwrap().permissions().mode() & 0o777,
        0o600
    );

    let edge = edge(dir.path(), "edge-a").await;
    linked(&edge).await;
    let client = cloud.kube().await;
    let nodes: Api<Node> = Api::all(client.clone());
    eventually(
        "the joined node's Node exists",
        Duration::from_secs(10),
        || {
            let nodes = nodes.clone();
            async move { nodes.get_opt("edge-a").await.unwrap().is_some() }
        },
    )
    .await;
    let csr: Api<CertificateSigningRequest> = Api::all(client.clone());
    let record = csr.get("kubeedge-node-edge-a").await.unwrap();
    let status = record.status.unwrap();
    assert!(
        status.certificate.is_some(),
        "the record holds the issued certificate"
    );
    assert!(
        status
            .conditions
            .unwrap()
            .iter()
            .any(|c| c.type_ == "Approved" && c.status == "True")
    );
    edge.stop().await;
    cloud.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_joins_say_why() {
    let dir = tempfile::tempdir().unwrap();
    let cloud = Cloud::init(dir.path(), &[]).await;
    let token = cloud.token("1h").await;

    // A token for another cloud: its CA hash does not match; nothing is sent with it.
    let other = format!("{}{}", "0".repeat(64), &token[64..]);
    let err = refused(cloud.join(dir.path(), "n1", &other, "127.0.0.1").await);
    assert!(err.contains("CA hash mismatch"), "{err}");

    let err = refused(
        cloud
            .join(dir.path(), "n1", "not-a-token", "127.0.0.1")
            .await,
    );
    assert!(err.contains("malformed token"), "{err}");

    // An address the cloud's certificate does not name.
    let err = refused(cloud.join(dir.path(), "n1", &token, "localhost").await);
    assert!(err.contains("not valid for \"localhost\""), "{err}");

    // Expired.
    let short = cloud.token("1s").await;
    let client = cloud.kube().await;
    eventually("the 1s token expires", Duration::from_secs(10), || {
        let client = client.clone();
        let id = short[65..71].to_string();
        async move {
            bootstrap::store::list_tokens(&client)
                .await
                .unwrap()
                .iter()
                .any(|t| t.id == id && t.state(bootstrap::Timestamp::now()) == "expired")
        }
    })
    .await;
    let err = refused(cloud.join(dir.path(), "n1", &short, "127.0.0.1").await);
    assert!(err.contains("expired at"), "{err}");

    // Revoked.
    let revoked = cloud.token("1h").await;
    let delete: Vec<String> = [
        "keadm",
        "token",
        "delete",
        "--config-dir",
        &cloud.config_dir.display().to_string(),
        &revoked,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    keadm(&delete).await.unwrap();
    let err = refused(cloud.join(dir.path(), "n1", &revoked, "127.0.0.1").await);
    assert!(err.contains("was revoked at"), "{err}");

    // A good join; then the same name again (from another machine), and this machine again.
    cloud
        .join(dir.path(), "n1", &token, "127.0.0.1")
        .await
        .unwrap();
    let err = refused(
        cloud
            .join(&dir.path().join("other"), "n1", &token, "127.0.0.1")
            .await,
    );
    assert!(err.contains("has already joined"), "{err}");
    assert!(err.contains("kubectl delete csr kubeedge-node-n1"), "{err}");
    let err = refused(cloud.join(dir.path(), "n1", &token, "127.0.0.1").await);
    assert!(err.contains("this machine has already joined"), "{err}");

    // keadm reset removes what join wrote here; the cloud still knows the name.
    let etc = dir.path().join("n1/etc");
    let reset: Vec<String> = [
        "keadm",
        "reset",
        "--force",
        "--config-dir",
        &etc.display().to_string(),
        "--data-dir",
        &dir.path().join("n1/var").display().to_string(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    assert!(etc.join("config/edgecore.yaml").exists());
    keadm(&reset).await.unwrap();
    for gone in [
        "config/edgecore.yaml",
        "certs/edgecore.crt",
        "certs/edgecore.key",
    ] {
        assert!(!etc.join(gone).exists(), "{gone} removed");
    }
    keadm(&reset).await.unwrap();
    let err = refused(cloud.join(dir.path(), "n1", &token, "127.0.0.1").await);
    assert!(err.contains("has already joined"), "{err}");

    // An existing token id with a wrong secret and an id that does not exist: one answer.
    let ca = std::fs::read_to_string(cloud.config_dir.join("ca/rootCA.crt")).unwrap();
    let tls = std::sync::Arc::new(pki::client_config(&ca, None, &[b"http/1.1"]).unwrap());
    let addr = format!("127.0.0.1:{}", cloud.hub().https_addr().unwrap().port());
    let (csr, _) = pki::node_csr("n9").unwrap();
    let id = &token[65..71];
    let mut answers = Vec::new();
    for bearer in [
        format!("{id}.0123456789abcdef"),
        "zzzzzz.0123456789abcdef".into(),
    ] {
        let resp = bootstrap::https::request(
            &addr,
            tls.clone(),
            http::Method::POST,
            bootstrap::paths::EDGE_CERT,
            &[("authorization", format!("Bearer {bearer}"))],
            csr.clone().into_bytes(),
            Duration::from_secs(10),
        )
        .await
        .unwrap();
        answers.push((
            resp.status,
            String::from_utf8_lossy(&resp.body).into_owned(),
        ));
    }
    assert_eq!(answers[0].0, 401, "{answers:?}");
    assert_eq!(
        answers[0], answers[1],
        "a known id is not told from an unknown one"
    );

    // Failed attempts from one address are held back after a burst.
    let mut statuses = Vec::new();
    for _ in 0..6 {
        let resp = bootstrap::https::request(
            &addr,
            tls.clone(),
            http::Method::POST,
            bootstrap::paths::EDGE_CERT,
            &[("authorization", "Bearer abcdef.0123456789abcdef".into())],
            csr.clone().into_bytes(),
            Duration::from_secs(10),
        )
        .await
        .unwrap();
        if resp.status == 429 {
            assert!(resp.headers.contains_key("retry-after"));
            assert!(String::from_utf8_lossy(&resp.body).contains("too many failed attempts"));
        }
        statuses.push(resp.status);
    }
    assert_eq!(statuses.first(), Some(&401), "{statuses:?}");
    assert_eq!(statuses.last(), Some(&429), "{statuses:?}");
    cloud.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewed_certificate_keeps_the_link_and_loses_no_message() {
    let dir = tempfile::tempdir().unwrap();
    // Certificates valid 12 s: renewal comes 8.4 to 10.8 s after the join.
    let cloud = Cloud::init(
        dir.path(),
        &["modules.cloudHub.edgeCertSigningDuration=12s"],
    )
    .await;
    let token = cloud.token("1h").await;
    cloud
        .join(dir.path(), "renew-me", &token, "127.0.0.1")
        .await
        .unwrap();
    let cert_path = dir.path().join("renew-me/etc/certs/edgecore.crt");
    let first = std::fs::read_to_string(&cert_path).unwrap();
    let edge = edge(dir.path(), "renew-me").await;
    linked(&edge).await;

    // Pods for the node created before, during and after the renewal reach the edge store.
    let client = cloud.kube().await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let mut made = 0;
    let renewed = || std::fs::read_to_string(&cert_path).unwrap() != first;
    let started = std::time::Instant::now();
    let deadline = started + Duration::from_secs(30);
    let mut after = 0;
    let mut renewed_after = None;
    while after < 10 {
        assert!(
            std::time::Instant::now() < deadline,
            "no renewal within 30 s"
        );
        let pod = e2e::plain_pod(&format!("p{made}"), "renew-me");
        pods.create(&PostParams::default(), &pod).await.unwrap();
        made += 1;
        if renewed() {
            after += 1;
            renewed_after.get_or_insert(started.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
    let renewed_cert = std::fs::read_to_string(&cert_path).unwrap();
    let (from, _) = pki::validity(&renewed_cert).unwrap();
    let (first_from, _) = pki::validity(&first).unwrap();
    assert!(from >= first_from, "the new certificate is newer");
    eventually(
        "every pod reaches the edge store",
        Duration::from_secs(20),
        || {
            let edge = &edge;
            async move {
                let held = edge.held().await;
                (0..made).all(|i| held.contains_key(&format!("pods/default/p{i}")))
            }
        },
    )
    .await;
    let stats = edge.running.hub().unwrap().stats();
    let connects = stats.connects.load(std::sync::atomic::Ordering::Relaxed);
    assert!(
        connects >= 2,
        "the link reconnected with the new certificate"
    );
    // One renewal per 70-90% of a 12 s lifetime: no storm of renewals.
    assert!(connects <= 4, "{connects} connections in {made} pods' time");
    let renewed_after = renewed_after.unwrap();
    assert!(
        renewed_after >= Duration::from_secs(6),
        "renewed {renewed_after:?} after the join, before 70% of the lifetime"
    );
    linked(&edge).await;
    edge.stop().await;
    cloud.stop().await;
}

/// Sends a renewal for `node` with the certificate and key in `dir/<node>/etc/certs`.
async fn renew_with_old_cert(cloud: &Cloud, dir: &Path, node: &str) -> bootstrap::https::Response {
    let certs = dir.join(node).join("etc/certs");
    let ca = std::fs::read_to_string(cloud.config_dir.join("ca/rootCA.crt")).unwrap();
    let cert = std::fs::read_to_string(certs.join("edgecore.crt")).unwrap();
    let key = std::fs::read_to_string(certs.join("edgecore.key")).unwrap();
    let tls = pki::client_config(&ca, Some((&cert, &key)), &[b"http/1.1"]).unwrap();
    let (csr, _) = pki::node_csr(node).unwrap();
    bootstrap::https::request(
        &format!("127.0.0.1:{}", cloud.hub().https_addr().unwrap().port()),
        std::sync::Arc::new(tls),
        http::Method::POST,
        bootstrap::paths::EDGE_CERT,
        &[],
        csr.into_bytes(),
        Duration::from_secs(10),
    )
    .await
    .unwrap()
}

fn connected(edge: &Edge) -> bool {
    matches!(
        *edge.running.hub().unwrap().state().borrow(),
        edgehub::LinkState::Connected { .. }
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoked_node_is_cut_off_and_its_name_may_join_again_afresh() {
    let dir = tempfile::tempdir().unwrap();
    let cloud = Cloud::init(dir.path(), &[]).await;
    let token = cloud.token("1h").await;
    cloud
        .join(dir.path(), "gone", &token, "127.0.0.1")
        .await
        .unwrap();
    let old = edge(dir.path(), "gone").await;
    linked(&old).await;
    let client = cloud.kube().await;
    let nodes: Api<Node> = Api::all(client.clone());
    eventually("the node's Node exists", Duration::from_secs(10), || {
        let nodes = nodes.clone();
        async move { nodes.get_opt("gone").await.unwrap().is_some() }
    })
    .await;

    let revoke: Vec<String> = [
        "keadm",
        "revoke",
        "--config-dir",
        &cloud.config_dir.display().to_string(),
        "gone",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    keadm(&revoke).await.unwrap();
    eventually(
        "the revoked node's session closes",
        Duration::from_secs(10),
        || {
            let up = connected(&old);
            async move { !up }
        },
    )
    .await;
    let connects = || {
        old.running
            .hub()
            .unwrap()
            .stats()
            .connects
            .load(std::sync::atomic::Ordering::Relaxed)
    };
    let before = connects();
    let resp = renew_with_old_cert(&cloud, dir.path(), "gone").await;
    assert_eq!(resp.status, 403, "{}", String::from_utf8_lossy(&resp.body));
    assert!(String::from_utf8_lossy(&resp.body).contains("was revoked at"));
    // A few seconds of reconnect attempts (edgehub retries within 1-2 s) get nowhere, and the
    // Node is not registered again.
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert!(!connected(&old), "reconnects are refused");
    assert_eq!(connects(), before, "no session was admitted");
    assert!(
        nodes.get_opt("gone").await.unwrap().is_none(),
        "not registered again"
    );
    let csrs: Api<CertificateSigningRequest> = Api::all(client.clone());
    assert!(csrs.get_opt("kubeedge-node-gone").await.unwrap().is_none());

    // The same name joins afresh (another machine, a new token): accepted, registered; the old
    // certificate stays refused.
    let token = cloud.token("1h").await;
    let again = dir.path().join("again");
    cloud
        .join(&again, "gone", &token, "127.0.0.1")
        .await
        .unwrap();
    let new = edge(&again, "gone").await;
    linked(&new).await;
    eventually(
        "the Node is registered again",
        Duration::from_secs(10),
        || {
            let nodes = nodes.clone();
            async move { nodes.get_opt("gone").await.unwrap().is_some() }
        },
    )
    .await;
    assert_eq!(
        renew_with_old_cert(&cloud, dir.path(), "gone").await.status,
        403
    );
    assert!(!connected(&old));
    assert!(connected(&new));
    old.stop().await;
    new.stop().await;
    cloud.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edge_clock_far_ahead_renews_a_bounded_number_of_times() {
    let dir = tempfile::tempdir().unwrap();
    let cloud = Cloud::init(dir.path(), &["modules.cloudHub.edgeCertSigningDuration=1h"]).await;
    let token = cloud.token("1h").await;
    cloud
        .join(dir.path(), "ahead", &token, "127.0.0.1")
        .await
        .unwrap();
    let path = dir.path().join("ahead/etc/config/edgecore.yaml");
    let mut config: edgecore::Config = daemon::load_yaml(&path).unwrap();
    // 400 days ahead: by this clock every certificate the cloud issues has long expired.
    config.modules.edge_hub.clock_offset_secs = 400 * 86400;
    let edge = e2e::edge(config).await;
    linked(&edge).await;
    let stats = edge.running.hub().unwrap().stats();
    let renewals = || stats.renewals.load(std::sync::atomic::Ordering::Relaxed);
    eventually(
        "the edge renews once (its clock says the certificate is due)",
        Duration::from_secs(10),
        || {
            let n = renewals();
            async move { n >= 1 }
        },
    )
    .await;
    // Then it follows the cloud's clock: nothing more is due for 42 minutes or so. (The hot
    // loop this replaces renewed thousands of times in such a window.)
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(renewals() <= 2, "{} renewals", renewals());
    let connects = stats.connects.load(std::sync::atomic::Ordering::Relaxed);
    assert!(connects <= 3, "{connects} connections");
    linked(&edge).await;
    edge.stop().await;
    cloud.stop().await;
}
