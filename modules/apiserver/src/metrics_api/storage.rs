//! The last two readings of every node and container, and the usage they give, as
//! metrics-server keeps them: CPU is the rate of the cumulative counter between the two
//! readings (`Δ core-seconds / Δ time`, over the window between their timestamps), memory is the
//! working set of the last one. A reading with the timestamp already held changes nothing (the
//! kubelet serves the same sample until it takes a new one); a container whose start time
//! changed starts over (its counter restarted); a counter that went down gives no rate. A
//! node's entry is replaced on each scrape of it (containers that went are dropped) and the
//! whole node is forgotten once its last scrape is older than the caller's bound. Pure: the
//! caller passes the time.

use std::collections::BTreeMap;

use super::parse::{ContainerKey, Point, Scrape};

/// The readings of every scraped node.
#[derive(Debug, Default)]
pub(crate) struct Storage {
    nodes: BTreeMap<String, NodeEntry>,
}

/// A usage computed from two readings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Usage {
    pub(crate) cpu_nanocores: u64,
    pub(crate) memory_bytes: u64,
    /// The last reading's timestamp (Unix milliseconds).
    pub(crate) timestamp_ms: i64,
    /// Between the two readings.
    pub(crate) window_ms: i64,
}

/// A pod's containers' usage (by container name), with the pod's timestamp and window.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct PodUsage {
    pub(crate) containers: BTreeMap<String, Usage>,
    pub(crate) timestamp_ms: i64,
    pub(crate) window_ms: i64,
}

#[derive(Debug)]
struct NodeEntry {
    node: Option<Pair>,
    containers: BTreeMap<ContainerKey, Pair>,
    /// When it was last scraped (Unix milliseconds, the caller's clock).
    scraped_ms: i64,
}

/// The last reading and the one before it.
#[derive(Clone, Copy, Debug)]
struct Pair {
    last: Point,
    prev: Option<Point>,
}

// === impl Storage ===

impl Storage {
    /// Takes in one scrape of `node`, made at `now_ms`.
    pub(crate) fn store(&mut self, node: &str, scrape: Scrape, now_ms: i64) {
        let old = self.nodes.remove(node);
        let (old_node, mut old_containers) = match old {
            Some(e) => (e.node, e.containers),
            None => (None, BTreeMap::new()),
        };
        let containers = scrape
            .containers
            .into_iter()
            .map(|(k, p)| {
                let pair = Pair::advance(old_containers.remove(&k), p);
                (k, pair)
            })
            .collect();
        let entry = NodeEntry {
            node: scrape.node.map(|p| Pair::advance(old_node, p)),
            containers,
            scraped_ms: now_ms,
        };
        self.nodes.insert(node.to_owned(), entry);
    }

    /// Forgets every node last scraped before `now_ms - max_age_ms`.
    pub(crate) fn prune(&mut self, now_ms: i64, max_age_ms: i64) {
        self.nodes
            .retain(|_, e| now_ms.saturating_sub(e.scraped_ms) <= max_age_ms);
    }

    /// The usage of `node`, when two readings of it give one.
    pub(crate) fn node(&self, node: &str) -> Option<Usage> {
        self.nodes.get(node)?.node?.usage()
    }

    /// Every pod with at least one container whose two readings give a usage, by
    /// (namespace, pod). A pod seen on two nodes (it moved) is taken from the latest.
    pub(crate) fn pods(&self) -> BTreeMap<(String, String), PodUsage> {
        let mut pods: BTreeMap<(String, String), PodUsage> = BTreeMap::new();
        for entry in self.nodes.values() {
            let mut here: BTreeMap<(String, String), PodUsage> = BTreeMap::new();
            for (k, pair) in &entry.containers {
                let Some(usage) = pair.usage() else { continue };
                let pod = here
                    .entry((k.namespace.clone(), k.pod.clone()))
                    .or_insert(PodUsage {
                        containers: BTreeMap::new(),
                        timestamp_ms: usage.timestamp_ms,
                        window_ms: usage.window_ms,
                    });
                if usage.timestamp_ms > pod.timestamp_ms {
                    pod.timestamp_ms = usage.timestamp_ms;
                    pod.window_ms = usage.window_ms;
                }
                pod.containers.insert(k.container.clone(), usage);
            }
            for (key, pod) in here {
                match pods.get(&key) {
                    Some(seen) if seen.timestamp_ms >= pod.timestamp_ms => {}
                    _ => {
                        pods.insert(key, pod);
                    }
                }
            }
        }
        pods
    }
}

#[cfg(test)]
impl Storage {
    /// The nodes held.
    pub(crate) fn nodes(&self) -> Vec<String> {
        self.nodes.keys().cloned().collect()
    }
}

// === impl Pair ===

impl Pair {
    /// `old` followed by reading `p`.
    fn advance(old: Option<Pair>, p: Point) -> Pair {
        match old {
            Some(old) if p.at_ms == old.last.at_ms => old,
            Some(old) if p.at_ms > old.last.at_ms && same_start(&old.last, &p) => Pair {
                last: p,
                prev: Some(old.last),
            },
            _ => Pair {
                last: p,
                prev: None,
            },
        }
    }

    /// The rate between the two readings, if there are two, in time order, and the counter
    /// did not go down.
    fn usage(&self) -> Option<Usage> {
        let prev = self.prev?;
        let window_ms = self.last.at_ms - prev.at_ms;
        let used = self.last.cpu_seconds - prev.cpu_seconds;
        if window_ms <= 0 || used < 0.0 {
            return None;
        }
        let rate = used / (window_ms as f64 / 1000.0);
        Some(Usage {
            cpu_nanocores: (rate * 1e9).round() as u64,
            memory_bytes: self.last.memory_bytes.round() as u64,
            timestamp_ms: self.last.at_ms,
            window_ms,
        })
    }
}

/// Whether two readings are of the same run of a container (no start time counts as the same).
fn same_start(a: &Point, b: &Point) -> bool {
    match (a.started, b.started) {
        (Some(x), Some(y)) => x == y,
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(cpu: f64, mem: f64, at_ms: i64) -> Point {
        Point {
            cpu_seconds: cpu,
            memory_bytes: mem,
            at_ms,
            started: None,
        }
    }

    fn key(pod: &str, container: &str) -> ContainerKey {
        ContainerKey {
            namespace: "default".into(),
            pod: pod.into(),
            container: container.into(),
        }
    }

    fn scrape(node: Point, containers: &[(ContainerKey, Point)]) -> Scrape {
        Scrape {
            node: Some(node),
            containers: containers.iter().cloned().collect(),
        }
    }

    #[test]
    fn cpu_is_the_counters_rate_between_the_last_two_readings() {
        let mut s = Storage::default();
        s.store("n1", scrape(point(100.0, 10.0, 10_000), &[]), 0);
        assert_eq!(s.node("n1"), None, "one reading gives no rate");
        // 1.5 core-seconds in 15 s: 0.1 cores.
        s.store("n1", scrape(point(101.5, 2048.0, 25_000), &[]), 1);
        let usage = s.node("n1").unwrap();
        assert_eq!(usage.cpu_nanocores, 100_000_000);
        assert_eq!(usage.memory_bytes, 2048);
        assert_eq!((usage.timestamp_ms, usage.window_ms), (25_000, 15_000));
        // The same sample served again changes nothing.
        s.store("n1", scrape(point(101.5, 4096.0, 25_000), &[]), 2);
        assert_eq!(s.node("n1").unwrap().cpu_nanocores, 100_000_000);
        // The next one rates against the one before it, not the first.
        s.store("n1", scrape(point(104.5, 1.0, 35_000), &[]), 3);
        assert_eq!(s.node("n1").unwrap().cpu_nanocores, 300_000_000);
    }

    #[test]
    fn a_counter_that_went_down_or_a_restarted_container_gives_no_rate() {
        let mut s = Storage::default();
        s.store("n1", scrape(point(10.0, 1.0, 1_000), &[]), 0);
        s.store("n1", scrape(point(5.0, 1.0, 2_000), &[]), 0);
        assert_eq!(s.node("n1"), None);

        let started = |at, start| Point {
            started: Some(start),
            ..point(1.0, 1.0, at)
        };
        s.store(
            "n1",
            scrape(point(0.0, 0.0, 0), &[(key("p", "c"), started(1_000, 1.0))]),
            0,
        );
        s.store(
            "n1",
            scrape(point(0.0, 0.0, 0), &[(key("p", "c"), started(2_000, 2.0))]),
            0,
        );
        assert!(s.pods().is_empty(), "the restart starts over");
        s.store(
            "n1",
            scrape(point(0.0, 0.0, 0), &[(key("p", "c"), started(3_000, 2.0))]),
            0,
        );
        assert_eq!(s.pods().len(), 1);
    }

    #[test]
    fn pods_gather_their_containers_and_vanished_containers_are_dropped() {
        let mut s = Storage::default();
        let first = [
            (key("web", "app"), point(1.0, 100.0, 1_000)),
            (key("web", "sidecar"), point(0.0, 50.0, 1_000)),
            (key("db", "pg"), point(0.0, 50.0, 1_000)),
        ];
        s.store("n1", scrape(point(0.0, 0.0, 0), &first), 0);
        let second = [
            (key("web", "app"), point(3.0, 200.0, 11_000)),
            (key("web", "sidecar"), point(0.5, 60.0, 11_000)),
        ];
        s.store("n1", scrape(point(0.0, 0.0, 0), &second), 0);
        let pods = s.pods();
        assert_eq!(pods.len(), 1, "db went away: {pods:?}");
        let web = &pods[&("default".to_string(), "web".to_string())];
        assert_eq!(web.containers["app"].cpu_nanocores, 200_000_000);
        assert_eq!(web.containers["app"].memory_bytes, 200);
        assert_eq!(web.containers["sidecar"].cpu_nanocores, 50_000_000);
        assert_eq!((web.timestamp_ms, web.window_ms), (11_000, 10_000));
    }

    #[test]
    fn nodes_not_scraped_for_longer_than_the_bound_are_forgotten() {
        let mut s = Storage::default();
        s.store("old", scrape(point(0.0, 0.0, 0), &[]), 1_000);
        s.store("new", scrape(point(0.0, 0.0, 0), &[]), 50_000);
        s.prune(60_000, 45_000);
        assert_eq!(s.nodes.len(), 1);
        assert!(s.nodes.contains_key("new"));
    }
}
