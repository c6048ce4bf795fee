//! edgecontroller: decides what each edge node holds and applies what nodes write. It watches
//! the Kubernetes API (one kube-runtime watch per resource type, shared by all nodes) and keeps
//! each edge node's desired set ([`state`]): its Node and Lease, its pods, what they reference,
//! services, endpointslices and the cluster objects a kubelet reads. Every change goes to
//! cloudhub as an upsert or delete for `node/<node>/<namespace>/<resource>/<name>`; cloudhub's
//! digest and resync questions are answered from the same set (held back until every watch has
//! listed once, so a half-known state never deletes anything at the edge). Writes nodes send
//! (lwproxy's forwarded REST writes) are authorized for the sending node ([`authz`]) and
//! replayed against the API, whose answer goes back unchanged; refusals are logged and answered
//! with the API's `Status`. A node that connects without a Node gets one, with the edge label.
//!
//! An edge node is a node whose Node carries the edge label or that holds an authenticated
//! session with cloudhub (cloudhub's digest question and its `connected` / `disconnected`
//! events tell which): a Node deleted and registered again by the kubelet through lwproxy,
//! without the label, is still served. A node that loses the label stays served while connected
//! and is resynced when it connects again; it is not wiped (see [`state`] for the whole rule). A
//! connected node that is not served (it has no Node) is logged. Messages whose resource does not
//! start with `node/<node>` are refused and logged: the node name is never guessed.
#![forbid(unsafe_code)]

mod authz;
mod config;
mod error;
mod kinds;
mod replay;
mod state;
mod watch;

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use apimachinery::{ApiError, ForwardedReply, ForwardedWrite};
use beehive::{Context, Mailbox, Message, Module, ModuleError, Operation, RestartPolicy};
use serde_json::json;
use tokio::sync::{mpsc, watch as latest};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

pub use config::Config;
pub use error::ControllerError;
pub use kinds::EDGE_LABEL;

use kinds::Kind;
use state::{Obj, Out, State};
use watch::WatchEvent;

/// Module name (cloudhub's default controller module).
pub const NAME: &str = "edgecontroller";
/// Module group.
pub const GROUP: &str = "controller";

/// The edgecontroller module.
pub struct EdgeController {
    config: Config,
    kinds: Vec<Kind>,
    client: kube::Client,
    /// Which nodes have a live session (to catch up after a restart of this module alone).
    hub: Option<cloudhub::Handle>,
    ready: latest::Sender<bool>,
    stats: Arc<Stats>,
}

/// A handle for the daemon and tests.
#[derive(Clone)]
pub struct Handle {
    ready: latest::Receiver<bool>,
    stats: Arc<Stats>,
}

/// Counters since start.
#[derive(Debug, Default)]
pub struct Stats {
    /// Upserts sent to nodes.
    pub upserts: AtomicU64,
    /// Deletes sent to nodes.
    pub deletes: AtomicU64,
    /// Node writes applied (any answer from the API).
    pub writes: AtomicU64,
    /// Node writes refused by node authorization.
    pub refused: AtomicU64,
}

/// The run loop's state.
struct Run<'a> {
    ctl: &'a EdgeController,
    ctx: Context,
    state: State,
    /// Built-in kinds not listed yet; empty once ready (custom resources whose CRD is missing
    /// must not hold everything back).
    unlisted: HashSet<usize>,
    /// Digest and resync questions asked before every watch listed.
    parked: Vec<Message>,
    tasks: TaskTracker,
}

// === impl EdgeController ===

impl EdgeController {
    /// Lets edgecontroller see cloudhub's sessions: if it restarts on its own while nodes stay
    /// connected, they get their whole desired state again once every watch has listed (what
    /// changed meanwhile was not sent to them).
    pub fn with_hub(mut self, hub: cloudhub::Handle) -> Self {
        self.hub = Some(hub);
        self
    }

    /// An edgecontroller using `client` for the Kubernetes API.
    pub fn new(
        config: Config,
        client: kube::Client,
    ) -> Result<(EdgeController, Handle), ControllerError> {
        let mut kinds = Kind::builtins();
        for spec in &config.custom_resources {
            let custom = Kind::custom(spec)
                .ok_or_else(|| ControllerError::BadCustomResource(spec.clone()))?;
            kinds.extend(custom);
        }
        let (ready, ready_rx) = latest::channel(false);
        let stats = Arc::new(Stats::default());
        let handle = Handle {
            ready: ready_rx,
            stats: stats.clone(),
        };
        let ctl = EdgeController {
            config,
            kinds,
            client,
            hub: None,
            ready,
            stats,
        };
        Ok((ctl, handle))
    }
}

#[beehive::async_trait]
impl Module for EdgeController {
    fn name(&self) -> &str {
        NAME
    }

    fn group(&self) -> &str {
        GROUP
    }

    fn enabled(&self) -> bool {
        self.config.enable
    }

    fn restart_policy(&self) -> RestartPolicy {
        RestartPolicy::on_failure()
    }

    async fn run(
        &self,
        ctx: Context,
        mailbox: &mut Mailbox,
        shutdown: CancellationToken,
    ) -> Result<(), ModuleError> {
        let (tx, mut events) = mpsc::channel(1024);
        let watches = TaskTracker::new();
        let stop_watches = shutdown.child_token();
        watch::spawn(&self.client, &self.kinds, tx, &watches, &stop_watches);
        let mut run = Run {
            ctl: self,
            ctx,
            state: State::new(self.kinds.clone()),
            unlisted: (0..Kind::builtins().len()).collect(),
            parked: Vec::new(),
            tasks: TaskTracker::new(),
        };
        let cancelled = shutdown.cancelled();
        tokio::pin!(cancelled);
        loop {
            tokio::select! {
                biased;
                _ = &mut cancelled => break,
                Some(event) = events.recv() => run.on_watch(event).await,
                m = mailbox.recv() => match m {
                    Some(msg) => run.on_message(msg).await,
                    None => break,
                },
            }
        }
        stop_watches.cancel();
        watches.close();
        run.tasks.close();
        watches.wait().await;
        run.tasks.wait().await;
        self.ready.send_replace(false);
        Ok(())
    }
}

// === impl Run ===

impl Run<'_> {
    fn ready(&self) -> bool {
        self.unlisted.is_empty()
    }

    async fn on_watch(&mut self, event: WatchEvent) {
        let was_ready = self.ready();
        let deleted_node = match &event {
            WatchEvent::Delete(key) => key.strip_prefix("nodes//").map(str::to_owned),
            _ => None,
        };
        let out = match event {
            WatchEvent::Apply(obj) => self.state.apply(obj),
            WatchEvent::Delete(key) => self.state.delete(&key),
            WatchEvent::Relisted { kind, objs } => {
                let out = self.state.relist(kind, objs);
                self.unlisted.remove(&kind);
                out
            }
        };
        if !was_ready {
            // Until every watch has listed, nodes learn what they should hold from the resync
            // their session asks for (parked until now): sending the changes of the initial
            // lists as well would deliver objects the edge already holds.
            if self.ready() {
                self.became_ready().await;
            }
            return;
        }
        if let Some(node) = deleted_node
            && self.state.unserved(&node)
        {
            tracing::warn!(node_id = %node, "the Node of a connected node was deleted; nothing is sent to it until its Node exists again");
        }
        self.send_all(out).await;
    }

    async fn became_ready(&mut self) {
        tracing::info!(
            edge_nodes = self.state.edge_nodes().count(),
            "every watch listed; answering resyncs"
        );
        self.ctl.ready.send_replace(true);
        if let Some(hub) = &self.ctl.hub {
            for node in self.state.node_names() {
                if hub.node(&node).is_some_and(|c| c.connected) {
                    // Their whole desired state is sent below.
                    let _ = self.state.connect(&node);
                }
            }
        }
        // Nodes already past their resync were synced by an earlier run of this module.
        let synced: Vec<String> = match &self.ctl.hub {
            Some(hub) => self
                .state
                .edge_nodes()
                .filter(|n| hub.node(n).is_some_and(|c| c.connected))
                .map(str::to_owned)
                .collect(),
            None => Vec::new(),
        };
        for msg in std::mem::take(&mut self.parked) {
            Box::pin(self.on_message(msg)).await;
        }
        for node in synced {
            tracing::info!(node_id = %node, "sending a connected node its whole desired state after a restart");
            for obj in self.state.desired(&node) {
                let msg = self.downstream(&Out::Upsert(node.clone(), obj));
                if self.ctx.send(cloudhub::NAME, msg).await.is_err() {
                    return;
                }
            }
        }
    }

    async fn on_message(&mut self, msg: Message) {
        let Some((node, what)) = node_of(msg.resource()) else {
            tracing::warn!(resource = msg.resource(), operation = %msg.operation(), "message without a node/<name>/ resource ignored");
            let text = format!(
                "edgecontroller expects node/<node>/..., got {}",
                msg.resource()
            );
            return self.respond(&msg, msg.error_response(NAME, text));
        };
        let node = node.to_owned();
        match (msg.operation(), what) {
            (Operation::Query, "digest" | "resync") if !self.ready() => self.parked.push(msg),
            (Operation::Query, "digest") => {
                // Only a session cloudhub admitted asks: the node is an edge node from now on.
                // What it should hold reaches it through the resync this digest starts.
                let _ = self.state.connect(&node);
                let digest = self.state.digest(&node).to_bytes().to_vec();
                self.respond(&msg, msg.response(NAME, digest));
            }
            (Operation::Query, "resync") => {
                let reply = self.resync(&node, &msg);
                self.respond(&msg, reply);
            }
            (Operation::Connected, "") => self.connected(&node).await,
            (Operation::Disconnected, "") => self.state.disconnect(&node),
            (Operation::Insert | Operation::Update | Operation::Patch | Operation::Delete, _) => {
                self.write(&node, msg)
            }
            (op, _) => {
                let text = format!("edgecontroller does not handle {op} {}", msg.resource());
                self.respond(&msg, msg.error_response(NAME, text));
            }
        }
    }

    /// A node's session is up: it is served (if its Node exists), and registered if it has none.
    async fn connected(&mut self, node: &str) {
        let out = self.state.connect(node);
        self.send_all(out).await;
        if self.state.unserved(node) {
            tracing::warn!(node_id = %node, "a connected node has no Node; nothing is sent to it until its Node exists");
        }
        self.register(node);
    }

    async fn send_all(&self, out: Vec<Out>) {
        for o in out {
            let msg = self.downstream(&o);
            if self.ctx.send(cloudhub::NAME, msg).await.is_err() {
                tracing::warn!("cloudhub is gone; desired state not delivered");
                return;
            }
        }
    }

    /// The messages that bring a node from what it holds (the question's content) to what it
    /// should hold.
    fn resync(&self, node: &str, msg: &Message) -> Message {
        let held: Vec<(String, String)> = match rmp_serde::from_slice(&msg.content) {
            Ok(h) => h,
            Err(e) => return msg.error_response(NAME, format!("bad resync inventory: {e}")),
        };
        let held: wire::Inventory = held.into_iter().collect();
        let desired = self.state.desired(node);
        let plan = wire::plan_resync(desired.iter().map(|o| (&o.key, &o.rv)), &held);
        let by_key: std::collections::HashMap<&str, &Arc<Obj>> =
            desired.iter().map(|o| (o.key.as_str(), o)).collect();
        let mut out: Vec<Message> = plan
            .upserts
            .iter()
            .filter_map(|k| by_key.get(k.as_str()))
            .map(|o| self.object_message(o, Operation::Update))
            .collect();
        for key in &plan.deletes {
            out.push(delete_by_key(key));
        }
        // Encoding a Vec<Message> cannot fail.
        let content = rmp_serde::to_vec(&out).expect("messages encode");
        msg.response(NAME, content)
    }

    /// Creates the Node of a node that connected without one.
    fn register(&self, node: &str) {
        let known = self.state.get(&wire::object_key("nodes", None, node));
        if !self.ctl.config.register_nodes || node.is_empty() || known.is_some() {
            return;
        }
        let write = ForwardedWrite {
            verb: "create".into(),
            version: "v1".into(),
            resource: "nodes".into(),
            body: Some(json!({
                "apiVersion": "v1", "kind": "Node",
                "metadata": {"name": node, "labels": {EDGE_LABEL: ""}},
            })),
            ..Default::default()
        };
        let (client, timeout, node) = (
            self.ctl.client.clone(),
            self.ctl.config.request_timeout,
            node.to_owned(),
        );
        self.tasks.spawn(async move {
            let reply = replay::replay(&client, &write, timeout).await;
            match reply.code {
                201 => tracing::info!(node_id = %node, "registered the Node of a new edge node"),
                409 => {}
                code => {
                    tracing::warn!(node_id = %node, code, status = %reply.body, "could not register the node")
                }
            }
        });
    }

    /// A write a node sent: authorized, then replayed against the API.
    fn write(&self, node: &str, msg: Message) {
        let write: ForwardedWrite = match serde_json::from_slice(&msg.content) {
            Ok(w) => w,
            Err(e) => {
                tracing::warn!(node_id = %node, resource = msg.resource(), error = %e, "malformed write from a node");
                let text = format!("malformed forwarded write for {}: {e}", msg.resource());
                return self.respond(&msg, msg.error_response(NAME, text));
            }
        };
        let pod_node = |ns: &str, name: &str| self.state.pod_node(ns, name);
        let decided = authz::authorize(node, &write, pod_node);
        // A pod the watch has not delivered yet is looked up at the API before deciding.
        let look_up = matches!(&decided, Err(e) if e.code == 404);
        if let Err(refused) = &decided
            && !look_up
        {
            return self.refuse(node, &write, &msg, refused);
        }
        let (client, ctx, stats) = (
            self.ctl.client.clone(),
            self.ctx.clone(),
            self.ctl.stats.clone(),
        );
        let (timeout, node) = (self.ctl.config.request_timeout, node.to_owned());
        self.tasks.spawn(async move {
            let reply = match look_up {
                true => match authorize_from_api(&client, &node, &write, timeout).await {
                    Ok(()) => replay::replay(&client, &write, timeout).await,
                    Err(refused) => {
                        stats.refused.fetch_add(1, Ordering::Relaxed);
                        tracing::warn!(node_id = %node, verb = %write.verb, path = %write.path(), reason = %refused.message, "write from a node refused");
                        ForwardedReply::from_error(&refused)
                    }
                },
                false => replay::replay(&client, &write, timeout).await,
            };
            stats.writes.fetch_add(1, Ordering::Relaxed);
            if msg.header.sync {
                let _ = ctx.respond(reply_message(&msg, &reply));
            }
        });
    }

    fn refuse(&self, node: &str, write: &ForwardedWrite, msg: &Message, refused: &ApiError) {
        self.ctl.stats.refused.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(node_id = %node, verb = %write.verb, path = %write.path(), reason = %refused.message, "write from a node refused");
        let reply = ForwardedReply::from_error(refused);
        self.respond(msg, reply_message(msg, &reply));
    }

    fn respond(&self, request: &Message, reply: Message) {
        if request.header.sync {
            let _ = self.ctx.respond(reply);
        }
    }

    /// The cloudhub message for one output.
    fn downstream(&self, out: &Out) -> Message {
        let (node, obj, op) = match out {
            Out::Upsert(n, o) => (n, o, Operation::Update),
            Out::Delete(n, o) => (n, o, Operation::Delete),
        };
        let counter = match op {
            Operation::Delete => &self.ctl.stats.deletes,
            _ => &self.ctl.stats.upserts,
        };
        counter.fetch_add(1, Ordering::Relaxed);
        let mut msg = self.object_message(obj, op);
        msg.router.resource = format!("node/{node}/{}", msg.router.resource).into();
        msg
    }

    /// An upsert (the object) or delete (its identity) with resource
    /// `<namespace>/<resource>/<name>`.
    fn object_message(&self, obj: &Obj, op: Operation) -> Message {
        let kind = &self.state.kinds()[obj.kind];
        let resource = format!("{}/{}/{}", obj.namespace, kind.store_resource(), obj.name);
        let msg = Message::new().route(NAME, "resource", resource, op.clone());
        if op == Operation::Delete {
            let identity = json!({"metadata": {
                "name": obj.name, "namespace": obj.namespace,
                "uid": obj.uid, "resourceVersion": obj.rv,
            }});
            return msg.with_content(identity.to_string());
        }
        msg.with_resource_version(obj.rv.clone())
            .with_content(obj.json.clone())
    }
}

// === impl Handle ===

impl Handle {
    /// True once every watch has listed (resync questions are answered from then on).
    pub fn ready(&self) -> latest::Receiver<bool> {
        self.ready.clone()
    }

    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// Adds the `edgecontroller_*` metrics (read at scrape time) to `registry`.
    pub fn register_metrics(&self, registry: &mut prometheus_client::registry::Registry) {
        use prometheus_client::metrics::counter::ConstCounter;
        use prometheus_client::metrics::gauge::ConstGauge;
        let sub = registry.sub_registry_with_prefix("edgecontroller");
        sub.register(
            "ready",
            "1 once every watch has listed (resyncs are answered)",
            ConstGauge::new(i64::from(*self.ready.borrow())),
        );
        let counters = [
            ("upserts", "Objects sent to edge nodes", &self.stats.upserts),
            ("deletes", "Deletes sent to edge nodes", &self.stats.deletes),
            (
                "node_writes",
                "Writes from edge nodes replayed against the API",
                &self.stats.writes,
            ),
            (
                "refused_writes",
                "Writes from edge nodes refused by node authorization",
                &self.stats.refused,
            ),
        ];
        for (name, help, value) in counters {
            sub.register(name, help, ConstCounter::new(value.load(Ordering::Relaxed)));
        }
    }
}

/// [`authz::authorize`] with the pod it depends on ([`authz::bound_pod`]) read from the API
/// (the watch may not have delivered it).
async fn authorize_from_api(
    client: &kube::Client,
    node: &str,
    write: &ForwardedWrite,
    timeout: std::time::Duration,
) -> Result<(), ApiError> {
    use k8s_openapi::api::core::v1::Pod;
    let pods: kube::Api<Pod> = kube::Api::namespaced(client.clone(), &write.namespace);
    let found = tokio::time::timeout(timeout, pods.get_opt(authz::bound_pod(write)))
        .await
        .map_err(|_| {
            ApiError::timeout(format!(
                "the Kubernetes API did not answer within {timeout:?}"
            ))
        })?
        .map_err(|e| {
            ApiError::service_unavailable(format!("the Kubernetes API could not be reached: {e}"))
        })?;
    let bound = found.map(|pod| pod.spec.and_then(|s| s.node_name).unwrap_or_default());
    authz::authorize(node, write, |_, _| bound.as_deref())
}

/// A delete for a key the edge holds but should not (`resource/namespace/name`).
fn delete_by_key(key: &str) -> Message {
    let mut parts = key.splitn(3, '/');
    let (res, ns, name) = (
        parts.next().unwrap_or(""),
        parts.next().unwrap_or(""),
        parts.next().unwrap_or(""),
    );
    let identity = json!({"metadata": {"name": name, "namespace": ns}});
    Message::new()
        .route(
            NAME,
            "resource",
            format!("{ns}/{res}/{name}"),
            Operation::Delete,
        )
        .with_content(identity.to_string())
}

/// `node/<node>/<what>` or `node/<node>` → (`node`, `what`); `None` without the prefix or a
/// node name.
fn node_of(resource: &str) -> Option<(&str, &str)> {
    let rest = resource.strip_prefix("node/")?;
    let (node, what) = rest.split_once('/').unwrap_or((rest, ""));
    (!node.is_empty()).then_some((node, what))
}

fn reply_message(request: &Message, reply: &ForwardedReply) -> Message {
    // Serializing a reply cannot fail.
    let content = serde_json::to_vec(reply).expect("a reply serializes");
    request.response(NAME, content)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_resource_without_the_node_prefix_names_no_node() {
        assert_eq!(node_of("node/n1/digest"), Some(("n1", "digest")));
        assert_eq!(node_of("node/n1"), Some(("n1", "")));
        assert_eq!(
            node_of("node/n1/default/pods/a"),
            Some(("n1", "default/pods/a"))
        );
        assert_eq!(node_of("default/pods/a"), None);
        assert_eq!(node_of("nodes/n1/digest"), None);
        assert_eq!(node_of("node//digest"), None);
        assert_eq!(node_of(""), None);
    }
}
