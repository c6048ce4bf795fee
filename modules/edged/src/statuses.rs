//! edged's status manager (the kubelet's `status_manager`): the latest status of each pod, by
//! uid, written to the API by one task, so a pod worker never waits on the cloud. A worker
//! offers the status its sync computed and goes on; a slow or half-open link delays the
//! report, never the pod's restarts. A newer status offered before the last one was written
//! replaces it (only the latest matters). A pod whose containers all stopped after its
//! deletion is deleted for good (grace 0, uid precondition) here too, after its last status
//! was written, as the kubelet's status manager does.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, Patch, PatchParams, Preconditions};
use serde_json::{Value, json};
use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::spec::PodId;

/// How long a pod's failed write waits before it is tried again.
const RETRY: Duration = Duration::from_secs(2);

/// The statuses to write, and what was written, by pod uid.
#[derive(Default)]
pub(crate) struct Statuses {
    pods: Mutex<HashMap<String, Entry>>,
    wake: Notify,
}

/// One pod's reports.
struct Entry {
    id: PodId,
    /// The status to write next, if any.
    pending: Option<Report>,
    /// The last status written.
    reported: Option<Reported>,
    /// The pod's containers all stopped after its deletion: delete it once its status is out.
    delete: bool,
    /// The final delete was accepted.
    deleted: bool,
    /// A write failed: not before this.
    retry_at: Option<Instant>,
}

/// A status offered by the pod's worker.
#[derive(Clone, PartialEq)]
struct Report {
    status: Value,
    /// The status the store held when it was computed.
    held: Option<Value>,
    /// For a static pod, the mirror pod reported to.
    mirror: Option<String>,
}

/// The last status written: while the store holds what it held then or what the API
/// answered, the same status is not written again; once it holds another (someone else wrote
/// it, or a mirror pod was created again), it is.
struct Reported {
    sent: Value,
    before: Option<Value>,
    after: Option<Value>,
    mirror: Option<String>,
}

/// What the writer does next.
enum Work {
    Write(PodId, Report),
    Delete(PodId),
    /// Nothing due before this.
    WaitUntil(Instant),
    Idle,
}

// === impl Statuses ===

impl Statuses {
    /// Offers pod `id`'s latest `status`, computed from the pod whose store status is `held`;
    /// returns at once.
    pub(crate) fn offer(
        &self,
        id: &PodId,
        status: Value,
        held: Option<Value>,
        mirror: Option<String>,
    ) {
        let mut pods = self.lock();
        let entry = pods.entry(id.uid.clone()).or_insert_with(|| Entry::new(id));
        let report = Report {
            status,
            held,
            mirror,
        };
        if entry.written(&report) || same_status(report.held.as_ref(), &report.status) {
            entry.pending = None;
            return;
        }
        if entry.pending.as_ref() == Some(&report) {
            return;
        }
        entry.pending = Some(report);
        drop(pods);
        self.wake.notify_one();
    }

    /// Pod `id` stopped after its deletion: delete it for good once its status is written.
    /// Returns whether that delete was accepted already.
    pub(crate) fn delete_when_reported(&self, id: &PodId) -> bool {
        let mut pods = self.lock();
        let entry = pods.entry(id.uid.clone()).or_insert_with(|| Entry::new(id));
        if !entry.deleted && !entry.delete {
            entry.delete = true;
            drop(pods);
            self.wake.notify_one();
            return false;
        }
        entry.deleted
    }

    /// Pod `uid` left the node: nothing more to write for it.
    pub(crate) fn forget(&self, uid: &str) {
        self.lock().remove(uid);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Entry>> {
        self.pods.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Writes what is offered until `shutdown`.
    pub(crate) async fn run(&self, client: kube::Client, shutdown: CancellationToken) {
        loop {
            let work = self.next_work(Instant::now());
            let wait = match work {
                Work::Write(id, report) => {
                    self.write(&client, id, report).await;
                    continue;
                }
                Work::Delete(id) => {
                    self.delete(&client, id).await;
                    continue;
                }
                Work::WaitUntil(at) => Some(at),
                Work::Idle => None,
            };
            let until = async {
                match wait {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                biased;
                _ = shutdown.cancelled() => return,
                _ = self.wake.notified() => {}
                _ = until => {}
            }
        }
    }

    /// The next write or delete due at `now`: statuses first, a pod's delete only once its
    /// status is out.
    fn next_work(&self, now: Instant) -> Work {
        let mut pods = self.lock();
        let mut earliest: Option<Instant> = None;
        for entry in pods.values_mut() {
            if let Some(at) = entry.retry_at.filter(|at| *at > now) {
                earliest = Some(earliest.map_or(at, |e| e.min(at)));
                continue;
            }
            if let Some(report) = &entry.pending {
                return Work::Write(entry.id.clone(), report.clone());
            }
            if entry.delete && !entry.deleted {
                return Work::Delete(entry.id.clone());
            }
        }
        earliest.map_or(Work::Idle, Work::WaitUntil)
    }

    async fn write(&self, client: &kube::Client, id: PodId, report: Report) {
        let api: Api<Pod> = Api::namespaced(client.clone(), &id.namespace);
        let patch = Patch::Merge(json!({"status": report.status}));
        let result = api
            .patch_status(&id.name, &PatchParams::default(), &patch)
            .await;
        let mut pods = self.lock();
        let Some(entry) = pods.get_mut(&id.uid) else {
            return;
        };
        match result {
            // What the API made of it (it may normalize the status) is what the store will
            // hold: the report is in flight while the store holds that or what it held before.
            Ok(answer) => {
                let after = answer.status.and_then(|s| serde_json::to_value(s).ok());
                if entry.pending.as_ref() == Some(&report) {
                    entry.pending = None;
                }
                entry.retry_at = None;
                entry.reported = Some(Reported {
                    sent: report.status,
                    before: report.held,
                    after,
                    mirror: report.mirror,
                });
            }
            Err(e) => {
                tracing::warn!(pod = %id.key(), error = %e, "pod status not sent; retrying");
                entry.retry_at = Some(Instant::now() + RETRY);
            }
        }
    }

    /// The delete with grace 0 and the pod's uid that ends a graceful deletion.
    async fn delete(&self, client: &kube::Client, id: PodId) {
        let api: Api<Pod> = Api::namespaced(client.clone(), &id.namespace);
        let params = DeleteParams {
            grace_period_seconds: Some(0),
            preconditions: Some(Preconditions {
                uid: Some(id.uid.clone()),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        let accepted = match api.delete(&id.name, &params).await {
            Ok(_) => true,
            Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => true,
            Err(e) => {
                tracing::info!(pod = %id.key(), error = %e, "final delete not accepted yet; retrying");
                false
            }
        };
        let mut pods = self.lock();
        if let Some(entry) = pods.get_mut(&id.uid) {
            entry.deleted = accepted;
            entry.retry_at = (!accepted).then(|| Instant::now() + RETRY);
        }
    }
}

// === impl Entry ===

impl Entry {
    fn new(id: &PodId) -> Entry {
        Entry {
            id: id.clone(),
            pending: None,
            reported: None,
            delete: false,
            deleted: false,
            retry_at: None,
        }
    }

    /// Whether `report` was written and the store still holds what it held then or what the
    /// API answered.
    fn written(&self, report: &Report) -> bool {
        self.reported.as_ref().is_some_and(|r| {
            r.sent == report.status
                && r.mirror == report.mirror
                && (r.before == report.held || r.after == report.held)
        })
    }
}

/// Whether the status held in the store already says what `new` says (ignoring how the API
/// wrote its times).
fn same_status(held: Option<&Value>, new: &Value) -> bool {
    held.is_some_and(|h| strip_times(h.clone()) == strip_times(new.clone()))
}

fn strip_times(mut v: Value) -> Value {
    if let Some(conds) = v["conditions"].as_array_mut() {
        for c in conds {
            if let Some(o) = c.as_object_mut() {
                o.remove("lastTransitionTime");
                o.remove("lastProbeTime");
            }
        }
    }
    if let Some(o) = v.as_object_mut() {
        o.remove("startTime");
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(uid: &str) -> PodId {
        PodId {
            namespace: "default".into(),
            name: format!("pod-{uid}"),
            uid: uid.into(),
        }
    }

    fn status(phase: &str) -> Value {
        json!({"phase": phase})
    }

    #[test]
    fn only_the_latest_status_offered_is_written() {
        let statuses = Statuses::default();
        statuses.offer(&id("a"), status("Pending"), None, None);
        statuses.offer(&id("a"), status("Running"), None, None);
        match statuses.next_work(Instant::now()) {
            Work::Write(id, report) => {
                assert_eq!(id.uid, "a");
                assert_eq!(report.status, status("Running"));
            }
            _ => panic!("a write is due"),
        }
    }

    #[test]
    fn a_status_the_store_already_holds_is_not_written() {
        let statuses = Statuses::default();
        let held = json!({"phase": "Running", "startTime": "2026-01-01T00:00:00Z"});
        statuses.offer(&id("a"), status("Running"), Some(held), None);
        assert!(matches!(statuses.next_work(Instant::now()), Work::Idle));
    }

    #[test]
    fn a_delete_waits_for_the_pods_last_status() {
        let statuses = Statuses::default();
        statuses.offer(&id("a"), status("Succeeded"), None, None);
        assert!(!statuses.delete_when_reported(&id("a")));
        assert!(matches!(
            statuses.next_work(Instant::now()),
            Work::Write(..)
        ));
        statuses.lock().get_mut("a").unwrap().pending = None;
        assert!(matches!(
            statuses.next_work(Instant::now()),
            Work::Delete(..)
        ));
    }

    #[test]
    fn a_failed_write_waits_for_its_retry_while_other_pods_go_on() {
        let statuses = Statuses::default();
        statuses.offer(&id("a"), status("Running"), None, None);
        let now = Instant::now();
        statuses.lock().get_mut("a").unwrap().retry_at = Some(now + RETRY);
        statuses.offer(&id("b"), status("Running"), None, None);
        match statuses.next_work(now) {
            Work::Write(id, _) => assert_eq!(id.uid, "b"),
            _ => panic!("b's write is due"),
        }
        statuses.lock().get_mut("b").unwrap().pending = None;
        assert!(matches!(statuses.next_work(now), Work::WaitUntil(at) if at == now + RETRY));
        assert!(matches!(statuses.next_work(now + RETRY), Work::Write(..)));
    }
}
