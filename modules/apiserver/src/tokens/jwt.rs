//! Service-account tokens as Kubernetes issues them: JWTs (compact form, base64url without
//! padding) signed ES256 (ECDSA P-256 with SHA-256), with the `kubernetes.io` private claims.
//! Pure: the time is an argument, and nothing here reads the store or the disk.

use base64::Engine;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use ring::rand::SystemRandom;
use ring::signature::{self, EcdsaKeyPair, KeyPair, UnparsedPublicKey};
use rustls::pki_types::PrivatePkcs8KeyDer;
use rustls::pki_types::pem::PemObject;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::error::TokenError;

/// The issuer (`iss`) of every token, and the audience the API itself accepts (kube-apiserver's
/// default `--service-account-issuer` and `--api-audiences`).
pub(crate) const ISSUER: &str = "https://kubernetes.default.svc.cluster.local";

/// Clock skew tolerated on `nbf` and `exp`, as kube-apiserver's validator allows.
pub(crate) const LEEWAY_SECONDS: i64 = 60;

const ALGORITHM: &str = "ES256";

/// The DER prefix of a P-256 `SubjectPublicKeyInfo` before its 65-byte uncompressed point.
const P256_SPKI_PREFIX: [u8; 26] = [
    0x30, 0x59, 0x30, 0x13, 0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01, 0x06, 0x08, 0x2a,
    0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07, 0x03, 0x42, 0x00,
];

/// The signing key; what it signed verifies with its public half.
pub(crate) struct Signer {
    key: EcdsaKeyPair,
    rng: SystemRandom,
    /// `kid`: base64url of the SHA-256 of the public key's DER, as Kubernetes names its keys.
    kid: String,
}

/// The claims of a service-account token.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Claims {
    pub(crate) iss: String,
    /// `system:serviceaccount:<namespace>:<name>`.
    pub(crate) sub: String,
    pub(crate) aud: Vec<String>,
    pub(crate) exp: i64,
    pub(crate) iat: i64,
    pub(crate) nbf: i64,
    #[serde(rename = "kubernetes.io")]
    pub(crate) kubernetes: Private,
}

/// The `kubernetes.io` claim: the account, and the object the token is bound to, if any.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Private {
    pub(crate) namespace: String,
    pub(crate) serviceaccount: Ref,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) pod: Option<Ref>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) secret: Option<Ref>,
}

/// An object by name and uid.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Ref {
    pub(crate) name: String,
    pub(crate) uid: String,
}

#[derive(Serialize, Deserialize)]
struct Header {
    alg: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    kid: String,
}

// === impl Signer ===

impl Signer {
    /// A new key, as PKCS#8 PEM (`PRIVATE KEY`).
    pub(crate) fn generate_pem() -> Result<String, TokenError> {
        let alg = &signature::ECDSA_P256_SHA256_FIXED_SIGNING;
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(alg, &SystemRandom::new())
            .map_err(|_| TokenError::Key("the system random generator failed".into()))?;
        Ok(pem("PRIVATE KEY", pkcs8.as_ref()))
    }

    /// The key in a PKCS#8 PEM text (a P-256 key with its public key, as `openssl genpkey
    /// -algorithm EC -pkeyopt ec_paramgen_curve:P-256` writes it).
    pub(crate) fn from_pem(text: &str) -> Result<Signer, TokenError> {
        let der = PrivatePkcs8KeyDer::from_pem_slice(text.as_bytes())
            .map_err(|e| TokenError::Key(format!("no PKCS#8 private key: {e}")))?;
        let rng = SystemRandom::new();
        let alg = &signature::ECDSA_P256_SHA256_FIXED_SIGNING;
        let key = EcdsaKeyPair::from_pkcs8(alg, der.secret_pkcs8_der(), &rng)
            .map_err(|e| TokenError::Key(format!("not an ECDSA P-256 key: {e}")))?;
        let mut spki = P256_SPKI_PREFIX.to_vec();
        spki.extend_from_slice(key.public_key().as_ref());
        let kid = URL_SAFE_NO_PAD.encode(ring::digest::digest(&ring::digest::SHA256, &spki));
        Ok(Signer { key, rng, kid })
    }

    /// The compact JWT of `claims`.
    pub(crate) fn sign(&self, claims: &Claims) -> Result<String, TokenError> {
        let header = Header {
            alg: ALGORITHM.into(),
            kid: self.kid.clone(),
        };
        let input = format!("{}.{}", encode_json(&header), encode_json(claims));
        let signature = self
            .key
            .sign(&self.rng, input.as_bytes())
            .map_err(|_| TokenError::Key("signing failed".into()))?;
        Ok(format!("{input}.{}", URL_SAFE_NO_PAD.encode(signature)))
    }

    /// The claims of `token` if this key signed it and, at `now` (Unix seconds), it is in force
    /// for the API: issued by [`ISSUER`], for the [`ISSUER`] audience, not before `nbf`, not
    /// after `exp` (each give or take [`LEEWAY_SECONDS`]).
    #[cfg(test)]
    pub(crate) fn verify(&self, token: &str, now: i64) -> Result<Claims, TokenError> {
        self.verify_for(token, now, &[ISSUER])
            .map(|(claims, _)| claims)
    }

    /// Like [`Signer::verify`], for any of `audiences` instead of the API's: the claims, and
    /// the audiences the token and `audiences` share (a TokenReview's `status.audiences`).
    pub(crate) fn verify_for(
        &self,
        token: &str,
        now: i64,
        audiences: &[&str],
    ) -> Result<(Claims, Vec<String>), TokenError> {
        let mut parts = token.split('.');
        let (Some(header), Some(claims), Some(signature), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(TokenError::Malformed);
        };
        let alg = decode_json::<Header>(header)?.alg;
        if alg != ALGORITHM {
            return Err(TokenError::Algorithm(alg));
        }
        let signature = URL_SAFE_NO_PAD
            .decode(signature)
            .map_err(|_| TokenError::Malformed)?;
        let signed = &token[..header.len() + 1 + claims.len()];
        UnparsedPublicKey::new(
            &signature::ECDSA_P256_SHA256_FIXED,
            self.key.public_key().as_ref(),
        )
        .verify(signed.as_bytes(), &signature)
        .map_err(|_| TokenError::Signature)?;
        let claims: Claims = decode_json(claims)?;
        claims.check(now)?;
        let shared: Vec<String> = claims
            .aud
            .iter()
            .filter(|a| audiences.contains(&a.as_str()))
            .cloned()
            .collect();
        if shared.is_empty() {
            return Err(TokenError::Audience(claims.aud.clone()));
        }
        Ok((claims, shared))
    }
}

// === impl Claims ===

impl Claims {
    /// The username of a service account: `system:serviceaccount:<namespace>:<name>`.
    pub(crate) fn subject(namespace: &str, name: &str) -> String {
        format!("system:serviceaccount:{namespace}:{name}")
    }

    fn check(&self, now: i64) -> Result<(), TokenError> {
        if self.iss != ISSUER {
            return Err(TokenError::Issuer(self.iss.clone()));
        }
        let k = &self.kubernetes;
        if self.sub != Claims::subject(&k.namespace, &k.serviceaccount.name) {
            return Err(TokenError::Malformed);
        }
        if now + LEEWAY_SECONDS < self.nbf {
            return Err(TokenError::NotYetValid);
        }
        if now - LEEWAY_SECONDS > self.exp {
            return Err(TokenError::Expired);
        }
        Ok(())
    }
}

fn encode_json(value: &impl Serialize) -> String {
    // Claims and headers are strings and integers: they always serialize.
    URL_SAFE_NO_PAD.encode(serde_json::to_vec(value).expect("token parts serialize"))
}

fn decode_json<T: DeserializeOwned>(part: &str) -> Result<T, TokenError> {
    let bytes = URL_SAFE_NO_PAD
        .decode(part)
        .map_err(|_| TokenError::Malformed)?;
    serde_json::from_slice(&bytes).map_err(|_| TokenError::Malformed)
}

/// A PEM block: base64 in lines of 64.
fn pem(label: &str, der: &[u8]) -> String {
    let body = STANDARD.encode(der);
    let mut text = format!("-----BEGIN {label}-----\n");
    for line in body.as_bytes().chunks(64) {
        // base64 output is ASCII.
        text.push_str(std::str::from_utf8(line).expect("base64 is ASCII"));
        text.push('\n');
    }
    text.push_str(&format!("-----END {label}-----\n"));
    text
}

#[cfg(test)]
mod tests;
