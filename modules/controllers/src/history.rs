//! Revision history kept in ControllerRevisions (`apps/v1`), as kube-controller-manager keeps
//! it for StatefulSets: each revision holds the part of its owner's spec that makes the pods,
//! as the strategic merge patch `kubectl rollout undo` applies, is named `<owner>-<hash>` and
//! numbered in `revision`. An equal revision is reused (renumbered as the newest when it was
//! not), a name taken by other data moves on to the next `collisionCount`, and the oldest
//! revisions nothing uses are deleted beyond the history limit.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::runtime::RawExtension;
use kube::Resource;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use reconciler::Cache;

use crate::informer::{controller_of, controller_ref, ignore_gone};

/// The label a revision (and the pods made from it) carries its hash in.
pub const HASH_LABEL: &str = "controller-revision-hash";

/// FNV-1a over `bytes`, written in kube's safe alphabet (no vowels, no look-alikes), as
/// kube-controller-manager names what it makes from a template.
pub fn hash(bytes: &[u8]) -> String {
    let mut h: u32 = 0x811c_9dc5;
    for b in bytes {
        h ^= u32::from(*b);
        h = h.wrapping_mul(0x0100_0193);
    }
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut out = String::new();
    let mut n = u64::from(h);
    while n > 0 || out.is_empty() {
        out.push(ALPHABET[(n % ALPHABET.len() as u64) as usize] as char);
        n /= ALPHABET.len() as u64;
    }
    out
}

/// The revisions `uid` controls, oldest first.
pub fn owned(cache: &Cache<ControllerRevision>, uid: &str) -> Vec<Arc<ControllerRevision>> {
    let mut revisions: Vec<Arc<ControllerRevision>> = cache
        .owned_by(uid)
        .into_iter()
        .filter(|r| r.metadata.deletion_timestamp.is_none())
        .collect();
    revisions.sort_by_key(|r| r.revision);
    revisions
}

/// A revision's data for `template`: the patch that puts the template back whole.
pub fn template_patch(template: &PodTemplateSpec) -> Value {
    let mut t = serde_json::to_value(template).unwrap_or_default();
    if let Some(map) = t.as_object_mut() {
        map.insert("$patch".into(), json!("replace"));
    }
    json!({"spec": {"template": t}})
}

/// The pod template a revision made by [`template_patch`] holds.
pub fn template_of(revision: &ControllerRevision) -> Option<PodTemplateSpec> {
    let mut t = revision.data.as_ref()?.0.pointer("/spec/template")?.clone();
    t.as_object_mut()?.remove("$patch");
    serde_json::from_value(t).ok()
}

fn data_of(revision: &ControllerRevision) -> Option<&Value> {
    revision.data.as_ref().map(|d| &d.0)
}

/// The revision of `owner` holding `data`: the newest equal one in `revisions` (oldest first),
/// renumbered if a newer one exists, else a new one numbered after the newest. `collisions` is
/// the owner's `status.collisionCount`; returned as it ends up.
pub async fn ensure<K>(
    client: &kube::Client,
    owner: &K,
    revisions: &[Arc<ControllerRevision>],
    data: Value,
    labels: BTreeMap<String, String>,
    mut collisions: i32,
) -> Result<(ControllerRevision, i32), kube::Error>
where
    K: Resource<DynamicType = ()>,
{
    let ns = owner.meta().namespace.clone().unwrap_or_default();
    let api: Api<ControllerRevision> = Api::namespaced(client.clone(), &ns);
    let newest = revisions.iter().map(|r| r.revision).max().unwrap_or(0);
    if let Some(equal) = revisions.iter().rev().find(|r| data_of(r) == Some(&data)) {
        if equal.revision == newest {
            return Ok(((**equal).clone(), collisions));
        }
        let name = equal.metadata.name.as_deref().unwrap_or_default();
        let patch = json!({"revision": newest + 1});
        let renumbered = api
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
        return Ok((renumbered, collisions));
    }
    let owner_name = owner.meta().name.clone().unwrap_or_default();
    let bytes = serde_json::to_vec(&data).unwrap_or_default();
    loop {
        let mut probe = bytes.clone();
        if collisions > 0 {
            probe.extend_from_slice(collisions.to_string().as_bytes());
        }
        let h = hash(&probe);
        let mut labels = labels.clone();
        labels.insert(HASH_LABEL.into(), h.clone());
        let revision = ControllerRevision {
            metadata: kube::api::ObjectMeta {
                name: Some(format!("{owner_name}-{h}")),
                namespace: Some(ns.clone()),
                labels: Some(labels),
                annotations: owner.meta().annotations.clone(),
                owner_references: Some(vec![controller_ref(owner)]),
                ..Default::default()
            },
            data: Some(RawExtension(data.clone())),
            revision: newest + 1,
        };
        match api.create(&PostParams::default(), &revision).await {
            Ok(made) => return Ok((made, collisions)),
            Err(kube::Error::Api(s)) if s.code == 409 => {
                // Made by an earlier sync the watch has not shown yet, or a collision.
                let held = api.get(&format!("{owner_name}-{h}")).await?;
                let ours =
                    controller_of(&held).is_some_and(|o| Some(&o.uid) == owner.meta().uid.as_ref());
                if ours && data_of(&held) == Some(&data) {
                    return Ok((held, collisions));
                }
                collisions += 1;
            }
            Err(e) => return Err(e),
        }
    }
}

/// Deletes the oldest of `revisions` (oldest first) not named in `live` while more than
/// `limit` of them are left.
pub async fn truncate(
    client: &kube::Client,
    revisions: &[Arc<ControllerRevision>],
    live: &HashSet<String>,
    limit: usize,
) -> Result<(), kube::Error> {
    let idle: Vec<&Arc<ControllerRevision>> = revisions
        .iter()
        .filter(|r| !live.contains(r.metadata.name.as_deref().unwrap_or_default()))
        .collect();
    let excess = idle.len().saturating_sub(limit);
    for r in &idle[..excess] {
        let api: Api<ControllerRevision> = Api::namespaced(
            client.clone(),
            r.metadata.namespace.as_deref().unwrap_or_default(),
        );
        let gone = api
            .delete(
                r.metadata.name.as_deref().unwrap_or_default(),
                &DeleteParams::default(),
            )
            .await;
        ignore_gone(gone.map(|_| ()))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_template_round_trips_through_its_revision_data() {
        let t: PodTemplateSpec = serde_json::from_value(json!({
            "metadata": {"labels": {"app": "web"}},
            "spec": {"containers": [{"name": "c", "image": "web:1"}]},
        }))
        .unwrap();
        let data = template_patch(&t);
        assert_eq!(data["spec"]["template"]["$patch"], "replace");
        let revision = ControllerRevision {
            data: Some(RawExtension(data)),
            ..Default::default()
        };
        assert_eq!(template_of(&revision), Some(t));
    }

    #[test]
    fn hashes_use_the_safe_alphabet_and_differ_with_the_bytes() {
        assert_ne!(hash(b"web:1"), hash(b"web:2"));
        assert_eq!(hash(b"web:1"), hash(b"web:1"));
        assert!(
            hash(b"anything")
                .bytes()
                .all(|b| b"bcdfghjklmnpqrstvwxz2456789".contains(&b))
        );
    }
}
