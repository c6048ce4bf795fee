//! Events the controllers record for what users look at (`kubectl describe`: `Scheduled`,
//! `FailedScheduling`, ...), written by one task from a bounded queue so recording never
//! waits; when the queue is full an event is dropped (events are advice, not state).

use k8s_openapi::api::core::v1::Event;
use kube::Resource;
use kube::api::{Api, PostParams};
use serde_json::json;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// Events waiting to be written.
const QUEUE: usize = 1024;

/// Records events for one component (cheap to clone).
#[derive(Clone)]
pub struct Recorder {
    tx: mpsc::Sender<Event>,
    component: &'static str,
}

// === impl Recorder ===

impl Recorder {
    /// A recorder for `component` (`default-scheduler`, `deployment-controller`, ...) and the
    /// task that writes its events through `client` until shutdown.
    pub fn new(
        client: kube::Client,
        component: &'static str,
        shutdown: CancellationToken,
    ) -> (Recorder, impl Future<Output = ()>) {
        let (tx, mut rx) = mpsc::channel::<Event>(QUEUE);
        let writer = async move {
            loop {
                let event = tokio::select! {
                    _ = shutdown.cancelled() => return,
                    e = rx.recv() => match e { Some(e) => e, None => return },
                };
                let ns = event.metadata.namespace.clone().unwrap_or_default();
                let api: Api<Event> = Api::namespaced(client.clone(), &ns);
                if let Err(e) = api.create(&PostParams::default(), &event).await {
                    tracing::debug!(error = %e, reason = ?event.reason, "event not written");
                }
            }
        };
        (Recorder { tx, component }, writer)
    }

    /// A `Normal` event about `obj`.
    pub fn normal<K: Resource<DynamicType = ()>>(&self, obj: &K, reason: &str, message: &str) {
        self.record(obj, "Normal", reason, message);
    }

    /// A `Warning` event about `obj`.
    pub fn warning<K: Resource<DynamicType = ()>>(&self, obj: &K, reason: &str, message: &str) {
        self.record(obj, "Warning", reason, message);
    }

    fn record<K: Resource<DynamicType = ()>>(
        &self,
        obj: &K,
        kind: &str,
        reason: &str,
        message: &str,
    ) {
        let meta = obj.meta();
        let name = meta.name.clone().unwrap_or_default();
        let ns = meta.namespace.clone().unwrap_or_else(|| "default".into());
        let now = apimachinery::time::now_rfc3339();
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos();
        let value = json!({
            "metadata": {"name": format!("{name}.{nanos:x}"), "namespace": ns},
            "involvedObject": {
                "apiVersion": K::api_version(&()), "kind": K::kind(&()),
                "namespace": meta.namespace, "name": name, "uid": meta.uid,
                "resourceVersion": meta.resource_version,
            },
            "reason": reason, "message": message, "type": kind,
            "source": {"component": self.component},
            "reportingComponent": self.component,
            "firstTimestamp": now, "lastTimestamp": now, "count": 1,
        });
        let Ok(event) = serde_json::from_value::<Event>(value) else {
            return;
        };
        if self.tx.try_send(event).is_err() {
            tracing::debug!(reason, "event queue full: event dropped");
        }
    }
}
