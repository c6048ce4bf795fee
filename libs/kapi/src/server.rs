//! The HTTP surface: routes, query parameters, content negotiation, watch streams.
//!
//! Every request goes through one handler: [`path`] turns the URL into a [`path::Route`],
//! discovery and OpenAPI documents are built from the registry on each request (CRDs come and
//! go), and resource requests are resolved against the registry, checked for the verb, and
//! handed to [`read`], [`watch`] or [`write`]. Every error leaves as a `Status` body
//! ([`error`]).
//!
//! Choices where Kubernetes leaves room (details in each module):
//! - Discovery answers in the aggregated `apidiscovery.k8s.io/v2` form when the `Accept`
//!   header asks for it before plain JSON, labelled with its own content type; otherwise the
//!   legacy documents.
//! - OpenAPI v2 and v3 carry every served kind's schema ([`openapi`]).
//! - Lists: `Exact` of anything but the current revision is 410; continue tokens read the
//!   current state after the last key and report the first page's revision, and are 410 once
//!   older than the change log ([`read`]).
//! - Watches: a too-old or too-new resourceVersion is an in-stream 410 ERROR; streaming lists
//!   (`sendInitialEvents`) are implemented; bookmarks never claim more than was delivered;
//!   `as=Table` and metadata-only forms apply to watch events too ([`watch`]).
//! - Only JSON bodies: protobuf is 415 with a message naming the client setting (but for the
//!   reviews and CSR approvals kubectl's typed clients send); an `Accept` without a JSON
//!   alternative is 406.
//! - `/healthz`, `/livez`, `/readyz` run only the checks this plane performs ([`health`]).
//! - `scale` is computed from its parent on each read; the kubelet streams (`pods/log`,
//!   `exec`, `attach`, `portforward`, `nodes/proxy`) are sent to the node's kubelet API over
//!   the router's [`crate::nodes::NodeDialer`] ([`streams`]), and without one answer as
//!   kube-apiserver does when it cannot dial the kubelet ([`subresource`]). The `proxy`
//!   subresources of pods, Services and nodes are proxied to the pod's (or node's) address
//!   when the router has a [`ProxyConfig`] ([`proxy`]), and authorized as the verb each
//!   method means.
//! - Resource requests need a user (the request's [`User`] or the default), else 401;
//!   discovery, `/version` and OpenAPI do not, but when there is a user and an
//!   [`crate::Authorizer`], it is asked about the path first. Reads (get, list, watch, and
//!   subresources read as their parent) are put to the API's [`crate::Authorizer`] first, when
//!   it has one. A user in `system:unauthenticated` does not count as an authenticated
//!   connection.

mod discovery;
mod error;
mod health;
mod manager;
mod metrics;
mod negotiate;
mod openapi;
mod order;
mod path;
mod proxy;
mod query;
mod read;
mod render;
mod select;
pub(crate) mod streams;
mod subresource;
mod token;
mod watch;
mod write;

use std::sync::Arc;

use apimachinery::selector::FieldSelector;
use apimachinery::{ApiError, ResourceInfo};
use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::Method;
use axum::http::request::Parts;
use axum::response::{IntoResponse, Response};

use crate::{Api, ReadRequest, User};
use error::ErrorResponse;
use path::{ResourcePath, Route};
pub use proxy::{ProxyConfig, with_proxy};
use query::Params;
pub use render::bad_objects_skipped;
pub(crate) use render::stored_json;

/// The Kubernetes REST routes over `api`: `/version`, `/api`, `/apis`, discovery, OpenAPI v3,
/// and every resource path with its verbs and subresources. The caller adds authentication
/// (a [`crate::User`] request extension) and TLS.
pub fn router(api: Api) -> Router {
    Router::new().fallback(handle).with_state(api)
}

/// [`router`] that also keeps kube-apiserver's request, watch and storage metrics and serves
/// them at `/metrics` (to whom the authorizer lets `get` that non-resource URL).
pub fn metered_router(api: Api) -> Router {
    let metrics: metrics::Shared = Arc::new(metrics::Metrics::new());
    router(api).layer(axum::Extension(metrics))
}

/// Whether a request for `uri` is a watch (`?watch=true`, or under the legacy `/watch/` prefix).
pub(crate) fn is_watch(uri: &axum::http::Uri) -> bool {
    let legacy = matches!(path::parse(uri.path()), Ok(Route::Resource(raw)) if raw.watch_prefix);
    legacy || Params::parse(uri.query()).flag("watch").unwrap_or(false)
}

/// An error as its `Status` response.
pub(crate) fn error_response(e: ApiError) -> Response {
    ErrorResponse(e).into_response()
}

/// A resource request resolved against the registry.
#[derive(Debug)]
pub(crate) struct Target {
    pub(crate) info: Arc<ResourceInfo>,
    /// `None`: cluster-scoped, or a namespaced resource across all namespaces.
    pub(crate) namespace: Option<String>,
    pub(crate) name: Option<String>,
    pub(crate) subresource: Option<String>,
    /// Came in under the legacy `/watch/` prefix.
    pub(crate) watch_prefix: bool,
}

async fn handle(State(api): State<Api>, req: Request) -> Response {
    let Some(metrics) = req.extensions().get::<metrics::Shared>().cloned() else {
        return answer(api, req).await;
    };
    let info = metrics::RequestInfo::of(&req);
    let kind = info
        .is_watch()
        .then(|| watched_kind(&api, req.uri().path()))
        .flatten();
    let _inflight = metrics.start(&info);
    let started = std::time::Instant::now();
    let resp = if req.uri().path() == "/metrics" {
        serve_metrics(&api, &metrics, req).await
    } else {
        answer(api, req).await
    };
    metrics.finish(&info, kind, started.elapsed(), resp)
}

/// The kind a watch path names, if it resolves.
fn watched_kind(api: &Api, path: &str) -> Option<String> {
    let Ok(Route::Resource(raw)) = path::parse(path) else {
        return None;
    };
    let target = path::resolve(&api.registry, raw).ok()?;
    Some(target.info.kind.clone())
}

/// `GET /metrics`, for whom the authorizer lets read it.
async fn serve_metrics(api: &Api, metrics: &metrics::Metrics, req: Request) -> Response {
    let (parts, _) = req.into_parts();
    if let Err(e) = authorize_non_resource(api, &parts).await {
        return error_response(e);
    }
    if let Err(e) = only_get(&parts.method, "metrics") {
        return error_response(e);
    }
    metrics.render(&api.store).await
}

async fn answer(api: Api, req: Request) -> Response {
    let (parts, body) = req.into_parts();
    // An anonymous caller (group `system:unauthenticated`) has not authenticated its connection.
    let has_user = parts
        .extensions
        .get::<User>()
        .is_some_and(|u| !u.groups.iter().any(|g| g == "system:unauthenticated"))
        || api.default_user.is_some();
    if let Some(connection) = parts
        .extensions
        .get::<crate::Connection>()
        .filter(|_| has_user)
    {
        connection.authenticated();
    }
    match serve(&api, parts, body).await {
        Ok(resp) => resp,
        Err(e) => ErrorResponse(e).into_response(),
    }
}

async fn serve(api: &Api, parts: Parts, body: Body) -> Result<Response, ApiError> {
    let route = path::parse(parts.uri.path())?;
    let params = Params::parse(parts.uri.query());
    if !matches!(route, Route::Resource(_)) {
        authorize_non_resource(api, &parts).await?;
    }
    match route {
        Route::Resource(raw) => resource(api, raw, parts, params, body).await,
        Route::Health { endpoint, check } => {
            only_get(&parts.method, "health checks")?;
            health::serve(api, endpoint, check.as_deref(), &params).await
        }
        Route::OpenApiV2 | Route::OpenApiRoot | Route::OpenApiGroupVersion(_) => {
            only_get(&parts.method, "openapi")?;
            openapi::serve(api, &route, parts.uri.query(), &parts.headers).await
        }
        route => {
            only_get(&parts.method, "discovery")?;
            discovery::serve(api, &route, &parts.headers)
        }
    }
}

/// A request for a resource, one of its objects, or a subresource.
async fn resource(
    api: &Api,
    raw: ResourcePath,
    parts: Parts,
    params: Params,
    body: Body,
) -> Result<Response, ApiError> {
    let target = path::resolve(&api.registry, raw)?;
    let user = user_of(api, &parts)?;
    let info = &target.info;
    let has_name = target.name.is_some();
    // Protobuf for the kinds that have it (built-in ones), JSON for the rest.
    let protobuf = kpb::supports(&info.api_version(), &info.kind);
    let watching = target.watch_prefix || params.flag("watch").unwrap_or(false);
    match (&parts.method, has_name, target.subresource.as_deref()) {
        (&Method::GET, _, None) if watching => {
            authorize_read(api, &user, "watch", &target, &params).await?;
            require_verb(info, "watch")?;
            let output = negotiate::output(&parts.headers, protobuf)?;
            watch::serve(api, &target, &params, output).await
        }
        (_, _, _) if target.watch_prefix => Err(ApiError::method_not_supported(
            parts.method.as_str(),
            &info.plural,
        )),
        (&Method::GET, false, None) => {
            authorize_read(api, &user, "list", &target, &params).await?;
            require_verb(info, "list")?;
            let output = negotiate::output(&parts.headers, protobuf)?;
            read::list(api, &target, &params, output).await
        }
        (&Method::GET, true, None) => {
            authorize_read(api, &user, "get", &target, &params).await?;
            require_verb(info, "get")?;
            let output = negotiate::output(&parts.headers, protobuf)?;
            read::get(api, &target, &params, output).await
        }
        (&Method::GET, true, Some("scale")) => {
            authorize_read(api, &user, "get", &target, &params).await?;
            negotiate::output(&parts.headers, protobuf)?;
            subresource::get_scale(api, &target).await
        }
        (method, true, Some("proxy")) => {
            authorize_read(api, &user, &proxy::verb(method), &target, &params).await?;
            proxy::serve(api, &target, parts, body).await
        }
        (method, true, Some(sub)) if subresource::is_tunnel(sub, method) => {
            for verb in subresource::stream_verbs(sub, method) {
                authorize_read(api, &user, verb, &target, &params).await?;
            }
            subresource::tunnel(api, &target, &params, parts, body).await
        }
        (&Method::GET, true, Some(sub)) if subresource::reads_parent(sub) => {
            authorize_read(api, &user, "get", &target, &params).await?;
            let output = negotiate::output(&parts.headers, protobuf)?;
            read::get(api, &target, &params, output).await
        }
        (method, _, _) => {
            // A write answers with the kind it returns (a Status, a Scale...) in protobuf when
            // that kind has a protobuf form, else in JSON.
            let output = negotiate::output(&parts.headers, true)?;
            let verb = write_verb(method, &target)
                .ok_or_else(|| ApiError::method_not_supported(method.as_str(), &info.plural))?;
            let write = write::Write {
                api,
                target: &target,
                user: &user,
                params: &params,
                headers: &parts.headers,
                output,
            };
            write.serve(verb, body).await
        }
    }
}

/// Asks the API's [`crate::Authorizer`], if it has one, whether `user` may make this read.
async fn authorize_read(
    api: &Api,
    user: &User,
    verb: &str,
    target: &Target,
    params: &Params,
) -> Result<(), ApiError> {
    let Some(authorizer) = &api.authorizer else {
        return Ok(());
    };
    let field_selector = params
        .get("fieldSelector")
        .and_then(|s| FieldSelector::parse(s).ok());
    let req = ReadRequest {
        user,
        verb,
        info: &target.info,
        namespace: target.namespace.as_deref().unwrap_or(""),
        name: target.name.as_deref().unwrap_or(""),
        subresource: target.subresource.as_deref(),
        field_selector: field_selector.as_ref(),
    };
    authorizer.authorize_read(&req).await
}

/// Asks the API's [`crate::Authorizer`], if it has one, whether the caller may fetch this
/// non-resource path (verb: the lowercase method). A request with no user is not asked about.
async fn authorize_non_resource(api: &Api, parts: &Parts) -> Result<(), ApiError> {
    let (Some(authorizer), Ok(user)) = (&api.authorizer, user_of(api, parts)) else {
        return Ok(());
    };
    let verb = parts.method.as_str().to_ascii_lowercase();
    authorizer
        .authorize_non_resource(&user, &verb, parts.uri.path())
        .await
}

/// The write verb an HTTP method means on this target, if the resource serves it.
fn write_verb(method: &Method, target: &Target) -> Option<write::Verb> {
    let info = &target.info;
    let all_namespaces = info.namespaced && target.namespace.is_none();
    let verb = match (method, target.name.is_some(), target.subresource.as_deref()) {
        (&Method::POST, false, None) if !all_namespaces => write::Verb::Create,
        (&Method::DELETE, false, None) if !all_namespaces => write::Verb::DeleteCollection,
        (&Method::PUT, true, _) => write::Verb::Update,
        (&Method::PATCH, true, _) => write::Verb::Patch,
        (&Method::DELETE, true, None) => write::Verb::Delete,
        (&Method::POST, true, Some(_)) => write::Verb::Create,
        _ => return None,
    };
    let allowed = match target.subresource.as_deref() {
        None => info.verbs.iter().any(|v| v == verb.as_str()),
        Some(sub) => subresource::spec(sub).verbs.contains(&verb.as_str()),
    };
    allowed.then_some(verb)
}

fn require_verb(info: &ResourceInfo, verb: &str) -> Result<(), ApiError> {
    if info.verbs.iter().any(|v| v == verb) {
        Ok(())
    } else {
        Err(ApiError::method_not_supported(verb, &info.plural))
    }
}

fn only_get(method: &Method, what: &str) -> Result<(), ApiError> {
    if method == Method::GET {
        Ok(())
    } else {
        Err(ApiError::method_not_supported(method.as_str(), what))
    }
}

/// The caller: the request's [`User`] extension, else the API's default user, else 401.
fn user_of(api: &Api, parts: &Parts) -> Result<User, ApiError> {
    parts
        .extensions
        .get::<User>()
        .cloned()
        .or_else(|| api.default_user.clone())
        .ok_or_else(ApiError::unauthorized)
}
