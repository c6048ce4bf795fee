//! kubectl reaches the pods of an edge node through the embedded API and the node's own link
//! (tunnel streams over its session with cloudhub; no other port, certificate or setting):
//! `logs` (tail, timestamps, follow, previous), `exec` (output, exit code, stdin), `port-forward`
//! and `cp` both ways; and a node that is not connected is refused at once, by name.
//! Needs root, containerd, runc, the CNI plugins, busybox-static and kubectl, as CI installs them.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use e2e::edged_site::{busybox, pod, site, status};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, PostParams};
use serde_json::json;
use sha2::{Digest, Sha256};
use testkit::eventually;

const WAIT: Duration = Duration::from_secs(60);

/// kubectl with the cloud's admin kubeconfig, off the runtime's threads (cloudcore and
/// edgecore run in this process and must keep serving while kubectl waits on them).
async fn kubectl(kubeconfig: &Path, args: &[&str]) -> Output {
    kubectl_with_stdin(kubeconfig, args, None).await
}

async fn kubectl_with_stdin(kubeconfig: &Path, args: &[&str], stdin: Option<&[u8]>) -> Output {
    let mut command = Command::new("kubectl");
    command
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let input = stdin.map(<[u8]>::to_vec);
    tokio::task::spawn_blocking(move || {
        let mut child = command.spawn().expect("kubectl runs");
        if let Some(input) = input {
            let mut pipe = child.stdin.take().expect("piped stdin");
            pipe.write_all(&input).expect("kubectl reads stdin");
        }
        child.wait_with_output().expect("kubectl finishes")
    })
    .await
    .unwrap()
}

fn text(out: &[u8]) -> String {
    String::from_utf8_lossy(out).into_owned()
}

fn ok(out: Output, what: &str) -> String {
    assert!(
        out.status.success(),
        "{what}: {}\n{}",
        text(&out.stderr),
        text(&out.stdout)
    );
    text(&out.stdout)
}

/// A long-running kubectl whose stdout lines are read in a thread of their own; killed on drop.
struct Running {
    child: Child,
    lines: std::sync::mpsc::Receiver<String>,
}

impl Running {
    fn spawn(kubeconfig: &Path, args: &[&str]) -> Running {
        let mut child = Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("kubectl runs");
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { return };
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        Running { child, lines }
    }

    /// The next line that `wanted` accepts, within `WAIT`.
    async fn line_where(&self, wanted: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + WAIT;
        loop {
            match self.lines.try_recv() {
                Ok(line) if wanted(&line) => return line,
                Ok(_) => continue,
                Err(std::sync::mpsc::TryRecvError::Empty) => {
                    assert!(Instant::now() < deadline, "no wanted line from kubectl");
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                Err(std::sync::mpsc::TryRecvError::Disconnected) => {
                    panic!("kubectl ended before the wanted line")
                }
            }
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn sha256(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Starts pod `web` on `node` (a ticking log and an HTTP server on 8080) and waits until it runs.
async fn web_pod(pods: &Api<Pod>, node: &str) {
    let script = "echo ok > /tmp/index.html; httpd -p 8080 -h /tmp; \
                  i=0; while true; do echo tick-$i; i=$((i+1)); sleep 0.2; done";
    let p = pod("web", node, json!({"containers": [busybox("web", script)]}));
    pods.create(&PostParams::default(), &p).await.unwrap();
    eventually("the pod is Running in the cloud", WAIT, || async {
        let st = status(pods, "web").await;
        st["phase"] == "Running" && st["containerStatuses"][0]["ready"] == true
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_logs_exec_port_forward_and_cp_reach_an_edge_pod_through_its_link() {
    if !e2e::recent_kubectl() {
        return;
    }
    let (_pki, s) = site("edge-streams").await;
    let kc: PathBuf = s.cloud.running.kubeconfig().unwrap().to_path_buf();
    let pods: Api<Pod> = Api::namespaced(s.cloud.kube().await, "default");
    web_pod(&pods, "edge-streams").await;

    // logs: --tail, --timestamps, then -f seeing lines written after it started.
    eventually("a few ticks are logged", WAIT, || async {
        let out = kubectl(&kc, &["logs", "web", "--tail=2"]).await;
        let lines = text(&out.stdout);
        out.status.success()
            && lines.lines().count() == 2
            && lines.lines().all(|l| l.starts_with("tick-"))
    })
    .await;
    let stamped = ok(
        kubectl(&kc, &["logs", "web", "--tail=1", "--timestamps"]).await,
        "logs --timestamps",
    );
    let (stamp, line) = stamped.trim_end().split_once(' ').expect("a stamped line");
    assert!(line.starts_with("tick-"), "{stamped}");
    let time: Result<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time, _> =
        serde_json::from_value(json!(stamp));
    assert!(time.is_ok(), "{stamp} is an RFC 3339 time");
    let since = ok(
        kubectl(&kc, &["logs", "web", "--since=1s"]).await,
        "logs --since",
    );
    assert!(
        (1..=10).contains(&since.lines().count()),
        "about 5 lines in the last second: {since}"
    );
    let follow = Running::spawn(&kc, &["logs", "-f", "web", "--tail=1"]);
    let first = follow.line_where(|l| l.starts_with("tick-")).await;
    let later = follow
        .line_where(|l| l.starts_with("tick-") && l != first)
        .await;
    let n = |l: &str| l["tick-".len()..].parse::<u64>().unwrap();
    assert!(n(&later) > n(&first), "{first} then {later}");
    drop(follow);

    // exec: output and the command's exit code; stdin.
    let out = kubectl(&kc, &["exec", "web", "--", "sh", "-c", "echo hi; exit 3"]).await;
    assert_eq!(text(&out.stdout), "hi\n", "{}", text(&out.stderr));
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    let echoed = ok(
        kubectl_with_stdin(
            &kc,
            &["exec", "-i", "web", "--", "cat"],
            Some(b"piped in\n"),
        )
        .await,
        "exec -i",
    );
    assert_eq!(echoed, "piped in\n");

    // port-forward: two requests through one forward.
    let forward = Running::spawn(&kc, &["port-forward", "pod/web", ":8080"]);
    let line = forward
        .line_where(|l| l.starts_with("Forwarding from 127.0.0.1:"))
        .await;
    let port: u16 = line["Forwarding from 127.0.0.1:".len()..]
        .split(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    for _ in 0..2 {
        let (code, body) = testkit::http_get(([127, 0, 0, 1], port).into(), "/index.html")
            .await
            .expect("the forwarded port answers");
        assert_eq!(
            (code, body.trim_end().ends_with("ok")),
            (200, true),
            "{body}"
        );
    }
    drop(forward);

    // cp of 10 MiB both ways, checksums equal.
    let dir = tempfile::tempdir().unwrap();
    let big: Vec<u8> = (0..10 * 1024 * 1024u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    let local = dir.path().join("big");
    std::fs::write(&local, &big).unwrap();
    ok(
        kubectl(
            &kc,
            &["cp", local.to_str().unwrap(), "default/web:/tmp/big"],
        )
        .await,
        "cp to the pod",
    );
    let remote_sum = ok(
        kubectl(&kc, &["exec", "web", "--", "sha256sum", "/tmp/big"]).await,
        "sha256sum in the pod",
    );
    assert_eq!(remote_sum.split(' ').next(), Some(sha256(&big).as_str()));
    let back = dir.path().join("back");
    ok(
        kubectl(&kc, &["cp", "default/web:/tmp/big", back.to_str().unwrap()]).await,
        "cp from the pod",
    );
    assert_eq!(sha256(&std::fs::read(&back).unwrap()), sha256(&big));

    // top: the node's and the pod's usage, scraped from the node's resource metrics.
    eventually("kubectl top node shows the node", WAIT, || async {
        let out = kubectl(&kc, &["top", "node", "edge-streams", "--no-headers"]).await;
        let line = text(&out.stdout);
        out.status.success() && line.starts_with("edge-streams") && line.contains('%')
    })
    .await;
    eventually("kubectl top pod shows the pod", WAIT, || async {
        let out = kubectl(&kc, &["top", "pod", "web", "--no-headers"]).await;
        let line = text(&out.stdout);
        out.status.success() && line.starts_with("web") && line.contains("Mi")
    })
    .await;

    // debug: an ephemeral container in the pod, attached to, its output read back.
    let debug = kubectl(
        &kc,
        &[
            "debug",
            "web",
            "--image",
            testkit::containerd::BUSYBOX_IMAGE,
            "--container",
            "dbg",
            "--target",
            "web",
            "--",
            "sh",
            "-c",
            "echo from-debug; sleep 3600",
        ],
    )
    .await;
    ok(debug, "kubectl debug");
    eventually("the ephemeral container runs and logs", WAIT, || async {
        let out = kubectl(&kc, &["logs", "web", "-c", "dbg"]).await;
        text(&out.stdout).contains("from-debug")
    })
    .await;

    s.edge.stop().await;
    s.cloud.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_previous_shows_the_instance_before_a_restart() {
    if !e2e::recent_kubectl() {
        return;
    }
    let (_pki, s) = site("edge-previous").await;
    let kc: PathBuf = s.cloud.running.kubeconfig().unwrap().to_path_buf();
    let pods: Api<Pod> = Api::namespaced(s.cloud.kube().await, "default");
    let script = "echo run-$(cat /proc/sys/kernel/random/uuid); sleep 1; exit 1";
    let p = pod(
        "flaky",
        "edge-previous",
        json!({"containers": [busybox("flaky", script)]}),
    );
    pods.create(&PostParams::default(), &p).await.unwrap();
    eventually("the container restarted once", WAIT, || async {
        status(&pods, "flaky").await["containerStatuses"][0]["restartCount"]
            .as_u64()
            .is_some_and(|n| n >= 1)
    })
    .await;
    let previous = ok(
        kubectl(&kc, &["logs", "flaky", "--previous"]).await,
        "logs --previous",
    );
    assert!(previous.starts_with("run-"), "{previous}");
    eventually("the current instance logged its run", WAIT, || async {
        let now = text(&kubectl(&kc, &["logs", "flaky"]).await.stdout);
        now.starts_with("run-") && now != previous
    })
    .await;
    s.edge.stop().await;
    s.cloud.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_is_not_connected_is_refused_at_once_by_name() {
    if !e2e::recent_kubectl() {
        return;
    }
    let (_pki, s) = site("edge-gone").await;
    let kc: PathBuf = s.cloud.running.kubeconfig().unwrap().to_path_buf();
    let pods: Api<Pod> = Api::namespaced(s.cloud.kube().await, "default");
    web_pod(&pods, "edge-gone").await;
    s.edge.stop().await;
    eventually("cloudhub sees the node gone", WAIT, || async {
        s.cloud
            .hub()
            .node("edge-gone")
            .is_some_and(|n| !n.connected)
    })
    .await;
    for args in [&["logs", "web"][..], &["exec", "web", "--", "true"][..]] {
        let started = Instant::now();
        let out = kubectl(&kc, args).await;
        let took = started.elapsed();
        let err = text(&out.stderr);
        assert!(!out.status.success(), "{args:?}: {err}");
        assert!(
            err.contains("edge-gone") && err.contains("not connected"),
            "{args:?}: {err}"
        );
        assert!(took < Duration::from_secs(2), "{args:?} took {took:?}");
    }
    s.cloud.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_hpa_scales_a_cpu_burner_on_an_edge_node_from_one_to_three_replicas() {
    if !e2e::recent_kubectl() {
        return;
    }
    let (_pki, s) = site("edge-hpa").await;
    let kc: PathBuf = s.cloud.running.kubeconfig().unwrap().to_path_buf();
    // A light burner (a short busy loop, then a nap): far above its 10m request on any machine,
    // without taking the test machine's cores.
    let burn = "while true; do i=0; while [ $i -lt 3000 ]; do i=$((i+1)); done; sleep 0.1; done";
    let mut container = busybox("burn", burn);
    container["resources"] = json!({"requests": {"cpu": "10m"}});
    let manifest = json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "burner", "namespace": "default"},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "burner"}},
            "template": {
                "metadata": {"labels": {"app": "burner"}},
                "spec": {"nodeName": "edge-hpa", "containers": [container],
                         "terminationGracePeriodSeconds": 1},
            },
        },
    });
    let hpa = json!({
        "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "burner", "namespace": "default"},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "burner"},
            "minReplicas": 1, "maxReplicas": 3,
            "metrics": [{"type": "Resource", "resource": {"name": "cpu",
                "target": {"type": "Utilization", "averageUtilization": 50}}}],
        },
    });
    for object in [manifest, hpa] {
        let out = kubectl_with_stdin(
            &kc,
            &["apply", "-f", "-"],
            Some(object.to_string().as_bytes()),
        )
        .await;
        ok(out, "kubectl apply");
    }
    eventually(
        "the HPA scales the burner to 3 replicas",
        WAIT * 2,
        || async {
            let out = kubectl(
                &kc,
                &[
                    "get",
                    "deployment",
                    "burner",
                    "-o",
                    "jsonpath={.spec.replicas}",
                ],
            )
            .await;
            text(&out.stdout) == "3"
        },
    )
    .await;
    let status = ok(
        kubectl(
            &kc,
            &[
                "get",
                "hpa",
                "burner",
                "-o",
                "jsonpath={.status.currentMetrics[0].resource.current.averageUtilization}",
            ],
        )
        .await,
        "the HPA's status",
    );
    let utilization: u64 = status.trim().parse().unwrap_or(0);
    assert!(utilization > 50, "measured utilization {status}");
    s.edge.stop().await;
    s.cloud.stop().await;
}
