//! pki: the certificates the hubs use for mutual TLS. A self-signed CA issues a server
//! certificate for cloudhub and one certificate per node with CN `system:node:<name>` and
//! O `system:nodes` (KubeEdge's and Kubernetes' convention). A node's identity is read back from
//! the certificate it presented. All TLS configs use the ring provider explicitly.
#![forbid(unsafe_code)]

mod error;
mod request;
mod tls;

use std::path::Path;
use std::time::Duration;

use rcgen::{
    BasicConstraints, CertificateParams, CertificateSigningRequestParams, DistinguishedName,
    DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, KeyUsagePurpose, SanType,
};
use rustls::pki_types::CertificateDer;

pub use error::PkiError;
pub use request::{Request, Usage, new_request, read_request};
pub use rustls::pki_types::CertificateDer as Der;
pub use tls::{
    ClockBehind, client_config, clock_behind, server_config, server_config_optional_client,
};

/// CN prefix of node certificates.
pub const NODE_CN_PREFIX: &str = "system:node:";
/// Organization of node certificates.
pub const NODES_GROUP: &str = "system:nodes";

/// A certificate authority: its certificate and signing key.
pub struct Ca {
    cert_pem: String,
    key: KeyPair,
}

/// A certificate with its private key, both PEM.
#[derive(Clone, Debug)]
pub struct CertifiedKey {
    pub cert_pem: String,
    pub key_pem: String,
}

// === impl Ca ===

impl Ca {
    /// A new self-signed CA valid for `validity`.
    pub fn generate(common_name: &str, validity: Duration) -> Result<Ca, PkiError> {
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::default();
        params.distinguished_name = name(common_name, None);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        set_validity(&mut params, validity);
        let cert = params.self_signed(&key)?;
        Ok(Ca {
            cert_pem: cert.pem(),
            key,
        })
    }

    /// A CA from its PEM certificate and key.
    pub fn from_pem(cert_pem: &str, key_pem: &str) -> Result<Ca, PkiError> {
        let key = KeyPair::from_pem(key_pem).map_err(|_| PkiError::Pem {
            what: "CA private key",
        })?;
        first_cert(cert_pem)?;
        Ok(Ca {
            cert_pem: cert_pem.to_string(),
            key,
        })
    }

    /// Loads the CA from files, or makes one and writes it there if neither file exists.
    pub fn load_or_generate(
        cert_path: &Path,
        key_path: &Path,
        common_name: &str,
    ) -> Result<Ca, PkiError> {
        if cert_path.exists() || key_path.exists() {
            return Ca::from_pem(&read_pem(cert_path)?, &read_pem(key_path)?);
        }
        let ca = Ca::generate(common_name, Duration::from_secs(100 * 365 * 86400))?;
        write_pem(cert_path, ca.cert_pem())?;
        write_pem(key_path, &ca.key_pem())?;
        Ok(ca)
    }

    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    pub fn key_pem(&self) -> String {
        self.key.serialize_pem()
    }

    /// The CA certificate in DER.
    pub fn cert_der(&self) -> Result<CertificateDer<'static>, PkiError> {
        first_cert(&self.cert_pem)
    }

    /// A server certificate for `dns_names` and IP addresses (given as strings in `hosts`).
    pub fn issue_server(
        &self,
        hosts: &[String],
        validity: Duration,
    ) -> Result<CertifiedKey, PkiError> {
        let mut params = CertificateParams::default();
        params.distinguished_name = name("kubeedge-cloudhub", None);
        params.subject_alt_names = hosts.iter().map(|h| san(h)).collect::<Result<_, _>>()?;
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        self.sign(params, validity)
    }

    /// A client certificate for node `node`: CN `system:node:<node>`, O `system:nodes`.
    pub fn issue_node(&self, node: &str, validity: Duration) -> Result<CertifiedKey, PkiError> {
        let mut params = CertificateParams::default();
        params.distinguished_name = name(&format!("{NODE_CN_PREFIX}{node}"), Some(NODES_GROUP));
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        self.sign(params, validity)
    }

    /// Signs a node's CSR. The CSR must name `system:node:<node>`; the subject is set by the CA,
    /// whatever else the CSR asked for. Returns the certificate PEM.
    pub fn sign_node_csr(
        &self,
        csr_pem: &str,
        node: &str,
        validity: Duration,
    ) -> Result<String, PkiError> {
        self.sign_node_csr_after(csr_pem, node, validity, None)
    }

    /// [`Ca::sign_node_csr`] with the certificate's notBefore no earlier than `not_before_floor`
    /// (Unix seconds): a node revoked at that time gets a certificate the revocation does not
    /// cover (see [`revoked_by`]).
    pub fn sign_node_csr_after(
        &self,
        csr_pem: &str,
        node: &str,
        validity: Duration,
        not_before_floor: Option<i64>,
    ) -> Result<String, PkiError> {
        let csr = parse_csr(csr_pem)?;
        let asked = match csr.params.distinguished_name.get(&DnType::CommonName) {
            Some(rcgen::DnValue::Utf8String(s)) => Some(s.clone()),
            Some(rcgen::DnValue::PrintableString(s)) => Some(s.as_str().to_string()),
            _ => None,
        };
        let want = format!("{NODE_CN_PREFIX}{node}");
        if asked.as_deref() != Some(want.as_str()) {
            return Err(PkiError::Csr(format!(
                "CSR common name {asked:?} is not {want:?}"
            )));
        }
        let mut params = CertificateParams::default();
        params.distinguished_name = name(&want, Some(NODES_GROUP));
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        set_validity(&mut params, validity);
        if let Some(floor) = not_before_floor
            && params.not_before.unix_timestamp() < floor
        {
            params.not_before = (std::time::UNIX_EPOCH + Duration::from_secs(floor as u64)).into();
        }
        let signed = CertificateSigningRequestParams {
            params,
            public_key: csr.public_key,
        };
        let issuer = Issuer::from_ca_cert_pem(&self.cert_pem, &self.key)?;
        Ok(signed.signed_by(&issuer)?.pem())
    }

    fn sign(
        &self,
        mut params: CertificateParams,
        validity: Duration,
    ) -> Result<CertifiedKey, PkiError> {
        set_validity(&mut params, validity);
        let key = KeyPair::generate()?;
        let issuer = Issuer::from_ca_cert_pem(&self.cert_pem, &self.key)?;
        let cert = params.signed_by(&key, &issuer)?;
        Ok(CertifiedKey {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        })
    }
}

/// The SANs of a server certificate for `addresses` and `dns_names`, as strings.
pub fn server_hosts(addresses: &[std::net::IpAddr], dns_names: &[String]) -> Vec<String> {
    addresses
        .iter()
        .map(|a| a.to_string())
        .chain(dns_names.iter().cloned())
        .collect()
}

/// The node a CSR asks a certificate for: its common name after `system:node:`.
pub fn csr_node_name(csr_pem: &str) -> Result<String, PkiError> {
    let csr = parse_csr(csr_pem)?;
    let cn = match csr.params.distinguished_name.get(&DnType::CommonName) {
        Some(rcgen::DnValue::Utf8String(s)) => s.clone(),
        Some(rcgen::DnValue::PrintableString(s)) => s.as_str().to_string(),
        _ => return Err(PkiError::Csr("the CSR has no common name".into())),
    };
    match cn.strip_prefix(NODE_CN_PREFIX) {
        Some(node) if valid_node_name(node) => Ok(node.to_string()),
        _ => Err(PkiError::Csr(format!(
            "the CSR's common name {cn:?} is not {NODE_CN_PREFIX}<node name> with a DNS-1123 subdomain as the name"
        ))),
    }
}

/// Whether `name` is a valid node name (a DNS-1123 subdomain).
pub fn valid_node_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
}

/// The validity window of a certificate, as seconds since the Unix epoch.
pub fn validity(cert_pem: &str) -> Result<(i64, i64), PkiError> {
    validity_der(&first_cert(cert_pem)?)
}

/// [`validity`] of a DER certificate.
pub fn validity_der(der: &CertificateDer<'_>) -> Result<(i64, i64), PkiError> {
    let (_, parsed) =
        x509_parser::parse_x509_certificate(der.as_ref()).map_err(|_| PkiError::Pem {
            what: "certificate",
        })?;
    let v = parsed.validity();
    Ok((v.not_before.timestamp(), v.not_after.timestamp()))
}

/// Whether a certificate valid from `not_before` (Unix seconds) is covered by a revocation of
/// its node at `revoked_at`: every certificate issued before the revocation is, one issued
/// after it is not (the certificate service starts those at `revoked_at` or later).
pub fn revoked_by(not_before: i64, revoked_at: i64) -> bool {
    not_before < revoked_at
}

/// Key algorithms a node's CSR may use: those ring verifies and rustls accepts in a client
/// certificate.
pub const SUPPORTED_KEYS: &str = "ECDSA P-256, ECDSA P-384, RSA, Ed25519";

/// Refuses a CSR whose key is of a kind this CA cannot verify or the hubs cannot use, naming
/// the kind, before its signature is checked (which would only say it is invalid).
pub fn check_csr_key(csr_pem: &str) -> Result<(), PkiError> {
    use rustls::pki_types::pem::PemObject as _;
    use x509_parser::prelude::FromDer as _;
    let der = rustls::pki_types::CertificateSigningRequestDer::from_pem_slice(csr_pem.as_bytes())
        .map_err(|_| PkiError::Csr("unreadable CSR: no CERTIFICATE REQUEST in PEM".into()))?;
    let (_, csr) =
        x509_parser::certification_request::X509CertificationRequest::from_der(der.as_ref())
            .map_err(|e| PkiError::Csr(format!("unreadable CSR: {e}")))?;
    let spki = &csr.certification_request_info.subject_pki;
    let algorithm = spki.algorithm.algorithm.to_id_string();
    let kind = match algorithm.as_str() {
        "1.2.840.113549.1.1.1" | "1.3.101.112" => return Ok(()),
        "1.2.840.10045.2.1" => {
            let curve = spki
                .algorithm
                .parameters
                .as_ref()
                .and_then(|p| p.as_oid().ok())
                .map(|o| o.to_id_string());
            match curve.as_deref() {
                Some("1.2.840.10045.3.1.7" | "1.3.132.0.34") => return Ok(()),
                Some("1.3.132.0.35") => "curve P-521".to_string(),
                Some("1.3.132.0.10") => "curve secp256k1".to_string(),
                Some(other) => format!("elliptic curve {other}"),
                None => "an elliptic curve key without a named curve".to_string(),
            }
        }
        "1.3.101.113" => "Ed448".to_string(),
        other => format!("key algorithm {other}"),
    };
    Err(PkiError::UnsupportedKey {
        kind,
        supported: SUPPORTED_KEYS,
    })
}

/// A new key and a CSR for node `node` (what `keadm join` sends to the cert service).
pub fn node_csr(node: &str) -> Result<(String, String), PkiError> {
    let key = KeyPair::generate()?;
    let mut params = CertificateParams::default();
    params.distinguished_name = name(&format!("{NODE_CN_PREFIX}{node}"), Some(NODES_GROUP));
    let csr = params.serialize_request(&key)?;
    Ok((csr.pem()?, key.serialize_pem()))
}

/// The node name of a peer certificate: the CN after `system:node:`, if the certificate has
/// O `system:nodes`. `None` for anything else.
pub fn node_name(cert: &CertificateDer<'_>) -> Option<String> {
    let (_, parsed) = x509_parser::parse_x509_certificate(cert.as_ref()).ok()?;
    let subject = parsed.subject();
    let in_group = subject
        .iter_organization()
        .any(|o| o.as_str() == Ok(NODES_GROUP));
    let cn = subject.iter_common_name().next()?.as_str().ok()?;
    let node = cn.strip_prefix(NODE_CN_PREFIX)?;
    (in_group && !node.is_empty()).then(|| node.to_string())
}

/// The common name and organizations of a certificate's subject.
pub fn subject(cert: &CertificateDer<'_>) -> Option<(String, Vec<String>)> {
    let (_, parsed) = x509_parser::parse_x509_certificate(cert.as_ref()).ok()?;
    let subject = parsed.subject();
    let cn = subject
        .iter_common_name()
        .next()?
        .as_str()
        .ok()?
        .to_string();
    let orgs = subject
        .iter_organization()
        .filter_map(|o| o.as_str().ok().map(str::to_string))
        .collect();
    Some((cn, orgs))
}

/// The first certificate in a PEM text.
pub fn first_cert(pem: &str) -> Result<CertificateDer<'static>, PkiError> {
    certs(pem)?.into_iter().next().ok_or(PkiError::Pem {
        what: "certificate",
    })
}

/// Every certificate in a PEM text.
pub fn certs(pem: &str) -> Result<Vec<CertificateDer<'static>>, PkiError> {
    use rustls::pki_types::pem::PemObject;
    CertificateDer::pem_slice_iter(pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|_| PkiError::Pem {
            what: "certificate",
        })
}

/// A CSR whose key kind is supported, parsed and its signature checked.
fn parse_csr(csr_pem: &str) -> Result<CertificateSigningRequestParams, PkiError> {
    check_csr_key(csr_pem)?;
    CertificateSigningRequestParams::from_pem(csr_pem)
        .map_err(|e| PkiError::Csr(format!("unreadable CSR: {e}")))
}

fn name(common_name: &str, organization: Option<&str>) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, common_name);
    if let Some(o) = organization {
        dn.push(DnType::OrganizationName, o);
    }
    dn
}

fn san(host: &str) -> Result<SanType, PkiError> {
    Ok(match host.parse::<std::net::IpAddr>() {
        Ok(ip) => SanType::IpAddress(ip),
        Err(_) => SanType::DnsName(host.try_into()?),
    })
}

fn set_validity(params: &mut CertificateParams, validity: Duration) {
    let now = std::time::SystemTime::now();
    // Backdate a little so peers with slightly slow clocks accept a fresh certificate: five
    // minutes, or a tenth of a short validity (renewal is scheduled at a share of the whole
    // window, which the backdating must not dominate).
    let backdate = Duration::from_secs(300).min(validity / 10);
    params.not_before = (now - backdate).into();
    params.not_after = (now + validity).into();
}

/// Reads a PEM file; the error names the path.
pub fn read_pem(path: &Path) -> Result<String, PkiError> {
    std::fs::read_to_string(path).map_err(|source| PkiError::Io {
        op: "reading",
        path: path.into(),
        source,
    })
}

/// Reads a CA bundle: at least one certificate, each one usable as a trust anchor; the error
/// names the file.
pub fn read_ca_file(path: &Path) -> Result<String, PkiError> {
    let text = read_pem(path)?;
    tls::check_roots(&text).map_err(|e| pem_file("CA certificate", path, e))?;
    Ok(text)
}

/// Reads a certificate file (at least one certificate); the error names the file.
pub fn read_cert_file(path: &Path) -> Result<String, PkiError> {
    let text = read_pem(path)?;
    first_cert(&text).map_err(|e| pem_file("certificate", path, e))?;
    Ok(text)
}

/// Reads a private key file; the error names the file.
pub fn read_key_file(path: &Path) -> Result<String, PkiError> {
    let text = read_pem(path)?;
    tls::check_key(&text).map_err(|e| pem_file("private key", path, e))?;
    Ok(text)
}

fn pem_file(what: &'static str, path: &Path, source: PkiError) -> PkiError {
    PkiError::PemFile {
        what,
        path: path.into(),
        source: Box::new(source),
    }
}

/// Writes a PEM file atomically (a temporary file renamed over it), creating its directory. A
/// file holding a private key is readable by its owner only (mode 0600).
pub fn write_pem(path: &Path, text: &str) -> Result<(), PkiError> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;

    let io = |source| PkiError::Io {
        op: "writing",
        path: path.into(),
        source,
    };
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(io)?;
    }
    let mode = if text.contains("PRIVATE KEY") {
        0o600
    } else {
        0o644
    };
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = std::path::PathBuf::from(tmp);
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(mode)
        .open(&tmp)
        .map_err(io)?;
    file.write_all(text.as_bytes()).map_err(io)?;
    file.sync_all().map_err(io)?;
    std::fs::rename(&tmp, path).map_err(io)
}

#[cfg(test)]
mod tests;
