//! The kubelet streams over a [`NodeDialer`]: a request for a node's kubelet API (a pod's log,
//! exec, attach or port-forward, or `nodes/{name}/proxy/{path}`) is sent as HTTP/1.1 over a
//! stream from `dial(node)`, and the answer comes back as it arrives.
//!
//! - The request is relayed by [`relay`] (shared with cloudcore's kubelet-compatible
//!   endpoint): answers streamed back, upgrades (SPDY/3.1, WebSocket) spliced, the caller's
//!   credentials never sent on. A followed log ends at shutdown like a watch.
//! - A node that is not connected is a `503` at once naming the node, as is a stream that
//!   fails before the kubelet answers; a stream that fails later ends, with the reason logged.
//!
//! `503 ServiceUnavailable` rather than kube-apiserver's reasonless `500` for a kubelet it
//! cannot dial: here the cause is known and passing (the node's link is down), and kubectl
//! shows it as `Error from server (ServiceUnavailable): error dialing backend: node "x" is
//! not connected to cloudcore`.

mod kubelet;
pub(crate) mod relay;

use apimachinery::ApiError;
use axum::body::Body;
use axum::http::request::Parts;
use axum::response::Response;

use crate::nodes::{DialError, NodeDialer};
use crate::serve::Endless;
pub(crate) use kubelet::{KubeletCall, pod_call};
use relay::RelayError;

/// Sends `call` (with the method, headers and body of the client's request) to its node's
/// kubelet API over `dialer` ([`relay::relay`]), and answers with what the kubelet answers.
pub(crate) async fn forward(
    dialer: &dyn NodeDialer,
    call: KubeletCall,
    parts: Parts,
    body: Body,
) -> Result<Response, ApiError> {
    let relayed = relay::relay(dialer, &call.node, &call.path, parts, body).await;
    let mut out = relayed.map_err(relay_failed)?;
    if call.follow {
        out.extensions_mut().insert(Endless);
    }
    Ok(out)
}

/// The error a failed dial answers.
pub(crate) fn dial_failed(e: DialError) -> ApiError {
    ApiError::service_unavailable(format!("error dialing backend: {e}"))
}

/// The Status of a request the kubelet did not answer.
fn relay_failed(e: RelayError) -> ApiError {
    match e {
        RelayError::Dial(e) => dial_failed(e),
        e @ RelayError::Http { .. } => ApiError::service_unavailable(e.to_string()),
        e @ (RelayError::BadPath(_) | RelayError::UpgradeNeedsHttp1) => {
            ApiError::bad_request(e.to_string())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
