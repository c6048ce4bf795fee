//! OpenAPI: `/openapi/v2` (Swagger 2.0, as JSON or as the gnostic protobuf `kubectl` asks
//! for) and `/openapi/v3` (the root listing one document per group version, each under a
//! `?hash=` URL). They carry the schema of every served kind, so `kubectl explain`, its
//! client-side validation (old versions, from v2) and `kubectl apply`'s strategic merge
//! patches (from the `x-kubernetes-patch-*` extensions) work:
//! - built-in kinds: generated from `k8s-openapi`'s `schemars` support ([`builtin`]), under
//!   Kubernetes' definition names (`io.k8s.api.core.v1.Pod`);
//! - custom resources: the CRD's `openAPIV3Schema` per version ([`crd`]), named as
//!   kube-apiserver does (`com.example.v1.Widget`); kinds with no known schema get an open
//!   object schema. Each kind's definition carries `x-kubernetes-group-version-kind`.
//!
//! The paths are kube-apiserver's ([`paths`]): collection and object, the list across all
//! namespaces, the `/watch/` paths, and every subresource, each operation with kube's
//! operation id (`readCoreV1NamespacedPodStatus`) and `x-kubernetes-action`.
//!
//! Every write operation declares the `fieldValidation` query parameter, so `kubectl`
//! (1.27 and later) leaves validation to the server ([`strict`]); PATCH
//! operations list the patch types, strategic merge for built-ins only, as kube-apiserver.
//!
//! The documents are built once per registry state (served resources and CRD versions) and
//! cached; each carries its content hash as ETag (and in the URL, v3), `If-None-Match` gets a
//! 304, a client that accepts gzip gets it (compressed once per document). A v3 URL with a
//! stale hash is redirected to the current one, as kube-apiserver does.

mod builtin;
mod crd;
mod document;
mod paths;
mod proto;
mod strict;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::io::Write;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

use apimachinery::{ApiError, ResourceInfo};
use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::Response;
use bytes::Bytes;
use flate2::Compression;
use flate2::write::GzEncoder;
use objstore::ListOptions;
use prost::Message;
use serde_json::{Map, Value, json};

pub(crate) use strict::{check_strict, check_strict_patch};

use super::error::not_found_path;
use super::path::Route;
use crate::Api;
use document::Model;

/// A kind: group (`""` for core), version, kind.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct Gvk {
    pub(crate) group: String,
    pub(crate) version: String,
    pub(crate) kind: String,
}

/// The reference prefix of Swagger 2.0 definitions.
const REF_V2: &str = "#/definitions/";
/// The reference prefix of OpenAPI 3.0 schemas.
const REF_V3: &str = "#/components/schemas/";
/// The media type of the gnostic protobuf form of `/openapi/v2`.
const PROTO_V2: &str = "application/com.github.proto-openapi.spec.v2@v1.0+protobuf";
/// The content type kube-apiserver answers the protobuf form with.
const PROTO_V2_CONTENT_TYPE: &str = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf";
const CRD_STORE_RESOURCE: &str = "customresourcedefinitions.apiextensions.k8s.io";
const JSON: &str = "application/json";
const NO_CACHE: &str = "no-cache, private";
/// How many registry states' documents are kept.
const CACHED_STATES: usize = 4;

/// The documents of one registry state, encoded.
struct Documents {
    key: u64,
    model: Model,
    v2_json: Encoded,
    v2_proto: Encoded,
    v3_root: Encoded,
    /// By path key (`api/v1`).
    v3: BTreeMap<String, Encoded>,
}

/// One encoded document, its content hash (ETag, `?hash=`) and, once asked for, its gzip form.
struct Encoded {
    plain: Bytes,
    hash: String,
    gzip: OnceLock<Bytes>,
}

/// Answers `/openapi/v2`, `/openapi/v3` and `/openapi/v3/<api/v1 | apis/g/v>`.
pub(crate) async fn serve(
    api: &Api,
    route: &Route,
    query: Option<&str>,
    headers: &HeaderMap,
) -> Result<Response, ApiError> {
    let docs = documents(api).await?;
    let reply = Reply::of(headers);
    match route {
        Route::OpenApiV2 if wants_protobuf(headers) => {
            Ok(reply.send(&docs.v2_proto, PROTO_V2_CONTENT_TYPE, NO_CACHE))
        }
        Route::OpenApiV2 => Ok(reply.send(&docs.v2_json, JSON, NO_CACHE)),
        Route::OpenApiRoot => Ok(reply.send(&docs.v3_root, JSON, NO_CACHE)),
        Route::OpenApiGroupVersion(path) => {
            let doc = docs.v3.get(path).ok_or_else(not_found_path)?;
            let asked = query
                .into_iter()
                .flat_map(|q| form_urlencoded::parse(q.as_bytes()))
                .find(|(k, _)| k == "hash")
                .map(|(_, v)| v.into_owned());
            Ok(match asked {
                Some(h) if h != doc.hash => {
                    redirect(&format!("/openapi/v3/{path}?hash={}", doc.hash))
                }
                Some(_) => reply.send(doc, JSON, "public, immutable"),
                None => reply.send(doc, JSON, NO_CACHE),
            })
        }
        _ => Err(not_found_path()),
    }
}

// === impl Gvk ===

impl Gvk {
    pub(crate) fn new(group: &str, version: &str, kind: &str) -> Gvk {
        Gvk {
            group: group.to_owned(),
            version: version.to_owned(),
            kind: kind.to_owned(),
        }
    }
}

// === impl Documents ===

impl Documents {
    fn build(key: u64, resources: &[Arc<ResourceInfo>], crds: &[Value]) -> Documents {
        let started = Instant::now();
        let model = Model::new(resources, crds);
        let v2 = model.v2();
        let v2_json = Encoded::new(serde_json::to_vec(&v2).expect("a JSON value serializes"));
        let v2_proto = Encoded::new(proto::document(&v2).encode_to_vec());
        let v3: BTreeMap<String, Encoded> = model
            .v3()
            .into_iter()
            .map(|(path, doc)| {
                let bytes = serde_json::to_vec(&doc).expect("a JSON value serializes");
                (path, Encoded::new(bytes))
            })
            .collect();
        let paths: Map<String, Value> = v3
            .iter()
            .map(|(path, doc)| {
                let url = format!("/openapi/v3/{path}?hash={}", doc.hash);
                (path.clone(), json!({ "serverRelativeURL": url }))
            })
            .collect();
        let v3_root = Encoded::new(json!({ "paths": paths }).to_string().into_bytes());
        tracing::debug!(
            elapsed_ms = started.elapsed().as_millis() as u64,
            v2_json = v2_json.plain.len(),
            v2_proto = v2_proto.plain.len(),
            v3 = v3.values().map(|d| d.plain.len()).sum::<usize>(),
            "built OpenAPI documents"
        );
        Documents {
            key,
            model,
            v2_json,
            v2_proto,
            v3_root,
            v3,
        }
    }
}

/// The documents of the API's current state, from the cache or built now.
async fn documents(api: &Api) -> Result<Arc<Documents>, ApiError> {
    static CACHE: Mutex<Vec<Arc<Documents>>> = Mutex::new(Vec::new());
    let resources = api.registry.all();
    let crds = crd_objects(api).await?;
    let key = state_key(&resources, &crds);
    if let Some(d) = CACHE
        .lock()
        .expect("openapi cache poisoned")
        .iter()
        .find(|d| d.key == key)
    {
        return Ok(d.clone());
    }
    let crds: Vec<Value> = crds.into_iter().map(|(_, v)| v).collect();
    let docs =
        tokio::task::spawn_blocking(move || Arc::new(Documents::build(key, &resources, &crds)))
            .await
            .map_err(|e| ApiError::internal(format!("building the OpenAPI documents: {e}")))?;
    let mut cache = CACHE.lock().expect("openapi cache poisoned");
    cache.retain(|d| d.key != key);
    cache.push(docs.clone());
    if cache.len() > CACHED_STATES {
        cache.remove(0);
    }
    Ok(docs)
}

/// The stored CRDs with their resourceVersions.
async fn crd_objects(api: &Api) -> Result<Vec<(String, Value)>, ApiError> {
    let listed = api
        .store
        .list(ListOptions::new(CRD_STORE_RESOURCE))
        .await
        .map_err(|e| ApiError::internal(format!("listing CustomResourceDefinitions: {e}")))?;
    Ok(listed
        .items
        .iter()
        .filter_map(|item| {
            let obj = serde_json::from_slice(&item.value).ok()?;
            Some((format!("{}@{}", item.key, item.resource_version), obj))
        })
        .collect())
}

fn state_key(resources: &[Arc<ResourceInfo>], crds: &[(String, Value)]) -> u64 {
    let mut h = DefaultHasher::new();
    let mut served: Vec<_> = resources
        .iter()
        .map(|r| {
            (
                &r.group,
                &r.version,
                &r.kind,
                &r.plural,
                r.namespaced,
                r.custom,
            )
        })
        .collect();
    served.sort();
    served.hash(&mut h);
    let mut versions: Vec<&String> = crds.iter().map(|(v, _)| v).collect();
    versions.sort();
    versions.hash(&mut h);
    h.finish()
}

/// A content hash, as the v2 ETag and the v3 `?hash=`.
fn hash(bytes: &[u8]) -> String {
    let mut h = DefaultHasher::new();
    bytes.hash(&mut h);
    format!("{:016X}", h.finish())
}

/// Whether the `Accept` header asks for the protobuf form before JSON.
fn wants_protobuf(headers: &HeaderMap) -> bool {
    let accept = headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|t| {
            t.split(';')
                .next()
                .unwrap_or("")
                .trim()
                .to_ascii_lowercase()
        });
    for t in accept {
        if t == PROTO_V2.to_ascii_lowercase() || t == PROTO_V2_CONTENT_TYPE {
            return true;
        }
        if t == "application/json" || t == "*/*" || t == "application/*" {
            return false;
        }
    }
    false
}

/// How to answer: whether the client has the document already (`If-None-Match`) and
/// whether it takes gzip.
struct Reply<'a> {
    if_none_match: Option<&'a str>,
    gzip: bool,
}

impl<'a> Reply<'a> {
    fn of(headers: &'a HeaderMap) -> Reply<'a> {
        let gzip = headers
            .get_all(header::ACCEPT_ENCODING)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .any(|coding| {
                let mut parts = coding.split(';').map(str::trim);
                let name = parts.next().unwrap_or("");
                let refused = parts.any(|p| p.replace(' ', "") == "q=0");
                name.eq_ignore_ascii_case("gzip") && !refused
            });
        Reply {
            if_none_match: headers
                .get(header::IF_NONE_MATCH)
                .and_then(|v| v.to_str().ok()),
            gzip,
        }
    }

    /// The document (200), or 304 when the client's ETag matches.
    fn send(&self, doc: &Encoded, content_type: &str, cache_control: &str) -> Response {
        let etag = format!("\"{}\"", doc.hash);
        let cached = self
            .if_none_match
            .is_some_and(|v| v.split(',').any(|t| t.trim() == etag || t.trim() == "*"));
        let mut resp = if cached {
            let mut resp = Response::new(Body::empty());
            *resp.status_mut() = StatusCode::NOT_MODIFIED;
            resp
        } else if self.gzip {
            let mut resp = Response::new(Body::from(doc.gzipped()));
            resp.headers_mut()
                .insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
            resp
        } else {
            Response::new(Body::from(doc.plain.clone()))
        };
        let h = resp.headers_mut();
        h.insert(header::CONTENT_TYPE, header_value(content_type));
        h.insert(header::ETAG, header_value(&etag));
        h.insert(header::CACHE_CONTROL, header_value(cache_control));
        h.insert(
            header::VARY,
            HeaderValue::from_static("Accept, Accept-Encoding"),
        );
        resp
    }
}

// === impl Encoded ===

impl Encoded {
    fn new(plain: Vec<u8>) -> Encoded {
        let hash = hash(&plain);
        Encoded {
            plain: Bytes::from(plain),
            hash,
            gzip: OnceLock::new(),
        }
    }

    /// The gzip form, compressed on first use.
    fn gzipped(&self) -> Bytes {
        self.gzip
            .get_or_init(|| {
                let mut out = GzEncoder::new(Vec::new(), Compression::fast());
                // Writing to a Vec cannot fail.
                let _ = out.write_all(&self.plain);
                Bytes::from(out.finish().unwrap_or_default())
            })
            .clone()
    }
}

fn redirect(location: &str) -> Response {
    let mut resp = Response::new(Body::empty());
    *resp.status_mut() = StatusCode::MOVED_PERMANENTLY;
    resp.headers_mut()
        .insert(header::LOCATION, header_value(location));
    resp
}

fn header_value(s: &str) -> HeaderValue {
    // Every value here is built from ASCII names, hex hashes and URL paths.
    HeaderValue::from_str(s).unwrap_or_else(|_| HeaderValue::from_static(""))
}
