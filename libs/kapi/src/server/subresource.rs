//! What each subresource accepts and returns (for discovery and for routing its verbs), and
//! the subresource reads that are not the parent object: `scale` (an `autoscaling/v1` `Scale`
//! computed from the parent) and the streams a kubelet serves (`pods/log`, `exec`, `attach`,
//! `portforward`, `proxy`, `nodes/proxy`).
//!
//! The kubelet streams of a pod, after the checks kube-apiserver makes first (the object
//! exists, the log options are valid, the pod has a node, the container is the pod's, the pod
//! has not completed), are sent to the node's kubelet API over the router's
//! [`crate::nodes::Dialer`] ([`streams`]). Without one (lwproxy), they are answered as
//! kube-apiserver answers when it cannot dial a kubelet: an error that is no `Status`, which
//! it sends as a 500 with an empty reason (`StatusReasonUnknown`); kubectl shows it as
//! `Error from server: error dialing backend: ...`. The message names the node.

use apimachinery::{ApiError, scale};
use axum::body::Body;
use axum::http::request::Parts;
use axum::http::{Method, StatusCode};
use axum::response::Response;
use objstore::ObjKey;
use serde_json::Value;

use super::Target;
use super::error::from_store;
use super::query::Params;
use super::render::json_response;
use super::streams;
use crate::Api;
use crate::nodes::Dialer;

/// The verbs and response kind of a subresource.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Spec {
    pub(crate) verbs: &'static [&'static str],
    /// `(group, version, kind)` when it is not the parent's kind.
    pub(crate) kind: Option<(&'static str, &'static str, &'static str)>,
}

/// The subresources kube-apiserver serves, by name; unknown ones behave like `status`.
pub(crate) fn spec(name: &str) -> Spec {
    const GET_UPDATE_PATCH: &[&str] = &["get", "patch", "update"];
    let (verbs, kind): (&'static [&'static str], _) = match name {
        "binding" => (&["create"], Some(("", "v1", "Binding"))),
        "eviction" => (&["create"], Some(("policy", "v1", "Eviction"))),
        "token" => (
            &["create"],
            Some(("authentication.k8s.io", "v1", "TokenRequest")),
        ),
        "scale" => (GET_UPDATE_PATCH, Some(("autoscaling", "v1", "Scale"))),
        "finalize" => (&["update"], None),
        "log" => (&["get"], None),
        "exec" | "attach" | "portforward" => (&["create", "get"], None),
        "proxy" => (&["create", "delete", "get", "patch", "update"], None),
        _ => (GET_UPDATE_PATCH, None),
    };
    Spec { verbs, kind }
}

/// Whether a GET of the subresource is the parent object (`status`, `ephemeralcontainers`,
/// `resize`, `approval`); other subresource reads (logs, scale, proxies) are not served here.
pub(crate) fn reads_parent(name: &str) -> bool {
    spec(name).kind.is_none() && spec(name).verbs.contains(&"patch") && name != "proxy"
}

/// Whether the subresource is a stream the kubelet serves (answered with [`tunnel`]) and
/// `method` one of its verbs.
pub(crate) fn is_tunnel(name: &str, method: &Method) -> bool {
    let verb = match *method {
        Method::GET => "get",
        Method::POST => "create",
        Method::PUT => "update",
        Method::PATCH => "patch",
        Method::DELETE => "delete",
        _ => return false,
    };
    matches!(name, "log" | "exec" | "attach" | "portforward" | "proxy")
        && spec(name).verbs.contains(&verb)
}

/// `GET .../{name}/scale`: the parent's `Scale`.
pub(crate) async fn get_scale(api: &Api, target: &Target) -> Result<Response, ApiError> {
    let parent = parent(api, target).await?;
    Ok(json_response(StatusCode::OK, &scale::of(&parent)))
}

/// The RBAC verbs a kubelet stream needs: `get` for a log; `create` for exec, attach and
/// port-forward, and `get` too when they come as a GET (a WebSocket upgrade), as
/// kube-apiserver asks since 1.31 (`AuthorizePodWebsocketUpgradeCreatePermission`).
pub(crate) fn stream_verbs(name: &str, method: &Method) -> &'static [&'static str] {
    match (name, method) {
        ("log", _) => &["get"],
        (_, &Method::GET) => &["get", "create"],
        _ => &["create"],
    }
}

/// A kubelet stream of a pod: the checks kube-apiserver makes before it dials the kubelet,
/// then the request sent to the node's kubelet API over the router's [`Dialer`], or without
/// one, the error of a kubelet that cannot be reached.
pub(crate) async fn tunnel(
    api: &Api,
    target: &Target,
    params: &Params,
    parts: Parts,
    body: Body,
) -> Result<Response, ApiError> {
    let obj = parent(api, target).await?;
    let name = target.name.as_deref().unwrap_or_default();
    let sub = target.subresource.as_deref().unwrap_or_default();
    let call = streams::pod_call(&obj, name, sub, params)?;
    let Some(Dialer(dialer)) = parts.extensions.get::<Dialer>().cloned() else {
        return Err(unreachable_kubelet(
            &call.node,
            &format!("{}/{sub}", target.info.plural),
        ));
    };
    streams::forward(dialer.as_ref(), call, parts, body).await
}

/// What kube-apiserver answers when it cannot dial a node's kubelet: a 500 with no reason.
pub(crate) fn unreachable_kubelet(node: &str, what: &str) -> ApiError {
    ApiError::new(
        500,
        "",
        format!(
            "error dialing backend: the kubelet of node \"{node}\" cannot be reached: no tunnel \
             to the edge node is available yet, so {what} is not served"
        ),
    )
}

/// The object the subresource belongs to (404 when there is none).
async fn parent(api: &Api, target: &Target) -> Result<Value, ApiError> {
    let info = &target.info;
    let name = target.name.as_deref().unwrap_or_default();
    let key = ObjKey::new(
        info.store_resource(),
        target.namespace.clone().unwrap_or_default(),
        name,
    );
    let stored = api.store.get(&key).await.map_err(from_store)?;
    let stored = stored.ok_or_else(|| ApiError::not_found(&info.group, &info.plural, name))?;
    serde_json::from_slice(&stored.value)
        .map_err(|e| ApiError::internal(format!("decoding stored {key}: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_reads_the_parent_and_binding_only_creates() {
        assert!(reads_parent("status"));
        assert!(!reads_parent("binding"));
        assert!(!reads_parent("log"));
        assert!(!reads_parent("scale"));
        assert_eq!(spec("binding").verbs, &["create"]);
        assert_eq!(spec("binding").kind, Some(("", "v1", "Binding")));
        assert!(reads_parent("approval"));
        assert!(reads_parent("ephemeralcontainers"));
        assert!(is_tunnel("log", &Method::GET));
        assert!(!is_tunnel("log", &Method::PUT));
        assert!(is_tunnel("exec", &Method::POST));
        assert!(!is_tunnel("status", &Method::GET));
    }

    #[test]
    fn an_unreachable_kubelet_is_a_reasonless_500_naming_the_node() {
        let e = unreachable_kubelet("edge-1", "pods/log");
        assert_eq!((e.code, e.reason.as_str()), (500, ""));
        assert!(e.message.starts_with("error dialing backend: "));
        assert!(e.message.contains("\"edge-1\"") && e.message.contains("pods/log"));
    }
}
