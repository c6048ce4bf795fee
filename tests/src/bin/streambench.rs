//! streambench: the kubelet streams of an edge pod through the link (cloudcore's embedded API
//! dials the node over its session with cloudhub; edgecore serves edged's kubelet API on each
//! stream). A cloudcore (embedded control plane) runs in this process, edgecore with edged as a
//! child process (the `e2e-edgecore` binary beside this one), containerd privately (testkit's
//! harness); one busybox pod writes a big log and serves a big file. Reported, each next to
//! its ceiling: `kubectl exec -- true` (p50/p99) beside kubectl alone (`get --raw /healthz`);
//! a raw exec over WebSocket (`v4.channel.k8s.io`, no kubectl) beside CRI's `ExecSync` on the
//! same container (the runtime's floor); the pod's log read whole through the API (MB/s)
//! beside reading and decoding its CRI log file from disk; and a file read through
//! `kubectl port-forward` (MB/s) beside the same read from the pod's IP. Needs root,
//! containerd, runc, the CNI plugins, busybox-static and kubectl (as the edged tests do).
//!
//! Last (`updates`, [`updates`]): configmap updates to the node timed alone and beside a
//! `logs -f` of a pod writing fast. `--scenarios` picks some (default all).
//!
//! `cargo build --release -p e2e --bin streambench --bin e2e-edgecore && target/release/streambench`

use std::io::BufRead as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use clap::Parser;
use e2e::bench::{percentile_ms, wait_node_ready};
use e2e::{Pki, Ports};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, LogParams, PostParams};
use kube::client::ConfigExt as _;
use rustls::pki_types::ServerName;
use serde_json::{Value, json};
use testkit::containerd::{BUSYBOX_IMAGE, Containerd, WAIT_FOR_TERM};
use tokio::io::AsyncWriteExt as _;
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

#[path = "streambench/updates.rs"]
mod updates;

#[derive(Parser)]
struct Args {
    /// `kubectl exec` runs (and as many `kubectl get --raw /healthz`).
    #[arg(long, default_value_t = 50)]
    kubectl_execs: usize,
    /// Raw WebSocket exec runs (and as many CRI `ExecSync`).
    #[arg(long, default_value_t = 200)]
    raw_execs: usize,
    /// The pod's log, in MiB (lines of 1 KiB).
    #[arg(long, default_value_t = 150)]
    log_mib: u64,
    /// The file read through port-forward, in MiB.
    #[arg(long, default_value_t = 100)]
    forward_mib: u64,
    /// Rounds of each throughput figure (the median is printed).
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Which figures: exec, logs, forward, updates.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "exec,logs,forward,updates"
    )]
    scenarios: Vec<String>,
    /// Configmap updates per round of the `updates` scenario.
    #[arg(long, default_value_t = 10_000)]
    updates: usize,
    /// Configmaps they are spread over (one writer each).
    #[arg(long, default_value_t = 10)]
    update_configmaps: usize,
    /// The followed pod writes 1 MiB of log, then sleeps this long.
    #[arg(long, default_value_t = 50)]
    follow_pause_ms: u64,
}

const NODE: &str = "stream-edge";
const POD: &str = "stream";
const PORT: u16 = 8080;
const LIMIT: Duration = Duration::from_secs(120);
/// Throughput is in MB (10^6 bytes) per second.
const MB: f64 = 1e6;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    Containerd::available().map_err(anyhow::Error::msg)?;
    anyhow::ensure!(e2e::recent_kubectl(), "streambench needs kubectl");
    let containerd = Containerd::start().await?;
    let result = run(&args, &containerd).await;
    containerd.stop().await;
    result
}

async fn run(args: &Args, containerd: &Containerd) -> anyhow::Result<()> {
    let pki = Pki::new();
    let dir = tempfile::tempdir()?;
    let cloud = e2e::k8s_cloud(&pki, Ports::default()).await;
    let mut config = e2e::edged_site::edged_config(&pki, &cloud, NODE, dir.path(), containerd);
    let edged = &mut config.modules.edged;
    // The whole log in one file: the kubelet serves only the newest after a rotation.
    edged.container_log_max_size = 4 * (args.log_mib + 16) * 1024 * 1024;
    // lwproxy on a known port: the `updates` figures read what the node holds there.
    let lwproxy = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?;
    config.modules.lw_proxy.server = lwproxy;
    let bin = std::env::current_exe()?.with_file_name("e2e-edgecore");
    anyhow::ensure!(bin.exists(), "build e2e-edgecore too: {}", bin.display());
    let edgecore = e2e::spawn_edgecore(bin.to_str().context("path")?, &config, dir.path());
    let client = cloud.kube().await;
    wait_node_ready(&client, NODE, LIMIT).await?;
    let pods: Api<Pod> = Api::namespaced(client, "default");
    let log = start_pod(&pods, args, &dir.path().join("pod-logs")).await?;
    let kubeconfig = cloud
        .running
        .kubeconfig()
        .context("the embedded control plane writes a kubeconfig")?
        .to_path_buf();

    let wanted = |s: &str| args.scenarios.iter().any(|w| w == s);
    if wanted("exec") {
        exec_figures(args, &kubeconfig, containerd).await?;
    }
    if wanted("logs") {
        log_figures(args, &pods, &log).await?;
    }
    if wanted("forward") {
        forward_figures(args, &pods, &kubeconfig).await?;
    }
    if wanted("updates") {
        let edge = updates::edge_client(lwproxy)?;
        updates::update_figures(args, &cloud.kube().await, &edge).await?;
    }

    drop(edgecore);
    cloud.stop().await;
    Ok(())
}

/// Creates the pod (a big file under /tmp served by httpd on `PORT`, then the big log) and
/// waits until it runs and its log is complete; returns the log file's path.
async fn start_pod(pods: &Api<Pod>, args: &Args, logs: &Path) -> anyhow::Result<PathBuf> {
    let lines = args.log_mib * 1024;
    let script = format!(
        "s=0123456789abcdef; for i in 1 2 3 4 5 6; do s=$s$s; done; \
         yes \"$s\" | head -c {bytes} > /tmp/big; httpd -p {PORT} -h /tmp; \
         yes \"${{s%?}}\" | head -n {lines}; echo log-done; {WAIT_FOR_TERM}",
        bytes = args.forward_mib * 1024 * 1024,
    );
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": POD},
        "spec": {"nodeName": NODE, "terminationGracePeriodSeconds": 1, "containers": [{
            "name": "c", "image": BUSYBOX_IMAGE, "command": ["sh", "-c", script],
        }]},
    }))?;
    let created = pods.create(&PostParams::default(), &pod).await?;
    let uid = created.metadata.uid.context("the created pod has a uid")?;
    let path = logs.join(format!("default_{POD}_{uid}/c/0.log"));
    let deadline = Instant::now() + LIMIT;
    while !log_done(&path) {
        anyhow::ensure!(Instant::now() < deadline, "the pod's log was not written");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Ok(path)
}

/// Whether the CRI log at `path` ends with the pod's last line.
fn log_done(path: &Path) -> bool {
    use std::io::{Read, Seek, SeekFrom};
    let Ok(mut file) = std::fs::File::open(path) else {
        return false;
    };
    let mut tail = String::new();
    file.seek(SeekFrom::End(-64)).is_ok()
        && file.read_to_string(&mut tail).is_ok()
        && tail.trim_end().ends_with("log-done")
}

// === exec ===

/// kubectl exec beside kubectl alone; the raw exec beside CRI's `ExecSync`.
async fn exec_figures(
    args: &Args,
    kubeconfig: &Path,
    containerd: &Containerd,
) -> anyhow::Result<()> {
    let exec = timed(args.kubectl_execs, || {
        kubectl(kubeconfig, &["exec", POD, "--", "true"])
    })
    .await?;
    let alone = timed(args.kubectl_execs, || {
        kubectl(kubeconfig, &["get", "--raw", "/healthz"])
    })
    .await?;
    print_latency("kubectl exec -- true", &exec);
    print_latency("kubectl get --raw /healthz (kubectl alone)", &alone);

    let target = Arc::new(ExecTarget::from_kubeconfig(kubeconfig).await?);
    let raw = timed(args.raw_execs, || raw_exec(target.clone())).await?;
    print_latency("raw exec over WebSocket through the link", &raw);
    let cri = containerd.connect().await?;
    let id = cri
        .list_containers(None)
        .await?
        .into_iter()
        .find(|c| c.labels.get("io.kubernetes.pod.name").map(String::as_str) == Some(POD))
        .context("the pod's container in CRI")?
        .id;
    let floor = timed(args.raw_execs, || {
        let (cri, id) = (cri.clone(), id.clone());
        async move {
            let answer = cri.exec_sync(&id, vec!["true".into()], 10).await?;
            anyhow::ensure!(answer.exit_code == 0, "true exited {}", answer.exit_code);
            Ok(())
        }
    })
    .await?;
    print_latency("CRI ExecSync true (the runtime's floor)", &floor);
    Ok(())
}

/// Runs `op` `n` times one after another; the sorted times.
async fn timed<F, Fut>(n: usize, mut op: F) -> anyhow::Result<Vec<Duration>>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = anyhow::Result<()>>,
{
    let mut times = Vec::with_capacity(n);
    for _ in 0..n {
        let at = Instant::now();
        op().await?;
        times.push(at.elapsed());
    }
    times.sort();
    Ok(times)
}

fn print_latency(what: &str, sorted: &[Duration]) {
    println!(
        "{what}: {} runs: p50 {:.1} ms, p99 {:.1} ms",
        sorted.len(),
        percentile_ms(sorted, 0.5),
        percentile_ms(sorted, 0.99),
    );
}

/// kubectl with the admin kubeconfig, off the runtime's threads (cloudcore runs in this
/// process and must keep serving while kubectl waits on it); fails unless it succeeds.
async fn kubectl(kubeconfig: &Path, args: &[&str]) -> anyhow::Result<()> {
    let kubeconfig = kubeconfig.to_path_buf();
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    let out = tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        e2e::kubectl(&kubeconfig, &args)
    })
    .await?;
    anyhow::ensure!(
        out.status.success(),
        "kubectl: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}

/// Where and how a raw exec reaches the API: its address, TLS as the admin kubeconfig says.
struct ExecTarget {
    addr: SocketAddr,
    server: ServerName<'static>,
    tls: tokio_rustls::TlsConnector,
    token: Option<String>,
    url: String,
}

impl ExecTarget {
    async fn from_kubeconfig(path: &Path) -> anyhow::Result<ExecTarget> {
        let kubeconfig = kube::config::Kubeconfig::read_from(path)?;
        let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await?;
        let mut tls = config.rustls_client_config()?;
        // A WebSocket upgrade is HTTP/1.1.
        tls.alpn_protocols = vec![b"http/1.1".to_vec()];
        let authority = config
            .cluster_url
            .authority()
            .context("the API's address")?;
        let addr = tokio::net::lookup_host(authority.as_str())
            .await?
            .next()
            .context("the API's address resolves")?;
        // The token, if the kubeconfig holds one, read as plain YAML.
        let raw: Value = serde_yaml_ng::from_str(&std::fs::read_to_string(path)?)?;
        let token = raw["users"][0]["user"]["token"].as_str().map(str::to_owned);
        Ok(ExecTarget {
            addr,
            server: ServerName::try_from(authority.host().to_owned())?,
            tls: tokio_rustls::TlsConnector::from(Arc::new(tls)),
            token,
            url: format!(
                "wss://{authority}/api/v1/namespaces/default/pods/{POD}/exec?command=true&stdout=1"
            ),
        })
    }
}

/// One exec of `true` over a new connection, as kubectl makes one: TLS, the WebSocket
/// upgrade, then the streams until the server closes them; fails unless the status says
/// Success.
async fn raw_exec(target: Arc<ExecTarget>) -> anyhow::Result<()> {
    let tcp = TcpStream::connect(target.addr).await?;
    tcp.set_nodelay(true)?;
    let tls = target.tls.connect(target.server.clone(), tcp).await?;
    let mut request = target.url.as_str().into_client_request()?;
    let headers = request.headers_mut();
    headers.insert("Sec-WebSocket-Protocol", "v4.channel.k8s.io".parse()?);
    if let Some(token) = &target.token {
        headers.insert("Authorization", format!("Bearer {token}").parse()?);
    }
    let (mut ws, _) = tokio_tungstenite::client_async(request, tls)
        .await
        .context("the exec upgrade")?;
    let mut status = Vec::new();
    while let Some(message) = ws.next().await {
        match message {
            Ok(Message::Binary(data)) => {
                if let Some((3, json)) = data.split_first() {
                    status.extend_from_slice(json);
                }
            }
            Ok(Message::Close(_)) => break,
            Ok(_) => {}
            // A close without the closing handshake, after the status.
            Err(_) if !status.is_empty() => break,
            Err(e) => return Err(e).context("the exec stream"),
        }
    }
    let status: Value = serde_json::from_slice(&status).context("the exec's status")?;
    anyhow::ensure!(status["status"] == "Success", "exec status: {status}");
    Ok(())
}

// === logs ===

/// The pod's whole log through the API beside its CRI log file read and decoded from disk.
async fn log_figures(args: &Args, pods: &Api<Pod>, file: &Path) -> anyhow::Result<()> {
    let (mut link, mut disk) = (Vec::new(), Vec::new());
    for _ in 0..args.rounds {
        let at = Instant::now();
        let stream = pods.log_stream(POD, &LogParams::default()).await?;
        let bytes = futures::io::copy(stream, &mut futures::io::sink()).await?;
        link.push(mb_per_s(bytes, at.elapsed()));
        let path = file.to_path_buf();
        let at = Instant::now();
        let decoded = tokio::task::spawn_blocking(move || decoded_len(&path)).await??;
        disk.push(mb_per_s(decoded, at.elapsed()));
        anyhow::ensure!(
            bytes == decoded,
            "the API's log has {bytes} bytes, the file {decoded}"
        );
    }
    println!(
        "log of {} MiB through the link: {:.0} MB/s (median of {}); the CRI file from disk, decoded: {:.0} MB/s",
        args.log_mib,
        median(&mut link),
        args.rounds,
        median(&mut disk),
    );
    Ok(())
}

/// The length of the container output in the CRI log file at `path`
/// (`<time> <stream> <F|P> <text>` per entry; `F` ends a line, `P` continues it).
fn decoded_len(path: &Path) -> anyhow::Result<u64> {
    let mut reader = std::io::BufReader::with_capacity(
        64 * 1024,
        std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?,
    );
    let (mut entry, mut total) = (Vec::new(), 0u64);
    loop {
        entry.clear();
        if reader.read_until(b'\n', &mut entry)? == 0 {
            return Ok(total);
        }
        let entry = entry.strip_suffix(b"\n").unwrap_or(&entry);
        let mut fields = entry.splitn(4, |&b| b == b' ');
        let (Some(_time), Some(_stream), Some(tag), Some(text)) =
            (fields.next(), fields.next(), fields.next(), fields.next())
        else {
            anyhow::bail!("a malformed entry in {}", path.display());
        };
        total += text.len() as u64 + u64::from(tag == b"F");
    }
}

// === port-forward ===

/// The big file through `kubectl port-forward` beside the same read from the pod's IP.
async fn forward_figures(args: &Args, pods: &Api<Pod>, kubeconfig: &Path) -> anyhow::Result<()> {
    let ip = pods
        .get(POD)
        .await?
        .status
        .and_then(|s| s.pod_ip)
        .context("the pod's IP")?;
    let direct: SocketAddr = (ip.parse::<std::net::IpAddr>()?, PORT).into();
    let (forward, local) = port_forward(kubeconfig).await?;
    let want = args.forward_mib * 1024 * 1024;
    let (mut through, mut straight) = (Vec::new(), Vec::new());
    for _ in 0..args.rounds {
        through.push(read_file(local, want).await?);
        straight.push(read_file(direct, want).await?);
    }
    drop(forward);
    println!(
        "{} MiB through kubectl port-forward: {:.0} MB/s (median of {}); straight from the pod's IP: {:.0} MB/s",
        args.forward_mib,
        median(&mut through),
        args.rounds,
        median(&mut straight),
    );
    Ok(())
}

/// Starts `kubectl port-forward pod/POD :PORT`; the guard that ends it and the local address.
async fn port_forward(kubeconfig: &Path) -> anyhow::Result<(testkit::ChildGuard, SocketAddr)> {
    let mut child = std::process::Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(["port-forward", &format!("pod/{POD}"), &format!(":{PORT}")])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .context("kubectl runs")?;
    let stdout = child.stdout.take().context("piped stdout")?;
    let guard = testkit::ChildGuard(child);
    // kubectl keeps writing a line per connection: the reader stays until kubectl ends.
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::spawn(move || {
        let mut tx = Some(tx);
        for line in std::io::BufReader::new(stdout).lines() {
            let Ok(line) = line else { return };
            let port = line
                .strip_prefix("Forwarding from 127.0.0.1:")
                .and_then(|rest| rest.split(' ').next()?.parse::<u16>().ok());
            if let (Some(port), Some(tx)) = (port, tx.take()) {
                let _ = tx.send(port);
            }
        }
    });
    let port = tokio::time::timeout(LIMIT, rx)
        .await
        .context("kubectl port-forward did not start")?
        .context("kubectl port-forward ended")?;
    Ok((guard, ([127, 0, 0, 1], port).into()))
}

/// `GET /big` from httpd at `addr`, read to the end; MB/s, if at least `want` bytes came.
async fn read_file(addr: SocketAddr, want: u64) -> anyhow::Result<f64> {
    let at = Instant::now();
    let mut tcp = TcpStream::connect(addr).await?;
    tcp.write_all(b"GET /big HTTP/1.0\r\n\r\n").await?;
    let bytes = tokio::io::copy(&mut tcp, &mut tokio::io::sink()).await?;
    let took = at.elapsed();
    anyhow::ensure!(bytes >= want, "{bytes} bytes from {addr}, {want} wanted");
    Ok(mb_per_s(bytes, took))
}

fn mb_per_s(bytes: u64, took: Duration) -> f64 {
    bytes as f64 / MB / took.as_secs_f64()
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(0.0)
}
