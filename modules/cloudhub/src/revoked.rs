//! The revoked nodes as cloudhub sees them ([`bootstrap::revoke`]): read from the Kubernetes API
//! every [`POLL`], kept in memory for the session handshakes (a revoked certificate's session is
//! refused), and each new revocation closes the node's live session at once.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use bootstrap::Revocations;

use crate::Shared;

/// How often the revocations are read.
pub const POLL: Duration = Duration::from_secs(1);

/// The last revocations read.
#[derive(Default)]
pub(crate) struct Revoked(RwLock<Arc<Revocations>>);

// === impl Revoked ===

impl Revoked {
    /// When the node was revoked, if the certificate `cert` it presented is covered.
    pub(crate) fn covers(&self, node: &str, cert: Option<&pki::Der<'static>>) -> Option<i64> {
        let revocations = self.0.read().unwrap_or_else(|p| p.into_inner()).clone();
        let at = revocations.revoked_at(node)?;
        // A certificate whose validity cannot be read is taken as issued before.
        let not_before = cert
            .and_then(|c| pki::validity_der(c).ok())
            .map_or(i64::MIN, |(from, _)| from);
        pki::revoked_by(not_before, at).then_some(at)
    }

    /// Takes `new`; returns the nodes revoked (again) since the last one.
    fn replace(&self, new: Revocations) -> Vec<String> {
        let mut current = self.0.write().unwrap_or_else(|p| p.into_inner());
        let fresh = new
            .iter()
            .filter(|(node, at)| current.revoked_at(node) != Some(*at))
            .map(|(node, _)| node.to_string())
            .collect();
        *current = Arc::new(new);
        fresh
    }
}

/// Reads the revocations until shutdown; closes the sessions of newly revoked nodes.
pub(crate) async fn watch(shared: Arc<Shared>, client: kube::Client) {
    let mut warned = false;
    loop {
        match bootstrap::revoke::revocations(&client).await {
            Ok(revocations) => {
                warned = false;
                for node in shared.revoked.replace(revocations) {
                    close_session(&shared, &node);
                }
            }
            Err(e) if !warned => {
                warned = true;
                tracing::warn!(error = %e, "cannot read the revoked nodes; keeping the last ones read");
            }
            Err(_) => {}
        }
        tokio::select! {
            _ = shared.shutdown.cancelled() => return,
            _ = tokio::time::sleep(POLL) => {}
        }
    }
}

/// Ends the live session of `node`, if it has one: it comes back, and is refused if its
/// certificate is revoked.
fn close_session(shared: &Shared, node: &str) {
    let Some(slot) = shared.nodes.get(node) else {
        return;
    };
    let current = slot
        .current
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .take();
    if let Some((_, cancel)) = current {
        tracing::info!(node_id = %node, "node revoked: closing its session");
        cancel.cancel();
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn revocations(entries: &[(&str, &str)]) -> Revocations {
        let data: BTreeMap<String, String> = entries
            .iter()
            .map(|(n, t)| (n.to_string(), t.to_string()))
            .collect();
        Revocations::parse(&data).unwrap()
    }

    #[test]
    fn a_certificate_issued_before_the_revocation_is_covered_and_a_later_one_is_not() {
        let ca = pki::Ca::generate("test", Duration::from_secs(3600)).unwrap();
        let old = ca.issue_node("edge-1", Duration::from_secs(3600)).unwrap();
        let old = pki::first_cert(&old.cert_pem).unwrap();
        let (from, _) = pki::validity_der(&old).unwrap();
        let at = bootstrap::Timestamp::from_second(from + 60)
            .unwrap()
            .to_string();
        let revoked = Revoked::default();
        assert_eq!(
            revoked.replace(revocations(&[("edge-1", &at)])),
            vec!["edge-1"]
        );
        assert!(revoked.covers("edge-1", Some(&old)).is_some());
        assert!(revoked.covers("edge-2", Some(&old)).is_none());
        let (csr, _) = pki::node_csr("edge-1").unwrap();
        let new = ca
            .sign_node_csr_after(&csr, "edge-1", Duration::from_secs(3600), Some(from + 60))
            .unwrap();
        let new = pki::first_cert(&new).unwrap();
        assert!(
            revoked.covers("edge-1", Some(&new)).is_none(),
            "joined again after"
        );
        assert!(
            revoked.replace(revocations(&[("edge-1", &at)])).is_empty(),
            "an unchanged revocation closes nothing again"
        );
    }
}
