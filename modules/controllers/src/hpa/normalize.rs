//! From the calculator's proposal to the replica count applied, as kube-controller-manager
//! normalizes it: stabilized over the recent recommendations (a scale-down takes the highest
//! recommendation of its window, 300 s by default; a scale-up the lowest of its window, 0 s
//! by default), then held within `minReplicas`/`maxReplicas` and the scale-up rate (at most
//! `max(2 × current, current + 4)` at once: kube's default policies of 100% or 4 pods), with
//! the `AbleToScale` and `ScalingLimited` reasons kube gives. A direction whose
//! `selectPolicy` is `Disabled` does not move. Pure: the caller passes the time.

use std::time::Duration;

use tokio::time::Instant;

/// One recommendation, when it was made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Recommendation {
    pub replicas: i32,
    pub at: Instant,
}

/// The windows and limits of one HorizontalPodAutoscaler.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rules {
    pub min: i32,
    pub max: i32,
    pub scale_up_window: Duration,
    pub scale_down_window: Duration,
    pub scale_up_disabled: bool,
    pub scale_down_disabled: bool,
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

/// Normalizes `proposed` from `current`, given the `history` of recommendations (updated:
/// `proposed` recorded, those older than both windows dropped).
pub fn normalize(
    current: i32,
    proposed: i32,
    rules: &Rules,
    history: &mut Vec<Recommendation>,
    now: Instant,
) -> Decision {
    let stabilized = stabilize(current, proposed, rules, history, now);
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
    let (replicas, limited) = limit(current, directed, rules);
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
    let rate = (2 * current).max(current + 4);
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
        }
    }

    #[test]
    fn a_scale_down_waits_for_the_window_to_forget_higher_recommendations() {
        let r = rules(1, 10, 300);
        let t0 = Instant::now();
        let mut history = Vec::new();
        assert_eq!(normalize(1, 3, &r, &mut history, t0).replicas, 3);
        let later = normalize(3, 1, &r, &mut history, t0 + Duration::from_secs(60));
        assert_eq!(later.replicas, 3);
        assert_eq!(later.able.0, "ScaleDownStabilized");
        let after = normalize(3, 1, &r, &mut history, t0 + Duration::from_secs(301));
        assert_eq!(after.replicas, 1);
        assert_eq!(history.len(), 2, "the first recommendation left the window");
    }

    #[test]
    fn min_max_and_the_scale_up_rate_limit_with_kubes_reasons() {
        let r = rules(2, 20, 0);
        let mut h = Vec::new();
        let now = Instant::now();
        let d = normalize(2, 1, &r, &mut h, now);
        assert_eq!((d.replicas, d.limited.1), (2, "TooFewReplicas"));
        let d = normalize(1, 10, &r, &mut h, now);
        assert_eq!((d.replicas, d.limited.1), (5, "ScaleUpLimit"));
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
        assert_eq!(normalize(5, 2, &r, &mut Vec::new(), now).replicas, 5);
        assert_eq!(normalize(5, 7, &r, &mut Vec::new(), now).replicas, 7);
    }
}
