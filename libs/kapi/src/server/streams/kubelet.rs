//! Where a pod stream goes on its node's kubelet API, with no I/O: the path and query
//! kube-apiserver builds (`LogLocation`, `ExecLocation`, `AttachLocation`,
//! `PortForwardLocation` of its pod strategy), from a pod and the request's options, after the
//! checks it makes first.
//!
//! exec, attach and port-forward name the pod's uid (`/exec/{ns}/{pod}/{uid}/{container}`), a
//! form the kubelet accepts, so that a request never reaches a newer pod of the same name.

use apimachinery::ApiError;
use apimachinery::time::{format_rfc3339, parse_rfc3339};
use percent_encoding::{AsciiSet, CONTROLS, utf8_percent_encode};
use serde_json::Value;

use crate::server::query::Params;

/// A request a pod stream becomes on its node's kubelet API.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct KubeletCall {
    /// The node whose kubelet serves it.
    pub(crate) node: String,
    /// Path and query sent to the kubelet.
    pub(crate) path: String,
    /// A followed log: a stream with no end of its own.
    pub(crate) follow: bool,
}

/// Characters escaped in a path segment.
const SEGMENT: &AsciiSet = &CONTROLS
    .add(b' ')
    .add(b'"')
    .add(b'#')
    .add(b'%')
    .add(b'/')
    .add(b'?')
    .add(b'<')
    .add(b'>')
    .add(b'`')
    .add(b'{')
    .add(b'}');

/// The kubelet request for subresource `sub` (`log`, `exec`, `attach`, `portforward`) of `pod`
/// (named `name`), or the 400 (or 422 for log options) kube-apiserver answers instead.
pub(crate) fn pod_call(
    pod: &Value,
    name: &str,
    sub: &str,
    params: &Params,
) -> Result<KubeletCall, ApiError> {
    let log = (sub == "log")
        .then(|| log_query(name, params))
        .transpose()?;
    let node = str_at(pod, "/spec/nodeName");
    if node.is_empty() {
        return Err(ApiError::bad_request(format!(
            "pod {name} does not have a host assigned"
        )));
    }
    let namespace = segment(str_at(pod, "/metadata/namespace"));
    let pod_name = segment(name);
    // `/{uid}` after the pod's name; a pod stored without one (never one the API server
    // created) is reached by name alone.
    let uid = match str_at(pod, "/metadata/uid") {
        "" => String::new(),
        uid => format!("/{}", segment(uid)),
    };
    let (path, query) = match sub {
        "log" => {
            let container = segment(&container_of(pod, name, params.get("container"))?);
            let path = format!("/containerLogs/{namespace}/{pod_name}/{container}");
            (path, log.unwrap_or_default())
        }
        "exec" | "attach" => {
            check_not_completed(pod, sub)?;
            let container = segment(&container_of(pod, name, params.get("container"))?);
            let path = format!("/{sub}/{namespace}/{pod_name}{uid}/{container}");
            (path, stream_query(params, sub == "exec"))
        }
        _ => {
            let path = format!("/portForward/{namespace}/{pod_name}{uid}");
            (path, ports_query(params)?)
        }
    };
    let follow = sub == "log" && params.flag("follow").unwrap_or(false);
    let path = match query.is_empty() {
        true => path,
        false => format!("{path}?{query}"),
    };
    Ok(KubeletCall {
        node: node.to_owned(),
        path,
        follow,
    })
}

/// The container a request means: the one named, which must be among the pod's (init,
/// regular, ephemeral), or else the pod's only container.
fn container_of(pod: &Value, name: &str, requested: Option<&str>) -> Result<String, ApiError> {
    let names = |list: &str| -> Vec<&str> {
        pod.pointer(&format!("/spec/{list}"))
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|c| c["name"].as_str())
            .collect()
    };
    let containers = names("containers");
    let all = [
        names("initContainers"),
        containers.clone(),
        names("ephemeralContainers"),
    ]
    .concat();
    match requested.filter(|c| !c.is_empty()) {
        Some(c) if all.contains(&c) => Ok(c.to_owned()),
        Some(c) => Err(ApiError::bad_request(format!(
            "container {c} is not valid for pod {name}"
        ))),
        None => match containers.as_slice() {
            [only] => Ok((*only).to_owned()),
            [] => Err(ApiError::bad_request(format!(
                "a container name must be specified for pod {name}"
            ))),
            _ => Err(ApiError::bad_request(format!(
                "a container name must be specified for pod {name}, choose one of: [{}]",
                all.join(" ")
            ))),
        },
    }
}

/// 400 for exec or attach into a pod that has completed.
fn check_not_completed(pod: &Value, sub: &str) -> Result<(), ApiError> {
    let phase = str_at(pod, "/status/phase");
    if matches!(phase, "Succeeded" | "Failed") {
        return Err(ApiError::bad_request(format!(
            "cannot {sub} into a container in a completed pod; current phase is {phase}"
        )));
    }
    Ok(())
}

/// `PodLogOptions` as kube-apiserver validates them, as the kubelet's query: `follow`,
/// `previous`, `timestamps`, `sinceSeconds`, `sinceTime` (re-rendered in RFC 3339),
/// `tailLines`, `limitBytes`; sorted by key, as Go's `url.Values` encodes them.
/// `insecureSkipTLSVerifyBackend` is accepted and has no use (the stream to the node is
/// already mutually authenticated).
fn log_query(name: &str, params: &Params) -> Result<String, ApiError> {
    let tail = params.int("tailLines")?;
    let limit = params.int("limitBytes")?;
    let since_seconds = params.int("sinceSeconds")?;
    let since_time = match params.get("sinceTime").filter(|v| !v.is_empty()) {
        None => None,
        Some(v) => Some(parse_rfc3339(v).ok_or_else(|| {
            ApiError::bad_request(format!(
                "invalid value for sinceTime: {v:?} is not an RFC 3339 time"
            ))
        })?),
    };
    let mut causes: Vec<(&str, String)> = Vec::new();
    if let Some(t) = tail.filter(|t| *t < 0) {
        causes.push((
            "tailLines",
            format!("Invalid value: {t}: must be greater than or equal to 0"),
        ));
    }
    if let Some(l) = limit.filter(|l| *l < 1) {
        causes.push((
            "limitBytes",
            format!("Invalid value: {l}: must be greater than 0"),
        ));
    }
    if since_seconds.is_some() && since_time.is_some() {
        causes.push((
            "",
            "Forbidden: at most one of `sinceTime` or `sinceSeconds` may be specified".into(),
        ));
    }
    if let Some(s) = since_seconds.filter(|s| *s < 1) {
        causes.push((
            "sinceSeconds",
            format!("Invalid value: {s}: must be greater than 0"),
        ));
    }
    if !causes.is_empty() {
        let causes: Vec<(&str, &str)> = causes.iter().map(|(f, w)| (*f, w.as_str())).collect();
        return Err(ApiError::invalid("", "PodLogOptions", name, &causes));
    }
    let flag = |key: &str| params.flag(key).unwrap_or(false).then(|| "true".to_owned());
    let pairs = [
        ("follow", flag("follow")),
        ("limitBytes", limit.map(|v| v.to_string())),
        ("previous", flag("previous")),
        ("sinceSeconds", since_seconds.map(|v| v.to_string())),
        ("sinceTime", since_time.map(format_rfc3339)),
        ("tailLines", tail.map(|v| v.to_string())),
        ("timestamps", flag("timestamps")),
    ];
    Ok(encode(
        pairs
            .iter()
            .filter_map(|(k, v)| v.as_deref().map(|v| (*k, v))),
    ))
}

/// `PodExecOptions` / `PodAttachOptions` as the kubelet's query: `command` (exec only, in
/// order), `error`, `input`, `output` and `tty` as `1` when asked for.
fn stream_query(params: &Params, exec: bool) -> String {
    let flag = |key: &str| params.flag(key).unwrap_or(false);
    let mut pairs: Vec<(&str, &str)> = Vec::new();
    if exec {
        pairs.extend(params.all("command").map(|c| ("command", c)));
    }
    for (asked, sent) in [
        ("stderr", "error"),
        ("stdin", "input"),
        ("stdout", "output"),
        ("tty", "tty"),
    ] {
        if flag(asked) {
            pairs.push((sent, "1"));
        }
    }
    encode(pairs.into_iter())
}

/// `PodPortForwardOptions.ports` (each a port number, repeated or comma-separated) as the
/// kubelet's `port=80,443`; none is fine (SPDY clients name ports per stream).
fn ports_query(params: &Params) -> Result<String, ApiError> {
    let mut ports = Vec::new();
    for raw in params.all("ports").flat_map(|v| v.split(',')) {
        let port = raw.trim();
        match port.parse::<u16>() {
            Ok(p) if p > 0 => ports.push(p.to_string()),
            _ => {
                return Err(ApiError::bad_request(format!(
                    "invalid port {port:?}: a port to forward is a number from 1 to 65535"
                )));
            }
        }
    }
    if ports.is_empty() {
        return Ok(String::new());
    }
    Ok(encode([("port", ports.join(",").as_str())].into_iter()))
}

fn encode<'a>(pairs: impl Iterator<Item = (&'a str, &'a str)>) -> String {
    let mut out = form_urlencoded::Serializer::new(String::new());
    out.extend_pairs(pairs);
    out.finish()
}

fn segment(s: &str) -> String {
    utf8_percent_encode(s, SEGMENT).to_string()
}

fn str_at<'a>(v: &'a Value, pointer: &str) -> &'a str {
    v.pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_default()
}

#[cfg(test)]
mod tests;
