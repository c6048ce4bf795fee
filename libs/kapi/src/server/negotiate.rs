//! Content negotiation: which representation the `Accept` header asks for (JSON, a table,
//! metadata only, or Kubernetes' protobuf), and how a request body is encoded.

use apimachinery::ApiError;
use axum::http::HeaderMap;
use axum::http::header::{ACCEPT, CONTENT_TYPE};
use serde_json::Value;

use super::render::JSON;

/// How objects are represented in a response.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Output {
    /// The objects themselves.
    Json,
    /// A `meta.k8s.io/v1` `Table` (`as=Table`).
    Table,
    /// `PartialObjectMetadata` / `PartialObjectMetadataList`.
    Metadata,
    /// The objects in `application/vnd.kubernetes.protobuf` (built-in kinds only).
    Protobuf,
}

impl Output {
    /// The `Content-Type` of a response body in this form.
    pub(crate) fn media_type(self) -> &'static str {
        match self {
            Output::Protobuf => kpb::MEDIA_TYPE,
            _ => JSON,
        }
    }
}

/// How a request body is encoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum BodyFormat {
    Json,
    Protobuf,
}

/// Which discovery document `/api` and `/apis` answer with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Discovery {
    /// `APIVersions` / `APIGroupList`.
    Legacy,
    /// `apidiscovery.k8s.io/v2` `APIGroupDiscoveryList`.
    Aggregated,
}

/// The `Content-Type` of an aggregated discovery answer.
pub(crate) const AGGREGATED_DISCOVERY: &str =
    "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";

/// What a resource request may answer with, in the client's order of preference; protobuf
/// only when `protobuf` (the kind has a protobuf form).
pub(crate) fn output(headers: &HeaderMap, protobuf: bool) -> Result<Output, ApiError> {
    choose(headers, |range| {
        if range.essence == kpb::MEDIA_TYPE {
            return (protobuf && range.param("as").is_none()).then_some(Output::Protobuf);
        }
        json_output(range)
    })
}

fn json_output(range: &MediaRange) -> Option<Output> {
    if !range.is_json() {
        return None;
    }
    match range.param("as") {
        None => Some(Output::Json),
        Some("Table") if range.is_meta_v1() => Some(Output::Table),
        Some("PartialObjectMetadata" | "PartialObjectMetadataList") if range.is_meta_v1() => {
            Some(Output::Metadata)
        }
        Some(_) => None,
    }
}

/// What `/api` and `/apis` answer with; other discovery documents take [`output`] and use
/// only the `Json` form.
pub(crate) fn discovery(headers: &HeaderMap) -> Result<Discovery, ApiError> {
    choose(headers, |range| match range.param("as") {
        _ if !range.is_json() => None,
        None => Some(Discovery::Legacy),
        Some("APIGroupDiscoveryList")
            if range.param("g") == Some("apidiscovery.k8s.io")
                && range.param("v") == Some("v2") =>
        {
            Some(Discovery::Aggregated)
        }
        Some(_) => None,
    })
}

/// How the request body is encoded: JSON (or no content type) or protobuf; anything else
/// is 415.
pub(crate) fn body_format(headers: &HeaderMap) -> Result<BodyFormat, ApiError> {
    let Some(ct) = headers.get(CONTENT_TYPE) else {
        return Ok(BodyFormat::Json);
    };
    let ct = ct.to_str().unwrap_or("");
    let essence = ct
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    match essence.as_str() {
        "application/json" | "" => Ok(BodyFormat::Json),
        kpb::MEDIA_TYPE => Ok(BodyFormat::Protobuf),
        _ => Err(ApiError::unsupported_media_type_accepting(&[
            JSON,
            kpb::MEDIA_TYPE,
        ])),
    }
}

/// The JSON form of a request body in either encoding. A protobuf body of a kind without a
/// protobuf form (a custom resource) is 415; one that does not decode is 400.
pub(crate) fn body_value(headers: &HeaderMap, body: &[u8]) -> Result<Value, ApiError> {
    match body_format(headers)? {
        BodyFormat::Json => serde_json::from_slice(body)
            .map_err(|e| ApiError::bad_request(format!("the request body is not valid JSON: {e}"))),
        BodyFormat::Protobuf => kpb::decode(body).map_err(|e| match e {
            kpb::Error::Unsupported { .. } => {
                let mut err = ApiError::unsupported_media_type_accepting(&[JSON]);
                err.message = e.to_string();
                err
            }
            e => ApiError::bad_request(format!("the protobuf request body does not decode: {e}")),
        }),
    }
}

/// The raw `Content-Type` of a request (for patches).
pub(crate) fn content_type(headers: &HeaderMap) -> Option<&str> {
    headers.get(CONTENT_TYPE).and_then(|v| v.to_str().ok())
}

/// One entry of an `Accept` header.
#[derive(Debug, PartialEq)]
struct MediaRange {
    /// `type/subtype`, lowercase.
    essence: String,
    params: Vec<(String, String)>,
    q: f32,
}

impl MediaRange {
    fn param(&self, key: &str) -> Option<&str> {
        self.params
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    fn is_meta_v1(&self) -> bool {
        self.param("g") == Some("meta.k8s.io") && self.param("v") == Some("v1")
    }

    /// JSON, or a wildcard JSON satisfies.
    fn is_json(&self) -> bool {
        matches!(
            self.essence.as_str(),
            "application/json" | "*/*" | "application/*"
        )
    }
}

/// The first acceptable JSON-family range (by `q`, then order) that `pick` can serve; no or
/// an empty `Accept` header means plain JSON. Nothing acceptable is 406.
fn choose<T>(headers: &HeaderMap, pick: impl Fn(&MediaRange) -> Option<T>) -> Result<T, ApiError> {
    let mut ranges: Vec<MediaRange> = headers
        .get_all(ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(parse_range)
        .collect();
    let empty = MediaRange {
        essence: "application/json".to_owned(),
        params: Vec::new(),
        q: 1.0,
    };
    if ranges.is_empty() {
        return pick(&empty).ok_or_else(not_acceptable);
    }
    // Stable: equal weights keep the client's order.
    ranges.sort_by(|a, b| b.q.total_cmp(&a.q));
    ranges
        .iter()
        .filter(|r| r.q > 0.0)
        .find_map(pick)
        .ok_or_else(not_acceptable)
}

fn parse_range(s: &str) -> Option<MediaRange> {
    let mut parts = s.split(';');
    let essence = parts.next()?.trim().to_ascii_lowercase();
    if essence.is_empty() {
        return None;
    }
    let mut params = Vec::new();
    let mut q = 1.0;
    for p in parts {
        let Some((k, v)) = p.split_once('=') else {
            continue;
        };
        let (k, v) = (k.trim(), v.trim().trim_matches('"'));
        if k == "q" {
            q = v.parse().unwrap_or(1.0);
        } else {
            params.push((k.to_owned(), v.to_owned()));
        }
    }
    Some(MediaRange { essence, params, q })
}

fn not_acceptable() -> ApiError {
    ApiError::not_acceptable(
        "only the following media types are accepted: application/json, \
         application/json;as=Table;v=v1;g=meta.k8s.io, \
         application/json;as=PartialObjectMetadata;v=v1;g=meta.k8s.io, and \
         application/vnd.kubernetes.protobuf for built-in kinds",
    )
}

#[cfg(test)]
mod tests;
