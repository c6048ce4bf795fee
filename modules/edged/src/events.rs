//! Kubernetes Events about the node's pods (`Unhealthy`, `Killing`, `Failed`, `BackOff`,
//! `FailedMount`, ...), sent as the kubelet sends them: `source.component` `kubelet`, the node
//! as host, and a repeat of the same event within ten minutes counted on the first one (its
//! `count` and `lastTimestamp` patched) instead of written again. Recording never waits: events
//! are queued to one sender task and dropped when the queue is full or the cloud is away (an
//! Event is advice, not state; lwproxy refuses creates while offline).

use std::collections::HashMap;
use std::time::{Duration, Instant, SystemTime};

use k8s_openapi::api::core::v1::{Event, Pod};
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;
use tokio::sync::{Mutex, mpsc};
use tokio_util::sync::CancellationToken;

/// How many events may wait to be sent.
const QUEUE: usize = 256;
/// A repeat within this long is counted on the first event.
const AGGREGATE_FOR: Duration = Duration::from_secs(600);
/// How many distinct events are remembered for counting.
const REMEMBERED: usize = 4096;

/// Records events (cheap to clone).
#[derive(Clone)]
pub struct Events {
    tx: mpsc::Sender<Record>,
}

/// The queue's receiving end, drained by [`Sink::run`].
pub struct Sink {
    rx: Mutex<mpsc::Receiver<Record>>,
}

/// What an event is about: a pod, or one of its containers.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Involved {
    namespace: String,
    name: String,
    uid: String,
    /// `spec.containers{name}` for a container, empty for the pod.
    field_path: String,
}

/// What makes two events the same: they are counted as one.
type Aggregate = (Involved, bool, String, String);

#[derive(Debug)]
struct Record {
    involved: Involved,
    warning: bool,
    reason: String,
    message: String,
}

/// Creates an event queue.
pub fn channel() -> (Events, Sink) {
    let (tx, rx) = mpsc::channel(QUEUE);
    (Events { tx }, Sink { rx: Mutex::new(rx) })
}

// === impl Involved ===

impl Involved {
    /// The pod.
    pub fn pod(pod: &Pod) -> Involved {
        Involved {
            namespace: pod.metadata.namespace.clone().unwrap_or_default(),
            name: pod.metadata.name.clone().unwrap_or_default(),
            uid: pod.metadata.uid.clone().unwrap_or_default(),
            field_path: String::new(),
        }
    }

    /// Container `name` of the pod (an init container or an app container).
    pub fn container(pod: &Pod, name: &str) -> Involved {
        let init = pod
            .spec
            .as_ref()
            .and_then(|s| s.init_containers.as_ref())
            .is_some_and(|cs| cs.iter().any(|c| c.name == name));
        let list = if init { "initContainers" } else { "containers" };
        Involved {
            field_path: format!("spec.{list}{{{name}}}"),
            ..Involved::pod(pod)
        }
    }
}

// === impl Events ===

impl Events {
    /// Records a `Normal` event.
    pub fn normal(&self, involved: &Involved, reason: &str, message: &str) {
        self.record(involved, false, reason, message);
    }

    /// Records a `Warning` event.
    pub fn warning(&self, involved: &Involved, reason: &str, message: &str) {
        self.record(involved, true, reason, message);
    }

    fn record(&self, involved: &Involved, warning: bool, reason: &str, message: &str) {
        let record = Record {
            involved: involved.clone(),
            warning,
            reason: reason.into(),
            message: message.into(),
        };
        if self.tx.try_send(record).is_err() {
            tracing::debug!(reason, "event queue full: event dropped");
        }
    }
}

// === impl Sink ===

impl Sink {
    /// Sends the queued events through `client` as node `node`'s kubelet until shutdown.
    pub async fn run(&self, client: kube::Client, node: String, shutdown: CancellationToken) {
        let mut rx = self.rx.lock().await;
        let mut sent: HashMap<Aggregate, (String, i32, Instant)> = HashMap::new();
        loop {
            let record = tokio::select! {
                _ = shutdown.cancelled() => return,
                r = rx.recv() => match r {
                    Some(r) => r,
                    None => return,
                },
            };
            let api: Api<Event> = Api::namespaced(client.clone(), &record.involved.namespace);
            let now = apimachinery::time::now_rfc3339();
            let key = (
                record.involved.clone(),
                record.warning,
                record.reason.clone(),
                record.message.clone(),
            );
            if let Some((name, count, first)) = sent.get_mut(&key)
                && first.elapsed() < AGGREGATE_FOR
            {
                *count += 1;
                let patch = json!({"count": *count, "lastTimestamp": now});
                let patched = api
                    .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await;
                if let Err(e) = patched {
                    tracing::debug!(error = %e, "event count not updated");
                }
                continue;
            }
            let name = format!(
                "{}.{:x}",
                record.involved.name,
                SystemTime::now()
                    .duration_since(SystemTime::UNIX_EPOCH)
                    .unwrap_or_default()
                    .as_nanos()
            );
            let event = event(&record, &name, &node, &now);
            match api.create(&PostParams::default(), &event).await {
                Ok(_) => {
                    if sent.len() >= REMEMBERED {
                        sent.retain(|_, v| v.2.elapsed() < AGGREGATE_FOR);
                        if sent.len() >= REMEMBERED {
                            sent.clear();
                        }
                    }
                    sent.insert(key, (name, 1, Instant::now()));
                }
                Err(e) => tracing::debug!(error = %e, reason = %record.reason, "event not sent"),
            }
        }
    }
}

fn event(record: &Record, name: &str, node: &str, now: &str) -> Event {
    let i = &record.involved;
    let mut involved = json!({
        "apiVersion": "v1", "kind": "Pod",
        "namespace": i.namespace, "name": i.name, "uid": i.uid,
    });
    if !i.field_path.is_empty() {
        involved["fieldPath"] = json!(i.field_path);
    }
    let value = json!({
        "metadata": {"name": name, "namespace": i.namespace},
        "involvedObject": involved,
        "reason": record.reason,
        "message": record.message,
        "type": if record.warning { "Warning" } else { "Normal" },
        "source": {"component": "kubelet", "host": node},
        "reportingComponent": "kubelet",
        "reportingInstance": node,
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    });
    serde_json::from_value(value).expect("an Event built from known fields")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_names_its_container_and_the_node_as_source() {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "web", "namespace": "shop", "uid": "u1"},
            "spec": {"initContainers": [{"name": "setup"}], "containers": [{"name": "app"}]},
        }))
        .unwrap();
        let record = Record {
            involved: Involved::container(&pod, "app"),
            warning: true,
            reason: "Unhealthy".into(),
            message: "Liveness probe failed: boom".into(),
        };
        let e = serde_json::to_value(event(&record, "web.1", "edge-1", "2026-01-01T00:00:00Z"))
            .unwrap();
        assert_eq!(e["involvedObject"]["fieldPath"], "spec.containers{app}");
        assert_eq!(e["involvedObject"]["uid"], "u1");
        assert_eq!(e["type"], "Warning");
        assert_eq!(e["source"]["host"], "edge-1");
        assert_eq!(e["count"], 1);
        assert_eq!(
            Involved::container(&pod, "setup").field_path,
            "spec.initContainers{setup}"
        );
        assert_eq!(Involved::pod(&pod).field_path, "");
    }
}
