//! apiserver: the embedded Kubernetes-compatible control plane, on when cloudcore is given no
//! kubeconfig. It serves the kapi REST layer over its own SQLite store on HTTPS (default
//! `127.0.0.1:6443`) with its own CA, authenticates by bearer token (the admin kubeconfig it
//! writes, or a service-account token it issued through TokenRequest) or client certificate
//! (requests with neither are `system:anonymous`), and authorizes as kube-apiserver's
//! `--authorization-mode=Node,RBAC`: a node identity (`system:node:<name>`) may do what a node
//! may or RBAC grants it, anyone else what RBAC grants ([`rbac`]: bootstrap roles reconciled at
//! start, ClusterRole aggregation, the review APIs). The rest of cloudcore reaches it like any
//! cluster: through the `kube` crate and that kubeconfig.
#![forbid(unsafe_code)]

mod auth;
mod componentstatus;
mod config;
mod error;
mod kept;
pub mod kubeconfig;
mod metrics_api;
mod rbac;
mod rootca;
mod serve;
mod tokens;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use beehive::{Context, Mailbox, Module, ModuleError};
use kapi::local::LocalBackend;
use kapi::{Api, Registry};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

pub use auth::{MASTERS, NODES};
pub use componentstatus::{CONTROLLER_MANAGER, Components, Probe, SCHEDULER};
pub use config::Config;
pub use error::{ApiServerError, TokenError};
pub use metrics_api::MetricsConfig;

/// Module name.
pub const NAME: &str = "apiserver";

/// Namespaces that always exist.
pub const SYSTEM_NAMESPACES: &[&str] = &[
    "default",
    "kube-system",
    "kube-public",
    "kube-node-lease",
    "kubeedge",
];

/// The cluster IP of `default/kubernetes` with the default service range (it is the first
/// address of `serviceClusterIPRange`).
pub const KUBERNETES_SERVICE_IP: &str = "10.96.0.1";

/// The control plane as a beehive module: bound by [`ApiServer::bind`], serving once run.
pub struct ApiServer {
    config: Config,
    serving: Mutex<Option<Serving>>,
    /// How nodes' kubelet APIs are reached (the metrics pipeline scrapes only with one).
    dialer: Option<Arc<dyn kapi::nodes::NodeDialer>>,
}

struct Serving {
    listener: TcpListener,
    tls: Arc<rustls::ServerConfig>,
    app: axum::Router,
    /// For the kept objects (the `kube-root-ca.crt` ConfigMaps among them).
    api: Api,
    address: kept::ApiAddress,
    connections: kapi::ServeStats,
    /// The resource metrics the scrape loop writes and `metrics.k8s.io` reads.
    metrics: metrics_api::Shared,
}

/// What the daemon and tests need to reach the control plane.
#[derive(Clone)]
pub struct Handle {
    addr: SocketAddr,
    kubeconfig: PathBuf,
    ca: Arc<pki::Ca>,
    /// The CA is the one client certificates are checked against (no `clientCAFile`).
    ca_signs_clients: bool,
    components: Components,
    token: String,
    store: objstore::Store,
    connections: kapi::ServeStats,
}

// === impl ApiServer ===

impl ApiServer {
    /// Prepares certificates, the store and the routes, binds the listener and writes the admin
    /// kubeconfig.
    pub async fn bind(config: Config) -> Result<(ApiServer, Handle), ApiServerError> {
        let ca = pki::Ca::load_or_generate(
            &config.tls_ca_file,
            &config.tls_ca_key_file,
            "kubeedge-apiserver",
        )?;
        let server = serving_cert(&config, &ca)?;
        let token = admin_token(&config.token_file)?;
        let writer = open_store(&config)?;
        let store = writer.reader();
        let tokens =
            tokens::Tokens::load_or_generate(&config.service_account_key_path(), store.clone())?;
        let authenticator = Arc::new(auth::Authenticator::new(
            token.clone(),
            tokens.clone(),
            rbac::Rbac::new(store.clone()),
        ));
        let api = build_api(
            writer,
            tokens,
            authenticator.clone(),
            config.service_ranges(),
        )
        .await?;
        let client_ca = match &config.client_ca_file {
            Some(path) => pki::read_pem(path)?,
            None => ca.cert_pem().to_string(),
        };
        let alpn: &[&[u8]] = &[b"h2", b"http/1.1"];
        let tls = pki::server_config_optional_client(
            &client_ca,
            &server.cert_pem,
            &server.key_pem,
            alpn,
        )?;
        let listener = TcpListener::bind(config.bind_address)
            .await
            .map_err(|source| ApiServerError::Bind {
                addr: config.bind_address,
                source,
            })?;
        let addr = listener
            .local_addr()
            .map_err(|source| ApiServerError::Bind {
                addr: config.bind_address,
                source,
            })?;
        let address = kept::ApiAddress {
            service_ip: config.service_cluster_ip_range.nth(0).to_string(),
            serving: addr,
            ca_pem: ca.cert_pem().to_string(),
        };
        kept::ensure_kubernetes(&api, &address).await;
        let text = kubeconfig::render(kubeconfig::dial_address(addr), ca.cert_pem(), &token);
        kubeconfig::write(&config.admin_kubeconfig, &text).map_err(|source| {
            ApiServerError::Io {
                op: "writing the admin kubeconfig",
                path: config.admin_kubeconfig.clone(),
                source,
            }
        })?;
        tracing::info!(bound = %addr, kubeconfig = %config.admin_kubeconfig.display(), "embedded control plane listening (https)");
        let connections = kapi::ServeStats::default();
        let components = Components::default();
        let component_service = componentstatus::Service {
            api: api.clone(),
            components: components.clone(),
        };
        let metrics = metrics_api::Shared::default();
        let metrics_service = metrics_api::Service {
            api: api.clone(),
            storage: metrics.clone(),
        };
        let serving = Serving {
            connections: connections.clone(),
            listener,
            tls: Arc::new(tls),
            api: api.clone(),
            address,
            app: serve::authenticated(
                kapi::with_proxy(kapi::metered_router(api), config.proxy_config())
                    .layer(axum::middleware::from_fn_with_state(
                        component_service,
                        componentstatus::serve,
                    ))
                    .layer(axum::middleware::from_fn_with_state(
                        metrics_service,
                        metrics_api::serve,
                    )),
                authenticator,
            ),
            metrics,
        };
        let handle = Handle {
            addr,
            kubeconfig: config.admin_kubeconfig.clone(),
            ca: Arc::new(ca),
            ca_signs_clients: config.client_ca_file.is_none(),
            components,
            token,
            store,
            connections,
        };
        Ok((
            ApiServer {
                config,
                serving: Mutex::new(Some(serving)),
                dialer: None,
            },
            handle,
        ))
    }

    /// The control plane reaching nodes' kubelet APIs through `dialer` (cloudhub's tunnel):
    /// `pods/log`, `exec`, `attach`, `portforward` and `nodes/proxy` are served over it, and
    /// the resource metrics pipeline (`metrics.k8s.io`) scrapes each Ready node's
    /// `/metrics/resource` through it. Without one, the streams answer as a kubelet that cannot
    /// be reached and no metrics are scraped. Call before the module runs.
    pub fn with_node_dialer(mut self, dialer: Arc<dyn kapi::nodes::NodeDialer>) -> ApiServer {
        let serving = self.serving.get_mut().expect("serving lock poisoned");
        if let Some(s) = serving.as_mut() {
            let app = std::mem::take(&mut s.app);
            s.app = kapi::nodes::with_node_dialer(app, dialer.clone());
        }
        self.dialer = Some(dialer);
        self
    }
}

#[beehive::async_trait]
impl Module for ApiServer {
    fn name(&self) -> &str {
        NAME
    }

    fn group(&self) -> &str {
        NAME
    }

    fn enabled(&self) -> bool {
        self.config.enable
    }

    async fn run(
        &self,
        _ctx: Context,
        _mailbox: &mut Mailbox,
        shutdown: CancellationToken,
    ) -> Result<(), ModuleError> {
        let Some(s) = self.serving.lock().expect("serving lock poisoned").take() else {
            return Err("the apiserver listener was already used by an earlier run".into());
        };
        let tasks = TaskTracker::new();
        tasks.spawn(rbac::aggregation::run(s.api.clone(), shutdown.clone()));
        if let Some(dialer) = &self.dialer {
            let scraper = metrics_api::Scraper {
                store: s.api.store.clone(),
                dialer: dialer.clone(),
                storage: s.metrics.clone(),
                config: self.config.metrics_server.clone(),
            };
            tasks.spawn(scraper.run(shutdown.clone()));
        }
        tasks.spawn(kept::keep(s.api, s.address, shutdown.clone()));
        let config = self.config.serve_config();
        let (tls, stats) = (Some(s.tls), s.connections);
        kapi::serve(
            s.listener,
            tls,
            s.app,
            config,
            stats,
            shutdown,
            tasks.clone(),
        )
        .await;
        tasks.close();
        if tokio::time::timeout(Duration::from_secs(5), tasks.wait())
            .await
            .is_err()
        {
            tracing::warn!("some apiserver connections were still open at shutdown");
        }
        Ok(())
    }
}

// === impl Handle ===

impl Handle {
    /// Where the control plane listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The counters of the control plane's connections.
    pub fn connections(&self) -> &kapi::ServeStats {
        &self.connections
    }

    /// The admin kubeconfig written at start.
    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    /// The CA clients must trust.
    pub fn ca_pem(&self) -> &str {
        self.ca.cert_pem()
    }

    /// The CA that signs client certificates this API server authenticates (its own CA,
    /// unless `clientCAFile` names another, whose key it does not hold): what the
    /// CertificateSigningRequest signers sign with.
    pub fn client_signing_ca(&self) -> Option<Arc<pki::Ca>> {
        self.ca_signs_clients.then(|| self.ca.clone())
    }

    /// The health probes `componentstatuses` reports (the scheduler and the controllers
    /// register theirs).
    pub fn components(&self) -> &Components {
        &self.components
    }

    /// The admin bearer token.
    pub fn token(&self) -> &str {
        &self.token
    }

    /// A client certificate for `node` (CN `system:node:<node>`, O `system:nodes`), signed by
    /// the API server's CA.
    pub fn issue_node_cert(&self, node: &str) -> Result<pki::CertifiedKey, pki::PkiError> {
        self.ca.issue_node(node, Duration::from_secs(365 * 86400))
    }

    /// The control plane's store (tests and benchmarks read it directly).
    pub fn store(&self) -> &objstore::Store {
        &self.store
    }
}

/// The REST layer over the store: reads are authorized by [`auth::ReadAuthorizer`]; writes go
/// through NodeRestriction (Node rules or RBAC), then the review APIs, then TokenRequest, then
/// the local backend. The bootstrap RBAC policy is reconciled and aggregated before it serves.
async fn build_api(
    writer: objstore::Writer,
    tokens: tokens::Tokens,
    authenticator: Arc<auth::Authenticator>,
    ranges: apimachinery::alloc::ServiceRanges,
) -> Result<Api, ApiServerError> {
    let registry = Registry::new(apimachinery::catalog::builtins());
    registry.upsert(metrics_api::resources());
    let store = writer.reader();
    let local = LocalBackend::new(writer, registry.clone(), ranges);
    kapi::local::register_existing_crds(&store, &registry)
        .await
        .map_err(|e| ApiServerError::Bootstrap(e.to_string()))?;
    local
        .ensure_namespaces(SYSTEM_NAMESPACES)
        .await
        .map_err(|e| ApiServerError::Bootstrap(e.to_string()))?;
    let token_requests = Arc::new(tokens::TokenRequests {
        inner: local,
        tokens,
    });
    let rbac = rbac::Rbac::new(store.clone());
    let reviews = Arc::new(rbac::Reviews {
        inner: token_requests,
        rbac: rbac.clone(),
        authenticator,
    });
    let backend = Arc::new(auth::NodeRestriction {
        inner: reviews,
        store: store.clone(),
        rbac: rbac.clone(),
    });
    let authorizer = Arc::new(auth::ReadAuthorizer {
        store: store.clone(),
        rbac,
    });
    let api = Api {
        registry,
        store,
        backend,
        version: version(),
        default_user: None,
        authorizer: Some(authorizer),
    };
    let bootstrap =
        |e: apimachinery::ApiError| ApiServerError::Bootstrap(format!("RBAC policy: {e}"));
    rbac::bootstrap::reconcile(&api).await.map_err(bootstrap)?;
    rbac::aggregation::settle(&api).await.map_err(bootstrap)?;
    Ok(api)
}

/// The `/version` answer: Kubernetes 1.32's API, this build's commit, tree state and date
/// (from `build.rs`), and the compiler in `goVersion`'s place.
fn version() -> serde_json::Value {
    let arch = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    };
    serde_json::json!({
        "major": "1",
        "minor": "32",
        "gitVersion": "v1.32.0-kubeedge-rs",
        "gitCommit": env!("APISERVER_GIT_COMMIT"),
        "gitTreeState": env!("APISERVER_GIT_TREE_STATE"),
        "buildDate": env!("APISERVER_BUILD_DATE"),
        "goVersion": env!("APISERVER_RUSTC_VERSION"),
        "compiler": "rustc",
        "platform": format!("{}/{arch}", std::env::consts::OS),
    })
}

fn serving_cert(config: &Config, ca: &pki::Ca) -> Result<pki::CertifiedKey, ApiServerError> {
    let (cert, key) = (&config.tls_cert_file, &config.tls_private_key_file);
    if cert.exists() || key.exists() {
        return Ok(pki::CertifiedKey {
            cert_pem: pki::read_pem(cert)?,
            key_pem: pki::read_pem(key)?,
        });
    }
    let mut hosts: Vec<String> = [
        "localhost",
        "127.0.0.1",
        "kubernetes",
        "kubernetes.default",
        "kubernetes.default.svc",
    ]
    .into_iter()
    .map(String::from)
    .collect();
    if !config.bind_address.ip().is_unspecified() {
        hosts.push(config.bind_address.ip().to_string());
    }
    hosts.extend(config.extra_sans.iter().cloned());
    hosts.dedup();
    let made = ca.issue_server(&hosts, Duration::from_secs(10 * 365 * 86400))?;
    pki::write_pem(cert, &made.cert_pem)?;
    pki::write_pem(key, &made.key_pem)?;
    Ok(made)
}

fn admin_token(path: &Path) -> Result<String, ApiServerError> {
    if let Ok(token) = std::fs::read_to_string(path) {
        return Ok(token.trim().to_string());
    }
    use rand::distr::{Alphanumeric, SampleString};
    let token = Alphanumeric.sample_string(&mut rand::rng(), 40);
    kubeconfig::write(path, &token).map_err(|source| ApiServerError::Io {
        op: "writing the admin token",
        path: path.into(),
        source,
    })?;
    Ok(token)
}

fn open_store(config: &Config) -> Result<objstore::Writer, ApiServerError> {
    let path = &config.data_source;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|source| ApiServerError::Io {
            op: "creating",
            path: dir.into(),
            source,
        })?;
    }
    let store_config = objstore::StoreConfig {
        retention: config.change_log_retention,
        ..Default::default()
    };
    Ok(objstore::Writer::open(path, store_config)?)
}
