//! The kinds with a protobuf form, and the two generic conversions each entry points at:
//! JSON → k8s-openapi type → k8s-pb message → bytes, and back.

use std::collections::HashMap;
use std::sync::OnceLock;

use prost::Message;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::Error;
use crate::conv::Conv;

pub(crate) struct Entry {
    pub api_version: &'static str,
    pub kind: &'static str,
    pub encode: fn(Json<'_>) -> Result<Vec<u8>, Error>,
    pub decode: fn(&[u8]) -> Result<Value, Error>,
}

/// An object's JSON form: a tree (owned or borrowed), or text (a stored object, read
/// straight into its type).
pub enum Json<'a> {
    Value(Value),
    Ref(&'a Value),
    Text(&'a [u8]),
}

pub(crate) fn encode<T>(json: Json<'_>) -> Result<Vec<u8>, Error>
where
    T: Conv + DeserializeOwned,
    T::Pb: Message,
{
    let typed: T = match json {
        Json::Value(v) => serde_json::from_value(v),
        Json::Ref(v) => T::deserialize(v),
        Json::Text(t) => serde_json::from_slice(t),
    }
    .map_err(|source| {
        let name = std::any::type_name::<T>();
        let kind = name.rsplit("::").next().unwrap_or(name).to_owned();
        Error::Json { kind, source }
    })?;
    Ok(typed.to_pb().encode_to_vec())
}

pub(crate) fn decode<T>(bytes: &[u8]) -> Result<Value, Error>
where
    T: Conv + Serialize,
    T::Pb: Message + Default,
{
    let message = T::Pb::decode(bytes).map_err(|source| Error::Message {
        kind: std::any::type_name::<T>()
            .rsplit("::")
            .next()
            .unwrap_or("")
            .to_owned(),
        source,
    })?;
    serde_json::to_value(T::from_pb(message)).map_err(|source| Error::Json {
        kind: std::any::type_name::<T>().to_owned(),
        source,
    })
}

type Meta = k8s_openapi::apimachinery::pkg::apis::meta::v1::Status;
type DeleteOptions = k8s_openapi::apimachinery::pkg::apis::meta::v1::DeleteOptions;

/// Kinds every group version carries (client-go encodes a `DeleteOptions` under the
/// resource's own group version), found by kind alone.
static META: &[Entry] = &[
    Entry {
        api_version: "v1",
        kind: "Status",
        encode: encode::<Meta>,
        decode: decode::<Meta>,
    },
    Entry {
        api_version: "v1",
        kind: "DeleteOptions",
        encode: encode::<DeleteOptions>,
        decode: decode::<DeleteOptions>,
    },
];

fn table() -> &'static HashMap<(&'static str, &'static str), &'static Entry> {
    static TABLE: OnceLock<HashMap<(&'static str, &'static str), &'static Entry>> = OnceLock::new();
    TABLE.get_or_init(|| {
        crate::generated::ENTRIES
            .iter()
            .map(|e| ((e.api_version, e.kind), e))
            .collect()
    })
}

pub(crate) fn lookup(api_version: &str, kind: &str) -> Option<&'static Entry> {
    META.iter()
        .find(|e| e.kind == kind)
        .or_else(|| table().get(&(api_version, kind)).copied())
}

/// Every `(apiVersion, kind)` with a protobuf form.
pub fn kinds() -> impl Iterator<Item = (&'static str, &'static str)> {
    crate::generated::ENTRIES
        .iter()
        .chain(META)
        .map(|e| (e.api_version, e.kind))
}
