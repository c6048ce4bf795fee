//! An edge in one process for lwproxy's tests: metamanager over a real SQLite file, lwproxy on
//! `127.0.0.1:0`, and a stand-in for the cloud registered as `edgehub` that answers every
//! forwarded write with a [`ForwardedReply`] and records what it was sent.

#![allow(dead_code)] // each test binary uses part of the harness

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use apimachinery::{ApiError, ForwardedReply, ForwardedWrite};
use beehive::{Context, Mailbox, Message, Module, ModuleError, Operation, Running, Runtime};
use lwproxy::Link;
use metamanager::MetaManager;
use objstore::{Store, StoreConfig, Writer};
use serde_json::{Value, json};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// How long any step may take.
pub const WAIT: Duration = Duration::from_secs(5);

/// A forwarded write as the stand-in cloud received it.
#[derive(Clone, Debug)]
pub struct Received {
    pub msg: Message,
    pub write: ForwardedWrite,
}

/// Where an edge keeps its store across restarts.
pub struct Node {
    dir: tempfile::TempDir,
}

/// A running edge.
pub struct Edge {
    pub store: Store,
    /// The cloud's way into the store (none when metamanager does not run).
    downstream: Option<metamanager::Downstream>,
    pub proxy: lwproxy::Handle,
    pub link: watch::Sender<Link>,
    pub received: Arc<Mutex<Vec<Received>>>,
    /// While set, the stand-in answers like edgehub that lost its link (an `error` response).
    pub refusing: Arc<AtomicBool>,
    /// What the stand-in does with the writes it takes.
    pub answering: Arc<Mutex<Answering>>,
    running: Running,
}

/// How the stand-in cloud answers the writes it takes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Answering {
    /// With [`cloud_answer`].
    #[default]
    Normally,
    /// Not at all: the write is taken (and recorded) and the answer never comes.
    Never,
    /// The link drops after the write was sent: edgehub's [`edgehub::LINK_LOST`] error.
    LinkLost,
}

/// Stands in for edgehub and the cloud behind it.
struct Cloud {
    received: Arc<Mutex<Vec<Received>>>,
    refusing: Arc<AtomicBool>,
    answering: Arc<Mutex<Answering>>,
}

// === impl Node ===

impl Node {
    pub fn new() -> Node {
        Node {
            dir: tempfile::tempdir().expect("a temporary directory"),
        }
    }

    pub fn db(&self) -> PathBuf {
        self.dir.path().join("edge.db")
    }

    /// Starts an edge over this node's store, linked to the cloud or not.
    pub async fn start(&self, online: bool) -> Edge {
        Edge::start(&self.db(), online, Edge::config()).await
    }

    /// Like [`Node::start`] with this lwproxy config.
    pub async fn start_with(&self, online: bool, config: lwproxy::Config) -> Edge {
        Edge::start(&self.db(), online, config).await
    }

    /// An offline edge whose metamanager module never runs (as if the process stopped
    /// before it took a message): only what lwproxy writes to the store itself happens.
    pub async fn start_without_metamanager(&self) -> Edge {
        Edge::start_modules(&self.db(), false, Edge::config(), false).await
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Stores `obj` as the cloud's version straight into the store, before an edge starts
    /// (no metamanager).
    pub async fn seed(&self, resource: &str, obj: Value) {
        let meta = &obj["metadata"];
        let text = |k: &str| meta[k].as_str().unwrap_or_default().to_owned();
        let key = objstore::ObjKey::new(resource, text("namespace"), text("name"));
        let bytes = serde_json::to_vec(&obj).expect("JSON");
        let parsed = metamanager::object::Parsed::from_json(resource, &bytes).expect("an object");
        let rv = parsed.resource_version.clone();
        let store = Writer::open(self.db(), StoreConfig::default()).expect("the edge store opens");
        let new = parsed.into_new_object(resource, &rv, store.revision() + 1);
        store.put(key, new).await.expect("stored");
    }
}

// === impl Edge ===

impl Edge {
    /// lwproxy on an ephemeral loopback port.
    pub fn config() -> lwproxy::Config {
        lwproxy::Config {
            server: "127.0.0.1:0".parse().expect("an address"),
            ..Default::default()
        }
    }

    async fn start(db: &Path, online: bool, config: lwproxy::Config) -> Edge {
        Edge::start_modules(db, online, config, true).await
    }

    async fn start_modules(
        db: &Path,
        online: bool,
        config: lwproxy::Config,
        with_metamanager: bool,
    ) -> Edge {
        let writer = Writer::open(db, StoreConfig::default()).expect("the edge store opens");
        let meta = metamanager::Handle::new(writer);
        let store = meta.reader();
        let state = if online { connected() } else { Link::Down };
        let (link, link_rx) = watch::channel(state);
        let (proxy, handle) = lwproxy::LwProxy::bind(config, meta.clone(), link_rx)
            .await
            .expect("lwproxy binds");
        let received = Arc::default();
        let refusing = Arc::default();
        let answering = Arc::default();
        let mut runtime = Runtime::new();
        let mut downstream = None;
        if with_metamanager {
            let module = MetaManager::new(metamanager::Config::default(), meta);
            downstream = Some(module.downstream());
            runtime.register(module);
        }
        runtime.register(proxy);
        runtime.register(Cloud {
            received: Arc::clone(&received),
            refusing: Arc::clone(&refusing),
            answering: Arc::clone(&answering),
        });
        let running = runtime
            .start(CancellationToken::new())
            .expect("modules start");
        Edge {
            store,
            downstream,
            proxy: handle,
            link,
            received,
            refusing,
            answering,
            running,
        }
    }

    pub async fn stop(self) {
        let report = self.running.shutdown(WAIT).await;
        assert!(
            report.timed_out.is_empty(),
            "stuck modules: {:?}",
            report.timed_out
        );
    }

    pub fn go_offline(&self) {
        self.link.send_replace(Link::Down);
    }

    /// The link still counts as up, but edgehub refuses to send (it just dropped).
    pub fn refuse_to_send(&self) {
        self.refusing.store(true, Ordering::Relaxed);
    }

    /// From now on the stand-in cloud answers writes this way.
    pub fn answer(&self, how: Answering) {
        *self.answering.lock().expect("not poisoned") = how;
    }

    /// A kube client for lwproxy. It does not retry: kube-rs would retry an offline 503 for
    /// minutes.
    pub fn client(&self) -> kube::Client {
        let url = self.proxy.url().parse().expect("a URI");
        let mut config = kube::Config::new(url);
        config.default_retry = false;
        kube::Client::try_from(config).expect("a client")
    }

    /// Stores `obj` (of store resource `resource`) as the cloud's version, through
    /// metamanager, as edgehub delivers a downstream object; returns once it is committed.
    pub async fn downstream(&self, resource: &str, obj: Value) {
        self.send_down(resource, obj, Operation::Update).await
    }

    /// Removes `obj` the way the cloud's delete does.
    pub async fn downstream_delete(&self, resource: &str, obj: Value) {
        self.send_down(resource, obj, Operation::Delete).await
    }

    async fn send_down(&self, resource: &str, obj: Value, operation: Operation) {
        let meta = &obj["metadata"];
        let text = |k: &str| meta[k].as_str().unwrap_or_default().to_owned();
        let target = format!("{}/{resource}/{}", text("namespace"), text("name"));
        let msg = Message::new()
            .route(
                metamanager::HUB_MODULE,
                metamanager::GROUP,
                target,
                operation,
            )
            .with_resource_version(text("resourceVersion"))
            .with_content(serde_json::to_vec(&obj).expect("JSON"));
        let downstream = self.downstream.as_ref().expect("metamanager runs");
        let resp = tokio::time::timeout(WAIT, downstream.apply(msg))
            .await
            .expect("metamanager answers in time")
            .expect("metamanager answers");
        assert_eq!(resp.router.operation, Operation::Response, "{resp:?}");
    }

    pub fn received(&self) -> Vec<Received> {
        self.received.lock().expect("not poisoned").clone()
    }
}

/// `(method, path)` of the request the cloud makes of `write`, parsed as edgecontroller does.
pub fn request_line(write: &ForwardedWrite) -> (&'static str, String) {
    use apimachinery::forward::{KnownResource, NodeRequest};
    let builtins = apimachinery::catalog::builtins();
    let known = |g: &str, v: &str, p: &str| {
        builtins
            .iter()
            .find(|i| (i.group.as_str(), i.version.as_str(), i.plural.as_str()) == (g, v, p))
            .map(KnownResource::of)
    };
    let req = NodeRequest::parse(write.clone(), known).expect("a well-formed write");
    (req.method(), req.path())
}

pub fn connected() -> Link {
    Link::Up
}

/// What the stand-in cloud answers: a 403 for a delete; otherwise a Pod (a Lease for leases)
/// with the written object's name and namespace, the cloud's resourceVersion `9999` and an
/// annotation saying who answered, with 201 for a create and 200 for the rest, as the API.
pub fn cloud_answer(write: &ForwardedWrite) -> ForwardedReply {
    if write.verb == "delete" {
        let why = "node \"n1\" may not delete this pod";
        let denied = ApiError::forbidden(&write.group, &write.resource, &write.name, why);
        return ForwardedReply::from_error(&denied);
    }
    let (kind, api_version) = match write.resource.as_str() {
        "leases" => ("Lease", "coordination.k8s.io/v1"),
        _ => ("Pod", "v1"),
    };
    let body = json!({
        "kind": kind,
        "apiVersion": api_version,
        "metadata": {
            "name": write.object_name(),
            "namespace": write.namespace,
            "uid": "u-cloud",
            "resourceVersion": "9999",
            "annotations": {"answered-by": "cloud", "verb": write.verb},
        },
    });
    let code = if write.verb == "create" { 201 } else { 200 };
    ForwardedReply { code, body }
}

pub fn pod(name: &str, node: &str, rv: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "default",
            "uid": format!("uid-{name}"),
            "resourceVersion": rv,
            "creationTimestamp": "2024-01-01T00:00:00Z",
        },
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "nginx"}]},
        "status": {"phase": "Pending"},
    })
}

pub fn service(name: &str, cluster_ip: &str, rv: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": name,
            "namespace": "default",
            "uid": format!("uid-{name}"),
            "resourceVersion": rv,
        },
        "spec": {"clusterIP": cluster_ip, "ports": [{"port": 80}]},
    })
}

// === impl Cloud ===

#[beehive::async_trait]
impl Module for Cloud {
    fn name(&self) -> &str {
        edgehub::NAME
    }

    fn group(&self) -> &str {
        edgehub::GROUP
    }

    async fn run(
        &self,
        ctx: Context,
        mailbox: &mut Mailbox,
        shutdown: CancellationToken,
    ) -> Result<(), ModuleError> {
        loop {
            let msg = tokio::select! {
                biased;
                _ = shutdown.cancelled() => return Ok(()),
                m = mailbox.recv() => match m {
                    Some(m) => m,
                    None => return Ok(()),
                },
            };
            if msg.router.source != lwproxy::NAME || !msg.header.sync {
                continue; // metamanager's commit reports
            }
            if self.refusing.load(Ordering::Relaxed) {
                let why = "the cloud is unreachable: edgehub has no link to cloudhub";
                let _ = ctx.respond(msg.error_response(edgehub::NAME, why));
                continue;
            }
            let write: ForwardedWrite =
                serde_json::from_slice(&msg.content).expect("a forwarded write");
            let content = serde_json::to_vec(&cloud_answer(&write)).expect("JSON");
            let resp = match *self.answering.lock().expect("not poisoned") {
                Answering::Normally => Some(msg.response(edgehub::NAME, content)),
                Answering::Never => None,
                Answering::LinkLost => Some(msg.error_response(edgehub::NAME, edgehub::LINK_LOST)),
            };
            self.received
                .lock()
                .expect("not poisoned")
                .push(Received { msg, write });
            if let Some(resp) = resp {
                let _ = ctx.respond(resp);
            }
        }
    }
}
