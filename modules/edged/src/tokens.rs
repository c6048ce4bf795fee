//! Service-account tokens for projected volumes, as the kubelet's token manager keeps them:
//! requested from the TokenRequest API (through lwproxy, so the cloud issues them) bound to the
//! pod, and requested again once 80% of their lifetime has passed or they are a day old. While
//! the cloud is away the token held keeps being served; after an edgecore restart the token a
//! running pod's volume already holds is read back from disk, so a node restarted offline does
//! not lose its pods' tokens.

use std::collections::BTreeSet;

use base64::Engine;
use k8s_openapi::api::core::v1::Pod;
use serde_json::Value;

/// A token a pod's volumes ask for: its service account, audience and lifetime.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TokenKey {
    /// The service account.
    pub account: String,
    /// The audience (empty: the API server's).
    pub audience: String,
    /// The lifetime asked for, in seconds.
    pub expiration: i64,
}

/// A token held.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Token {
    /// The JWT.
    pub value: String,
    /// When it was issued (Unix seconds).
    pub issued: i64,
    /// When it expires (Unix seconds).
    pub expires: i64,
}

/// The lifetime of a projected token whose source names none (the API's default).
pub const DEFAULT_EXPIRATION: i64 = 3600;
/// A token older than this is requested again, whatever its lifetime.
const MAX_AGE: i64 = 24 * 3600;

// === impl Token ===

impl Token {
    /// A token from its JWT, with the times its claims carry.
    pub fn from_jwt(value: &str) -> Option<Token> {
        let payload = value.split('.').nth(1)?;
        let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(payload.trim_end_matches('='))
            .ok()?;
        let claims: Value = serde_json::from_slice(&bytes).ok()?;
        let expires = claims["exp"].as_i64()?;
        let issued = claims["iat"]
            .as_i64()
            .unwrap_or(expires - DEFAULT_EXPIRATION);
        Some(Token {
            value: value.to_string(),
            issued,
            expires,
        })
    }

    /// When it should be requested again (Unix seconds): at 80% of its lifetime, or once a
    /// day old.
    pub fn refresh_at(&self) -> i64 {
        let lifetime = (self.expires - self.issued).max(0);
        (self.issued + lifetime * 4 / 5).min(self.issued + MAX_AGE)
    }
}

/// The pod's service account (`default` when it names none).
pub fn account(pod: &Pod) -> String {
    pod.spec
        .as_ref()
        .and_then(|s| s.service_account_name.clone())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "default".into())
}

/// The key of a projected token source of `pod`.
pub fn key(
    pod: &Pod,
    source: &k8s_openapi::api::core::v1::ServiceAccountTokenProjection,
) -> TokenKey {
    TokenKey {
        account: account(pod),
        audience: source.audience.clone().unwrap_or_default(),
        expiration: source.expiration_seconds.unwrap_or(DEFAULT_EXPIRATION),
    }
}

/// The tokens the pod's projected volumes ask for, with each volume name and file path.
pub fn wanted(pod: &Pod) -> Vec<(TokenKey, String, String)> {
    let mut out = Vec::new();
    for v in pod.spec.iter().flat_map(|s| s.volumes.iter().flatten()) {
        let Some(p) = &v.projected else { continue };
        for s in p.sources.iter().flatten() {
            if let Some(t) = &s.service_account_token {
                out.push((key(pod, t), v.name.clone(), t.path.clone()));
            }
        }
    }
    out
}

/// The distinct keys among `wanted`.
pub fn keys(wanted: &[(TokenKey, String, String)]) -> BTreeSet<TokenKey> {
    wanted.iter().map(|w| w.0.clone()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn jwt(claims: Value) -> String {
        let enc = |v: &Value| {
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string().as_bytes())
        };
        format!("{}.{}.sig", enc(&json!({"alg": "RS256"})), enc(&claims))
    }

    #[test]
    fn a_token_is_refreshed_at_80_percent_of_its_life_or_after_a_day() {
        let t = Token::from_jwt(&jwt(json!({"iat": 1000, "exp": 4600}))).unwrap();
        assert_eq!((t.issued, t.expires), (1000, 4600));
        assert_eq!(t.refresh_at(), 1000 + 2880);
        let long = Token::from_jwt(&jwt(json!({"iat": 0, "exp": 48 * 3600}))).unwrap();
        assert_eq!(long.refresh_at(), 24 * 3600);
        assert_eq!(Token::from_jwt("not-a-jwt"), None);
        assert_eq!(Token::from_jwt(&jwt(json!({"iat": 1}))), None, "no exp");
    }

    #[test]
    fn projected_sources_name_their_account_audience_and_lifetime() {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p"},
            "spec": {"serviceAccountName": "builder", "containers": [], "volumes": [
                {"name": "api", "projected": {"sources": [
                    {"serviceAccountToken": {"path": "token"}},
                    {"configMap": {"name": "kube-root-ca.crt"}},
                ]}},
                {"name": "vault", "projected": {"sources": [
                    {"serviceAccountToken": {"path": "t", "audience": "vault", "expirationSeconds": 7200}},
                ]}},
            ]},
        }))
        .unwrap();
        let w = wanted(&pod);
        assert_eq!(w.len(), 2);
        assert_eq!(
            w[0],
            (
                TokenKey {
                    account: "builder".into(),
                    audience: String::new(),
                    expiration: 3600
                },
                "api".into(),
                "token".into()
            )
        );
        assert_eq!(w[1].0.audience, "vault");
        assert_eq!(w[1].0.expiration, 7200);
        assert_eq!(keys(&w).len(), 2);
    }
}
