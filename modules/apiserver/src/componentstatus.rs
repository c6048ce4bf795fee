//! `componentstatuses` (core/v1 ComponentStatus, deprecated since 1.19 and still served by
//! kube-apiserver: `kubectl get cs`): `scheduler`, `controller-manager` and `etcd-0`, each
//! with a `Healthy` condition computed on every read, never stored, as the review APIs are
//! answered without storage. The scheduler and the controllers report through the probes
//! cloudcore registers ([`Components::register`]); `etcd-0` is the object store, healthy
//! when it reads and its last write did not fail. Only get and list are served, each with
//! kube's deprecation `Warning` header; anything else is a 405.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

use apimachinery::table::{self, IncludeObject};
use apimachinery::{ApiError, ResourceInfo};
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, Response, StatusCode, header};
use axum::middleware::Next;
use kapi::{Api, ReadRequest, User};
use serde_json::{Value, json};

use crate::serve::json_response;

/// The collection's path.
const PATH: &str = "/api/v1/componentstatuses";
/// kube-apiserver's warning on every ComponentStatus read.
const WARNING: &str = "299 - \"v1 ComponentStatus is deprecated in v1.19+\"";
/// The components, in kube's order.
pub const SCHEDULER: &str = "scheduler";
pub const CONTROLLER_MANAGER: &str = "controller-manager";
const ETCD: &str = "etcd-0";

/// A health check: `Ok` when healthy, else why not.
pub type Probe = Arc<dyn Fn() -> Result<(), String> + Send + Sync>;

/// The health probes of the components that run beside the API server (cheap to clone).
#[derive(Clone, Default)]
pub struct Components {
    probes: Arc<RwLock<BTreeMap<String, Probe>>>,
}

/// What the componentstatuses routes need.
#[derive(Clone)]
pub(crate) struct Service {
    pub(crate) api: Api,
    pub(crate) components: Components,
}

// === impl Components ===

impl Components {
    /// Reports `component` (`scheduler`, `controller-manager`) healthy when `probe` says so.
    pub fn register(&self, component: &str, probe: Probe) {
        let mut probes = self.probes.write().unwrap_or_else(|e| e.into_inner());
        probes.insert(component.to_string(), probe);
    }

    fn check(&self, component: &str) -> Result<(), String> {
        let probes = self.probes.read().unwrap_or_else(|e| e.into_inner());
        match probes.get(component) {
            Some(probe) => probe(),
            None => Err(format!("no {component} runs with this control plane")),
        }
    }
}

/// Answers requests for `componentstatuses`; passes everything else on.
pub(crate) async fn serve(
    State(service): State<Service>,
    req: Request,
    next: Next,
) -> Response<Body> {
    let Some(name) = target(req.uri().path()) else {
        return next.run(req).await;
    };
    let asked = Asked {
        name: name.to_string(),
        method: req.method().clone(),
        query: req.uri().query().unwrap_or_default().to_string(),
        table: req
            .headers()
            .get(header::ACCEPT)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|a| a.contains("as=Table")),
        user: req.extensions().get::<User>().cloned(),
    };
    drop(req);
    let answer = answer(&service, &asked).await;
    let mut resp = match answer {
        Ok(body) => json_response(StatusCode::OK, &body),
        Err(e) => json_response(
            StatusCode::from_u16(e.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
            &e.to_status(),
        ),
    };
    resp.headers_mut()
        .insert(header::WARNING, HeaderValue::from_static(WARNING));
    resp
}

/// The object name a path asks for (`""`: the collection), if it is a componentstatuses path.
fn target(path: &str) -> Option<&str> {
    let rest = path.strip_prefix(PATH)?;
    match rest.strip_prefix('/') {
        None if rest.is_empty() => Some(""),
        Some(name) if !name.is_empty() && !name.contains('/') => Some(name),
        _ => None,
    }
}

/// What a request asks, taken from it.
struct Asked {
    /// The object (`""`: the collection).
    name: String,
    method: Method,
    query: String,
    /// `Accept` asks for a `meta.k8s.io/v1` Table.
    table: bool,
    user: Option<User>,
}

async fn answer(service: &Service, asked: &Asked) -> Result<Value, ApiError> {
    let (name, query) = (asked.name.as_str(), asked.query.as_str());
    let info = service
        .api
        .registry
        .all()
        .into_iter()
        .find(|i| i.group.is_empty() && i.plural == "componentstatuses")
        .ok_or_else(|| ApiError::internal("componentstatuses are not in the catalog"))?;
    let watching = query
        .split('&')
        .any(|p| p == "watch=true" || p == "watch=1" || p == "watch");
    if asked.method != Method::GET || watching {
        let verb = if watching {
            "watch"
        } else {
            asked.method.as_str()
        };
        return Err(ApiError::method_not_supported(verb, &info.plural));
    }
    let verb = if name.is_empty() { "list" } else { "get" };
    authorize(service, asked.user.as_ref(), &info, verb, name).await?;
    let statuses = statuses(&service.api.store, &service.components);
    let chosen: Vec<Value> = match name {
        "" => statuses,
        name => {
            let one = statuses.into_iter().find(|s| s["metadata"]["name"] == name);
            vec![one.ok_or_else(|| ApiError::not_found("", &info.plural, name))?]
        }
    };
    if asked.table {
        let now = apimachinery::time::now_unix();
        return Ok(table::render(&info, &chosen, include_object(query), now));
    }
    Ok(match name {
        "" => json!({"kind": "ComponentStatusList", "apiVersion": "v1", "metadata": {},
                     "items": chosen}),
        _ => chosen.into_iter().next().unwrap_or_default(),
    })
}

async fn authorize(
    service: &Service,
    user: Option<&User>,
    info: &ResourceInfo,
    verb: &str,
    name: &str,
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
        namespace: "",
        name,
        subresource: None,
        field_selector: None,
    };
    authorizer.authorize_read(&read).await
}

/// The three components as kube-apiserver lists them.
fn statuses(store: &objstore::Store, components: &Components) -> Vec<Value> {
    let etcd = match store.write_failure() {
        None => Ok(()),
        Some(e) => Err(format!("the object store cannot write: {e}")),
    };
    [
        (SCHEDULER, components.check(SCHEDULER), "ok"),
        (
            CONTROLLER_MANAGER,
            components.check(CONTROLLER_MANAGER),
            "ok",
        ),
        (ETCD, etcd, "{\"health\":\"true\",\"reason\":\"\"}"),
    ]
    .into_iter()
    .map(|(name, health, ok)| component_status(name, health, ok))
    .collect()
}

/// One ComponentStatus: `Healthy` True with `ok_message`, or False with the error.
fn component_status(name: &str, health: Result<(), String>, ok_message: &str) -> Value {
    let condition = match health {
        Ok(()) => json!({"type": "Healthy", "status": "True", "message": ok_message}),
        Err(why) => json!({"type": "Healthy", "status": "False", "error": why}),
    };
    json!({"kind": "ComponentStatus", "apiVersion": "v1",
           "metadata": {"name": name}, "conditions": [condition]})
}

fn include_object(query: &str) -> IncludeObject {
    query
        .split('&')
        .find_map(|p| p.strip_prefix("includeObject="))
        .and_then(IncludeObject::from_query)
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_collection_and_its_objects_are_componentstatuses_paths() {
        assert_eq!(target("/api/v1/componentstatuses"), Some(""));
        assert_eq!(target("/api/v1/componentstatuses/etcd-0"), Some("etcd-0"));
        assert_eq!(target("/api/v1/componentstatuses/etcd-0/status"), None);
        assert_eq!(target("/api/v1/componentstatusesx"), None);
        assert_eq!(target("/api/v1/pods"), None);
    }

    #[test]
    fn a_component_without_a_probe_is_unhealthy_and_a_failing_probe_says_why() {
        let components = Components::default();
        assert!(components.check(SCHEDULER).is_err());
        components.register(SCHEDULER, Arc::new(|| Ok(())));
        components.register(CONTROLLER_MANAGER, Arc::new(|| Err("stopped".into())));
        assert!(components.check(SCHEDULER).is_ok());
        let status = component_status(
            CONTROLLER_MANAGER,
            components.check(CONTROLLER_MANAGER),
            "ok",
        );
        assert_eq!(
            status["conditions"][0],
            json!({"type": "Healthy", "status": "False", "error": "stopped"})
        );
    }
}
