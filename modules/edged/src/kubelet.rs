//! The kubelet API edged serves (the part kube-apiserver calls for `kubectl logs`, `exec`,
//! `attach` and `port-forward`), as an [`axum::Router`] over edged's [`Shared`]. Nothing
//! listens for it: edgecore serves it on streams the cloud opens over the node's link. The
//! URL shapes are the kubelet's:
//!
//! - `GET /containerLogs/{namespace}/{pod}/{container}`: the container's CRI log, decoded
//!   ([`logs`]), with `follow`, `tailLines`, `sinceSeconds`, `sinceTime`, `timestamps`,
//!   `previous` and `limitBytes`;
//! - `GET|POST /exec/{namespace}/{pod}[/{uid}]/{container}`, `/attach/...` and
//!   `/portForward/{namespace}/{pod}[/{uid}]`: CRI Exec/Attach/PortForward, then the client's
//!   upgrade request is proxied to the runtime's streaming server ([`proxy`]);
//! - `GET /pods` (a PodList of the pods edged runs) and `GET /healthz`.
//!
//! Every path segment and query value is checked first ([`params`]); errors are plain text
//! naming the pod and container, with the kubelet's status codes.

mod logs;
mod params;
mod proxy;

use std::sync::Arc;

use axum::Router;
use axum::extract::{Path, Query, Request, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use cri::{CriError, api};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;

use crate::Shared;
use crate::spec::{self, CONTAINER_NAME, MANAGED, POD_UID, PodId};
use params::{BadRequest, LogOptions, StreamOptions, Target};

/// A query as its `(key, value)` pairs, repeated keys kept in order.
type Pairs = Query<Vec<(String, String)>>;
type SharedState = State<Arc<Shared>>;

/// Why a kubelet API request failed; each answers with the kubelet's status code.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ApiError {
    /// A parameter is not acceptable.
    #[error(transparent)]
    BadRequest(#[from] BadRequest),
    /// The pod or container is not valid for the request now.
    #[error("{0}")]
    Conflict(String),
    /// The pod, the uid or the container is not on this node.
    #[error("{0}")]
    NotFound(String),
    /// A CRI call failed.
    #[error(transparent)]
    Runtime(#[from] CriError),
    /// The runtime's streaming server could not be proxied to.
    #[error(transparent)]
    Proxy(#[from] proxy::ProxyError),
    /// The log directory could not be read.
    #[error("reading the container's logs failed: {0}")]
    Logs(#[source] std::io::Error),
}

/// The router of the kubelet API over `shared`.
pub(crate) fn router(shared: Arc<Shared>) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/pods", get(pods))
        .route("/stats/summary", get(stats_summary))
        .route("/metrics/resource", get(metrics_resource))
        .route(
            "/containerLogs/{namespace}/{pod}/{container}",
            get(container_logs),
        )
        .route("/exec/{namespace}/{pod}/{container}", get(exec).post(exec))
        .route(
            "/exec/{namespace}/{pod}/{uid}/{container}",
            get(exec_uid).post(exec_uid),
        )
        .route(
            "/attach/{namespace}/{pod}/{container}",
            get(attach).post(attach),
        )
        .route(
            "/attach/{namespace}/{pod}/{uid}/{container}",
            get(attach_uid).post(attach_uid),
        )
        .route(
            "/portForward/{namespace}/{pod}",
            get(port_forward).post(port_forward),
        )
        .route(
            "/portForward/{namespace}/{pod}/{uid}",
            get(port_forward_uid).post(port_forward_uid),
        )
        .with_state(shared)
}

// === impl ApiError ===

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = match &self {
            ApiError::BadRequest(_) | ApiError::Conflict(_) => StatusCode::BAD_REQUEST,
            ApiError::NotFound(_) => StatusCode::NOT_FOUND,
            ApiError::Runtime(e) => match e.code() {
                Some(tonic::Code::NotFound) => StatusCode::NOT_FOUND,
                Some(tonic::Code::InvalidArgument | tonic::Code::FailedPrecondition) => {
                    StatusCode::BAD_REQUEST
                }
                _ => StatusCode::INTERNAL_SERVER_ERROR,
            },
            ApiError::Proxy(_) => StatusCode::BAD_GATEWAY,
            ApiError::Logs(_) => StatusCode::INTERNAL_SERVER_ERROR,
        };
        let text = beehive::ErrorChain(&self).to_string();
        let content_type = [(header::CONTENT_TYPE, "text/plain; charset=utf-8")];
        (status, content_type, text).into_response()
    }
}

// === handlers ===

/// `GET /stats/summary`: the node's and its pods' usage, as metrics-server and
/// `kubectl get --raw /api/v1/nodes/<n>/proxy/stats/summary` read it.
async fn stats_summary(State(shared): SharedState) -> Response {
    match crate::stats::summary(&shared).await {
        Ok(summary) => axum::Json(summary).into_response(),
        Err(e) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("collecting the node's statistics failed: {e}\n"),
        )
            .into_response(),
    }
}

/// `GET /metrics/resource`: the resource metrics in Prometheus text.
async fn metrics_resource(State(shared): SharedState) -> Response {
    let text = crate::stats::resource_metrics(&shared).await;
    (
        [(header::CONTENT_TYPE, crate::stats::METRICS_CONTENT_TYPE)],
        text,
    )
        .into_response()
}

async fn pods(State(shared): SharedState) -> Response {
    let mut pods = running_pods(&shared);
    pods.sort_by(|a, b| {
        let key = |p: &Pod| (p.metadata.namespace.clone(), p.metadata.name.clone());
        key(a).cmp(&key(b))
    });
    let list = serde_json::json!({
        "kind": "PodList",
        "apiVersion": "v1",
        "metadata": {},
        "items": pods.iter().map(|p| &**p).collect::<Vec<&Pod>>(),
    });
    axum::Json(list).into_response()
}

async fn container_logs(
    State(shared): SharedState,
    Path((namespace, pod, container)): Path<(String, String, String)>,
    Query(query): Pairs,
) -> Result<Response, ApiError> {
    let target = Target::container(&namespace, &pod, None, &container)?;
    let now = Timestamp::try_from(shared.clock.now()).unwrap_or(Timestamp::UNIX_EPOCH);
    let options = LogOptions::parse(&query, now)?;
    let (pod, name) = find_container(&shared, &target)?;
    let id = PodId::of(&pod).ok_or_else(|| not_found(&target))?;
    let current = instances(&shared, &id.uid, &name).await?.pop();
    let Some(current) = current else {
        return Err(ApiError::Conflict(format!(
            "container {name:?} in pod {:?} is waiting to start",
            target.key()
        )));
    };
    let dir = id.log_dir(&shared.config.pod_logs_directory).join(&name);
    let attempt = current.metadata.as_ref().map_or(0, |m| m.attempt);
    let (attempt, alive) = if options.previous {
        let previous = previous_attempt(&dir, attempt)?.ok_or_else(|| {
            ApiError::Conflict(format!(
                "previous terminated container {name:?} in pod {:?} not found",
                target.key()
            ))
        })?;
        (previous, None)
    } else {
        let running = current.state == api::ContainerState::ContainerRunning as i32;
        let alive = (options.follow && running).then(|| logs::Alive {
            cri: shared.cri.clone(),
            id: current.id.clone(),
        });
        (attempt, alive)
    };
    let body = logs::body(dir.join(format!("{attempt}.log")), options, alive);
    let content_type = [(header::CONTENT_TYPE, "text/plain; charset=utf-8")];
    Ok((content_type, body).into_response())
}

async fn exec(
    shared: SharedState,
    Path((namespace, pod, container)): Path<(String, String, String)>,
    query: Pairs,
    request: Request,
) -> Result<Response, ApiError> {
    let target = Target::container(&namespace, &pod, None, &container)?;
    stream(shared, target, query, request, true).await
}

async fn exec_uid(
    shared: SharedState,
    Path((namespace, pod, uid, container)): Path<(String, String, String, String)>,
    query: Pairs,
    request: Request,
) -> Result<Response, ApiError> {
    let target = Target::container(&namespace, &pod, Some(&uid), &container)?;
    stream(shared, target, query, request, true).await
}

async fn attach(
    shared: SharedState,
    Path((namespace, pod, container)): Path<(String, String, String)>,
    query: Pairs,
    request: Request,
) -> Result<Response, ApiError> {
    let target = Target::container(&namespace, &pod, None, &container)?;
    stream(shared, target, query, request, false).await
}

async fn attach_uid(
    shared: SharedState,
    Path((namespace, pod, uid, container)): Path<(String, String, String, String)>,
    query: Pairs,
    request: Request,
) -> Result<Response, ApiError> {
    let target = Target::container(&namespace, &pod, Some(&uid), &container)?;
    stream(shared, target, query, request, false).await
}

async fn port_forward(
    shared: SharedState,
    Path((namespace, pod)): Path<(String, String)>,
    query: Pairs,
    request: Request,
) -> Result<Response, ApiError> {
    let target = Target::pod(&namespace, &pod, None)?;
    forward(shared, target, query, request).await
}

async fn port_forward_uid(
    shared: SharedState,
    Path((namespace, pod, uid)): Path<(String, String, String)>,
    query: Pairs,
    request: Request,
) -> Result<Response, ApiError> {
    let target = Target::pod(&namespace, &pod, Some(&uid))?;
    forward(shared, target, query, request).await
}

/// Exec (`exec` true) or attach: CRI names the streaming URL, the request is proxied there.
async fn stream(
    State(shared): SharedState,
    target: Target,
    Query(query): Pairs,
    request: Request,
    exec: bool,
) -> Result<Response, ApiError> {
    let options = StreamOptions::parse(&query, exec)?;
    let (pod, name) = find_container(&shared, &target)?;
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let running = instances(&shared, &uid, &name)
        .await?
        .pop()
        .filter(|c| c.state == api::ContainerState::ContainerRunning as i32);
    let Some(container) = running else {
        return Err(ApiError::Conflict(format!(
            "container {name:?} in pod {:?} is not running",
            target.key()
        )));
    };
    let url = if exec {
        let request = api::ExecRequest {
            container_id: container.id,
            cmd: options.command,
            tty: options.tty,
            stdin: options.stdin,
            stdout: options.stdout,
            stderr: options.stderr,
        };
        shared.cri.exec(request).await?
    } else {
        let request = api::AttachRequest {
            container_id: container.id,
            stdin: options.stdin,
            tty: options.tty,
            stdout: options.stdout,
            stderr: options.stderr,
        };
        shared.cri.attach(request).await?
    };
    Ok(proxy::proxy(request, &url).await?)
}

/// Port forward: CRI names the streaming URL for the pod's sandbox, the request goes there.
async fn forward(
    State(shared): SharedState,
    target: Target,
    Query(query): Pairs,
    request: Request,
) -> Result<Response, ApiError> {
    let ports = params::ports(&query)?;
    let pod = find_pod(&shared, &target)?;
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let filter = api::PodSandboxFilter {
        label_selector: [(MANAGED, "true"), (POD_UID, uid.as_str())]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect(),
        state: Some(api::PodSandboxStateValue {
            state: api::PodSandboxState::SandboxReady as i32,
        }),
        ..Default::default()
    };
    let mut sandboxes = shared.cri.list_pod_sandboxes(Some(filter)).await?;
    sandboxes.sort_by_key(|s| (s.metadata.as_ref().map_or(0, |m| m.attempt), s.created_at));
    let Some(sandbox) = sandboxes.pop() else {
        return Err(ApiError::Conflict(format!(
            "pod {:?} has no running sandbox",
            target.key()
        )));
    };
    let request_cri = api::PortForwardRequest {
        pod_sandbox_id: sandbox.id,
        port: ports,
    };
    let url = shared.cri.port_forward(request_cri).await?;
    Ok(proxy::proxy(request, &url).await?)
}

// === lookups ===

/// The pods edged's workers hold (those bound to the node and in the store, static pods too).
fn running_pods(shared: &Shared) -> Vec<Arc<Pod>> {
    let workers = shared.workers.lock().unwrap_or_else(|e| e.into_inner());
    workers
        .values()
        .filter_map(|w| w.pod.borrow().clone())
        .collect()
}

/// The pod `target` names, checked against the uid the path carries.
fn find_pod(shared: &Shared, target: &Target) -> Result<Arc<Pod>, ApiError> {
    let named = |p: &Arc<Pod>| {
        p.metadata.name.as_deref() == Some(target.pod.as_str())
            && p.metadata.namespace.as_deref().unwrap_or("default") == target.namespace
    };
    let mut pods: Vec<Arc<Pod>> = running_pods(shared).into_iter().filter(named).collect();
    // A pod being deleted and its successor under the same name: the successor.
    pods.sort_by_key(|p| p.metadata.deletion_timestamp.is_none());
    let pod = pods.pop().ok_or_else(|| not_found(target))?;
    if let Some(uid) = &target.uid
        && pod.metadata.uid.as_ref() != Some(uid)
    {
        return Err(ApiError::NotFound(format!(
            "pod {:?} with uid {uid:?} is not on this node",
            target.key()
        )));
    }
    Ok(pod)
}

/// The pod and the name of the container `target` names, which its spec must have.
fn find_container(shared: &Shared, target: &Target) -> Result<(Arc<Pod>, String), ApiError> {
    let pod = find_pod(shared, target)?;
    let name = target.container.clone().unwrap_or_default();
    if spec::any_container(&pod, &name).is_none() {
        return Err(ApiError::NotFound(format!(
            "container {name:?} is not valid for pod {:?}",
            target.key()
        )));
    }
    Ok((pod, name))
}

/// The runtime's instances of container `name` of pod `uid`, oldest attempt first.
async fn instances(
    shared: &Shared,
    uid: &str,
    name: &str,
) -> Result<Vec<api::Container>, ApiError> {
    let filter = api::ContainerFilter {
        label_selector: [(MANAGED, "true"), (POD_UID, uid), (CONTAINER_NAME, name)]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect(),
        ..Default::default()
    };
    let mut listed = shared.cri.list_containers(Some(filter)).await?;
    listed.sort_by_key(|c| (c.metadata.as_ref().map_or(0, |m| m.attempt), c.created_at));
    Ok(listed)
}

/// The highest attempt below `current` whose log file is in `dir`.
fn previous_attempt(dir: &std::path::Path, current: u32) -> Result<Option<u32>, ApiError> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(ApiError::Logs(e)),
    };
    let attempts = entries.filter_map(|e| {
        let name = e.ok()?.file_name();
        name.to_str()?.strip_suffix(".log")?.parse::<u32>().ok()
    });
    Ok(attempts.filter(|a| *a < current).max())
}

fn not_found(target: &Target) -> ApiError {
    ApiError::NotFound(format!(
        "pod {:?} does not exist on this node",
        target.key()
    ))
}

#[cfg(test)]
mod containerd_tests;
#[cfg(test)]
mod tests;
