//! Node revocation: `keadm revoke <node>` records in ConfigMap [`REVOKED_CONFIGMAP`] (namespace
//! [`NAMESPACE`]) the time `T` the node was revoked. Every certificate of that node issued before
//! `T` (notBefore before `T`, see [`pki::revoked_by`]) is refused from then on: cloudhub refuses
//! and closes its sessions, the certificate service refuses its renewals, and edgecontroller does
//! not register its Node again. A node joined afresh after `T` (new token, `keadm join`) gets a
//! certificate starting at `T` or later, which the revocation does not cover, so the record
//! never needs clearing.

use std::collections::BTreeMap;

use jiff::Timestamp;
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::api::core::v1::{ConfigMap, Node};
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};

use crate::store::{NAMESPACE, StoreError, ensure_namespace, record_name};

/// ConfigMap of the revoked nodes: node name → RFC 3339 time of its revocation.
pub const REVOKED_CONFIGMAP: &str = "kubeedge-revoked-nodes";

/// The revoked nodes and when each was revoked (Unix seconds).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Revocations(BTreeMap<String, i64>);

// === impl Revocations ===

impl Revocations {
    /// From the ConfigMap's data; an unreadable time names the node and the text.
    pub fn parse(data: &BTreeMap<String, String>) -> Result<Revocations, StoreError> {
        data.iter()
            .map(|(node, at)| {
                let at = at
                    .trim()
                    .parse::<Timestamp>()
                    .map_err(|e| StoreError::Corrupt {
                        what: format!("configmap {NAMESPACE}/{REVOKED_CONFIGMAP}"),
                        why: format!("the revocation time of node {node:?} ({at:?}): {e}"),
                    })?;
                Ok((node.clone(), at.as_second()))
            })
            .collect::<Result<_, _>>()
            .map(Revocations)
    }

    /// When `node` was revoked, if it was.
    pub fn revoked_at(&self, node: &str) -> Option<i64> {
        self.0.get(node).copied()
    }

    /// Whether `node`'s certificate valid from `not_before` is revoked.
    pub fn covers(&self, node: &str, not_before: i64) -> bool {
        self.revoked_at(node)
            .is_some_and(|at| pki::revoked_by(not_before, at))
    }

    /// Every revoked node with its time.
    pub fn iter(&self) -> impl Iterator<Item = (&str, i64)> {
        self.0.iter().map(|(n, at)| (n.as_str(), *at))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// The recorded revocations (none when the ConfigMap does not exist).
pub async fn revocations(client: &kube::Client) -> Result<Revocations, StoreError> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), NAMESPACE);
    let cm = api
        .get_opt(REVOKED_CONFIGMAP)
        .await
        .map_err(|source| StoreError::Api {
            what: format!("reading configmap {NAMESPACE}/{REVOKED_CONFIGMAP}"),
            source,
        })?;
    Revocations::parse(&cm.and_then(|c| c.data).unwrap_or_default())
}

/// Records that every certificate of `node` issued before `at` is revoked (a later revocation
/// of the same node replaces an earlier one).
pub async fn revoke_node(
    client: &kube::Client,
    node: &str,
    at: Timestamp,
) -> Result<(), StoreError> {
    ensure_namespace(client).await?;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), NAMESPACE);
    let what = format!(
        "recording the revocation of node {node} in configmap {NAMESPACE}/{REVOKED_CONFIGMAP}"
    );
    let err = |source| StoreError::Api {
        what: what.clone(),
        source,
    };
    let at = Timestamp::from_second(at.as_second())
        .unwrap_or(at)
        .to_string();
    let patch = serde_json::json!({ "data": { node: at } });
    loop {
        match api
            .patch(
                REVOKED_CONFIGMAP,
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await
        {
            Ok(_) => return Ok(()),
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => return Err(err(e)),
        }
        let cm = ConfigMap {
            metadata: kube::api::ObjectMeta {
                name: Some(REVOKED_CONFIGMAP.into()),
                ..Default::default()
            },
            data: Some(BTreeMap::from([(node.to_string(), at.clone())])),
            ..Default::default()
        };
        match api.create(&PostParams::default(), &cm).await {
            Ok(_) => return Ok(()),
            // Another revocation made it first: patch it.
            Err(kube::Error::Api(s)) if s.code == 409 => continue,
            Err(e) => return Err(err(e)),
        }
    }
}

/// Whether edgecontroller may create the Node of `node` when it connects: not if the node was
/// revoked and has not joined again since (its join record is missing or older than the
/// revocation). A session of a revoked certificate is refused anyway; this closes the moments
/// between the revocation and cloudhub seeing it.
pub async fn may_register(client: &kube::Client, node: &str) -> Result<bool, StoreError> {
    let Some(at) = revocations(client).await?.revoked_at(node) else {
        return Ok(true);
    };
    let csrs: Api<CertificateSigningRequest> = Api::all(client.clone());
    let record = csrs
        .get_opt(&record_name(node))
        .await
        .map_err(|source| StoreError::Api {
            what: format!("reading csr {}", record_name(node)),
            source,
        })?;
    let joined = record
        .and_then(|r| r.metadata.creation_timestamp)
        .map(|t| t.0.as_second());
    Ok(joined.is_some_and(|joined| joined >= at))
}

/// Deletes `node`'s join record and Node (what `keadm revoke` does after recording the
/// revocation); says which of the two existed.
pub async fn delete_records(client: &kube::Client, node: &str) -> Result<(bool, bool), StoreError> {
    let csrs: Api<CertificateSigningRequest> = Api::all(client.clone());
    let record = csrs
        .delete(&record_name(node), &Default::default())
        .await
        .map(drop);
    let nodes: Api<Node> = Api::all(client.clone());
    let gone = nodes.delete(node, &Default::default()).await.map(drop);
    let existed = |r: Result<(), kube::Error>, what: String| match r {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(false),
        Err(source) => Err(StoreError::Api { what, source }),
    };
    Ok((
        existed(record, format!("deleting csr {}", record_name(node)))?,
        existed(gone, format!("deleting node {node}"))?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_revocation_covers_the_certificates_issued_before_it_only() {
        let data = BTreeMap::from([("edge-1".to_string(), "2025-01-01T00:00:00Z".to_string())]);
        let revoked = Revocations::parse(&data).unwrap();
        let at = revoked.revoked_at("edge-1").unwrap();
        assert!(revoked.covers("edge-1", at - 1));
        assert!(!revoked.covers("edge-1", at), "issued at the revocation");
        assert!(!revoked.covers("edge-2", at - 1), "another node");
    }

    #[test]
    fn an_unreadable_revocation_time_names_the_node() {
        let data = BTreeMap::from([("edge-1".to_string(), "yesterday".to_string())]);
        let err = Revocations::parse(&data).unwrap_err().to_string();
        assert!(err.contains("edge-1") && err.contains("yesterday"), "{err}");
    }
}
