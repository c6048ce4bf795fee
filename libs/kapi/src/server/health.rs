//! `/healthz`, `/livez` and `/readyz`, as kube-apiserver writes them: `ok` (200, plain text)
//! when every check passes; with `?verbose`, a `[+]<check> ok` line per check and
//! `<endpoint> check passed`; a failing check is `[-]<check> failed: reason withheld` and the
//! whole answer a 500 ending in `<endpoint> check failed`, verbose or not. `?exclude=<check>`
//! skips a check; `/<endpoint>/<check>` runs one (404 for a check the endpoint does not
//! have).
//!
//! Only checks this plane really performs are listed: `ping` (the server answers), `log` (a
//! log line can be written), `etcd` and, for readiness, `etcd-readiness` (the object store
//! answers a read), and `poststarthook/crd-informer-synced` (every stored
//! CustomResourceDefinition's resources are served; once true, true for good, as kube's
//! post-start hook).

use apimachinery::ApiError;
use axum::body::Body;
use axum::http::header::{CONTENT_TYPE, HeaderValue};
use axum::http::{Response, StatusCode};
use objstore::{ListOptions, ObjKey};
use serde_json::Value;

use super::error::not_found_path;
use super::query::Params;
use crate::Api;

/// The three health endpoints.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Endpoint {
    Healthz,
    Livez,
    Readyz,
}

/// One check.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Check {
    Ping,
    Log,
    Etcd,
    EtcdReadiness,
    CrdsServed,
}

/// Where the CustomResourceDefinitions are stored.
const CRD_RESOURCE: &str = "customresourcedefinitions.apiextensions.k8s.io";

// === impl Endpoint ===

impl Endpoint {
    /// The endpoint a path's first segment names.
    pub(crate) fn from_segment(segment: &str) -> Option<Endpoint> {
        match segment {
            "healthz" => Some(Endpoint::Healthz),
            "livez" => Some(Endpoint::Livez),
            "readyz" => Some(Endpoint::Readyz),
            _ => None,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Endpoint::Healthz => "healthz",
            Endpoint::Livez => "livez",
            Endpoint::Readyz => "readyz",
        }
    }

    fn checks(self) -> &'static [Check] {
        match self {
            Endpoint::Healthz | Endpoint::Livez => {
                &[Check::Ping, Check::Log, Check::Etcd, Check::CrdsServed]
            }
            Endpoint::Readyz => &[
                Check::Ping,
                Check::Log,
                Check::Etcd,
                Check::EtcdReadiness,
                Check::CrdsServed,
            ],
        }
    }
}

// === impl Check ===

impl Check {
    fn name(self) -> &'static str {
        match self {
            Check::Ping => "ping",
            Check::Log => "log",
            Check::Etcd => "etcd",
            Check::EtcdReadiness => "etcd-readiness",
            Check::CrdsServed => "poststarthook/crd-informer-synced",
        }
    }

    async fn run(self, api: &Api) -> Result<(), String> {
        match self {
            Check::Ping => Ok(()),
            Check::Log => {
                tracing::trace!("health check: log");
                Ok(())
            }
            Check::Etcd | Check::EtcdReadiness => {
                let key = ObjKey::new("namespaces", "", "default");
                api.store
                    .get(&key)
                    .await
                    .map(|_| ())
                    .map_err(|e| e.to_string())
            }
            Check::CrdsServed => crds_served(api).await,
        }
    }
}

/// Answers `/<endpoint>` (no `check`) or `/<endpoint>/<check>`.
pub(crate) async fn serve(
    api: &Api,
    endpoint: Endpoint,
    check: Option<&str>,
    params: &Params,
) -> Result<Response<Body>, ApiError> {
    let checks = endpoint.checks();
    if let Some(name) = check {
        let check = checks
            .iter()
            .find(|c| c.name() == name)
            .ok_or_else(not_found_path)?;
        return Ok(match check.run(api).await {
            Ok(()) => text(StatusCode::OK, "ok".to_owned()),
            Err(e) => text(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("internal server error: {e}\n"),
            ),
        });
    }
    let excluded: Vec<&str> = params.all("exclude").collect();
    let mut lines = String::new();
    let mut failed = false;
    for check in checks {
        if excluded.contains(&check.name()) {
            lines.push_str(&format!("[+]{} excluded: ok\n", check.name()));
            continue;
        }
        match check.run(api).await {
            Ok(()) => lines.push_str(&format!("[+]{} ok\n", check.name())),
            Err(e) => {
                tracing::warn!(check = check.name(), error = %e, "{} check failed", endpoint.name());
                lines.push_str(&format!("[-]{} failed: reason withheld\n", check.name()));
                failed = true;
            }
        }
    }
    let unknown: Vec<String> = excluded
        .iter()
        .filter(|e| !checks.iter().any(|c| c.name() == **e))
        .map(|e| format!("{e:?}"))
        .collect();
    if !unknown.is_empty() {
        lines.push_str(&format!(
            "warn: some health checks cannot be excluded: no matches for {}\n",
            unknown.join(",")
        ));
    }
    let name = endpoint.name();
    Ok(if failed {
        text(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("{lines}{name} check failed\n"),
        )
    } else if params.get("verbose").is_some() {
        text(StatusCode::OK, format!("{lines}{name} check passed\n"))
    } else {
        text(StatusCode::OK, "ok".to_owned())
    })
}

/// Every stored CRD's stored version is among the served resources.
/// Like kube-apiserver's post-start hook, it passes for good once it has passed: a CRD created
/// later is not served for a moment, and that must not fail liveness.
async fn crds_served(api: &Api) -> Result<(), String> {
    if api.registry.crds_synced() {
        return Ok(());
    }
    let listed = api
        .store
        .list(ListOptions::new(CRD_RESOURCE))
        .await
        .map_err(|e| e.to_string())?;
    for stored in &listed.items {
        let Ok(crd) = serde_json::from_slice::<Value>(&stored.value) else {
            continue;
        };
        let group = crd.pointer("/spec/group").and_then(Value::as_str);
        let plural = crd.pointer("/spec/names/plural").and_then(Value::as_str);
        let version = crd
            .pointer("/spec/versions")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .find(|v| v["served"] == true)
            .and_then(|v| v["name"].as_str());
        if let (Some(g), Some(p), Some(v)) = (group, plural, version)
            && api.registry.get(g, v, p).is_none()
        {
            return Err(format!("{p}.{g}/{v} is not served yet"));
        }
    }
    api.registry.mark_crds_synced();
    Ok(())
}

/// A plain-text answer, as kube-apiserver's health handlers write it.
fn text(code: StatusCode, body: String) -> Response<Body> {
    let mut resp = Response::new(Body::from(body));
    *resp.status_mut() = code;
    let headers = resp.headers_mut();
    headers.insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    headers.insert(
        "x-content-type-options",
        HeaderValue::from_static("nosniff"),
    );
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    fn crd(plural: &str) -> objstore::NewObject {
        let value = serde_json::json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": format!("{plural}.example.com")},
            "spec": {"group": "example.com", "names": {"plural": plural, "kind": "W"},
                     "scope": "Namespaced", "versions": [{"name": "v1", "served": true}]},
        });
        objstore::NewObject {
            uid: plural.into(),
            resource_version: String::new(),
            labels: Default::default(),
            fields: Default::default(),
            value: serde_json::to_vec(&value).unwrap().into(),
        }
    }

    fn key(plural: &str) -> ObjKey {
        ObjKey {
            resource: CRD_RESOURCE.into(),
            namespace: String::new(),
            name: format!("{plural}.example.com"),
        }
    }

    #[tokio::test]
    async fn crds_served_waits_for_the_crds_stored_at_start_then_passes_for_good() {
        let dir = tempfile::tempdir().unwrap();
        let (api, store) = crate::local::admin_api(&dir.path().join("s.db"))
            .await
            .unwrap();
        // A CRD stored before the first check and not served: the check fails.
        store.put(key("widgets"), crd("widgets")).await.unwrap();
        let failed = crds_served(&api).await.unwrap_err();
        assert!(failed.contains("widgets.example.com/v1"), "{failed}");
        store.delete(&key("widgets")).await.unwrap();
        crds_served(&api).await.unwrap();
        // Once it passed, a CRD created later and not served yet does not fail it.
        store.put(key("gadgets"), crd("gadgets")).await.unwrap();
        crds_served(&api).await.unwrap();
    }

    #[tokio::test]
    async fn crds_served_passes_from_the_start_once_the_stored_crds_are_registered() {
        let dir = tempfile::tempdir().unwrap();
        let (api, store) = crate::local::admin_api(&dir.path().join("s.db"))
            .await
            .unwrap();
        crate::local::register_existing_crds(&store.reader(), &api.registry)
            .await
            .unwrap();
        // A CRD stored after start, before the first check and not served yet: still live.
        store.put(key("gadgets"), crd("gadgets")).await.unwrap();
        crds_served(&api).await.unwrap();
    }
}
