//! The replica count one resource metric asks for, as kube-controller-manager's replica
//! calculator computes it: `ceil(current × usage / target)`, nothing when within the 10%
//! tolerance. Pods are grouped first: deleted or failed pods are ignored, pending pods (and,
//! for CPU, pods not Ready) are unready, pods without a sample are missing. Unready pods
//! and missing pods make the answer more careful: a scale-up counts unready pods as using
//! nothing, missing pods count as using nothing on a scale-up and as using their request (or
//! the target value) on a scale-down, and a move that the careful count reverses or brings
//! within the tolerance is no move. Pure.

use std::collections::BTreeMap;

/// kube-controller-manager's `--horizontal-pod-autoscaler-tolerance`.
pub const TOLERANCE: f64 = 0.1;

/// One pod matched by the target's selector.
#[derive(Clone, Debug, PartialEq)]
pub struct PodState {
    pub name: String,
    /// Deleted, or failed: not counted at all.
    pub ignored: bool,
    /// Pending, or (for CPU) not Ready.
    pub unready: bool,
    /// The sum of its containers' requests of the resource (milli-units), `None` when a
    /// container has none.
    pub request: Option<i64>,
}

/// What the metric is compared with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    /// Percent of the pods' requests (`averageUtilization`).
    Utilization(i32),
    /// Milli-units per pod (`averageValue`).
    AverageValue(i64),
}

/// The calculator's answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Proposal {
    pub replicas: i32,
    /// Percent of request, for a utilization target.
    pub utilization: Option<i32>,
    /// Average usage per pod with a sample (milli-units).
    pub average: i64,
}

/// Why no proposal could be made.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CalcError {
    /// No ready pod has a sample.
    #[error("did not receive metrics for targeted pods (pods might be unready)")]
    NoMetrics,
    /// A utilization target over pods without requests.
    #[error("missing request for {resource} in pod {pod}")]
    MissingRequest { resource: String, pod: String },
}

/// The replicas `target` asks for, from `current` replicas, the pods and their `usage`
/// (milli-units by pod name).
pub fn propose(
    resource: &str,
    current: i32,
    pods: &[PodState],
    usage: &BTreeMap<String, i64>,
    target: Target,
) -> Result<Proposal, CalcError> {
    let mut metrics = usage.clone();
    let (mut ready, mut unready, mut missing) = (0usize, Vec::new(), Vec::new());
    for pod in pods {
        if pod.ignored {
            metrics.remove(&pod.name);
        } else if pod.unready {
            metrics.remove(&pod.name);
            unready.push(pod);
        } else if !metrics.contains_key(&pod.name) {
            missing.push(pod);
        } else {
            ready += 1;
        }
    }
    // Samples of pods the selector does not match count for nothing.
    metrics.retain(|name, _| pods.iter().any(|p| &p.name == name));
    if metrics.is_empty() {
        return Err(CalcError::NoMetrics);
    }
    let requests: BTreeMap<&str, i64> = pods
        .iter()
        .filter_map(|p| Some((p.name.as_str(), p.request?)))
        .collect();
    let measure = Measure {
        resource,
        requests: &requests,
        target,
    };
    let (ratio, proposal) = measure.ratio(&metrics)?;
    let proposal = |replicas| Proposal {
        replicas,
        ..proposal
    };
    let scale_up_with_unready = !unready.is_empty() && ratio > 1.0;
    if !scale_up_with_unready && missing.is_empty() {
        if (1.0 - ratio).abs() <= TOLERANCE {
            return Ok(proposal(current));
        }
        return Ok(proposal((ratio * ready as f64).ceil() as i32));
    }
    for pod in &missing {
        let assumed = match (ratio < 1.0, target) {
            (false, _) => 0,
            (true, Target::Utilization(_)) => requests.get(pod.name.as_str()).copied().unwrap_or(0),
            (true, Target::AverageValue(v)) => v,
        };
        metrics.insert(pod.name.clone(), assumed);
    }
    if scale_up_with_unready {
        for pod in &unready {
            metrics.insert(pod.name.clone(), 0);
        }
    }
    let (new_ratio, _) = measure.ratio(&metrics)?;
    let reversed = (ratio < 1.0 && new_ratio > 1.0) || (ratio > 1.0 && new_ratio < 1.0);
    if (1.0 - new_ratio).abs() <= TOLERANCE || reversed {
        return Ok(proposal(current));
    }
    let replicas = (new_ratio * metrics.len() as f64).ceil() as i32;
    if (new_ratio < 1.0 && replicas > current) || (new_ratio > 1.0 && replicas < current) {
        return Ok(proposal(current));
    }
    Ok(proposal(replicas))
}

/// How usage compares with the target.
struct Measure<'a> {
    resource: &'a str,
    requests: &'a BTreeMap<&'a str, i64>,
    target: Target,
}

impl Measure<'_> {
    /// Usage over target, and the proposal's readings (replicas not yet set).
    fn ratio(&self, metrics: &BTreeMap<String, i64>) -> Result<(f64, Proposal), CalcError> {
        let total: i64 = metrics.values().sum();
        let average = total / metrics.len().max(1) as i64;
        match self.target {
            Target::Utilization(target) => {
                let mut requested = 0;
                for name in metrics.keys() {
                    let request = self.requests.get(name.as_str()).copied().ok_or_else(|| {
                        CalcError::MissingRequest {
                            resource: self.resource.to_owned(),
                            pod: name.clone(),
                        }
                    })?;
                    requested += request;
                }
                if requested <= 0 {
                    return Err(CalcError::MissingRequest {
                        resource: self.resource.to_owned(),
                        pod: metrics.keys().next().cloned().unwrap_or_default(),
                    });
                }
                let utilization = (total * 100 / requested) as i32;
                let ratio = f64::from(utilization) / f64::from(target.max(1));
                let readings = Proposal {
                    replicas: 0,
                    utilization: Some(utilization),
                    average,
                };
                Ok((ratio, readings))
            }
            Target::AverageValue(target) => {
                let ratio = average as f64 / target.max(1) as f64;
                let readings = Proposal {
                    replicas: 0,
                    utilization: None,
                    average,
                };
                Ok((ratio, readings))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str) -> PodState {
        PodState {
            name: name.into(),
            ignored: false,
            unready: false,
            request: Some(100),
        }
    }

    fn usage(pairs: &[(&str, i64)]) -> BTreeMap<String, i64> {
        pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
    }

    fn replicas(current: i32, pods: &[PodState], u: &[(&str, i64)], target: Target) -> i32 {
        propose("cpu", current, pods, &usage(u), target)
            .unwrap()
            .replicas
    }

    #[test]
    fn desired_is_current_times_usage_over_target_rounded_up() {
        let pods = [pod("a"), pod("b")];
        // 90% of request against 50%: 2 × 1.8 = 3.6 → 4.
        let p = propose(
            "cpu",
            2,
            &pods,
            &usage(&[("a", 90), ("b", 90)]),
            Target::Utilization(50),
        )
        .unwrap();
        assert_eq!(
            p,
            Proposal {
                replicas: 4,
                utilization: Some(90),
                average: 90
            }
        );
        assert_eq!(
            replicas(2, &pods, &[("a", 10), ("b", 10)], Target::Utilization(50)),
            1
        );
        // Average value: 300m per pod against 100m.
        assert_eq!(
            replicas(
                2,
                &pods,
                &[("a", 300), ("b", 300)],
                Target::AverageValue(100)
            ),
            6
        );
    }

    #[test]
    fn within_the_ten_percent_tolerance_nothing_moves() {
        let pods = [pod("a"), pod("b")];
        assert_eq!(
            replicas(2, &pods, &[("a", 54), ("b", 54)], Target::Utilization(50)),
            2
        );
        assert_eq!(
            replicas(2, &pods, &[("a", 46), ("b", 46)], Target::Utilization(50)),
            2
        );
        assert_eq!(
            replicas(2, &pods, &[("a", 56), ("b", 56)], Target::Utilization(50)),
            3
        );
    }

    #[test]
    fn missing_pods_count_as_idle_on_the_way_up_and_as_their_request_on_the_way_down() {
        let pods = [pod("a"), pod("b")];
        // Up: a at 200%, b missing (0): 100% over 2 pods against 50% → 4.
        assert_eq!(
            replicas(2, &pods, &[("a", 200)], Target::Utilization(50)),
            4
        );
        // Down: a at 10%, b missing (100%): 55% against 50% is within tolerance → stays.
        assert_eq!(replicas(2, &pods, &[("a", 10)], Target::Utilization(50)), 2);
    }

    #[test]
    fn unready_pods_count_as_idle_on_a_scale_up_and_ignored_pods_not_at_all() {
        let mut b = pod("b");
        b.unready = true;
        let mut c = pod("c");
        c.ignored = true;
        // a at 100% against 50%; b unready counts 0: 50% → no move.
        let pods = [pod("a"), b, c];
        assert_eq!(
            replicas(
                3,
                &pods,
                &[("a", 100), ("b", 900), ("c", 900)],
                Target::Utilization(50)
            ),
            3
        );
        // a at 300%; with b at 0: 150% over 2 → 6.
        assert_eq!(
            replicas(3, &pods, &[("a", 300)], Target::Utilization(50)),
            6
        );
    }

    #[test]
    fn no_samples_or_no_requests_are_errors() {
        let pods = [pod("a")];
        assert_eq!(
            propose("cpu", 1, &pods, &usage(&[]), Target::Utilization(50)),
            Err(CalcError::NoMetrics)
        );
        let mut bare = pod("a");
        bare.request = None;
        let err = propose(
            "cpu",
            1,
            &[bare],
            &usage(&[("a", 5)]),
            Target::Utilization(50),
        );
        assert!(
            matches!(err, Err(CalcError::MissingRequest { .. })),
            "{err:?}"
        );
    }
}
