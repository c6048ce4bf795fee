//! apibench: the embedded control plane's throughput and memory. A real cloudcore (the
//! `e2e-cloudcore` binary beside this one, every module on, the embedded control plane on
//! loopback HTTPS) runs as its own process; this process is its client through the `kube`
//! crate, as an operator or a controller would be. Measured, in order:
//! - creates: `--pods` pods with `--concurrency` requests in flight (per second, and each
//!   request's latency p50/p99);
//! - lists: every pod in one list, and the same in pages of 500;
//! - watch: a watch opened at the current revision, then `--watched` pods labelled; the time
//!   until the watch delivered every change (events per second);
//! - server-side apply: `--applied` config maps applied by one field manager, then applied
//!   again with a change (per second each);
//! - memory: cloudcore's resident memory idle, with the pods, and with `--others` more objects
//!   spread over other kinds (configmaps, secrets, services, and deployments when apps/v1 is
//!   served).
//!
//! With `--protobuf`, the pod creates, lists and the watch use Kubernetes' protobuf encoding
//! (request and response bodies, watch frames) as kubelet and client-go do by default; the
//! client decodes every response either way (into k8s-openapi's types from JSON, into
//! k8s-pb's messages from protobuf, as client-go decodes into its Go types).
//!
//! With `--without controllers` (or `edgecontroller`, `scheduler`) cloudcore runs without that module, so
//! the memory it holds is the difference.
//!
//! `cargo build --release -p e2e --bin apibench --bin e2e-cloudcore && target/release/apibench`

use std::time::{Duration, Instant};

use anyhow::Context as _;
use clap::Parser;
use e2e::bench::{percentile_ms, rss_kib};
use e2e::{Pki, Ports};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams, WatchEvent};
use kube::discovery::ApiResource;
use serde_json::{Value, json};

#[derive(Parser)]
struct Args {
    /// Pods created.
    #[arg(long, default_value_t = 10_000)]
    pods: usize,
    /// Other objects created after the pods, spread over several kinds.
    #[arg(long, default_value_t = 10_000)]
    others: usize,
    /// Requests in flight during creates.
    #[arg(long, default_value_t = 32)]
    concurrency: usize,
    /// Pods changed while a watch counts the events.
    #[arg(long, default_value_t = 2_000)]
    watched: usize,
    /// Config maps created and then changed by server-side apply.
    #[arg(long, default_value_t = 2_000)]
    applied: usize,
    /// Pod creates, lists and the watch in protobuf instead of JSON.
    #[arg(long)]
    protobuf: bool,
    /// Runs cloudcore without this module (`controllers`, `edgecontroller`) or without the
    /// controllers' scheduler (`scheduler`), to see what it holds; may be given more than once.
    #[arg(long, value_parser = ["controllers", "edgecontroller", "scheduler"])]
    without: Vec<String>,
}

const NAMESPACE: &str = "bench";

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let pki = Pki::new();
    let dir = tempfile::tempdir()?;
    let mut config = e2e::cloud_config(&pki, Ports::default());
    config.modules.cloud_hub.quic.enable = false;
    for module in &args.without {
        match module.as_str() {
            "controllers" => config.modules.controllers.enable = false,
            "scheduler" => config.modules.controllers.scheduler.enable = false,
            _ => config.modules.edge_controller.enable = false,
        }
    }
    let path = dir.path().join("cloudcore.yaml");
    std::fs::write(&path, daemon::to_yaml(&config))?;
    let bin = std::env::current_exe()?
        .parent()
        .context("the benchmark's directory")?
        .join("e2e-cloudcore");
    let child = std::process::Command::new(&bin)
        .args(["--config", path.to_str().context("a UTF-8 path")?])
        .stderr(std::process::Stdio::null())
        .spawn()
        .with_context(|| {
            format!(
                "starting {} (build it with --bin e2e-cloudcore)",
                bin.display()
            )
        })?;
    let pid = child.id();
    let _guard = testkit::ChildGuard(child);
    let client = e2e::bench::connect(&pki.path("admin.kubeconfig")).await?;
    let mib = |kib: u64| kib as f64 / 1024.0;
    println!("cloudcore rss idle: {:.1} MiB", mib(rss_kib(pid)?));

    let namespaces: Api<Namespace> = Api::all(client.clone());
    let ns = serde_json::from_value(json!({"metadata": {"name": NAMESPACE}}))?;
    namespaces.create(&PostParams::default(), &ns).await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    let encoding = if args.protobuf { "protobuf" } else { "JSON" };
    println!("pod creates, lists and watch in {encoding}");

    // Creates.
    let started = Instant::now();
    let mut latencies: Vec<Duration> = futures::stream::iter(0..args.pods)
        .map(|i| {
            let pods = pods.clone();
            let client = client.clone();
            async move {
                let t = Instant::now();
                if args.protobuf {
                    let mut body = pod(i);
                    body["apiVersion"] = json!("v1");
                    body["kind"] = json!("Pod");
                    let body = kpb::encode(body)?;
                    let created =
                        proto::send(&client, http::Method::POST, PODS, Some(body)).await?;
                    kpb::decode(&created)?;
                } else {
                    let pod: Pod = serde_json::from_value(pod(i))?;
                    pods.create(&PostParams::default(), &pod).await?;
                }
                anyhow::Ok(t.elapsed())
            }
        })
        .buffer_unordered(args.concurrency)
        .try_collect()
        .await?;
    let took = started.elapsed();
    latencies.sort();
    println!(
        "create {} pods ({} in flight): {:.0}/s, latency p50 {:.1} ms p99 {:.1} ms",
        args.pods,
        args.concurrency,
        args.pods as f64 / took.as_secs_f64(),
        percentile_ms(&latencies, 0.5),
        percentile_ms(&latencies, 0.99)
    );
    println!(
        "cloudcore rss with {} pods: {:.1} MiB",
        args.pods,
        mib(rss_kib(pid)?)
    );

    // Lists.
    let (whole, paged_took, from) = if args.protobuf {
        proto::lists(&client, args.pods).await?
    } else {
        let t = Instant::now();
        let all = pods.list(&ListParams::default()).await?;
        let whole = t.elapsed();
        anyhow::ensure!(all.items.len() == args.pods, "listed {}", all.items.len());
        let t = Instant::now();
        let mut params = ListParams::default().limit(500);
        let mut paged = 0;
        loop {
            let page = pods.list(&params).await?;
            paged += page.items.len();
            match page.metadata.continue_.filter(|c| !c.is_empty()) {
                Some(c) => params = params.continue_token(&c),
                None => break,
            }
        }
        anyhow::ensure!(paged == args.pods, "paged {paged}");
        let from = all.metadata.resource_version.unwrap_or_default();
        (whole, t.elapsed(), from)
    };
    println!(
        "list {} pods: {:.0} ms in one list, {:.0} ms in pages of 500",
        args.pods,
        whole.as_secs_f64() * 1e3,
        paged_took.as_secs_f64() * 1e3
    );

    // Watch.
    let watched = args.watched.min(args.pods);
    let counting = if args.protobuf {
        let frames = proto::watch(&client, &from).await?;
        tokio::spawn(proto::count_modified(frames, watched))
    } else {
        let stream = pods
            .watch(&kube::api::WatchParams::default(), &from)
            .await?;
        tokio::spawn(async move {
            let mut stream = std::pin::pin!(stream);
            let mut seen = 0;
            while let Some(event) = stream.next().await {
                if let Ok(WatchEvent::Modified(_)) = event {
                    seen += 1;
                    if seen == watched {
                        return Instant::now();
                    }
                }
            }
            Instant::now()
        })
    };
    let t = Instant::now();
    futures::stream::iter(0..watched)
        .map(|i| {
            let pods = pods.clone();
            async move {
                let patch = json!({"metadata": {"labels": {"touched": "yes"}}});
                pods.patch(
                    &format!("p-{i}"),
                    &PatchParams::default(),
                    &Patch::Merge(&patch),
                )
                .await
            }
        })
        .buffer_unordered(args.concurrency)
        .try_collect::<Vec<_>>()
        .await?;
    let done = tokio::time::timeout(Duration::from_secs(300), counting).await??;
    let took = done.duration_since(t);
    println!(
        "watch: {watched} changes delivered in {:.0} ms ({:.0} events/s, writes included)",
        took.as_secs_f64() * 1e3,
        watched as f64 / took.as_secs_f64()
    );

    apply_phase(&client, args.applied, args.concurrency).await?;

    // Other kinds.
    let mut kinds = vec![
        ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&()),
        ApiResource::erase::<k8s_openapi::api::core::v1::Secret>(&()),
        ApiResource::erase::<k8s_openapi::api::core::v1::Service>(&()),
    ];
    let apps = ApiResource::erase::<k8s_openapi::api::apps::v1::Deployment>(&());
    let deployments: Api<DynamicObject> = Api::namespaced_with(client.clone(), NAMESPACE, &apps);
    if deployments
        .list(&ListParams::default().limit(1))
        .await
        .is_ok()
    {
        kinds.push(apps);
    }
    let t = Instant::now();
    let per_kind = args.others / kinds.len();
    for kind in &kinds {
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), NAMESPACE, kind);
        futures::stream::iter(0..per_kind)
            .map(|i| {
                let api = api.clone();
                let body = other(&kind.kind, i);
                async move {
                    let obj: DynamicObject = serde_json::from_value(body)?;
                    api.create(&PostParams::default(), &obj).await?;
                    anyhow::Ok(())
                }
            })
            .buffer_unordered(args.concurrency)
            .try_collect::<Vec<_>>()
            .await?;
    }
    let names: Vec<&str> = kinds.iter().map(|k| k.kind.as_str()).collect();
    println!(
        "create {} others ({}): {:.0}/s",
        per_kind * kinds.len(),
        names.join(", "),
        (per_kind * kinds.len()) as f64 / t.elapsed().as_secs_f64()
    );
    println!(
        "cloudcore rss with {} pods and {} others: {:.1} MiB",
        args.pods,
        per_kind * kinds.len(),
        mib(rss_kib(pid)?)
    );
    Ok(())
}

/// Server-side apply: `n` config maps created by an apply, then each applied again with a
/// changed value (the field manager owns the field, so no conflict).
async fn apply_phase(client: &kube::Client, n: usize, concurrency: usize) -> anyhow::Result<()> {
    let maps: Api<k8s_openapi::api::core::v1::ConfigMap> =
        Api::namespaced(client.clone(), NAMESPACE);
    for round in ["create", "change"] {
        let t = Instant::now();
        futures::stream::iter(0..n)
            .map(|i| {
                let maps = maps.clone();
                async move {
                    let body = json!({"apiVersion": "v1", "kind": "ConfigMap",
                        "metadata": {"name": format!("applied-{i}"), "labels": {"bench": "ssa"}},
                        "data": {"round": round, "index": i.to_string()}});
                    let params = PatchParams::apply("apibench");
                    maps.patch(&format!("applied-{i}"), &params, &Patch::Apply(&body))
                        .await
                }
            })
            .buffer_unordered(concurrency)
            .try_collect::<Vec<_>>()
            .await?;
        println!(
            "server-side apply, {round} {n} config maps: {:.0}/s",
            n as f64 / t.elapsed().as_secs_f64()
        );
    }
    Ok(())
}

const PODS: &str = "/api/v1/namespaces/bench/pods";

/// The protobuf client side: raw requests through the `kube` client (its TLS and
/// credentials), bodies encoded and decoded with `kpb`.
mod proto {
    use std::time::{Duration, Instant};

    use anyhow::Context as _;
    use http_body_util::BodyExt as _;
    use k8s_pb::api::core::v1::{Pod, PodList};
    use k8s_pb::apimachinery::pkg::apis::meta::v1::WatchEvent;
    use prost::Message as _;

    use super::PODS;

    const ACCEPT: &str = "application/vnd.kubernetes.protobuf,application/json";

    pub async fn send(
        client: &kube::Client,
        method: http::Method,
        uri: &str,
        body: Option<Vec<u8>>,
    ) -> anyhow::Result<bytes::Bytes> {
        let resp = request(client, method, uri, body).await?;
        let status = resp.status();
        let body = resp.into_body().collect().await?.to_bytes();
        anyhow::ensure!(
            status.is_success(),
            "{uri}: {status}: {}",
            String::from_utf8_lossy(&body)
        );
        Ok(body)
    }

    async fn request(
        client: &kube::Client,
        method: http::Method,
        uri: &str,
        body: Option<Vec<u8>>,
    ) -> anyhow::Result<http::Response<kube::client::Body>> {
        let mut req = http::Request::builder()
            .method(method)
            .uri(uri)
            .header("accept", ACCEPT);
        if body.is_some() {
            req = req.header("content-type", kpb::MEDIA_TYPE);
        }
        let req = req.body(kube::client::Body::from(body.unwrap_or_default()))?;
        Ok(client.send(req).await?)
    }

    /// The message of a protobuf body, decoded into its k8s-pb type.
    pub fn message<M: prost::Message + Default>(body: &[u8]) -> anyhow::Result<M> {
        let (_, _, raw) = kpb::open(body)?;
        Ok(M::decode(raw.as_slice())?)
    }

    /// One whole list and the same in pages of 500, each decoded; the list's revision.
    pub async fn lists(
        client: &kube::Client,
        want: usize,
    ) -> anyhow::Result<(Duration, Duration, String)> {
        let t = Instant::now();
        let all: PodList = message(&send(client, http::Method::GET, PODS, None).await?)?;
        let whole = t.elapsed();
        anyhow::ensure!(all.items.len() == want, "listed {}", all.items.len());
        let t = Instant::now();
        let (mut paged, mut cont) = (0, String::new());
        loop {
            let uri = format!("{PODS}?limit=500&continue={cont}");
            let page: PodList = message(&send(client, http::Method::GET, &uri, None).await?)?;
            paged += page.items.len();
            let next = page.metadata.and_then(|m| m.r#continue);
            match next.filter(|c| !c.is_empty()) {
                Some(c) => cont = c,
                None => break,
            }
        }
        anyhow::ensure!(paged == want, "paged {paged}");
        let rv = all
            .metadata
            .and_then(|m| m.resource_version)
            .context("the list's resourceVersion")?;
        Ok((whole, t.elapsed(), rv))
    }

    pub async fn watch(client: &kube::Client, from: &str) -> anyhow::Result<kube::client::Body> {
        let uri = format!("{PODS}?watch=true&resourceVersion={from}");
        let resp = request(client, http::Method::GET, &uri, None).await?;
        anyhow::ensure!(resp.status().is_success(), "watch: {}", resp.status());
        Ok(resp.into_body())
    }

    /// Reads frames, decoding each event and its pod, until `want` MODIFIED events were seen.
    pub async fn count_modified(mut body: kube::client::Body, want: usize) -> Instant {
        let (mut buf, mut seen) = (Vec::new(), 0);
        while let Some(Ok(frame)) = body.frame().await {
            if let Ok(data) = frame.into_data() {
                buf.extend_from_slice(&data);
            }
            let mut at = 0;
            while buf.len() - at >= 4 {
                let len = u32::from_be_bytes(buf[at..at + 4].try_into().expect("four bytes"));
                let Some(frame) = buf.get(at + 4..at + 4 + len as usize) else {
                    break;
                };
                let Ok(event) = WatchEvent::decode(frame) else {
                    return Instant::now();
                };
                let raw = event.object.and_then(|o| o.raw).unwrap_or_default();
                if message::<Pod>(&raw).is_err() {
                    return Instant::now();
                }
                if event.r#type.as_deref() == Some("MODIFIED") {
                    seen += 1;
                }
                at += 4 + len as usize;
            }
            buf.drain(..at);
            if seen >= want {
                break;
            }
        }
        Instant::now()
    }
}

fn pod(i: usize) -> Value {
    json!({
        "metadata": {"name": format!("p-{i}"), "labels": {"app": format!("a{}", i % 50)}},
        "spec": {"containers": [{"name": "c", "image": "registry.local/app:1.0",
                 "ports": [{"containerPort": 8080}],
                 "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}]},
    })
}

fn other(kind: &str, i: usize) -> Value {
    let name = format!("o-{i}");
    match kind {
        "ConfigMap" => json!({"apiVersion": "v1", "kind": kind, "metadata": {"name": name},
                              "data": {"config.yaml": format!("key: value-{i}\nother: 42\n")}}),
        "Secret" => json!({"apiVersion": "v1", "kind": kind, "metadata": {"name": name},
                           "data": {"token": "c2VjcmV0LXZhbHVl"}}),
        "Service" => json!({"apiVersion": "v1", "kind": kind, "metadata": {"name": name},
                            "spec": {"selector": {"app": format!("a{}", i % 50)},
                                     "ports": [{"port": 80, "targetPort": 8080}]}}),
        _ => json!({"apiVersion": "apps/v1", "kind": kind, "metadata": {"name": name},
                    "spec": {"replicas": 0, "selector": {"matchLabels": {"app": name}},
                             "template": {"metadata": {"labels": {"app": name}},
                                          "spec": {"containers": [{"name": "c", "image": "registry.local/app:1.0"}]}}}}),
    }
}
