//! cloudcore: the cloud daemon. It loads `cloudcore.yaml`, registers the enabled cloud modules
//! with beehive and serves the monitor endpoints: the embedded control plane (apiserver, on
//! when `kubeAPIConfig.kubeConfig` is empty), cloudhub (the cloud end of the link) and
//! edgecontroller (what each node holds, from the Kubernetes API reached through the same
//! `kube` client code either way). [`start_with`] lets a caller add its own modules (link tests
//! use it for a stand-in controller, with edgecontroller disabled).
#![forbid(unsafe_code)]

mod config;
mod dialer;
pub mod stream;

use std::net::SocketAddr;

use std::sync::Arc;

use anyhow::Context as _;
use apiserver::ApiServer;
use beehive::Module;
use cloudhub::CloudHub;
use daemon::Core;
use daemon::cli::{Daemon, check_type};
use daemon::core::ExtraMetrics;
use tokio_util::sync::CancellationToken;

pub use config::{API_VERSION, Config, KIND, Modules};

/// The daemon, as the shared command line sees it.
pub struct CloudCore;

/// A started cloudcore.
pub struct Running {
    core: Core,
    hub: Option<cloudhub::Handle>,
    api: Option<apiserver::Handle>,
    controller: Option<edgecontroller::Handle>,
    kubeconfig: Option<std::path::PathBuf>,
    stream: Option<SocketAddr>,
}

/// Starts cloudcore: every enabled module and listener. Returns once all listeners are bound.
pub async fn start(config: Config, shutdown: CancellationToken) -> anyhow::Result<Running> {
    start_with(config, shutdown, Vec::new()).await
}

/// Like [`start`], with extra modules registered beside the built-in ones.
pub async fn start_with(
    config: Config,
    shutdown: CancellationToken,
    extra: Vec<Arc<dyn Module>>,
) -> anyhow::Result<Running> {
    let capacity = config.common_config.mailbox_size.get();
    let mut runtime = beehive::Runtime::new().with_default_capacity(capacity);
    let mut api = None;
    let dialer = dialer::new();
    let kubeconfig = match config.kube_api_config.kube_config.as_os_str().is_empty() {
        false => Some(config.kube_api_config.kube_config.clone()),
        true if config.modules.api_server.enable => {
            let (module, handle) = ApiServer::bind(config.modules.api_server.clone())
                .await
                .context("starting modules.apiServer (the embedded control plane)")?;
            // The kubelet streams (logs, exec, port-forward, nodes/proxy) go through cloudhub,
            // bound below.
            runtime.register(module.with_node_dialer(dialer.clone()));
            let path = handle.kubeconfig().to_path_buf();
            api = Some(handle);
            Some(path)
        }
        true => None,
    };
    let mut hub = None;
    if config.modules.cloud_hub.enable {
        // The certificate service keeps its tokens and join records in the Kubernetes API.
        let kube = match &kubeconfig {
            Some(path) => Some(kube_client(path).await?),
            None => None,
        };
        let (module, handle) =
            CloudHub::bind_with(config.modules.cloud_hub.clone(), shutdown.clone(), kube)
                .await
                .context("starting modules.cloudHub")?;
        runtime.register(module);
        dialer.bind(handle.clone());
        hub = Some(handle);
    }
    let stream = match config.modules.cloud_stream.enable {
        true => {
            Some(cloud_stream(&config, &mut runtime, &hub, kubeconfig.as_deref(), &dialer).await?)
        }
        false => None,
    };
    let mut controller = None;
    if config.modules.edge_controller.enable && kubeconfig.is_none() {
        tracing::warn!(
            "modules.edgeController is enabled but there is no Kubernetes API (kubeAPIConfig.kubeConfig is empty and modules.apiServer is disabled): edgecontroller does not run"
        );
    }
    if config.modules.edge_controller.enable
        && let Some(path) = &kubeconfig
    {
        let client = kube_client(path).await?;
        let (mut module, handle) =
            edgecontroller::EdgeController::new(config.modules.edge_controller.clone(), client)
                .context("starting modules.edgeController")?;
        if let Some(hub) = &hub {
            module = module.with_hub(hub.clone());
        }
        runtime.register(module);
        controller = Some(handle);
    }
    if config.modules.controllers.enable
        && let Some(handle) = &api
    {
        let client = kube_client(handle.kubeconfig()).await?;
        let mut module = controllers::Controllers::new(config.modules.controllers.clone(), client);
        if let Some(ca) = handle.client_signing_ca() {
            module = module.with_signer(ca);
        }
        let live = module.liveness();
        let scheduler = live.clone();
        let components = handle.components();
        components.register(
            apiserver::SCHEDULER,
            Arc::new(move || scheduler.scheduler()),
        );
        components.register(
            apiserver::CONTROLLER_MANAGER,
            Arc::new(move || live.controllers()),
        );
        runtime.register(module);
    }
    if config.modules.sites.enable
        && let Some(path) = &kubeconfig
    {
        // Unlike `controllers`, these run against a real cluster too.
        let client = kube_client(path).await?;
        runtime.register(sites::Sites::new(config.modules.sites.clone(), client));
    }
    for module in extra {
        runtime.register_with_capacity(module, capacity);
    }
    let (h, c) = (hub.clone(), controller.clone());
    let metrics: Option<ExtraMetrics> = Some(Arc::new(
        move |reg: &mut prometheus_client::registry::Registry| {
            if let Some(h) = &h {
                h.register_metrics(reg);
            }
            if let Some(c) = &c {
                c.register_metrics(reg);
            }
        },
    ));
    log_files(&config, api.is_some(), kubeconfig.as_deref());
    let core = Core::start(
        "cloudcore",
        &config.common_config,
        runtime,
        metrics,
        shutdown,
    )
    .await?;
    Ok(Running {
        core,
        hub,
        api,
        controller,
        kubeconfig,
        stream,
    })
}

/// Binds `modules.cloudStream` and registers it: nodes looked up in the Kubernetes API at
/// `kubeconfig`, their kubelet APIs reached through cloudhub. Returns the bound address.
async fn cloud_stream(
    config: &Config,
    runtime: &mut beehive::Runtime,
    hub: &Option<cloudhub::Handle>,
    kubeconfig: Option<&std::path::Path>,
    dialer: &Arc<dialer::HubDialer>,
) -> anyhow::Result<SocketAddr> {
    let (Some(_), Some(path)) = (hub, kubeconfig) else {
        anyhow::bail!(
            "modules.cloudStream needs modules.cloudHub (the nodes' links) and a Kubernetes API (kubeAPIConfig.kubeConfig or modules.apiServer)"
        );
    };
    let client = kube_client(path).await?;
    let stream = &config.modules.cloud_stream;
    let (module, addr) =
        stream::CloudStream::bind(stream, &config.modules.cloud_hub, dialer.clone(), client)
            .await
            .context("starting modules.cloudStream")?;
    runtime.register(module);
    tracing::info!(
        %addr,
        client_ca = %stream.client_ca_file.display(),
        cert = %stream.tls_stream_cert_file.display(),
        "cloudStream: the nodes' kubelet APIs for kube-apiserver"
    );
    Ok(addr)
}

/// Says where the files an operator looks for are: the CAs, the certificates, the admin
/// kubeconfig and the database.
fn log_files(config: &Config, embedded: bool, kubeconfig: Option<&std::path::Path>) {
    let hub = &config.modules.cloud_hub;
    if hub.enable {
        tracing::info!(
            ca = %hub.tls_ca_file.display(),
            ca_key = %hub.tls_ca_key_file.display(),
            cert = %hub.tls_cert_file.display(),
            key = %hub.tls_private_key_file.display(),
            "cloudhub CA (it signs node certificates) and server certificate"
        );
    }
    let api = &config.modules.api_server;
    match kubeconfig {
        Some(path) if embedded => tracing::info!(
            bind_address = %api.bind_address,
            admin_kubeconfig = %path.display(),
            database = %api.data_source.display(),
            ca = %api.tls_ca_file.display(),
            cert = %api.tls_cert_file.display(),
            "embedded control plane: admin kubeconfig, database and certificates"
        ),
        Some(path) => tracing::info!(kubeconfig = %path.display(), "Kubernetes API of a cluster"),
        None => {}
    }
}

/// A Kubernetes client from a kubeconfig file (the real cluster's, or the embedded one's).
async fn kube_client(path: &std::path::Path) -> anyhow::Result<kube::Client> {
    let what = || format!("reading kubeAPIConfig.kubeConfig {}", path.display());
    let kubeconfig = kube::config::Kubeconfig::read_from(path).with_context(what)?;
    let options = kube::config::KubeConfigOptions::default();
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &options)
        .await
        .with_context(what)?;
    kube::Client::try_from(config).with_context(what)
}

// === impl Running ===

impl Running {
    /// The bound monitor address, if the monitor server is enabled.
    pub fn monitor_addr(&self) -> Option<SocketAddr> {
        self.core.monitor_addr()
    }

    /// The embedded control plane's handle, if it runs.
    pub fn api(&self) -> Option<&apiserver::Handle> {
        self.api.as_ref()
    }

    /// The kubeconfig cloudcore's Kubernetes clients use: `kubeAPIConfig.kubeConfig`, or the
    /// embedded control plane's admin kubeconfig.
    pub fn kubeconfig(&self) -> Option<&std::path::Path> {
        self.kubeconfig.as_deref()
    }

    /// edgecontroller's handle (readiness, counters), if enabled.
    pub fn controller(&self) -> Option<&edgecontroller::Handle> {
        self.controller.as_ref()
    }

    /// cloudhub's handle (bound addresses, CA, counters), if enabled.
    pub fn hub(&self) -> Option<&cloudhub::Handle> {
        self.hub.as_ref()
    }

    /// Where `modules.cloudStream` listens, if enabled.
    pub fn stream_addr(&self) -> Option<SocketAddr> {
        self.stream
    }

    /// A context for sending into the module runtime.
    pub fn context(&self) -> beehive::Context {
        self.core.context()
    }
}

impl From<Running> for Core {
    fn from(running: Running) -> Core {
        running.core
    }
}

// === impl CloudCore ===

impl Daemon for CloudCore {
    const NAME: &'static str = "cloudcore";
    const DEFAULT_CONFIG: &'static str = "/etc/kubeedge/config/cloudcore.yaml";
    const LOG_ENV: &'static str = "CLOUDCORE_LOG";
    const DEFAULT_LOG: &'static str = "warn,cloudcore=info,daemon=info,cloudhub=info";

    type Config = Config;
    type Running = Running;

    fn minimal_config() -> String {
        format!("apiVersion: {API_VERSION}\nkind: {KIND}\nmodules: {{}}\n")
    }

    fn check(config: &Config) -> Result<(), String> {
        check_type(&config.api_version, &config.kind, API_VERSION, KIND)
    }

    async fn start(config: Config, shutdown: CancellationToken) -> anyhow::Result<Running> {
        start(config, shutdown).await
    }
}
