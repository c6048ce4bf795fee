//! A stand-in for edgecontroller: it holds, in memory, what each node should hold, sends every
//! change to cloudhub, and answers cloudhub's digest and resync questions with the real
//! protocol. It is the stand-in controller the link tests use: they need someone who knows the
//! desired state, not the real edgecontroller that watches the embedded API.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, OnceLock};

use beehive::{CancellationToken, Context, Mailbox, Message, Module, ModuleError, Operation};
use serde_json::json;

/// Desired state, shared between the test and the module.
#[derive(Default)]
pub struct Desired {
    nodes: Mutex<HashMap<String, BTreeMap<String, Object>>>,
    ctx: OnceLock<Context>,
    upstream: Mutex<Vec<Message>>,
    /// Bytes the answer to an upstream write carries (0: an empty object).
    reply_size: std::sync::atomic::AtomicUsize,
}

#[derive(Clone, Debug)]
struct Object {
    namespace: String,
    resource: String,
    name: String,
    rv: String,
    json: Vec<u8>,
}

/// The module; register it with `cloudcore::start_with`.
pub struct Controller {
    desired: Arc<Desired>,
}

impl Controller {
    pub fn module(desired: Arc<Desired>) -> Arc<dyn Module> {
        Arc::new(Controller { desired })
    }
}

impl Desired {
    pub fn new() -> Arc<Desired> {
        Arc::new(Desired::default())
    }

    /// Sets a pod the node should hold (a minimal Pod JSON with `rv`), and sends it.
    pub async fn put_pod(&self, node: &str, name: &str, rv: u64) {
        let json = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default", "uid": format!("uid-{name}"), "resourceVersion": rv.to_string()},
            "spec": {"nodeName": node, "containers": [{"name": "c", "image": "busybox", "args": ["x".repeat(700)]}]},
        });
        self.put_object(node, name, rv, serde_json::to_vec(&json).unwrap())
            .await;
    }

    /// Sets pod `default/<name>` at `rv` with `json` as its content, and sends it.
    pub async fn put_object(&self, node: &str, name: &str, rv: u64, json: Vec<u8>) {
        let obj = Object {
            namespace: "default".into(),
            resource: "pods".into(),
            name: name.into(),
            rv: rv.to_string(),
            json,
        };
        let key = wire::object_key(&obj.resource, Some(&obj.namespace), &obj.name);
        let msg = upsert(&obj);
        self.nodes
            .lock()
            .unwrap()
            .entry(node.into())
            .or_default()
            .insert(key, obj);
        self.send(node, msg).await;
    }

    /// Removes a pod from what the node should hold, and sends the delete.
    pub async fn delete_pod(&self, node: &str, name: &str) {
        let key = wire::object_key("pods", Some("default"), name);
        let removed = self
            .nodes
            .lock()
            .unwrap()
            .get_mut(node)
            .and_then(|m| m.remove(&key));
        if let Some(obj) = removed {
            self.send(node, delete(&obj)).await;
        }
    }

    /// Changes the desired state without telling anyone (as if it changed while cloudcore was
    /// down): the next resync must find it.
    pub fn put_pod_silently(&self, node: &str, name: &str, rv: u64) {
        let obj = Object {
            namespace: "default".into(),
            resource: "pods".into(),
            name: name.into(),
            rv: rv.to_string(),
            json: serde_json::to_vec(&json!({"metadata": {"name": name, "namespace": "default", "uid": format!("uid-{name}"), "resourceVersion": rv.to_string()}})).unwrap(),
        };
        let key = wire::object_key("pods", Some("default"), name);
        self.nodes
            .lock()
            .unwrap()
            .entry(node.into())
            .or_default()
            .insert(key, obj);
    }

    /// `(key, rv)` the node should hold.
    pub fn expected(&self, node: &str) -> BTreeMap<String, String> {
        let nodes = self.nodes.lock().unwrap();
        nodes
            .get(node)
            .map(|m| m.iter().map(|(k, o)| (k.clone(), o.rv.clone())).collect())
            .unwrap_or_default()
    }

    /// Answers upstream writes from now on with a body of `size` bytes (as a huge object
    /// returned by the API would be).
    pub fn reply_with(&self, size: usize) {
        self.reply_size
            .store(size, std::sync::atomic::Ordering::Relaxed);
    }

    /// Upstream messages received so far.
    pub fn upstream(&self) -> Vec<Message> {
        self.upstream.lock().unwrap().clone()
    }

    async fn send(&self, node: &str, mut msg: Message) {
        let Some(ctx) = self.ctx.get() else { return };
        msg.router.resource = format!("node/{node}/{}", msg.router.resource).into();
        let _ = ctx.send(cloudhub::NAME, msg).await;
    }

    fn digest(&self, node: &str) -> wire::Digest {
        wire::digest(self.expected(node))
    }

    fn resync(&self, node: &str, held: &wire::Inventory) -> Vec<Message> {
        let nodes = self.nodes.lock().unwrap();
        let empty = BTreeMap::new();
        let desired = nodes.get(node).unwrap_or(&empty);
        let plan = wire::plan_resync(
            desired.iter().map(|(k, o)| (k.as_str(), o.rv.as_str())),
            held,
        );
        let mut out: Vec<Message> = plan.upserts.iter().map(|k| upsert(&desired[k])).collect();
        for key in &plan.deletes {
            let mut parts = key.splitn(3, '/');
            let (res, ns, name) = (
                parts.next().unwrap(),
                parts.next().unwrap(),
                parts.next().unwrap(),
            );
            let obj = Object {
                namespace: ns.into(),
                resource: res.into(),
                name: name.into(),
                rv: String::new(),
                json: b"{}".to_vec(),
            };
            out.push(delete(&obj));
        }
        out
    }
}

fn upsert(obj: &Object) -> Message {
    Message::new()
        .route(
            "edgecontroller",
            "resource",
            format!("{}/{}/{}", obj.namespace, obj.resource, obj.name),
            Operation::Update,
        )
        .with_resource_version(obj.rv.clone())
        .with_content(obj.json.clone())
}

fn delete(obj: &Object) -> Message {
    let json = json!({"metadata": {"name": obj.name, "namespace": obj.namespace}});
    Message::new()
        .route(
            "edgecontroller",
            "resource",
            format!("{}/{}/{}", obj.namespace, obj.resource, obj.name),
            Operation::Delete,
        )
        .with_content(serde_json::to_vec(&json).unwrap())
}

#[beehive::async_trait]
impl Module for Controller {
    fn name(&self) -> &str {
        "edgecontroller"
    }

    fn group(&self) -> &str {
        "controller"
    }

    async fn run(
        &self,
        ctx: Context,
        mailbox: &mut Mailbox,
        shutdown: CancellationToken,
    ) -> Result<(), ModuleError> {
        let _ = self.desired.ctx.set(ctx.clone());
        loop {
            let msg = tokio::select! {
                biased;
                _ = shutdown.cancelled() => return Ok(()),
                m = mailbox.recv() => match m { Some(m) => m, None => return Ok(()) },
            };
            let mut parts = msg.resource().splitn(3, '/');
            let (node, what) = (parts.nth(1).unwrap_or(""), parts.next().unwrap_or(""));
            let reply = match (msg.operation(), what) {
                (Operation::Query, "digest") => Some(msg.response(
                    "edgecontroller",
                    self.desired.digest(node).to_bytes().to_vec(),
                )),
                (Operation::Query, "resync") => {
                    let held: Vec<(String, String)> =
                        rmp_serde::from_slice(&msg.content).unwrap_or_default();
                    let diff = self.desired.resync(node, &held.into_iter().collect());
                    Some(msg.response("edgecontroller", rmp_serde::to_vec(&diff).unwrap()))
                }
                (Operation::Connected | Operation::Disconnected, _) => None,
                _ => {
                    self.desired.upstream.lock().unwrap().push(msg.clone());
                    let size = self
                        .desired
                        .reply_size
                        .load(std::sync::atomic::Ordering::Relaxed);
                    let body = match size {
                        0 => b"{}".to_vec(),
                        n => vec![b' '; n],
                    };
                    Some(msg.response("edgecontroller", body))
                }
            };
            if let Some(reply) = reply
                && msg.header.sync
            {
                let _ = ctx.respond(reply);
            }
        }
    }
}
