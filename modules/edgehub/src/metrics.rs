//! edgehub's Prometheus metrics, read at scrape time: whether the node is linked, through
//! which cloudhub endpoint, and when it last heard from the cloud.

use std::sync::atomic::Ordering;
use std::time::{SystemTime, UNIX_EPOCH};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::registry::Registry;

use crate::{Handle, LinkState};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ServerLabel {
    server: String,
}

/// Registers the link metrics of `hub` under `edgehub_`.
pub(crate) fn register(registry: &mut Registry, hub: &Handle) {
    let sub = registry.sub_registry_with_prefix("edgehub");
    let linked = match &*hub.state.borrow() {
        LinkState::Connected { server, .. } => Some(server.clone()),
        LinkState::Disconnected => None,
    };
    sub.register(
        "connected",
        "1 while the node is linked to cloudhub, else 0",
        ConstGauge::new(i64::from(linked.is_some())),
    );
    let servers = Family::<ServerLabel, Gauge>::default();
    for server in &hub.servers {
        let up = linked.as_deref() == Some(server.as_str());
        let label = ServerLabel {
            server: server.clone(),
        };
        servers.get_or_create(&label).set(i64::from(up));
    }
    sub.register(
        "server_info",
        "The cloudhub endpoints this node dials: 1 for the one it is linked through",
        servers,
    );
    sub.register(
        "last_sync_timestamp_seconds",
        "Unix time of the last session start or ack from the cloud (0: never)",
        ConstGauge::new(hub.stats.last_sync.load(Ordering::Relaxed) as i64),
    );
    sub.register(
        "upstream_oversized_drops",
        "Upstream messages dropped unsent because their frame exceeded the link's frame limit",
        ConstCounter::new(hub.stats.upstream_oversized.load(Ordering::Relaxed)),
    );
    sub.register(
        "connects",
        "Sessions established since start",
        ConstGauge::new(hub.stats.connects.load(Ordering::Relaxed) as i64),
    );
}

/// Now, in unix seconds.
pub(crate) fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}
