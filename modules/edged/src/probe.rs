//! Container probes (the kubelet's prober): one task per running container and probe kind,
//! keyed by container id, so a restarted container starts with fresh results. A task waits
//! `initialDelaySeconds` from the container's start, then probes every `periodSeconds` with
//! `timeoutSeconds`, and flips its result after `successThreshold` successes or
//! `failureThreshold` failures in a row; a flip wakes the pod's worker, which kills a container
//! whose liveness or startup probe failed (the restart policy decides what follows) and reports
//! readiness in the pod's status. Liveness and readiness wait for the startup probe to succeed.
//! Handlers: exec (CRI `ExecSync`), httpGet (HTTP or HTTPS without verification, 200 to 399
//! succeeds, as the kubelet), tcpSocket (a connection succeeds), grpc (the standard
//! `grpc.health.v1.Health/Check` answers `SERVING`).

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use http_body_util::{BodyExt, Empty};
use k8s_openapi::api::core::v1::{Container as Spec, HTTPGetAction, Pod, Probe};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio::sync::Notify;
use tokio_util::sync::{CancellationToken, DropGuard};

use crate::events::{Events, Involved};
use crate::plan::{self, Observed, State};

/// Which probe.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// Holds the other two back until it succeeds; its failure kills the container.
    Startup,
    /// Its failure kills the container.
    Liveness,
    /// Its result is the container's `ready`.
    Readiness,
}

/// A probe's current verdict.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Passed `successThreshold` times in a row.
    Success,
    /// Failed `failureThreshold` times in a row.
    Failure,
}

type Key = (String, Kind);
type Results = Arc<Mutex<HashMap<Key, Outcome>>>;

/// The probes of one pod.
pub struct Prober {
    results: Results,
    /// One task per running container and probe kind; dropping the guard stops the task.
    tasks: HashMap<Key, DropGuard>,
    wake: Arc<Notify>,
    events: Events,
}

/// Where a probe reaches the container.
#[derive(Clone)]
pub struct Target {
    /// The runtime.
    pub cri: Arc<dyn cri::Runtime>,
    /// The address httpGet and tcpSocket probes connect to when they name no host: the pod's
    /// IP (the node's for a host-network pod).
    pub host: String,
}

// === impl Kind ===

impl Kind {
    fn word(self) -> &'static str {
        match self {
            Kind::Startup => "Startup",
            Kind::Liveness => "Liveness",
            Kind::Readiness => "Readiness",
        }
    }

    /// The result a probe has before it ran (the kubelet's initial values).
    fn initial(self) -> Option<Outcome> {
        match self {
            Kind::Liveness => Some(Outcome::Success),
            Kind::Readiness => Some(Outcome::Failure),
            Kind::Startup => None,
        }
    }
}

// === impl Prober ===

impl Prober {
    /// A prober that wakes the pod's worker with `wake` when a result changes.
    pub fn new(wake: Arc<Notify>, events: Events) -> Prober {
        Prober {
            results: Arc::default(),
            tasks: HashMap::new(),
            wake,
            events,
        }
    }

    /// Starts the probes of the pod's running containers that have none yet, and stops those
    /// of containers that no longer run.
    pub fn sync(&mut self, pod: &Pod, observed: &Observed, target: &Target) {
        let sandbox = plan::current_sandbox(observed).map(|s| s.id.as_str());
        let mut live = BTreeSet::new();
        let containers = pod.spec.as_ref().map(|s| &s.containers[..]).unwrap_or(&[]);
        for spec in containers {
            let Some(sandbox) = sandbox else { break };
            let Some(c) = plan::latest(observed, &spec.name, Some(sandbox)) else {
                continue;
            };
            let State::Running { started } = c.state else {
                continue;
            };
            for (kind, probe) in probes(spec) {
                let key = (c.id.clone(), kind);
                live.insert(key.clone());
                if self.tasks.contains_key(&key) {
                    continue;
                }
                let cancel = CancellationToken::new();
                let task = Task {
                    key: key.clone(),
                    probe: probe.clone(),
                    container: spec.clone(),
                    gated: spec.startup_probe.is_some() && kind != Kind::Startup,
                    started,
                    target: target.clone(),
                    results: self.results.clone(),
                    wake: self.wake.clone(),
                    events: self.events.clone(),
                    involved: Involved::container(pod, &spec.name),
                };
                tokio::spawn(task.run(cancel.clone()));
                self.tasks.insert(key, cancel.drop_guard());
            }
        }
        self.tasks.retain(|k, _| live.contains(k));
        self.results.lock().unwrap().retain(|k, _| live.contains(k));
    }

    /// Stops every probe.
    pub fn clear(&mut self) {
        self.tasks.clear();
        self.results.lock().unwrap().clear();
    }

    /// The containers whose liveness or startup probe failed: they are to be killed.
    pub fn unhealthy(&self) -> BTreeSet<String> {
        let results = self.results.lock().unwrap();
        results
            .iter()
            .filter(|((_, kind), o)| *kind != Kind::Readiness && **o == Outcome::Failure)
            .map(|((id, _), _)| id.clone())
            .collect()
    }

    /// The running containers a probe of kind `kind` does not pass yet (not started, not
    /// ready).
    pub fn pending(&self, kind: Kind) -> BTreeSet<String> {
        let results = self.results.lock().unwrap();
        self.tasks
            .keys()
            .filter(|k| k.1 == kind)
            .filter(|k| results.get(*k).copied().or(kind.initial()) != Some(Outcome::Success))
            .map(|k| k.0.clone())
            .collect()
    }

    /// The grace period a container killed by its probe gets, when the probe sets one.
    pub fn kill_grace(pod: &Pod, name: &str) -> Option<i64> {
        let spec = crate::spec::container(pod, name)?;
        [&spec.startup_probe, &spec.liveness_probe]
            .into_iter()
            .flatten()
            .find_map(|p| p.termination_grace_period_seconds)
    }
}

/// The probes a container declares.
fn probes(c: &Spec) -> impl Iterator<Item = (Kind, &Probe)> {
    [
        (Kind::Startup, c.startup_probe.as_ref()),
        (Kind::Liveness, c.liveness_probe.as_ref()),
        (Kind::Readiness, c.readiness_probe.as_ref()),
    ]
    .into_iter()
    .filter_map(|(k, p)| p.map(|p| (k, p)))
}

/// One probe of one container.
struct Task {
    key: Key,
    probe: Probe,
    container: Spec,
    /// Waits for the container's startup probe.
    gated: bool,
    started: SystemTime,
    target: Target,
    results: Results,
    wake: Arc<Notify>,
    events: Events,
    involved: Involved,
}

/// What one run of a probe found.
#[derive(Debug, PartialEq, Eq)]
enum Verdict {
    Pass,
    /// Failed, with what the kubelet reports (the command's output, the HTTP status).
    Fail(String),
    /// Could not run (an unsupported handler): the result stays as it is.
    Skip(String),
}

// === impl Task ===

impl Task {
    async fn run(self, cancel: CancellationToken) {
        let p = &self.probe;
        let initial = Duration::from_secs(p.initial_delay_seconds.unwrap_or(0).max(0) as u64);
        let period = Duration::from_secs(p.period_seconds.unwrap_or(10).max(1) as u64);
        let timeout = Duration::from_secs(p.timeout_seconds.unwrap_or(1).max(1) as u64);
        let success_needed = p.success_threshold.unwrap_or(1).max(1) as u32;
        let failure_needed = p.failure_threshold.unwrap_or(3).max(1) as u32;
        let kind = self.key.1;
        let ran = SystemTime::now()
            .duration_since(self.started)
            .unwrap_or_default();
        let mut ticker = tokio::time::interval_at(
            tokio::time::Instant::now() + initial.saturating_sub(ran),
            period,
        );
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let (mut passes, mut failures) = (0u32, 0u32);
        let mut skipped = false;
        loop {
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = ticker.tick() => {}
            }
            if self.gated && self.outcome(Kind::Startup) != Some(Outcome::Success) {
                continue;
            }
            let verdict = tokio::select! {
                _ = cancel.cancelled() => return,
                v = self.once(timeout) => v,
            };
            match verdict {
                Verdict::Pass => (passes, failures) = (passes + 1, 0),
                Verdict::Fail(why) => {
                    (passes, failures) = (0, failures + 1);
                    let message = format!("{} probe failed: {why}", kind.word());
                    tracing::debug!(container = %self.container.name, %message);
                    self.events.warning(&self.involved, "Unhealthy", &message);
                }
                Verdict::Skip(why) => {
                    if !skipped {
                        tracing::warn!(container = %self.container.name, probe = kind.word(), %why, "probe not run");
                        skipped = true;
                    }
                    continue;
                }
            }
            let outcome = if passes >= success_needed {
                Outcome::Success
            } else if failures >= failure_needed {
                Outcome::Failure
            } else {
                continue;
            };
            let before = self
                .results
                .lock()
                .unwrap()
                .insert(self.key.clone(), outcome);
            if before.or(kind.initial()) != Some(outcome) {
                self.wake.notify_one();
            }
            match (kind, outcome) {
                (Kind::Startup, Outcome::Success) => return,
                (Kind::Startup | Kind::Liveness, Outcome::Failure) => {
                    let message = format!(
                        "Container {} failed {} probe, will be restarted",
                        self.container.name,
                        kind.word().to_lowercase()
                    );
                    self.events.normal(&self.involved, "Killing", &message);
                    return;
                }
                _ => {}
            }
        }
    }

    fn outcome(&self, kind: Kind) -> Option<Outcome> {
        let key = (self.key.0.clone(), kind);
        self.results.lock().unwrap().get(&key).copied()
    }

    /// Runs the probe once, bounded by its timeout.
    async fn once(&self, timeout: Duration) -> Verdict {
        let p = &self.probe;
        if let Some(exec) = &p.exec {
            let cmd = exec.command.clone().unwrap_or_default();
            let secs = timeout.as_secs() as i64;
            let run = self.target.cri.exec_sync(&self.key.0, cmd, secs);
            return match tokio::time::timeout(timeout + Duration::from_secs(1), run).await {
                Ok(Ok(r)) if r.exit_code == 0 => Verdict::Pass,
                Ok(Ok(r)) => {
                    let out = String::from_utf8_lossy(if r.stdout.is_empty() {
                        &r.stderr
                    } else {
                        &r.stdout
                    });
                    Verdict::Fail(format!(
                        "command exited with {}: {}",
                        r.exit_code,
                        out.trim()
                    ))
                }
                Ok(Err(e)) => Verdict::Fail(e.to_string()),
                Err(_) => Verdict::Fail(format!("command timed out after {}s", secs)),
            };
        }
        if let Some(get) = &p.http_get {
            let Some(port) = port(&get.port, &self.container) else {
                return Verdict::Fail(format!("unknown port {:?}", get.port));
            };
            let host = get.host.clone().unwrap_or_else(|| self.target.host.clone());
            return match tokio::time::timeout(timeout, http_get(get, &host, port)).await {
                Ok(Ok(code)) if (200..400).contains(&code) => Verdict::Pass,
                Ok(Ok(code)) => Verdict::Fail(format!("HTTP probe failed with statuscode: {code}")),
                Ok(Err(why)) => Verdict::Fail(why),
                Err(_) => Verdict::Fail(format!(
                    "Get \"{}\": context deadline exceeded",
                    url(get, &host, port)
                )),
            };
        }
        if let Some(tcp) = &p.tcp_socket {
            let Some(port) = port(&tcp.port, &self.container) else {
                return Verdict::Fail(format!("unknown port {:?}", tcp.port));
            };
            let host = tcp.host.clone().unwrap_or_else(|| self.target.host.clone());
            let addr = join_host_port(&host, port);
            return match tokio::time::timeout(timeout, TcpStream::connect(&addr)).await {
                Ok(Ok(_)) => Verdict::Pass,
                Ok(Err(e)) => Verdict::Fail(format!("dial tcp {addr}: {e}")),
                Err(_) => Verdict::Fail(format!("dial tcp {addr}: i/o timeout")),
            };
        }
        if let Some(g) = &p.grpc {
            let Ok(port) = u16::try_from(g.port) else {
                return Verdict::Fail(format!("invalid port {}", g.port));
            };
            let service = g.service.clone().unwrap_or_default();
            let addr = join_host_port(&self.target.host, port);
            return match tokio::time::timeout(timeout, grpc_check(&addr, service)).await {
                Ok(Ok(())) => Verdict::Pass,
                Ok(Err(why)) => Verdict::Fail(why),
                Err(_) => Verdict::Fail(format!(
                    "timeout: health rpc did not complete within {}s",
                    timeout.as_secs()
                )),
            };
        }
        Verdict::Skip("the probe names no handler".into())
    }
}

/// A probe's port: a number, or the name of one of the container's ports.
pub(crate) fn port(port: &IntOrString, c: &Spec) -> Option<u16> {
    match port {
        IntOrString::Int(n) => u16::try_from(*n).ok().filter(|n| *n > 0),
        IntOrString::String(name) => match name.parse::<u16>() {
            Ok(n) => Some(n),
            Err(_) => c
                .ports
                .iter()
                .flatten()
                .find(|p| p.name.as_deref() == Some(name.as_str()))
                .and_then(|p| u16::try_from(p.container_port).ok()),
        },
    }
}

fn join_host_port(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

fn url(get: &HTTPGetAction, host: &str, port: u16) -> String {
    let scheme = get.scheme.as_deref().unwrap_or("HTTP").to_lowercase();
    let path = get.path.as_deref().unwrap_or("/");
    let slash = if path.starts_with('/') { "" } else { "/" };
    format!("{scheme}://{}{slash}{path}", join_host_port(host, port))
}

/// The user agent of the kubelet's probes, for the version edged reports.
fn user_agent() -> String {
    let v = crate::KUBELET_VERSION.trim_start_matches('v');
    let minor: Vec<&str> = v.split('.').take(2).collect();
    format!("kube-probe/{}", minor.join("."))
}

/// One GET as the kubelet's httpGet probe sends it; the status code answered.
pub(crate) async fn http_get(get: &HTTPGetAction, host: &str, port: u16) -> Result<u16, String> {
    let url = url(get, host, port);
    let fail = |e: &dyn std::fmt::Display| format!("Get \"{url}\": {e}");
    let addr = join_host_port(host, port);
    let tcp = TcpStream::connect(&addr).await.map_err(|e| fail(&e))?;
    let https = get.scheme.as_deref() == Some("HTTPS");
    let path = get.path.as_deref().unwrap_or("/");
    let mut request = http::Request::get(if path.starts_with('/') {
        path.to_string()
    } else {
        format!("/{path}")
    })
    .header(http::header::HOST, &addr)
    .header(http::header::USER_AGENT, user_agent())
    .header(http::header::ACCEPT, "*/*");
    for h in get.http_headers.iter().flatten() {
        request = request.header(h.name.as_str(), h.value.as_str());
    }
    let request = request
        .body(Empty::<bytes::Bytes>::new())
        .map_err(|e| fail(&e))?;
    if https {
        let tls = tokio_rustls::TlsConnector::from(insecure_tls());
        let name =
            rustls::pki_types::ServerName::try_from(host.to_string()).map_err(|e| fail(&e))?;
        let stream = tls.connect(name, tcp).await.map_err(|e| fail(&e))?;
        send(stream, request).await.map_err(|e| fail(&e))
    } else {
        send(tcp, request).await.map_err(|e| fail(&e))
    }
}

async fn send<S>(
    stream: S,
    request: http::Request<Empty<bytes::Bytes>>,
) -> Result<u16, hyper::Error>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let io = hyper_util::rt::TokioIo::new(stream);
    let (mut sender, conn) = hyper::client::conn::http1::handshake(io).await?;
    let conn = tokio::spawn(conn);
    let response = sender.send_request(request).await?;
    let code = response.status().as_u16();
    // The body is read (up to the connection's end) and dropped, as the kubelet reads it.
    let _ = response.into_body().collect().await;
    conn.abort();
    Ok(code)
}

/// `grpc.health.v1.HealthCheckRequest`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct HealthCheckRequest {
    #[prost(string, tag = "1")]
    pub service: String,
}

/// `grpc.health.v1.HealthCheckResponse`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct HealthCheckResponse {
    /// `UNKNOWN` 0, `SERVING` 1, `NOT_SERVING` 2, `SERVICE_UNKNOWN` 3.
    #[prost(int32, tag = "1")]
    pub status: i32,
}

/// The health service's method the kubelet's gRPC probe calls.
const HEALTH_CHECK: &str = "/grpc.health.v1.Health/Check";

/// Calls `grpc.health.v1.Health/Check` for `service` on `addr` (plain HTTP/2, as the kubelet);
/// `Ok` when the answer is `SERVING`.
async fn grpc_check(addr: &str, service: String) -> Result<(), String> {
    let endpoint = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .map_err(|e| format!("bad address {addr}: {e}"))?;
    let channel = endpoint
        .connect()
        .await
        .map_err(|e| format!("failed to connect service {addr:?}: {e}"))?;
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready()
        .await
        .map_err(|e| format!("failed to connect service {addr:?}: {e}"))?;
    let codec = tonic_prost::ProstCodec::<HealthCheckRequest, HealthCheckResponse>::default();
    let path = http::uri::PathAndQuery::from_static(HEALTH_CHECK);
    let answer = grpc
        .unary(
            tonic::Request::new(HealthCheckRequest { service }),
            path,
            codec,
        )
        .await
        .map_err(|s| {
            format!(
                "health rpc failed with status {:?}: {}",
                s.code(),
                s.message()
            )
        })?;
    match answer.into_inner().status {
        1 => Ok(()),
        other => {
            let said = match other {
                2 => "NOT_SERVING",
                3 => "SERVICE_UNKNOWN",
                _ => "UNKNOWN",
            };
            Err(format!("service unhealthy (responded with {said:?})"))
        }
    }
}

/// TLS that accepts any server certificate: the kubelet does not verify HTTPS probes.
fn insecure_tls() -> Arc<rustls::ClientConfig> {
    static CONFIG: std::sync::OnceLock<Arc<rustls::ClientConfig>> = std::sync::OnceLock::new();
    CONFIG
        .get_or_init(|| {
            let provider = Arc::new(rustls::crypto::ring::default_provider());
            let config = rustls::ClientConfig::builder_with_provider(provider.clone())
                .with_safe_default_protocol_versions()
                .expect("ring supports the default protocol versions")
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(AnyCertificate(provider)))
                .with_no_client_auth();
            Arc::new(config)
        })
        .clone()
}

#[derive(Debug)]
struct AnyCertificate(Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &rustls::pki_types::CertificateDer<'_>,
        _intermediates: &[rustls::pki_types::CertificateDer<'_>],
        _server_name: &rustls::pki_types::ServerName<'_>,
        _ocsp_response: &[u8],
        _now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn container(ports: serde_json::Value) -> Spec {
        serde_json::from_value(serde_json::json!({"name": "c", "ports": ports})).unwrap()
    }

    #[test]
    fn a_named_port_is_looked_up_in_the_container() {
        let c = container(serde_json::json!([{"name": "http", "containerPort": 8080}]));
        assert_eq!(port(&IntOrString::String("http".into()), &c), Some(8080));
        assert_eq!(port(&IntOrString::String("9090".into()), &c), Some(9090));
        assert_eq!(port(&IntOrString::Int(81), &c), Some(81));
        assert_eq!(port(&IntOrString::String("admin".into()), &c), None);
        assert_eq!(port(&IntOrString::Int(0), &c), None);
        assert_eq!(port(&IntOrString::Int(70000), &c), None);
    }

    #[test]
    fn urls_and_user_agent_look_like_the_kubelet_s() {
        let get: HTTPGetAction =
            serde_json::from_value(serde_json::json!({"path": "healthz", "port": 80})).unwrap();
        assert_eq!(url(&get, "10.0.0.5", 80), "http://10.0.0.5:80/healthz");
        let get: HTTPGetAction =
            serde_json::from_value(serde_json::json!({"scheme": "HTTPS", "port": 443})).unwrap();
        assert_eq!(url(&get, "fd00::5", 443), "https://[fd00::5]:443/");
        assert_eq!(user_agent(), "kube-probe/1.33");
    }

    /// A server answering each connection with `code`, once per connection.
    async fn server(code: u16) -> std::net::SocketAddr {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = listener.accept().await {
                let mut buf = [0u8; 1024];
                let n = s.read(&mut buf).await.unwrap_or(0);
                let head = String::from_utf8_lossy(&buf[..n]).to_string();
                assert!(head.starts_with("GET /ready HTTP/1.1"), "{head}");
                assert!(head.contains("x-probe: yes"), "{head}");
                let answer = format!("HTTP/1.1 {code} X\r\ncontent-length: 2\r\n\r\nok");
                let _ = s.write_all(answer.as_bytes()).await;
            }
        });
        addr
    }

    #[tokio::test]
    async fn http_probes_pass_below_400_and_fail_from_400() {
        for (code, pass) in [(200, true), (302, true), (404, false), (500, false)] {
            let addr = server(code).await;
            let get: HTTPGetAction = serde_json::from_value(serde_json::json!({
                "path": "/ready", "port": addr.port(),
                "httpHeaders": [{"name": "X-Probe", "value": "yes"}],
            }))
            .unwrap();
            let answered = http_get(&get, "127.0.0.1", addr.port()).await.unwrap();
            assert_eq!(answered, code);
            assert_eq!((200..400).contains(&answered), pass);
        }
        let get: HTTPGetAction = serde_json::from_value(serde_json::json!({"port": 1})).unwrap();
        let refused = http_get(&get, "127.0.0.1", 1).await.unwrap_err();
        assert!(
            refused.starts_with("Get \"http://127.0.0.1:1/\""),
            "{refused}"
        );
    }

    /// A `grpc.health.v1.Health` server answering `status` to every check.
    #[derive(Clone)]
    struct Health(i32);

    impl tonic::server::NamedService for Health {
        const NAME: &'static str = "grpc.health.v1.Health";
    }

    struct Check(i32);

    impl tonic::server::UnaryService<HealthCheckRequest> for Check {
        type Response = HealthCheckResponse;
        type Future = std::future::Ready<Result<tonic::Response<Self::Response>, tonic::Status>>;

        fn call(&mut self, request: tonic::Request<HealthCheckRequest>) -> Self::Future {
            let status = if request.get_ref().service == "absent" {
                3
            } else {
                self.0
            };
            std::future::ready(Ok(tonic::Response::new(HealthCheckResponse { status })))
        }
    }

    impl tower::Service<http::Request<tonic::body::Body>> for Health {
        type Response = http::Response<tonic::body::Body>;
        type Error = std::convert::Infallible;
        type Future = std::pin::Pin<
            Box<dyn std::future::Future<Output = Result<Self::Response, Self::Error>> + Send>,
        >;

        fn poll_ready(
            &mut self,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<Result<(), Self::Error>> {
            std::task::Poll::Ready(Ok(()))
        }

        fn call(&mut self, request: http::Request<tonic::body::Body>) -> Self::Future {
            let status = self.0;
            Box::pin(async move {
                let codec =
                    tonic_prost::ProstCodec::<HealthCheckResponse, HealthCheckRequest>::default();
                let mut grpc = tonic::server::Grpc::new(codec);
                Ok(grpc.unary(Check(status), request).await)
            })
        }
    }

    async fn health_server(status: i32) -> std::net::SocketAddr {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener);
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(Health(status))
                .serve_with_incoming(incoming),
        );
        addr
    }

    #[tokio::test]
    async fn grpc_probes_pass_only_when_the_service_is_serving() {
        let serving = health_server(1).await.to_string();
        assert_eq!(grpc_check(&serving, String::new()).await, Ok(()));
        let absent = grpc_check(&serving, "absent".into()).await.unwrap_err();
        assert_eq!(
            absent,
            "service unhealthy (responded with \"SERVICE_UNKNOWN\")"
        );
        let down = health_server(2).await.to_string();
        let said = grpc_check(&down, String::new()).await.unwrap_err();
        assert_eq!(said, "service unhealthy (responded with \"NOT_SERVING\")");
        let refused = grpc_check("127.0.0.1:1", String::new()).await.unwrap_err();
        assert!(
            refused.starts_with("failed to connect service"),
            "{refused}"
        );
    }
}
