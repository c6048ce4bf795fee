//! The CA and server certificate cloudhub serves with: loaded from the configured files, or
//! made there on first start (as KubeEdge's cloudcore does).

use std::time::Duration;

use pki::{Ca, CertifiedKey};

use crate::config::Config;
use crate::error::HubError;

const YEAR: Duration = Duration::from_secs(365 * 86400);

/// What the listeners need.
pub struct Certs {
    pub ca: Ca,
    pub server: CertifiedKey,
}

/// Loads the CA and the server certificate, making whichever is missing.
pub fn ensure(config: &Config) -> Result<Certs, HubError> {
    let ca = Ca::load_or_generate(&config.tls_ca_file, &config.tls_ca_key_file, "KubeEdge")?;
    let (cert, key) = (&config.tls_cert_file, &config.tls_private_key_file);
    let server = if cert.exists() || key.exists() {
        CertifiedKey {
            cert_pem: pki::read_pem(cert)?,
            key_pem: pki::read_pem(key)?,
        }
    } else {
        let hosts = pki::server_hosts(&config.advertise_address, &config.dns_names);
        let made = ca.issue_server(&hosts, 10 * YEAR)?;
        pki::write_pem(cert, &made.cert_pem)?;
        pki::write_pem(key, &made.key_pem)?;
        tracing::info!(cert = %cert.display(), ?hosts, "issued the cloudhub server certificate");
        made
    };
    Ok(Certs { ca, server })
}
