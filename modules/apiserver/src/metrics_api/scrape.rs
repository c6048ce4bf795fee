//! The scrape loop: every `metricResolution`, `GET /metrics/resource` from each Ready node
//! through the [`NodeDialer`], at most `scrapeConcurrency` at once and each within
//! `scrapeTimeout`; each answer goes into the [`Storage`](super::storage::Storage), and nodes
//! not scraped for three resolutions are forgotten. A node that cannot be reached, answers
//! an error or sends text that does not parse ends its own scrape with a logged warning
//! naming it (a node with no link to this cloudcore only at debug level: routine at the
//! edge); the others are not affected.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use kapi::nodes::{DialError, FetchError, NodeDialer};
use serde_json::Value;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::parse::{self, ParseError, Scrape};
use super::{MetricsConfig, Shared};

/// The kubelet path the resource metrics come from.
pub(crate) const PATH: &str = "/metrics/resource";
/// The most of a `/metrics/resource` answer read (a node with hundreds of pods sends well
/// under 1 MiB).
const BODY_LIMIT: usize = 8 << 20;

/// Why one node's scrape failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ScrapeError {
    /// The node could not be dialed or did not answer 200.
    #[error(transparent)]
    Fetch(#[from] FetchError),
    /// The answer is not the metrics text.
    #[error("reading {PATH} of node {node}: {source}")]
    Parse {
        node: String,
        #[source]
        source: ParseError,
    },
    /// No answer within `scrapeTimeout`.
    #[error("node {node} did not answer {PATH} within {timeout:?}")]
    Timeout { node: String, timeout: Duration },
}

/// What the loop reads from and writes to.
pub(crate) struct Scraper {
    pub(crate) store: objstore::Store,
    pub(crate) dialer: Arc<dyn NodeDialer>,
    pub(crate) storage: Shared,
    pub(crate) config: MetricsConfig,
}

// === impl Scraper ===

impl Scraper {
    /// Scrapes every resolution until shutdown.
    pub(crate) async fn run(self, shutdown: CancellationToken) {
        let mut tick = tokio::time::interval(self.config.metric_resolution);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                biased;
                _ = shutdown.cancelled() => return,
                _ = tick.tick() => self.scrape_all().await,
            }
        }
    }

    /// One round: every Ready node, concurrently within the bound.
    pub(crate) async fn scrape_all(&self) {
        let nodes = match ready_nodes(&self.store).await {
            Ok(nodes) => nodes,
            Err(e) => {
                tracing::warn!(error = %e, "metrics: listing nodes failed");
                return;
            }
        };
        let bound = Arc::new(Semaphore::new(self.config.scrape_concurrency.max(1)));
        let mut scrapes = JoinSet::new();
        for node in nodes {
            let (bound, dialer) = (bound.clone(), self.dialer.clone());
            let timeout = self.config.scrape_timeout;
            scrapes.spawn(async move {
                // The semaphore is never closed.
                let _permit = bound.acquire_owned().await.ok();
                let result = scrape(&*dialer, &node, timeout).await;
                (node, result)
            });
        }
        while let Some(done) = scrapes.join_next().await {
            let Ok((node, result)) = done else { continue };
            match result {
                Ok(scrape) => self.storage.write().store(&node, scrape, now_ms()),
                // An edge node without a link is routine: not worth a warning each round.
                Err(ScrapeError::Fetch(FetchError::Dial(e @ DialError::NotConnected { .. }))) => {
                    tracing::debug!(node_id = %node, error = %e, "metrics: node not scraped")
                }
                Err(e) => tracing::warn!(node_id = %node, error = %e, "metrics: scrape failed"),
            }
        }
        let max_age = 3 * self.config.metric_resolution.as_millis() as i64;
        self.storage.write().prune(now_ms(), max_age);
    }
}

/// One node's resource metrics.
async fn scrape(
    dialer: &dyn NodeDialer,
    node: &str,
    timeout: Duration,
) -> Result<Scrape, ScrapeError> {
    let fetched = tokio::time::timeout(timeout, kapi::nodes::get(dialer, node, PATH, BODY_LIMIT))
        .await
        .map_err(|_| ScrapeError::Timeout {
            node: node.to_owned(),
            timeout,
        })??;
    parse::parse(&fetched, now_ms()).map_err(|source| ScrapeError::Parse {
        node: node.to_owned(),
        source,
    })
}

/// The names of the nodes whose `Ready` condition is `True`.
async fn ready_nodes(store: &objstore::Store) -> Result<Vec<String>, objstore::StoreError> {
    let listed = store.list(objstore::ListOptions::new("nodes")).await?;
    Ok(listed
        .items
        .iter()
        .filter(|o| is_ready(&o.value))
        .map(|o| o.key.name.clone())
        .collect())
}

fn is_ready(node: &[u8]) -> bool {
    let Ok(node) = serde_json::from_slice::<Value>(node) else {
        return false;
    };
    node["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["type"] == "Ready" && c["status"] == "True")
}

/// The wall clock in Unix milliseconds.
pub(crate) fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kapi::nodes::NodeStream;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// `good` answers metrics, `bad` answers text that does not parse, `slow` never answers,
    /// anything else is not connected.
    struct Nodes;

    #[async_trait::async_trait]
    impl NodeDialer for Nodes {
        async fn dial(&self, node: &str) -> Result<Box<dyn NodeStream>, DialError> {
            let body = match node {
                "good" => {
                    "node_cpu_usage_seconds_total 1 1000\nnode_memory_working_set_bytes 2048 1000\n"
                }
                "bad" => "node_cpu_usage_seconds_total{ oops\n",
                "slow" => std::future::pending().await,
                _ => return Err(DialError::NotConnected { node: node.into() }),
            };
            let (client, mut server) = tokio::io::duplex(4096);
            tokio::spawn(async move {
                let mut head = [0u8; 1024];
                let _ = server.read(&mut head).await;
                let answer = format!(
                    "HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n{body}",
                    body.len()
                );
                let _ = server.write_all(answer.as_bytes()).await;
            });
            Ok(Box::new(client))
        }
    }

    #[tokio::test]
    async fn a_round_stores_the_nodes_that_answer_and_outlasts_bad_slow_and_absent_ones() {
        let dir = tempfile::tempdir().unwrap();
        let writer = objstore::Writer::open(dir.path().join("s.db"), Default::default()).unwrap();
        let ready =
            serde_json::json!({"status": {"conditions": [{"type": "Ready", "status": "True"}]}});
        for node in ["good", "bad", "slow", "gone"] {
            let value = serde_json::to_vec(&ready).unwrap();
            let key = objstore::ObjKey::new("nodes", "", node);
            writer
                .put(key, objstore::NewObject::from_value(value))
                .await
                .unwrap();
        }
        let scraper = Scraper {
            store: writer.reader(),
            dialer: Arc::new(Nodes),
            storage: Shared::default(),
            config: MetricsConfig {
                metric_resolution: Duration::from_secs(60),
                scrape_timeout: Duration::from_millis(200),
                scrape_concurrency: 2,
            },
        };
        let round = tokio::time::timeout(Duration::from_secs(5), scraper.scrape_all());
        round
            .await
            .expect("a slow node costs one timeout, not the round");
        let storage = scraper.storage.read();
        assert_eq!(storage.nodes(), vec!["good".to_string()]);
    }

    #[test]
    fn only_nodes_with_ready_true_are_scraped() {
        let node = |status: &str| {
            serde_json::to_vec(&serde_json::json!({
                "status": {"conditions": [{"type": "Ready", "status": status}]}
            }))
            .unwrap()
        };
        assert!(is_ready(&node("True")));
        assert!(!is_ready(&node("Unknown")));
        assert!(!is_ready(b"{}"));
        assert!(!is_ready(b"not json"));
    }
}
