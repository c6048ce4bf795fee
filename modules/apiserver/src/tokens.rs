//! Service-account tokens. TokenRequest (`POST
//! /api/v1/namespaces/{ns}/serviceaccounts/{name}/token`, an `authentication.k8s.io/v1`
//! `TokenRequest`) issues a [`jwt`] for an existing account, optionally bound to a pod or a
//! secret; a bearer token so issued authenticates as the account for as long as it is in force
//! and the account (and the object it is bound to) still exist. The signing key is made on first
//! start and kept in a file beside the CA.

mod jwt;

use std::path::Path;
use std::sync::Arc;

use apimachinery::ApiError;
use apimachinery::patch::PatchType;
use apimachinery::time::{format_rfc3339, now_unix, parse_rfc3339};
use bytes::Bytes;
use kapi::{Backend, DeleteOptions, User, WriteRequest};
use serde::Deserialize;
use serde_json::{Map, Value, json};

use crate::auth::stored_object;
use crate::error::{ApiServerError, TokenError};
use jwt::{Claims, Private, Ref, Signer};

/// The lifetime of a token whose request names none.
/// The audience of the API itself: a token without another audience is for it.
pub(crate) const API_AUDIENCE: &str = jwt::ISSUER;

const DEFAULT_EXPIRATION_SECONDS: i64 = 3600;
/// The shortest lifetime a request may ask for (kube-apiserver's validation).
const MIN_EXPIRATION_SECONDS: i64 = 600;
/// The longest lifetime a request may ask for (kube-apiserver's validation: 2^32 s).
const MAX_REQUESTED_SECONDS: i64 = 1 << 32;
/// The longest lifetime a token gets; longer requests are shortened to it (kube-apiserver's
/// `--service-account-max-token-expiration`).
const MAX_EXPIRATION_SECONDS: i64 = 48 * 3600;

const GROUP: &str = "authentication.k8s.io";
const API_VERSION: &str = "authentication.k8s.io/v1";
const KIND: &str = "TokenRequest";

/// Issues and checks tokens: the signing key, and the store the accounts are in.
#[derive(Clone)]
pub(crate) struct Tokens {
    signer: Arc<Signer>,
    store: objstore::Store,
}

/// Wraps a backend: serves the `token` subresource of serviceaccounts, passes everything else
/// on.
pub(crate) struct TokenRequests {
    pub(crate) inner: Arc<dyn Backend>,
    pub(crate) tokens: Tokens,
}

/// A TokenRequest's spec, checked and defaulted.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Request {
    audiences: Vec<String>,
    expiration_seconds: i64,
    bound: Option<BoundRef>,
}

/// `spec.boundObjectRef`.
#[derive(Clone, Debug, PartialEq, Eq)]
struct BoundRef {
    kind: BoundKind,
    name: String,
    /// `""`: any uid.
    uid: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum BoundKind {
    Pod,
    Secret,
}

/// The parts of a TokenRequest body that are read (types checked by parsing).
#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Body {
    metadata: Option<BodyMeta>,
    spec: Option<BodySpec>,
}

#[derive(Default, Deserialize)]
struct BodyMeta {
    name: Option<String>,
}

#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct BodySpec {
    audiences: Option<Vec<String>>,
    expiration_seconds: Option<i64>,
    bound_object_ref: Option<BodyRef>,
}

#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct BodyRef {
    kind: Option<String>,
    api_version: Option<String>,
    name: Option<String>,
    uid: Option<String>,
}

// === impl Tokens ===

impl Tokens {
    /// Tokens signed with the key in `key_file`, made there first if the file does not exist.
    pub(crate) fn load_or_generate(
        key_file: &Path,
        store: objstore::Store,
    ) -> Result<Tokens, ApiServerError> {
        let key_error = |source| ApiServerError::ServiceAccountKey {
            path: key_file.into(),
            source,
        };
        let text = match std::fs::read_to_string(key_file) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let text = Signer::generate_pem().map_err(key_error)?;
                crate::kubeconfig::write(key_file, &text).map_err(|source| ApiServerError::Io {
                    op: "writing the service-account key",
                    path: key_file.into(),
                    source,
                })?;
                tracing::info!(path = %key_file.display(), "made the service-account token signing key");
                text
            }
            Err(source) => {
                return Err(ApiServerError::Io {
                    op: "reading the service-account key",
                    path: key_file.into(),
                    source,
                });
            }
        };
        let signer = Signer::from_pem(&text).map_err(key_error)?;
        Ok(Tokens {
            signer: Arc::new(signer),
            store,
        })
    }

    /// The user a bearer token authenticates, if it is a service-account token in force at
    /// `now` whose account (and bound object) still exist as it names them.
    pub(crate) async fn user(&self, token: &str, now: i64) -> Result<User, TokenError> {
        self.user_for(token, now, &[API_AUDIENCE])
            .await
            .map(|(user, _)| user)
    }

    /// Like [`Tokens::user`], for a token meant for any of `audiences`; with the audiences
    /// it is valid for among them.
    pub(crate) async fn user_for(
        &self,
        token: &str,
        now: i64,
        audiences: &[&str],
    ) -> Result<(User, Vec<String>), TokenError> {
        let (claims, shared) = self.signer.verify_for(token, now, audiences)?;
        let k = &claims.kubernetes;
        self.still("serviceaccounts", &k.namespace, &k.serviceaccount)
            .await?;
        if let Some(pod) = &k.pod {
            let pod = self.still("pods", &k.namespace, pod).await?;
            let deleted = pod["metadata"]["deletionTimestamp"]
                .as_str()
                .and_then(parse_rfc3339);
            if deleted.is_some_and(|at| at + jwt::LEEWAY_SECONDS < now) {
                return Err(TokenError::Invalidated("the bound pod was deleted".into()));
            }
        }
        if let Some(secret) = &k.secret {
            self.still("secrets", &k.namespace, secret).await?;
        }
        let user = User {
            name: claims.sub.clone(),
            groups: vec![
                "system:serviceaccounts".into(),
                format!("system:serviceaccounts:{}", k.namespace),
                "system:authenticated".into(),
            ],
        };
        Ok((user, shared))
    }

    /// Answers a TokenRequest for account `req.name` at `now`.
    async fn issue(
        &self,
        req: &WriteRequest<'_>,
        obj: &Value,
        now: i64,
    ) -> Result<Value, ApiError> {
        let (namespace, name) = (req.namespace, req.name);
        let request = Request::parse(obj, name)?;
        let account = stored_object(&self.store, "serviceaccounts", namespace, name)
            .await?
            .ok_or_else(|| ApiError::not_found("", "serviceaccounts", name))?;
        let mut private = Private {
            namespace: namespace.to_owned(),
            serviceaccount: Ref {
                name: name.to_owned(),
                uid: uid(&account),
            },
            pod: None,
            secret: None,
        };
        if let Some(bound) = &request.bound {
            let found = self.bound_object(namespace, name, bound).await?;
            match bound.kind {
                BoundKind::Pod => private.pod = Some(found),
                BoundKind::Secret => private.secret = Some(found),
            }
        }
        let claims = Claims {
            iss: jwt::ISSUER.to_owned(),
            sub: Claims::subject(namespace, name),
            aud: request.audiences.clone(),
            exp: now + request.expiration_seconds,
            iat: now,
            nbf: now,
            kubernetes: private,
        };
        let token = self
            .signer
            .sign(&claims)
            .map_err(|e| ApiError::internal(e.to_string()))?;
        Ok(request.answer(obj, namespace, name, &token, now))
    }

    /// The object a request binds the token to, as a claim: it must exist, have the uid the
    /// request names (if any) and, for a pod, run as the account.
    async fn bound_object(
        &self,
        namespace: &str,
        account: &str,
        bound: &BoundRef,
    ) -> Result<Ref, ApiError> {
        let plural = bound.kind.plural();
        let obj = stored_object(&self.store, plural, namespace, &bound.name)
            .await?
            .ok_or_else(|| ApiError::not_found("", plural, &bound.name))?;
        if bound.kind == BoundKind::Pod {
            let runs_as = pod_service_account(&obj);
            if runs_as != account {
                return Err(ApiError::bad_request(format!(
                    "cannot bind token for serviceaccount {account:?} to pod running with different serviceaccount name."
                )));
            }
        }
        let found = uid(&obj);
        if !bound.uid.is_empty() && bound.uid != found {
            let why = format!(
                "the UID in the bound object reference ({}) does not match the UID in record. The object might have been deleted and then recreated",
                bound.uid
            );
            return Err(ApiError::conflict("", bound.kind.name(), &bound.name, &why));
        }
        Ok(Ref {
            name: bound.name.clone(),
            uid: found,
        })
    }

    /// The object a token names, if it still exists with the uid the token gives it.
    async fn still(&self, plural: &str, namespace: &str, named: &Ref) -> Result<Value, TokenError> {
        let found = stored_object(&self.store, plural, namespace, &named.name)
            .await
            .map_err(|e| TokenError::Lookup(e.message))?;
        match found {
            Some(obj) if uid(&obj) == named.uid => Ok(obj),
            Some(_) => Err(TokenError::Invalidated(format!(
                "{plural} {namespace}/{} was replaced",
                named.name
            ))),
            None => Err(TokenError::Invalidated(format!(
                "{plural} {namespace}/{} no longer exists",
                named.name
            ))),
        }
    }
}

// === impl TokenRequests ===

#[async_trait::async_trait]
impl Backend for TokenRequests {
    async fn create(&self, req: &WriteRequest<'_>, obj: Value) -> Result<Value, ApiError> {
        let info = req.info;
        if (info.group.as_str(), info.plural.as_str(), req.subresource)
            == ("", "serviceaccounts", Some("token"))
        {
            return self.tokens.issue(req, &obj, now_unix()).await;
        }
        self.inner.create(req, obj).await
    }

    async fn update(&self, req: &WriteRequest<'_>, obj: Value) -> Result<Value, ApiError> {
        self.inner.update(req, obj).await
    }

    async fn patch(
        &self,
        req: &WriteRequest<'_>,
        kind: PatchType,
        patch: Bytes,
    ) -> Result<Value, ApiError> {
        self.inner.patch(req, kind, patch).await
    }

    async fn delete(
        &self,
        req: &WriteRequest<'_>,
        opts: DeleteOptions,
    ) -> Result<(u16, Value), ApiError> {
        self.inner.delete(req, opts).await
    }
}

// === impl Request ===

impl Request {
    /// The request in `obj` for account `name`, checked as kube-apiserver checks it and
    /// defaulted: audiences to the API's, the lifetime to an hour, shortened to the longest
    /// allowed.
    fn parse(obj: &Value, name: &str) -> Result<Request, ApiError> {
        check_type(obj, "apiVersion", API_VERSION, "API version")?;
        check_type(obj, "kind", KIND, "kind")?;
        let body: Body = serde_json::from_value(obj.clone()).map_err(|e| {
            ApiError::bad_request(format!("the TokenRequest in the body is not valid: {e}"))
        })?;
        let invalid =
            |field: &str, why: String| ApiError::invalid(GROUP, KIND, "", &[(field, &why)]);
        if let Some(have) = body.metadata.and_then(|m| m.name).filter(|n| !n.is_empty())
            && have != name
        {
            let why = format!(
                "Invalid value: {have:?}: must match the service account name if specified"
            );
            return Err(ApiError::invalid(
                GROUP,
                KIND,
                name,
                &[("metadata.name", &why)],
            ));
        }
        let spec = body.spec.unwrap_or_default();
        let asked = spec
            .expiration_seconds
            .unwrap_or(DEFAULT_EXPIRATION_SECONDS);
        if asked < MIN_EXPIRATION_SECONDS {
            let why =
                format!("Invalid value: {asked}: may not specify a duration less than 10 minutes");
            return Err(invalid("spec.expirationSeconds", why));
        }
        if asked > MAX_REQUESTED_SECONDS {
            let why = format!(
                "Invalid value: {asked}: may not specify a duration larger than 2^32 seconds"
            );
            return Err(invalid("spec.expirationSeconds", why));
        }
        let mut audiences = spec.audiences.unwrap_or_default();
        if audiences.is_empty() {
            audiences.push(jwt::ISSUER.to_owned());
        }
        let bound = spec.bound_object_ref.map(BoundRef::parse).transpose()?;
        Ok(Request {
            audiences,
            expiration_seconds: asked.min(MAX_EXPIRATION_SECONDS),
            bound,
        })
    }

    /// The TokenRequest answered: the request with its defaults, name, namespace and creation
    /// time filled in, and `status.token` and `status.expirationTimestamp`.
    fn answer(&self, obj: &Value, namespace: &str, name: &str, token: &str, now: i64) -> Value {
        let mut metadata = obj["metadata"].as_object().cloned().unwrap_or_default();
        metadata.insert("name".into(), json!(name));
        metadata.insert("namespace".into(), json!(namespace));
        metadata.insert("creationTimestamp".into(), json!(format_rfc3339(now)));
        let mut spec: Map<String, Value> = obj["spec"].as_object().cloned().unwrap_or_default();
        spec.insert("audiences".into(), json!(self.audiences));
        spec.insert("expirationSeconds".into(), json!(self.expiration_seconds));
        json!({
            "kind": KIND,
            "apiVersion": API_VERSION,
            "metadata": metadata,
            "spec": spec,
            "status": {
                "token": token,
                "expirationTimestamp": format_rfc3339(now + self.expiration_seconds),
            },
        })
    }
}

// === impl BoundRef ===

impl BoundRef {
    /// A reference to a core pod or secret: another kind is a 400, a missing name a 422.
    fn parse(r: BodyRef) -> Result<BoundRef, ApiError> {
        let kind = r.kind.unwrap_or_default();
        let api_version = r.api_version.unwrap_or_default();
        let (group, version) = api_version.rsplit_once('/').unwrap_or(("", &api_version));
        let kind = match (group, kind.as_str()) {
            ("", "Pod") => BoundKind::Pod,
            ("", "Secret") => BoundKind::Secret,
            _ => {
                return Err(ApiError::bad_request(format!(
                    "cannot bind token to object of type {group}/{version}, Kind={kind}"
                )));
            }
        };
        let name = r.name.unwrap_or_default();
        if name.is_empty() {
            let field = ("spec.boundObjectRef.name", "Required value");
            return Err(ApiError::invalid(GROUP, KIND, "", &[field]));
        }
        Ok(BoundRef {
            kind,
            name,
            uid: r.uid.unwrap_or_default(),
        })
    }
}

// === impl BoundKind ===

impl BoundKind {
    fn plural(self) -> &'static str {
        match self {
            BoundKind::Pod => "pods",
            BoundKind::Secret => "secrets",
        }
    }

    fn name(self) -> &'static str {
        match self {
            BoundKind::Pod => "Pod",
            BoundKind::Secret => "Secret",
        }
    }
}

/// `apiVersion`/`kind` must be the TokenRequest's when given (kapi checks only the parent's
/// kind for a subresource of another kind).
fn check_type(obj: &Value, key: &str, want: &str, what: &str) -> Result<(), ApiError> {
    match &obj[key] {
        Value::Null => Ok(()),
        Value::String(have) if have.is_empty() || have == want => Ok(()),
        have => Err(ApiError::bad_request(format!(
            "the {what} in the data ({}) does not match the expected {what} ({want})",
            have.as_str().unwrap_or("?")
        ))),
    }
}

fn uid(obj: &Value) -> String {
    obj["metadata"]["uid"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// The account a pod runs as (`default` when it names none, as admission would have set it).
fn pod_service_account(pod: &Value) -> &str {
    let spec = &pod["spec"];
    spec["serviceAccountName"]
        .as_str()
        .or_else(|| spec["serviceAccount"].as_str())
        .filter(|s| !s.is_empty())
        .unwrap_or("default")
}

#[cfg(test)]
mod tests;
