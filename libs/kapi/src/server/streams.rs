//! The kubelet streams over a [`NodeDialer`]: a request for a node's kubelet API (a pod's log,
//! exec, attach or port-forward, or `nodes/{name}/proxy/{path}`) is sent as HTTP/1.1 over a
//! stream from `dial(node)`, and the answer comes back as it arrives.
//!
//! - A plain request's answer is streamed back, never buffered (a followed log flows line by
//!   line and ends at shutdown like a watch).
//! - An HTTP upgrade (exec, attach, port-forward: SPDY/3.1 or WebSocket, whatever the client
//!   speaks) is sent on with its upgrade headers; a `101` answer is relayed with its headers,
//!   then the two upgraded connections are copied both ways until one ends. Any other answer
//!   is relayed with its status and body.
//! - The caller's credentials (`Authorization`, impersonation headers) are never sent on.
//! - A node that is not connected is a `503` at once naming the node, as is a stream that
//!   fails before the kubelet answers; a stream that fails later ends, with the reason logged.
//!
//! `503 ServiceUnavailable` rather than kube-apiserver's reasonless `500` for a kubelet it
//! cannot dial: here the cause is known and passing (the node's link is down), and kubectl
//! shows it as `Error from server (ServiceUnavailable): error dialing backend: node "x" is
//! not connected to cloudcore`.

mod kubelet;

use apimachinery::ApiError;
use axum::body::Body;
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, Request, StatusCode, header};
use axum::response::Response;
use http_body_util::BodyExt;
use hyper::upgrade::OnUpgrade;
use hyper_util::rt::TokioIo;

use super::proxy::DROPPED;
use crate::nodes::{DialError, NodeDialer};
use crate::serve::Endless;
pub(crate) use kubelet::{KubeletCall, pod_call};

/// Whether a request header is never sent to a kubelet: the hop-by-hop ones and the caller's
/// credentials (as for every proxied request), its cookies and impersonation, and `Host` (the
/// node's name is sent instead).
fn dropped(name: &str) -> bool {
    DROPPED.contains(&name) || matches!(name, "cookie" | "host") || name.starts_with("impersonate-")
}

/// Sends `call` (with the method, headers and body of the client's request) to its node's
/// kubelet API over `dialer`, and answers with what the kubelet answers.
pub(crate) async fn forward(
    dialer: &dyn NodeDialer,
    call: KubeletCall,
    mut parts: Parts,
    body: Body,
) -> Result<Response, ApiError> {
    let node = call.node.as_str();
    let upgrade = upgrade_of(&parts.headers);
    let client_upgrade = match upgrade {
        Some(_) => Some(parts.extensions.remove::<OnUpgrade>().ok_or_else(|| {
            ApiError::bad_request("an upgrade (exec, attach, port-forward) needs HTTP/1.1")
        })?),
        None => None,
    };
    let stream = dialer.dial(node).await.map_err(dial_failed)?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| failed(node, &e))?;
    let node_id = node.to_owned();
    tokio::spawn(async move {
        if let Err(e) = conn.with_upgrades().await {
            tracing::debug!(node_id, error = %e, "connection to the kubelet ended");
        }
    });
    let mut req = Request::new(body);
    *req.method_mut() = parts.method.clone();
    *req.uri_mut() = call
        .path
        .parse()
        .map_err(|_| ApiError::bad_request(format!("invalid kubelet path {:?}", call.path)))?;
    *req.headers_mut() = request_headers(&parts.headers, node, upgrade);
    let mut resp = sender
        .send_request(req)
        .await
        .map_err(|e| failed(node, &e))?;
    match client_upgrade {
        Some(client) if resp.status() == StatusCode::SWITCHING_PROTOCOLS => {
            let backend = hyper::upgrade::on(&mut resp);
            let (head, _) = resp.into_parts();
            tokio::spawn(splice(client, backend, node.to_owned()));
            Ok(Response::from_parts(head, Body::empty()))
        }
        _ => {
            let (mut head, incoming) = resp.into_parts();
            strip_hop_by_hop(&mut head.headers);
            let node_id = node.to_owned();
            let body = incoming.map_err(move |e| {
                tracing::info!(node_id, error = %e, "kubelet answer ended with an error");
                e
            });
            let mut out = Response::from_parts(head, Body::new(body));
            if call.follow {
                out.extensions_mut().insert(Endless);
            }
            Ok(out)
        }
    }
}

/// The error a failed dial answers.
pub(crate) fn dial_failed(e: DialError) -> ApiError {
    ApiError::service_unavailable(format!("error dialing backend: {e}"))
}

/// Copies the client's upgraded connection and the kubelet's both ways until one ends.
async fn splice(client: OnUpgrade, backend: OnUpgrade, node_id: String) {
    let (client, backend) = match tokio::try_join!(client, backend) {
        Ok(both) => both,
        Err(e) => {
            tracing::warn!(node_id, error = %e, "upgrading a kubelet stream failed");
            return;
        }
    };
    let (mut client, mut backend) = (TokioIo::new(client), TokioIo::new(backend));
    match tokio::io::copy_bidirectional(&mut client, &mut backend).await {
        Ok((up, down)) => {
            tracing::debug!(node_id, up, down, "kubelet stream ended");
        }
        Err(e) => {
            tracing::info!(node_id, error = %e, "kubelet stream ended with an error");
        }
    }
}

/// The `Upgrade` value of a request that asks for one (`Connection: Upgrade`).
fn upgrade_of(headers: &HeaderMap) -> Option<HeaderValue> {
    let asks = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|token| token.trim().eq_ignore_ascii_case("upgrade"));
    asks.then(|| headers.get(header::UPGRADE).cloned())
        .flatten()
}

/// The headers sent to the kubelet: the client's (see [`dropped`]), `Host` naming the node,
/// and the upgrade asked for.
fn request_headers(headers: &HeaderMap, node: &str, upgrade: Option<HeaderValue>) -> HeaderMap {
    let mut out = HeaderMap::new();
    for (name, value) in headers {
        if !dropped(name.as_str()) {
            out.append(name.clone(), value.clone());
        }
    }
    if let Ok(host) = HeaderValue::from_str(node) {
        out.insert(header::HOST, host);
    }
    if let Some(upgrade) = upgrade {
        out.insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
        out.insert(header::UPGRADE, upgrade);
    }
    out
}

/// Removes the hop-by-hop headers of a kubelet's (non-upgrade) answer.
fn strip_hop_by_hop(headers: &mut HeaderMap) {
    for name in DROPPED.iter().filter(|n| **n != "authorization") {
        headers.remove(*name);
    }
}

/// The 503 of a stream that failed before the kubelet answered.
fn failed(node: &str, e: &hyper::Error) -> ApiError {
    ApiError::service_unavailable(format!(
        "error trying to reach the kubelet of node {node:?}: {e}"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_and_hop_by_hop_headers_are_not_sent_on_but_the_upgrade_is() {
        let mut h = HeaderMap::new();
        h.insert("authorization", HeaderValue::from_static("Bearer secret"));
        h.insert("impersonate-user", HeaderValue::from_static("bob"));
        h.insert(
            "connection",
            HeaderValue::from_static("keep-alive, Upgrade"),
        );
        h.insert("upgrade", HeaderValue::from_static("SPDY/3.1"));
        h.insert("x-stream-protocol-version", HeaderValue::from_static("v4"));
        h.insert("host", HeaderValue::from_static("api:6443"));
        let upgrade = upgrade_of(&h);
        assert_eq!(
            upgrade.as_ref().map(|v| v.as_bytes()),
            Some(&b"SPDY/3.1"[..])
        );
        let out = request_headers(&h, "edge-1", upgrade);
        assert!(out.get("authorization").is_none() && out.get("impersonate-user").is_none());
        assert_eq!(out["host"], "edge-1");
        assert_eq!(out["connection"], "Upgrade");
        assert_eq!(out["upgrade"], "SPDY/3.1");
        assert_eq!(out["x-stream-protocol-version"], "v4");
        h.remove("connection");
        assert!(upgrade_of(&h).is_none());
    }

    #[test]
    fn a_node_that_is_not_connected_is_a_503_naming_it() {
        let e = dial_failed(DialError::NotConnected {
            node: "edge-1".into(),
        });
        assert_eq!((e.code, e.reason.as_str()), (503, "ServiceUnavailable"));
        assert_eq!(
            e.message,
            "error dialing backend: node edge-1 is not connected to cloudcore"
        );
    }
}
