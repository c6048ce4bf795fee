use std::sync::{Arc, Mutex};

use super::*;

const MS: Duration = Duration::from_millis(1);

#[test]
fn the_back_off_doubles_from_its_base_up_to_its_max() {
    let b = Backoff {
        base: 100 * MS,
        max: 1000 * MS,
    };
    let delays: Vec<Duration> = (1..=6).map(|n| b.delay(n)).collect();
    assert_eq!(
        delays,
        [100 * MS, 200 * MS, 400 * MS, 800 * MS, 1000 * MS, 1000 * MS]
    );
    assert_eq!(b.delay(u32::MAX), 1000 * MS);
}

#[test]
fn failures_in_a_row_back_off_and_a_success_starts_over() {
    let mut q = WorkQueue::new(Backoff::DEFAULT);
    let t0 = Instant::now();
    q.add("k".into());
    assert_eq!(q.pop(t0).as_deref(), Some("k"));
    q.finished("k", Err(()), t0);
    assert_eq!(q.next_due(), Some(t0 + 100 * MS));
    assert_eq!(q.pop(t0 + 99 * MS), None);
    let t1 = t0 + 100 * MS;
    assert_eq!(q.pop(t1).as_deref(), Some("k"));
    q.finished("k", Err(()), t1);
    assert_eq!(q.next_due(), Some(t1 + 200 * MS));
    let t2 = t1 + 200 * MS;
    assert_eq!(q.pop(t2).as_deref(), Some("k"));
    q.finished("k", Err(()), t2);
    assert_eq!(q.next_due(), Some(t2 + 400 * MS));
    assert_eq!(q.failures("k"), 3);

    let t3 = t2 + 400 * MS;
    assert_eq!(q.pop(t3).as_deref(), Some("k"));
    q.finished("k", Ok(Action::AwaitChange), t3);
    assert_eq!(q.failures("k"), 0);
    assert_eq!(q.next_due(), None);
    q.add("k".into());
    assert_eq!(q.pop(t3).as_deref(), Some("k"));
    q.finished("k", Err(()), t3);
    assert_eq!(q.next_due(), Some(t3 + 100 * MS));
}

#[test]
fn a_requeue_comes_back_when_due_and_a_change_brings_it_sooner() {
    let mut q = WorkQueue::new(Backoff::DEFAULT);
    let t0 = Instant::now();
    q.add("a".into());
    q.add("b".into());
    let a = q.pop(t0).unwrap();
    q.finished(&a, Ok(Action::requeue(Duration::from_secs(30))), t0);
    let b = q.pop(t0).unwrap();
    q.finished(&b, Ok(Action::requeue(Duration::from_secs(10))), t0);
    assert_eq!(q.pop(t0), None);
    assert_eq!(q.next_due(), Some(t0 + Duration::from_secs(10)));
    assert_eq!(q.pop(t0 + Duration::from_secs(10)).as_deref(), Some("b"));

    // A change to a queues it now; its later requeue is dropped, not run a second time.
    q.add("a".into());
    assert_eq!(q.pop(t0 + Duration::from_secs(11)).as_deref(), Some("a"));
    assert_eq!(q.next_due(), None);
    assert_eq!(q.pop(t0 + Duration::from_secs(60)), None);
}

#[test]
fn a_key_queued_many_times_runs_once_and_the_earliest_requeue_wins() {
    let mut q = WorkQueue::new(Backoff::DEFAULT);
    let t0 = Instant::now();
    for _ in 0..3 {
        q.add("a".into());
    }
    q.add("b".into());
    assert_eq!(q.pop(t0).as_deref(), Some("a"));
    assert_eq!(q.pop(t0).as_deref(), Some("b"));
    assert_eq!(q.pop(t0), None);

    q.add_at("c".into(), t0 + 50 * MS);
    q.add_at("c".into(), t0 + 20 * MS);
    q.add_at("c".into(), t0 + 90 * MS);
    assert_eq!(q.next_due(), Some(t0 + 20 * MS));
    assert_eq!(q.pop(t0 + 20 * MS).as_deref(), Some("c"));
    assert_eq!(q.pop(t0 + 100 * MS), None);
}

#[tokio::test(start_paused = true)]
async fn the_work_loop_retries_a_failing_key_with_back_off_and_follows_requeues() {
    let (queue, rx) = queue();
    let shutdown = CancellationToken::new();
    let t0 = Instant::now();
    let calls: Arc<Mutex<Vec<(String, Duration)>>> = Arc::default();
    let seen = calls.clone();
    let stop = shutdown.clone();
    let worker = tokio::spawn(work(rx, "test", shutdown.clone(), move |k| {
        let (seen, stop) = (seen.clone(), stop.clone());
        async move {
            let mut calls = seen.lock().unwrap();
            calls.push((k.clone(), t0.elapsed()));
            let n = calls.iter().filter(|(c, _)| *c == k).count();
            match (k.as_str(), n) {
                ("failing", 1..=3) => Err("conflict"),
                ("failing", _) => Ok(Action::AwaitChange),
                ("ticking", 1..=2) => Ok(Action::requeue(Duration::from_secs(5))),
                _ => {
                    stop.cancel();
                    Ok(Action::AwaitChange)
                }
            }
        }
    }));
    queue.send("failing".into()).unwrap();
    queue.send("ticking".into()).unwrap();
    tokio::time::timeout(Duration::from_secs(60), worker)
        .await
        .expect("the loop ends at shutdown")
        .unwrap();
    let calls = calls.lock().unwrap().clone();
    let at = |key: &str| -> Vec<Duration> {
        calls
            .iter()
            .filter(|(k, _)| k == key)
            .map(|(_, t)| *t)
            .collect()
    };
    assert_eq!(
        at("failing"),
        [Duration::ZERO, 100 * MS, 300 * MS, 700 * MS]
    );
    let secs = Duration::from_secs;
    assert_eq!(at("ticking"), [Duration::ZERO, secs(5), secs(10)]);
    assert!(queue.send("after".into()).is_err());
}

#[test]
fn a_key_queued_while_it_is_reconciled_waits_for_that_reconcile_and_then_runs_once() {
    let mut q = WorkQueue::new(Backoff::DEFAULT);
    let t0 = Instant::now();
    q.add("a".into());
    q.add("b".into());
    assert_eq!(q.pop(t0).as_deref(), Some("a"));
    // Another key runs beside it; the same key does not.
    q.add("a".into());
    q.add("a".into());
    q.add_at("a".into(), t0);
    assert_eq!(q.pop(t0).as_deref(), Some("b"));
    assert_eq!(q.pop(t0), None);
    q.finished("a", Ok(Action::AwaitChange), t0);
    assert_eq!(q.pop(t0).as_deref(), Some("a"));
    assert_eq!(q.pop(t0), None);
    q.finished("a", Ok(Action::AwaitChange), t0);
    q.finished("b", Ok(Action::AwaitChange), t0);
    assert_eq!(q.pop(t0), None);
}

#[tokio::test(start_paused = true)]
async fn the_work_loop_reconciles_different_keys_at_once_and_never_one_key_twice() {
    let (tx, rx) = queue();
    let shutdown = CancellationToken::new();
    let now = Arc::new(Mutex::new((0usize, 0usize, Vec::<String>::new())));
    let seen = now.clone();
    let stop = shutdown.clone();
    let looped = tokio::spawn(work(rx, "test", stop, move |k| {
        let seen = seen.clone();
        async move {
            {
                let mut s = seen.lock().unwrap();
                assert!(!s.2.contains(&k), "{k} reconciled twice at once");
                s.2.push(k.clone());
                s.0 += 1;
                s.1 = s.1.max(s.2.len());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
            seen.lock().unwrap().2.retain(|r| r != &k);
            Ok::<_, std::convert::Infallible>(Action::AwaitChange)
        }
    }));
    for i in 0..10 {
        tx.send(format!("k{i}")).unwrap();
    }
    tx.send("k0".into()).unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    tx.send("k0".into()).unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (runs, most, _) = now.lock().unwrap().clone();
    // Ten keys, k0 once more (sent while it ran); five at a time.
    assert_eq!(runs, 11);
    assert_eq!(most, WORKERS);
    shutdown.cancel();
    looped.await.unwrap();
}
