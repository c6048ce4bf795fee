//! `usageNanoCores` from cumulative CPU time, as the kubelet computes it for runtimes that
//! report only the counter: the previous sample of each container, pod and the node is kept,
//! and the rate is the counter's growth over the time between the two samples. Pure: samples
//! carry their own time (the runtime's, or the clock's for the node).

use std::collections::{HashMap, HashSet};

/// The previous CPU sample of each key (a container id, `pod/<uid>`, `node`).
#[derive(Debug, Default)]
pub struct Rates {
    last: HashMap<String, Sample>,
}

#[derive(Clone, Copy, Debug)]
struct Sample {
    /// When it was taken, in nanoseconds since the epoch.
    at: i64,
    /// CPU nanoseconds used so far.
    used: u64,
    /// The rate computed when it was recorded (answered again for the same sample).
    rate: Option<u64>,
}

// === impl Rates ===

impl Rates {
    /// Records `used` CPU nanoseconds of `key` at `at` (nanoseconds since the epoch) and
    /// answers the cores used since the previous sample, in billionths. The first sample, a
    /// sample older than the previous one and a counter that went back (a new container under
    /// the same key) answer `None`; the same sample again answers what it answered before.
    pub fn observe(&mut self, key: &str, at: i64, used: u64) -> Option<u64> {
        let previous = self.last.get(key).copied();
        let rate = match previous {
            Some(p) if p.at == at => return p.rate,
            Some(p) if p.at < at && p.used <= used => {
                let elapsed = (at - p.at) as u128;
                let grown = u128::from(used - p.used);
                u64::try_from(grown * 1_000_000_000 / elapsed).ok()
            }
            _ => None,
        };
        self.last.insert(key.to_owned(), Sample { at, used, rate });
        rate
    }

    /// Forgets every key not in `live` (containers and pods that went away).
    pub fn retain(&mut self, live: &HashSet<String>) {
        self.last.retain(|k, _| live.contains(k));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: i64 = 1_000_000_000;

    #[test]
    fn the_rate_is_the_growth_over_the_time_between_two_samples() {
        let mut rates = Rates::default();
        assert_eq!(rates.observe("c", 10 * SECOND, 5_000_000_000), None);
        // 1.5 s of CPU in 2 s: 750 millicores.
        let rate = rates.observe("c", 12 * SECOND, 6_500_000_000);
        assert_eq!(rate, Some(750_000_000));
        assert_eq!(rates.observe("c", 12 * SECOND, 6_500_000_000), rate);
        assert_eq!(rates.observe("c", 13 * SECOND, 6_500_000_000), Some(0));
    }

    #[test]
    fn a_counter_that_went_back_or_an_older_sample_starts_over() {
        let mut rates = Rates::default();
        rates.observe("c", 10 * SECOND, 9 * SECOND as u64);
        assert_eq!(rates.observe("c", 11 * SECOND, 1), None, "restarted");
        assert_eq!(
            rates.observe("c", 12 * SECOND, 1 + SECOND as u64),
            Some(1_000_000_000)
        );
        assert_eq!(rates.observe("c", 5 * SECOND, 0), None, "older sample");
    }

    #[test]
    fn forgotten_keys_start_over() {
        let mut rates = Rates::default();
        rates.observe("gone", SECOND, 0);
        rates.observe("kept", SECOND, 0);
        rates.retain(&HashSet::from(["kept".to_string()]));
        assert_eq!(rates.observe("gone", 2 * SECOND, SECOND as u64), None);
        assert_eq!(
            rates.observe("kept", 2 * SECOND, SECOND as u64),
            Some(1_000_000_000)
        );
    }
}
