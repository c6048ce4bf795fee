//! The `metrics.k8s.io/v1beta1` requests, answered before the REST routes: `nodes[/{name}]`,
//! `pods` (all namespaces) and `namespaces/{ns}/pods[/{name}]`, GET only (a watch or a write
//! is a 405), each authorized as a read of the resource. A list takes a `labelSelector` (and a
//! `fieldSelector`) matched against the Node or Pod objects; only objects with a usage are
//! listed, and a get of an object without one is a 404, as metrics-server answers.
//! Discovery of the group is the REST layer's (the resources are in the registry).

use std::collections::BTreeMap;

use apimachinery::{ApiError, FieldSelector, LabelSelector, ResourceInfo};
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{Method, Response, StatusCode};
use axum::middleware::Next;
use kapi::{Api, ReadRequest, User};
use objstore::{ListOptions, ObjKey, StoredObject};
use serde_json::{Value, json};

use super::storage::{PodUsage, Usage};
use super::{GROUP, Shared, VERSION};

use crate::serve::json_response;

/// What the metrics routes need.
#[derive(Clone)]
pub(crate) struct Service {
    pub(crate) api: Api,
    pub(crate) storage: Shared,
}

/// A request for the group's resources.
#[derive(Debug, PartialEq, Eq)]
enum Target {
    /// `nodes` or `nodes/{name}`.
    Nodes { name: Option<String> },
    /// `pods`, `namespaces/{ns}/pods` or `namespaces/{ns}/pods/{name}`.
    Pods {
        namespace: Option<String>,
        name: Option<String>,
    },
    /// Anything else under the group version.
    Unknown,
}

/// What a request asks, taken from it.
struct Asked {
    target: Target,
    method: Method,
    query: Vec<(String, String)>,
    user: Option<User>,
}

/// Answers the group's resource requests; passes everything else (discovery included) on.
pub(crate) async fn serve(
    State(service): State<Service>,
    req: Request,
    next: Next,
) -> Response<Body> {
    let Some(target) = target(req.uri().path()) else {
        return next.run(req).await;
    };
    let query = req
        .uri()
        .query()
        .map(|q| form_urlencoded::parse(q.as_bytes()).into_owned().collect())
        .unwrap_or_default();
    let asked = Asked {
        target,
        method: req.method().clone(),
        query,
        user: req.extensions().get::<User>().cloned(),
    };
    drop(req);
    match answer(&service, &asked).await {
        Ok(body) => json_response(StatusCode::OK, &body),
        Err(e) => json_response(
            StatusCode::from_u16(e.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
            &e.to_status(),
        ),
    }
}

/// The target of a path under `/apis/metrics.k8s.io/v1beta1/`, if it is one (the group
/// version itself is discovery: `None`).
fn target(path: &str) -> Option<Target> {
    let rest = path
        .strip_prefix("/apis/")?
        .strip_prefix(GROUP)?
        .strip_prefix('/')?
        .strip_prefix(VERSION)?
        .strip_prefix('/')?;
    let parts: Vec<&str> = rest.split('/').collect();
    let name = |s: &str| (!s.is_empty()).then(|| s.to_owned());
    Some(match parts.as_slice() {
        [""] => return None,
        ["nodes"] => Target::Nodes { name: None },
        ["nodes", n] if !n.is_empty() => Target::Nodes { name: name(n) },
        ["pods"] => Target::Pods {
            namespace: None,
            name: None,
        },
        ["namespaces", ns, "pods"] if !ns.is_empty() => Target::Pods {
            namespace: name(ns),
            name: None,
        },
        ["namespaces", ns, "pods", n] if !ns.is_empty() && !n.is_empty() => Target::Pods {
            namespace: name(ns),
            name: name(n),
        },
        _ => Target::Unknown,
    })
}

async fn answer(service: &Service, asked: &Asked) -> Result<Value, ApiError> {
    let (plural, namespace, name) = match &asked.target {
        Target::Nodes { name } => ("nodes", None, name.as_deref()),
        Target::Pods { namespace, name } => ("pods", namespace.as_deref(), name.as_deref()),
        Target::Unknown => {
            return Err(ApiError::new(
                404,
                "NotFound",
                "the server could not find the requested resource",
            ));
        }
    };
    let info = service
        .api
        .registry
        .get(GROUP, VERSION, plural)
        .ok_or_else(|| ApiError::internal("the metrics resources are not registered"))?;
    let param = |k: &str| {
        asked
            .query
            .iter()
            .find(|(key, _)| key == k)
            .map(|(_, v)| v.as_str())
    };
    let watching = matches!(param("watch"), Some("true" | "1" | ""));
    if asked.method != Method::GET || watching {
        let verb = if watching {
            "watch"
        } else {
            asked.method.as_str()
        };
        return Err(ApiError::method_not_supported(verb, plural));
    }
    let verb = if name.is_some() { "get" } else { "list" };
    authorize(service, asked.user.as_ref(), &info, verb, namespace, name).await?;
    let objects = Objects {
        store: &service.api.store,
        resource: plural,
        namespace,
    };
    match name {
        Some(name) => {
            let object = objects.get(name).await?;
            let found = match plural {
                "nodes" => object.and_then(|o| node_metrics(&service.storage, &o)),
                _ => object.and_then(|o| {
                    let pods = service.storage.read().pods();
                    pod_metrics(&pods, &o)
                }),
            };
            found.ok_or_else(|| ApiError::not_found(GROUP, plural, name))
        }
        None => {
            let labels = LabelSelector::parse(param("labelSelector").unwrap_or_default())
                .map_err(|e| ApiError::bad_request(format!("labelSelector: {e}")))?;
            let fields = FieldSelector::parse(param("fieldSelector").unwrap_or_default())
                .map_err(|e| ApiError::bad_request(format!("fieldSelector: {e}")))?;
            let chosen = objects.list(&labels, &fields).await?;
            let items: Vec<Value> = match plural {
                "nodes" => chosen
                    .iter()
                    .filter_map(|o| node_metrics(&service.storage, o))
                    .collect(),
                _ => {
                    let pods = service.storage.read().pods();
                    chosen
                        .iter()
                        .filter_map(|o| pod_metrics(&pods, o))
                        .collect()
                }
            };
            Ok(json!({
                "kind": format!("{}List", info.kind),
                "apiVersion": format!("{GROUP}/{VERSION}"),
                "metadata": {},
                "items": items,
            }))
        }
    }
}

/// The Node or Pod objects a request is about.
struct Objects<'a> {
    store: &'a objstore::Store,
    resource: &'a str,
    namespace: Option<&'a str>,
}

impl Objects<'_> {
    async fn get(&self, name: &str) -> Result<Option<std::sync::Arc<StoredObject>>, ApiError> {
        let key = ObjKey::new(self.resource, self.namespace.unwrap_or_default(), name);
        self.store.get(&key).await.map_err(store_error)
    }

    async fn list(
        &self,
        labels: &LabelSelector,
        fields: &FieldSelector,
    ) -> Result<Vec<std::sync::Arc<StoredObject>>, ApiError> {
        let mut opts = ListOptions::new(self.resource);
        if let Some(ns) = self.namespace {
            opts = opts.namespace(ns);
        }
        let (labels, fields) = (labels.clone(), fields.clone());
        opts = opts.predicate(move |o| {
            labels.matches(&o.labels) && fields.matches(&|f| o.field(f).map(str::to_owned))
        });
        Ok(self.store.list(opts).await.map_err(store_error)?.items)
    }
}

/// Asks the API's authorizer whether the caller may `verb` the resource.
async fn authorize(
    service: &Service,
    user: Option<&User>,
    info: &ResourceInfo,
    verb: &str,
    namespace: Option<&str>,
    name: Option<&str>,
) -> Result<(), ApiError> {
    let Some(authorizer) = &service.api.authorizer else {
        return Ok(());
    };
    let anonymous = User {
        name: "system:anonymous".into(),
        groups: vec!["system:unauthenticated".into()],
    };
    let read = ReadRequest {
        user: user.unwrap_or(&anonymous),
        verb,
        info,
        namespace: namespace.unwrap_or_default(),
        name: name.unwrap_or_default(),
        subresource: None,
        field_selector: None,
    };
    authorizer.authorize_read(&read).await
}

/// The NodeMetrics of a Node, if its usage is known.
fn node_metrics(storage: &Shared, node: &StoredObject) -> Option<Value> {
    let usage = storage.read().node(&node.key.name)?;
    let mut doc = metrics_object("NodeMetrics", node, usage.timestamp_ms, usage.window_ms);
    doc["usage"] = usage_json(&usage);
    Some(doc)
}

/// The PodMetrics of a Pod, if its usage is known.
fn pod_metrics(pods: &BTreeMap<(String, String), PodUsage>, pod: &StoredObject) -> Option<Value> {
    let usage = pods.get(&(pod.key.namespace.clone(), pod.key.name.clone()))?;
    let mut doc = metrics_object("PodMetrics", pod, usage.timestamp_ms, usage.window_ms);
    let containers: Vec<Value> = usage
        .containers
        .iter()
        .map(|(name, u)| json!({ "name": name, "usage": usage_json(u) }))
        .collect();
    doc["containers"] = json!(containers);
    Some(doc)
}

/// A metrics object named and labelled as `of`.
fn metrics_object(kind: &str, of: &StoredObject, timestamp_ms: i64, window_ms: i64) -> Value {
    let mut metadata = json!({
        "name": of.key.name,
        "creationTimestamp": apimachinery::time::now_rfc3339(),
    });
    if !of.key.namespace.is_empty() {
        metadata["namespace"] = json!(of.key.namespace);
    }
    if !of.labels.is_empty() {
        metadata["labels"] = json!(of.labels);
    }
    json!({
        "kind": kind,
        "apiVersion": format!("{GROUP}/{VERSION}"),
        "metadata": metadata,
        "timestamp": apimachinery::time::format_rfc3339(timestamp_ms.div_euclid(1000)),
        "window": go_duration(window_ms),
    })
}

/// `{"cpu": "<n>n", "memory": "<n>Ki"}`.
fn usage_json(u: &Usage) -> Value {
    json!({ "cpu": cpu_quantity(u.cpu_nanocores), "memory": memory_quantity(u.memory_bytes) })
}

/// Nanocores, as metrics-server writes them (`12345n`).
fn cpu_quantity(nanocores: u64) -> String {
    format!("{nanocores}n")
}

/// Bytes in `Ki` when whole kibibytes (the kubelet's working sets are pages), else bytes.
fn memory_quantity(bytes: u64) -> String {
    if bytes.is_multiple_of(1024) {
        format!("{}Ki", bytes / 1024)
    } else {
        bytes.to_string()
    }
}

/// Milliseconds as a Go `time.Duration` string (`15.012s`, `1m0.5s`, `0s`).
fn go_duration(ms: i64) -> String {
    if ms <= 0 {
        return "0s".into();
    }
    let (h, m) = (ms / 3_600_000, ms / 60_000 % 60);
    let (s, frac) = (ms / 1000 % 60, ms % 1000);
    let seconds = if frac == 0 {
        format!("{s}s")
    } else {
        let frac = format!("{frac:03}");
        format!("{s}.{}s", frac.trim_end_matches('0'))
    };
    match (h, m) {
        (0, 0) => seconds,
        (0, m) => format!("{m}m{seconds}"),
        (h, m) => format!("{h}h{m}m{seconds}"),
    }
}

fn store_error(e: objstore::StoreError) -> ApiError {
    ApiError::internal(e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_under_the_group_version_are_the_two_resources_or_unknown() {
        let p = |s: &str| target(&format!("/apis/metrics.k8s.io/v1beta1{s}"));
        assert_eq!(p("/"), None);
        assert_eq!(p(""), None);
        assert_eq!(target("/apis/metrics.k8s.io"), None);
        assert_eq!(target("/api/v1/nodes"), None);
        assert_eq!(p("/nodes"), Some(Target::Nodes { name: None }));
        assert_eq!(
            p("/nodes/n1"),
            Some(Target::Nodes {
                name: Some("n1".into())
            })
        );
        let pods = |namespace: Option<&str>, name: Option<&str>| {
            Some(Target::Pods {
                namespace: namespace.map(Into::into),
                name: name.map(Into::into),
            })
        };
        assert_eq!(p("/pods"), pods(None, None));
        assert_eq!(p("/namespaces/default/pods"), pods(Some("default"), None));
        assert_eq!(
            p("/namespaces/default/pods/w"),
            pods(Some("default"), Some("w"))
        );
        assert_eq!(p("/nodes/n1/status"), Some(Target::Unknown));
        assert_eq!(p("/namespaces/default"), Some(Target::Unknown));
    }

    #[test]
    fn quantities_and_windows_read_as_metrics_server_writes_them() {
        assert_eq!(cpu_quantity(12_345), "12345n");
        assert_eq!(memory_quantity(2_097_152), "2048Ki");
        assert_eq!(memory_quantity(1000), "1000");
        assert_eq!(go_duration(15_012), "15.012s");
        assert_eq!(go_duration(10_500), "10.5s");
        assert_eq!(go_duration(60_500), "1m0.5s");
        assert_eq!(go_duration(15_000), "15s");
        assert_eq!(go_duration(0), "0s");
    }
}
