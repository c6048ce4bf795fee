//! Static pods (the kubelet's file source): pod manifests in `staticPodPath`, one pod per file
//! (YAML or JSON, hidden files skipped), run by edged whether or not the cloud is there. Each
//! gets the kubelet's identity: the name `<name>-<node>`, the node's name as `nodeName`, and a
//! uid that is a hash of the manifest and the node, so an edgecore restart finds its
//! containers again and an edited manifest replaces the pod. The API sees each as a mirror pod
//! (annotation `kubernetes.io/config.mirror`, owned by the node's Node) that edged creates,
//! replaces when the manifest changed, and deletes when the manifest is gone; the status the
//! worker reports lands on the mirror. A mirror pod is never run as a pod of its own.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use apimachinery::noderules::MIRROR_ANNOTATION;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, PostParams, Preconditions};
use objstore::{ListOptions, ObjKey};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::Shared;
use crate::spec::PodId;

/// Where a pod came from.
const SOURCE_ANNOTATION: &str = "kubernetes.io/config.source";
/// The static pod's hash (its uid).
const HASH_ANNOTATION: &str = "kubernetes.io/config.hash";
/// When the manifest was read.
const SEEN_ANNOTATION: &str = "kubernetes.io/config.seen";
/// Inside edged only: the uid of the mirror pod whose status a static pod carries.
pub const MIRROR_UID: &str = "edged.kubeedge.io/mirror-uid";

/// The static pods edged runs.
#[derive(Default)]
pub struct Statics {
    /// By `namespace/name`.
    pods: Mutex<HashMap<String, Arc<Pod>>>,
    /// Reads the directory and checks the mirrors now (a mirror pod was deleted).
    poke: Notify,
}

// === impl Statics ===

impl Statics {
    /// The static pod named like mirror pod `mirror`, with the mirror's status (so the status
    /// the worker computes carries its transition times).
    pub fn with_mirror_status(&self, mirror: &Pod) -> Option<Arc<Pod>> {
        let key = format!(
            "{}/{}",
            mirror.metadata.namespace.as_deref().unwrap_or_default(),
            mirror.metadata.name.as_deref().unwrap_or_default()
        );
        let pods = self.pods.lock().unwrap_or_else(|e| e.into_inner());
        let mut pod = Pod::clone(pods.get(&key)?);
        pod.status = mirror.status.clone();
        // Which mirror the status is of: a mirror created again starts with a status of its
        // own, which the worker must report to even if it looks like one it reported before.
        if let Some(uid) = &mirror.metadata.uid {
            pod.metadata
                .annotations
                .get_or_insert_with(Default::default)
                .insert(MIRROR_UID.into(), uid.clone());
        }
        Some(Arc::new(pod))
    }

    /// Asks for a check now.
    pub fn poke(&self) {
        self.poke.notify_one();
    }
}

/// Whether `pod` is a mirror pod (the API's copy of a static pod).
pub fn is_mirror(pod: &Pod) -> bool {
    annotation(pod, MIRROR_ANNOTATION).is_some()
}

fn annotation<'a>(pod: &'a Pod, key: &str) -> Option<&'a str> {
    pod.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(key))
        .map(String::as_str)
}

/// Reads the manifests in `dir` as node `node`'s static pods; a file that is not a pod is
/// reported in `errors` (by file) and skipped.
pub fn read(dir: &Path, node: &str, errors: &mut BTreeMap<PathBuf, String>) -> Vec<Pod> {
    let mut pods = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return pods;
    };
    let mut files: Vec<PathBuf> = entries
        .flatten()
        .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
        .filter(|e| e.file_type().is_ok_and(|t| t.is_file() || t.is_symlink()))
        .map(|e| e.path())
        .collect();
    files.sort();
    errors.retain(|f, _| files.contains(f));
    for file in files {
        match std::fs::read(&file)
            .map_err(|e| e.to_string())
            .and_then(|bytes| manifest(&bytes, node))
        {
            Ok(pod) => {
                errors.remove(&file);
                pods.push(pod);
            }
            Err(why) => {
                if errors.get(&file) != Some(&why) {
                    tracing::warn!(file = %file.display(), error = %why, "static pod manifest skipped");
                    errors.insert(file, why);
                }
            }
        }
    }
    pods
}

/// A static pod from a manifest's bytes (YAML or JSON), as the kubelet's file source makes it.
pub fn manifest(bytes: &[u8], node: &str) -> Result<Pod, String> {
    let value: Value =
        serde_yaml_ng::from_slice(bytes).map_err(|e| format!("not YAML or JSON: {e}"))?;
    match (value["apiVersion"].as_str(), value["kind"].as_str()) {
        (Some("v1"), Some("Pod")) => {}
        (v, k) => {
            return Err(format!(
                "apiVersion {:?} kind {:?}: a static pod manifest holds one v1 Pod",
                v.unwrap_or_default(),
                k.unwrap_or_default()
            ));
        }
    }
    let mut pod: Pod = serde_json::from_value(value).map_err(|e| format!("not a Pod: {e}"))?;
    let name = pod.metadata.name.clone().unwrap_or_default();
    if name.is_empty() {
        return Err("metadata.name is required".into());
    }
    if pod.spec.as_ref().is_none_or(|s| s.containers.is_empty()) {
        return Err("spec.containers is required".into());
    }
    let mut hasher = Sha256::new();
    hasher.update(bytes);
    hasher.update(node.as_bytes());
    let hash: String = hasher.finalize()[..16]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let m = &mut pod.metadata;
    m.name = Some(format!("{name}-{}", node.to_lowercase()));
    if m.namespace.as_deref().is_none_or(str::is_empty) {
        m.namespace = Some("default".into());
    }
    m.uid = Some(hash.clone());
    let annotations = m.annotations.get_or_insert_with(Default::default);
    annotations.insert(SOURCE_ANNOTATION.into(), "file".into());
    annotations.insert(HASH_ANNOTATION.into(), hash);
    if let Some(spec) = pod.spec.as_mut() {
        spec.node_name = Some(node.to_string());
    }
    pod.status = None;
    Ok(pod)
}

/// The mirror pod of static pod `pod`, owned by Node `node` (uid `node_uid`).
pub fn mirror(pod: &Pod, node: &str, node_uid: &str) -> Pod {
    let mut mirror = pod.clone();
    let hash = annotation(pod, HASH_ANNOTATION)
        .unwrap_or_default()
        .to_string();
    let m = &mut mirror.metadata;
    m.uid = None;
    if let Some(a) = m.annotations.as_mut() {
        a.remove(MIRROR_UID);
    }
    m.resource_version = None;
    let annotations = m.annotations.get_or_insert_with(Default::default);
    annotations.insert(MIRROR_ANNOTATION.into(), hash);
    annotations.insert(SEEN_ANNOTATION.into(), apimachinery::time::now_rfc3339());
    let owner = json!({
        "apiVersion": "v1", "kind": "Node", "name": node, "uid": node_uid, "controller": true,
    });
    m.owner_references = Some(vec![
        serde_json::from_value(owner).expect("an owner reference from known fields"),
    ]);
    mirror.status = None;
    mirror
}

/// Reads the directory and runs its pods (no API calls): done before orphans are removed at
/// start, so an edgecore restart keeps the static pods' containers.
pub fn load(
    shared: &Arc<Shared>,
    errors: &mut BTreeMap<PathBuf, String>,
    shutdown: &CancellationToken,
) {
    let dir = &shared.config.static_pod_path;
    if dir.as_os_str().is_empty() {
        return;
    }
    let found = read(dir, &shared.node, errors);
    let mut gone = Vec::new();
    let mut fresh = Vec::new();
    {
        let mut pods = shared
            .statics
            .pods
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let keys: HashMap<String, &Pod> = found.iter().map(|p| (key(p), p)).collect();
        pods.retain(|k, held| {
            let same = keys
                .get(k)
                .is_some_and(|p| p.metadata.uid == held.metadata.uid);
            if !same {
                gone.push(Arc::clone(held));
            }
            same
        });
        for pod in found {
            let k = key(&pod);
            if let std::collections::hash_map::Entry::Vacant(e) = pods.entry(k) {
                let pod = Arc::new(pod);
                e.insert(pod.clone());
                fresh.push(pod);
            }
        }
    }
    for pod in gone {
        if let Some(id) = PodId::of(&pod) {
            tracing::info!(pod = %id.key(), "static pod manifest removed or changed");
            shared.dispatch(&id.uid.clone(), id, None, shutdown);
        }
    }
    for pod in fresh {
        if let Some(id) = PodId::of(&pod) {
            tracing::info!(pod = %id.key(), uid = %id.uid, "static pod");
            shared.dispatch(&id.uid.clone(), id, Some(pod), shutdown);
        }
    }
}

/// Reads the directory every `fileCheckFrequency` (or when poked) and keeps the mirror pods in
/// the API in step, until shutdown.
pub async fn run(
    shared: Arc<Shared>,
    mut errors: BTreeMap<PathBuf, String>,
    shutdown: CancellationToken,
) {
    if shared.config.static_pod_path.as_os_str().is_empty() {
        return;
    }
    let mut tick = tokio::time::interval(shared.config.file_check_frequency);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            biased;
            _ = shutdown.cancelled() => return,
            _ = tick.tick() => {}
            _ = shared.statics.poke.notified() => {}
        }
        load(&shared, &mut errors, &shutdown);
        if shared.online()
            && let Err(e) = mirrors(&shared).await
        {
            tracing::info!(error = %e, "mirror pods not in step yet; retrying");
        }
    }
}

fn key(pod: &Pod) -> String {
    format!(
        "{}/{}",
        pod.metadata.namespace.as_deref().unwrap_or_default(),
        pod.metadata.name.as_deref().unwrap_or_default()
    )
}

/// Creates the missing mirror pods, replaces those of an older manifest, deletes those whose
/// static pod is gone.
async fn mirrors(shared: &Shared) -> Result<(), crate::EdgedError> {
    let statics: Vec<Arc<Pod>> = {
        let pods = shared
            .statics
            .pods
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        pods.values().cloned().collect()
    };
    let held = shared
        .store
        .list(ListOptions {
            resource: "pods".into(),
            ..Default::default()
        })
        .await?;
    let mut mirrors: HashMap<String, Pod> = HashMap::new();
    for obj in &held.items {
        let Ok(pod) = serde_json::from_slice::<Pod>(&obj.value) else {
            continue;
        };
        let here = pod.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(&shared.node);
        if here && is_mirror(&pod) {
            mirrors.insert(key(&pod), pod);
        }
    }
    let node_uid = shared
        .store
        .get(&ObjKey::new("nodes", "", shared.node.as_str()))
        .await?
        .and_then(|o| serde_json::from_slice::<Value>(&o.value).ok())
        .and_then(|n| n["metadata"]["uid"].as_str().map(str::to_string));
    let client = shared.client.clone();
    for pod in &statics {
        let k = key(pod);
        let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
        let api: Api<Pod> = Api::namespaced(client.clone(), ns);
        let hash = annotation(pod, HASH_ANNOTATION).unwrap_or_default();
        match mirrors.remove(&k) {
            Some(m)
                if annotation(&m, MIRROR_ANNOTATION) == Some(hash)
                    && m.metadata.deletion_timestamp.is_none() => {}
            Some(m) => {
                // Of an older manifest, or deleted in the API (marked for a graceful delete
                // that only the node ends): deleted now, created again at the next check.
                tracing::info!(
                    pod = %k,
                    held = annotation(&m, MIRROR_ANNOTATION).unwrap_or_default(),
                    want = hash,
                    deleting = m.metadata.deletion_timestamp.is_some(),
                    "mirror pod replaced"
                );
                delete(&api, &m).await?;
                shared.statics.poke();
            }
            None => {
                let name = pod.metadata.name.as_deref().unwrap_or_default();
                let exists = shared
                    .store
                    .get(&ObjKey::new("pods", ns, name))
                    .await?
                    .is_some();
                if exists {
                    tracing::warn!(pod = %k, "a pod that is not a mirror pod has the static pod's name; no mirror pod");
                    continue;
                }
                let Some(node_uid) = node_uid.as_deref() else {
                    // The kubelet's rule: no mirror pod before the node is registered (it is
                    // owned by the Node).
                    tracing::debug!(pod = %k, "node not registered yet: mirror pod waits");
                    continue;
                };
                let body = mirror(pod, &shared.node, node_uid);
                match api.create(&PostParams::default(), &body).await {
                    Ok(_) => tracing::info!(pod = %k, "mirror pod created"),
                    Err(kube::Error::Api(s)) if s.code == 409 => {}
                    Err(e) => return Err(e.into()),
                }
            }
        }
    }
    for (k, m) in mirrors {
        tracing::info!(pod = %k, "mirror pod of a removed static pod deleted");
        let ns = m.metadata.namespace.as_deref().unwrap_or("default");
        delete(&Api::namespaced(client.clone(), ns), &m).await?;
    }
    Ok(())
}

/// Deletes mirror pod `m` at once (it runs nothing), if it is still the one read.
async fn delete(api: &Api<Pod>, m: &Pod) -> Result<(), crate::EdgedError> {
    let params = DeleteParams {
        grace_period_seconds: Some(0),
        preconditions: Some(Preconditions {
            uid: m.metadata.uid.clone(),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    match api
        .delete(m.metadata.name.as_deref().unwrap_or_default(), &params)
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MANIFEST: &str = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\nspec:\n  containers:\n  - name: c\n    image: busybox\n";

    #[test]
    fn a_manifest_becomes_the_node_s_static_pod() {
        let pod = manifest(MANIFEST.as_bytes(), "Edge-1").unwrap();
        assert_eq!(pod.metadata.name.as_deref(), Some("web-edge-1"));
        assert_eq!(pod.metadata.namespace.as_deref(), Some("default"));
        let uid = pod.metadata.uid.clone().unwrap();
        assert_eq!(uid.len(), 32);
        assert_eq!(annotation(&pod, HASH_ANNOTATION), Some(uid.as_str()));
        assert_eq!(annotation(&pod, SOURCE_ANNOTATION), Some("file"));
        assert_eq!(
            pod.spec.as_ref().unwrap().node_name.as_deref(),
            Some("Edge-1")
        );
        // The same manifest on the same node is the same pod; edited, or elsewhere, another.
        let again = manifest(MANIFEST.as_bytes(), "Edge-1").unwrap();
        assert_eq!(again.metadata.uid, pod.metadata.uid);
        let edited = MANIFEST.replace("busybox", "busybox:1.36");
        assert_ne!(
            manifest(edited.as_bytes(), "Edge-1").unwrap().metadata.uid,
            pod.metadata.uid
        );
        assert_ne!(
            manifest(MANIFEST.as_bytes(), "edge-2")
                .unwrap()
                .metadata
                .uid,
            pod.metadata.uid
        );
        assert!(!is_mirror(&pod));
    }

    #[test]
    fn a_mirror_pod_carries_the_hash_and_its_node_as_owner() {
        let pod = manifest(MANIFEST.as_bytes(), "edge-1").unwrap();
        let m = mirror(&pod, "edge-1", "node-uid");
        assert!(is_mirror(&m));
        assert_eq!(
            annotation(&m, MIRROR_ANNOTATION),
            pod.metadata.uid.as_deref()
        );
        assert_eq!(m.metadata.uid, None);
        let owner = &m.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.name.as_str()),
            ("Node", "edge-1")
        );
        assert_eq!(owner.controller, Some(true));
    }

    #[test]
    fn bad_manifests_are_named_and_skipped() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("web.yaml"), MANIFEST).unwrap();
        std::fs::write(dir.path().join(".hidden.yaml"), "not: read").unwrap();
        std::fs::write(
            dir.path().join("svc.yaml"),
            "apiVersion: v1\nkind: Service\nmetadata:\n  name: s\n",
        )
        .unwrap();
        std::fs::write(dir.path().join("broken.json"), "{\"apiVersion\": ").unwrap();
        std::fs::write(
            dir.path().join("empty.yaml"),
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: e\nspec:\n  containers: []\n",
        )
        .unwrap();
        let mut errors = BTreeMap::new();
        let pods = read(dir.path(), "n", &mut errors);
        assert_eq!(pods.len(), 1);
        assert_eq!(pods[0].metadata.name.as_deref(), Some("web-n"));
        let named: Vec<String> = errors
            .iter()
            .map(|(f, e)| format!("{}: {e}", f.file_name().unwrap().to_string_lossy()))
            .collect();
        assert_eq!(named.len(), 3, "{named:?}");
        assert!(
            named[0].starts_with("broken.json: not YAML or JSON"),
            "{named:?}"
        );
        assert!(
            named[1].contains("spec.containers is required"),
            "{named:?}"
        );
        assert!(named[2].contains("kind \"Service\""), "{named:?}");
        assert!(read(&dir.path().join("absent"), "n", &mut errors).is_empty());
    }
}
