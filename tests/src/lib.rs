//! e2e: the harness for end-to-end tests that boot real daemons on loopback: a test PKI written
//! to a temporary directory, a cloudcore with a stand-in controller ([`controller`]), and
//! edgecores in-process or as real processes (`e2e-edgecore`, which tests may kill).
#![forbid(unsafe_code)]

pub mod bench;
pub mod controller;
pub mod sim;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use beehive::CancellationToken;
use controller::{Controller, Desired};

/// The repository's `conf/` folder.
pub fn conf_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../conf")
}

const HOUR: Duration = Duration::from_secs(3600);

/// A CA and the files daemons read, under one temporary directory.
pub struct Pki {
    pub dir: tempfile::TempDir,
    pub ca: pki::Ca,
}

/// Where a node's certificate files are.
#[derive(Clone, Debug)]
pub struct NodeFiles {
    pub ca: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl Pki {
    pub fn new() -> Pki {
        let dir = tempfile::tempdir().unwrap();
        let ca = pki::Ca::generate("e2e-ca", HOUR).unwrap();
        pki::write_pem(&dir.path().join("ca/rootCA.crt"), ca.cert_pem()).unwrap();
        pki::write_pem(&dir.path().join("ca/rootCA.key"), &ca.key_pem()).unwrap();
        Pki { dir, ca }
    }

    /// The PKI whose CA files are already in `dir` (as another process wrote them).
    pub fn open(dir: &Path) -> Pki {
        let cert = std::fs::read_to_string(dir.join("ca/rootCA.crt")).unwrap();
        let key = std::fs::read_to_string(dir.join("ca/rootCA.key")).unwrap();
        let ca = pki::Ca::from_pem(&cert, &key).unwrap();
        let dir = tempfile::Builder::new().tempdir_in(dir).unwrap();
        pki::write_pem(&dir.path().join("ca/rootCA.crt"), ca.cert_pem()).unwrap();
        pki::write_pem(&dir.path().join("ca/rootCA.key"), &ca.key_pem()).unwrap();
        Pki { dir, ca }
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    /// Issues `node`'s certificate and writes it.
    pub fn node(&self, node: &str) -> NodeFiles {
        let issued = self.ca.issue_node(node, HOUR).unwrap();
        let files = NodeFiles {
            ca: self.path("ca/rootCA.crt"),
            cert: self.path(&format!("nodes/{node}.crt")),
            key: self.path(&format!("nodes/{node}.key")),
        };
        pki::write_pem(&files.cert, &issued.cert_pem).unwrap();
        pki::write_pem(&files.key, &issued.key_pem).unwrap();
        files
    }
}

impl Default for Pki {
    fn default() -> Self {
        Pki::new()
    }
}

/// A running cloudcore with the stand-in controller.
pub struct Cloud {
    pub running: cloudcore::Running,
    pub desired: Arc<Desired>,
    shutdown: CancellationToken,
}

/// Which ports cloudhub and the embedded control plane bind (0: any).
#[derive(Clone, Copy, Debug, Default)]
pub struct Ports {
    pub websocket: u16,
    pub quic: u16,
    pub api: u16,
}

/// Starts cloudcore on loopback with both transports, using the test CA.
pub async fn cloud(pki: &Pki, desired: Arc<Desired>, ports: Ports) -> Cloud {
    cloud_with(pki, desired, ports, |_| {}).await
}

/// Like [`cloud`], with the config adjusted by `tweak` before start.
pub async fn cloud_with(
    pki: &Pki,
    desired: Arc<Desired>,
    ports: Ports,
    tweak: impl Fn(&mut cloudcore::Config),
) -> Cloud {
    let mut config = cloud_config(pki, ports);
    // The stand-in controller takes edgecontroller's place.
    config.modules.edge_controller.enable = false;
    tweak(&mut config);
    let extra = vec![Controller::module(desired.clone())];
    start_cloud(config, desired, extra).await
}

/// Starts the whole cloudcore (embedded control plane, cloudhub, edgecontroller) on loopback.
pub async fn k8s_cloud(pki: &Pki, ports: Ports) -> Cloud {
    k8s_cloud_with(pki, ports, |_| {}).await
}

/// Like [`k8s_cloud`], with the config adjusted by `tweak` before start.
pub async fn k8s_cloud_with(
    pki: &Pki,
    ports: Ports,
    tweak: impl Fn(&mut cloudcore::Config),
) -> Cloud {
    let mut config = cloud_config(pki, ports);
    tweak(&mut config);
    let cloud = start_cloud(config, Desired::new(), Vec::new()).await;
    let mut ready = cloud
        .running
        .controller()
        .expect("edgecontroller runs")
        .ready();
    tokio::time::timeout(Duration::from_secs(30), ready.wait_for(|r| *r))
        .await
        .expect("edgecontroller listed every resource within 30s")
        .unwrap();
    cloud
}

/// The config of a cloudcore on loopback using the test CA, every module enabled.
pub fn cloud_config(pki: &Pki, ports: Ports) -> cloudcore::Config {
    let mut config = cloudcore::Config::default();
    config.common_config.monitor_server.enable = false;
    config.common_config.shutdown_grace_period = Duration::from_secs(5);
    let hub = &mut config.modules.cloud_hub;
    hub.tls_ca_file = pki.path("ca/rootCA.crt");
    hub.tls_ca_key_file = pki.path("ca/rootCA.key");
    hub.tls_cert_file = pki.path("cloud/server.crt");
    hub.tls_private_key_file = pki.path("cloud/server.key");
    hub.websocket.address = [127, 0, 0, 1].into();
    hub.websocket.port = ports.websocket;
    hub.quic.enable = true;
    hub.quic.address = [127, 0, 0, 1].into();
    hub.quic.port = ports.quic;
    // The certificate service on an ephemeral loopback port: tests run side by side.
    hub.https.address = [127, 0, 0, 1].into();
    hub.https.port = 0;
    hub.keepalive_interval = Duration::from_secs(2);
    hub.keepalive_timeout = Duration::from_secs(6);
    let api = &mut config.modules.api_server;
    api.bind_address = ([127, 0, 0, 1], ports.api).into();
    api.data_source = pki.path("apiserver/apiserver.db");
    api.tls_ca_file = pki.path("apiserver/ca.crt");
    api.tls_ca_key_file = pki.path("apiserver/ca.key");
    api.tls_cert_file = pki.path("apiserver/server.crt");
    api.tls_private_key_file = pki.path("apiserver/server.key");
    api.token_file = pki.path("apiserver/admin.token");
    api.admin_kubeconfig = pki.path("admin.kubeconfig");
    config
}

async fn start_cloud(
    config: cloudcore::Config,
    desired: Arc<Desired>,
    extra: Vec<Arc<dyn beehive::Module>>,
) -> Cloud {
    // A cloud restarted in the same process may find its old QUIC socket still draining for a
    // moment (a restarted process would not): retry the bind for a bounded time.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(90);
    loop {
        let shutdown = CancellationToken::new();
        match cloudcore::start_with(config.clone(), shutdown.clone(), extra.clone()).await {
            Ok(running) => {
                return Cloud {
                    running,
                    desired,
                    shutdown,
                };
            }
            Err(e)
                if tokio::time::Instant::now() < deadline
                    && format!("{e:#}").contains("in use") =>
            {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("cloudcore did not start: {e:#}"),
        }
    }
}

impl Cloud {
    pub fn hub(&self) -> &cloudhub::Handle {
        self.running.hub().expect("cloudhub is enabled")
    }

    pub fn ports(&self) -> Ports {
        Ports {
            websocket: self.hub().websocket_addr().unwrap().port(),
            quic: self.hub().quic_addr().unwrap().port(),
            api: self.running.api().map_or(0, |a| a.addr().port()),
        }
    }

    /// A `kube` client for the embedded control plane, as the admin.
    pub async fn kube(&self) -> kube::Client {
        let path = self
            .running
            .kubeconfig()
            .expect("the embedded control plane runs");
        let kubeconfig = kube::config::Kubeconfig::read_from(path).unwrap();
        let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
            .await
            .unwrap();
        kube::Client::try_from(config).unwrap()
    }

    /// A `kube` client authenticated as node `node` by a client certificate.
    pub async fn kube_as_node(&self, node: &str) -> kube::Client {
        use base64::Engine;
        let api = self.running.api().unwrap();
        let issued = api.issue_node_cert(node).unwrap();
        let path = self.running.kubeconfig().unwrap();
        let mut kubeconfig = kube::config::Kubeconfig::read_from(path).unwrap();
        let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
        for user in &mut kubeconfig.auth_infos {
            if let Some(auth) = user.auth_info.as_mut() {
                auth.token = None;
                auth.client_certificate_data = Some(b64(&issued.cert_pem));
                auth.client_key_data = Some(b64(&issued.key_pem).into());
            }
        }
        let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
            .await
            .unwrap();
        kube::Client::try_from(config).unwrap()
    }

    /// A `kube` client for the embedded control plane with `token` as its bearer token.
    pub async fn kube_with_token(&self, token: &str) -> kube::Client {
        let path = self.running.kubeconfig().unwrap();
        let kubeconfig = kube::config::Kubeconfig::read_from(path).unwrap();
        let mut config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
            .await
            .unwrap();
        config.auth_info.token = Some(token.to_owned().into());
        kube::Client::try_from(config).unwrap()
    }

    /// The address edges dial for `transport`.
    pub fn addr(&self, transport: link::Transport) -> SocketAddr {
        match transport {
            link::Transport::WebSocket => self.hub().websocket_addr().unwrap(),
            link::Transport::Quic => self.hub().quic_addr().unwrap(),
        }
    }

    pub async fn stop(self) {
        self.shutdown.cancel();
        daemon::Core::from(self.running).stop().await;
    }
}

/// A cloud with the embedded control plane and an in-process edge node `node`, linked over
/// WebSocket, the edge store under `dir`.
pub async fn linked_site(pki: &Pki, dir: &Path, node: &str) -> (Cloud, Edge) {
    let cloud = k8s_cloud(pki, Ports::default()).await;
    let transport = link::Transport::WebSocket;
    let config = edge_config(
        &pki.node(node),
        cloud.addr(transport),
        transport,
        &dir.join("edge.db"),
    );
    let edge = edge(config).await;
    edge.linked().await;
    (cloud, edge)
}

/// Runs the edgecore binary `bin` as a process (so it can be killed) with `config`, written to
/// `dir/edgecore.yaml`.
pub fn spawn_edgecore(bin: &str, config: &edgecore::Config, dir: &Path) -> testkit::ChildGuard {
    let path = dir.join("edgecore.yaml");
    std::fs::write(&path, daemon::to_yaml(config)).unwrap();
    let child = std::process::Command::new(bin)
        .args(["--config", path.to_str().unwrap()])
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    testkit::ChildGuard(child)
}

/// A pod bound to `node` in `default` with one container and nothing else.
pub fn plain_pod(name: &str, node: &str) -> k8s_openapi::api::core::v1::Pod {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "busybox"}]},
    }))
    .unwrap()
}

/// The config of an edge dialling `server` over `transport`, with its store at `db`.
pub fn edge_config(
    files: &NodeFiles,
    server: SocketAddr,
    transport: link::Transport,
    db: &Path,
) -> edgecore::Config {
    let mut config = edgecore::Config::default();
    config.common_config.monitor_server.enable = false;
    config.common_config.shutdown_grace_period = Duration::from_secs(5);
    config.database.data_source = db.to_path_buf();
    config.modules.lw_proxy.server = ([127, 0, 0, 1], 0).into();
    let hub = &mut config.modules.edge_hub;
    hub.tls_ca_file = files.ca.clone();
    hub.tls_cert_file = files.cert.clone();
    hub.tls_private_key_file = files.key.clone();
    hub.server_name = Some("127.0.0.1".into());
    hub.heartbeat = Duration::from_secs(2);
    hub.keepalive_timeout = Duration::from_secs(6);
    hub.reconnect_base = Duration::from_millis(100);
    hub.reconnect_max = Duration::from_secs(1);
    hub.message_qps = 10_000;
    hub.message_burst = 10_000;
    let server = edgehub::Servers::One(server.to_string());
    match transport {
        link::Transport::WebSocket => hub.websocket.server = server,
        link::Transport::Quic => {
            hub.websocket.enable = false;
            hub.quic.enable = true;
            hub.quic.server = server;
        }
    }
    config
}

/// An edgecore running in this process.
pub struct Edge {
    pub running: edgecore::Running,
    config: edgecore::Config,
    shutdown: CancellationToken,
}

/// Starts an edgecore in-process.
pub async fn edge(config: edgecore::Config) -> Edge {
    let shutdown = CancellationToken::new();
    let running = edgecore::start(config.clone(), shutdown.clone())
        .await
        .unwrap();
    Edge {
        running,
        config,
        shutdown,
    }
}

impl Edge {
    /// The config it was started with (to start it again).
    pub fn config(&self) -> edgecore::Config {
        self.config.clone()
    }

    /// A `kube` client for its lwproxy (plain HTTP on loopback, no credentials) that does not
    /// retry: a 503 or 504 is the answer under test, not something to try again.
    pub fn lwproxy_client(&self) -> kube::Client {
        let url = self.running.lwproxy().expect("lwproxy runs").url();
        let mut config = kube::Config::new(url.parse().unwrap());
        config.default_retry = false;
        kube::Client::try_from(config).unwrap()
    }

    /// Waits (bounded) until lwproxy forwards writes to the cloud: until then it answers
    /// them from the edge store as it does offline.
    pub async fn linked(&self) {
        let mut link = self.running.lwproxy().expect("lwproxy runs").link();
        let up = link.wait_for(|l| *l == lwproxy::Link::Up);
        tokio::time::timeout(Duration::from_secs(30), up)
            .await
            .expect("the edge links to the cloud in time")
            .expect("lwproxy follows the link");
    }

    /// `(key, cloud rv)` of everything the edge store holds.
    pub async fn held(&self) -> BTreeMap<String, String> {
        held(self.running.meta().store()).await
    }

    pub async fn stop(self) {
        self.shutdown.cancel();
        daemon::Core::from(self.running).stop().await;
    }
}

/// `(key, cloud rv)` of everything a store holds.
pub async fn held(store: &objstore::Store) -> BTreeMap<String, String> {
    let inventory = store
        .inventory(objstore::InventoryFilter::default())
        .await
        .unwrap();
    inventory
        .into_iter()
        .map(|(k, rv)| {
            (
                wire::object_key(&k.resource, Some(&k.namespace), &k.name),
                rv,
            )
        })
        .collect()
}

/// A site for edged on a real containerd: a cloudcore with the embedded control plane, an
/// edgecore with edged enabled, and a private containerd (testkit's harness); with the helpers
/// tests use to write pods for it and read their status. Needs root and containerd.
pub mod edged_site {
    use std::path::Path;
    use std::time::Duration;

    use k8s_openapi::api::core::v1::Pod;
    use kube::api::Api;
    use serde_json::{Value, json};
    use testkit::containerd::{BUSYBOX_IMAGE, Containerd};

    use crate::{Cloud, Edge, Pki, Ports, edge, edge_config, k8s_cloud_with};

    /// The daemons of one site and the edge's directory (its store, volumes and pod logs).
    pub struct Site {
        pub containerd: Containerd,
        pub cloud: Cloud,
        pub edge: Edge,
        pub dir: tempfile::TempDir,
    }

    /// The config of an edge `node` with edged on `cri`, its files under `dir`, relisting and
    /// reporting the node's status quickly.
    pub fn edged_config(
        pki: &Pki,
        cloud: &Cloud,
        node: &str,
        dir: &Path,
        cri: &Containerd,
    ) -> edgecore::Config {
        let transport = link::Transport::WebSocket;
        let mut config = edge_config(
            &pki.node(node),
            cloud.addr(transport),
            transport,
            &dir.join("edge.db"),
        );
        let edged = &mut config.modules.edged;
        edged.enable = true;
        edged.remote_runtime_endpoint = cri.endpoint();
        edged.root_directory = dir.join("kubelet");
        edged.pod_logs_directory = dir.join("pod-logs");
        edged.relist_period = Duration::from_millis(300);
        edged.node_status_update_frequency = Duration::from_secs(1);
        edged.static_pod_path = dir.join("manifests");
        edged.file_check_frequency = Duration::from_millis(300);
        config
    }

    /// Starts a private containerd, a cloud and edge `node` with edged on that containerd.
    pub async fn site(node: &str) -> (Pki, Site) {
        if let Err(why) = Containerd::available() {
            panic!("edged tests need a private containerd: {why}");
        }
        let containerd = Containerd::start().await.expect("containerd starts");
        let pki = Pki::new();
        let dir = tempfile::tempdir().unwrap();
        // Resource metrics scraped every second, so `kubectl top` has a rate soon.
        let cloud = k8s_cloud_with(&pki, Ports::default(), |c| {
            c.modules.api_server.metrics_server.metric_resolution = Duration::from_secs(1);
            c.modules.controllers.horizontal_pod_autoscaler.sync_period = Duration::from_secs(1);
        })
        .await;
        let edge = edge(edged_config(&pki, &cloud, node, dir.path(), &containerd)).await;
        (
            pki,
            Site {
                containerd,
                cloud,
                edge,
                dir,
            },
        )
    }

    /// Pod `name` in `default` bound to `node`, with `spec` (and a 5 s grace period).
    pub fn pod(name: &str, node: &str, spec: Value) -> Pod {
        let mut spec = spec;
        spec["nodeName"] = json!(node);
        spec["terminationGracePeriodSeconds"] = json!(5);
        serde_json::from_value(
            json!({"metadata": {"name": name, "namespace": "default"}, "spec": spec}),
        )
        .unwrap()
    }

    /// A busybox container `name` running `sh -c script`.
    pub fn busybox(name: &str, script: &str) -> Value {
        json!({"name": name, "image": BUSYBOX_IMAGE, "command": ["sh", "-c", script]})
    }

    /// Pod `name`'s status as JSON; `Null` if it cannot be read.
    pub async fn status(api: &Api<Pod>, name: &str) -> Value {
        match api.get_opt(name).await {
            Ok(Some(p)) => serde_json::to_value(p.status).unwrap_or_default(),
            _ => Value::Null,
        }
    }
}

/// kubectl with `kubeconfig` (the one on PATH).
pub fn kubectl(kubeconfig: &std::path::Path, args: &[&str]) -> std::process::Output {
    std::process::Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(args)
        .output()
        .expect("kubectl runs")
}

/// kubectl with `kubeconfig` and `stdin` fed to it (`-f -`).
pub fn kubectl_stdin(
    kubeconfig: &std::path::Path,
    args: &[&str],
    stdin: &str,
) -> std::process::Output {
    use std::io::Write;
    use std::process::Stdio;
    let mut child = std::process::Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kubectl runs");
    let mut input = child.stdin.take().expect("piped stdin");
    input
        .write_all(stdin.as_bytes())
        .expect("kubectl reads stdin");
    drop(input);
    child.wait_with_output().expect("kubectl finishes")
}

/// Runs kubectl, expects success, returns stdout.
pub fn kubectl_ok(kubeconfig: &std::path::Path, args: &[&str]) -> String {
    let out = kubectl(kubeconfig, args);
    assert!(
        out.status.success(),
        "kubectl {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The oldest kubectl whose output the kubectl-driven tests compare against (their columns,
/// `kubectl debug`, server-side validation); older ones are skipped with a printed reason.
pub const KUBECTL_MIN_MINOR: u32 = 27;

/// Whether a kubectl at least 1.[`KUBECTL_MIN_MINOR`] is on PATH; prints why not.
pub fn recent_kubectl() -> bool {
    let out = std::process::Command::new("kubectl")
        .args(["version", "--client", "-o", "json"])
        .output();
    let Some(out) = out.ok().filter(|o| o.status.success()) else {
        eprintln!("skipping the kubectl part: no kubectl on PATH");
        return false;
    };
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    let minor: u32 = v["clientVersion"]["minor"]
        .as_str()
        .unwrap_or("0")
        .trim_end_matches('+')
        .parse()
        .unwrap_or(0);
    if minor < KUBECTL_MIN_MINOR {
        eprintln!(
            "skipping the kubectl part: kubectl 1.{minor} is older than 1.{KUBECTL_MIN_MINOR}"
        );
        return false;
    }
    true
}
