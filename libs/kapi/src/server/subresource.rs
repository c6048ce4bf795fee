//! What each subresource accepts and returns (for discovery and for routing its verbs), and
//! the subresource reads that are not the parent object: `scale` (an `autoscaling/v1` `Scale`
//! computed from the parent) and the streams a kubelet serves (`pods/log`, `exec`, `attach`,
//! `portforward`, `proxy`, `nodes/proxy`).
//!
//! The kubelet streams need a tunnel to the edge node, which this control plane does not have
//! yet: they are answered as kube-apiserver answers when it cannot dial a kubelet, after the
//! checks it makes first (the object exists, the pod has a node, the container is the pod's,
//! the pod has not completed). kube-apiserver's dial failure is an error that is no `Status`,
//! which it sends as a 500 with an empty reason (`StatusReasonUnknown`); kubectl shows it as
//! `Error from server: error dialing backend: ...`. The message names the node.

use apimachinery::{ApiError, scale};
use axum::http::{Method, StatusCode};
use axum::response::Response;
use objstore::ObjKey;
use serde_json::Value;

use super::Target;
use super::error::from_store;
use super::query::Params;
use super::render::json_response;
use crate::Api;

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

/// A kubelet stream of a pod or node: the checks kube-apiserver makes before it dials the
/// kubelet, then the error of a kubelet that cannot be reached.
pub(crate) async fn tunnel(
    api: &Api,
    target: &Target,
    params: &Params,
) -> Result<Response, ApiError> {
    let obj = parent(api, target).await?;
    let name = target.name.as_deref().unwrap_or_default();
    let sub = target.subresource.as_deref().unwrap_or_default();
    let node = if target.info.plural == "nodes" {
        name.to_owned()
    } else {
        check_pod_stream(&obj, name, sub, params.get("container"))?;
        obj.pointer("/spec/nodeName")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    Err(unreachable_kubelet(
        &node,
        &format!("{}/{sub}", target.info.plural),
    ))
}

/// 400 when the pod has no node, has completed (exec, attach), or the container named is not
/// the pod's (or none is named and it has several).
fn check_pod_stream(
    pod: &Value,
    name: &str,
    sub: &str,
    container: Option<&str>,
) -> Result<(), ApiError> {
    let node = pod.pointer("/spec/nodeName").and_then(Value::as_str);
    if node.is_none_or(str::is_empty) {
        return Err(ApiError::bad_request(format!(
            "pod {name} does not have a host assigned"
        )));
    }
    if !matches!(sub, "log" | "exec" | "attach") {
        return Ok(());
    }
    let phase = pod.pointer("/status/phase").and_then(Value::as_str);
    if sub != "log" && matches!(phase, Some("Succeeded" | "Failed")) {
        let phase = phase.unwrap_or_default();
        return Err(ApiError::bad_request(format!(
            "cannot {sub} into a container in a completed pod; current phase is {phase}"
        )));
    }
    let names = |list: &str| -> Vec<&str> {
        pod.pointer(&format!("/spec/{list}"))
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|c| c["name"].as_str())
            .collect()
    };
    let containers = names("containers");
    let others = [names("initContainers"), names("ephemeralContainers")].concat();
    match container {
        Some(c) if !containers.contains(&c) && !others.contains(&c) => Err(ApiError::bad_request(
            format!("container {c} is not valid for pod {name}"),
        )),
        None if containers.len() > 1 => Err(ApiError::bad_request(format!(
            "a container name must be specified for pod {name}, choose one of: [{}]",
            containers.join(" ")
        ))),
        _ => Ok(()),
    }
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
    fn pod_streams_check_the_node_and_container_first() {
        let pod = serde_json::json!({
            "spec": {"nodeName": "edge-1",
                     "containers": [{"name": "a"}, {"name": "b"}],
                     "initContainers": [{"name": "init"}]},
            "status": {"phase": "Running"},
        });
        assert!(check_pod_stream(&pod, "web", "log", Some("a")).is_ok());
        assert!(check_pod_stream(&pod, "web", "log", Some("init")).is_ok());
        let e = check_pod_stream(&pod, "web", "log", Some("c")).unwrap_err();
        assert_eq!(
            (e.code, e.message.as_str()),
            (400, "container c is not valid for pod web")
        );
        let e = check_pod_stream(&pod, "web", "exec", None).unwrap_err();
        assert!(e.message.contains("choose one of: [a b]"), "{}", e.message);
        let unscheduled = serde_json::json!({"spec": {"containers": [{"name": "a"}]}});
        let e = check_pod_stream(&unscheduled, "web", "log", None).unwrap_err();
        assert_eq!(e.message, "pod web does not have a host assigned");
        let done = serde_json::json!({"spec": {"nodeName": "n", "containers": [{"name": "a"}]},
                                      "status": {"phase": "Succeeded"}});
        assert!(check_pod_stream(&done, "web", "log", None).is_ok());
        let e = check_pod_stream(&done, "web", "exec", None).unwrap_err();
        assert!(e.message.contains("completed pod"), "{}", e.message);
    }

    #[test]
    fn an_unreachable_kubelet_is_a_reasonless_500_naming_the_node() {
        let e = unreachable_kubelet("edge-1", "pods/log");
        assert_eq!((e.code, e.reason.as_str()), (500, ""));
        assert!(e.message.starts_with("error dialing backend: "));
        assert!(e.message.contains("\"edge-1\"") && e.message.contains("pods/log"));
    }
}
