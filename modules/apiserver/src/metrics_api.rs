//! The resource metrics API (`metrics.k8s.io/v1beta1`), built in where a cluster runs
//! metrics-server: `kubectl top node|pod` and the HorizontalPodAutoscaler read it. The
//! pipeline is metrics-server's: every `metricResolution` each Ready node's kubelet API is asked
//! for `/metrics/resource` through the [`kapi::nodes::NodeDialer`] ([`scrape`]: concurrent
//! within a bound, each node within a timeout), the text is read ([`parse`]) and the last two
//! readings of each node and container are kept ([`storage`]): CPU is the rate between them,
//! memory the last working set. Nothing is stored in the object store.
//!
//! The group is in the registry (so discovery lists `nodes` and `pods`, verbs `get` and
//! `list`), and its requests are answered by a layer in front of the REST routes ([`serve`]),
//! authorized as any read (`get`/`list` on `nodes.metrics.k8s.io`, `pods.metrics.k8s.io`).
//!
//! Built in rather than a separate crate: it needs the API server's store (which nodes are
//! Ready, the labels selectors match), its authorizer and its router, and nothing else uses it.

mod parse;
mod scrape;
mod serve;
mod storage;

use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::Duration;

use apimachinery::ResourceInfo;
use serde::{Deserialize, Serialize};

pub(crate) use scrape::Scraper;
pub(crate) use serve::{Service, serve};

/// The group and version served.
pub(crate) const GROUP: &str = "metrics.k8s.io";
pub(crate) const VERSION: &str = "v1beta1";

/// `modules.apiServer.metricsServer`: the built-in resource metrics pipeline.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct MetricsConfig {
    /// How often each node is scraped (metrics-server's `--metric-resolution`). Default `15s`.
    #[serde(with = "daemon::duration")]
    pub metric_resolution: Duration,
    /// How long one node has to answer. Default `10s`.
    #[serde(with = "daemon::duration")]
    pub scrape_timeout: Duration,
    /// Nodes scraped at once. Default 16.
    pub scrape_concurrency: usize,
}

/// The readings, shared by the scrape loop (one writer) and the request handlers.
#[derive(Clone, Default)]
pub(crate) struct Shared(Arc<RwLock<storage::Storage>>);

impl Default for MetricsConfig {
    fn default() -> Self {
        MetricsConfig {
            metric_resolution: Duration::from_secs(15),
            scrape_timeout: Duration::from_secs(10),
            scrape_concurrency: 16,
        }
    }
}

impl Shared {
    fn read(&self) -> RwLockReadGuard<'_, storage::Storage> {
        self.0.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> RwLockWriteGuard<'_, storage::Storage> {
        self.0.write().unwrap_or_else(|e| e.into_inner())
    }
}

/// `nodes` and `pods` of `metrics.k8s.io/v1beta1`, as metrics-server registers them.
pub(crate) fn resources() -> Vec<ResourceInfo> {
    let read_only = |mut info: ResourceInfo| {
        info.verbs = vec!["get".into(), "list".into()];
        info.singular = String::new();
        info
    };
    vec![
        read_only(ResourceInfo::new(
            GROUP,
            VERSION,
            "NodeMetrics",
            "nodes",
            false,
        )),
        read_only(ResourceInfo::new(
            GROUP,
            VERSION,
            "PodMetrics",
            "pods",
            true,
        )),
    ]
}

#[cfg(test)]
mod tests;
