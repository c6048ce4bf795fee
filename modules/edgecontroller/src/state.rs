//! What each edge node must hold, kept up to date as watch events arrive. Pure bookkeeping
//! with no I/O: every change returns the sends and deletes it causes, per node.
//!
//! A node holds its Node, its Lease and CSINode, the pods bound to it, the configmaps, secrets and
//! serviceaccounts those pods reference ([`apimachinery::podrefs`]) (counted per node, so an object shared by two pods
//! leaves only with the last one), every global object (services, endpointslices, cluster
//! objects a kubelet reads), and the NodeGroup its `apps.kubeedge.io/belonging-to` label names
//! (its site's members, which the edge filters site-local services with): a node whose label
//! changes loses the old group and gets the new one.
//!
//! # Who is an edge node
//!
//! A node is served (is an edge node) while its Node exists and either carries the edge label
//! ([`EDGE_LABEL`]) or the node holds an authenticated session with cloudhub ([`State::connect`]):
//! a kubelet that registers its Node again through lwproxy may not set node-role labels on
//! itself, and its session proves it is an edge node anyway.
//!
//! A node that loses the label while connected stays served, as KubeEdge users expect of a node
//! that is connected to cloudhub. One that loses it while disconnected (or disconnects without
//! it) stops being served: nothing is queued for it and nothing is deleted at the edge (an
//! edge keeps serving what it holds while it is away); if it connects again, the session's resync
//! brings it to its desired state like any reconnect. A deleted Node takes only the Node away
//! from the edge; the rest follows once the node is served again, or stays until then.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use bytes::Bytes;
use serde_json::Value;
use wire::ObjectRef;

use crate::kinds::{EDGE_LABEL, Kind, Scope};

/// One object as watched.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Obj {
    /// Index into the watched kinds.
    pub kind: usize,
    /// Which object it is.
    pub id: ObjectRef,
    /// `id`'s key (`resource/namespace/name`), the index of every map here.
    pub key: String,
    pub uid: String,
    /// The API's resourceVersion.
    pub rv: String,
    /// The object as JSON (with `apiVersion` and `kind`).
    pub json: Bytes,
    pub info: Info,
}

/// What the placement needs from an object's body.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) enum Info {
    #[default]
    Plain,
    /// A pod: the node it is bound to (empty: unscheduled) and the keys it references.
    Pod { node: String, refs: Vec<String> },
    /// A node: whether it carries the edge label, and the NodeGroup its
    /// [`BELONGING_TO`](apimachinery::sites::BELONGING_TO) label names (empty: none).
    Node { edge: bool, group: String },
    /// A custom resource: the node it is bound to (`spec.nodeName`; empty: every node).
    Custom { node: String },
}

/// One thing to tell one node.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Out {
    Upsert(String, Arc<Obj>),
    Delete(String, Arc<Obj>),
}

/// The desired state of every edge node.
pub(crate) struct State {
    kinds: Vec<Kind>,
    objects: HashMap<String, Arc<Obj>>,
    edge: BTreeSet<String>,
    /// Nodes holding a session with cloudhub.
    connected: BTreeSet<String>,
    pods_on: HashMap<String, BTreeSet<String>>,
    /// node → referenced key → how many of its pods reference it.
    node_refs: HashMap<String, HashMap<String, u32>>,
    /// referenced key → node → count (the same counts, indexed the other way).
    ref_nodes: HashMap<String, HashMap<String, u32>>,
    globals: BTreeSet<String>,
    /// node → custom resources bound to it.
    bound_on: HashMap<String, BTreeSet<String>>,
    /// Subscribed kind → the nodes subscribed to it.
    subscribers: HashMap<usize, BTreeSet<String>>,
    /// Subscribed kind → the keys of its objects.
    of_kind: HashMap<usize, BTreeSet<String>>,
    /// Node → the NodeGroup its label names (nodes in a group only).
    group_of: HashMap<String, String>,
    /// NodeGroup name → the nodes whose label names it.
    members: HashMap<String, BTreeSet<String>>,
    /// NodeGroup name → its key (the kind's id is not fixed).
    group_keys: HashMap<String, String>,
}

// === impl Obj ===

impl Obj {
    /// Builds the object of kind `kind` (index `kind_id`) from its JSON.
    pub fn from_value(kind_id: usize, kind: &Kind, mut value: Value) -> Obj {
        // Who wrote which field concerns the API's writers, not the nodes: not sent.
        apimachinery::managedfields::strip(&mut value);
        if let Some(map) = value.as_object_mut() {
            let api_version = kind.api_resource().api_version;
            map.entry("apiVersion")
                .or_insert(Value::String(api_version));
            map.entry("kind")
                .or_insert_with(|| Value::String(kind.kind.clone()));
        }
        let meta = &value["metadata"];
        let text = |k: &str| meta[k].as_str().unwrap_or_default().to_owned();
        let (namespace, name) = (text("namespace"), text("name"));
        let info = match kind.scope {
            Scope::Pod => Info::Pod {
                node: value["spec"]["nodeName"]
                    .as_str()
                    .unwrap_or_default()
                    .into(),
                refs: pod_refs(&namespace, &value),
            },
            Scope::Node => Info::Node {
                edge: meta["labels"].get(EDGE_LABEL).is_some(),
                group: meta["labels"][apimachinery::sites::BELONGING_TO]
                    .as_str()
                    .unwrap_or_default()
                    .into(),
            },
            Scope::Custom => Info::Custom {
                node: value["spec"]["nodeName"]
                    .as_str()
                    .unwrap_or_default()
                    .into(),
            },
            _ => Info::Plain,
        };
        let id = ObjectRef::new(kind.store_resource(), namespace, name);
        Obj {
            kind: kind_id,
            key: id.key(),
            id,
            uid: text("uid"),
            rv: text("resourceVersion"),
            // Serializing a Value cannot fail.
            json: serde_json::to_vec(&value)
                .expect("a JSON value serializes")
                .into(),
            info,
        }
    }
}

// === impl State ===

impl State {
    pub fn new(kinds: Vec<Kind>) -> State {
        State {
            kinds,
            objects: HashMap::new(),
            edge: BTreeSet::new(),
            connected: BTreeSet::new(),
            pods_on: HashMap::new(),
            node_refs: HashMap::new(),
            ref_nodes: HashMap::new(),
            globals: BTreeSet::new(),
            bound_on: HashMap::new(),
            subscribers: HashMap::new(),
            of_kind: HashMap::new(),
            group_of: HashMap::new(),
            members: HashMap::new(),
            group_keys: HashMap::new(),
        }
    }

    /// The kind with id `id`.
    pub fn kind(&self, id: usize) -> &Kind {
        &self.kinds[id]
    }

    /// The id of the kind `group`/`plural`, if watched or ever subscribed.
    pub fn find_kind(&self, group: &str, plural: &str) -> Option<usize> {
        self.kinds
            .iter()
            .position(|k| k.group == group && k.plural == plural)
    }

    /// Adds a kind (a subscribed one); returns its id.
    pub fn add_kind(&mut self, kind: Kind) -> usize {
        self.kinds.push(kind);
        self.kinds.len() - 1
    }

    /// `node` gets every object of kind `kind` from now on; returns them (the node's initial
    /// sync).
    pub fn subscribe(&mut self, node: &str, kind: usize) -> Vec<Arc<Obj>> {
        self.subscribers
            .entry(kind)
            .or_default()
            .insert(node.to_owned());
        self.of_kind(kind)
    }

    /// True when `node` subscribed to kind `kind`.
    pub fn subscribed(&self, node: &str, kind: usize) -> bool {
        self.subscribers
            .get(&kind)
            .is_some_and(|nodes| nodes.contains(node))
    }

    /// Every object of kind `kind`.
    pub fn of_kind(&self, kind: usize) -> Vec<Arc<Obj>> {
        match self.kinds[kind].scope {
            Scope::Subscribed => self
                .of_kind
                .get(&kind)
                .into_iter()
                .flatten()
                .filter_map(|k| self.objects.get(k).cloned())
                .collect(),
            _ => self
                .objects
                .values()
                .filter(|o| o.kind == kind)
                .cloned()
                .collect(),
        }
    }

    /// `node` no longer gets kind `kind`. Returns true when nobody subscribes to it any more:
    /// its objects are forgotten (its watch is to stop).
    pub fn unsubscribe(&mut self, node: &str, kind: usize) -> bool {
        let Some(nodes) = self.subscribers.get_mut(&kind) else {
            return false;
        };
        nodes.remove(node);
        if !nodes.is_empty() {
            return false;
        }
        self.subscribers.remove(&kind);
        for key in self.of_kind.remove(&kind).unwrap_or_default() {
            self.objects.remove(&key);
        }
        true
    }

    /// How many (node, kind) subscriptions there are.
    pub fn subscriptions(&self) -> usize {
        self.subscribers.values().map(BTreeSet::len).sum()
    }

    /// The store resources the cloud decides for `node`: the kinds the node rules deliver and
    /// the kinds it subscribed to. A resync leaves anything else the node holds alone (its
    /// subscriptions, which a restarted cloud does not know yet, are the node's to renew).
    pub fn managed_resources(&self, node: &str) -> HashSet<String> {
        self.kinds
            .iter()
            .enumerate()
            .filter(|(id, k)| {
                k.scope != Scope::Subscribed
                    || self.subscribers.get(id).is_some_and(|n| n.contains(node))
            })
            .map(|(_, k)| k.store_resource())
            .collect()
    }

    #[cfg(test)]
    pub fn kinds(&self) -> &[Kind] {
        &self.kinds
    }

    /// The object at `key`, if watched.
    pub fn get(&self, key: &str) -> Option<&Arc<Obj>> {
        self.objects.get(key)
    }

    /// The node pod `namespace/name` is bound to (`Some("")`: unscheduled).
    pub fn pod_node(&self, namespace: &str, name: &str) -> Option<&str> {
        let key = wire::object_key("pods", Some(namespace), name);
        match &self.objects.get(&key)?.info {
            Info::Pod { node, .. } => Some(node),
            _ => None,
        }
    }

    /// The edge nodes.
    pub fn edge_nodes(&self) -> impl Iterator<Item = &str> {
        self.edge.iter().map(String::as_str)
    }

    /// Node `node` holds a session: it is served if its Node exists (see the module doc). Returns
    /// what a node that just became served should hold.
    pub fn connect(&mut self, node: &str) -> Vec<Out> {
        if !self.connected.insert(node.to_owned()) || self.edge.contains(node) {
            return Vec::new();
        }
        if !self
            .objects
            .contains_key(&wire::object_key("nodes", None, node))
        {
            return Vec::new();
        }
        self.edge.insert(node.to_owned());
        self.desired(node)
            .into_iter()
            .map(|o| Out::Upsert(node.to_owned(), o))
            .collect()
    }

    /// Node `node` lost its session: without the label it is no longer served (nothing is sent
    /// or deleted; its next session resyncs it).
    pub fn disconnect(&mut self, node: &str) {
        self.connected.remove(node);
        let key = wire::object_key("nodes", None, node);
        let labelled = self
            .objects
            .get(&key)
            .is_some_and(|o| matches!(o.info, Info::Node { edge: true, .. }));
        if !labelled {
            self.edge.remove(node);
        }
    }

    /// True when `node` holds a session but is not served (it has no Node).
    pub fn unserved(&self, node: &str) -> bool {
        self.connected.contains(node) && !self.edge.contains(node)
    }

    /// The names of the Nodes that exist.
    pub fn node_names(&self) -> Vec<String> {
        self.objects
            .values()
            .filter(|o| matches!(o.info, Info::Node { .. }))
            .map(|o| o.id.name.clone())
            .collect()
    }

    /// An object was added or changed.
    pub fn apply(&mut self, obj: Obj) -> Vec<Out> {
        let obj = Arc::new(obj);
        let old = self.objects.insert(obj.key.clone(), obj.clone());
        if old
            .as_ref()
            .is_some_and(|o| o.rv == obj.rv && o.json == obj.json)
        {
            return Vec::new();
        }
        let mut out = Vec::new();
        match self.kinds[obj.kind].scope {
            Scope::Node => self.node_changed(&obj, &mut out),
            Scope::Named => self.to_owner(&obj, Out::Upsert, &mut out),
            Scope::Pod => self.pod_changed(old.as_ref(), &obj, &mut out),
            Scope::Referenced => {
                for node in self.referencing(&obj.key) {
                    out.push(Out::Upsert(node, obj.clone()));
                }
            }
            Scope::Global => self.place_everywhere(&obj, &mut out),
            Scope::Custom => self.custom_changed(old.as_ref(), &obj, &mut out),
            Scope::Subscribed => {
                self.of_kind
                    .entry(obj.kind)
                    .or_default()
                    .insert(obj.key.clone());
                for node in self.subscribed_edge_nodes(obj.kind) {
                    out.push(Out::Upsert(node, obj.clone()));
                }
            }
            Scope::Group => {
                self.group_keys.insert(obj.id.name.clone(), obj.key.clone());
                for node in self.group_members(&obj.id.name) {
                    out.push(Out::Upsert(node, obj.clone()));
                }
            }
        }
        out
    }

    /// The edge nodes whose label names group `group`.
    fn group_members(&self, group: &str) -> Vec<String> {
        self.members
            .get(group)
            .into_iter()
            .flatten()
            .filter(|n| self.edge.contains(*n))
            .cloned()
            .collect()
    }

    /// The NodeGroup object named `group`, if watched.
    fn group_object(&self, group: &str) -> Option<&Arc<Obj>> {
        self.objects.get(self.group_keys.get(group)?)
    }

    /// Node `node` now names group `group` (empty: none); returns the group it named before.
    fn regroup(&mut self, node: &str, group: &str) -> String {
        let old = match group.is_empty() {
            true => self.group_of.remove(node),
            false => self.group_of.insert(node.to_owned(), group.to_owned()),
        }
        .unwrap_or_default();
        if old != group {
            if let Some(nodes) = self.members.get_mut(&old) {
                nodes.remove(node);
                if nodes.is_empty() {
                    self.members.remove(&old);
                }
            }
            if !group.is_empty() {
                self.members
                    .entry(group.to_owned())
                    .or_default()
                    .insert(node.to_owned());
            }
        }
        old
    }

    /// An object was deleted.
    pub fn delete(&mut self, key: &str) -> Vec<Out> {
        let Some(obj) = self.objects.remove(key) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        match self.kinds[obj.kind].scope {
            Scope::Node => {
                self.regroup(&obj.id.name, "");
                if self.edge.remove(&obj.id.name) {
                    out.push(Out::Delete(obj.id.name.clone(), obj));
                }
            }
            Scope::Group => {
                self.group_keys.remove(&obj.id.name);
                for node in self.group_members(&obj.id.name) {
                    out.push(Out::Delete(node, obj.clone()));
                }
            }
            Scope::Named => self.to_owner(&obj, Out::Delete, &mut out),
            Scope::Pod => {
                if let Info::Pod { node, refs } = &obj.info
                    && !node.is_empty()
                {
                    self.unbind(node, &obj, refs, &mut out);
                }
            }
            Scope::Referenced => {
                for node in self.referencing(key) {
                    out.push(Out::Delete(node, obj.clone()));
                }
            }
            Scope::Global => self.remove_everywhere(&obj, &mut out),
            Scope::Custom => self.unplace(&obj, &mut out),
            Scope::Subscribed => {
                if let Some(keys) = self.of_kind.get_mut(&obj.kind) {
                    keys.remove(key);
                }
                for node in self.subscribed_edge_nodes(obj.kind) {
                    out.push(Out::Delete(node, obj.clone()));
                }
            }
        }
        out
    }

    /// The edge nodes subscribed to kind `kind`.
    fn subscribed_edge_nodes(&self, kind: usize) -> Vec<String> {
        self.subscribers
            .get(&kind)
            .into_iter()
            .flatten()
            .filter(|n| self.edge.contains(*n))
            .cloned()
            .collect()
    }

    /// A watch of kind `kind` relisted: `objs` is everything there is now. What disappeared
    /// while the watch was down is deleted, the rest applied.
    pub fn relist(&mut self, kind: usize, objs: Vec<Obj>) -> Vec<Out> {
        let fresh: HashSet<&str> = objs.iter().map(|o| o.key.as_str()).collect();
        let gone: Vec<String> = self
            .objects
            .values()
            .filter(|o| o.kind == kind && !fresh.contains(o.key.as_str()))
            .map(|o| o.key.clone())
            .collect();
        let mut out = Vec::new();
        for key in gone {
            out.extend(self.delete(&key));
        }
        for obj in objs {
            out.extend(self.apply(obj));
        }
        out
    }

    /// Everything `node` should hold (nothing unless it is an edge node): its Node, the objects
    /// named after it (Lease, CSINode), what its pods reference, the global objects, then its pods.
    pub fn desired(&self, node: &str) -> Vec<Arc<Obj>> {
        if !self.edge.contains(node) {
            return Vec::new();
        }
        let node_key = wire::object_key("nodes", None, node);
        let named: Vec<String> = self
            .kinds
            .iter()
            .filter(|k| k.scope == Scope::Named)
            .map(|k| wire::object_key(&k.store_resource(), k.namespace.as_deref(), node))
            .collect();
        let refs = self.node_refs.get(node).into_iter().flat_map(|m| m.keys());
        let pods = self.pods_on.get(node).into_iter().flatten();
        let bound = self.bound_on.get(node).into_iter().flatten();
        let subscribed = self
            .subscribers
            .iter()
            .filter(|(_, nodes)| nodes.contains(node))
            .flat_map(|(kind, _)| self.of_kind.get(kind).into_iter().flatten());
        let group = self.group_of.get(node).and_then(|g| self.group_keys.get(g));
        std::iter::once(&node_key)
            .chain(group)
            .chain(&named)
            .chain(refs)
            .chain(self.globals.iter())
            .chain(bound)
            .chain(subscribed)
            .chain(pods)
            .filter_map(|k| self.objects.get(k).cloned())
            .collect()
    }

    /// The digest of [`State::desired`], as the edge store computes it.
    pub fn digest(&self, node: &str) -> wire::Digest {
        wire::digest(
            self.desired(node)
                .iter()
                .map(|o| (o.key.as_str(), o.rv.as_str())),
        )
    }

    /// A global object goes to every edge node.
    fn place_everywhere(&mut self, obj: &Arc<Obj>, out: &mut Vec<Out>) {
        self.globals.insert(obj.key.clone());
        for node in &self.edge {
            out.push(Out::Upsert(node.clone(), obj.clone()));
        }
    }

    fn remove_everywhere(&mut self, obj: &Arc<Obj>, out: &mut Vec<Out>) {
        self.globals.remove(&obj.key);
        for node in &self.edge {
            out.push(Out::Delete(node.clone(), obj.clone()));
        }
    }

    /// A custom resource goes to the node it is bound to, or to every node; moving it takes it
    /// away from where it was.
    fn custom_changed(&mut self, old: Option<&Arc<Obj>>, obj: &Arc<Obj>, out: &mut Vec<Out>) {
        let node = bound_node(obj);
        if let Some(old) = old.filter(|o| bound_node(o) != node) {
            let mut gone = Vec::new();
            self.unplace(old, &mut gone);
            // Nodes that keep it get the new version below rather than a delete.
            gone.retain(|o| matches!(o, Out::Delete(n, _) if !node.is_empty() && n != node));
            out.extend(gone);
        }
        match node {
            "" => self.place_everywhere(obj, out),
            node => {
                self.bound_on
                    .entry(node.into())
                    .or_default()
                    .insert(obj.key.clone());
                if self.edge.contains(node) {
                    out.push(Out::Upsert(node.into(), obj.clone()));
                }
            }
        }
    }

    /// Takes a custom resource away from where it is placed.
    fn unplace(&mut self, obj: &Arc<Obj>, out: &mut Vec<Out>) {
        match bound_node(obj) {
            "" => self.remove_everywhere(obj, out),
            node => {
                if let Some(keys) = self.bound_on.get_mut(node) {
                    keys.remove(&obj.key);
                    if keys.is_empty() {
                        self.bound_on.remove(node);
                    }
                }
                if self.edge.contains(node) {
                    out.push(Out::Delete(node.into(), obj.clone()));
                }
            }
        }
    }

    fn node_changed(&mut self, obj: &Arc<Obj>, out: &mut Vec<Out>) {
        let group = match &obj.info {
            Info::Node { group, .. } => group.as_str(),
            _ => "",
        };
        let old_group = self.regroup(&obj.id.name, group);
        let is_edge = matches!(obj.info, Info::Node { edge: true, .. })
            || self.connected.contains(&obj.id.name);
        let was_edge = self.edge.contains(&obj.id.name);
        match (was_edge, is_edge) {
            (false, true) => {
                // A new edge node: everything it should hold.
                self.edge.insert(obj.id.name.clone());
                for o in self.desired(&obj.id.name) {
                    out.push(Out::Upsert(obj.id.name.clone(), o));
                }
            }
            (true, true) => {
                out.push(Out::Upsert(obj.id.name.clone(), obj.clone()));
                if old_group != group {
                    // Moved between groups: the old one goes, the new one comes.
                    if let Some(old) = self.group_object(&old_group) {
                        out.push(Out::Delete(obj.id.name.clone(), old.clone()));
                    }
                    if let Some(new) = self.group_object(group) {
                        out.push(Out::Upsert(obj.id.name.clone(), new.clone()));
                    }
                }
            }
            (true, false) => {
                self.edge.remove(&obj.id.name);
            }
            (false, false) => {}
        }
    }

    /// Sends an object named after a node (its Lease, its CSINode) to that node; the watch of
    /// leases covers only `kube-node-lease`.
    fn to_owner(&self, obj: &Arc<Obj>, out_of: fn(String, Arc<Obj>) -> Out, out: &mut Vec<Out>) {
        if self.edge.contains(&obj.id.name) {
            out.push(out_of(obj.id.name.clone(), obj.clone()));
        }
    }

    fn pod_changed(&mut self, old: Option<&Arc<Obj>>, obj: &Arc<Obj>, out: &mut Vec<Out>) {
        let Info::Pod { node, refs } = &obj.info else {
            return;
        };
        let mut old_refs: &[String] = &[];
        if let Some(old) = old
            && let Info::Pod {
                node: old_node,
                refs: held,
            } = &old.info
        {
            // An unbound pod holds no references: binding it (the scheduler) references all.
            if old_node == node {
                old_refs = held;
            } else if !old_node.is_empty() {
                self.unbind(old_node, old, held, out);
            }
        }
        if node.is_empty() {
            return;
        }
        self.pods_on
            .entry(node.clone())
            .or_default()
            .insert(obj.key.clone());
        for r in refs.iter().filter(|r| !old_refs.contains(r)) {
            self.reference(node, r, out);
        }
        for r in old_refs.iter().filter(|r| !refs.contains(r)) {
            self.release(node, r, out);
        }
        if self.edge.contains(node) {
            out.push(Out::Upsert(node.clone(), obj.clone()));
        }
    }

    /// Takes pod `obj` (with `refs`) off `node`.
    fn unbind(&mut self, node: &str, obj: &Arc<Obj>, refs: &[String], out: &mut Vec<Out>) {
        if let Some(pods) = self.pods_on.get_mut(node) {
            pods.remove(&obj.key);
            if pods.is_empty() {
                self.pods_on.remove(node);
            }
        }
        if self.edge.contains(node) {
            out.push(Out::Delete(node.into(), obj.clone()));
        }
        for r in refs {
            self.release(node, r, out);
        }
    }

    fn reference(&mut self, node: &str, key: &str, out: &mut Vec<Out>) {
        let count = self
            .node_refs
            .entry(node.into())
            .or_default()
            .entry(key.into())
            .or_default();
        *count += 1;
        let first = *count == 1;
        *self
            .ref_nodes
            .entry(key.into())
            .or_default()
            .entry(node.into())
            .or_default() += 1;
        if first
            && self.edge.contains(node)
            && let Some(obj) = self.objects.get(key)
        {
            out.push(Out::Upsert(node.into(), obj.clone()));
        }
    }

    fn release(&mut self, node: &str, key: &str, out: &mut Vec<Out>) {
        let last = decrement(&mut self.node_refs, node, key);
        decrement(&mut self.ref_nodes, key, node);
        if last
            && self.edge.contains(node)
            && let Some(obj) = self.objects.get(key)
        {
            out.push(Out::Delete(node.into(), obj.clone()));
        }
    }

    /// The edge nodes whose pods reference `key`.
    fn referencing(&self, key: &str) -> Vec<String> {
        self.ref_nodes
            .get(key)
            .into_iter()
            .flat_map(|m| m.keys())
            .filter(|n| self.edge.contains(*n))
            .cloned()
            .collect()
    }
}

/// The node a custom resource is bound to (`""`: none).
fn bound_node(obj: &Obj) -> &str {
    match &obj.info {
        Info::Custom { node } => node,
        _ => "",
    }
}

/// Counts one reference fewer; true when it was the last.
fn decrement(map: &mut HashMap<String, HashMap<String, u32>>, outer: &str, inner: &str) -> bool {
    let Some(counts) = map.get_mut(outer) else {
        return false;
    };
    let Some(count) = counts.get_mut(inner) else {
        return false;
    };
    *count -= 1;
    if *count > 0 {
        return false;
    }
    counts.remove(inner);
    if counts.is_empty() {
        map.remove(outer);
    }
    true
}

/// What a pod references that its node reads ([`apimachinery::podrefs::readable`]: its service
/// account, secrets, configmaps and persistentvolumeclaims), as store keys, sorted and without
/// duplicates.
pub(crate) fn pod_refs(namespace: &str, pod: &Value) -> Vec<String> {
    apimachinery::podrefs::readable(pod)
        .into_iter()
        .map(|(resource, name)| wire::object_key(resource, Some(namespace), &name))
        .collect()
}

#[cfg(test)]
mod tests;
