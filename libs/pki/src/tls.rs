//! rustls configs for the hubs, always with the ring provider.

use std::sync::Arc;

use rustls::pki_types::PrivateKeyDer;
use rustls::pki_types::pem::PemObject;
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, RootCertStore, ServerConfig};

use crate::{PkiError, certs};

/// A server config presenting `cert_pem`/`key_pem`. With `client_ca_pem`, every client must
/// present a certificate signed by that CA (mutual TLS); without, no client certificate is asked.
pub fn server_config(
    client_ca_pem: Option<&str>,
    cert_pem: &str,
    key_pem: &str,
    alpn: &[&[u8]],
) -> Result<ServerConfig, PkiError> {
    let builder =
        ServerConfig::builder_with_provider(provider()).with_safe_default_protocol_versions()?;
    let builder = match client_ca_pem {
        Some(ca) => {
            let verifier =
                WebPkiClientVerifier::builder_with_provider(Arc::new(roots(ca)?), provider())
                    .build()?;
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    };
    let mut config = builder.with_single_cert(certs(cert_pem)?, key(key_pem)?)?;
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Ok(config)
}

/// A server config that asks for a client certificate signed by `client_ca_pem` but also
/// accepts clients without one (they authenticate another way, e.g. a bearer token).
pub fn server_config_optional_client(
    client_ca_pem: &str,
    cert_pem: &str,
    key_pem: &str,
    alpn: &[&[u8]],
) -> Result<ServerConfig, PkiError> {
    let verifier =
        WebPkiClientVerifier::builder_with_provider(Arc::new(roots(client_ca_pem)?), provider())
            .allow_unauthenticated()
            .build()?;
    let mut config = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()?
        .with_client_cert_verifier(verifier)
        .with_single_cert(certs(cert_pem)?, key(key_pem)?)?;
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Ok(config)
}

/// A client config trusting `ca_pem` and presenting `cert_pem`/`key_pem` when both are given.
pub fn client_config(
    ca_pem: &str,
    identity: Option<(&str, &str)>,
    alpn: &[&[u8]],
) -> Result<ClientConfig, PkiError> {
    let builder = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots(ca_pem)?);
    let mut config = match identity {
        Some((cert, k)) => builder.with_client_auth_cert(certs(cert)?, key(k)?)?,
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Ok(config)
}

/// A certificate refused as not valid yet: the local clock is behind the clock of the one who
/// issued it (a freshly issued certificate starts at most minutes before its issuer's now).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClockBehind {
    /// This clock, Unix seconds.
    pub local: i64,
    /// The certificate's notBefore, Unix seconds.
    pub not_before: i64,
}

impl ClockBehind {
    /// How far this clock is at least behind the issuer's.
    pub fn behind_secs(&self) -> i64 {
        self.not_before - self.local
    }
}

impl std::fmt::Display for ClockBehind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the edge clock is at least {} s behind the cloud: the cloud's certificate is valid from Unix time {} but this clock reads {}; set this machine's time (NTP)",
            self.behind_secs(),
            self.not_before,
            self.local
        )
    }
}

/// Whether `error` (or one of its sources, e.g. an `io::Error` wrapping a rustls error) is a
/// certificate refused as not valid yet, with the two times.
pub fn clock_behind(error: &(dyn std::error::Error + 'static)) -> Option<ClockBehind> {
    let mut next = Some(error);
    while let Some(e) = next {
        let found = e.downcast_ref::<rustls::Error>().or_else(|| {
            e.downcast_ref::<std::io::Error>()
                .and_then(|io| io.get_ref())
                .and_then(|inner| inner.downcast_ref::<rustls::Error>())
        });
        if let Some(rustls::Error::InvalidCertificate(
            rustls::CertificateError::NotValidYetContext { time, not_before },
        )) = found
        {
            return Some(ClockBehind {
                local: time.as_secs() as i64,
                not_before: not_before.as_secs() as i64,
            });
        }
        next = e.source();
    }
    None
}

/// Whether `ca_pem` is a usable set of trust anchors.
pub(crate) fn check_roots(ca_pem: &str) -> Result<(), PkiError> {
    roots(ca_pem).map(drop)
}

/// Whether `pem` holds a private key.
pub(crate) fn check_key(pem: &str) -> Result<(), PkiError> {
    key(pem).map(drop)
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn roots(ca_pem: &str) -> Result<RootCertStore, PkiError> {
    let mut store = RootCertStore::empty();
    for cert in certs(ca_pem)? {
        store.add(cert)?;
    }
    if store.is_empty() {
        return Err(PkiError::Pem {
            what: "CA certificate",
        });
    }
    Ok(store)
}

fn key(pem: &str) -> Result<PrivateKeyDer<'static>, PkiError> {
    PrivateKeyDer::from_pem_slice(pem.as_bytes()).map_err(|_| PkiError::Pem {
        what: "private key",
    })
}
