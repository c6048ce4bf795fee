//! Field paths and sets in Kubernetes' FieldsV1 form: a path is a list of elements, each
//! written as FieldsV1 writes it (`f:spec`, `k:{"name":"c"}` for an item of a list keyed by
//! its merge keys, `v:"x"` for an item of a set, `i:0` for a position), so sets order and
//! compare as their text does.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value};

/// One step: `f:<field>`, `k:<keys as JSON>`, `v:<value as JSON>` or `i:<index>`.
pub(crate) type Element = String;
/// The elements from the object's root.
pub(crate) type Path = Vec<Element>;

/// A set of paths: the fields (and list items) one manager owns.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct FieldSet {
    paths: BTreeSet<Path>,
}

/// What an element names.
#[derive(Debug, PartialEq)]
pub(crate) enum Step {
    Field(String),
    Key(Map<String, Value>),
    Value(Value),
    Index(usize),
}

/// A node of the FieldsV1 tree being written.
#[derive(Default)]
struct Node {
    member: bool,
    children: BTreeMap<Element, Node>,
}

// === impl FieldSet ===

impl FieldSet {
    pub(crate) fn insert(&mut self, path: Path) {
        self.paths.insert(path);
    }

    pub(crate) fn contains(&self, path: &[Element]) -> bool {
        self.paths.contains(path)
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.paths.is_empty()
    }

    pub(crate) fn iter(&self) -> impl DoubleEndedIterator<Item = &Path> {
        self.paths.iter()
    }

    pub(crate) fn retain(&mut self, keep: impl FnMut(&Path) -> bool) {
        self.paths.retain(keep);
    }

    pub(crate) fn extend(&mut self, other: &FieldSet) {
        self.paths.extend(other.paths.iter().cloned());
    }

    /// Whether `path` or a path below it is in the set.
    pub(crate) fn covers(&self, path: &[Element]) -> bool {
        let below = self.paths.range(path.to_vec()..);
        below.take(1).any(|p| p.starts_with(path))
    }

    /// From FieldsV1 JSON (`{"f:spec": {"f:replicas": {}}}`); anything that is not an object
    /// is an empty set.
    pub(crate) fn from_fields_v1(value: &Value) -> FieldSet {
        let mut set = FieldSet::default();
        if let Value::Object(map) = value {
            read_node(map, &mut Vec::new(), &mut set);
        }
        set
    }

    /// As FieldsV1 JSON: a member with no children is `{}`, one with children has `".": {}`.
    pub(crate) fn to_fields_v1(&self) -> Value {
        let mut root = Node::default();
        for path in &self.paths {
            let mut node = &mut root;
            for element in path {
                node = node.children.entry(element.clone()).or_default();
            }
            node.member = true;
        }
        root.to_value()
    }
}

impl FromIterator<Path> for FieldSet {
    fn from_iter<I: IntoIterator<Item = Path>>(iter: I) -> FieldSet {
        FieldSet {
            paths: iter.into_iter().collect(),
        }
    }
}

// === impl Node ===

impl Node {
    fn to_value(&self) -> Value {
        let mut map = Map::new();
        if self.member && !self.children.is_empty() {
            map.insert(".".to_owned(), Value::Object(Map::new()));
        }
        for (element, child) in &self.children {
            map.insert(element.clone(), child.to_value());
        }
        Value::Object(map)
    }
}

// === elements ===

pub(crate) fn field(name: &str) -> Element {
    format!("f:{name}")
}

/// `k:{"containerPort":80,"protocol":"TCP"}`: the key fields, in name order.
pub(crate) fn key(fields: &Map<String, Value>) -> Element {
    format!("k:{}", Value::Object(fields.clone()))
}

pub(crate) fn value(v: &Value) -> Element {
    format!("v:{v}")
}

/// What `element` names, or `None` for text that is no element.
pub(crate) fn step(element: &str) -> Option<Step> {
    let (kind, rest) = element.split_at_checked(2)?;
    match kind {
        "f:" => Some(Step::Field(rest.to_owned())),
        "k:" => match serde_json::from_str(rest).ok()? {
            Value::Object(map) => Some(Step::Key(map)),
            _ => None,
        },
        "v:" => serde_json::from_str(rest).ok().map(Step::Value),
        "i:" => rest.parse().ok().map(Step::Index),
        _ => None,
    }
}

/// A path as kube-apiserver prints it in conflicts: `.spec.containers[name="c"].image`,
/// `.metadata.finalizers[="x"]`, `.spec.args[0]`.
pub(crate) fn display(path: &[Element]) -> String {
    let mut out = String::new();
    for element in path {
        match step(element) {
            Some(Step::Field(name)) => {
                out.push('.');
                out.push_str(&name);
            }
            Some(Step::Key(keys)) => {
                let parts: Vec<String> = keys.iter().map(|(k, v)| format!("{k}={v}")).collect();
                out.push_str(&format!("[{}]", parts.join(",")));
            }
            Some(Step::Value(v)) => out.push_str(&format!("[={v}]")),
            Some(Step::Index(i)) => out.push_str(&format!("[{i}]")),
            None => out.push_str(element),
        }
    }
    out
}

fn read_node(map: &Map<String, Value>, prefix: &mut Path, set: &mut FieldSet) {
    for (element, child) in map {
        if element == "." {
            if !prefix.is_empty() {
                set.insert(prefix.clone());
            }
            continue;
        }
        prefix.push(element.clone());
        match child {
            Value::Object(children) if !children.is_empty() => read_node(children, prefix, set),
            _ => set.insert(prefix.clone()),
        }
        prefix.pop();
    }
}
