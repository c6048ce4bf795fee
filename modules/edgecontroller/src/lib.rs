//! edgecontroller: decides what each edge node holds and applies what nodes write. It watches
//! the Kubernetes API (one kube-runtime watch per resource type, shared by all nodes) and keeps
//! each edge node's desired set ([`state`]): its Node and Lease, its pods, what they reference,
//! services, endpointslices and the cluster objects a kubelet reads. Every change goes to
//! cloudhub as an upsert or delete for `node/<node>/<namespace>/<resource>/<name>` (a
//! [`wire::NodeResource`] around an [`wire::ObjectRef::message_resource`]); cloudhub's digest and
//! resync questions ([`wire::ToController`]) are answered from the same set (held back until
//! every watch has listed once, so a half-known state never deletes anything at the edge).
//! Writes nodes send (lwproxy's forwarded REST writes) are parsed into checked requests
//! ([`apimachinery::forward::NodeRequest`]), authorized for the sending node ([`authz`]) and
//! replayed against the API as that node ([`replay`]: impersonation, so the API's authorizer
//! is the last gate), whose answer goes back unchanged; refusals are logged and answered with
//! a `Status`. A node that connects without a Node gets one, with the edge label. A node may
//! also subscribe to a kind the node rules never send it ([`subscribe`]: checked by discovery
//! and a SubjectAccessReview for the node's identity, then one shared watch per kind).
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
mod subscribe;
mod watch;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use apimachinery::forward::{KnownResource, NodeRequest};
use apimachinery::{ApiError, ForwardedReply, ForwardedWrite};
use beehive::{Context, Mailbox, Message, Module, ModuleError, Operation, RestartPolicy};
use serde_json::json;
use tokio::sync::{mpsc, watch as latest};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use wire::{NodeResource, ObjectRef, ToController};

pub use config::Config;
pub use error::ControllerError;
pub use kinds::EDGE_LABEL;

use kinds::Kind;
use replay::Caller;
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
    /// The resources a node's write may name: (group, version, plural).
    known: HashMap<(String, String, String), KnownResource>,
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
    /// (node, kind) subscriptions being delivered now.
    pub subscriptions: AtomicU64,
    /// Subscriptions refused (403, 404, ...).
    pub refused_subscriptions: AtomicU64,
}

/// The run loop's state.
struct Run<'a> {
    ctl: &'a EdgeController,
    ctx: Context,
    state: State,
    /// Built-in kinds not listed yet; empty once ready (custom resources whose CRD is missing
    /// must not hold everything back).
    unlisted: HashSet<usize>,
    /// Digest and resync questions asked before every watch listed, with the messages to answer.
    parked: Vec<(ToController, Message)>,
    tasks: TaskTracker,
    /// Where subscriptions checked at the API come back.
    checks_tx: mpsc::Sender<subscribe::Checked>,
    /// Where watch events go (for the watches of subscribed kinds).
    watch_tx: mpsc::Sender<WatchEvent>,
    watches: TaskTracker,
    stop_watches: CancellationToken,
    /// The watches of subscribed kinds, by kind id: cancelled with their last subscriber.
    kind_watches: HashMap<usize, CancellationToken>,
    /// Kinds whose watch has listed since it started.
    listed: HashSet<usize>,
    /// Subscriptions waiting for their kind's first list: (node, request).
    waiting: HashMap<usize, Vec<(String, Message)>>,
    /// The CRDs of subscribed custom resources, sent with each initial sync.
    definitions: HashMap<usize, serde_json::Value>,
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
        let known = known_resources(&kinds);
        // After the known resources: nodes read their NodeGroup, they do not write it.
        kinds.push(Kind::node_group());
        let (ready, ready_rx) = latest::channel(false);
        let stats = Arc::new(Stats::default());
        let handle = Handle {
            ready: ready_rx,
            stats: stats.clone(),
        };
        let ctl = EdgeController {
            config,
            kinds,
            known,
            client,
            hub: None,
            ready,
            stats,
        };
        Ok((ctl, handle))
    }

    /// What a node's write may name of `group`/`version`/`plural`, if it is known.
    fn known(&self, group: &str, version: &str, plural: &str) -> Option<KnownResource> {
        let key = (group.to_owned(), version.to_owned(), plural.to_owned());
        self.known.get(&key).cloned()
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
        watch::spawn(
            &self.client,
            &self.kinds,
            tx.clone(),
            &watches,
            &stop_watches,
        );
        let (checks_tx, mut checks) = mpsc::channel(64);
        let mut run = Run {
            ctl: self,
            ctx,
            state: State::new(self.kinds.clone()),
            unlisted: (0..Kind::builtins().len()).collect(),
            parked: Vec::new(),
            tasks: TaskTracker::new(),
            checks_tx,
            watch_tx: tx,
            watches: watches.clone(),
            stop_watches: stop_watches.clone(),
            kind_watches: HashMap::new(),
            listed: HashSet::new(),
            waiting: HashMap::new(),
            definitions: HashMap::new(),
        };
        let cancelled = shutdown.cancelled();
        tokio::pin!(cancelled);
        loop {
            tokio::select! {
                biased;
                _ = &mut cancelled => break,
                Some(event) = events.recv() => run.on_watch(event).await,
                Some(checked) = checks.recv() => run.on_checked(checked).await,
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
            WatchEvent::Delete(key) => ObjectRef::from_key(key)
                .ok()
                .filter(|id| id.resource == "nodes" && id.namespace.is_empty())
                .map(|id| id.name),
            _ => None,
        };
        let out = match event {
            WatchEvent::Apply(obj) => self.state.apply(obj),
            WatchEvent::Delete(key) => self.state.delete(&key),
            WatchEvent::Relisted { kind, objs } => {
                let out = self.state.relist(kind, objs);
                self.unlisted.remove(&kind);
                self.kind_listed(kind);
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
        for (question, msg) in std::mem::take(&mut self.parked) {
            Box::pin(self.on_hub(question, msg)).await;
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

    /// A message from cloudhub: a node's write, or a question or event about a node.
    async fn on_message(&mut self, msg: Message) {
        let node = match NodeResource::parse(msg.resource()) {
            Ok(scoped) => scoped.node.to_owned(),
            Err(e) => {
                tracing::warn!(resource = msg.resource(), operation = %msg.operation(), "message without a node/<name>/ resource ignored");
                return self.refuse_message(&msg, &e);
            }
        };
        match msg.operation() {
            Operation::Insert | Operation::Update | Operation::Patch | Operation::Delete => {
                self.write(&node, msg)
            }
            Operation::Subscribe | Operation::Unsubscribe => self.on_subscription(&node, msg).await,
            _ => match ToController::from_message(&msg) {
                Ok(question) => self.on_hub(question, msg).await,
                Err(e) => self.refuse_message(&msg, &e),
            },
        }
    }

    /// A question or event from cloudhub (`msg` carries it, to be answered).
    async fn on_hub(&mut self, question: ToController, msg: Message) {
        match question {
            ToController::Digest { .. } | ToController::Resync { .. } if !self.ready() => {
                self.parked.push((question, msg))
            }
            ToController::Digest { node } => {
                // Only a session cloudhub admitted asks: the node is an edge node from now on.
                // What it should hold reaches it through the resync this digest starts.
                let _ = self.state.connect(&node);
                let digest = self.state.digest(&node);
                self.respond(&msg, wire::digest_answer(&msg, NAME, digest));
            }
            ToController::Resync { node, held } => {
                let diff = self.resync(&node, &held);
                self.respond(&msg, wire::resync_answer(&msg, NAME, &diff));
            }
            ToController::Connected { node } => self.connected(&node).await,
            ToController::Disconnected { node } => self.state.disconnect(&node),
        }
    }

    /// Answers a message this module does not take with an error naming it.
    fn refuse_message(&self, msg: &Message, e: &dyn std::error::Error) {
        let text = format!("edgecontroller does not take this message: {e}");
        self.respond(msg, msg.error_response(NAME, text));
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

    /// The messages that bring a node from what it holds to what it should hold.
    /// Held objects of kinds the cloud does not decide for the node (subscriptions a restarted
    /// cloud has not heard of yet) are left alone: the node renews them on connect.
    fn resync(&self, node: &str, held: &wire::Inventory) -> Vec<Message> {
        let desired = self.state.desired(node);
        let mut managed = self.state.managed_resources(node);
        // An optional kind not listed yet (its CRD absent, or its watch backing off): what the
        // node holds of it stays until the cloud knows better.
        for (id, kind) in self.ctl.kinds.iter().enumerate() {
            if kind.optional && !self.listed.contains(&id) {
                managed.remove(&kind.store_resource());
            }
        }
        let held: wire::Inventory = held
            .iter()
            .filter(|(key, _)| {
                let resource = key.split('/').next().unwrap_or_default();
                managed.contains(resource)
            })
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let plan = wire::plan_resync(desired.iter().map(|o| (&o.key, &o.rv)), &held);
        let by_key: std::collections::HashMap<&str, &Arc<Obj>> =
            desired.iter().map(|o| (o.key.as_str(), o)).collect();
        let mut out: Vec<Message> = plan
            .upserts
            .iter()
            .filter_map(|k| by_key.get(k.as_str()))
            .map(|o| object_message(o, Operation::Update))
            .collect();
        for key in &plan.deletes {
            match ObjectRef::from_key(key) {
                Ok(id) => out.push(delete_message(&id, None)),
                Err(e) => {
                    tracing::warn!(node_id = %node, error = %e, "the edge holds something that is no object; not deleted")
                }
            }
        }
        out
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
        let write = match NodeRequest::parse(write, |g, v, p| self.ctl.known(g, v, p)) {
            Ok(w) => w,
            Err(e) => {
                return tracing::warn!(node_id = %node, error = %e.message, "could not register the node");
            }
        };
        self.tasks.spawn(async move {
            // A node revoked (`keadm revoke`) and not joined again since is not registered, even
            // in the moments before cloudhub closes its session.
            match bootstrap::revoke::may_register(&client, &node).await {
                Ok(true) => {}
                Ok(false) => {
                    return tracing::info!(node_id = %node, "not registering the Node of a revoked node");
                }
                Err(e) => {
                    return tracing::warn!(node_id = %node, error = %e, "cannot tell whether the node is revoked; not registering its Node now");
                }
            }
            let reply = replay::replay(&client, Caller::Cloud, &write, timeout).await;
            match reply.code {
                201 => tracing::info!(node_id = %node, "registered the Node of a new edge node"),
                409 => {}
                code => {
                    tracing::warn!(node_id = %node, code, status = %reply.body, "could not register the node")
                }
            }
        });
    }

    /// A write a node sent: parsed into a checked request, authorized for the node, then
    /// replayed against the API as the node.
    fn write(&self, node: &str, msg: Message) {
        let write = match self.checked_write(&msg) {
            Ok(w) => w,
            Err(e) => {
                tracing::warn!(node_id = %node, resource = msg.resource(), reason = %e.message, "malformed write from a node");
                return self.refuse_write(&msg, &e);
            }
        };
        let pod_node = |ns: &str, name: &str| self.state.pod_node(ns, name);
        let decided = authz::authorize(node, &write, pod_node);
        // A pod the watch has not delivered yet is looked up at the API before deciding.
        let look_up = matches!(&decided, Err(e) if e.code == 404);
        if let Err(refused) = &decided
            && !look_up
        {
            tracing::warn!(node_id = %node, verb = write.verb.as_str(), path = %write.path(), reason = %refused.message, "write from a node refused");
            return self.refuse_write(&msg, refused);
        }
        let (client, ctx, stats) = (
            self.ctl.client.clone(),
            self.ctx.clone(),
            self.ctl.stats.clone(),
        );
        let (timeout, node) = (self.ctl.config.request_timeout, node.to_owned());
        self.tasks.spawn(async move {
            let decided = match look_up {
                true => authorize_from_api(&client, &node, &write, timeout).await,
                false => Ok(()),
            };
            let reply = match decided {
                Ok(()) => replay::replay(&client, Caller::Node(&node), &write, timeout).await,
                Err(refused) => {
                    stats.refused.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(node_id = %node, verb = write.verb.as_str(), path = %write.path(), reason = %refused.message, "write from a node refused");
                    ForwardedReply::from_error(&refused)
                }
            };
            stats.writes.fetch_add(1, Ordering::Relaxed);
            if msg.header.sync {
                let _ = ctx.respond(reply_message(&msg, &reply));
            }
        });
    }

    /// The write `msg` carries, parsed and checked.
    fn checked_write(&self, msg: &Message) -> Result<NodeRequest, ApiError> {
        let write: ForwardedWrite = serde_json::from_slice(&msg.content).map_err(|e| {
            ApiError::bad_request(format!(
                "malformed forwarded write for {}: {e}",
                msg.resource()
            ))
        })?;
        NodeRequest::parse(write, |g, v, p| self.ctl.known(g, v, p))
    }

    fn refuse_write(&self, msg: &Message, refused: &ApiError) {
        self.ctl.stats.refused.fetch_add(1, Ordering::Relaxed);
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
        let mut msg = object_message(obj, op);
        msg.router.resource = NodeResource::new(node, &msg.router.resource)
            .to_string()
            .into();
        msg
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
            (
                "refused_subscriptions",
                "Subscriptions of edge nodes to a kind refused (403, 404, ...)",
                &self.stats.refused_subscriptions,
            ),
        ];
        for (name, help, value) in counters {
            sub.register(name, help, ConstCounter::new(value.load(Ordering::Relaxed)));
        }
        let active = self.stats.subscriptions.load(Ordering::Relaxed);
        sub.register(
            "subscriptions",
            "Kinds delivered to edge nodes because they subscribed, one per node and kind",
            ConstGauge::new(i64::try_from(active).unwrap_or(i64::MAX)),
        );
    }
}

/// The built-in resources, and the subscribed custom resources (scope unknown, `status` and
/// `scale` only).
fn known_resources(kinds: &[Kind]) -> HashMap<(String, String, String), KnownResource> {
    let key = |g: &str, v: &str, p: &str| (g.to_owned(), v.to_owned(), p.to_owned());
    let mut known: HashMap<_, _> = apimachinery::catalog::builtins()
        .iter()
        .map(|info| {
            (
                key(&info.group, &info.version, &info.plural),
                KnownResource::of(info),
            )
        })
        .collect();
    for kind in kinds {
        known
            .entry(key(&kind.group, &kind.version, &kind.plural))
            .or_insert_with(|| KnownResource {
                namespaced: None,
                subresources: vec!["status".into(), "scale".into()],
            });
    }
    known
}

/// [`authz::authorize`] with the pod it depends on ([`authz::bound_pod`]) read from the API
/// (the watch may not have delivered it).
async fn authorize_from_api(
    client: &kube::Client,
    node: &str,
    write: &NodeRequest,
    timeout: std::time::Duration,
) -> Result<(), ApiError> {
    use k8s_openapi::api::core::v1::Pod;
    let namespace = write.namespace.as_deref().unwrap_or_default();
    let pods: kube::Api<Pod> = kube::Api::namespaced(client.clone(), namespace);
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

/// An upsert (the object) or delete (its identity) with the object's message resource
/// (`<namespace>/<resource>/<name>`).
fn object_message(obj: &Obj, op: Operation) -> Message {
    if op == Operation::Delete {
        return delete_message(&obj.id, Some((&obj.uid, &obj.rv)));
    }
    Message::new()
        .route(NAME, "resource", obj.id.message_resource(), op)
        .with_resource_version(obj.rv.clone())
        .with_content(obj.json.clone())
}

/// A delete of `id`, identified by its metadata: name and namespace, plus uid and
/// resourceVersion when known (`uid_rv`).
fn delete_message(id: &ObjectRef, uid_rv: Option<(&str, &str)>) -> Message {
    let identity = match uid_rv {
        Some((uid, rv)) => json!({"metadata": {
            "name": id.name, "namespace": id.namespace,
            "uid": uid, "resourceVersion": rv,
        }}),
        None => json!({"metadata": {"name": id.name, "namespace": id.namespace}}),
    };
    Message::new()
        .route(NAME, "resource", id.message_resource(), Operation::Delete)
        .with_content(identity.to_string())
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
    fn an_object_goes_out_under_its_message_resource() {
        let kinds = Kind::builtins();
        let pods = kinds.iter().position(|k| k.plural == "pods").unwrap();
        let meta =
            json!({"name": "a", "namespace": "default", "uid": "u1", "resourceVersion": "7"});
        let obj = Obj::from_value(pods, &kinds[pods], json!({ "metadata": meta }));
        assert_eq!(obj.key, "pods/default/a");

        let upsert = object_message(&obj, Operation::Update);
        assert_eq!(upsert.resource(), "default/pods/a");
        assert_eq!(upsert.header.resource_version.as_deref(), Some("7"));

        let delete = object_message(&obj, Operation::Delete);
        assert_eq!(delete.resource(), "default/pods/a");
        let identity: serde_json::Value = serde_json::from_slice(&delete.content).unwrap();
        assert_eq!(identity, json!({ "metadata": meta }));
    }

    #[test]
    fn a_delete_for_a_held_key_names_the_object_in_the_message_resource_form() {
        let id = ObjectRef::from_key("nodes//n1").unwrap();
        let msg = delete_message(&id, None);
        assert_eq!(msg.resource(), "/nodes/n1");
        assert_eq!(msg.operation(), &Operation::Delete);
        let identity: serde_json::Value = serde_json::from_slice(&msg.content).unwrap();
        assert_eq!(
            identity,
            json!({"metadata": {"name": "n1", "namespace": ""}})
        );
    }
}
