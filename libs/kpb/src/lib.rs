//! Kubernetes' protobuf encoding (`application/vnd.kubernetes.protobuf`) of the built-in
//! kinds, for the REST layer: what kubelet, kube-proxy, kubectl's imperative commands and any
//! client-go typed client send and prefer by default.
//!
//! The messages are k8s-pb's (generated from Kubernetes' `.proto` files); the JSON form goes
//! through k8s-openapi's types (generated from the same Go types), with a conversion per type
//! that `tools/pbgen` writes into `generated.rs`. JSON stays the stored form: this crate only
//! turns a JSON object into its protobuf bytes and back.
//!
//! Wire format: a body is the magic `k8s\0` followed by a `runtime.Unknown` whose `typeMeta`
//! names the kind and whose `raw` is the object's message. A watch stream is a sequence of
//! frames, each a 4-byte big-endian length and a `meta.v1.WatchEvent` (no magic) whose
//! `object.raw` is one such body.

mod conv;
#[rustfmt::skip]
mod generated;
mod registry;

use k8s_pb::apimachinery::pkg::apis::meta::v1::WatchEvent;
use k8s_pb::apimachinery::pkg::runtime::{RawExtension, TypeMeta, Unknown};
use prost::Message;
use serde_json::Value;

pub use registry::{Json, kinds};

/// The media type of a protobuf body.
pub const MEDIA_TYPE: &str = "application/vnd.kubernetes.protobuf";
/// The media type of a protobuf watch stream.
pub const WATCH_MEDIA_TYPE: &str = "application/vnd.kubernetes.protobuf;stream=watch";
/// The four bytes every protobuf body starts with.
pub const MAGIC: &[u8] = b"k8s\0";

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("the body does not start with Kubernetes' protobuf magic \"k8s\\0\"")]
    NoMagic,
    #[error("the protobuf envelope (runtime.Unknown) does not decode: {0}")]
    Envelope(prost::DecodeError),
    #[error("the protobuf envelope names no kind (typeMeta.kind is empty)")]
    NoKind,
    #[error("the protobuf body has content encoding {0:?}; only an unencoded body is accepted")]
    ContentEncoding(String),
    #[error("{kind} ({api_version}) has no protobuf form here; send it as application/json")]
    Unsupported { api_version: String, kind: String },
    #[error("the {kind} message does not decode: {source}")]
    Message {
        kind: String,
        source: prost::DecodeError,
    },
    #[error("the {kind} object does not convert: {source}")]
    Json {
        kind: String,
        source: serde_json::Error,
    },
    #[error("a watch frame is cut short: {0} bytes announced, fewer received")]
    ShortFrame(usize),
}

fn type_of(object: &Value) -> (&str, &str) {
    let s = |k| object.get(k).and_then(Value::as_str).unwrap_or("");
    (s("apiVersion"), s("kind"))
}

/// Whether `apiVersion`/`kind` have a protobuf form (built-in kinds and their lists).
pub fn supports(api_version: &str, kind: &str) -> bool {
    registry::lookup(api_version, kind).is_some()
}

/// The protobuf body of a JSON object (its `apiVersion` and `kind` say which message).
pub fn encode(object: Value) -> Result<Vec<u8>, Error> {
    let (api_version, kind) = type_of(&object);
    let (api_version, kind) = (api_version.to_owned(), kind.to_owned());
    encode_as(&api_version, &kind, Json::Value(object))
}

/// The protobuf body of an object of `api_version`/`kind` given in its JSON form (as stored
/// text, it is read straight into its type).
pub fn encode_as(api_version: &str, kind: &str, object: Json<'_>) -> Result<Vec<u8>, Error> {
    let raw = (entry(api_version, kind)?.encode)(object)?;
    Ok(envelope(api_version, kind, raw))
}

/// The protobuf body of a list `list_kind` of `item_kind` objects with this `metadata`
/// (a `ListMeta` in JSON form): every list message has its metadata in field 1 and its items
/// in field 2, so the items are encoded one by one and framed there.
pub fn encode_list<'a>(
    api_version: &str,
    list_kind: &str,
    item_kind: &str,
    metadata: Value,
    items: impl IntoIterator<Item = Json<'a>>,
) -> Result<Vec<u8>, Error> {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ListMeta;
    use prost::encoding::{WireType, encode_key, encode_varint};

    entry(api_version, list_kind)?;
    let item = entry(api_version, item_kind)?;
    let meta: ListMeta = serde_json::from_value(metadata).map_err(|source| Error::Json {
        kind: "ListMeta".into(),
        source,
    })?;
    let mut raw = Vec::new();
    prost::encoding::message::encode(1, &conv::to_pb(meta), &mut raw);
    for object in items {
        let bytes = (item.encode)(object)?;
        encode_key(2, WireType::LengthDelimited, &mut raw);
        encode_varint(bytes.len() as u64, &mut raw);
        raw.extend_from_slice(&bytes);
    }
    Ok(envelope(api_version, list_kind, raw))
}

fn entry(api_version: &str, kind: &str) -> Result<&'static registry::Entry, Error> {
    registry::lookup(api_version, kind).ok_or_else(|| Error::Unsupported {
        api_version: api_version.to_owned(),
        kind: kind.to_owned(),
    })
}

/// `k8s\0` and a `runtime.Unknown` naming the kind around a message.
fn envelope(api_version: &str, kind: &str, raw: Vec<u8>) -> Vec<u8> {
    let unknown = Unknown {
        type_meta: Some(TypeMeta {
            api_version: Some(api_version.to_owned()),
            kind: Some(kind.to_owned()),
        }),
        raw: Some(raw),
        content_encoding: None,
        content_type: None,
    };
    let mut out = Vec::with_capacity(MAGIC.len() + unknown.encoded_len());
    out.extend_from_slice(MAGIC);
    unknown
        .encode(&mut out)
        .expect("a Vec grows to take any message");
    out
}

/// The kind and message of a protobuf body: `(apiVersion, kind, message bytes)`, for a
/// client that decodes the message itself (into k8s-pb's types, as client-go does).
pub fn open(body: &[u8]) -> Result<(String, String, Vec<u8>), Error> {
    let unknown = body.strip_prefix(MAGIC).ok_or(Error::NoMagic)?;
    let unknown = Unknown::decode(unknown).map_err(Error::Envelope)?;
    if let Some(enc) = unknown.content_encoding.filter(|e| !e.is_empty()) {
        return Err(Error::ContentEncoding(enc));
    }
    let meta = unknown.type_meta.unwrap_or_default();
    let kind = meta.kind.filter(|k| !k.is_empty()).ok_or(Error::NoKind)?;
    Ok((
        meta.api_version.unwrap_or_default(),
        kind,
        unknown.raw.unwrap_or_default(),
    ))
}

/// The JSON form of a protobuf body, with `apiVersion` and `kind` from its envelope.
pub fn decode(body: &[u8]) -> Result<Value, Error> {
    let (api_version, kind, raw) = open(body)?;
    let mut object = (entry(&api_version, &kind)?.decode)(&raw)?;
    if api_version.starts_with("apiextensions.k8s.io/") {
        integral_floats(&mut object);
    }
    if let Some(map) = object.as_object_mut() {
        map.insert("apiVersion".into(), Value::String(api_version));
        map.insert("kind".into(), Value::String(kind));
    }
    Ok(object)
}

/// Writes whole-valued floats as integers, as Go's JSON does (`minimum: 0`, not `0.0`): the
/// only doubles in the API are a CRD schema's `minimum`, `maximum` and `multipleOf`.
fn integral_floats(v: &mut Value) {
    match v {
        Value::Number(n) => {
            if let Some(f) = n
                .as_f64()
                .filter(|f| n.is_f64() && f.fract() == 0.0 && f.abs() < 9e15)
            {
                *v = Value::from(f as i64);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(integral_floats),
        Value::Object(map) => map.values_mut().for_each(integral_floats),
        _ => {}
    }
}

/// One frame of a protobuf watch stream: an event of `event_type` (`ADDED`, `MODIFIED`,
/// `DELETED`, `BOOKMARK`, `ERROR`) carrying `object`.
pub fn watch_frame(event_type: &str, object: Value) -> Result<Vec<u8>, Error> {
    Ok(watch_frame_of(event_type, encode(object)?))
}

/// A watch frame around an object already encoded by [`encode`].
pub fn watch_frame_of(event_type: &str, body: Vec<u8>) -> Vec<u8> {
    let event = WatchEvent {
        r#type: Some(event_type.to_owned()),
        object: Some(RawExtension { raw: Some(body) }),
    };
    let len = event.encoded_len();
    let mut out = Vec::with_capacity(4 + len);
    out.extend_from_slice(
        &u32::try_from(len)
            .expect("an event under 4 GiB")
            .to_be_bytes(),
    );
    event
        .encode(&mut out)
        .expect("a Vec grows to take any message");
    out
}

/// Reads the complete frames at the start of `buf`: the events (type and JSON object) and
/// how many bytes they took (a trailing partial frame is left for the next read).
pub fn read_watch_frames(buf: &[u8]) -> Result<(Vec<(String, Value)>, usize), Error> {
    let mut events = Vec::new();
    let mut at = 0;
    while buf.len() - at >= 4 {
        let len = u32::from_be_bytes(buf[at..at + 4].try_into().expect("four bytes")) as usize;
        let Some(frame) = buf.get(at + 4..at + 4 + len) else {
            break;
        };
        let event = WatchEvent::decode(frame).map_err(|source| Error::Message {
            kind: "WatchEvent".into(),
            source,
        })?;
        let object = decode(&event.object.and_then(|o| o.raw).unwrap_or_default())?;
        events.push((event.r#type.unwrap_or_default(), object));
        at += 4 + len;
    }
    Ok((events, at))
}

#[cfg(test)]
mod tests;
