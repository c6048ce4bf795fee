//! Which node a request is for: kube-apiserver dials a node's kubelet at the address it picked
//! from `Node.status.addresses` (by `--kubelet-preferred-address-types`) and sends it as the
//! request's `Host`. [`Addresses`] maps every address of every node (and each node's name) back
//! to the node, with no I/O; [`NodeIndex`] keeps it current from a watch of the Nodes.

use std::collections::{BTreeSet, HashMap};
use std::net::IpAddr;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;
use kube::api::Api;
use kube::runtime::{WatchStreamExt, watcher};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// How long a request waits for the first list of the Nodes.
const SYNC_WAIT: Duration = Duration::from_secs(10);

/// Why no single node has an address.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum LookupError {
    /// No node has it.
    #[error(
        "no node has the address {host:?} (the request's Host): cloudStream serves the nodes in Node.status.addresses"
    )]
    Unknown { host: String },
    /// Several nodes have it.
    #[error(
        "the address {host:?} (the request's Host) belongs to several nodes ({}): set kube-apiserver's --kubelet-preferred-address-types to a type whose addresses are unique",
        nodes.join(", ")
    )]
    Ambiguous { host: String, nodes: Vec<String> },
    /// The Nodes were not listed yet.
    #[error("the nodes are not listed yet (watching Nodes in the Kubernetes API); try again")]
    NotSynced,
}

/// Every node's addresses, normalized ([`normalize`]).
#[derive(Clone, Debug, Default)]
pub struct Addresses {
    by_node: HashMap<String, Vec<String>>,
}

/// [`Addresses`] followed from a watch of the Nodes; lookups wait for the first list.
pub struct NodeIndex {
    addresses: RwLock<Addresses>,
    synced: watch::Sender<bool>,
}

// === impl Addresses ===

impl Addresses {
    /// Sets `node`'s addresses (as in its `status.addresses`).
    pub fn set<'a>(&mut self, node: &str, addresses: impl IntoIterator<Item = &'a str>) {
        let mut list: Vec<String> = addresses.into_iter().map(normalize).collect();
        list.sort();
        list.dedup();
        self.by_node.insert(node.to_owned(), list);
    }

    /// Forgets `node`.
    pub fn remove(&mut self, node: &str) {
        self.by_node.remove(node);
    }

    /// The node whose name or one of whose addresses is `host` (a host without port, an IPv6
    /// address with or without brackets).
    pub fn lookup(&self, host: &str) -> Result<String, LookupError> {
        let wanted = normalize(host);
        let matching: BTreeSet<&str> = self
            .by_node
            .iter()
            .filter(|(name, addresses)| normalize(name) == wanted || addresses.contains(&wanted))
            .map(|(name, _)| name.as_str())
            .collect();
        let mut matching = matching.into_iter();
        match (matching.next(), matching.next()) {
            (Some(only), None) => Ok(only.to_owned()),
            (None, _) => Err(LookupError::Unknown {
                host: host.to_owned(),
            }),
            (Some(first), Some(second)) => Err(LookupError::Ambiguous {
                host: host.to_owned(),
                nodes: [first, second]
                    .into_iter()
                    .chain(matching)
                    .map(str::to_owned)
                    .collect(),
            }),
        }
    }
}

/// An address as compared: an IP in its canonical form (brackets dropped), a name in lower case
/// without a trailing dot.
fn normalize(address: &str) -> String {
    let bare = address.trim_start_matches('[').trim_end_matches(']');
    match bare.parse::<IpAddr>() {
        Ok(ip) => ip.to_string(),
        Err(_) => bare.trim_end_matches('.').to_ascii_lowercase(),
    }
}

/// The host of a `Host` value or an authority (`10.0.0.5:10250`, `[fd00::5]:10250`, `edge-1`).
pub fn host_of(authority: &str) -> Option<&str> {
    let (host, v6) = match authority.strip_prefix('[') {
        Some(v6) => (&v6[..v6.find(']')?], true),
        None => match authority.rsplit_once(':') {
            Some((host, port)) if port.bytes().all(|b| b.is_ascii_digit()) => (host, false),
            _ => (authority, false),
        },
    };
    let valid = !host.is_empty() && !host.contains(['/', '@', ' ']) && (v6 || !host.contains(':'));
    valid.then_some(host)
}

// === impl NodeIndex ===

impl NodeIndex {
    pub fn new() -> Arc<NodeIndex> {
        Arc::new(NodeIndex {
            addresses: RwLock::new(Addresses::default()),
            synced: watch::channel(false).0,
        })
    }

    /// The node `host` names, once the Nodes were listed (waiting up to [`SYNC_WAIT`]).
    pub async fn lookup(&self, host: &str) -> Result<String, LookupError> {
        let mut synced = self.synced.subscribe();
        let listed = tokio::time::timeout(SYNC_WAIT, synced.wait_for(|s| *s)).await;
        if !matches!(listed, Ok(Ok(_))) {
            return Err(LookupError::NotSynced);
        }
        self.read().lookup(host)
    }

    /// Watches the Nodes through `client` until `shutdown`, relisting after errors.
    pub async fn follow(self: Arc<Self>, client: kube::Client, shutdown: CancellationToken) {
        let api: Api<Node> = Api::all(client);
        let events = watcher(api, watcher::Config::default()).default_backoff();
        tokio::pin!(events);
        let mut relisted: Option<Addresses> = None;
        loop {
            let event = tokio::select! {
                biased;
                _ = shutdown.cancelled() => return,
                event = events.next() => match event {
                    Some(event) => event,
                    None => return,
                },
            };
            match event {
                Ok(watcher::Event::Init) => relisted = Some(Addresses::default()),
                Ok(watcher::Event::InitApply(node)) => {
                    if let Some(list) = relisted.as_mut() {
                        set(list, &node);
                    }
                }
                Ok(watcher::Event::InitDone) => {
                    if let Some(list) = relisted.take() {
                        *self.write() = list;
                    }
                    self.synced.send_replace(true);
                }
                Ok(watcher::Event::Apply(node)) => set(&mut self.write(), &node),
                Ok(watcher::Event::Delete(node)) => {
                    self.write()
                        .remove(node.metadata.name.as_deref().unwrap_or_default());
                }
                Err(e) => tracing::warn!(error = %e, "watching Nodes for cloudStream failed"),
            }
        }
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Addresses> {
        // A panic while holding the lock leaves a whole map behind (set and remove replace
        // entries), so a poisoned lock is still usable.
        self.addresses.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Addresses> {
        self.addresses.write().unwrap_or_else(|e| e.into_inner())
    }
}

/// Records `node`'s addresses in `list`.
fn set(list: &mut Addresses, node: &Node) {
    let name = node.metadata.name.as_deref().unwrap_or_default();
    let addresses = node
        .status
        .iter()
        .flat_map(|s| s.addresses.iter().flatten())
        .map(|a| a.address.as_str());
    list.set(name, addresses);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn two_nodes() -> Addresses {
        let mut list = Addresses::default();
        list.set("edge-1", ["10.0.0.5", "edge-1.example", "fd00::0:5"]);
        list.set("edge-2", ["10.0.0.6", "shared.example"]);
        list
    }

    #[test]
    fn a_node_is_found_by_any_of_its_addresses_or_its_name() {
        let list = two_nodes();
        for host in [
            "10.0.0.5",
            "EDGE-1.example.",
            "fd00::5",
            "[fd00::5]",
            "edge-1",
        ] {
            assert_eq!(list.lookup(host), Ok("edge-1".to_owned()), "{host}");
        }
        assert_eq!(list.lookup("10.0.0.6"), Ok("edge-2".to_owned()));
    }

    #[test]
    fn an_unknown_address_is_refused_naming_it() {
        let err = two_nodes().lookup("192.0.2.9").unwrap_err();
        assert!(matches!(&err, LookupError::Unknown { host } if host == "192.0.2.9"));
        assert!(err.to_string().contains("192.0.2.9"), "{err}");
    }

    #[test]
    fn an_address_two_nodes_share_is_refused_naming_both() {
        let mut list = two_nodes();
        list.set("edge-3", ["shared.example"]);
        let err = list.lookup("shared.example").unwrap_err();
        assert_eq!(
            err,
            LookupError::Ambiguous {
                host: "shared.example".into(),
                nodes: vec!["edge-2".into(), "edge-3".into()],
            }
        );
        list.remove("edge-3");
        assert_eq!(list.lookup("shared.example"), Ok("edge-2".to_owned()));
    }

    #[test]
    fn the_host_of_a_host_header_drops_its_port() {
        assert_eq!(host_of("10.0.0.5:10250"), Some("10.0.0.5"));
        assert_eq!(host_of("[fd00::5]:10250"), Some("fd00::5"));
        assert_eq!(host_of("edge-1"), Some("edge-1"));
        assert_eq!(host_of("edge-1:10350"), Some("edge-1"));
        for bad in ["", ":10250", "[fd00::5", "a/b:1", "u@h:1"] {
            assert_eq!(host_of(bad), None, "{bad:?}");
        }
    }
}
