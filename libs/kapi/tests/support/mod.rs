//! Test harness: a store in a temp dir, the built-in registry plus one custom resource, a
//! tiny backend that writes straight into the store, and request helpers over `oneshot`.
#![allow(dead_code)]

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use apimachinery::patch::PatchType;
use apimachinery::{ApiError, ResourceInfo};
use axum::Router;
use axum::body::Body;
use axum::http::{HeaderMap, Method, Request, StatusCode};
use bytes::Bytes;
use http_body_util::BodyExt;
use kapi::{Api, Backend, DeleteOptions, Registry, User, WriteRequest};
use objstore::{Mutation, NewObject, ObjKey, StoreConfig, Writer};
use serde_json::{Value, json};
use tempfile::TempDir;
use tower::ServiceExt;

/// One server over a fresh store.
pub struct Harness {
    pub api: Api,
    /// The store's writer, shared with the test backend (it reads too).
    pub store: Arc<Writer>,
    pub registry: Registry,
    _dir: TempDir,
}

/// A response, body read to the end.
pub struct Reply {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
}

/// The custom resource every harness serves: `widgets.example.com/v1`, namespaced.
pub fn widgets() -> ResourceInfo {
    let mut info = builtin("configmaps");
    info.group = "example.com".into();
    info.version = "v1".into();
    info.kind = "Widget".into();
    info.list_kind = "WidgetList".into();
    info.plural = "widgets".into();
    info.singular = "widget".into();
    info.short_names = vec!["wd".into()];
    info.categories = Vec::new();
    info.subresources = vec!["status".into()];
    info.custom = true;
    info
}

pub fn builtin(plural: &str) -> ResourceInfo {
    apimachinery::catalog::builtins()
        .into_iter()
        .find(|r| r.group.is_empty() && r.plural == plural)
        .expect("a built-in resource")
}

pub fn harness() -> Harness {
    harness_with(StoreConfig::default())
}

pub fn harness_with(config: StoreConfig) -> Harness {
    let dir = TempDir::new().expect("temp dir");
    let store = Arc::new(Writer::open(dir.path().join("store.db"), config).expect("open store"));
    let mut resources = apimachinery::catalog::builtins();
    resources.push(widgets());
    let registry = Registry::new(resources);
    let api = Api {
        registry: registry.clone(),
        store: store.reader(),
        backend: Arc::new(TestBackend {
            store: store.clone(),
        }),
        version: json!({"major": "1", "minor": "34", "gitVersion": "v1.34.0-kapi"}),
        default_user: Some(User {
            name: "admin".into(),
            groups: vec!["system:masters".into()],
        }),
        authorizer: None,
    };
    Harness {
        api,
        store,
        registry,
        _dir: dir,
    }
}

/// A harness whose writes go through the real [`kapi::local::LocalBackend`], with the
/// `default` and `kube-system` namespaces.
pub async fn local_harness() -> Harness {
    let mut h = harness();
    let backend =
        kapi::local::LocalBackend::new(h.store.clone(), h.registry.clone(), Default::default());
    backend
        .ensure_namespaces(&["default", "kube-system"])
        .await
        .expect("namespaces");
    h.api.backend = backend;
    h
}

// === impl Harness ===

impl Harness {
    pub fn router(&self) -> Router {
        kapi::router(self.api.clone())
    }

    /// Stores `obj` as the test backend would create or replace it; returns it as stored.
    pub async fn put(&self, plural: &str, obj: Value) -> Value {
        let info = self.info(plural);
        write(&self.store, &info, obj).await.expect("put")
    }

    pub async fn remove(&self, plural: &str, ns: &str, name: &str) {
        let info = self.info(plural);
        let key = ObjKey::new(info.store_resource(), ns, name);
        self.store.delete(&key).await.expect("delete");
    }

    pub fn info(&self, plural: &str) -> ResourceInfo {
        self.registry
            .all()
            .into_iter()
            .find(|r| r.plural == plural)
            .map(|r| ResourceInfo::clone(&r))
            .expect("a served resource")
    }

    pub async fn send(&self, req: Request<Body>) -> Reply {
        let resp = self.router().oneshot(req).await.expect("infallible");
        let (parts, body) = resp.into_parts();
        let body = body.collect().await.expect("body").to_bytes();
        Reply {
            status: parts.status,
            headers: parts.headers,
            body,
        }
    }

    pub async fn get(&self, uri: &str) -> Reply {
        self.send(request(Method::GET, uri, &[], Body::empty()))
            .await
    }

    pub async fn get_with(&self, uri: &str, accept: &str) -> Reply {
        self.send(request(
            Method::GET,
            uri,
            &[("accept", accept)],
            Body::empty(),
        ))
        .await
    }

    pub async fn call(&self, method: Method, uri: &str, content_type: &str, body: Value) -> Reply {
        let body = Body::from(body.to_string());
        self.send(request(
            method,
            uri,
            &[("content-type", content_type)],
            body,
        ))
        .await
    }

    /// Starts a watch and returns its response with the body still streaming.
    pub async fn watch(&self, uri: &str, accept: Option<&str>) -> WatchStream {
        let headers: Vec<(&str, &str)> = accept.map(|a| ("accept", a)).into_iter().collect();
        let resp = self
            .router()
            .oneshot(request(Method::GET, uri, &headers, Body::empty()))
            .await
            .expect("infallible");
        let (parts, body) = resp.into_parts();
        WatchStream {
            status: parts.status,
            headers: parts.headers,
            body,
            buffer: Vec::new(),
        }
    }
}

/// A streaming watch body, read line by line.
pub struct WatchStream {
    pub status: StatusCode,
    pub headers: HeaderMap,
    body: Body,
    buffer: Vec<u8>,
}

impl WatchStream {
    /// The next event, `None` at the end of the stream; panics after 5 s without one.
    pub async fn next(&mut self) -> Option<Value> {
        self.next_within(Duration::from_secs(5))
            .await
            .expect("a watch event within the time limit")
    }

    /// The next event; `Err` when none came within `limit`.
    pub async fn next_within(&mut self, limit: Duration) -> Result<Option<Value>, ()> {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            if let Some(pos) = self.buffer.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = self.buffer.drain(..=pos).collect();
                let text = std::str::from_utf8(&line[..pos]).expect("utf-8 line");
                assert!(!text.contains('\n'), "one event per line");
                return Ok(Some(serde_json::from_str(text).expect("an event is JSON")));
            }
            let frame = tokio::time::timeout_at(deadline, self.body.frame())
                .await
                .map_err(|_| ())?;
            match frame {
                None => {
                    assert!(self.buffer.is_empty(), "a partial line at the end");
                    return Ok(None);
                }
                Some(frame) => {
                    let frame = frame.expect("body frame");
                    if let Ok(data) = frame.into_data() {
                        self.buffer.extend_from_slice(&data);
                    }
                }
            }
        }
    }

    /// The next event of a protobuf watch (type and the object's JSON form); panics after 5 s
    /// without one, `None` at the end of the stream.
    pub async fn next_frame(&mut self) -> Option<(String, Value)> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        loop {
            if self.buffer.len() >= 4 && self.buffer.len() >= frame_len(&self.buffer) {
                let n = frame_len(&self.buffer);
                let (mut events, _) =
                    kpb::read_watch_frames(&self.buffer[..n]).expect("a protobuf frame");
                self.buffer.drain(..n);
                return Some(events.remove(0));
            }
            let frame = tokio::time::timeout_at(deadline, self.body.frame())
                .await
                .expect("a watch frame within the time limit");
            match frame {
                None => {
                    assert!(self.buffer.is_empty(), "a partial frame at the end");
                    return None;
                }
                Some(frame) => {
                    if let Ok(data) = frame.expect("body frame").into_data() {
                        self.buffer.extend_from_slice(&data);
                    }
                }
            }
        }
    }

    /// Events until `n` were read (panics if the stream ends first).
    pub async fn take(&mut self, n: usize) -> Vec<Value> {
        let mut out = Vec::new();
        for _ in 0..n {
            out.push(self.next().await.expect("stream ended early"));
        }
        out
    }
}

// === impl Reply ===

impl Reply {
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&self.body)))
    }

    pub fn content_type(&self) -> &str {
        self.headers
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    }

    /// Asserts a `Status` failure with this code and reason.
    pub fn assert_status(&self, code: u16, reason: &str) -> Value {
        let body = self.json();
        assert_eq!(self.status.as_u16(), code, "{body}");
        assert_eq!(body["kind"], "Status", "{body}");
        assert_eq!(body["code"], code, "{body}");
        assert_eq!(body["reason"], reason, "{body}");
        assert_eq!(self.content_type(), "application/json");
        body
    }
}

/// The length of the first frame (prefix included) of a protobuf watch buffer.
fn frame_len(buf: &[u8]) -> usize {
    4 + u32::from_be_bytes(buf[..4].try_into().expect("a length prefix")) as usize
}

pub fn request(method: Method, uri: &str, headers: &[(&str, &str)], body: Body) -> Request<Body> {
    let mut req = Request::builder().method(method).uri(uri);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    req.body(body).expect("a valid request")
}

/// `{"metadata":{"name":..,"namespace":..,"labels":..}}` plus `extra` merged at the top.
pub fn object(ns: &str, name: &str, labels: Value, extra: Value) -> Value {
    let mut obj = json!({ "metadata": { "name": name, "labels": labels } });
    if !ns.is_empty() {
        obj["metadata"]["namespace"] = json!(ns);
    }
    if let (Some(obj), Some(extra)) = (obj.as_object_mut(), extra.as_object()) {
        for (k, v) in extra {
            obj.insert(k.clone(), v.clone());
        }
    }
    obj
}

pub fn pod(ns: &str, name: &str, node: &str) -> Value {
    object(
        ns,
        name,
        json!({ "app": "web" }),
        json!({ "spec": { "nodeName": node, "containers": [{ "name": "c", "image": "nginx" }] } }),
    )
}

/// Writes into the store as a backend does: kind/apiVersion filled in, resourceVersion =
/// the revision of the change, labels and selectable fields indexed.
async fn write(store: &Writer, info: &ResourceInfo, mut obj: Value) -> Result<Value, ApiError> {
    obj["kind"] = json!(info.kind);
    obj["apiVersion"] = json!(info.api_version());
    let name = obj["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let ns = obj["metadata"]["namespace"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let key = ObjKey::new(info.store_resource(), ns, name);
    let labels = apimachinery::fields::labels_of(&obj);
    let fields = apimachinery::fields::selectable_fields(info, &obj);
    let applied = store
        .mutate(key, move |_, revision| {
            obj["metadata"]["resourceVersion"] = json!(revision.to_string());
            let value = serde_json::to_vec(&obj).expect("JSON");
            let new = NewObject {
                uid: String::new(),
                resource_version: revision.to_string(),
                labels,
                fields,
                value: value.into(),
            };
            Ok::<_, Infallible>((Mutation::Put(new), obj))
        })
        .await
        .map_err(|e| ApiError::internal(e.to_string()))?;
    let Ok(applied) = applied;
    Ok(applied.output)
}

/// Writes straight into the store; records nothing else. Enough to drive the REST layer.
pub struct TestBackend {
    store: Arc<Writer>,
}

#[async_trait::async_trait]
impl Backend for TestBackend {
    async fn create(&self, req: &WriteRequest<'_>, obj: Value) -> Result<Value, ApiError> {
        if req.subresource == Some("binding") {
            let key = ObjKey::new(req.info.store_resource(), req.namespace, req.name);
            let current =
                self.store.get(&key).await.expect("get").ok_or_else(|| {
                    ApiError::not_found(&req.info.group, &req.info.plural, req.name)
                })?;
            let mut pod: Value = serde_json::from_slice(&current.value).expect("JSON");
            pod["spec"]["nodeName"] = obj["target"]["name"].clone();
            write(&self.store, req.info, pod).await?;
            return Ok(
                json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"}),
            );
        }
        let name = obj["metadata"]["name"].as_str().unwrap_or_default();
        let key = ObjKey::new(req.info.store_resource(), req.namespace, name);
        if self.store.get(&key).await.expect("get").is_some() {
            return Err(ApiError::already_exists(
                &req.info.group,
                &req.info.plural,
                name,
            ));
        }
        if req.dry_run {
            return Ok(obj);
        }
        write(&self.store, req.info, obj).await
    }

    async fn update(&self, req: &WriteRequest<'_>, obj: Value) -> Result<Value, ApiError> {
        write(&self.store, req.info, obj).await
    }

    async fn patch(
        &self,
        req: &WriteRequest<'_>,
        kind: PatchType,
        patch: Bytes,
    ) -> Result<Value, ApiError> {
        if kind != PatchType::Merge {
            return Err(ApiError::unsupported_media_type("only merge patches here"));
        }
        let key = ObjKey::new(req.info.store_resource(), req.namespace, req.name);
        let current = self
            .store
            .get(&key)
            .await
            .expect("get")
            .ok_or_else(|| ApiError::not_found(&req.info.group, &req.info.plural, req.name))?;
        let mut obj: Value = serde_json::from_slice(&current.value).expect("JSON");
        let patch: Value =
            serde_json::from_slice(&patch).map_err(|e| ApiError::bad_request(e.to_string()))?;
        merge(&mut obj, &patch);
        write(&self.store, req.info, obj).await
    }

    async fn delete(
        &self,
        req: &WriteRequest<'_>,
        opts: DeleteOptions,
    ) -> Result<(u16, Value), ApiError> {
        let _ = opts;
        let key = ObjKey::new(req.info.store_resource(), req.namespace, req.name);
        if req.dry_run {
            return Ok((200, json!({"kind": "Status", "status": "Success"})));
        }
        let gone = self
            .store
            .delete(&key)
            .await
            .expect("delete")
            .ok_or_else(|| ApiError::not_found(&req.info.group, &req.info.plural, req.name))?;
        let obj: Value = serde_json::from_slice(&gone.value).expect("JSON");
        Ok((200, obj))
    }
}

/// RFC 7386.
fn merge(target: &mut Value, patch: &Value) {
    let Some(patch) = patch.as_object() else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = json!({});
    }
    let map = target.as_object_mut().expect("an object");
    for (k, v) in patch {
        if v.is_null() {
            map.remove(k);
        } else {
            merge(map.entry(k.clone()).or_insert(Value::Null), v);
        }
    }
}
