//! What the certificate service keeps in the Kubernetes API, so that several cloudcores share
//! it: the tokens (Secrets of type [`TOKEN_TYPE`] in the [`NAMESPACE`] namespace, the secret
//! stored only as its SHA-256), the CA certificate joining nodes download and `keadm gettoken`
//! hashes (ConfigMap [`CA_CONFIGMAP`]), and one CertificateSigningRequest per joined node
//! (`kubeedge-node-<name>`, signer [`SIGNER`], approved, with the certificate issued), which is
//! what `kubectl get csr` shows and what refuses a second join of the same name.

use std::collections::BTreeMap;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::ByteString;
use k8s_openapi::api::certificates::v1::{
    CertificateSigningRequest, CertificateSigningRequestCondition, CertificateSigningRequestSpec,
    CertificateSigningRequestStatus,
};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Node, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::Api;
use kube::api::{ListParams, Patch, PatchParams, PostParams};

use crate::token::{Credential, Malformed, Token, constant_time_eq};

/// Namespace of the tokens and the CA ConfigMap (KubeEdge's).
pub const NAMESPACE: &str = "kubeedge";
/// Secret type of a token.
pub const TOKEN_TYPE: &str = "kubeedge.io/edge-token";
/// Label on every token Secret.
pub const TOKEN_LABEL: &str = "kubeedge.io/edge-token";
/// ConfigMap holding the CA certificate (`ca.crt`).
pub const CA_CONFIGMAP: &str = "cloudhub-ca";
/// signerName of the join records.
pub const SIGNER: &str = "kubeedge.io/edge-node";

/// Compared against when no token has the id asked for.
const UNKNOWN_HASH: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// A token as stored (never its secret).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TokenInfo {
    pub id: String,
    pub description: String,
    pub created: Option<Timestamp>,
    pub expires: Timestamp,
    pub revoked: Option<Timestamp>,
    secret_hash: String,
}

/// Why a credential is refused: expiry and revocation are told apart (a stale token is the usual
/// reason a join fails), but only to a caller holding the right secret.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// Not a token at all.
    #[error(transparent)]
    Malformed(#[from] Malformed),
    /// No token with this id exists (never issued here, or deleted), or the secret is not its
    /// secret: one answer for both, so that guesses do not reveal which ids exist.
    #[error(
        "the token is not valid: no such token exists or its secret does not match (get a new one with `keadm gettoken`)"
    )]
    Invalid { id: String },
    /// Past its expiry.
    #[error("token {id} expired at {at} (get a new one with `keadm gettoken`)")]
    Expired { id: String, at: Timestamp },
    /// Revoked with `keadm token delete`.
    #[error("token {id} was revoked at {at} (get a new one with `keadm gettoken`)")]
    Revoked { id: String, at: Timestamp },
}

/// A failed read or write of the API.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The API refused or could not be reached.
    #[error("{what}: {source}")]
    Api {
        what: String,
        #[source]
        source: kube::Error,
    },
    /// No such token.
    #[error("token {id} does not exist")]
    NoToken { id: String },
    /// A stored object is not what this code wrote.
    #[error("{what} is unreadable: {why}")]
    Corrupt { what: String, why: String },
    /// Another node of this name joined first.
    #[error("{0}")]
    AlreadyJoined(String),
}

fn api_err(what: impl Into<String>) -> impl FnOnce(kube::Error) -> StoreError {
    let what = what.into();
    move |source| StoreError::Api { what, source }
}

fn is_status(e: &kube::Error, code: u16) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == code)
}

/// Creates the namespace if missing.
pub async fn ensure_namespace(client: &kube::Client) -> Result<(), StoreError> {
    let api: Api<Namespace> = Api::all(client.clone());
    let ns = Namespace {
        metadata: ObjectMeta {
            name: Some(NAMESPACE.into()),
            ..Default::default()
        },
        ..Default::default()
    };
    match api.create(&PostParams::default(), &ns).await {
        Ok(_) => Ok(()),
        Err(e) if is_status(&e, 409) => Ok(()),
        Err(e) => Err(api_err(format!("creating namespace {NAMESPACE}"))(e)),
    }
}

// === tokens ===

fn secret_name(id: &str) -> String {
    format!("edge-token-{id}")
}

/// Issues a token valid for `ttl`, for the CA whose hash is `ca_hash`.
pub async fn create_token(
    client: &kube::Client,
    ca_hash: &str,
    ttl: Duration,
    description: &str,
) -> Result<(Token, TokenInfo), StoreError> {
    ensure_namespace(client).await?;
    let api: Api<Secret> = Api::namespaced(client.clone(), NAMESPACE);
    let token = Token::generate(ca_hash);
    let now = Timestamp::from_second(Timestamp::now().as_second()).unwrap_or(Timestamp::now());
    let expires = now
        + jiff::SignedDuration::try_from(ttl).map_err(|e| StoreError::Corrupt {
            what: "the token TTL".into(),
            why: e.to_string(),
        })?;
    let data = |s: &str| ByteString(s.as_bytes().to_vec());
    let mut fields = BTreeMap::new();
    fields.insert("token-id".to_string(), data(&token.id));
    fields.insert(
        "secret-sha256".to_string(),
        data(&token.credential().secret_hash()),
    );
    fields.insert("expiration".to_string(), data(&expires.to_string()));
    fields.insert("description".to_string(), data(description));
    let secret = Secret {
        metadata: ObjectMeta {
            name: Some(secret_name(&token.id)),
            labels: Some(BTreeMap::from([(TOKEN_LABEL.into(), "true".into())])),
            ..Default::default()
        },
        type_: Some(TOKEN_TYPE.into()),
        data: Some(fields),
        ..Default::default()
    };
    let made = api
        .create(&PostParams::default(), &secret)
        .await
        .map_err(api_err(format!(
            "creating token secret {NAMESPACE}/{}",
            secret_name(&token.id)
        )))?;
    let info = read_info(&made)?;
    Ok((token, info))
}

/// Every token, expired and revoked ones included, oldest first.
pub async fn list_tokens(client: &kube::Client) -> Result<Vec<TokenInfo>, StoreError> {
    let api: Api<Secret> = Api::namespaced(client.clone(), NAMESPACE);
    let list = match api
        .list(&ListParams::default().labels(&format!("{TOKEN_LABEL}=true")))
        .await
    {
        Ok(l) => l,
        Err(e) if is_status(&e, 404) => return Ok(Vec::new()),
        Err(e) => return Err(api_err("listing token secrets")(e)),
    };
    let mut infos = list
        .items
        .iter()
        .filter(|s| s.type_.as_deref() == Some(TOKEN_TYPE))
        .map(read_info)
        .collect::<Result<Vec<_>, _>>()?;
    infos.sort_by_key(|i| (i.created, i.id.clone()));
    Ok(infos)
}

/// Revokes a token: it stays listed (and is refused as revoked) until it expires.
pub async fn revoke_token(client: &kube::Client, id: &str) -> Result<TokenInfo, StoreError> {
    let api: Api<Secret> = Api::namespaced(client.clone(), NAMESPACE);
    let name = secret_name(id);
    let now = Timestamp::from_second(Timestamp::now().as_second())
        .unwrap_or(Timestamp::now())
        .to_string();
    let patch = serde_json::json!({ "data": { "revoked": ByteString(now.into_bytes()) } });
    match api
        .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(s) => read_info(&s),
        Err(e) if is_status(&e, 404) => Err(StoreError::NoToken { id: id.into() }),
        Err(e) => Err(api_err(format!("revoking token {id}"))(e)),
    }
}

/// Checks a credential at `now`: the token it names exists, is neither expired nor revoked,
/// and the secret matches.
pub async fn check_token(
    client: &kube::Client,
    credential: &Credential,
    now: Timestamp,
) -> Result<Result<TokenInfo, Refusal>, StoreError> {
    let api: Api<Secret> = Api::namespaced(client.clone(), NAMESPACE);
    let id = credential.id.clone();
    let secret = match api.get_opt(&secret_name(&id)).await {
        Ok(Some(s)) if s.type_.as_deref() == Some(TOKEN_TYPE) => s,
        Ok(_) => {
            // As much work as a wrong secret costs, so the time taken does not tell them apart.
            let _ = constant_time_eq(&credential.secret_hash(), UNKNOWN_HASH);
            return Ok(Err(Refusal::Invalid { id }));
        }
        Err(e) => return Err(api_err(format!("reading token {id}"))(e)),
    };
    let info = read_info(&secret)?;
    Ok(info.admits(credential, now).map(|()| info))
}

fn read_info(secret: &Secret) -> Result<TokenInfo, StoreError> {
    let name = secret.metadata.name.clone().unwrap_or_default();
    let what = || format!("token secret {NAMESPACE}/{name}");
    let data = secret.data.clone().unwrap_or_default();
    let field = |key: &str| -> Option<String> {
        data.get(key)
            .map(|b| String::from_utf8_lossy(&b.0).into_owned())
    };
    let need = |key: &str| {
        field(key).ok_or_else(|| StoreError::Corrupt {
            what: what(),
            why: format!("no {key}"),
        })
    };
    let time = |key: &str, text: String| {
        text.parse::<Timestamp>().map_err(|e| StoreError::Corrupt {
            what: what(),
            why: format!("{key} {text:?}: {e}"),
        })
    };
    let expires = time("expiration", need("expiration")?)?;
    let revoked = field("revoked").map(|t| time("revoked", t)).transpose()?;
    Ok(TokenInfo {
        id: need("token-id")?,
        description: field("description").unwrap_or_default(),
        created: secret.metadata.creation_timestamp.as_ref().map(|t| t.0),
        expires,
        revoked,
        secret_hash: need("secret-sha256")?,
    })
}

// === impl TokenInfo ===

impl TokenInfo {
    /// Whether `credential` may be used at `now`; revocation and expiry are told before a
    /// wrong secret only when the secret is right, so the id alone reveals nothing more.
    pub fn admits(&self, credential: &Credential, now: Timestamp) -> Result<(), Refusal> {
        let id = self.id.clone();
        if !constant_time_eq(&credential.secret_hash(), &self.secret_hash) {
            return Err(Refusal::Invalid { id });
        }
        if let Some(at) = self.revoked {
            return Err(Refusal::Revoked { id, at });
        }
        if now >= self.expires {
            return Err(Refusal::Expired {
                id,
                at: self.expires,
            });
        }
        Ok(())
    }

    /// `valid`, `expired` or `revoked` at `now`.
    pub fn state(&self, now: Timestamp) -> &'static str {
        match (self.revoked, now >= self.expires) {
            (Some(_), _) => "revoked",
            (None, true) => "expired",
            (None, false) => "valid",
        }
    }
}

// === the CA ===

/// Publishes the CA certificate for `keadm gettoken` (creates or replaces the ConfigMap).
pub async fn publish_ca(client: &kube::Client, ca_pem: &str) -> Result<(), StoreError> {
    ensure_namespace(client).await?;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), NAMESPACE);
    let cm = serde_json::json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": { "name": CA_CONFIGMAP, "namespace": NAMESPACE },
        "data": { "ca.crt": ca_pem },
    });
    let what = format!("publishing the CA in configmap {NAMESPACE}/{CA_CONFIGMAP}");
    match api.get_opt(CA_CONFIGMAP).await.map_err(api_err(&what))? {
        Some(old)
            if old
                .data
                .as_ref()
                .and_then(|d| d.get("ca.crt"))
                .map(String::as_str)
                == Some(ca_pem) =>
        {
            Ok(())
        }
        Some(_) => api
            .patch(CA_CONFIGMAP, &PatchParams::default(), &Patch::Merge(&cm))
            .await
            .map(drop)
            .map_err(api_err(what)),
        None => {
            let cm: ConfigMap = serde_json::from_value(cm).map_err(|e| StoreError::Corrupt {
                what: what.clone(),
                why: e.to_string(),
            })?;
            match api.create(&PostParams::default(), &cm).await {
                Ok(_) => Ok(()),
                Err(e) if is_status(&e, 409) => Ok(()),
                Err(e) => Err(api_err(what)(e)),
            }
        }
    }
}

/// The published CA certificate, if cloudcore has published one.
pub async fn read_ca(client: &kube::Client) -> Result<Option<String>, StoreError> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), NAMESPACE);
    let cm = api.get_opt(CA_CONFIGMAP).await.map_err(api_err(format!(
        "reading configmap {NAMESPACE}/{CA_CONFIGMAP}"
    )))?;
    Ok(cm.and_then(|c| c.data).and_then(|mut d| d.remove("ca.crt")))
}

// === join records ===

/// Name of a node's join record.
pub fn record_name(node: &str) -> String {
    format!("kubeedge-node-{node}")
}

/// Why `node` may not join (again), if it may not.
pub async fn already_joined(
    client: &kube::Client,
    node: &str,
) -> Result<Option<String>, StoreError> {
    let again = format!(
        "to join it again, remove it first: `keadm revoke {node}` on the cloud (or `kubectl delete node {node}; kubectl delete csr {}`, which leaves its old certificate valid), then run `keadm reset` on the old machine",
        record_name(node)
    );
    let nodes: Api<Node> = Api::all(client.clone());
    if nodes
        .get_opt(node)
        .await
        .map_err(api_err(format!("reading node {node}")))?
        .is_some()
    {
        return Ok(Some(format!(
            "node {node:?} has already joined: it exists in the cluster; {again}"
        )));
    }
    let csrs: Api<CertificateSigningRequest> = Api::all(client.clone());
    let record = csrs
        .get_opt(&record_name(node))
        .await
        .map_err(api_err(format!("reading csr {}", record_name(node))))?;
    Ok(record.map(|r| {
        let when = r
            .metadata
            .creation_timestamp
            .map(|t| format!(" at {}", t.0))
            .unwrap_or_default();
        format!("node {node:?} has already joined: a certificate was issued for it{when}; {again}")
    }))
}

/// Claims the name `node` for a join (before signing): creates its record, refused if another
/// join made it first.
pub async fn claim(
    client: &kube::Client,
    node: &str,
    csr_pem: &str,
    token_id: &str,
) -> Result<(), StoreError> {
    let api: Api<CertificateSigningRequest> = Api::all(client.clone());
    let csr = CertificateSigningRequest {
        metadata: ObjectMeta {
            name: Some(record_name(node)),
            labels: Some(BTreeMap::from([(
                "kubeedge.io/node".to_string(),
                node.to_string(),
            )])),
            annotations: Some(BTreeMap::from([(
                "kubeedge.io/token-id".to_string(),
                token_id.to_string(),
            )])),
            ..Default::default()
        },
        spec: CertificateSigningRequestSpec {
            request: ByteString(csr_pem.as_bytes().to_vec()),
            signer_name: SIGNER.into(),
            usages: Some(vec![
                "digital signature".into(),
                "key encipherment".into(),
                "client auth".into(),
            ]),
            ..Default::default()
        },
        status: None,
    };
    match api.create(&PostParams::default(), &csr).await {
        Ok(_) => Ok(()),
        Err(e) if is_status(&e, 409) => Err(StoreError::AlreadyJoined(format!(
            "node {node:?} has already joined (another join took the name first)"
        ))),
        Err(e) => Err(api_err(format!("creating csr {}", record_name(node)))(e)),
    }
}

/// Completes a node's record: approved, with the certificate issued.
pub async fn complete(client: &kube::Client, node: &str, cert_pem: &str) -> Result<(), StoreError> {
    let api: Api<CertificateSigningRequest> = Api::all(client.clone());
    let name = record_name(node);
    let condition = |type_: &str, reason: &str, message: &str| CertificateSigningRequestCondition {
        type_: type_.into(),
        status: "True".into(),
        reason: Some(reason.into()),
        message: Some(message.into()),
        last_update_time: Some(Time(Timestamp::now())),
        ..Default::default()
    };
    let approval = serde_json::json!({ "status": CertificateSigningRequestStatus {
        conditions: Some(vec![condition("Approved", "KubeEdgeBootstrapToken", "approved by cloudhub: a valid bootstrap token")]),
        certificate: None,
    }});
    api.patch_approval(&name, &PatchParams::default(), &Patch::Merge(&approval))
        .await
        .map_err(api_err(format!("approving csr {name}")))?;
    let issued = serde_json::json!({ "status": { "certificate": ByteString(cert_pem.as_bytes().to_vec()) } });
    api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&issued))
        .await
        .map_err(api_err(format!("writing the certificate of csr {name}")))?;
    Ok(())
}

/// Drops a claim whose signing failed, so the node may try again.
pub async fn release(client: &kube::Client, node: &str) {
    let api: Api<CertificateSigningRequest> = Api::all(client.clone());
    if let Err(e) = api.delete(&record_name(node), &Default::default()).await {
        tracing::warn!(node, error = %e, "cannot remove the join record of a failed join");
    }
}
