//! `/metrics`: the request, watch and storage figures kube-apiserver exports (Prometheus /
//! OpenMetrics text), for the routes made by [`crate::metered_router`].
//!
//! Each request is counted once it is answered (`apiserver_request_total`, by kube's labels)
//! and, unless long-running, timed (`apiserver_request_duration_seconds`, kube's buckets);
//! requests in flight are gauged by kind (`readOnly`/`mutating`), watches by group, version
//! and kind while their stream is open. `apiserver_storage_objects` is counted from the store
//! when scraped. Who may read it is the authorizer's call (the non-resource URL
//! `get /metrics`).

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Method, Request, StatusCode};
use axum::response::Response;
use futures::StreamExt;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use super::path::{self, Route};
use super::query::Params;
use super::render;

/// kube-apiserver's buckets for `apiserver_request_duration_seconds`.
const DURATION_BUCKETS: &[f64] = &[
    0.005, 0.025, 0.05, 0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 1.25, 1.5, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0,
    10.0, 15.0, 20.0, 30.0, 45.0, 60.0,
];

/// The media type of the text served.
const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The API server's metrics (one per router).
pub(crate) struct Metrics {
    registry: Registry,
    requests: Family<RequestLabels, Counter>,
    durations: Family<DurationLabels, Histogram, fn() -> Histogram>,
    longrunning: Family<DurationLabels, Gauge>,
    watchers: Family<WatchLabels, Gauge>,
    inflight: Family<InflightLabels, Gauge>,
    objects: Family<ObjectLabels, Gauge>,
}

/// What a request was, in kube's metric labels.
#[derive(Clone, Debug, Default)]
pub(crate) struct RequestInfo {
    verb: &'static str,
    group: String,
    version: String,
    resource: String,
    subresource: String,
    scope: &'static str,
    long_running: bool,
    mutating: bool,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    verb: String,
    group: String,
    version: String,
    resource: String,
    subresource: String,
    scope: String,
    component: String,
    code: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DurationLabels {
    verb: String,
    group: String,
    version: String,
    resource: String,
    subresource: String,
    scope: String,
    component: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WatchLabels {
    group: String,
    version: String,
    kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct InflightLabels {
    request_kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ObjectLabels {
    resource: String,
}

/// Decrements a gauge when dropped.
pub(crate) struct Held(Gauge);

// === impl Metrics ===

impl Metrics {
    pub(crate) fn new() -> Self {
        let mut registry = Registry::default();
        let requests = Family::<RequestLabels, Counter>::default();
        registry.register(
            "apiserver_request",
            "Counter of apiserver requests broken out for each verb, dry run value, group, version, resource, scope, component, and HTTP response code",
            requests.clone(),
        );
        let durations: Family<DurationLabels, Histogram, fn() -> Histogram> =
            Family::new_with_constructor(|| Histogram::new(DURATION_BUCKETS.iter().copied()));
        registry.register(
            "apiserver_request_duration_seconds",
            "Response latency distribution in seconds for each verb, group, version, resource, subresource, scope and component",
            durations.clone(),
        );
        let longrunning = Family::<DurationLabels, Gauge>::default();
        registry.register(
            "apiserver_longrunning_requests",
            "Gauge of all active long-running apiserver requests broken out by verb, group, version, resource, scope and component",
            longrunning.clone(),
        );
        let watchers = Family::<WatchLabels, Gauge>::default();
        registry.register(
            "apiserver_registered_watchers",
            "Number of currently registered watchers for a given resources",
            watchers.clone(),
        );
        let inflight = Family::<InflightLabels, Gauge>::default();
        registry.register(
            "apiserver_current_inflight_requests",
            "Maximal number of currently used inflight request limit of this apiserver per request kind in last second",
            inflight.clone(),
        );
        let objects = Family::<ObjectLabels, Gauge>::default();
        registry.register(
            "apiserver_storage_objects",
            "Number of stored objects at the time of last check split by kind",
            objects.clone(),
        );
        Metrics {
            registry,
            requests,
            durations,
            longrunning,
            watchers,
            inflight,
            objects,
        }
    }

    /// Counts a request in flight until the returned guard drops (long-running ones are
    /// not counted, as kube counts them apart).
    pub(crate) fn start(&self, info: &RequestInfo) -> Option<Held> {
        if info.long_running {
            return None;
        }
        let kind = if info.mutating {
            "mutating"
        } else {
            "readOnly"
        };
        let gauge = self
            .inflight
            .get_or_create(&InflightLabels {
                request_kind: kind.to_owned(),
            })
            .clone();
        gauge.inc();
        Some(Held(gauge))
    }

    /// Records an answered request; a long-running one (a watch) is gauged while its body
    /// streams, and, when `kind` is known, counted as a registered watcher.
    pub(crate) fn finish(
        &self,
        info: &RequestInfo,
        kind: Option<String>,
        elapsed: Duration,
        resp: Response,
    ) -> Response {
        let labels = info.duration_labels();
        self.requests
            .get_or_create(&RequestLabels {
                verb: labels.verb.clone(),
                group: labels.group.clone(),
                version: labels.version.clone(),
                resource: labels.resource.clone(),
                subresource: labels.subresource.clone(),
                scope: labels.scope.clone(),
                component: labels.component.clone(),
                code: resp.status().as_u16().to_string(),
            })
            .inc();
        if !info.long_running || !resp.status().is_success() {
            self.durations
                .get_or_create(&labels)
                .observe(elapsed.as_secs_f64());
            return resp;
        }
        let mut held = vec![self.hold(self.longrunning.get_or_create(&labels).clone())];
        if let Some(kind) = kind.filter(|_| info.verb == "WATCH") {
            let watch = WatchLabels {
                group: info.group.clone(),
                version: info.version.clone(),
                kind,
            };
            held.push(self.hold(self.watchers.get_or_create(&watch).clone()));
        }
        let (parts, body) = resp.into_parts();
        // The guards live as long as the body's stream.
        let stream = body.into_data_stream().map(move |frame| {
            let _ = &held;
            frame
        });
        Response::from_parts(parts, Body::from_stream(stream))
    }

    fn hold(&self, gauge: Gauge) -> Held {
        gauge.inc();
        Held(gauge)
    }

    /// The text served at `/metrics`, with the stored objects counted now.
    pub(crate) async fn render(&self, store: &objstore::Store) -> Response {
        if let Ok(keys) = store.inventory(objstore::InventoryFilter::default()).await {
            let mut counts = std::collections::BTreeMap::<String, i64>::new();
            for (key, _) in keys {
                *counts.entry(resource_label(&key.resource)).or_default() += 1;
            }
            self.objects.clear();
            for (resource, n) in counts {
                self.objects
                    .get_or_create(&ObjectLabels { resource })
                    .set(n);
            }
        }
        let mut text = String::new();
        match prometheus_client::encoding::text::encode(&mut text, &self.registry) {
            Ok(()) => render::bytes_response(StatusCode::OK, OPENMETRICS, text.into()),
            Err(e) => super::error_response(apimachinery::ApiError::internal(format!(
                "encoding metrics: {e}"
            ))),
        }
    }
}

// === impl RequestInfo ===

impl RequestInfo {
    /// The labels of a request (non-resource paths get their path as `resource`-less labels).
    pub(crate) fn of<B>(req: &Request<B>) -> Self {
        let method = req.method();
        let mutating = !matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS);
        let Ok(Route::Resource(raw)) = path::parse(req.uri().path()) else {
            return RequestInfo {
                verb: verb_of_method(method),
                scope: "",
                mutating,
                ..RequestInfo::default()
            };
        };
        let segs: Vec<&str> = raw.segments.iter().map(String::as_str).collect();
        let (namespaced, rest) = match segs.as_slice() {
            ["namespaces", _, rest @ ..] if !rest.is_empty() => (true, rest),
            all => (false, all),
        };
        let resource = rest.first().copied().unwrap_or("");
        let named = rest.len() > 1;
        let subresource = rest.get(2).copied().unwrap_or("");
        let params = Params::parse(req.uri().query());
        let watching = raw.watch_prefix || params.flag("watch").unwrap_or(false);
        let apply = req
            .headers()
            .get(axum::http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|ct| ct.starts_with("application/apply-patch"));
        let tunnel = matches!(
            subresource,
            "log" | "exec" | "attach" | "portforward" | "proxy"
        );
        let verb = match *method {
            Method::GET if watching => "WATCH",
            Method::GET if tunnel => "CONNECT",
            Method::GET if !named => "LIST",
            Method::PATCH if apply => "APPLY",
            _ if tunnel => "CONNECT",
            ref m => verb_of_method(m),
        };
        let scope = if named {
            "resource"
        } else if namespaced {
            "namespace"
        } else {
            "cluster"
        };
        RequestInfo {
            verb,
            group: raw.group.clone(),
            version: raw.version.clone(),
            resource: resource.to_owned(),
            subresource: subresource.to_owned(),
            scope,
            long_running: verb == "WATCH" || verb == "CONNECT",
            mutating,
        }
    }

    /// Whether the request is a resource request that could register a watcher.
    pub(crate) fn is_watch(&self) -> bool {
        self.verb == "WATCH"
    }

    fn duration_labels(&self) -> DurationLabels {
        DurationLabels {
            verb: self.verb.to_owned(),
            group: self.group.clone(),
            version: self.version.clone(),
            resource: self.resource.clone(),
            subresource: self.subresource.clone(),
            scope: self.scope.to_owned(),
            component: "apiserver".to_owned(),
        }
    }
}

// === impl Held ===

impl Drop for Held {
    fn drop(&mut self) {
        self.0.dec();
    }
}

fn verb_of_method(method: &Method) -> &'static str {
    match *method {
        Method::GET => "GET",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::PATCH => "PATCH",
        Method::DELETE => "DELETE",
        Method::HEAD => "HEAD",
        _ => "OTHER",
    }
}

/// kube's `resource` label: `pods`, `deployments.apps` (the store names `apps/deployments`).
fn resource_label(store_resource: &str) -> String {
    match store_resource.split_once('/') {
        Some((group, plural)) => format!("{plural}.{group}"),
        None => store_resource.to_owned(),
    }
}

/// The metrics a router keeps, as a request extension.
pub(crate) type Shared = Arc<Metrics>;
