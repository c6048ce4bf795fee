//! Response bodies: objects as stored (spliced without re-encoding when they are already
//! right), lists, tables, metadata-only forms, watch event lines.
//!
//! A stored object that is not a JSON object (a damaged row) is left out of every list, with a
//! warning naming its key, and counted ([`crate::bad_objects_skipped`]): the rest of the list
//! is still served, and the cloud's resync replaces the row. A get of it is still a 500.

use std::borrow::Cow;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use apimachinery::table::{self, IncludeObject};
use apimachinery::{ApiError, ResourceInfo};
use axum::body::Body;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::Response;
use bytes::{BufMut, Bytes, BytesMut};
use objstore::StoredObject;
use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::negotiate::Output;
use super::order;

pub(crate) const JSON: &str = "application/json";

/// The annotation that marks the end of a streaming list's initial events.
pub(crate) const INITIAL_EVENTS_END: &str = "k8s.io/initial-events-end";

/// Stored objects left out of lists because they are not JSON objects.
static BAD_OBJECTS_SKIPPED: AtomicU64 = AtomicU64::new(0);

/// How many stored objects lists have left out so far (in this process) because they were not
/// JSON objects.
pub fn bad_objects_skipped() -> u64 {
    BAD_OBJECTS_SKIPPED.load(Ordering::Relaxed)
}

/// A list page: its items, snapshot revision and continue token.
pub(crate) struct Page<'a> {
    pub(crate) items: &'a [std::sync::Arc<StoredObject>],
    pub(crate) resource_version: u64,
    pub(crate) continue_token: Option<String>,
}

/// `application/json` response of `value`, in Go field order and ending in a newline (as
/// Go's `json.Encoder` writes every body).
pub(crate) fn json_response(code: StatusCode, value: &Value) -> Response {
    let mut body = order::value(value);
    body.push(b'\n');
    bytes_response(code, JSON, Bytes::from(body))
}

/// A whole response body in `output`'s form: a JSON one ends in a newline.
pub(crate) fn body_of(output: Output, body: Bytes) -> Bytes {
    if output == Output::Protobuf {
        return body;
    }
    let mut with = BytesMut::with_capacity(body.len() + 1);
    with.put_slice(&body);
    with.put_u8(b'\n');
    with.freeze()
}

pub(crate) fn bytes_response(code: StatusCode, content_type: &str, body: Bytes) -> Response {
    body_response(code, content_type, Body::from(body))
}

pub(crate) fn body_response(code: StatusCode, content_type: &str, body: Body) -> Response {
    let mut resp = Response::new(body);
    *resp.status_mut() = code;
    let ct = HeaderValue::from_str(content_type).unwrap_or(HeaderValue::from_static(JSON));
    resp.headers_mut().insert(header::CONTENT_TYPE, ct);
    resp
}

/// One stored object as compact JSON in Go field order ([`order`]) with `kind` and
/// `apiVersion` of the served version, and `metadata.resourceVersion` set to
/// `resource_version` when given (deletions). The stored text is reordered without being
/// decoded unless it needs more than that (another version's, or not compact).
pub(crate) fn object_json(
    info: &ResourceInfo,
    obj: &StoredObject,
    resource_version: Option<u64>,
) -> Result<Bytes, ApiError> {
    let served = order::Served::new(&info.kind, &info.api_version());
    object_json_as(info, &served, obj, resource_version)
}

/// [`object_json`] with the served form made once (for every item of a list). Text stored
/// already in that form (the embedded control plane stores objects in Go order) is served
/// as it is, uncopied.
fn object_json_as(
    info: &ResourceInfo,
    served: &order::Served,
    obj: &StoredObject,
    resource_version: Option<u64>,
) -> Result<Bytes, ApiError> {
    let raw = &obj.value;
    if resource_version.is_none()
        && !defaults_on_read(info)
        && !needs_conversion(info, raw)
        && is_compact(raw)
    {
        if served.is_written(raw) {
            return Ok(raw.clone());
        }
        if let Some(ordered) = served.object(raw) {
            return Ok(Bytes::from(ordered));
        }
    }
    let value = object_value(info, obj, resource_version)?;
    Ok(Bytes::from(order::value(&value)))
}

/// No line breaks anywhere in `raw` (checked 32 bytes at a time, which the compiler
/// vectorizes, where a byte-wise search that stops early is not).
fn is_compact(raw: &[u8]) -> bool {
    raw.chunks(32).all(|chunk| {
        !chunk
            .iter()
            .fold(false, |found, b| found | (*b == b'\n') | (*b == b'\r'))
    })
}

/// One stored object as a JSON value, with the same fixes as [`object_json`].
pub(crate) fn object_value(
    info: &ResourceInfo,
    obj: &StoredObject,
    resource_version: Option<u64>,
) -> Result<Value, ApiError> {
    let mut value: Value = serde_json::from_slice(&obj.value).map_err(|e| {
        tracing::error!(key = %obj.key, error = %e, "stored object is not JSON");
        ApiError::internal(format!("stored object {} is not valid JSON", obj.key))
    })?;
    if !value.is_object() {
        return Err(ApiError::internal(format!(
            "stored object {} is not a JSON object",
            obj.key
        )));
    }
    if apimachinery::convert::has_versions(&info.group, &info.kind) {
        // Stored in either version: shown in the one asked for.
        apimachinery::convert::to_version(&info.group, &info.version, &mut value);
    }
    if let Some(schema) = info.schema.as_deref().filter(|_| defaults_on_read(info)) {
        // kube-apiserver defaults custom resources read from storage too.
        schema.default(&mut value);
    }
    let map = value.as_object_mut().expect("checked to be an object");
    map.insert("kind".to_owned(), Value::String(info.kind.clone()));
    map.insert("apiVersion".to_owned(), Value::String(info.api_version()));
    if let Some(rv) = resource_version {
        let meta = map
            .entry("metadata")
            .or_insert_with(|| Value::Object(Map::new()));
        if let Some(meta) = meta.as_object_mut() {
            meta.insert("resourceVersion".to_owned(), Value::String(rv.to_string()));
        }
    }
    Ok(value)
}

/// Bytes of list items gathered into one frame of a streamed JSON list.
const LIST_FRAME: usize = 64 * 1024;

/// A JSON list page as a streamed body: the items are encoded a frame at a time as the client
/// reads, so the response never holds a second copy of the whole list (only the stored items
/// it was read from). Items that are not JSON objects are left out, as in [`list`].
pub(crate) fn json_list_body(
    info: &ResourceInfo,
    items: Vec<std::sync::Arc<StoredObject>>,
    resource_version: u64,
    continue_token: Option<&str>,
) -> Body {
    let head = list_head(info, &list_meta(resource_version, continue_token));
    let mut first = BytesMut::with_capacity(head.len() + 16);
    // `head` is a JSON object: drop its closing brace and open the items.
    first.put_slice(&head[..head.len() - 1]);
    first.put_slice(b",\"items\":[");
    let served = order::Served::new(&info.kind, &info.api_version());
    let info = info.clone();
    let mut items = items.into_iter();
    let mut pending = Some(first);
    let mut started = false;
    let frames = std::iter::from_fn(move || {
        let mut frame = pending.take()?;
        for obj in items.by_ref() {
            let Some(item) = listable(std::slice::from_ref(&obj), |o| {
                object_json_as(&info, &served, o, None)
            })
            .pop() else {
                continue;
            };
            if started {
                frame.put_u8(b',');
            }
            started = true;
            frame.put_slice(&item);
            if frame.len() >= LIST_FRAME {
                pending = Some(BytesMut::new());
                return Some(frame.freeze());
            }
        }
        frame.put_slice(b"]}\n");
        Some(frame.freeze())
    });
    let frames = frames.map(Ok::<_, std::convert::Infallible>);
    Body::from_stream(futures::stream::iter(frames))
}

/// A list page in the requested representation.
pub(crate) fn list(
    info: &ResourceInfo,
    output: Output,
    include: IncludeObject,
    page: &Page<'_>,
) -> Result<Bytes, ApiError> {
    let meta = list_meta(page.resource_version, page.continue_token.as_deref());
    match output {
        Output::Json => json_list(info, page, &meta),
        Output::Protobuf => {
            let api_version = info.api_version();
            let encode = |items: Vec<kpb::Json<'_>>| {
                kpb::encode_list(
                    &api_version,
                    &info.list_kind,
                    &info.kind,
                    meta.clone(),
                    items,
                )
            };
            // Each stored text read straight into its type; a list holding one its type
            // refuses (another version's, to convert) is made again from the fixed-up trees.
            let texts = page
                .items
                .iter()
                .map(|o| kpb::Json::Text(&o.value))
                .collect();
            match encode(texts) {
                Ok(body) => Ok(Bytes::from(body)),
                Err(_) => {
                    let values = listable(page.items, |o| object_value(info, o, None));
                    let values = values.into_iter().map(kpb::Json::Value).collect();
                    encode(values)
                        .map(Bytes::from)
                        .map_err(|e| ApiError::internal(format!("{}: {e}", info.list_kind)))
                }
            }
        }
        Output::Table => {
            let objects = listable(page.items, |o| object_value(info, o, None));
            let mut t = table::render(info, &objects, include, now());
            t["metadata"] = meta;
            Ok(to_bytes(&t))
        }
        Output::Metadata => {
            let items = listable(page.items, |o| {
                object_value(info, o, None).map(|v| partial(&v))
            });
            Ok(to_bytes(&json!({
                "kind": "PartialObjectMetadataList",
                "apiVersion": "meta.k8s.io/v1",
                "metadata": meta,
                "items": items,
            })))
        }
    }
}

/// One object in the requested representation (`resource_version` as in [`object_json`]).
pub(crate) fn single(
    info: &ResourceInfo,
    output: Output,
    include: IncludeObject,
    obj: &StoredObject,
    resource_version: Option<u64>,
) -> Result<Bytes, ApiError> {
    match output {
        Output::Json => object_json(info, obj, resource_version),
        Output::Protobuf if resource_version.is_none() => {
            let encoded =
                kpb::encode_as(&info.api_version(), &info.kind, kpb::Json::Text(&obj.value));
            encoded
                .map(Bytes::from)
                .or_else(|_| protobuf(object_value(info, obj, None)?))
        }
        Output::Protobuf => protobuf(object_value(info, obj, resource_version)?),
        Output::Table => {
            let value = object_value(info, obj, resource_version)?;
            let rv = value["metadata"]["resourceVersion"].clone();
            let mut t = table::render(info, &[value], include, now());
            t["metadata"] = json!({ "resourceVersion": rv });
            Ok(to_bytes(&t))
        }
        Output::Metadata => {
            let value = object_value(info, obj, resource_version)?;
            Ok(to_bytes(&partial(&value)))
        }
    }
}

/// The protobuf body of an object (or list) of a built-in kind; a stored object that does
/// not convert is a server error naming it.
pub(crate) fn protobuf(value: Value) -> Result<Bytes, ApiError> {
    let name = value["metadata"]["name"].as_str().unwrap_or("").to_owned();
    kpb::encode(value).map(Bytes::from).map_err(|e| {
        tracing::error!(%name, error = %e, "object has no protobuf form");
        ApiError::internal(format!("{name}: {e}"))
    })
}

/// An object as the embedded control plane stores it: compact JSON in Go field order, its own
/// `kind` and `apiVersion` first, so that reads of the version it is stored in can serve the
/// stored text as it is ([`object_json`]).
pub(crate) fn stored_json(value: &Value) -> Vec<u8> {
    order::value(value)
}

/// A body in the negotiated form: protobuf when asked for and the kind has one (a `Status`
/// and the built-in kinds), JSON otherwise (clients decode by the response's type).
pub(crate) fn value_response(output: Output, code: StatusCode, value: &Value) -> Response {
    let type_of = |k: &str| value.get(k).and_then(Value::as_str).unwrap_or("");
    if output == Output::Protobuf
        && let Ok(body) = kpb::encode_as(
            type_of("apiVersion"),
            type_of("kind"),
            kpb::Json::Ref(value),
        )
    {
        return bytes_response(code, kpb::MEDIA_TYPE, Bytes::from(body));
    }
    json_response(code, value)
}

/// One watch event in the stream's form: a JSON line, or a length-prefixed protobuf frame
/// whose object is `object` (already encoded in that form).
pub(crate) fn watch_event(output: Output, kind: &str, object: Bytes) -> Bytes {
    match output {
        Output::Protobuf => Bytes::from(kpb::watch_frame_of(kind, object.to_vec())),
        _ => event_line(kind, &object),
    }
}

/// A watch event whose object is built here as JSON (bookmarks, errors).
pub(crate) fn watch_event_json(output: Output, kind: &str, json: Bytes) -> Bytes {
    if output == Output::Protobuf {
        let encoded = serde_json::from_slice::<Value>(&json)
            .ok()
            .and_then(|v| kpb::encode(v).ok());
        if let Some(body) = encoded {
            return Bytes::from(kpb::watch_frame_of(kind, body));
        }
    }
    event_line(kind, &json)
}

/// `{"type":"<kind>","object":<object>}` and a newline.
pub(crate) fn event_line(kind: &str, object: &[u8]) -> Bytes {
    let mut line = BytesMut::with_capacity(object.len() + kind.len() + 24);
    line.put_slice(b"{\"type\":\"");
    line.put_slice(kind.as_bytes());
    line.put_slice(b"\",\"object\":");
    line.put_slice(object);
    line.put_slice(b"}\n");
    line.freeze()
}

/// A BOOKMARK object: the kind with only `metadata.resourceVersion` (and the end-of-initial-
/// events annotation for streaming lists).
pub(crate) fn bookmark(info: &ResourceInfo, resource_version: u64, initial_end: bool) -> Bytes {
    let mut meta = json!({ "resourceVersion": resource_version.to_string() });
    if initial_end {
        meta["annotations"] = json!({ INITIAL_EVENTS_END: "true" });
    }
    to_bytes(&json!({
        "kind": info.kind,
        "apiVersion": info.api_version(),
        "metadata": meta,
    }))
}

/// A `Value` as compact JSON in Go field order.
pub(crate) fn to_bytes(value: &Value) -> Bytes {
    Bytes::from(order::value(value))
}

/// `{"kind":..,"apiVersion":..,"metadata":..}` of a list (to have its items appended).
fn list_head(info: &ResourceInfo, meta: &Value) -> Bytes {
    to_bytes(&json!({
        "kind": info.list_kind,
        "apiVersion": info.api_version(),
        "metadata": meta,
    }))
}

/// The `PartialObjectMetadata` form of a write's answer: an object becomes its metadata, a
/// list its `PartialObjectMetadataList`; a `Status` stays as it is.
pub(crate) fn metadata_form(value: &Value) -> Value {
    let kind = value.get("kind").and_then(Value::as_str).unwrap_or("");
    match value.get("items").and_then(Value::as_array) {
        _ if kind == "Status" => value.clone(),
        Some(items) if kind.ends_with("List") => json!({
            "kind": "PartialObjectMetadataList",
            "apiVersion": "meta.k8s.io/v1",
            "metadata": value.get("metadata").cloned().unwrap_or_else(|| json!({})),
            "items": items.iter().map(partial).collect::<Vec<_>>(),
        }),
        _ => partial(value),
    }
}

/// `PartialObjectMetadata` of an object.
fn partial(value: &Value) -> Value {
    json!({
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": value.get("metadata").cloned().unwrap_or_else(|| json!({})),
    })
}

fn list_meta(resource_version: u64, continue_token: Option<&str>) -> Value {
    let mut meta = json!({ "resourceVersion": resource_version.to_string() });
    if let Some(c) = continue_token {
        meta["continue"] = Value::String(c.to_owned());
    }
    meta
}

/// `{"kind":..,"apiVersion":..,"metadata":..,"items":[..]}` with the items spliced in.
fn json_list(info: &ResourceInfo, page: &Page<'_>, meta: &Value) -> Result<Bytes, ApiError> {
    let head = list_head(info, meta);
    let served = order::Served::new(&info.kind, &info.api_version());
    let items = listable(page.items, |o| object_json_as(info, &served, o, None));
    let size = head.len() + items.iter().map(|i| i.len() + 1).sum::<usize>() + 16;
    let mut out = BytesMut::with_capacity(size);
    // `head` is a JSON object: drop its closing brace and append the items.
    out.put_slice(&head[..head.len() - 1]);
    out.put_slice(b",\"items\":[");
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            out.put_u8(b',');
        }
        out.put_slice(item);
    }
    out.put_slice(b"]}");
    Ok(out.freeze())
}

/// Each item rendered by `render`, leaving out (with a warning, counted) those that are not
/// JSON objects.
fn listable<T>(
    items: &[std::sync::Arc<StoredObject>],
    render: impl Fn(&StoredObject) -> Result<T, ApiError>,
) -> Vec<T> {
    let mut rendered = Vec::with_capacity(items.len());
    for obj in items {
        match render(obj) {
            Ok(item) => rendered.push(item),
            Err(e) => {
                BAD_OBJECTS_SKIPPED.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(key = %obj.key, error = %e.message, "left out of a list: not a JSON object");
            }
        }
    }
    rendered
}

/// True when the stored JSON is of a kind kept in several versions and not in the served
/// one (so it is converted).
fn needs_conversion(info: &ResourceInfo, raw: &[u8]) -> bool {
    #[derive(Deserialize)]
    struct Peek<'a> {
        #[serde(rename = "apiVersion", borrow, default)]
        api_version: Option<Cow<'a, str>>,
    }
    if !apimachinery::convert::has_versions(&info.group, &info.kind) {
        return false;
    }
    serde_json::from_slice::<Peek<'_>>(raw).map_or(true, |p| {
        p.api_version.as_deref() != Some(info.api_version().as_str())
    })
}

/// True for a custom resource whose schema has defaults: its stored objects get them when
/// read (a default added to the CRD after they were written).
fn defaults_on_read(info: &ResourceInfo) -> bool {
    info.schema.as_deref().is_some_and(|s| s.has_defaults())
}

/// Seconds since the Unix epoch (for table ages).
fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use objstore::ObjKey;

    use super::*;

    fn stored(value: &[u8]) -> StoredObject {
        StoredObject {
            key: ObjKey::new("pods", "default", "p"),
            uid: "u".into(),
            resource_version: "5".into(),
            revision: 5,
            labels: BTreeMap::new(),
            fields: BTreeMap::new(),
            value: Bytes::copy_from_slice(value),
        }
    }

    fn pods() -> ResourceInfo {
        apimachinery::catalog::builtins()
            .into_iter()
            .find(|r| r.plural == "pods" && r.group.is_empty())
            .expect("pods are built in")
    }

    #[test]
    fn an_object_stored_in_go_order_is_served_as_stored_and_an_older_one_is_reordered() {
        let pod = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"namespace": "default", "name": "p", "resourceVersion": "5"},
            "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "i"}]},
            "status": {"phase": "Pending"}});
        let info = pods();
        let alphabetical = stored(&serde_json::to_vec(&pod).unwrap());
        let in_go_order = stored(&stored_json(&pod));
        let from_old = object_json(&info, &alphabetical, None).unwrap();
        let from_new = object_json(&info, &in_go_order, None).unwrap();
        assert_eq!(from_old, from_new);
        assert!(
            from_old.starts_with(br#"{"kind":"Pod","apiVersion":"v1","metadata":{"name":"p","#)
        );
        // Served without a copy: the very bytes stored.
        assert_eq!(from_new.as_ptr(), in_go_order.value.as_ptr());
        assert_ne!(from_old.as_ptr(), alphabetical.value.as_ptr());
    }
}
