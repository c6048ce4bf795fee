//! From the calculator's proposal to the replica count applied, as kube-controller-manager
//! normalizes it: stabilized over the recent recommendations (a scale-down takes the highest
//! recommendation of its window, 300 s by default; a scale-up the lowest of its window, 0 s
//! by default), then held within `minReplicas`/`maxReplicas` and a rate: without `behavior`,
//! kube's fixed scale-up limit (`max(2 × current, 4)` at once); with it, each direction's
//! policies (`Pods` or `Percent` per `periodSeconds`, counted from the replicas at the start
//! of the period, the scale events since taken back; `selectPolicy` `Max`, `Min` or
//! `Disabled`), with the `AbleToScale` and `ScalingLimited` reasons kube gives. Pure: the
//! caller passes the time.

use std::time::Duration;

use tokio::time::Instant;

/// One recommendation, when it was made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Recommendation {
    pub replicas: i32,
    pub at: Instant,
}

/// A change of the target's replicas the controller made (positive: up), when.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ScaleEvent {
    pub change: i32,
    pub at: Instant,
}

/// What one autoscaler remembers between evaluations.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct History {
    pub recommendations: Vec<Recommendation>,
    pub events: Vec<ScaleEvent>,
}

/// One rate policy: at most `value` pods (or percent) per `period`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Policy {
    pub percent: bool,
    pub value: i32,
    pub period: Duration,
}

/// A direction's policies and how one is chosen (`selectPolicy: Min`, else `Max`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Policies {
    pub select_min: bool,
    pub policies: Vec<Policy>,
}

/// The windows and limits of one HorizontalPodAutoscaler.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rules {
    pub min: i32,
    pub max: i32,
    pub scale_up_window: Duration,
    pub scale_down_window: Duration,
    pub scale_up_disabled: bool,
    pub scale_down_disabled: bool,
    /// `None` without `behavior`: kube's fixed scale-up limit applies instead.
    pub rates: Option<(Policies, Policies)>,
}

/// The count to apply and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decision {
    pub replicas: i32,
    /// `AbleToScale` reason and message.
    pub able: (&'static str, String),
    /// `ScalingLimited`: whether limited, reason, message.
    pub limited: (bool, &'static str, &'static str),
}

/// Normalizes `proposed` from `current`, given the autoscaler's `history` (updated:
/// `proposed` recorded, what no window or period looks at any more dropped).
pub fn normalize(
    current: i32,
    proposed: i32,
    rules: &Rules,
    history: &mut History,
    now: Instant,
) -> Decision {
    let stabilized = stabilize(current, proposed, rules, &mut history.recommendations, now);
    let able = if stabilized == proposed {
        (
            "ReadyForNewScale",
            "recommended size matches current size".to_owned(),
        )
    } else if stabilized > proposed {
        (
            "ScaleDownStabilized",
            "recent recommendations were higher than current one, applying the highest recent recommendation".to_owned(),
        )
    } else {
        (
            "ScaleUpStabilized",
            "recent recommendations were lower than current one, applying the lowest recent recommendation".to_owned(),
        )
    };
    let directed = match stabilized {
        s if s > current && rules.scale_up_disabled => current,
        s if s < current && rules.scale_down_disabled => current,
        s => s,
    };
    let (replicas, limited) = match &rules.rates {
        None => limit(current, directed, rules),
        Some((up, down)) => {
            let longest = up
                .policies
                .iter()
                .chain(&down.policies)
                .map(|p| p.period)
                .max();
            let cutoff = longest.and_then(|l| now.checked_sub(l));
            history.events.retain(|e| cutoff.is_none_or(|c| e.at > c));
            let limits = Limits {
                current,
                events: &history.events,
                now,
            };
            limit_with_policies(current, directed, rules, limits.up(up), limits.down(down))
        }
    };
    Decision {
        replicas,
        able,
        limited,
    }
}

/// kube's stabilization: the proposal held between the lowest recommendation of the scale-up
/// window and the highest of the scale-down window.
fn stabilize(
    current: i32,
    proposed: i32,
    rules: &Rules,
    history: &mut Vec<Recommendation>,
    now: Instant,
) -> i32 {
    let up_cutoff = now.checked_sub(rules.scale_up_window);
    let down_cutoff = now.checked_sub(rules.scale_down_window);
    let within = |at: Instant, cutoff: Option<Instant>| cutoff.is_none_or(|c| at > c);
    let (mut up, mut down) = (proposed, proposed);
    for r in history.iter() {
        if within(r.at, up_cutoff) {
            up = up.min(r.replicas);
        }
        if within(r.at, down_cutoff) {
            down = down.max(r.replicas);
        }
    }
    history.retain(|r| within(r.at, up_cutoff) || within(r.at, down_cutoff));
    history.push(Recommendation {
        replicas: proposed,
        at: now,
    });
    current.max(up).min(down)
}

/// `desired` within min, max and the scale-up rate; whether it was limited and why.
fn limit(current: i32, desired: i32, rules: &Rules) -> (i32, (bool, &'static str, &'static str)) {
    let rate = (2 * current).max(4);
    let ceiling = rules.max.min(rate);
    if desired < rules.min {
        let why = "the desired replica count is less than the minimum replica count";
        (rules.min, (true, "TooFewReplicas", why))
    } else if desired > ceiling && ceiling < rules.max {
        let why = "the desired replica count is increasing faster than the maximum scale rate";
        (ceiling, (true, "ScaleUpLimit", why))
    } else if desired > ceiling {
        let why = "the desired replica count is more than the maximum replica count";
        (ceiling, (true, "TooManyReplicas", why))
    } else {
        let why = "the desired count is within the acceptable range";
        (desired, (false, "DesiredWithinRange", why))
    }
}

/// kube's `convertDesiredReplicasWithBehaviorRate`: `desired` within the policies' limits
/// and min/max.
fn limit_with_policies(
    current: i32,
    desired: i32,
    rules: &Rules,
    up_limit: i32,
    down_limit: i32,
) -> (i32, (bool, &'static str, &'static str)) {
    if desired > current {
        let (ceiling, reason, why) = if rules.max > up_limit {
            let why = "the desired replica count is increasing faster than the maximum scale rate";
            (up_limit, "ScaleUpLimit", why)
        } else {
            let why = "the desired replica count is more than the maximum replica count";
            (rules.max, "TooManyReplicas", why)
        };
        if desired > ceiling {
            return (ceiling, (true, reason, why));
        }
    } else if desired < current {
        let (floor, reason, why) = if rules.min < down_limit {
            let why = "the desired replica count is decreasing faster than the maximum scale rate";
            (down_limit, "ScaleDownLimit", why)
        } else {
            let why = "the desired replica count is less than the minimum replica count";
            (rules.min, "TooFewReplicas", why)
        };
        if desired < floor {
            return (floor, (true, reason, why));
        }
    }
    let why = "the desired count is within the acceptable range";
    (desired, (false, "DesiredWithinRange", why))
}

/// The scale events a direction's policies count.
struct Limits<'a> {
    current: i32,
    events: &'a [ScaleEvent],
    now: Instant,
}

impl Limits<'_> {
    /// The replicas at the start of `period`: now, the changes made since taken back.
    fn period_start(&self, period: Duration) -> i32 {
        let since = self.now.checked_sub(period);
        let changed: i32 = self
            .events
            .iter()
            .filter(|e| since.is_none_or(|s| e.at > s))
            .map(|e| e.change)
            .sum();
        self.current - changed
    }

    /// The most replicas the scale-up policies allow now (never below current).
    fn up(&self, p: &Policies) -> i32 {
        let allowed = p.policies.iter().map(|policy| {
            let start = self.period_start(policy.period);
            if policy.percent {
                (f64::from(start) * (1.0 + f64::from(policy.value) / 100.0)).ceil() as i32
            } else {
                start + policy.value
            }
        });
        let chosen = if p.select_min {
            allowed.min()
        } else {
            allowed.max()
        };
        chosen.unwrap_or(self.current).max(self.current)
    }

    /// The fewest replicas the scale-down policies allow now (never above current).
    fn down(&self, p: &Policies) -> i32 {
        let allowed = p.policies.iter().map(|policy| {
            let start = self.period_start(policy.period);
            if policy.percent {
                (f64::from(start) * (1.0 - f64::from(policy.value) / 100.0)).floor() as i32
            } else {
                start - policy.value
            }
        });
        let chosen = if p.select_min {
            allowed.max()
        } else {
            allowed.min()
        };
        chosen.unwrap_or(self.current).min(self.current)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(min: i32, max: i32, down_secs: u64) -> Rules {
        Rules {
            min,
            max,
            scale_up_window: Duration::ZERO,
            scale_down_window: Duration::from_secs(down_secs),
            scale_up_disabled: false,
            scale_down_disabled: false,
            rates: None,
        }
    }

    #[test]
    fn a_scale_down_waits_for_the_window_to_forget_higher_recommendations() {
        let r = rules(1, 10, 300);
        let t0 = Instant::now();
        let mut history = History::default();
        assert_eq!(normalize(1, 3, &r, &mut history, t0).replicas, 3);
        let later = normalize(3, 1, &r, &mut history, t0 + Duration::from_secs(60));
        assert_eq!(later.replicas, 3);
        assert_eq!(later.able.0, "ScaleDownStabilized");
        let after = normalize(3, 1, &r, &mut history, t0 + Duration::from_secs(301));
        assert_eq!(after.replicas, 1);
        assert_eq!(
            history.recommendations.len(),
            2,
            "the first recommendation left the window"
        );
    }

    #[test]
    fn min_max_and_the_scale_up_rate_limit_with_kubes_reasons() {
        let r = rules(2, 20, 0);
        let mut h = History::default();
        let now = Instant::now();
        let d = normalize(2, 1, &r, &mut h, now);
        assert_eq!((d.replicas, d.limited.1), (2, "TooFewReplicas"));
        let d = normalize(1, 10, &r, &mut h, now);
        assert_eq!((d.replicas, d.limited.1), (4, "ScaleUpLimit"));
        let d = normalize(10, 30, &r, &mut h, now);
        assert_eq!((d.replicas, d.limited.1), (20, "TooManyReplicas"));
        let d = normalize(4, 6, &r, &mut h, now);
        assert_eq!(
            (d.replicas, d.limited),
            (
                6,
                (
                    false,
                    "DesiredWithinRange",
                    "the desired count is within the acceptable range"
                )
            )
        );
    }

    #[test]
    fn a_disabled_direction_does_not_move() {
        let mut r = rules(1, 10, 0);
        r.scale_down_disabled = true;
        let now = Instant::now();
        assert_eq!(
            normalize(5, 2, &r, &mut History::default(), now).replicas,
            5
        );
        assert_eq!(
            normalize(5, 7, &r, &mut History::default(), now).replicas,
            7
        );
    }

    fn policy(percent: bool, value: i32, secs: u64) -> Policy {
        Policy {
            percent,
            value,
            period: Duration::from_secs(secs),
        }
    }

    #[test]
    fn behavior_policies_limit_each_period_counting_the_scale_events_in_it() {
        let mut r = rules(1, 20, 0);
        let up = Policies {
            select_min: false,
            policies: vec![policy(false, 4, 15), policy(true, 100, 15)],
        };
        let down = Policies {
            select_min: false,
            policies: vec![policy(true, 50, 60)],
        };
        r.rates = Some((up, down));
        let t = Instant::now();
        let mut h = History::default();
        // From 2: 4 pods or 100% → 6.
        let d = normalize(2, 20, &r, &mut h, t);
        assert_eq!((d.replicas, d.limited.1), (6, "ScaleUpLimit"));
        h.events.push(ScaleEvent { change: 4, at: t });
        // 5 s later the period started at 2 still: no more.
        assert_eq!(
            normalize(6, 20, &r, &mut h, t + Duration::from_secs(5)).replicas,
            6
        );
        // Once the period is over: 6 + 100%.
        assert_eq!(
            normalize(6, 20, &r, &mut h, t + Duration::from_secs(16)).replicas,
            12
        );

        let mut h = History::default();
        let d = normalize(10, 1, &r, &mut h, t);
        assert_eq!((d.replicas, d.limited.1), (5, "ScaleDownLimit"));
        h.events.push(ScaleEvent { change: -5, at: t });
        let later = t + Duration::from_secs(10);
        assert_eq!(normalize(5, 1, &r, &mut h, later).replicas, 5);
    }

    #[test]
    fn select_policy_min_takes_the_smallest_change() {
        let mut r = rules(1, 20, 0);
        let up = Policies {
            select_min: true,
            policies: vec![policy(false, 1, 15), policy(true, 100, 15)],
        };
        let down = Policies {
            select_min: false,
            policies: vec![policy(true, 100, 15)],
        };
        r.rates = Some((up, down));
        let d = normalize(2, 10, &r, &mut History::default(), Instant::now());
        assert_eq!(d.replicas, 3);
    }
}
