//! Kubernetes CertificateSigningRequests: what a request asks for ([`read_request`]), for a
//! signer to check against its rules, and the certificate the CA issues for it
//! ([`Ca::sign_request`]): the request's own subject and names, with the usages the signer
//! grants.

use std::net::IpAddr;
use std::time::Duration;

use rcgen::{
    CertificateParams, CertificateSigningRequestParams, DnType, ExtendedKeyUsagePurpose, Issuer,
    KeyUsagePurpose, SanType,
};

use crate::{Ca, PkiError, parse_csr, set_validity};

/// The subject and alternative names a CSR asks for (its signature checked).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Request {
    /// The subject's common name (empty when it has none).
    pub common_name: String,
    /// The subject's organizations, in order.
    pub organizations: Vec<String>,
    /// DNS names.
    pub dns_names: Vec<String>,
    /// IP addresses.
    pub ip_addresses: Vec<IpAddr>,
    /// Email addresses.
    pub emails: Vec<String>,
    /// URIs.
    pub uris: Vec<String>,
    /// Alternative names of any other kind.
    pub other_names: usize,
}

/// A key usage a signer grants (the `spec.usages` values it knows).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Usage {
    /// `digital signature`.
    DigitalSignature,
    /// `key encipherment`.
    KeyEncipherment,
    /// `server auth`.
    ServerAuth,
    /// `client auth`.
    ClientAuth,
}

/// Reads what the PEM CSR `csr_pem` asks for, after checking its key kind and signature.
pub fn read_request(csr_pem: &str) -> Result<Request, PkiError> {
    let parsed = parse_csr(csr_pem)?;
    let mut request = subject(csr_pem)?;
    for san in &parsed.params.subject_alt_names {
        match san {
            SanType::DnsName(n) => request.dns_names.push(n.as_str().to_string()),
            SanType::IpAddress(ip) => request.ip_addresses.push(*ip),
            SanType::Rfc822Name(e) => request.emails.push(e.as_str().to_string()),
            SanType::URI(u) => request.uris.push(u.as_str().to_string()),
            _ => request.other_names += 1,
        }
    }
    Ok(request)
}

/// A new key and a CSR for CN `common_name`, O `organization` and the DNS names or IP
/// addresses in `hosts` (what a client sends as a CertificateSigningRequest's `spec.request`).
/// Returns the CSR and the key, both PEM.
pub fn new_request(
    common_name: &str,
    organization: Option<&str>,
    hosts: &[String],
) -> Result<(String, String), PkiError> {
    let key = rcgen::KeyPair::generate()?;
    let mut params = CertificateParams::default();
    params.distinguished_name = crate::name(common_name, organization);
    params.subject_alt_names = hosts
        .iter()
        .map(|h| crate::san(h))
        .collect::<Result<_, _>>()?;
    let csr = params.serialize_request(&key)?;
    Ok((csr.pem()?, key.serialize_pem()))
}

// === impl Ca ===

impl Ca {
    /// A certificate for the CSR `csr_pem`: its subject (common name and at most one
    /// organization) and its DNS, IP, email and URI names, with `usages`, valid for `validity`.
    /// Returns the certificate PEM.
    pub fn sign_request(
        &self,
        csr_pem: &str,
        usages: &[Usage],
        validity: Duration,
    ) -> Result<String, PkiError> {
        let parsed = parse_csr(csr_pem)?;
        let request = subject(csr_pem)?;
        if request.organizations.len() > 1 {
            return Err(PkiError::Csr(format!(
                "the subject names {} organizations; this CA writes at most one",
                request.organizations.len()
            )));
        }
        let mut params = CertificateParams::default();
        params
            .distinguished_name
            .push(DnType::CommonName, request.common_name.as_str());
        if let Some(o) = request.organizations.first() {
            params
                .distinguished_name
                .push(DnType::OrganizationName, o.as_str());
        }
        params.subject_alt_names = parsed
            .params
            .subject_alt_names
            .iter()
            .filter(|s| {
                matches!(
                    s,
                    SanType::DnsName(_)
                        | SanType::IpAddress(_)
                        | SanType::Rfc822Name(_)
                        | SanType::URI(_)
                )
            })
            .cloned()
            .collect();
        for usage in usages {
            match usage {
                Usage::DigitalSignature => {
                    params.key_usages.push(KeyUsagePurpose::DigitalSignature)
                }
                Usage::KeyEncipherment => params.key_usages.push(KeyUsagePurpose::KeyEncipherment),
                Usage::ServerAuth => params
                    .extended_key_usages
                    .push(ExtendedKeyUsagePurpose::ServerAuth),
                Usage::ClientAuth => params
                    .extended_key_usages
                    .push(ExtendedKeyUsagePurpose::ClientAuth),
            }
        }
        set_validity(&mut params, validity);
        let signed = CertificateSigningRequestParams {
            params,
            public_key: parsed.public_key,
        };
        let issuer = Issuer::from_ca_cert_pem(self.cert_pem(), &self.key)?;
        Ok(signed.signed_by(&issuer)?.pem())
    }
}

/// The subject of a CSR (all its organizations, which rcgen's name map would fold into one).
fn subject(csr_pem: &str) -> Result<Request, PkiError> {
    use rustls::pki_types::pem::PemObject as _;
    use x509_parser::prelude::FromDer as _;
    let der = rustls::pki_types::CertificateSigningRequestDer::from_pem_slice(csr_pem.as_bytes())
        .map_err(|_| PkiError::Csr("unreadable CSR: no CERTIFICATE REQUEST in PEM".into()))?;
    let (_, csr) =
        x509_parser::certification_request::X509CertificationRequest::from_der(der.as_ref())
            .map_err(|e| PkiError::Csr(format!("unreadable CSR: {e}")))?;
    let name = &csr.certification_request_info.subject;
    let text = |a: &x509_parser::x509::AttributeTypeAndValue<'_>| {
        a.as_str().map(str::to_string).map_err(|_| {
            PkiError::Csr("unreadable CSR: a subject attribute is not a string".into())
        })
    };
    let common_name = match name.iter_common_name().next() {
        Some(cn) => text(cn)?,
        None => String::new(),
    };
    let organizations = name
        .iter_organization()
        .map(text)
        .collect::<Result<_, _>>()?;
    Ok(Request {
        common_name,
        organizations,
        ..Request::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn csr(cn: &str, orgs: &[&str], sans: &[&str]) -> (String, rcgen::KeyPair) {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params =
            CertificateParams::new(sans.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap();
        params.distinguished_name = rcgen::DistinguishedName::new();
        params.distinguished_name.push(DnType::CommonName, cn);
        for o in orgs {
            params.distinguished_name.push(DnType::OrganizationName, *o);
        }
        (params.serialize_request(&key).unwrap().pem().unwrap(), key)
    }

    #[test]
    fn a_request_reads_as_its_subject_and_names() {
        let (pem, _) = csr(
            "system:node:n1",
            &["system:nodes"],
            &["n1.local", "10.0.0.7"],
        );
        let r = read_request(&pem).unwrap();
        assert_eq!(r.common_name, "system:node:n1");
        assert_eq!(r.organizations, ["system:nodes"]);
        assert_eq!(r.dns_names, ["n1.local"]);
        assert_eq!(r.ip_addresses, ["10.0.0.7".parse::<IpAddr>().unwrap()]);
        assert!(r.emails.is_empty() && r.uris.is_empty());
    }

    #[test]
    fn a_signed_request_keeps_its_subject_and_chains_to_the_ca() {
        let ca = Ca::generate("test-ca", Duration::from_secs(3600)).unwrap();
        let (pem, _) = csr("alice", &["devs"], &[]);
        let cert = ca
            .sign_request(
                &pem,
                &[Usage::ClientAuth, Usage::DigitalSignature],
                Duration::from_secs(900),
            )
            .unwrap();
        let der = crate::first_cert(&cert).unwrap();
        assert_eq!(
            crate::subject(&der),
            Some(("alice".into(), vec!["devs".into()]))
        );
        let (_, parsed) = x509_parser::parse_x509_certificate(der.as_ref()).unwrap();
        let ca_der = ca.cert_der().unwrap();
        let (_, ca_parsed) = x509_parser::parse_x509_certificate(ca_der.as_ref()).unwrap();
        assert_eq!(parsed.issuer(), ca_parsed.subject());
        let (from, to) = crate::validity(&cert).unwrap();
        assert!(to - from <= 900 + 300, "{from} {to}");
    }

    #[test]
    fn a_garbled_request_is_refused_with_a_reason() {
        let err = read_request(
            "-----BEGIN CERTIFICATE REQUEST-----\nAAAA\n-----END CERTIFICATE REQUEST-----\n",
        )
        .unwrap_err();
        assert!(err.to_string().contains("unreadable CSR"), "{err}");
    }
}
