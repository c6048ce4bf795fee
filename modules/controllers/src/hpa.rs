//! The HorizontalPodAutoscaler controller (`autoscaling/v2`; v1 objects are the same stored
//! objects), as kube-controller-manager's: every `syncPeriod` each autoscaler reads its
//! target's `scale` subresource (Deployment, ReplicaSet, StatefulSet, ReplicationController),
//! the pods its selector matches and their usage from the resource metrics API
//! (`metrics.k8s.io/v1beta1` PodMetrics, read through the API as kube's controller does, so a
//! real cluster's metrics-server serves it as well), and for each `Resource` metric (CPU or
//! memory; `averageUtilization` of the pods' requests or `averageValue`) proposes a replica
//! count ([`replicas`]). The largest proposal is stabilized and held within the limits
//! ([`normalize`]) and written to the target's `scale`; the status carries the current and
//! desired replicas, the current metrics, `lastScaleTime` and the `AbleToScale`,
//! `ScalingActive` and `ScalingLimited` conditions. No `metrics` means CPU at 80%, kube's
//! default. Other metric types (`Pods`, `Object`, `External`, `ContainerResource`) are not
//! read: `ScalingActive` says so when they are all there is.

pub mod normalize;
pub mod replicas;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::autoscaling::v2::{HorizontalPodAutoscaler, MetricSpec};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ApiResource, DynamicObject, ListParams, Patch, PatchParams};
use reconciler::{Action, Cache, Stores};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::events::Recorder;
use crate::informer;
use normalize::{History, Policies, Policy, Rules, ScaleEvent};
use replicas::{PodState, Proposal, Target};

/// Controller name.
pub const NAME: &str = "horizontal-pod-autoscaler";
/// kube's default target when an autoscaler names no metric.
const DEFAULT_CPU_UTILIZATION: i32 = 80;

/// `modules.controllers.horizontalPodAutoscaler`.
#[derive(
    Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize, schemars::JsonSchema,
)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct HpaConfig {
    /// How often each autoscaler is evaluated (kube's
    /// `--horizontal-pod-autoscaler-sync-period`). Default `15s`.
    #[serde(with = "daemon::duration")]
    pub sync_period: Duration,
    /// How long a scale-down waits on higher recommendations, for autoscalers that do not set
    /// `behavior.scaleDown.stabilizationWindowSeconds` (kube's
    /// `--horizontal-pod-autoscaler-downscale-stabilization`). Default `5m`.
    #[serde(with = "daemon::duration")]
    pub downscale_stabilization: Duration,
}

impl Default for HpaConfig {
    fn default() -> Self {
        HpaConfig {
            sync_period: Duration::from_secs(15),
            downscale_stabilization: Duration::from_secs(300),
        }
    }
}

/// Runs the controller until shutdown.
pub async fn run(stores: Stores, config: HpaConfig, events: Recorder, shutdown: CancellationToken) {
    let client = stores.client().clone();
    let (tx, rx) = reconciler::queue();
    let hpas = stores.keyed::<HorizontalPodAutoscaler>(&tx);
    if !reconciler::wait_synced(&[&*hpas], &shutdown).await {
        return;
    }
    let ctx = Arc::new(Context {
        client,
        hpas,
        events,
        config,
        history: Mutex::new(HashMap::new()),
    });
    // Autoscalers are evaluated on time, not only on change: each again after the period.
    reconciler::work(rx, "horizontalpodautoscaler", shutdown, move |k| {
        let ctx = ctx.clone();
        async move {
            ctx.sync(&k).await?;
            Ok::<_, kube::Error>(match ctx.hpas.get(&k) {
                Some(_) => Action::requeue(ctx.config.sync_period),
                None => Action::AwaitChange,
            })
        }
    })
    .await;
}

struct Context {
    client: kube::Client,
    hpas: Arc<Cache<HorizontalPodAutoscaler>>,
    events: Recorder,
    config: HpaConfig,
    /// Each autoscaler's recent recommendations, by key.
    history: Mutex<HashMap<String, History>>,
}

/// What one evaluation found, for the status.
struct Outcome {
    current: i32,
    desired: i32,
    metrics: Vec<Value>,
    conditions: Vec<(&'static str, bool, &'static str, String)>,
    scaled: bool,
}

// === impl Context ===

impl Context {
    async fn sync(&self, key: &str) -> Result<(), kube::Error> {
        let Some(hpa) = self.hpas.get(key) else {
            self.history().remove(key);
            return Ok(());
        };
        let outcome = self.evaluate(key, &hpa).await;
        self.write_status(&hpa, outcome).await
    }

    fn history(&self) -> std::sync::MutexGuard<'_, HashMap<String, History>> {
        self.history.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Reads the target, the pods and their metrics; rescales when the rules say so.
    async fn evaluate(&self, key: &str, hpa: &HorizontalPodAutoscaler) -> Outcome {
        let ns = hpa.metadata.namespace.clone().unwrap_or_default();
        let spec = hpa.spec.clone().unwrap_or_default();
        let reference = &spec.scale_target_ref;
        let mut outcome = Outcome {
            current: 0,
            desired: 0,
            metrics: Vec::new(),
            conditions: Vec::new(),
            scaled: false,
        };
        let Some(resource) = scale_resource(reference.api_version.as_deref(), &reference.kind)
        else {
            let why = format!("the HPA controller cannot scale a {}", reference.kind);
            outcome
                .conditions
                .push(("AbleToScale", false, "FailedGetScale", why));
            return outcome;
        };
        let targets: Api<DynamicObject> = Api::namespaced_with(self.client.clone(), &ns, &resource);
        let scale = match targets.get_scale(&reference.name).await {
            Ok(scale) => scale,
            Err(e) => {
                let why = format!(
                    "the HPA controller was unable to get the target's current scale: {}",
                    crate::events::error_message(&e)
                );
                outcome
                    .conditions
                    .push(("AbleToScale", false, "FailedGetScale", why));
                return outcome;
            }
        };
        let spec_replicas = scale.spec.as_ref().and_then(|s| s.replicas).unwrap_or(0);
        let status = scale.status.unwrap_or_default();
        outcome.current = status.replicas;
        outcome.desired = spec_replicas;
        let min = spec.min_replicas.unwrap_or(1);
        if spec_replicas == 0 && min != 0 {
            outcome.conditions.push((
                "AbleToScale",
                true,
                "SucceededGetScale",
                "the HPA controller was able to get the target's current scale".into(),
            ));
            outcome.conditions.push((
                "ScalingActive",
                false,
                "ScalingDisabled",
                "scaling is disabled since the replica count of the target is zero".into(),
            ));
            return outcome;
        }
        let selector = status.selector.unwrap_or_default();
        let proposal = match self
            .propose(&ns, &selector, spec_replicas, spec.metrics.as_deref())
            .await
        {
            Ok((proposal, metrics)) => {
                outcome.metrics = metrics;
                proposal
            }
            Err((reason, why)) => {
                outcome.conditions.push((
                    "AbleToScale",
                    true,
                    "SucceededGetScale",
                    "the HPA controller was able to get the target's current scale".into(),
                ));
                outcome
                    .conditions
                    .push(("ScalingActive", false, reason, why));
                return outcome;
            }
        };
        let rules = self.rules(&spec, min);
        let decision = {
            let mut history = self.history();
            let entry = history.entry(key.to_owned()).or_default();
            normalize::normalize(
                spec_replicas,
                proposal,
                &rules,
                entry,
                tokio::time::Instant::now(),
            )
        };
        outcome.desired = decision.replicas;
        let (mut able_reason, mut able_why) = (decision.able.0, decision.able.1.clone());
        let mut able = true;
        if decision.replicas != spec_replicas {
            let patch = Patch::Merge(json!({ "spec": { "replicas": decision.replicas } }));
            match targets
                .patch_scale(&reference.name, &PatchParams::default(), &patch)
                .await
            {
                Ok(_) => {
                    let event = ScaleEvent {
                        change: decision.replicas - spec_replicas,
                        at: tokio::time::Instant::now(),
                    };
                    self.history()
                        .entry(key.to_owned())
                        .or_default()
                        .events
                        .push(event);
                    outcome.scaled = true;
                    able_reason = "SucceededRescale";
                    able_why = format!(
                        "the HPA controller was able to update the target scale to {}",
                        decision.replicas
                    );
                    let message = format!(
                        "New size: {}; reason: {}",
                        decision.replicas,
                        direction(spec_replicas, decision.replicas)
                    );
                    self.events.normal(hpa, "SuccessfulRescale", &message);
                }
                Err(e) => {
                    able = false;
                    able_reason = "FailedUpdateScale";
                    able_why = format!(
                        "the HPA controller was unable to update the target scale: {}",
                        crate::events::error_message(&e)
                    );
                    outcome.desired = spec_replicas;
                }
            }
        }
        let (limited, reason, why) = decision.limited;
        outcome
            .conditions
            .push(("AbleToScale", able, able_reason, able_why));
        outcome.conditions.push((
            "ScalingActive",
            true,
            "ValidMetricFound",
            "the HPA was able to successfully calculate a replica count from the resource metrics"
                .into(),
        ));
        outcome
            .conditions
            .push(("ScalingLimited", limited, reason, why.into()));
        outcome
    }

    /// The largest proposal of the autoscaler's resource metrics, with the current metrics;
    /// or the `ScalingActive` reason and message of why there is none.
    async fn propose(
        &self,
        ns: &str,
        selector: &str,
        current: i32,
        metrics: Option<&[MetricSpec]>,
    ) -> Result<(i32, Vec<Value>), (&'static str, String)> {
        let specs = resource_targets(metrics);
        if specs.is_empty() {
            return Err((
                "InvalidMetricSourceType",
                "no Resource metric (cpu or memory) to scale on".into(),
            ));
        }
        let pods = Api::<Pod>::namespaced(self.client.clone(), ns)
            .list(&ListParams::default().labels(selector))
            .await
            .map_err(|e| {
                (
                    "FailedGetResourceMetric",
                    format!("listing pods: {}", crate::events::error_message(&e)),
                )
            })?;
        let usage = self.pod_metrics(ns, selector).await.map_err(|e| {
            (
                "FailedGetResourceMetric",
                format!(
                    "unable to get metrics from the resource metrics API: {}",
                    crate::events::error_message(&e)
                ),
            )
        })?;
        let mut best: Option<i32> = None;
        let mut current_metrics = Vec::new();
        for (resource, target) in specs {
            let states: Vec<PodState> =
                pods.items.iter().map(|p| pod_state(p, &resource)).collect();
            let usage: BTreeMap<String, i64> = usage
                .iter()
                .filter_map(|(pod, by)| Some((pod.clone(), *by.get(&resource)?)))
                .collect();
            let proposal =
                replicas::propose(&resource, current, &states, &usage, target).map_err(|e| {
                    (
                        "FailedGetResourceMetric",
                        format!("invalid metrics for resource {resource}: {e}"),
                    )
                })?;
            current_metrics.push(current_metric(&resource, &proposal));
            best = Some(best.map_or(proposal.replicas, |b| b.max(proposal.replicas)));
        }
        Ok((best.unwrap_or(current), current_metrics))
    }

    /// Usage by pod name, then by resource (milli-units), from the metrics API.
    async fn pod_metrics(
        &self,
        ns: &str,
        selector: &str,
    ) -> Result<BTreeMap<String, BTreeMap<String, i64>>, kube::Error> {
        let resource = ApiResource {
            group: "metrics.k8s.io".into(),
            version: "v1beta1".into(),
            api_version: "metrics.k8s.io/v1beta1".into(),
            kind: "PodMetrics".into(),
            plural: "pods".into(),
        };
        let api: Api<DynamicObject> = Api::namespaced_with(self.client.clone(), ns, &resource);
        let list = api.list(&ListParams::default().labels(selector)).await?;
        Ok(list
            .items
            .iter()
            .map(|m| {
                (
                    m.metadata.name.clone().unwrap_or_default(),
                    container_sum(&m.data),
                )
            })
            .collect())
    }

    /// The stabilization windows and limits of `spec`.
    fn rules(
        &self,
        spec: &k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscalerSpec,
        min: i32,
    ) -> Rules {
        let behavior = spec.behavior.as_ref();
        let window = |rules: Option<&k8s_openapi::api::autoscaling::v2::HPAScalingRules>,
                      default: Duration| {
            rules
                .and_then(|r| r.stabilization_window_seconds)
                .map_or(default, |s| Duration::from_secs(s.max(0) as u64))
        };
        let disabled = |rules: Option<&k8s_openapi::api::autoscaling::v2::HPAScalingRules>| {
            rules.and_then(|r| r.select_policy.as_deref()) == Some("Disabled")
        };
        let (up, down) = (
            behavior.and_then(|b| b.scale_up.as_ref()),
            behavior.and_then(|b| b.scale_down.as_ref()),
        );
        // kube's defaults: up by 4 pods or 100% per 15 s, whichever is more; down by 100%.
        let default_up = [(false, 4), (true, 100)];
        let rates = behavior.map(|_| (policies(up, &default_up), policies(down, &[(true, 100)])));
        Rules {
            min,
            max: spec.max_replicas,
            scale_up_window: window(up, Duration::ZERO),
            scale_down_window: window(down, self.config.downscale_stabilization),
            scale_up_disabled: disabled(up),
            scale_down_disabled: disabled(down),
            rates,
        }
    }

    async fn write_status(
        &self,
        hpa: &HorizontalPodAutoscaler,
        outcome: Outcome,
    ) -> Result<(), kube::Error> {
        let now = apimachinery::time::now_rfc3339();
        let old = serde_json::to_value(&hpa.status).unwrap_or_default();
        let before = old["conditions"].as_array().cloned().unwrap_or_default();
        let conditions: Vec<Value> = outcome
            .conditions
            .iter()
            .map(|(kind, ok, reason, message)| {
                let status = if *ok { "True" } else { "False" };
                // A condition keeps its transition time while its status stays.
                let since = before
                    .iter()
                    .find(|c| c["type"] == *kind && c["status"] == status)
                    .and_then(|c| c.get("lastTransitionTime").cloned())
                    .unwrap_or_else(|| json!(now));
                json!({"type": kind, "status": status, "reason": reason, "message": message, "lastTransitionTime": since})
            })
            .collect();
        let mut status = json!({
            "observedGeneration": hpa.metadata.generation,
            "currentReplicas": outcome.current,
            "desiredReplicas": outcome.desired,
            "currentMetrics": outcome.metrics,
            "conditions": conditions,
        });
        if outcome.scaled {
            status["lastScaleTime"] = json!(now);
        }
        if unchanged(hpa, &status) {
            return Ok(());
        }
        let ns = hpa.metadata.namespace.as_deref().unwrap_or_default();
        let api = Api::<HorizontalPodAutoscaler>::namespaced(self.client.clone(), ns);
        let name = hpa.metadata.name.as_deref().unwrap_or_default();
        informer::write_status(&api, name, status).await
    }
}

/// Whether the autoscaler's status already says everything in `status` (then nothing is
/// written: an evaluation that changed nothing is not an update, as in kube).
fn unchanged(hpa: &HorizontalPodAutoscaler, status: &Value) -> bool {
    let old = serde_json::to_value(&hpa.status).unwrap_or_default();
    status
        .as_object()
        .into_iter()
        .flatten()
        .all(|(k, v)| old.get(k).unwrap_or(&Value::Null) == v)
}

/// A direction's policies, or `defaults` (kind percent?, value; per 15 s) when it names none.
fn policies(
    rules: Option<&k8s_openapi::api::autoscaling::v2::HPAScalingRules>,
    defaults: &[(bool, i32)],
) -> Policies {
    let named: Vec<Policy> = rules
        .and_then(|r| r.policies.as_ref())
        .into_iter()
        .flatten()
        .map(|p| Policy {
            percent: p.type_ == "Percent",
            value: p.value,
            period: Duration::from_secs(p.period_seconds.max(1) as u64),
        })
        .collect();
    let policies = if named.is_empty() {
        defaults
            .iter()
            .map(|&(percent, value)| Policy {
                percent,
                value,
                period: Duration::from_secs(15),
            })
            .collect()
    } else {
        named
    };
    Policies {
        select_min: rules.and_then(|r| r.select_policy.as_deref()) == Some("Min"),
        policies,
    }
}

/// The resource whose `scale` a target reference names.
fn scale_resource(api_version: Option<&str>, kind: &str) -> Option<ApiResource> {
    let api_version = api_version.unwrap_or("apps/v1");
    let (group, version) = match api_version.split_once('/') {
        Some((g, v)) => (g, v),
        None => ("", api_version),
    };
    let plural = match (group, kind) {
        ("apps", "Deployment") => "deployments",
        ("apps", "ReplicaSet") => "replicasets",
        ("apps", "StatefulSet") => "statefulsets",
        ("", "ReplicationController") => "replicationcontrollers",
        _ => return None,
    };
    Some(ApiResource {
        group: group.into(),
        version: version.into(),
        api_version: api_version.into(),
        kind: kind.into(),
        plural: plural.into(),
    })
}

/// The `Resource` metrics to scale on (`cpu` at 80% when none is named).
fn resource_targets(metrics: Option<&[MetricSpec]>) -> Vec<(String, Target)> {
    let Some(metrics) = metrics.filter(|m| !m.is_empty()) else {
        return vec![("cpu".into(), Target::Utilization(DEFAULT_CPU_UTILIZATION))];
    };
    metrics
        .iter()
        .filter(|m| m.type_ == "Resource")
        .filter_map(|m| {
            let r = m.resource.as_ref()?;
            let t = &r.target;
            let target = match (t.type_.as_str(), t.average_utilization, &t.average_value) {
                ("Utilization", Some(u), _) => Target::Utilization(u),
                ("AverageValue", _, Some(v)) => {
                    Target::AverageValue(apimachinery::quantity::milli(&v.0)?)
                }
                _ => return None,
            };
            Some((r.name.clone(), target))
        })
        .collect()
}

/// How the calculator sees a pod for `resource`.
fn pod_state(pod: &Pod, resource: &str) -> PodState {
    let status = pod.status.as_ref();
    let phase = status.and_then(|s| s.phase.as_deref()).unwrap_or("Pending");
    let ready = status
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
        .map(|c| c.status == "True");
    let started = status.and_then(|s| s.start_time.as_ref()).is_some();
    let unready = phase == "Pending" || (resource == "cpu" && (ready != Some(true) || !started));
    let containers = pod
        .spec
        .as_ref()
        .map(|s| s.containers.as_slice())
        .unwrap_or_default();
    let request = containers
        .iter()
        .map(|c| {
            let q = c.resources.as_ref()?.requests.as_ref()?.get(resource)?;
            apimachinery::quantity::milli(&q.0)
        })
        .sum::<Option<i64>>()
        .filter(|_| !containers.is_empty());
    PodState {
        name: pod.metadata.name.clone().unwrap_or_default(),
        ignored: pod.metadata.deletion_timestamp.is_some() || phase == "Failed",
        unready,
        request,
    }
}

/// A PodMetrics' containers' usage summed, by resource (milli-units).
fn container_sum(data: &Value) -> BTreeMap<String, i64> {
    let mut sum = BTreeMap::new();
    for c in data["containers"].as_array().into_iter().flatten() {
        for (resource, q) in c["usage"].as_object().into_iter().flatten() {
            if let Some(v) = q.as_str().and_then(apimachinery::quantity::milli) {
                *sum.entry(resource.clone()).or_insert(0) += v;
            }
        }
    }
    sum
}

/// One `currentMetrics` entry.
fn current_metric(resource: &str, p: &Proposal) -> Value {
    let mut current = json!({ "averageValue": format!("{}m", p.average) });
    if let Some(u) = p.utilization {
        current["averageUtilization"] = json!(u);
    }
    json!({ "type": "Resource", "resource": { "name": resource, "current": current } })
}

fn direction(from: i32, to: i32) -> &'static str {
    if to > from {
        "All metrics above target"
    } else {
        "All metrics below target"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_default_to_cpu_at_eighty_percent_and_read_both_target_types() {
        assert_eq!(
            resource_targets(None),
            vec![("cpu".to_string(), Target::Utilization(80))]
        );
        let metrics: Vec<MetricSpec> = serde_json::from_value(json!([
            {"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 50}}},
            {"type": "Resource", "resource": {"name": "memory", "target": {"type": "AverageValue", "averageValue": "64Mi"}}},
            {"type": "Pods", "pods": {"metric": {"name": "qps"}, "target": {"type": "AverageValue", "averageValue": "1"}}},
        ]))
        .unwrap();
        assert_eq!(
            resource_targets(Some(&metrics)),
            vec![
                ("cpu".to_string(), Target::Utilization(50)),
                (
                    "memory".to_string(),
                    Target::AverageValue(64 * 1024 * 1024 * 1000)
                ),
            ]
        );
    }

    #[test]
    fn pods_are_read_as_the_calculator_groups_them() {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "w-1"},
            "spec": {"containers": [
                {"name": "a", "resources": {"requests": {"cpu": "100m"}}},
                {"name": "b", "resources": {"requests": {"cpu": "0.2"}}},
            ]},
            "status": {"phase": "Running", "startTime": "2026-01-01T00:00:00Z",
                       "conditions": [{"type": "Ready", "status": "True"}]},
        }))
        .unwrap();
        let state = pod_state(&pod, "cpu");
        assert_eq!(
            (state.request, state.unready, state.ignored),
            (Some(300), false, false)
        );
        assert_eq!(pod_state(&pod, "memory").request, None);
        let mut pending = pod.clone();
        pending.status.as_mut().unwrap().phase = Some("Pending".into());
        assert!(pod_state(&pending, "cpu").unready);
    }

    #[test]
    fn a_status_that_says_nothing_new_is_not_written() {
        let hpa: HorizontalPodAutoscaler = serde_json::from_value(json!({
            "metadata": {"name": "web"},
            "spec": {"scaleTargetRef": {"kind": "Deployment", "name": "web"}, "maxReplicas": 3},
            "status": {"currentReplicas": 2, "desiredReplicas": 2, "conditions": [
                {"type": "AbleToScale", "status": "True", "reason": "ReadyForNewScale",
                 "lastTransitionTime": "2026-01-01T00:00:00Z"}]},
        }))
        .unwrap();
        let same = json!({"currentReplicas": 2, "desiredReplicas": 2, "observedGeneration": null,
            "conditions": [{"type": "AbleToScale", "status": "True", "reason": "ReadyForNewScale",
                            "lastTransitionTime": "2026-01-01T00:00:00Z"}]});
        assert!(unchanged(&hpa, &same));
        let mut moved = same.clone();
        moved["desiredReplicas"] = json!(3);
        assert!(!unchanged(&hpa, &moved));
    }

    #[test]
    fn a_pods_usage_is_its_containers_summed_and_targets_map_to_their_scale() {
        let data = json!({"containers": [
            {"name": "a", "usage": {"cpu": "250000000n", "memory": "1Ki"}},
            {"name": "b", "usage": {"cpu": "50m", "memory": "1Ki"}},
        ]});
        let sum = container_sum(&data);
        assert_eq!((sum["cpu"], sum["memory"]), (300, 2_048_000));
        assert_eq!(
            scale_resource(Some("apps/v1"), "Deployment")
                .unwrap()
                .plural,
            "deployments"
        );
        assert_eq!(
            scale_resource(Some("v1"), "ReplicationController")
                .unwrap()
                .group,
            ""
        );
        assert!(scale_resource(Some("batch/v1"), "Job").is_none());
    }
}
