//! The bootstrap token: `<sha256 of the CA certificate>.<id>.<secret>`. The first part lets the
//! joining node pin the CA it downloads; `<id>.<secret>` is the credential the certificate
//! service checks. The id (6 characters) is public, like kubeadm's token id; the secret (16
//! characters) is stored only as its SHA-256.

use std::fmt;

use rand::Rng as _;
use sha2::{Digest as _, Sha256};

/// Characters of ids and secrets (kubeadm's alphabet).
const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
pub const ID_LEN: usize = 6;
pub const SECRET_LEN: usize = 16;

/// A whole token, as `keadm gettoken` prints it and `keadm join --token` takes it.
#[derive(Clone, PartialEq, Eq)]
pub struct Token {
    /// Lowercase hex SHA-256 of the CA certificate (DER).
    pub ca_hash: String,
    pub id: String,
    pub secret: String,
}

/// The part of a token the certificate service checks.
#[derive(Clone, PartialEq, Eq)]
pub struct Credential {
    pub id: String,
    pub secret: String,
}

/// Why a string is not a token.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed token: {0}")]
pub struct Malformed(pub String);

// === impl Token ===

impl Token {
    /// A new random token for the CA whose hash is `ca_hash`.
    pub fn generate(ca_hash: &str) -> Token {
        Token {
            ca_hash: ca_hash.to_string(),
            id: random(ID_LEN),
            secret: random(SECRET_LEN),
        }
    }

    /// Parses `<ca hash>.<id>.<secret>`, naming what is wrong.
    pub fn parse(text: &str) -> Result<Token, Malformed> {
        let text = text.trim();
        let parts: Vec<&str> = text.split('.').collect();
        if parts.len() != 3 {
            return Err(Malformed(format!(
                "expected <ca-hash>.<id>.<secret> (3 parts separated by dots), got {} part(s)",
                parts.len()
            )));
        }
        let hash = parts[0];
        if hash.len() != 64 || !hash.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(Malformed(format!(
                "the CA hash {hash:?} is not 64 hexadecimal characters (a SHA-256)"
            )));
        }
        let credential = Credential::parse_parts(parts[1], parts[2])?;
        Ok(Token {
            ca_hash: hash.to_ascii_lowercase(),
            id: credential.id,
            secret: credential.secret,
        })
    }

    pub fn credential(&self) -> Credential {
        Credential {
            id: self.id.clone(),
            secret: self.secret.clone(),
        }
    }
}

impl fmt::Display for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.ca_hash, self.id, self.secret)
    }
}

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Token({}.{}.<secret>)", self.ca_hash, self.id)
    }
}

// === impl Credential ===

impl Credential {
    /// Parses `<id>.<secret>`, or a whole token (its CA hash is ignored here).
    pub fn parse(text: &str) -> Result<Credential, Malformed> {
        let text = text.trim();
        let parts: Vec<&str> = text.split('.').collect();
        match parts.as_slice() {
            [id, secret] => Credential::parse_parts(id, secret),
            [_, _, _] => Token::parse(text).map(|t| t.credential()),
            _ => Err(Malformed(format!(
                "expected <ca-hash>.<id>.<secret> or <id>.<secret>, got {} part(s)",
                parts.len()
            ))),
        }
    }

    fn parse_parts(id: &str, secret: &str) -> Result<Credential, Malformed> {
        let valid = |s: &str| s.bytes().all(|b| ALPHABET.contains(&b));
        if id.len() != ID_LEN || !valid(id) {
            return Err(Malformed(format!(
                "the token id {id:?} is not {ID_LEN} characters of [a-z0-9]"
            )));
        }
        if secret.len() != SECRET_LEN || !valid(secret) {
            return Err(Malformed(format!(
                "the token secret is not {SECRET_LEN} characters of [a-z0-9]"
            )));
        }
        Ok(Credential {
            id: id.to_string(),
            secret: secret.to_string(),
        })
    }

    /// What is stored of the secret.
    pub fn secret_hash(&self) -> String {
        sha256_hex(self.secret.as_bytes())
    }
}

impl fmt::Debug for Credential {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Credential({}.<secret>)", self.id)
    }
}

/// The hash a token carries for the CA certificate `ca_pem` (its first certificate, DER).
pub fn ca_hash(ca_pem: &str) -> Result<String, pki::PkiError> {
    Ok(sha256_hex(pki::first_cert(ca_pem)?.as_ref()))
}

/// Lowercase hex SHA-256.
pub fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Compares two strings in time independent of where they differ.
pub fn constant_time_eq(a: &str, b: &str) -> bool {
    a.len() == b.len() && a.bytes().zip(b.bytes()).fold(0u8, |d, (x, y)| d | (x ^ y)) == 0
}

fn random(len: usize) -> String {
    let mut rng = rand::rng();
    (0..len)
        .map(|_| ALPHABET[rng.random_range(0..ALPHABET.len())] as char)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const HASH: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    #[test]
    fn a_generated_token_parses_back_to_itself() {
        let token = Token::generate(HASH);
        let parsed = Token::parse(&token.to_string()).unwrap();
        assert_eq!(parsed, token);
        assert_eq!(parsed.id.len(), ID_LEN);
        assert_eq!(parsed.secret.len(), SECRET_LEN);
        assert_ne!(Token::generate(HASH).secret, token.secret);
    }

    #[test]
    fn a_malformed_token_says_what_is_wrong() {
        let cases = [
            ("abc", "3 parts"),
            ("zz.abcdef.0123456789abcdef", "CA hash"),
            (&format!("{HASH}.ABCDEF.0123456789abcdef"), "token id"),
            (&format!("{HASH}.abcdef.short"), "secret"),
        ];
        for (text, says) in cases {
            let err = Token::parse(text).unwrap_err().to_string();
            assert!(err.contains(says), "{text}: {err}");
        }
    }

    #[test]
    fn a_credential_is_the_id_and_secret_of_a_token_or_given_alone() {
        let token = Token::generate(HASH);
        let whole = Credential::parse(&token.to_string()).unwrap();
        let alone = Credential::parse(&format!("{}.{}", token.id, token.secret)).unwrap();
        assert_eq!(whole, alone);
        assert_eq!(whole.secret_hash(), sha256_hex(token.secret.as_bytes()));
        assert!(!format!("{whole:?}").contains(&token.secret));
        assert!(!format!("{token:?}").contains(&token.secret));
    }
}
