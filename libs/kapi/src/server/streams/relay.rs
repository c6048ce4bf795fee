//! One HTTP/1.1 request relayed to a node's kubelet API over a stream from a [`NodeDialer`],
//! its answer relayed back as it arrives: what the embedded API server does for a pod's log,
//! exec, attach and port-forward and for `nodes/{name}/proxy`, and what cloudcore's
//! kubelet-compatible endpoint (`modules.cloudStream`) does for a real cluster's
//! kube-apiserver.
//!
//! - A plain request's answer is streamed back, never buffered.
//! - An HTTP upgrade (SPDY/3.1 or WebSocket, whatever the client speaks) is sent on with its
//!   upgrade headers; a `101` answer is relayed with its headers, then the two upgraded
//!   connections are copied both ways until one ends. Any other answer is relayed with its
//!   status and body.
//! - The caller's credentials (`Authorization`, impersonation headers, cookies) are never sent
//!   on; `Host` names the node.

use axum::body::Body;
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, Request, StatusCode, header};
use axum::response::Response;
use http_body_util::BodyExt;
use hyper::upgrade::OnUpgrade;
use hyper_util::rt::TokioIo;

use crate::nodes::{DialError, NodeDialer};
use crate::server::proxy::DROPPED;

/// Why a relayed request got no answer from the kubelet.
#[derive(Debug, thiserror::Error)]
pub enum RelayError {
    /// No stream to the node could be opened.
    #[error(transparent)]
    Dial(#[from] DialError),
    /// The stream failed before the kubelet answered.
    #[error("error trying to reach the kubelet of node {node:?}: {source}")]
    Http {
        node: String,
        #[source]
        source: hyper::Error,
    },
    /// The path is not a valid request target.
    #[error("invalid kubelet path {0:?}")]
    BadPath(String),
    /// An upgrade asked for on a connection that cannot be upgraded.
    #[error("an upgrade (exec, attach, port-forward) needs HTTP/1.1")]
    UpgradeNeedsHttp1,
}

/// Sends `path` (with the method, headers and body of the client's request, `parts` and
/// `body`) to the kubelet API of `node` over `dialer`, and answers with what the kubelet
/// answers. After a `101`, the upgraded connections are spliced in a task of their own.
pub async fn relay(
    dialer: &dyn NodeDialer,
    node: &str,
    path: &str,
    mut parts: Parts,
    body: Body,
) -> Result<Response, RelayError> {
    let upgrade = upgrade_of(&parts.headers);
    let client_upgrade = match upgrade {
        Some(_) => Some(
            parts
                .extensions
                .remove::<OnUpgrade>()
                .ok_or(RelayError::UpgradeNeedsHttp1)?,
        ),
        None => None,
    };
    let uri = path
        .parse()
        .map_err(|_| RelayError::BadPath(path.to_owned()))?;
    let http = |source| RelayError::Http {
        node: node.to_owned(),
        source,
    };
    let stream = dialer.dial(node).await?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(http)?;
    let node_id = node.to_owned();
    tokio::spawn(async move {
        if let Err(e) = conn.with_upgrades().await {
            tracing::debug!(node_id, error = %e, "connection to the kubelet ended");
        }
    });
    let mut req = Request::new(body);
    *req.method_mut() = parts.method.clone();
    *req.uri_mut() = uri;
    *req.headers_mut() = request_headers(&parts.headers, node, upgrade);
    let mut resp = sender.send_request(req).await.map_err(http)?;
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
            Ok(Response::from_parts(head, Body::new(body)))
        }
    }
}

/// Whether a request header is never sent to a kubelet: the hop-by-hop ones and the caller's
/// credentials (as for every proxied request), its cookies and impersonation, and `Host` (the
/// node's name is sent instead).
fn dropped(name: &str) -> bool {
    DROPPED.contains(&name) || matches!(name, "cookie" | "host") || name.starts_with("impersonate-")
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
    fn a_bad_path_is_refused_before_any_dial() {
        struct NeverDial;
        #[async_trait::async_trait]
        impl NodeDialer for NeverDial {
            async fn dial(
                &self,
                node: &str,
            ) -> Result<Box<dyn crate::nodes::NodeStream>, DialError> {
                panic!("dialled {node}")
            }
        }
        let (parts, body) = Request::new(Body::empty()).into_parts();
        let refused = futures::executor::block_on(relay(&NeverDial, "n", "a b", parts, body));
        assert!(matches!(refused, Err(RelayError::BadPath(p)) if p == "a b"));
    }
}
