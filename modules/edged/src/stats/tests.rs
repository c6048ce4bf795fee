//! The summary and the resource metrics from a fake runtime with canned usage, under tokio's
//! paused time: the runtime stamps its samples with the clock edged reads, so the CPU rates
//! are exact.

use std::time::Duration;

use cri::Runtime;
use cri::fake::{FakeRuntime, Usage};
use k8s_openapi::api::core::v1::Pod;
use serde_json::{Value, json};

use super::*;
use crate::clock::Clock;
use crate::spec::{self, DnsSettings, PodId};

const IMAGE: &str = "registry.local/busybox:1.36";
const MI: u64 = 1024 * 1024;

struct Node {
    rt: FakeRuntime,
    clock: Clock,
    stats: Stats,
    dir: tempfile::TempDir,
}

impl Node {
    fn new() -> Node {
        let clock = Clock::following_tokio();
        let rt = FakeRuntime::new(clock.as_fn());
        rt.add_image(IMAGE);
        Node {
            rt,
            clock,
            stats: Stats::default(),
            dir: tempfile::tempdir().unwrap(),
        }
    }

    /// Runs pod `name` with containers `containers`, as edged's workers create them.
    async fn run(&self, name: &str, containers: &[&str]) {
        let specs: Vec<Value> = containers
            .iter()
            .map(|c| json!({"name": c, "image": IMAGE}))
            .collect();
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "default", "uid": format!("uid-{name}")},
            "spec": {"containers": specs},
        }))
        .unwrap();
        let id = PodId::of(&pod).unwrap();
        let logs = id.log_dir(&self.logs());
        let sandbox_config = spec::sandbox_config(&pod, &id, 0, &logs, &DnsSettings::default());
        let sandbox = self
            .rt
            .run_pod_sandbox(sandbox_config.clone(), "")
            .await
            .unwrap();
        for c in pod.spec.as_ref().unwrap().containers.iter() {
            let config = spec::container_config(&id, c, 0, vec![], vec![]);
            std::fs::create_dir_all(logs.join(&c.name)).unwrap();
            std::fs::write(logs.join(&c.name).join("0.log"), vec![b'x'; 1000]).unwrap();
            let cid = self
                .rt
                .create_container(&sandbox, config, sandbox_config.clone());
            self.rt.start_container(&cid.await.unwrap()).await.unwrap();
        }
    }

    fn logs(&self) -> std::path::PathBuf {
        self.dir.path().join("logs")
    }

    async fn summary(&self) -> Summary {
        let sources = Sources {
            cri: &self.rt,
            stats: &self.stats,
            node: "edge-1",
            root: self.dir.path(),
            logs: &self.logs(),
        };
        collect(&sources, self.clock.now()).await.unwrap()
    }
}

fn usage(cpu_millis: u64, working_set: u64) -> Usage {
    Usage {
        cpu_core_nanos: cpu_millis * 1_000_000,
        working_set_bytes: working_set,
        usage_bytes: working_set + MI,
        rss_bytes: working_set / 2,
        writable_layer_bytes: 4096,
    }
}

#[tokio::test(start_paused = true)]
async fn the_summary_carries_the_kubelets_field_names_and_each_containers_usage() {
    let node = Node::new();
    node.run("web", &["app", "sidecar"]).await;
    node.rt.set_usage("app", usage(1500, 10 * MI));
    node.rt.set_usage("sidecar", usage(500, 2 * MI));
    node.rt.set_network("web", 1000, 2000);

    let json = serde_json::to_value(node.summary().await).unwrap();

    let n = &json["node"];
    assert_eq!(n["nodeName"], "edge-1");
    assert!(
        n["cpu"]["usageCoreNanoSeconds"].as_u64().unwrap() > 0,
        "{n}"
    );
    assert!(
        n["cpu"].get("usageNanoCores").is_none(),
        "one sample has no rate"
    );
    assert!(n["memory"]["workingSetBytes"].as_u64().unwrap() > 0, "{n}");
    assert!(n["memory"]["availableBytes"].is_u64(), "{n}");
    assert!(n["fs"]["capacityBytes"].as_u64().unwrap() > 0, "{n}");
    assert!(n["startTime"].as_str().unwrap().ends_with('Z'), "{n}");
    let pod = &json["pods"][0];
    assert_eq!(
        pod["podRef"],
        json!({"name": "web", "namespace": "default", "uid": "uid-web"})
    );
    let app = &pod["containers"][0];
    assert_eq!(app["name"], "app");
    assert_eq!(app["cpu"]["usageCoreNanoSeconds"], 1_500_000_000u64);
    assert_eq!(app["memory"]["workingSetBytes"], 10 * MI);
    assert_eq!(app["memory"]["rssBytes"], 5 * MI);
    assert_eq!(app["rootfs"]["usedBytes"], 4096);
    assert_eq!(app["logs"]["usedBytes"], 1000);
    assert_eq!(app["logs"]["inodesUsed"], 1);
    assert_eq!(pod["containers"][1]["name"], "sidecar");
    assert_eq!(pod["cpu"]["usageCoreNanoSeconds"], 2_000_000_000u64);
    assert_eq!(pod["memory"]["workingSetBytes"], 12 * MI);
    assert_eq!(pod["network"]["name"], "eth0");
    assert_eq!(pod["network"]["rxBytes"], 1000);
    assert_eq!(pod["network"]["interfaces"][0]["txBytes"], 2000);
}

#[tokio::test(start_paused = true)]
async fn usage_nano_cores_is_the_cpu_time_used_between_two_scrapes() {
    let node = Node::new();
    node.run("web", &["app"]).await;
    node.rt.set_usage("app", usage(1000, MI));
    let first = node.summary().await;
    assert_eq!(
        first.pods[0].containers[0]
            .cpu
            .as_ref()
            .unwrap()
            .usage_nano_cores,
        None
    );

    tokio::time::advance(Duration::from_secs(4)).await;
    // 3 s of CPU in 4 s: 750 millicores.
    node.rt.set_usage("app", usage(4000, MI));
    let second = node.summary().await;
    let container = second.pods[0].containers[0].cpu.as_ref().unwrap();
    assert_eq!(container.usage_nano_cores, Some(750_000_000));
    let pod = second.pods[0].cpu.as_ref().unwrap();
    assert_eq!(pod.usage_nano_cores, Some(750_000_000));
    assert!(second.node.cpu.as_ref().unwrap().usage_nano_cores.is_some());
}

#[tokio::test(start_paused = true)]
async fn without_sandbox_stats_a_pod_is_the_sum_of_its_containers() {
    let node = Node::new();
    node.run("web", &["a", "b"]).await;
    node.rt.set_usage("a", usage(1000, 3 * MI));
    node.rt.set_usage("b", usage(2000, 4 * MI));
    node.rt
        .fail_sandbox_stats("failed to get cgroup metrics: cgroupPath is empty");
    node.summary().await;
    tokio::time::advance(Duration::from_secs(2)).await;
    node.rt.set_usage("a", usage(2000, 3 * MI));
    let pod = &node.summary().await.pods[0];
    let cpu = pod.cpu.as_ref().unwrap();
    assert_eq!(cpu.usage_core_nano_seconds, Some(4_000_000_000));
    assert_eq!(cpu.usage_nano_cores, Some(500_000_000));
    assert_eq!(pod.memory.as_ref().unwrap().working_set_bytes, Some(7 * MI));
    assert_eq!(pod.network, None);
}

#[tokio::test(start_paused = true)]
async fn resource_metrics_carry_each_samples_time_in_milliseconds() {
    let node = Node::new();
    node.run("web", &["app"]).await;
    node.rt.set_usage("app", usage(2500, 10 * MI));
    let summary = node.summary().await;
    let text = render_metrics(Some(&summary));
    let ms = node
        .clock
        .now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_millis();
    let labels = r#"{container="app",namespace="default",pod="web"}"#;
    for line in [
        format!("container_cpu_usage_seconds_total{labels} 2.5 {ms}"),
        format!("container_memory_working_set_bytes{labels} 10485760 {ms}"),
        format!(r#"pod_cpu_usage_seconds_total{{namespace="default",pod="web"}} 2.5 {ms}"#),
        format!(r#"pod_memory_working_set_bytes{{namespace="default",pod="web"}} 10485760 {ms}"#),
        "# TYPE container_cpu_usage_seconds_total counter".to_string(),
        "# TYPE node_memory_working_set_bytes gauge".to_string(),
        "resource_scrape_error 0".to_string(),
        "scrape_error 0".to_string(),
    ] {
        assert!(text.lines().any(|l| l == line), "{line:?} not in\n{text}");
    }
    let node_cpu = text
        .lines()
        .find(|l| l.starts_with("node_cpu_usage_seconds_total "));
    let fields: Vec<&str> = node_cpu.unwrap().split(' ').collect();
    assert!(fields[1].parse::<f64>().unwrap() > 0.0, "{fields:?}");
    assert_eq!(fields[2], ms.to_string());
    assert!(text.contains("container_start_time_seconds{"), "{text}");
}

#[test]
fn a_failed_scrape_is_only_the_scrape_error() {
    assert_eq!(
        render_metrics(None),
        "# HELP resource_scrape_error [STABLE] 1 if there was an error while getting container \
         metrics, 0 otherwise\n# TYPE resource_scrape_error gauge\nresource_scrape_error 1\n\
         # HELP scrape_error [ALPHA] (Deprecated since 1.29.0) 1 if there was an error while \
         getting container metrics, 0 otherwise\n# TYPE scrape_error gauge\nscrape_error 1\n"
    );
}

#[tokio::test(start_paused = true)]
async fn label_values_are_escaped() {
    let node = Node::new();
    node.run("web", &["app"]).await;
    let mut summary = node.summary().await;
    summary.pods[0].pod_ref.name = "we\"b\\\n".into();
    let text = render_metrics(Some(&summary));
    assert!(text.contains(r#"pod="we\"b\\\n""#), "{text}");
}
