//! The rotation planner on file names alone, [`rotate`] on a fake runtime, and the whole loop
//! on a real containerd whose busy container writes on into each new file.

use std::io::Read;
use std::time::{Duration, UNIX_EPOCH};

use cri::fake::FakeRuntime;
use k8s_openapi::api::core::v1::Pod;
use serde_json::json;

use super::*;
use crate::spec::{self, DnsSettings, PodId};

/// 2026-01-02 03:04:05 UTC.
fn now() -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(1_767_323_045)
}

fn names(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

const LOG: &str = "/logs/ns_p_u/c/0.log";
const POLICY: Policy = Policy {
    max_size: 100,
    max_files: 3,
};

#[test]
fn a_log_below_the_limit_is_left_alone() {
    let siblings = names(&["0.log", "0.log.20260101-000000", "0.log.x.tmp"]);
    assert_eq!(
        plan(Path::new(LOG), 99, &siblings, POLICY, now()),
        Plan::default()
    );
}

#[test]
fn a_log_at_the_limit_is_renamed_with_the_utc_time() {
    let plan = plan(Path::new(LOG), 100, &names(&["0.log"]), POLICY, now());
    let expected = Plan {
        rotate_to: Some("/logs/ns_p_u/c/0.log.20260102-030405".into()),
        ..Default::default()
    };
    assert_eq!(plan, expected);
}

#[test]
fn the_oldest_rotated_files_go_and_the_others_are_compressed() {
    let siblings = names(&[
        "0.log",
        "0.log.20260101-000001",
        "0.log.20260101-000000.gz",
        "0.log.20260101-000003",
        "0.log.20260101-000002.gz",
        "1.log",
    ]);
    let max5 = Policy {
        max_files: 5,
        ..POLICY
    };
    let dir = Path::new("/logs/ns_p_u/c");
    let plan = plan(Path::new(LOG), 500, &siblings, max5, now());
    // Kept: 5 - 2 = 3 rotated files, plus the one rotated now and the current log.
    assert_eq!(plan.delete, [dir.join("0.log.20260101-000000.gz")]);
    assert_eq!(
        plan.compress,
        [
            dir.join("0.log.20260101-000001"),
            dir.join("0.log.20260101-000003")
        ]
    );
    assert_eq!(plan.rotate_to, Some(dir.join("0.log.20260102-030405")));
}

#[test]
fn leftovers_of_an_interrupted_compression_are_deleted() {
    let siblings = names(&[
        "0.log",
        "0.log.20260101-000001",
        "0.log.20260101-000001.gz",
        "0.log.20260101-000002.gz.tmp",
    ]);
    let dir = Path::new("/logs/ns_p_u/c");
    let plan = plan(Path::new(LOG), 500, &siblings, POLICY, now());
    let mut deleted = plan.delete.clone();
    deleted.sort();
    assert_eq!(
        deleted,
        [
            dir.join("0.log.20260101-000001"),
            dir.join("0.log.20260101-000002.gz.tmp")
        ]
    );
    assert_eq!(
        plan.compress,
        Vec::<PathBuf>::new(),
        "the .gz is kept as it is"
    );
}

#[test]
fn a_second_rotation_within_the_same_second_waits_for_the_next() {
    for taken in ["0.log.20260102-030405", "0.log.20260102-030405.gz"] {
        let siblings = names(&["0.log", "0.log.20260101-000000", taken]);
        let plan = plan(Path::new(LOG), 500, &siblings, POLICY, now());
        assert_eq!(plan, Plan::default(), "{taken}");
    }
}

#[test]
fn with_two_files_no_rotated_file_is_kept_before_rotating() {
    let siblings = names(&["0.log", "0.log.20260101-000001"]);
    let two = Policy {
        max_files: 2,
        ..POLICY
    };
    let plan = plan(Path::new(LOG), 500, &siblings, two, now());
    assert_eq!(
        plan.delete,
        [Path::new("/logs/ns_p_u/c/0.log.20260101-000001")]
    );
    assert!(plan.compress.is_empty());
}

/// A pod with one container `c` running on `rt`; its log path as the runtime reports it.
async fn running(rt: &dyn Runtime, logs: &Path, script: &str) -> (String, PathBuf) {
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "busy", "namespace": "default", "uid": "uid-busy"},
        "spec": {"containers": [{"name": "c", "image": testkit::containerd::BUSYBOX_IMAGE,
                                 "command": ["/bin/sh", "-c", script]}]},
    }))
    .unwrap();
    let id = PodId::of(&pod).unwrap();
    std::fs::create_dir_all(id.log_dir(logs).join("c")).unwrap();
    let sandbox_config = spec::sandbox_config(&pod, &id, 0, logs, &DnsSettings::default());
    let sandbox = rt
        .run_pod_sandbox(sandbox_config.clone(), "")
        .await
        .unwrap();
    let c = &pod.spec.as_ref().unwrap().containers[0];
    let config = spec::container_config(&id, c, 0, vec![], vec![]);
    let cid = rt
        .create_container(&sandbox, config, sandbox_config)
        .await
        .unwrap();
    rt.start_container(&cid).await.unwrap();
    let log = PathBuf::from(rt.container_status(&cid).await.unwrap().log_path);
    (cid, log)
}

#[tokio::test]
async fn rotation_renames_the_log_reopens_it_and_gzips_the_previous_one() {
    let dir = tempfile::tempdir().unwrap();
    let rt = FakeRuntime::default();
    rt.add_image(testkit::containerd::BUSYBOX_IMAGE);
    let (id, log) = running(&rt, dir.path(), "").await;
    std::fs::write(&log, [b'a'; 150]).unwrap();
    rotate(&rt, &id, &log, POLICY, now()).await.unwrap();
    let first = PathBuf::from(format!("{}.20260102-030405", log.display()));
    assert_eq!(std::fs::read(&first).unwrap(), [b'a'; 150]);
    assert!(!log.exists(), "the runtime makes the new file");
    assert_eq!(rt.count("ReopenContainerLog"), 1);

    std::fs::write(&log, [b'b'; 150]).unwrap();
    let later = now() + Duration::from_secs(1);
    rotate(&rt, &id, &log, POLICY, later).await.unwrap();
    let mut unzipped = Vec::new();
    let gz = std::fs::File::open(format!("{}.gz", first.display())).unwrap();
    flate2::read::GzDecoder::new(gz)
        .read_to_end(&mut unzipped)
        .unwrap();
    assert_eq!(unzipped, [b'a'; 150]);
    assert!(!first.exists());
    let second = PathBuf::from(format!("{}.20260102-030406", log.display()));
    assert_eq!(std::fs::read(&second).unwrap(), [b'b'; 150]);
    assert_eq!(rt.count("ReopenContainerLog"), 2);
}

#[tokio::test]
async fn a_log_the_runtime_cannot_reopen_keeps_its_name() {
    let dir = tempfile::tempdir().unwrap();
    let rt = FakeRuntime::default();
    rt.add_image(testkit::containerd::BUSYBOX_IMAGE);
    let (id, log) = running(&rt, dir.path(), "").await;
    std::fs::write(&log, [b'a'; 150]).unwrap();
    rt.exit("c", 0);
    let err = rotate(&rt, &id, &log, POLICY, now()).await.unwrap_err();
    assert!(err.to_string().contains("ReopenContainerLog"), "{err}");
    assert_eq!(std::fs::read(&log).unwrap(), [b'a'; 150]);
    assert_eq!(super::names(log.parent().unwrap()).unwrap(), ["0.log"]);
}

/// The line numbers of a log's `line <n> ...` lines, gzipped or not.
fn numbers(path: &Path) -> Vec<u64> {
    let mut text = String::new();
    let file = std::fs::File::open(path).unwrap();
    if path.extension().is_some_and(|e| e == "gz") {
        flate2::read::GzDecoder::new(file)
            .read_to_string(&mut text)
            .unwrap();
    } else {
        std::io::BufReader::new(file)
            .read_to_string(&mut text)
            .unwrap();
    }
    // `<time> stdout F line <n> <padding>`
    text.lines()
        .filter_map(|l| l.split(' ').nth(4)?.parse().ok())
        .collect()
}

/// The container's log files, oldest first (the current log last).
fn files(log: &Path) -> Vec<PathBuf> {
    let dir = log.parent().unwrap();
    let mut rotated: Vec<PathBuf> = super::names(dir)
        .unwrap()
        .into_iter()
        .filter(|n| n.starts_with("0.log."))
        .map(|n| dir.join(n))
        .collect();
    rotated.sort();
    rotated.push(log.to_path_buf());
    rotated
}

#[tokio::test]
async fn a_busy_containers_log_rotates_on_containerd_and_no_line_is_lost() {
    use testkit::containerd::Containerd;
    Containerd::available().unwrap();
    let containerd = Containerd::start().await.unwrap();
    let footprint = containerd.footprint();
    let cri: Arc<dyn Runtime> = Arc::new(containerd.connect().await.unwrap());
    let logs = containerd.root().join("pods");
    // About 400 kB/s of numbered lines.
    let script = "trap 'exit 0' TERM; i=0; while true; do i=$((i+1)); \
        echo line $i ..........................................................; \
        [ $((i % 50)) = 0 ] && usleep 10000; done";
    let (_, log) = running(&*cri, &logs, script).await;
    let policy = Policy {
        max_size: 64 * 1024,
        max_files: 3,
    };
    let shutdown = CancellationToken::new();
    let rotation = tokio::spawn(run(
        cri.clone(),
        Clock::system(),
        policy,
        Duration::from_millis(200),
        shutdown.clone(),
    ));
    // Rotated names carry seconds, so at most a rotation a second: the first rotated file is
    // gone once the compressed one no longer starts at line 1 (after three rotations).
    let started = std::time::Instant::now();
    testkit::eventually(
        "the oldest rotated logs deleted",
        Duration::from_secs(20),
        || {
            let gz = files(&log)
                .into_iter()
                .find(|f| f.extension().is_some_and(|e| e == "gz"));
            std::future::ready(gz.is_some_and(|f| numbers(&f).first().is_some_and(|n| *n > 1)))
        },
    )
    .await;
    eprintln!(
        "the first rotated log deleted after {:?}",
        started.elapsed()
    );
    shutdown.cancel();
    rotation.await.unwrap();

    let files = files(&log);
    assert!(files.len() <= 3, "{files:?}");
    let sizes: Vec<u64> = files
        .iter()
        .map(|f| std::fs::metadata(f).unwrap().len())
        .collect();
    eprintln!("after rotation: {files:?} of {sizes:?} bytes");
    // containerd writes on into the new file; every rotated file continues the previous one.
    testkit::eventually("lines in the current log", Duration::from_secs(5), || {
        std::future::ready(!numbers(&log).is_empty())
    })
    .await;
    let lines: Vec<Vec<u64>> = files.iter().map(|f| numbers(f)).collect();
    for pair in lines.windows(2) {
        let (before, after) = (&pair[0], &pair[1]);
        assert_eq!(
            after[0],
            before[before.len() - 1] + 1,
            "a gap between files"
        );
    }
    for run in &lines {
        assert!(
            run.windows(2).all(|w| w[1] == w[0] + 1),
            "a gap within a file"
        );
    }

    // The summary on a real runtime: the busy container uses CPU, memory and log space.
    let stats = crate::stats::Stats::default();
    let sources = crate::stats::Sources {
        cri: &*cri,
        stats: &stats,
        node: "edge-1",
        root: containerd.root(),
        logs: &logs,
    };
    crate::stats::collect(&sources, SystemTime::now())
        .await
        .unwrap();
    let scraping = std::time::Instant::now();
    let summary = crate::stats::collect(&sources, SystemTime::now())
        .await
        .unwrap();
    eprintln!(
        "a summary of one pod on containerd took {:?}",
        scraping.elapsed()
    );
    let c = &summary.pods[0].containers[0];
    eprintln!(
        "summary of the busy container: {}",
        serde_json::to_string(c).unwrap()
    );
    assert!(c.cpu.as_ref().unwrap().usage_core_nano_seconds.unwrap() > 0);
    assert!(c.cpu.as_ref().unwrap().usage_nano_cores.is_some());
    assert!(c.memory.as_ref().unwrap().working_set_bytes.unwrap() > 0);
    assert!(c.logs.as_ref().unwrap().used_bytes.unwrap() > 0);

    containerd.stop().await;
    assert_eq!(footprint.leftovers(), Vec::<String>::new());
}
