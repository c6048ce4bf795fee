//! Kill -9 at random moments never loses an acknowledged write.
//!
//! The parent re-executes this test binary running only `crash_child_entry` (ignored in normal
//! runs). The child writes under load and prints `ack put <key> <revision> end` (or
//! `ack del ...`) after each write's commit returned. The parent SIGKILLs it at a random moment,
//! reopens the file and checks every acknowledged write.

use std::collections::{HashMap, HashSet};
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use objstore::{ListOptions, Mutation, StoreConfig, Writer};
use rand::Rng;

use crate::common::{pod, pod_key};

const DB_ENV: &str = "OBJSTORE_CRASH_DB";
const ROUND_ENV: &str = "OBJSTORE_CRASH_ROUND";
const ROUNDS: u64 = 50;
const WRITERS: u64 = 16;

#[test]
#[ignore = "child process of kill_9_never_loses_an_acknowledged_write"]
fn crash_child_entry() {
    let Some(path) = std::env::var_os(DB_ENV) else {
        return;
    };
    let round: u64 = std::env::var(ROUND_ENV).unwrap().parse().unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let store =
            Writer::open(Path::new(&path), StoreConfig::default()).expect("child opens store");
        let store = std::sync::Arc::new(store);
        let tasks: Vec<_> = (0..WRITERS)
            .map(|w| tokio::spawn(write_forever(store.clone(), round, w)))
            .collect();
        for task in tasks {
            task.await.unwrap();
        }
    });
}

/// Puts new objects forever; every fifth write deletes the previous object instead.
async fn write_forever(store: std::sync::Arc<Writer>, round: u64, writer: u64) {
    for i in 0u64.. {
        let name = format!("r{round}-w{writer}-{i}");
        if i % 5 == 4 {
            let prev = pod_key("crash", &format!("r{round}-w{writer}-{}", i - 1));
            let applied = store
                .mutate(prev.clone(), |_, _| Ok::<_, ()>((Mutation::Delete, ())))
                .await
                .expect("delete committed")
                .unwrap();
            ack(
                "del",
                &prev.name,
                applied.revision.expect("deleted something"),
            );
        } else {
            let obj = store
                .put(pod_key("crash", &name), pod(&name, "n1", i))
                .await
                .expect("put committed");
            ack("put", &name, obj.revision);
        }
        if i % 7 == 0 {
            let payload = bytes::Bytes::from(name.clone());
            store
                .outbox_put(format!("w{writer}"), payload)
                .await
                .expect("outbox committed");
        }
    }
}

fn ack(op: &str, name: &str, revision: u64) {
    let mut out = std::io::stdout().lock();
    writeln!(out, "ack {op} {name} {revision} end").unwrap();
    out.flush().unwrap();
}

#[derive(Default)]
struct Acked {
    puts: HashMap<String, u64>,
    deletes: HashSet<String>,
    max_revision: u64,
}

#[test]
fn kill_9_never_loses_an_acknowledged_write() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("crash.db");
    let mut acked = Acked::default();
    let started = Instant::now();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    for round in 0..ROUNDS {
        let lines = run_and_kill(&path, round);
        let before = acked.puts.len() + acked.deletes.len();
        record(&mut acked, &lines);
        rt.block_on(verify(&path, &acked));
        if round % 10 != 9 {
            assert!(
                acked.puts.len() + acked.deletes.len() > before,
                "round {round} acked nothing"
            );
        }
    }
    assert!(
        acked.puts.len() > 500,
        "only {} puts acknowledged",
        acked.puts.len()
    );
    assert!(
        started.elapsed() < Duration::from_secs(120),
        "crash test took {:?}",
        started.elapsed()
    );
}

/// Runs one child, kills it at a random moment, returns its complete stdout lines.
fn run_and_kill(path: &Path, round: u64) -> Vec<String> {
    let exe = std::env::current_exe().unwrap();
    let mut child = Command::new(exe)
        .args([
            "--exact",
            "crash::crash_child_entry",
            "--nocapture",
            "--ignored",
        ])
        .env(DB_ENV, path)
        .env(ROUND_ENV, round.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn child");
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    let reader = thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut rng = rand::rng();
    let mut lines = Vec::new();
    if round % 10 == 9 {
        // Sometimes kill during start-up / recovery, before anything is acknowledged.
        thread::sleep(Duration::from_millis(rng.random_range(0..40)));
    } else {
        lines.extend(wait_for_first_ack(&rx));
        thread::sleep(Duration::from_millis(rng.random_range(0..120)));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    reader.join().unwrap();
    lines.extend(rx.try_iter());
    lines
}

fn wait_for_first_ack(rx: &mpsc::Receiver<String>) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut lines = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let line = rx
            .recv_timeout(left)
            .expect("child acknowledged a write in time");
        let is_ack = line.starts_with("ack ");
        lines.push(line);
        if is_ack {
            return lines;
        }
    }
}

fn record(acked: &mut Acked, lines: &[String]) {
    for line in lines {
        let parts: Vec<&str> = line.split(' ').collect();
        let ["ack", op, name, revision, "end"] = parts[..] else {
            continue;
        };
        let revision: u64 = revision.parse().unwrap();
        acked.max_revision = acked.max_revision.max(revision);
        match op {
            "put" => {
                acked.puts.insert(name.to_owned(), revision);
            }
            "del" => {
                acked.deletes.insert(name.to_owned());
            }
            other => panic!("unknown op {other}"),
        }
    }
}

/// Whether the write after this put (same writer) is its delete (`i % 5 == 3`).
fn deleted_next(name: &str) -> bool {
    let i: u64 = name.rsplit('-').next().unwrap().parse().unwrap();
    i % 5 == 3
}

async fn verify(path: &Path, acked: &Acked) {
    let store =
        Writer::open(path, StoreConfig::default()).expect("store opens cleanly after kill -9");
    assert!(
        store.revision() >= acked.max_revision,
        "revision {} < acknowledged {}",
        store.revision(),
        acked.max_revision
    );
    let listed = store
        .list(ListOptions::new("pods").namespace("crash"))
        .await
        .unwrap();
    let present: HashMap<&str, u64> = listed
        .items
        .iter()
        .map(|o| (o.key.name.as_str(), o.revision))
        .collect();
    for (name, revision) in &acked.puts {
        if acked.deletes.contains(name) {
            assert!(
                !present.contains_key(name.as_str()),
                "acknowledged delete of {name} lost"
            );
        } else if deleted_next(name) && !present.contains_key(name.as_str()) {
            // The writer's next operation deletes this object: it may have committed without
            // its acknowledgement being printed before the kill.
        } else {
            assert_eq!(
                present.get(name.as_str()),
                Some(revision),
                "acknowledged put of {name} lost"
            );
        }
    }
    assert!(store.outbox_len().await.unwrap() <= WRITERS as usize);
}
