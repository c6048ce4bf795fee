//! The Job controller, as kube-controller-manager's: a Job keeps
//! `min(parallelism, completions - succeeded)` pods active (for a Job without `completions`:
//! `parallelism` until one succeeds), each made from its template with the Job's labels and a
//! controller reference; failed pods are replaced after a back-off (10 s doubling, at most
//! 6 minutes) until `backoffLimit` failures, then the Job fails (`BackoffLimitExceeded`);
//! `activeDeadlineSeconds` fails it too (`DeadlineExceeded`); `suspend` keeps no pod active.
//! A finished Job has its `Complete` or `Failed` condition (with `SuccessCriteriaMet` or
//! `FailureTarget` before it, as Kubernetes 1.31+), its remaining active pods deleted, and is
//! deleted `ttlSecondsAfterFinished` after it finished when that is set. `Indexed` Jobs give
//! each pod its completion index (annotation, label and `JOB_COMPLETION_INDEX`).

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, PostParams, PropagationPolicy};
use reconciler::{Action, Cache, Queue, Stores};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::events::Recorder;
use crate::informer::{self, controller_ref, ignore_gone, key};

/// Controller name.
pub const NAME: &str = "job-controller";
const INDEX_ANNOTATION: &str = "batch.kubernetes.io/job-completion-index";

/// Runs the controller until shutdown.
pub async fn run(stores: Stores, events: Recorder, shutdown: CancellationToken) {
    let client = stores.client().clone();
    let (tx, rx) = reconciler::queue();
    let jobs = stores.keyed::<Job>(&tx);
    let pods = stores.owned_pods("Job", &tx);
    if !reconciler::wait_synced(&[&*jobs, &*pods], &shutdown).await {
        return;
    }
    let ctx = Context {
        client,
        jobs,
        pods,
        events,
        requeue: tx.clone(),
        creating: std::sync::Mutex::default(),
    };
    let ctx = Arc::new(ctx);
    reconciler::work(rx, "job", shutdown, move |k| {
        let ctx = ctx.clone();
        async move { ctx.sync(&k).await.map(|()| Action::AwaitChange) }
    })
    .await;
}

struct Context {
    client: kube::Client,
    jobs: Arc<Cache<Job>>,
    pods: Arc<Cache<Pod>>,
    events: Recorder,
    requeue: Queue,
    /// Pods created and not seen yet, by Job uid (with when).
    creating: std::sync::Mutex<std::collections::HashMap<String, (usize, std::time::Instant)>>,
}

fn phase(p: &Pod) -> &str {
    p.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("Pending")
}

fn has_condition(job: &Job, kind: &str) -> bool {
    job.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == kind && c.status == "True"))
}

// === impl Context ===

impl Context {
    fn later(&self, k: &str, after: Duration) {
        self.requeue.later(k, after);
    }

    async fn sync(&self, k: &str) -> Result<(), kube::Error> {
        let Some(job) = self.jobs.get(k) else {
            return Ok(());
        };
        if job.metadata.deletion_timestamp.is_some() {
            return Ok(());
        }
        let uid = job.metadata.uid.clone().unwrap_or_default();
        let ns = job.metadata.namespace.clone().unwrap_or_default();
        let spec = job.spec.clone().unwrap_or_default();
        let pods: Vec<Arc<Pod>> = self.pods.owned_by(&uid);
        let active: Vec<&Arc<Pod>> = pods
            .iter()
            .filter(|p| {
                p.metadata.deletion_timestamp.is_none()
                    && !matches!(phase(p), "Succeeded" | "Failed")
            })
            .collect();
        let succeeded = pods.iter().filter(|p| phase(p) == "Succeeded").count() as i32;
        let failed = pods.iter().filter(|p| phase(p) == "Failed").count() as i32;
        let ready = active
            .iter()
            .filter(|p| crate::replicaset::ready_since(p).is_some())
            .count();
        let pods_api: Api<Pod> = Api::namespaced(self.client.clone(), &ns);
        let now = apimachinery::time::now_unix();
        let finished = has_condition(&job, "Complete") || has_condition(&job, "Failed");
        if finished {
            for p in &active {
                ignore_gone(
                    pods_api
                        .delete(
                            p.metadata.name.as_deref().unwrap_or_default(),
                            &DeleteParams::default(),
                        )
                        .await
                        .map(|_| ()),
                )?;
            }
            return self.expire(&job, now).await;
        }
        let parallelism = spec.parallelism.unwrap_or(1).max(0);
        let completions = spec.completions;
        let backoff_limit = spec.backoff_limit.unwrap_or(6);
        let start = job
            .status
            .as_ref()
            .and_then(|s| s.start_time.as_ref())
            .map(|t| t.0.as_second());
        let deadline_hit = match (spec.active_deadline_seconds, start) {
            (Some(d), Some(s)) => now - s >= d,
            _ => false,
        };
        let outcome = if failed > backoff_limit {
            Some((
                "Failed",
                "BackoffLimitExceeded",
                "Job has reached the specified backoff limit".to_string(),
            ))
        } else if deadline_hit {
            Some((
                "Failed",
                "DeadlineExceeded",
                "Job was active longer than specified deadline".to_string(),
            ))
        } else if completions.is_some_and(|c| succeeded >= c)
            || (completions.is_none() && succeeded > 0 && active.is_empty())
        {
            Some((
                "Complete",
                "CompletionsReached",
                "Reached expected number of succeeded pods".to_string(),
            ))
        } else {
            None
        };
        if let Some((kind, reason, message)) = outcome {
            for p in &active {
                ignore_gone(
                    pods_api
                        .delete(
                            p.metadata.name.as_deref().unwrap_or_default(),
                            &DeleteParams::default(),
                        )
                        .await
                        .map(|_| ()),
                )?;
            }
            if kind == "Failed" {
                self.events.warning(&*job, reason, &message);
            } else {
                self.events.normal(&*job, "Completed", "Job completed");
            }
            return self
                .write_status(
                    &job,
                    0,
                    succeeded,
                    failed,
                    0,
                    Some((kind, reason, &message)),
                    now,
                )
                .await;
        }
        let suspended = spec.suspend.unwrap_or(false);
        let want = if suspended {
            0
        } else {
            match completions {
                Some(c) => parallelism.min(c - succeeded).max(0),
                None if succeeded > 0 => 0,
                None => parallelism,
            }
        } as usize;
        // Creates the watch has not shown yet count as active: the pods the Job should own by
        // now, against the pods (of any phase) it is seen to own.
        let in_flight = {
            let mut creating = self.creating.lock().unwrap_or_else(|e| e.into_inner());
            match creating.get(&uid) {
                Some((n, at)) if at.elapsed() < Duration::from_secs(30) && pods.len() < *n => {
                    *n - pods.len()
                }
                _ => {
                    creating.remove(&uid);
                    0
                }
            }
        };
        if active.len() + in_flight < want {
            // Back-off after failures: 10 s doubling, at most 6 minutes, from the last one.
            let last_failure = pods
                .iter()
                .filter(|p| phase(p) == "Failed")
                .filter_map(|p| {
                    p.metadata
                        .creation_timestamp
                        .as_ref()
                        .map(|t| t.0.as_second())
                })
                .max();
            let delay = if failed > 0 {
                (10i64 << (failed - 1).min(5)).min(360)
            } else {
                0
            };
            let due = last_failure.map_or(now, |t| t + delay);
            if now < due {
                self.later(k, Duration::from_secs((due - now) as u64));
            } else {
                let indexes = self.free_indexes(&job, &pods, want - active.len() - in_flight);
                let n = indexes.len();
                for index in indexes {
                    let pod = self.pod_for(&job, index);
                    let created = pods_api.create(&PostParams::default(), &pod).await?;
                    let message = format!(
                        "Created pod: {}",
                        created.metadata.name.as_deref().unwrap_or_default()
                    );
                    self.events.normal(&*job, "SuccessfulCreate", &message);
                }
                self.creating
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(uid.clone(), (pods.len() + n, std::time::Instant::now()));
            }
        } else if active.len() > want {
            for p in active.iter().skip(want) {
                ignore_gone(
                    pods_api
                        .delete(
                            p.metadata.name.as_deref().unwrap_or_default(),
                            &DeleteParams::default(),
                        )
                        .await
                        .map(|_| ()),
                )?;
            }
        }
        if let (Some(d), Some(s)) = (spec.active_deadline_seconds, start) {
            self.later(k, Duration::from_secs((s + d - now).max(1) as u64));
        }
        self.write_status(&job, active.len(), succeeded, failed, ready, None, now)
            .await
    }

    /// The completion indexes to create pods for (`None` per pod for a NonIndexed Job).
    fn free_indexes(&self, job: &Job, pods: &[Arc<Pod>], count: usize) -> Vec<Option<i32>> {
        let spec = job.spec.clone().unwrap_or_default();
        if spec.completion_mode.as_deref() != Some("Indexed") {
            return vec![None; count];
        }
        let taken: BTreeSet<i32> = pods
            .iter()
            .filter(|p| phase(p) != "Failed" && p.metadata.deletion_timestamp.is_none())
            .filter_map(|p| {
                p.metadata
                    .annotations
                    .as_ref()?
                    .get(INDEX_ANNOTATION)?
                    .parse()
                    .ok()
            })
            .collect();
        (0..spec.completions.unwrap_or(1))
            .filter(|i| !taken.contains(i))
            .take(count)
            .map(Some)
            .collect()
    }

    fn pod_for(&self, job: &Job, index: Option<i32>) -> Pod {
        let spec = job.spec.clone().unwrap_or_default();
        let mut template = serde_json::to_value(&spec.template).unwrap_or_default();
        let name = job.metadata.name.clone().unwrap_or_default();
        let uid = job.metadata.uid.clone().unwrap_or_default();
        let mut labels = template["metadata"]["labels"].take();
        if !labels.is_object() {
            labels = json!({});
        }
        for (k, v) in [
            ("batch.kubernetes.io/controller-uid", uid.as_str()),
            ("batch.kubernetes.io/job-name", name.as_str()),
            ("controller-uid", uid.as_str()),
            ("job-name", name.as_str()),
        ] {
            labels[k] = json!(v);
        }
        let mut annotations = template["metadata"]["annotations"].take();
        let mut pod_spec = template["spec"].take();
        let mut generate = format!("{name}-");
        if let Some(i) = index {
            if !annotations.is_object() {
                annotations = json!({});
            }
            annotations[INDEX_ANNOTATION] = json!(i.to_string());
            labels[INDEX_ANNOTATION] = json!(i.to_string());
            generate = format!("{name}-{i}-");
            if let Some(cs) = pod_spec["containers"].as_array_mut() {
                for c in cs {
                    let env = c["env"].as_array().cloned().unwrap_or_default();
                    let mut env: Vec<Value> = env;
                    env.push(
                        json!({"name": "JOB_COMPLETION_INDEX", "valueFrom": {"fieldRef": {
                        "fieldPath": format!("metadata.annotations['{INDEX_ANNOTATION}']")}}}),
                    );
                    c["env"] = json!(env);
                }
            }
        }
        serde_json::from_value(json!({
            "metadata": {"generateName": generate, "namespace": job.metadata.namespace,
                         "labels": labels, "annotations": annotations,
                         "ownerReferences": [controller_ref(job)]},
            "spec": pod_spec,
        }))
        .unwrap_or_default()
    }

    #[allow(clippy::too_many_arguments)]
    async fn write_status(
        &self,
        job: &Job,
        active: usize,
        succeeded: i32,
        failed: i32,
        ready: usize,
        finished: Option<(&str, &str, &str)>,
        now: i64,
    ) -> Result<(), kube::Error> {
        let held = serde_json::to_value(job.status.clone().unwrap_or_default()).unwrap_or_default();
        let stamp = apimachinery::time::format_rfc3339(now);
        let mut status = json!({
            "active": active, "succeeded": succeeded, "failed": failed, "ready": ready,
            "startTime": if held["startTime"].is_string() { held["startTime"].clone() } else { json!(stamp) },
        });
        if let Some((kind, reason, message)) = finished {
            let target = if kind == "Complete" {
                "SuccessCriteriaMet"
            } else {
                "FailureTarget"
            };
            let condition = |t: &str| {
                json!({"type": t, "status": "True", "reason": reason, "message": message,
                                           "lastProbeTime": stamp, "lastTransitionTime": stamp})
            };
            status["conditions"] = json!([condition(target), condition(kind)]);
            if kind == "Complete" {
                status["completionTime"] = json!(stamp);
            }
        }
        let same = ["active", "succeeded", "failed", "ready"]
            .iter()
            .all(|f| held[f].as_i64().unwrap_or(0) == status[f].as_i64().unwrap_or(0))
            && held["startTime"].is_string()
            && finished.is_none();
        if same {
            return Ok(());
        }
        let api: Api<Job> = Api::namespaced(
            self.client.clone(),
            job.metadata.namespace.as_deref().unwrap_or_default(),
        );
        informer::write_status(
            &api,
            job.metadata.name.as_deref().unwrap_or_default(),
            status,
        )
        .await
    }

    /// Deletes a finished Job `ttlSecondsAfterFinished` after it finished.
    async fn expire(&self, job: &Job, now: i64) -> Result<(), kube::Error> {
        let Some(ttl) = job.spec.as_ref().and_then(|s| s.ttl_seconds_after_finished) else {
            return Ok(());
        };
        let finished_at = job
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|cs| {
                cs.iter()
                    .filter(|c| c.type_ == "Complete" || c.type_ == "Failed")
                    .find_map(|c| c.last_transition_time.clone())
            })
            .map(|t| t.0.as_second())
            .unwrap_or(now);
        let due = finished_at + i64::from(ttl);
        if now < due {
            self.later(&key(job), Duration::from_secs((due - now) as u64));
            return Ok(());
        }
        let api: Api<Job> = Api::namespaced(
            self.client.clone(),
            job.metadata.namespace.as_deref().unwrap_or_default(),
        );
        let params = DeleteParams {
            propagation_policy: Some(PropagationPolicy::Background),
            ..DeleteParams::default()
        };
        ignore_gone(
            api.delete(job.metadata.name.as_deref().unwrap_or_default(), &params)
                .await
                .map(|_| ()),
        )
    }
}
