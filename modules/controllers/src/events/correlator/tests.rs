use std::time::Duration;

use tokio::time::Instant;

use super::*;

fn draft(name: &str, reason: &str, message: &str) -> Draft {
    Draft {
        source: "replicaset-controller".into(),
        object: ObjectKey {
            api_version: "apps/v1".into(),
            kind: "ReplicaSet".into(),
            namespace: "default".into(),
            name: name.into(),
            uid: format!("uid-{name}"),
        },
        type_: "Warning".into(),
        reason: reason.into(),
        message: message.into(),
    }
}

fn name_of(d: &Decision) -> &str {
    match d {
        Decision::Create { name, .. } | Decision::Patch { name, .. } => name,
        Decision::Drop => panic!("dropped"),
    }
}

#[test]
fn an_equal_event_patches_the_first_one_with_a_growing_count() {
    let mut c = Correlator::default();
    let t0 = Instant::now();
    let e = draft(
        "web",
        "FailedCreate",
        "pods \"web-1\" is forbidden: exceeded quota",
    );
    let first = c.correlate(&e, t0);
    let Decision::Create { name, message } = &first else {
        panic!("{first:?}")
    };
    assert_eq!(message, &e.message);
    for n in 2..=5 {
        let next = c.correlate(&e, t0 + Duration::from_secs(n));
        assert_eq!(
            next,
            Decision::Patch {
                name: name.clone(),
                message: e.message.clone(),
                count: n as i32
            }
        );
    }
}

#[test]
fn events_about_other_objects_or_reasons_are_separate() {
    let mut c = Correlator::default();
    let t0 = Instant::now();
    let a = c.correlate(&draft("a", "FailedCreate", "m"), t0);
    let b = c.correlate(&draft("b", "FailedCreate", "m"), t0);
    let a2 = c.correlate(&draft("a", "FailedDelete", "m"), t0);
    assert!(matches!(a, Decision::Create { .. }));
    assert!(matches!(b, Decision::Create { .. }));
    assert!(matches!(a2, Decision::Create { .. }));
    assert_ne!(name_of(&a), name_of(&b));
    assert_ne!(name_of(&a), name_of(&a2));
}

#[test]
fn the_tenth_distinct_message_in_ten_minutes_is_combined_into_one_event() {
    let mut c = Correlator::default();
    let t0 = Instant::now();
    for i in 0..AGGREGATE_MAX - 1 {
        let d = c.correlate(&draft("web", "FailedCreate", &format!("m{i}")), t0);
        assert!(matches!(d, Decision::Create { .. }), "{d:?}");
    }
    let combined = c.correlate(&draft("web", "FailedCreate", "m9"), t0);
    let Decision::Create { name, message } = &combined else {
        panic!("{combined:?}")
    };
    assert_eq!(message, "(combined from similar events): m9");
    let again = c.correlate(
        &draft("web", "FailedCreate", "m10"),
        t0 + Duration::from_secs(1),
    );
    assert_eq!(
        again,
        Decision::Patch {
            name: name.clone(),
            message: "(combined from similar events): m10".into(),
            count: 2
        }
    );
}

#[test]
fn similar_events_further_apart_than_the_window_are_not_combined() {
    let mut c = Correlator::default();
    let mut t = Instant::now();
    for i in 0..AGGREGATE_MAX * 2 {
        let d = c.correlate(&draft("web", "FailedCreate", &format!("m{i}")), t);
        let Decision::Create { message, .. } = d else {
            panic!("{d:?}")
        };
        assert!(!message.starts_with(COMBINED), "{message}");
        t += AGGREGATE_WINDOW + Duration::from_secs(1);
        if i % 5 == 4 {
            // Keep the spam bucket full; this test is about aggregation only.
            t += SPAM_REFILL * 30;
        }
    }
}

#[test]
fn the_spam_filter_allows_a_burst_then_one_event_per_five_minutes() {
    let mut c = Correlator::default();
    let t0 = Instant::now();
    let e = draft("web", "FailedCreate", "refused");
    let passed = (0..100)
        .filter(|i| c.correlate(&e, t0 + Duration::from_millis(*i)) != Decision::Drop)
        .count();
    assert_eq!(passed, SPAM_BURST as usize);
    assert_eq!(
        c.correlate(&e, t0 + Duration::from_secs(60)),
        Decision::Drop
    );
    let later = c.correlate(&e, t0 + SPAM_REFILL + Duration::from_secs(1));
    assert!(
        matches!(later, Decision::Patch { count: 26, .. }),
        "{later:?}"
    );
    assert_eq!(
        c.correlate(&e, t0 + SPAM_REFILL + Duration::from_secs(2)),
        Decision::Drop
    );
}

#[test]
fn the_spam_filter_is_per_object() {
    let mut c = Correlator::default();
    let t0 = Instant::now();
    for _ in 0..SPAM_BURST as usize {
        assert_ne!(c.correlate(&draft("a", "R", "m"), t0), Decision::Drop);
    }
    assert_eq!(c.correlate(&draft("a", "R", "m"), t0), Decision::Drop);
    assert_ne!(c.correlate(&draft("b", "R", "m"), t0), Decision::Drop);
}

#[test]
fn a_forgotten_event_is_created_again() {
    let mut c = Correlator::default();
    let t0 = Instant::now();
    let e = draft("web", "FailedCreate", "m");
    let first = c.correlate(&e, t0);
    c.forget(name_of(&first));
    let second = c.correlate(&e, t0);
    assert!(matches!(second, Decision::Create { .. }), "{second:?}");
    assert_ne!(name_of(&first), name_of(&second));
}

#[test]
fn the_caches_stay_bounded() {
    let mut c = Correlator::default();
    let t0 = Instant::now();
    for i in 0..CACHE_MAX + 50 {
        c.correlate(&draft(&format!("o{i}"), "R", "m"), t0);
    }
    assert!(c.seen.entries.len() <= CACHE_MAX);
    assert!(c.similar.entries.len() <= CACHE_MAX);
    assert!(c.buckets.entries.len() <= CACHE_MAX);
}
