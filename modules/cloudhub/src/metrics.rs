//! cloudhub's Prometheus metrics, filled at scrape time from the node counters.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::registry::Registry;

use crate::NodeCounters;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct NodeLabel {
    node: String,
}

pub(crate) fn register(
    registry: &mut Registry,
    sessions: usize,
    handshakes_refused: u64,
    (handshakes, handshakes_waiting): (usize, usize),
    nodes: impl Iterator<Item = (String, NodeCounters)>,
) {
    let sub = registry.sub_registry_with_prefix("cloudhub");
    sub.register(
        "sessions",
        "Nodes with a live session",
        ConstGauge::new(sessions as i64),
    );
    sub.register(
        "handshakes",
        "Handshakes in progress (at most maxConcurrentHandshakes)",
        ConstGauge::new(handshakes as i64),
    );
    sub.register(
        "handshakes_waiting",
        "Connections waiting for a handshake slot",
        ConstGauge::new(handshakes_waiting as i64),
    );
    let queued = Family::<NodeLabel, Gauge>::default();
    let in_flight = Family::<NodeLabel, Gauge>::default();
    let mut total = NodeCounters::default();
    for (node, c) in nodes {
        if c.queued > 0 || c.in_flight > 0 {
            queued
                .get_or_create(&NodeLabel { node: node.clone() })
                .set(c.queued as i64);
            in_flight
                .get_or_create(&NodeLabel { node })
                .set(c.in_flight as i64);
        }
        total.sent += c.sent;
        total.retransmits += c.retransmits;
        total.acked += c.acked;
        total.dropped += c.dropped;
        total.oversized += c.oversized;
        total.resyncs += c.resyncs;
        total.upstream += c.upstream;
        total.bytes_sent += c.bytes_sent;
        total.bytes_received += c.bytes_received;
    }
    sub.register(
        "queue_depth",
        "Downstream messages waiting per node (nodes with any)",
        queued,
    );
    sub.register(
        "in_flight",
        "Downstream messages sent and not yet acked per node (nodes with any)",
        in_flight,
    );
    let counters = [
        (
            "messages_sent",
            "Downstream data frames sent for the first time",
            total.sent,
        ),
        (
            "retransmits",
            "Downstream data frames sent again after a timeout",
            total.retransmits,
        ),
        (
            "acks",
            "Downstream messages acked by edges (committed there)",
            total.acked,
        ),
        (
            "drops",
            "Downstream messages refused because a node queue was full (the node is resynced)",
            total.dropped,
        ),
        (
            "oversized_drops",
            "Downstream messages dropped unsent because their frame exceeded the link's frame limit",
            total.oversized,
        ),
        (
            "resyncs",
            "Resyncs by inventory (digests differed)",
            total.resyncs,
        ),
        (
            "handshakes_refused",
            "Connections refused after waiting a whole handshake timeout for a handshake slot",
            handshakes_refused,
        ),
        (
            "upstream_messages",
            "Upstream data frames taken from edges",
            total.upstream,
        ),
        ("bytes_sent", "Frame bytes sent to edges", total.bytes_sent),
        (
            "bytes_received",
            "Frame bytes received from edges",
            total.bytes_received,
        ),
    ];
    for (name, help, value) in counters {
        sub.register(name, help, ConstCounter::new(value));
    }
}
