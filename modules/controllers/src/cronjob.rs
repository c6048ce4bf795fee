//! The CronJob controller, as kube-controller-manager's: at each time the schedule names
//! (standard five-field cron and the `@hourly`-style aliases, in `timeZone` or UTC; a sixth
//! leading field of seconds is accepted as an extension) a Job is made from the template,
//! named `<cronjob>-<scheduled minute>` so a time is never run twice; a time missed by more
//! than `startingDeadlineSeconds` is skipped. `concurrencyPolicy` decides what happens while
//! an earlier Job runs (`Allow`, `Forbid`, `Replace`), `suspend` stops new runs, and finished
//! Jobs beyond `successfulJobsHistoryLimit` / `failedJobsHistoryLimit` are deleted, oldest
//! first. The status lists the active Jobs and the last schedule and success times.

use std::sync::Arc;
use std::time::Duration;

use croner::Cron;
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::jiff::{Timestamp, Zoned, tz::TimeZone};
use kube::api::{Api, DeleteParams, PostParams, PropagationPolicy};
use reconciler::{Action, Cache, Queue, Stores};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::events::{self, Recorder};
use crate::informer::{self, controller_ref, ignore_gone};

/// Controller name.
pub const NAME: &str = "cronjob-controller";
const SCHEDULED_AT: &str = "batch.kubernetes.io/cronjob-scheduled-timestamp";

/// Runs the controller until shutdown.
pub async fn run(stores: Stores, events: Recorder, shutdown: CancellationToken) {
    let client = stores.client().clone();
    let (tx, rx) = reconciler::queue();
    let crons = stores.keyed::<CronJob>(&tx);
    let jobs = stores.cache::<Job>();
    jobs.owners("CronJob", &tx);
    if !reconciler::wait_synced(&[&*crons, &*jobs], &shutdown).await {
        return;
    }
    let ctx = Context {
        client,
        crons,
        jobs,
        events,
        requeue: tx.clone(),
    };
    let ctx = Arc::new(ctx);
    reconciler::work(rx, "cronjob", shutdown, move |k| {
        let ctx = ctx.clone();
        async move { ctx.sync(&k).await.map(|()| Action::AwaitChange) }
    })
    .await;
}

struct Context {
    client: kube::Client,
    crons: Arc<Cache<CronJob>>,
    jobs: Arc<Cache<Job>>,
    events: Recorder,
    requeue: Queue,
}

fn finished(job: &Job) -> Option<&'static str> {
    let conds = job.status.as_ref()?.conditions.as_ref()?;
    if conds
        .iter()
        .any(|c| c.type_ == "Complete" && c.status == "True")
    {
        Some("Complete")
    } else if conds
        .iter()
        .any(|c| c.type_ == "Failed" && c.status == "True")
    {
        Some("Failed")
    } else {
        None
    }
}

/// The schedule of `spec` in its time zone; the error names what is wrong.
pub fn schedule(expr: &str, zone: Option<&str>) -> Result<(Cron, TimeZone), String> {
    let cron: Cron = expr
        .parse()
        .map_err(|e| format!("unparseable schedule {expr:?}: {e}"))?;
    let tz = match zone {
        Some(z) if !z.is_empty() => {
            TimeZone::get(z).map_err(|e| format!("unknown time zone {z:?}: {e}"))?
        }
        _ => TimeZone::UTC,
    };
    Ok((cron, tz))
}

// === impl Context ===

impl Context {
    fn later(&self, k: &str, after: Duration) {
        self.requeue.later(k, after);
    }

    async fn sync(&self, k: &str) -> Result<(), kube::Error> {
        let Some(cj) = self.crons.get(k) else {
            return Ok(());
        };
        if cj.metadata.deletion_timestamp.is_some() {
            return Ok(());
        }
        let uid = cj.metadata.uid.clone().unwrap_or_default();
        let ns = cj.metadata.namespace.clone().unwrap_or_default();
        let spec = cj.spec.clone().unwrap_or_default();
        let mut owned: Vec<Arc<Job>> = self.jobs.owned_by(&uid);
        owned.sort_by_key(|j| {
            j.metadata
                .creation_timestamp
                .as_ref()
                .map(|t| t.0.as_second())
        });
        let jobs_api: Api<Job> = Api::namespaced(self.client.clone(), &ns);
        self.trim_history(&jobs_api, &spec, &owned).await?;
        let active: Vec<&Arc<Job>> = owned
            .iter()
            .filter(|j| finished(j).is_none() && j.metadata.deletion_timestamp.is_none())
            .collect();
        let (cron, tz) = match schedule(&spec.schedule, spec.time_zone.as_deref()) {
            Ok(s) => s,
            Err(why) => {
                self.events.warning(&*cj, "UnparseableSchedule", &why);
                return Ok(());
            }
        };
        let now = Timestamp::now();
        let last = cj
            .status
            .as_ref()
            .and_then(|s| s.last_schedule_time.as_ref())
            .or(cj.metadata.creation_timestamp.as_ref())
            .map(|t| t.0)
            .unwrap_or(now);
        let zoned_now = now.to_zoned(tz.clone());
        let due = cron
            .find_previous_occurrence(&zoned_now, true)
            .ok()
            .map(|z: Zoned| z.timestamp())
            .filter(|t| *t > last);
        let mut last_scheduled = None;
        if let (Some(at), false) = (due, spec.suspend.unwrap_or(false)) {
            let late = now.as_second() - at.as_second();
            let missed = spec.starting_deadline_seconds.is_some_and(|d| late > d);
            if missed {
                self.events.warning(
                    &*cj,
                    "MissSchedule",
                    &format!("Missed scheduled time to start a job: {at}"),
                );
                last_scheduled = Some(at);
            } else {
                let policy = spec.concurrency_policy.as_deref().unwrap_or("Allow");
                match policy {
                    "Forbid" if !active.is_empty() => {
                        self.events.normal(&*cj, "JobAlreadyActive", "Not starting job because prior execution is running and concurrency policy is Forbid");
                    }
                    _ => {
                        if policy == "Replace" {
                            for j in &active {
                                let params = DeleteParams {
                                    propagation_policy: Some(PropagationPolicy::Background),
                                    ..DeleteParams::default()
                                };
                                ignore_gone(
                                    jobs_api
                                        .delete(
                                            j.metadata.name.as_deref().unwrap_or_default(),
                                            &params,
                                        )
                                        .await
                                        .map(|_| ()),
                                )?;
                            }
                        }
                        let seconds = !spec.schedule.starts_with('@')
                            && spec.schedule.split_whitespace().count() > 5;
                        self.start(&cj, &jobs_api, at, seconds).await?;
                        last_scheduled = Some(at);
                    }
                }
            }
        }
        // Wake at the next scheduled time.
        if let Ok(next) = cron.find_next_occurrence(&zoned_now, false) {
            let wait = next.timestamp().as_second() - now.as_second();
            self.later(k, Duration::from_secs(wait.max(1) as u64));
        }
        self.update_status(&cj, &owned, last_scheduled).await
    }

    async fn start(
        &self,
        cj: &CronJob,
        api: &Api<Job>,
        at: Timestamp,
        seconds: bool,
    ) -> Result<(), kube::Error> {
        let spec = cj.spec.clone().unwrap_or_default();
        let template = serde_json::to_value(&spec.job_template).unwrap_or_default();
        let name = cj.metadata.name.clone().unwrap_or_default();
        let suffix = if seconds {
            at.as_second()
        } else {
            at.as_second() / 60
        };
        let job_name = format!("{name}-{suffix}");
        let mut annotations = template["metadata"]["annotations"].clone();
        if !annotations.is_object() {
            annotations = json!({});
        }
        annotations[SCHEDULED_AT] = json!(at.to_string());
        let job: Job = serde_json::from_value(json!({
            "metadata": {"name": job_name, "namespace": cj.metadata.namespace,
                         "labels": template["metadata"]["labels"], "annotations": annotations,
                         "ownerReferences": [controller_ref(cj)]},
            "spec": template["spec"],
        }))
        .map_err(kube::Error::SerdeError)?;
        match api.create(&PostParams::default(), &job).await {
            Ok(_) => {
                self.events
                    .normal(cj, "SuccessfulCreate", &format!("Created job {job_name}"));
                Ok(())
            }
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
            Err(e) => {
                self.events.warning(
                    cj,
                    "FailedCreate",
                    &format!("Error creating job: {}", events::error_message(&e)),
                );
                Err(e)
            }
        }
    }

    async fn trim_history(
        &self,
        api: &Api<Job>,
        spec: &k8s_openapi::api::batch::v1::CronJobSpec,
        owned: &[Arc<Job>],
    ) -> Result<(), kube::Error> {
        for (kind, limit) in [
            ("Complete", spec.successful_jobs_history_limit.unwrap_or(3)),
            ("Failed", spec.failed_jobs_history_limit.unwrap_or(1)),
        ] {
            let done: Vec<&Arc<Job>> = owned
                .iter()
                .filter(|j| finished(j) == Some(kind) && j.metadata.deletion_timestamp.is_none())
                .collect();
            let extra = done.len().saturating_sub(limit.max(0) as usize);
            for j in &done[..extra] {
                let params = DeleteParams {
                    propagation_policy: Some(PropagationPolicy::Background),
                    ..DeleteParams::default()
                };
                ignore_gone(
                    api.delete(j.metadata.name.as_deref().unwrap_or_default(), &params)
                        .await
                        .map(|_| ()),
                )?;
            }
        }
        Ok(())
    }

    async fn update_status(
        &self,
        cj: &CronJob,
        owned: &[Arc<Job>],
        scheduled: Option<Timestamp>,
    ) -> Result<(), kube::Error> {
        let active: Vec<serde_json::Value> = owned
            .iter()
            .filter(|j| finished(j).is_none() && j.metadata.deletion_timestamp.is_none())
            .map(|j| {
                json!({"apiVersion": "batch/v1", "kind": "Job", "namespace": j.metadata.namespace,
                            "name": j.metadata.name, "uid": j.metadata.uid})
            })
            .collect();
        let held = serde_json::to_value(cj.status.clone().unwrap_or_default()).unwrap_or_default();
        let mut status = json!({"active": active});
        if let Some(at) = scheduled {
            status["lastScheduleTime"] = json!(apimachinery::time::format_rfc3339(at.as_second()));
        }
        let success = owned
            .iter()
            .filter(|j| finished(j) == Some("Complete"))
            .filter_map(|j| j.status.as_ref()?.completion_time.clone())
            .max_by_key(|t| t.0);
        if let Some(t) = success {
            status["lastSuccessfulTime"] = json!(t);
        }
        let held_active = held["active"].as_array().map_or(0, Vec::len);
        let same = held_active == active.len()
            && scheduled.is_none()
            && (status["lastSuccessfulTime"].is_null()
                || held["lastSuccessfulTime"] == status["lastSuccessfulTime"]);
        if same {
            return Ok(());
        }
        let api: Api<CronJob> = Api::namespaced(
            self.client.clone(),
            cj.metadata.namespace.as_deref().unwrap_or_default(),
        );
        informer::write_status(
            &api,
            cj.metadata.name.as_deref().unwrap_or_default(),
            status,
        )
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedules_parse_with_aliases_zones_and_name_what_is_wrong() {
        assert!(schedule("*/5 * * * *", None).is_ok());
        assert!(schedule("@hourly", Some("Europe/Paris")).is_ok());
        assert!(
            schedule("*/2 * * * * *", None).is_ok(),
            "seconds, as an extension"
        );
        let bad = schedule("61 * * * *", None).unwrap_err();
        assert!(
            bad.starts_with("unparseable schedule \"61 * * * *\""),
            "{bad}"
        );
        let zone = schedule("* * * * *", Some("Mars/Olympus")).unwrap_err();
        assert!(
            zone.starts_with("unknown time zone \"Mars/Olympus\""),
            "{zone}"
        );
    }
}

#[cfg(test)]
mod occurrence_tests {
    use super::*;

    #[test]
    fn an_every_second_schedule_has_a_recent_previous_time() {
        let (cron, tz) = schedule("* * * * * *", None).unwrap();
        let now = Timestamp::now();
        let prev = cron.find_previous_occurrence(&now.to_zoned(tz.clone()), true);
        let prev = prev.map(|z| z.timestamp());
        assert!(prev.is_ok(), "{prev:?}");
        let p = prev.unwrap();
        assert!(now.as_second() - p.as_second() <= 1, "{p} vs {now}");
        let next = cron.find_next_occurrence(&now.to_zoned(tz), false).unwrap();
        assert!(next.timestamp() > now);
    }
}
