//! edgecore: the edge daemon. It loads `edgecore.yaml`, opens the edge store, registers the
//! enabled edge modules with beehive and serves the monitor endpoints. Built so far:
//! metamanager (the edge store module), edgehub (the link to cloudhub), lwproxy (the local
//! Kubernetes endpoint for kubelet, kube-proxy and kubectl) and edged (the node's pods on
//! containerd, off by default).
#![forbid(unsafe_code)]

mod config;
pub mod edgestream;
mod tunnels;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use anyhow::Context as _;
use daemon::cli::{Daemon, check_type};
use daemon::monitor::Readiness;
use daemon::{Core, Probes};
use edgehub::LinkState;
use metamanager::MetaManager;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

pub use config::{API_VERSION, Config, KIND, Modules};

/// The daemon, as the shared command line sees it.
pub struct EdgeCore;

/// A started edgecore.
pub struct Running {
    core: Core,
    meta: metamanager::Handle,
    hub: Option<edgehub::Handle>,
    proxy: Option<lwproxy::Handle>,
    dns: Option<edgedns::Handle>,
}

/// Starts edgecore: every enabled module and listener. Returns once all listeners are bound.
pub async fn start(config: Config, shutdown: CancellationToken) -> anyhow::Result<Running> {
    // metamanager owns the store's writer; everyone else gets read handles from it.
    let meta = metamanager::Handle::new(open_store(&config.database)?);
    let capacity = config.common_config.mailbox_size.get();
    let mut runtime = beehive::Runtime::new().with_default_capacity(capacity);
    let meta_module = MetaManager::new(config.modules.meta_manager.clone(), meta.clone());
    // The cloud's objects reach the store only through the link.
    let downstream = meta_module.downstream();
    runtime.register(meta_module);
    let mut hub = None;
    let kubelet_api = tunnels::KubeletApi::default();
    let forward = kubelet_forward(&config)?;
    if config.modules.edge_hub.enable {
        let hub_config = config.modules.edge_hub.clone();
        let (module, handle) = edgehub::EdgeHub::new(hub_config, meta.clone(), downstream)
            .context("starting modules.edgeHub")?;
        let server = tunnels::server(kubelet_api.clone(), forward, shutdown.clone());
        let module = module.with_tunnels(server);
        let files = &config.modules.edge_hub;
        tracing::info!(
            node_id = handle.node(),
            ca = %files.tls_ca_file.display(),
            cert = %files.tls_cert_file.display(),
            key = %files.tls_private_key_file.display(),
            servers = ?files.endpoints().1,
            "edge node identity from its certificate"
        );
        runtime.register(module);
        hub = Some(handle);
    }
    let link = match &hub {
        Some(hub) => link_of(hub.state(), shutdown.clone()),
        None => never_linked(),
    };
    let mut proxy = None;
    if config.modules.lw_proxy.enable {
        let (module, handle) =
            lwproxy::LwProxy::bind(config.modules.lw_proxy.clone(), meta.clone(), link.clone())
                .await
                .context("starting modules.lwProxy")?;
        runtime.register(module);
        proxy = Some(handle);
    }
    let mut dns = None;
    if config.modules.edge_dns.enable {
        let dns_config = config.modules.edge_dns.clone();
        let (module, handle) = edgedns::EdgeDns::bind(dns_config, meta.reader())
            .await
            .context("starting modules.edgeDNS")?;
        runtime.register(module);
        dns = Some(handle);
    }
    if config.modules.edged.enable {
        let Some(proxy) = &proxy else {
            anyhow::bail!(
                "modules.edged needs modules.lwProxy: edged reports status through its API in-process"
            );
        };
        let node = hub
            .as_ref()
            .map(|h| h.node().to_string())
            .unwrap_or_default();
        let module = edged::Edged::new(
            edged_config(&config),
            node,
            meta.reader(),
            proxy.api(),
            link,
        )
        .await
        .context("starting modules.edged")?;
        let _ = kubelet_api.set(module.kubelet_api());
        runtime.register(module);
    }
    let store_ready = meta.clone();
    let readiness = Readiness::default().with("edge-store", move || store_ready.ready());
    let probes = Probes {
        readiness,
        ..probes(&meta, hub.clone(), proxy.clone())
    };
    let common = &config.common_config;
    let core = Core::start_with("edgecore", common, runtime, probes, shutdown).await?;
    Ok(Running {
        core,
        meta,
        hub,
        proxy,
        dns,
    })
}

/// The forward to a native kubelet, with `modules.edgeStream` on (and edged off).
fn kubelet_forward(config: &Config) -> anyhow::Result<Option<Arc<edgestream::Forward>>> {
    let stream = &config.modules.edge_stream;
    if !stream.enable {
        return Ok(None);
    }
    if config.modules.edged.enable {
        anyhow::bail!(
            "modules.edgeStream forwards the kubelet API to a native kubelet, and modules.edged serves it itself: enable one of them"
        );
    }
    let forward = edgestream::Forward::new(stream).context("starting modules.edgeStream")?;
    tracing::info!(
        endpoint = %stream.kubelet_endpoint,
        "the cloud's kubelet API streams go to the native kubelet"
    );
    Ok(Some(Arc::new(forward)))
}

/// edged's settings: with edgeDNS on and no `clusterDNS` of its own, `ClusterFirst` pods get
/// the node-local DNS address (and edgeDNS's domain) in their resolv.conf.
fn edged_config(config: &Config) -> edged::Config {
    let mut edged = config.modules.edged.clone();
    let dns = &config.modules.edge_dns;
    if dns.enable && edged.cluster_dns.is_empty() {
        edged.cluster_dns = vec![dns.listen_address.ip().to_string()];
        edged.cluster_domain = dns.cluster_domain.clone();
    }
    edged
}

/// The node's metrics: edgehub's link state, lwproxy's refusals and the depth of
/// metamanager's outbox (counted before each scrape, as the store is read asynchronously).
fn probes(
    meta: &metamanager::Handle,
    hub: Option<edgehub::Handle>,
    proxy: Option<lwproxy::Handle>,
) -> Probes {
    let depth = Arc::new(AtomicI64::new(0));
    let (store, counted) = (meta.reader(), depth.clone());
    let refresh: daemon::monitor::Refresh = Arc::new(move || {
        let (store, counted) = (store.clone(), counted.clone());
        Box::pin(async move {
            // A store that cannot be read shows -1: the depth is unknown.
            let n = store.outbox_len().await.map_or(-1, |n| n as i64);
            counted.store(n, Ordering::Relaxed);
        })
    });
    let metrics: daemon::core::ExtraMetrics = Arc::new(move |registry| {
        registry.register(
            "metamanager_outbox_depth",
            "Upstream messages waiting in the outbox for the cloud's ack",
            prometheus_client::metrics::gauge::ConstGauge::new(depth.load(Ordering::Relaxed)),
        );
        if let Some(hub) = &hub {
            hub.register_metrics(registry);
        }
        if let Some(proxy) = &proxy {
            proxy.register_metrics(registry);
        }
    });
    Probes {
        metrics: Some(metrics),
        refresh: Some(refresh),
        ..Probes::default()
    }
}

/// The link state of an edge without edgehub: never connected, so lwproxy forwards nothing
/// and edged pulls no image it has.
fn never_linked() -> watch::Receiver<lwproxy::Link> {
    // The receiver keeps the last value after its sender is gone.
    watch::channel(lwproxy::Link::Down).1
}

/// edgehub's link state as lwproxy and edged see it, followed until shutdown or until edgehub
/// is gone (they then keep the last state).
fn link_of(
    mut hub: watch::Receiver<LinkState>,
    shutdown: CancellationToken,
) -> watch::Receiver<lwproxy::Link> {
    let up = |state: &LinkState| match state {
        LinkState::Connected { .. } => lwproxy::Link::Up,
        LinkState::Disconnected => lwproxy::Link::Down,
    };
    let (tx, rx) = watch::channel(up(&hub.borrow_and_update()));
    tokio::spawn(async move {
        loop {
            tokio::select! {
                biased;
                _ = shutdown.cancelled() => return,
                changed = hub.changed() => if changed.is_err() {
                    return;
                },
            }
            tx.send_replace(up(&hub.borrow_and_update()));
        }
    });
    rx
}

/// Opens the edge store; errors name the file and how to recover from a damaged one.
fn open_store(db: &metamanager::DatabaseConfig) -> anyhow::Result<objstore::Writer> {
    let path = &db.data_source;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| {
            format!(
                "creating the directory of database.dataSource {}",
                path.display()
            )
        })?;
    }
    let store = objstore::Writer::open(path, db.store_config()).with_context(|| {
        format!(
            "opening database.dataSource {} (with database.onCorrupt: rebuild a damaged file is \
             moved aside and the node resyncs from the cloud)",
            path.display()
        )
    })?;
    tracing::info!(path = %path.display(), revision = store.revision(), "edge store open");
    Ok(store)
}

// === impl Running ===

impl Running {
    /// The bound monitor address, if the monitor server is enabled.
    pub fn monitor_addr(&self) -> Option<SocketAddr> {
        self.core.monitor_addr()
    }

    /// edgehub's handle (node name, link state, counters), if enabled.
    pub fn hub(&self) -> Option<&edgehub::Handle> {
        self.hub.as_ref()
    }

    /// lwproxy's handle (its bound address), if enabled.
    pub fn lwproxy(&self) -> Option<&lwproxy::Handle> {
        self.proxy.as_ref()
    }

    /// edgedns's handle (its bound UDP and TCP addresses), if enabled.
    pub fn dns(&self) -> Option<&edgedns::Handle> {
        self.dns.as_ref()
    }

    /// The edge store, as metamanager shares it.
    pub fn meta(&self) -> &metamanager::Handle {
        &self.meta
    }

    /// A context for sending into the module runtime.
    pub fn context(&self) -> beehive::Context {
        self.core.context()
    }

    /// The state of one module (running, restarting, stopped).
    pub fn module_state(&self, name: &str) -> Option<beehive::ModuleState> {
        self.core.module_state(name)
    }
}

impl From<Running> for Core {
    fn from(running: Running) -> Core {
        running.core
    }
}

// === impl EdgeCore ===

impl Daemon for EdgeCore {
    const NAME: &'static str = "edgecore";
    const DEFAULT_CONFIG: &'static str = "/etc/kubeedge/config/edgecore.yaml";
    const LOG_ENV: &'static str = "EDGECORE_LOG";
    const DEFAULT_LOG: &'static str = "warn,edgecore=info,daemon=info,edgehub=info";

    type Config = Config;
    type Running = Running;

    fn minimal_config() -> String {
        format!(
            "apiVersion: {API_VERSION}\nkind: {KIND}\ndatabase:\n  dataSource: /var/lib/kubeedge/edgecore.db\n"
        )
    }

    fn check(config: &Config) -> Result<(), String> {
        check_type(&config.api_version, &config.kind, API_VERSION, KIND)
    }

    async fn start(config: Config, shutdown: CancellationToken) -> anyhow::Result<Running> {
        start(config, shutdown).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn edged_points_cluster_first_pods_at_edge_dns_when_it_is_on() {
        let mut config = Config::default();
        assert!(
            edged_config(&config).cluster_dns.is_empty(),
            "off: unchanged"
        );
        config.modules.edge_dns.enable = true;
        config.modules.edge_dns.cluster_domain = "edge.local".into();
        let edged = edged_config(&config);
        assert_eq!(edged.cluster_dns, ["169.254.20.10"]);
        assert_eq!(edged.cluster_domain, "edge.local");
        config.modules.edged.cluster_dns = vec!["10.96.0.10".into()];
        assert_eq!(
            edged_config(&config).cluster_dns,
            ["10.96.0.10"],
            "an operator's choice stays"
        );
    }
}
