//! The embedded control plane's bytes as kube-apiserver writes them, read with curl: Go field
//! order and a trailing newline, `/metrics` for whom RBAC lets read it, and
//! `as=PartialObjectMetadata` on writes.

use std::process::Command;
use std::time::Duration;

use e2e::controller::Desired;
use e2e::{Cloud, Pki, Ports, cloud};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Pod, PodTemplate};
use kube::api::{Api, PostParams, WatchParams};
use serde_json::json;
use testkit::eventually;

const WAIT: Duration = Duration::from_secs(30);

/// An HTTP answer: status code and body.
struct Answer {
    code: u16,
    body: String,
}

/// `curl` against the control plane; with the admin's token unless `anonymous`.
fn curl(cloud: &Cloud, anonymous: bool, args: &[&str], path: &str) -> Answer {
    let api = cloud
        .running
        .api()
        .expect("the embedded control plane runs");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("body");
    let url = format!("https://{}{path}", api.addr());
    let mut cmd = Command::new("curl");
    cmd.args(["-sS", "-k", "-o"])
        .arg(&out)
        .args(["-w", "%{http_code}"]);
    if !anonymous {
        cmd.args(["-H", &format!("Authorization: Bearer {}", api.token())]);
    }
    let done = cmd.args(args).arg(&url).output().expect("curl runs");
    let code = String::from_utf8_lossy(&done.stdout)
        .trim()
        .parse()
        .unwrap_or(0);
    let body = std::fs::read_to_string(&out).unwrap_or_default();
    Answer { code, body }
}

/// The value of the sample named (with its labels) `series` in Prometheus text; 0 if absent.
fn sample(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0.0)
}

fn pod(name: &str) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": {"b": "2", "a": "1"}},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
    }))
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_are_written_in_go_field_order_with_a_trailing_newline() {
    let pki = Pki::new();
    let cloud = cloud(&pki, Desired::new(), Ports::default()).await;
    let pods: Api<Pod> = Api::namespaced(cloud.kube().await, "default");
    pods.create(&PostParams::default(), &pod("p"))
        .await
        .unwrap();

    let one = curl(&cloud, false, &[], "/api/v1/namespaces/default/pods/p");
    assert_eq!(one.code, 200, "{}", one.body);
    assert!(
        one.body.starts_with(
            r#"{"kind":"Pod","apiVersion":"v1","metadata":{"name":"p","namespace":"default","uid":"#
        ),
        "{}",
        one.body
    );
    assert!(one.body.ends_with("}\n"), "{:?}", one.body);
    let (meta, spec, status) = (
        one.body.find(r#""metadata""#).unwrap(),
        one.body.find(r#""spec""#).unwrap(),
        one.body.find(r#""status""#).unwrap(),
    );
    assert!(meta < spec && spec < status, "{}", one.body);
    assert!(
        one.body.contains(r#""labels":{"a":"1","b":"2"}"#),
        "{}",
        one.body
    );
    assert!(
        one.body
            .contains(r#""containers":[{"name":"c","image":"busybox""#),
        "{}",
        one.body
    );

    let list = curl(&cloud, false, &[], "/api/v1/namespaces/default/pods");
    assert!(
        list.body
            .starts_with(r#"{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"#),
        "{}",
        list.body
    );
    assert!(
        list.body
            .contains(r#""items":[{"kind":"Pod","apiVersion":"v1","metadata":{"name":"p""#)
    );
    assert!(list.body.ends_with("]}\n"), "{:?}", list.body);

    let missing = curl(&cloud, false, &[], "/api/v1/namespaces/default/pods/nope");
    assert_eq!(missing.code, 404);
    assert!(
        missing.body.starts_with(
            r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"#
        ),
        "{}",
        missing.body
    );
    assert!(
        missing.body.ends_with("\"code\":404}\n"),
        "{:?}",
        missing.body
    );

    let watch = curl(
        &cloud,
        false,
        &["--max-time", "2"],
        "/api/v1/namespaces/default/pods?watch=true&timeoutSeconds=1",
    );
    let first = watch.body.lines().next().unwrap_or_default();
    assert!(
        first.starts_with(
            r#"{"type":"ADDED","object":{"kind":"Pod","apiVersion":"v1","metadata":{"name":"p""#
        ),
        "{}",
        watch.body
    );
    cloud.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_requests_watchers_and_objects_for_whom_rbac_allows() {
    let pki = Pki::new();
    let cloud = cloud(&pki, Desired::new(), Ports::default()).await;
    let pods: Api<Pod> = Api::namespaced(cloud.kube().await, "default");
    pods.create(&PostParams::default(), &pod("m"))
        .await
        .unwrap();
    pods.list(&Default::default()).await.unwrap();
    // The garbage collector watches every kind cluster-wide (and may be re-watching at any
    // time): this test's watch is the only namespaced one of PodTemplates.
    let watchers = r#"apiserver_registered_watchers{group="",version="v1",kind="PodTemplate"}"#;
    let ours = r#"apiserver_longrunning_requests{verb="WATCH",group="",version="v1",resource="podtemplates",subresource="",scope="namespace",component="apiserver"}"#;
    let templates: Api<PodTemplate> = Api::namespaced(cloud.kube().await, "default");
    let before = sample(&curl(&cloud, false, &[], "/metrics").body, ours);
    assert_eq!(before, 0.0);
    let watch = templates
        .watch(&WatchParams::default(), "0")
        .await
        .unwrap()
        .boxed();

    let anonymous = curl(&cloud, true, &[], "/metrics");
    assert_eq!(anonymous.code, 403, "{}", anonymous.body);

    let metrics = curl(&cloud, false, &[], "/metrics");
    assert_eq!(metrics.code, 200, "{}", metrics.body);
    let text = &metrics.body;
    for wanted in [
        r#"apiserver_request_total{verb="POST",group="",version="v1",resource="pods",subresource="",scope="namespace",component="apiserver",code="201"} 1"#,
        r#"apiserver_request_total{verb="LIST",group="",version="v1",resource="pods",subresource="",scope="namespace",component="apiserver",code="200"} 1"#,
        r#"apiserver_request_duration_seconds_bucket{le="0.005",verb="LIST",group="",version="v1",resource="pods""#,
        r#"apiserver_longrunning_requests{verb="WATCH",group="",version="v1",resource="podtemplates""#,
        r#"apiserver_storage_objects{resource="pods"} 1"#,
        r#"apiserver_current_inflight_requests{request_kind="readOnly"} "#,
    ] {
        assert!(text.contains(wanted), "no {wanted} in\n{text}");
    }
    assert_eq!(sample(text, ours), 1.0, "{text}");
    assert!(sample(text, watchers) >= 1.0, "{text}");
    drop(watch);
    eventually("the watch is no longer counted", WAIT, || async {
        let now = curl(&cloud, false, &[], "/metrics").body;
        sample(&now, ours) == 0.0
    })
    .await;
    cloud.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_answer_partial_object_metadata_when_asked() {
    let pki = Pki::new();
    let cloud = cloud(&pki, Desired::new(), Ports::default()).await;
    let accept = "Accept: application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1";
    let body = r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c"},"data":{"a":"1"}}"#;
    let path = "/api/v1/namespaces/default/configmaps";
    let json = "Content-Type: application/json";
    let created = curl(
        &cloud,
        false,
        &["-X", "POST", "-H", accept, "-H", json, "-d", body],
        path,
    );
    assert_eq!(created.code, 201, "{}", created.body);
    let v: serde_json::Value = serde_json::from_str(&created.body).unwrap();
    assert_eq!(v["kind"], "PartialObjectMetadata", "{v}");
    assert_eq!(v["metadata"]["name"], "c");
    assert!(v.get("data").is_none(), "{v}");

    let merge = "Content-Type: application/merge-patch+json";
    let patch = r#"{"data":{"a":"2"}}"#;
    let one = format!("{path}/c");
    let patched = curl(
        &cloud,
        false,
        &["-X", "PATCH", "-H", accept, "-H", merge, "-d", patch],
        &one,
    );
    assert_eq!(patched.code, 200, "{}", patched.body);
    let v: serde_json::Value = serde_json::from_str(&patched.body).unwrap();
    assert_eq!(v["kind"], "PartialObjectMetadata", "{v}");

    let gone = curl(&cloud, false, &["-X", "DELETE", "-H", accept], path);
    let v: serde_json::Value = serde_json::from_str(&gone.body).unwrap();
    assert_eq!(v["kind"], "PartialObjectMetadataList", "{v}");
    assert_eq!(v["items"][0]["metadata"]["name"], "c", "{v}");
    cloud.stop().await;
}
