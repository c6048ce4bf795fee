//! Writes: the request is checked and parsed here (JSON bodies, kind and namespace against
//! the URL, patch type, delete options, `dryRun`, `fieldValidation`) and carried out by the
//! [`Backend`](crate::Backend).
//!
//! Each write names its field manager ([`super::manager`]); a server-side apply must.
//!
//! `fieldValidation=Strict` refuses the unknown fields of a created or replaced object and of
//! a merge or strategic merge patch, checked against the published OpenAPI schemas
//! ([`super::openapi::check_strict`]); `Warn` and `Ignore` check nothing.

use apimachinery::ApiError;
use apimachinery::patch::PatchType;
use apimachinery::status::PATCH_MEDIA_TYPES;
use axum::body::Body;
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use bytes::Bytes;
use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::Target;
use super::error::body_too_large;
use super::manager;
use super::negotiate::{Output, body_value, content_type};
use super::openapi::{check_strict, check_strict_patch};
use super::query::{Params, ReadParams};
use super::read::select_all;
use super::render;
use super::subresource;
use crate::{Api, DeleteOptions, User, WriteRequest};

/// The largest request body read (kube-apiserver's limit is 3 MB).
const MAX_BODY: usize = 3 * 1024 * 1024;
/// Bytes of a too-large body read past [`MAX_BODY`] and dropped before the 413 is sent, so a
/// client still sending reads its 413 rather than a reset: HTTP/2 resets a stream whose body
/// is left unread (curl reports a framing error), HTTP/1 closes the connection.
const DISCARD_MAX: usize = 16 * 1024 * 1024;

/// A write verb (as discovery names it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Verb {
    Create,
    Update,
    Patch,
    Delete,
    DeleteCollection,
}

/// One write request, parsed up to its body.
pub(crate) struct Write<'a> {
    pub(crate) api: &'a Api,
    pub(crate) target: &'a Target,
    pub(crate) user: &'a User,
    pub(crate) params: &'a Params,
    pub(crate) headers: &'a HeaderMap,
    /// The negotiated form of the answer.
    pub(crate) output: Output,
}

// === impl Verb ===

impl Verb {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Verb::Create => "create",
            Verb::Update => "update",
            Verb::Patch => "patch",
            Verb::Delete => "delete",
            Verb::DeleteCollection => "deletecollection",
        }
    }
}

// === impl Write ===

impl Write<'_> {
    pub(crate) async fn serve(&self, verb: Verb, body: Body) -> Result<Response, ApiError> {
        self.params.check_field_validation()?;
        if verb != Verb::Patch {
            manager::check(self.params, None)?;
        }
        let body = read_body(body).await?;
        match verb {
            Verb::Create => self.create(body).await,
            Verb::Update => self.update(body).await,
            Verb::Patch => self.patch(body).await,
            Verb::Delete => self.delete(body).await,
            Verb::DeleteCollection => self.delete_collection(body).await,
        }
    }

    async fn create(&self, body: Bytes) -> Result<Response, ApiError> {
        let obj = self.object(&body)?;
        check_strict(
            self.api,
            self.params.get("fieldValidation"),
            self.target,
            &obj,
        )
        .await?;
        let dry_run = self.params.dry_run()?;
        let req = self.request(self.target.name.as_deref().unwrap_or(""), dry_run);
        let created = self.api.backend.create(&req, obj).await?;
        Ok(self.respond(StatusCode::CREATED, &created))
    }

    async fn update(&self, body: Bytes) -> Result<Response, ApiError> {
        let mut obj = self.object(&body)?;
        let name = self.target.name.as_deref().unwrap_or("");
        check_name(&mut obj, name)?;
        check_strict(
            self.api,
            self.params.get("fieldValidation"),
            self.target,
            &obj,
        )
        .await?;
        let req = self.request(name, self.params.dry_run()?);
        let updated = self.api.backend.update(&req, obj).await?;
        Ok(self.respond(StatusCode::OK, &updated))
    }

    async fn patch(&self, body: Bytes) -> Result<Response, ApiError> {
        let ct = content_type(self.headers).unwrap_or("");
        let kind = PatchType::from_content_type(ct).ok_or_else(|| {
            let mut accepted = PATCH_MEDIA_TYPES.to_vec();
            accepted.push(PatchType::Apply.content_type());
            ApiError::unsupported_media_type_accepting(&accepted)
        })?;
        manager::check(self.params, Some(kind))?;
        check_strict_patch(
            self.api,
            self.params.get("fieldValidation"),
            self.target,
            kind,
            &body,
        )
        .await?;
        let name = self.target.name.as_deref().unwrap_or("");
        let req = self.request(name, self.params.dry_run()?);
        let patched = self.api.backend.patch(&req, kind, body).await?;
        Ok(self.respond(StatusCode::OK, &patched))
    }

    async fn delete(&self, body: Bytes) -> Result<Response, ApiError> {
        let (opts, dry_run) = self.delete_options(&body)?;
        let name = self.target.name.as_deref().unwrap_or("");
        let req = self.request(name, dry_run);
        let (code, answer) = self.api.backend.delete(&req, opts).await?;
        let code = StatusCode::from_u16(code).unwrap_or(StatusCode::OK);
        Ok(self.respond(code, &answer))
    }

    /// Lists what the selectors pick, then deletes each through the backend; answers the list
    /// of deleted objects (objects that vanished meanwhile are skipped).
    async fn delete_collection(&self, body: Bytes) -> Result<Response, ApiError> {
        let (opts, dry_run) = self.delete_options(&body)?;
        let info = &self.target.info;
        let read = ReadParams::parse(self.params, false)?;
        let ns = self.target.namespace.as_deref();
        let selected = select_all(self.api, info, ns, None, &read).await?;
        let mut deleted = Vec::with_capacity(selected.items.len());
        for obj in &selected.items {
            let req = self.request(&obj.key.name, dry_run);
            let req = WriteRequest {
                namespace: &obj.key.namespace,
                collection: true,
                ..req
            };
            match self.api.backend.delete(&req, opts.clone()).await {
                Ok((_, answer)) if answer["kind"] != "Status" => deleted.push(answer),
                Ok(_) => deleted.push(render::object_value(info, obj, None)?),
                Err(e) if e.code == 404 => {}
                Err(e) => return Err(e),
            }
        }
        let list = json!({
            "kind": info.list_kind,
            "apiVersion": info.api_version(),
            "metadata": { "resourceVersion": self.api.store.revision().to_string() },
            "items": deleted,
        });
        Ok(self.respond(StatusCode::OK, &list))
    }

    /// The answer in the negotiated form (`as=PartialObjectMetadata` applies to writes too).
    fn respond(&self, code: StatusCode, value: &Value) -> Response {
        if self.output == Output::Metadata {
            return render::value_response(self.output, code, &render::metadata_form(value));
        }
        render::value_response(self.output, code, value)
    }

    fn request<'r>(&'r self, name: &'r str, dry_run: bool) -> WriteRequest<'r> {
        WriteRequest {
            info: &self.target.info,
            namespace: self.target.namespace.as_deref().unwrap_or(""),
            name,
            subresource: self.target.subresource.as_deref(),
            user: self.user,
            dry_run,
            owner: manager::owner(self.params, self.headers),
            collection: false,
        }
    }

    /// The JSON object in the body, with kind and apiVersion checked (and filled in) for the
    /// resource and its same-kind subresources, and the namespace checked against the URL.
    fn object(&self, body: &[u8]) -> Result<Value, ApiError> {
        let mut obj = body_value(self.headers, body)?;
        let Some(map) = obj.as_object_mut() else {
            return Err(ApiError::bad_request(
                "the request body is not a JSON object",
            ));
        };
        let info = &self.target.info;
        let same_kind = self
            .target
            .subresource
            .as_deref()
            .is_none_or(|s| subresource::spec(s).kind.is_none());
        if same_kind {
            check_type(map, "apiVersion", &info.api_version(), "API version")?;
            check_type(map, "kind", &info.kind, "kind")?;
        }
        if let Some(ns) = self.target.namespace.as_deref() {
            check_namespace(map, ns)?;
        }
        Ok(obj)
    }

    /// `DeleteOptions` from the body (JSON, may be empty) merged with the query parameters
    /// (the body wins), and whether it is a dry run.
    fn delete_options(&self, body: &[u8]) -> Result<(DeleteOptions, bool), ApiError> {
        let parsed: DeleteBody = if body.iter().all(u8::is_ascii_whitespace) {
            DeleteBody::default()
        } else {
            let invalid = |e: serde_json::Error| {
                ApiError::bad_request(format!("the DeleteOptions in the body are invalid: {e}"))
            };
            match body_value(self.headers, body)? {
                Value::Null => DeleteBody::default(),
                value => serde_json::from_value(value).map_err(invalid)?,
            }
        };
        let q = self.params;
        let orphan = parsed.orphan_dependents.or(q.flag("orphanDependents"));
        let mut policy = parsed
            .propagation_policy
            .or_else(|| q.get("propagationPolicy").map(str::to_owned))
            .filter(|p| !p.is_empty());
        if let Some(orphan) = orphan {
            if policy.is_some() {
                return Err(invalid_delete_options(
                    "propagationPolicy",
                    "Invalid value: orphanDependents and propagationPolicy cannot both be set",
                ));
            }
            policy = orphan.then(|| "Orphan".to_owned());
        }
        if let Some(p) = &policy
            && !["Orphan", "Background", "Foreground"].contains(&p.as_str())
        {
            return Err(invalid_delete_options(
                "propagationPolicy",
                &format!(
                    "Unsupported value: {p:?}: supported values: \"Background\", \"Foreground\", \"Orphan\""
                ),
            ));
        }
        let preconditions = parsed.preconditions.unwrap_or_default();
        let opts = DeleteOptions {
            grace_period_seconds: match parsed.grace_period_seconds {
                Some(g) => Some(g),
                None => q.int("gracePeriodSeconds")?,
            },
            uid: preconditions.uid,
            resource_version: preconditions.resource_version,
            propagation_policy: policy,
        };
        let body_dry_run = parsed.dry_run.unwrap_or_default();
        if let Some(v) = body_dry_run.iter().find(|v| *v != "All") {
            return Err(ApiError::bad_request(format!(
                "dryRun: Unsupported value: {v:?}: supported values: \"All\""
            )));
        }
        let dry_run = !body_dry_run.is_empty() || q.dry_run()?;
        Ok((opts, dry_run))
    }
}

/// The body of a DELETE.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct DeleteBody {
    grace_period_seconds: Option<i64>,
    preconditions: Option<Preconditions>,
    propagation_policy: Option<String>,
    orphan_dependents: Option<bool>,
    dry_run: Option<Vec<String>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Preconditions {
    uid: Option<String>,
    resource_version: Option<String>,
}

/// `kind`/`apiVersion` must match the URL's resource when given; missing ones are filled in.
fn check_type(
    map: &mut Map<String, Value>,
    key: &str,
    want: &str,
    what: &str,
) -> Result<(), ApiError> {
    match map.get(key) {
        None | Some(Value::Null) => {
            map.insert(key.to_owned(), Value::String(want.to_owned()));
            Ok(())
        }
        Some(Value::String(have)) if have == want => Ok(()),
        Some(Value::String(have)) if have.is_empty() => {
            map.insert(key.to_owned(), Value::String(want.to_owned()));
            Ok(())
        }
        Some(have) => Err(ApiError::bad_request(format!(
            "the {what} in the data ({}) does not match the expected {what} ({want})",
            have.as_str().unwrap_or("?")
        ))),
    }
}

/// `metadata.namespace` must be the URL's namespace; missing, it is filled in.
fn check_namespace(map: &mut Map<String, Value>, ns: &str) -> Result<(), ApiError> {
    let meta = map
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    let Some(meta) = meta.as_object_mut() else {
        return Err(ApiError::bad_request("metadata must be an object"));
    };
    match meta.get("namespace").and_then(Value::as_str) {
        None | Some("") => {
            meta.insert("namespace".to_owned(), Value::String(ns.to_owned()));
            Ok(())
        }
        Some(have) if have == ns => Ok(()),
        Some(_) => Err(ApiError::bad_request(
            "the namespace of the provided object does not match the namespace sent on the request",
        )),
    }
}

/// An update's `metadata.name` must be the URL's name; missing, it is filled in.
fn check_name(obj: &mut Value, name: &str) -> Result<(), ApiError> {
    let Some(meta) = obj
        .as_object_mut()
        .map(|m| m.entry("metadata").or_insert_with(|| json!({})))
        .and_then(Value::as_object_mut)
    else {
        return Err(ApiError::bad_request("metadata must be an object"));
    };
    match meta.get("name").and_then(Value::as_str) {
        None | Some("") => {
            meta.insert("name".to_owned(), Value::String(name.to_owned()));
            Ok(())
        }
        Some(have) if have == name => Ok(()),
        Some(have) => Err(ApiError::bad_request(format!(
            "the name of the object ({have}) does not match the name on the URL ({name})"
        ))),
    }
}

fn invalid_delete_options(field: &str, why: &str) -> ApiError {
    ApiError::invalid("meta.k8s.io", "DeleteOptions", "", &[(field, why)])
}

/// The body, if it is at most [`MAX_BODY`]; a larger one is read on (up to [`DISCARD_MAX`])
/// and dropped, and is a 413.
async fn read_body(body: Body) -> Result<Bytes, ApiError> {
    let mut chunks = body.into_data_stream();
    let mut kept = bytes::BytesMut::new();
    let mut seen = 0usize;
    while let Some(chunk) = futures::StreamExt::next(&mut chunks).await {
        let chunk = chunk.map_err(|e| {
            tracing::debug!(error = %e, "reading a request body");
            ApiError::bad_request(format!("reading the request body: {e}"))
        })?;
        seen = seen.saturating_add(chunk.len());
        if seen <= MAX_BODY {
            kept.extend_from_slice(&chunk);
        } else if seen > MAX_BODY + DISCARD_MAX {
            break;
        } else if !kept.is_empty() {
            kept = bytes::BytesMut::new();
        }
    }
    if seen > MAX_BODY {
        return Err(body_too_large(MAX_BODY));
    }
    Ok(kept.freeze())
}
