//! Events the controllers record for what users look at (`kubectl describe`: `Scheduled`,
//! `FailedScheduling`, ...), written by one task from a bounded queue so recording never
//! waits; when the queue is full an event is dropped (events are advice, not state). Before
//! writing, the task correlates as kube's recorder does ([`correlator`]): a repeated event
//! grows the `count` of the Event already written, similar ones are combined, and a spam
//! filter per object bounds what one object gets.

pub mod correlator;

use k8s_openapi::api::core::v1::Event;
use kube::Resource;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use correlator::{Correlator, Decision, Draft, ObjectKey};

/// Events waiting to be written.
const QUEUE: usize = 1024;

/// Records events for one component (cheap to clone).
#[derive(Clone)]
pub struct Recorder {
    tx: mpsc::Sender<Draft>,
    component: &'static str,
}

/// What a failed API call says to a user: the API's own message for an API error (`pods
/// "web-1" is forbidden: exceeded quota: ...`), never the Rust debug form of its Status.
pub fn error_message(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) if !s.message.is_empty() => s.message.clone(),
        kube::Error::Api(s) if !s.reason.is_empty() => s.reason.clone(),
        kube::Error::Api(s) => format!("the API answered {}", s.code),
        other => other.to_string(),
    }
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
        let (tx, mut rx) = mpsc::channel::<Draft>(QUEUE);
        let writer = async move {
            let mut correlator = Correlator::new(unix_nanos());
            loop {
                let draft = tokio::select! {
                    _ = shutdown.cancelled() => return,
                    e = rx.recv() => match e { Some(e) => e, None => return },
                };
                let decision = correlator.correlate(&draft, tokio::time::Instant::now());
                if let Err(e) = write(&client, &draft, &decision).await {
                    if let (Decision::Patch { name, .. }, kube::Error::Api(s)) = (&decision, &e)
                        && s.code == 404
                    {
                        correlator.forget(name);
                    }
                    tracing::debug!(error = %e, reason = draft.reason, "event not written");
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
        type_: &str,
        reason: &str,
        message: &str,
    ) {
        let meta = obj.meta();
        let draft = Draft {
            source: self.component.to_string(),
            object: ObjectKey {
                api_version: K::api_version(&()).into_owned(),
                kind: K::kind(&()).into_owned(),
                namespace: meta.namespace.clone().unwrap_or_default(),
                name: meta.name.clone().unwrap_or_default(),
                uid: meta.uid.clone().unwrap_or_default(),
            },
            type_: type_.to_string(),
            reason: reason.to_string(),
            message: message.to_string(),
        };
        if self.tx.try_send(draft).is_err() {
            tracing::debug!(reason, "event queue full: event dropped");
        }
    }
}

/// Writes what the correlator decided: a new Event, or a patch of the count of one written.
async fn write(
    client: &kube::Client,
    draft: &Draft,
    decision: &Decision,
) -> Result<(), kube::Error> {
    // Events about cluster-scoped objects go to `default`, as kube's recorder does.
    let ns = match draft.object.namespace.as_str() {
        "" => "default",
        ns => ns,
    };
    let api: Api<Event> = Api::namespaced(client.clone(), ns);
    let now = apimachinery::time::now_rfc3339();
    match decision {
        Decision::Drop => Ok(()),
        Decision::Create { name, message } => {
            let o = &draft.object;
            let value = json!({
                "metadata": {"name": name, "namespace": ns},
                "involvedObject": {
                    "apiVersion": o.api_version, "kind": o.kind, "name": o.name,
                    "namespace": (!o.namespace.is_empty()).then_some(&o.namespace),
                    "uid": (!o.uid.is_empty()).then_some(&o.uid),
                },
                "reason": draft.reason, "message": message, "type": draft.type_,
                "source": {"component": draft.source},
                "reportingComponent": draft.source,
                "firstTimestamp": now, "lastTimestamp": now, "count": 1,
            });
            let event: Event = serde_json::from_value(value).map_err(kube::Error::SerdeError)?;
            api.create(&PostParams::default(), &event).await.map(|_| ())
        }
        Decision::Patch {
            name,
            message,
            count,
        } => {
            let patch = json!({"count": count, "lastTimestamp": now, "message": message});
            api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .map(|_| ())
        }
    }
}

/// Nanoseconds since the epoch, to seed Event names.
fn unix_nanos() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_api_error_is_written_as_the_apis_message() {
        let status: kube::core::Status = serde_json::from_value(json!({
            "status": "Failure", "code": 403, "reason": "Forbidden",
            "message": "pods \"web-1\" is forbidden: exceeded quota: q, requested: pods=1",
        }))
        .unwrap();
        let message = error_message(&kube::Error::Api(Box::new(status)));
        assert_eq!(
            message,
            "pods \"web-1\" is forbidden: exceeded quota: q, requested: pods=1"
        );
    }
}
