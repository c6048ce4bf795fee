//! objstore benchmarks, printed as a table: `cargo bench -p objstore`.
//!
//! 1. durable upserts/s of 1 KiB objects, group commit, `synchronous=FULL`, N concurrent writers;
//! 2. list of the 1,000 pods bound to one node (field index `spec.nodeName`) among 50,000;
//! 3. commit-to-delivery latency with 100 watch subscribers.
//!
//! Runs only under `cargo bench` (which passes `--bench`); returns at once for `--test`/`--list`
//! so `cargo test --all-targets` stays fast.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use objstore::{ListOptions, Mutation, NewObject, ObjKey, StoreConfig, WatchOptions, Writer};
use rand::Rng;

const KIB: usize = 1024;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let wanted = args.iter().any(|a| a == "--bench");
    if !wanted || args.iter().any(|a| a == "--test" || a == "--list") {
        return;
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let base = std::env::var_os("OBJSTORE_BENCH_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| env!("CARGO_TARGET_TMPDIR").into());
    println!("objstore benchmarks (db files under {})", base.display());
    println!("| benchmark | result | target |");
    println!("|---|---|---|");
    // Any other argument selects benchmarks by name: `cargo bench -p objstore -- list`.
    let filters: Vec<&String> = args
        .iter()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let selected =
        |name: &str| filters.is_empty() || filters.iter().any(|f| name.contains(f.as_str()));
    let tempdir = || tempfile::tempdir_in(&base).expect("tempdir");
    for writers in [64, 256] {
        if selected(&format!("upserts-{writers}")) {
            rt.block_on(upserts(tempdir().path(), writers, Duration::from_secs(5)));
        }
    }
    if selected("list") {
        rt.block_on(list_by_node(tempdir().path()));
    }
    if selected("watch") {
        rt.block_on(watch_latency(tempdir().path(), 100));
    }
}

/// A pod-like 1 KiB object on `node`.
fn pod(ns: &str, name: &str, node: &str, rv: u64) -> NewObject {
    let head = format!(
        r#"{{"apiVersion":"v1","kind":"Pod","metadata":{{"name":"{name}","namespace":"{ns}","resourceVersion":"{rv}"}},"spec":{{"nodeName":"{node}"}},"pad":""#
    );
    let mut value = head.into_bytes();
    value.resize(KIB - 2, b'x');
    value.extend_from_slice(b"\"}");
    NewObject::from_value(Bytes::from(value))
        .uid(format!("uid-{ns}-{name}"))
        .resource_version(rv.to_string())
        .label("app", format!("app-{}", rv % 10))
        .field("spec.nodeName", node)
        .field("status.phase", "Running")
}

async fn upserts(dir: &Path, writers: usize, run_for: Duration) {
    let store = Arc::new(Writer::open(dir.join("bench.db"), StoreConfig::default()).expect("open"));
    let deadline = Instant::now() + run_for;
    let start = Instant::now();
    let tasks: Vec<_> = (0..writers)
        .map(|w| {
            let store = store.clone();
            tokio::spawn(async move {
                let mut latencies = Vec::new();
                let mut i = 0u64;
                while Instant::now() < deadline {
                    let name = format!("w{w}-{}", i % 200);
                    let t0 = Instant::now();
                    store
                        .put(
                            ObjKey::new("pods", "bench", &name),
                            pod("bench", &name, "n1", i),
                        )
                        .await
                        .expect("put");
                    latencies.push(t0.elapsed());
                    i += 1;
                }
                latencies
            })
        })
        .collect();
    let mut latencies = Vec::new();
    for task in tasks {
        latencies.extend(task.await.expect("writer task"));
    }
    let elapsed = start.elapsed().as_secs_f64();
    let stats = store.stats();
    let rate = latencies.len() as f64 / elapsed;
    let batch = stats.jobs as f64 / stats.commits.max(1) as f64;
    println!(
        "| durable 1 KiB upserts, {writers} writers, synchronous=FULL | {rate:.0}/s ({} commits, {batch:.0} puts/commit, put p50 {} p99 {}) | >= 20,000/s |",
        stats.commits,
        ms(percentile(&mut latencies, 50.0)),
        ms(percentile(&mut latencies, 99.0)),
    );
}

async fn list_by_node(dir: &Path) {
    let store = Writer::open(dir.join("bench.db"), StoreConfig::default()).expect("open");
    let (nodes, per_node) = (50, 1000);
    for node in 0..nodes {
        let items: Vec<_> = (0..per_node)
            .map(|i| {
                let (ns, name) = (format!("ns{}", i % 20), format!("pod-{node}-{i}"));
                let obj = pod(&ns, &name, &format!("node-{node}"), i as u64);
                let key = ObjKey::new("pods", ns, name);
                (key, move |_: Option<&objstore::StoredObject>, _| {
                    Ok::<_, ()>((Mutation::Put(obj), ()))
                })
            })
            .collect();
        store.mutate_many(items).await.expect("fill");
    }
    let mut rng = rand::rng();
    let mut latencies = Vec::new();
    for round in 0..300 {
        let node = format!("node-{}", rng.random_range(0..nodes));
        let t0 = Instant::now();
        let list = store
            .list(ListOptions::new("pods").field("spec.nodeName", node))
            .await
            .expect("list");
        let took = t0.elapsed();
        assert_eq!(list.items.len(), per_node);
        if round >= 20 {
            latencies.push(took);
        }
    }
    println!(
        "| list 1,000 pods of one node among {} (field index, warm object cache) | p50 {} p99 {} | p50 < 2 ms |",
        nodes * per_node,
        ms(percentile(&mut latencies, 50.0)),
        ms(percentile(&mut latencies, 99.0)),
    );
    // After a restart the cache is empty: the first list of each node decodes every row.
    drop(store);
    let store = Writer::open(dir.join("bench.db"), StoreConfig::default()).expect("reopen");
    let mut cold = Vec::new();
    for node in 0..nodes {
        let t0 = Instant::now();
        let list = store
            .list(ListOptions::new("pods").field("spec.nodeName", format!("node-{node}")))
            .await
            .expect("list");
        cold.push(t0.elapsed());
        assert_eq!(list.items.len(), per_node);
    }
    println!(
        "| same, first list per node after reopen (cold cache) | p50 {} p99 {} | |",
        ms(percentile(&mut cold, 50.0)),
        ms(percentile(&mut cold, 99.0)),
    );
}

async fn watch_latency(dir: &Path, subscribers: usize) {
    let store = Arc::new(Writer::open(dir.join("bench.db"), StoreConfig::default()).expect("open"));
    // The probe is registered first, so its predicate runs first when the writer publishes a
    // batch, right after COMMIT returned: that is the commit timestamp of each revision.
    let committed: Arc<Mutex<HashMap<u64, Instant>>> = Arc::default();
    let probe = {
        let committed = committed.clone();
        WatchOptions::from_revision(0)
            .buffer(1 << 16)
            .predicate(move |o| {
                committed
                    .lock()
                    .unwrap()
                    .entry(o.revision)
                    .or_insert_with(Instant::now);
                false
            })
    };
    let _probe = store.watch(probe).expect("probe");
    let events = 2000u64;
    let subs: Vec<_> = (0..subscribers)
        .map(|_| {
            let mut w = store
                .watch(WatchOptions::from_revision(0).resource("pods").buffer(4096))
                .expect("watch");
            tokio::spawn(async move {
                let mut seen = Vec::with_capacity(events as usize);
                while let Some(Ok(e)) = w.next().await {
                    seen.push((e.revision, Instant::now()));
                    if e.revision == events {
                        break;
                    }
                }
                seen
            })
        })
        .collect();
    let writers = 8;
    let tasks: Vec<_> = (0..writers)
        .map(|w| {
            let store = store.clone();
            tokio::spawn(async move {
                for i in 0..events / writers {
                    let name = format!("w{w}-{}", i % 50);
                    store
                        .put(
                            ObjKey::new("pods", "bench", &name),
                            pod("bench", &name, "n1", i),
                        )
                        .await
                        .expect("put");
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("writer");
    }
    let committed = committed.lock().unwrap().clone();
    let mut latencies = Vec::new();
    for sub in subs {
        for (revision, at) in sub.await.expect("subscriber") {
            latencies.push(at.saturating_duration_since(committed[&revision]));
        }
    }
    assert_eq!(
        latencies.len(),
        subscribers * events as usize,
        "every subscriber saw every event"
    );
    println!(
        "| commit-to-delivery, {subscribers} subscribers, {events} events from {writers} writers | p50 {} p99 {} | p99 < 5 ms |",
        ms(percentile(&mut latencies, 50.0)),
        ms(percentile(&mut latencies, 99.0)),
    );
}

fn percentile(samples: &mut [Duration], p: f64) -> Duration {
    samples.sort_unstable();
    let idx = ((samples.len() as f64 - 1.0) * p / 100.0).round() as usize;
    samples[idx]
}

fn ms(d: Duration) -> String {
    format!("{:.3} ms", d.as_secs_f64() * 1e3)
}
