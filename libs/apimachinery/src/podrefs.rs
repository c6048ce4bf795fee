//! The API objects a pod references, found by one walk over its spec: the service account,
//! secrets (image pull secrets, volumes, projected sources, env, envFrom, and the secret
//! references of CSI and other volume plugins), configmaps, persistentvolumeclaims (also the
//! claims generic ephemeral volumes make), resource claims, cluster trust bundles and projected
//! service-account tokens.
//!
//! Three places use it: edgecontroller (what a node must hold), the node rules for mirror pods
//! (which may reference none of these) and the read authorizer (which of them a node may read).

use std::collections::BTreeSet;

use serde_json::Value;

/// What a pod references.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PodRef {
    /// `spec.serviceAccountName` (or the deprecated `spec.serviceAccount`).
    ServiceAccount,
    /// A projected `serviceAccountToken` source (names nothing).
    ServiceAccountToken,
    Secret,
    ConfigMap,
    /// A `persistentVolumeClaim` volume, or the claim an `ephemeral` volume makes.
    PersistentVolumeClaim,
    /// An entry of `spec.resourceClaims` (named, or made from a template: then unnamed).
    ResourceClaim,
    /// A projected `clusterTrustBundle` source (named, or selected by signer: then unnamed).
    ClusterTrustBundle,
}

/// The service account a pod runs as when it names none.
pub const DEFAULT_SERVICE_ACCOUNT: &str = "default";

/// The volume plugins that name a secret, and where: `(volume key, path to the secret name)`.
const VOLUME_SECRETS: &[(&str, &[&str])] = &[
    ("secret", &["secretName"]),
    ("azureFile", &["secretName"]),
    ("cephfs", &["secretRef", "name"]),
    ("cinder", &["secretRef", "name"]),
    ("csi", &["nodePublishSecretRef", "name"]),
    ("flexVolume", &["secretRef", "name"]),
    ("iscsi", &["secretRef", "name"]),
    ("rbd", &["secretRef", "name"]),
    ("scaleIO", &["secretRef", "name"]),
    ("storageos", &["secretRef", "name"]),
];

const CONTAINER_LISTS: [&str; 3] = ["initContainers", "containers", "ephemeralContainers"];

// === impl PodRef ===

impl PodRef {
    /// The plural resource of what is referenced (`serviceaccounts` for a token projection).
    pub fn resource(self) -> &'static str {
        match self {
            PodRef::ServiceAccount | PodRef::ServiceAccountToken => "serviceaccounts",
            PodRef::Secret => "secrets",
            PodRef::ConfigMap => "configmaps",
            PodRef::PersistentVolumeClaim => "persistentvolumeclaims",
            PodRef::ResourceClaim => "resourceclaims",
            PodRef::ClusterTrustBundle => "clustertrustbundles",
        }
    }
}

/// Calls `visit` with every reference `pod` makes, in spec order, duplicates included. The name
/// is `""` when the reference names no object (a token projection, a trust bundle chosen by
/// signer, a claim made from a template).
pub fn walk(pod: &Value, visit: &mut dyn FnMut(PodRef, &str)) {
    let spec = &pod["spec"];
    let account = spec["serviceAccountName"]
        .as_str()
        .or_else(|| spec["serviceAccount"].as_str())
        .unwrap_or("");
    if !account.is_empty() {
        visit(PodRef::ServiceAccount, account);
    }
    for s in each(&spec["imagePullSecrets"]) {
        visit(PodRef::Secret, text(&s["name"]));
    }
    let pod_name = text(&pod["metadata"]["name"]);
    for v in each(&spec["volumes"]) {
        volume(pod_name, v, visit);
    }
    for c in CONTAINER_LISTS.iter().flat_map(|k| each(&spec[*k])) {
        container(c, visit);
    }
    for claim in each(&spec["resourceClaims"]) {
        visit(PodRef::ResourceClaim, text(&claim["resourceClaimName"]));
    }
}

/// The objects in the pod's namespace that a node running it reads, as `(resource, name)`,
/// sorted and without duplicates: its service account (named, else
/// [`DEFAULT_SERVICE_ACCOUNT`]), secrets, configmaps and persistentvolumeclaims.
pub fn readable(pod: &Value) -> BTreeSet<(&'static str, String)> {
    let mut found = BTreeSet::new();
    let mut account = false;
    walk(pod, &mut |kind, name| {
        let readable = matches!(
            kind,
            PodRef::ServiceAccount
                | PodRef::Secret
                | PodRef::ConfigMap
                | PodRef::PersistentVolumeClaim
        );
        account |= kind == PodRef::ServiceAccount;
        if readable && !name.is_empty() {
            found.insert((kind.resource(), name.to_owned()));
        }
    });
    if !account {
        found.insert(("serviceaccounts", DEFAULT_SERVICE_ACCOUNT.to_owned()));
    }
    found
}

/// The references of one volume: the plugins that name a secret, configmaps, claims, and the
/// sources of a projected volume.
fn volume(pod_name: &str, v: &Value, visit: &mut dyn FnMut(PodRef, &str)) {
    for (plugin, path) in VOLUME_SECRETS {
        let source = &v[*plugin];
        if !source.is_null() {
            let name = path.iter().fold(source, |at, key| &at[*key]);
            visit(PodRef::Secret, text(name));
        }
    }
    if !v["configMap"].is_null() {
        visit(PodRef::ConfigMap, text(&v["configMap"]["name"]));
    }
    if !v["persistentVolumeClaim"].is_null() {
        visit(
            PodRef::PersistentVolumeClaim,
            text(&v["persistentVolumeClaim"]["claimName"]),
        );
    }
    if !v["ephemeral"].is_null() {
        // The ephemeral volume controller names the claim `<pod>-<volume>`.
        let claim = format!("{pod_name}-{}", text(&v["name"]));
        visit(PodRef::PersistentVolumeClaim, &claim);
    }
    for source in each(&v["projected"]["sources"]) {
        projection(source, visit);
    }
}

fn projection(source: &Value, visit: &mut dyn FnMut(PodRef, &str)) {
    if !source["secret"].is_null() {
        visit(PodRef::Secret, text(&source["secret"]["name"]));
    }
    if !source["configMap"].is_null() {
        visit(PodRef::ConfigMap, text(&source["configMap"]["name"]));
    }
    if !source["serviceAccountToken"].is_null() {
        visit(PodRef::ServiceAccountToken, "");
    }
    if !source["clusterTrustBundle"].is_null() {
        visit(
            PodRef::ClusterTrustBundle,
            text(&source["clusterTrustBundle"]["name"]),
        );
    }
}

fn container(c: &Value, visit: &mut dyn FnMut(PodRef, &str)) {
    for e in each(&c["env"]) {
        let from = &e["valueFrom"];
        if !from["configMapKeyRef"].is_null() {
            visit(PodRef::ConfigMap, text(&from["configMapKeyRef"]["name"]));
        }
        if !from["secretKeyRef"].is_null() {
            visit(PodRef::Secret, text(&from["secretKeyRef"]["name"]));
        }
    }
    for e in each(&c["envFrom"]) {
        if !e["configMapRef"].is_null() {
            visit(PodRef::ConfigMap, text(&e["configMapRef"]["name"]));
        }
        if !e["secretRef"].is_null() {
            visit(PodRef::Secret, text(&e["secretRef"]["name"]));
        }
    }
}

fn each(v: &Value) -> impl Iterator<Item = &Value> {
    v.as_array().into_iter().flatten()
}

fn text(v: &Value) -> &str {
    v.as_str().unwrap_or("")
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn all(pod: &Value) -> Vec<(PodRef, String)> {
        let mut found = Vec::new();
        walk(pod, &mut |kind, name| found.push((kind, name.to_owned())));
        found.sort();
        found
    }

    fn every_kind() -> Value {
        json!({"metadata": {"name": "web"}, "spec": {
            "serviceAccountName": "builder",
            "imagePullSecrets": [{"name": "pull"}],
            "volumes": [
                {"name": "a", "configMap": {"name": "vol-cm"}},
                {"name": "b", "secret": {"secretName": "vol-s"}},
                {"name": "c", "csi": {"driver": "d", "nodePublishSecretRef": {"name": "csi-s"}}},
                {"name": "d", "rbd": {"secretRef": {"name": "rbd-s"}}},
                {"name": "e", "persistentVolumeClaim": {"claimName": "data"}},
                {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}},
                {"name": "f", "projected": {"sources": [
                    {"configMap": {"name": "proj-cm"}}, {"secret": {"name": "proj-s"}},
                    {"serviceAccountToken": {"path": "t"}},
                    {"clusterTrustBundle": {"signerName": "x/y", "path": "b"}},
                ]}},
            ],
            "initContainers": [{"envFrom": [{"configMapRef": {"name": "init-cm"}}]}],
            "containers": [{
                "env": [{"valueFrom": {"configMapKeyRef": {"name": "env-cm"}}},
                        {"valueFrom": {"secretKeyRef": {"name": "env-s"}}}],
                "envFrom": [{"secretRef": {"name": "from-s"}}],
            }],
            "ephemeralContainers": [{"env": [{"valueFrom": {"secretKeyRef": {"name": "debug-s"}}}]}],
            "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "t"}],
        }})
    }

    #[test]
    fn every_kind_of_reference_is_found_once_per_place() {
        let names = |kind: PodRef| -> Vec<String> {
            all(&every_kind())
                .into_iter()
                .filter(|(k, _)| *k == kind)
                .map(|(_, n)| n)
                .collect()
        };
        assert_eq!(names(PodRef::ServiceAccount), ["builder"]);
        assert_eq!(
            names(PodRef::Secret),
            [
                "csi-s", "debug-s", "env-s", "from-s", "proj-s", "pull", "rbd-s", "vol-s"
            ]
        );
        assert_eq!(
            names(PodRef::ConfigMap),
            ["env-cm", "init-cm", "proj-cm", "vol-cm"]
        );
        assert_eq!(
            names(PodRef::PersistentVolumeClaim),
            ["data", "web-scratch"]
        );
        assert_eq!(names(PodRef::ServiceAccountToken), [""]);
        assert_eq!(names(PodRef::ClusterTrustBundle), [""]);
        assert_eq!(names(PodRef::ResourceClaim), [""]);
    }

    #[test]
    fn a_pod_without_references_has_none() {
        let plain = json!({"spec": {"containers": [{"name": "c", "image": "i", "env": [{"name": "A", "value": "1"}]}],
                                    "volumes": [{"name": "tmp", "emptyDir": {}}]}});
        assert_eq!(all(&plain), []);
    }

    #[test]
    fn readable_names_the_objects_a_node_may_read_and_the_default_account() {
        let found = readable(&every_kind());
        assert!(found.contains(&("serviceaccounts", "builder".into())));
        assert!(found.contains(&("secrets", "csi-s".into())));
        assert!(found.contains(&("persistentvolumeclaims", "web-scratch".into())));
        assert!(found.iter().all(|(r, _)| *r != "resourceclaims"));
        let plain = json!({"spec": {"containers": [{"name": "c"}]}});
        assert_eq!(
            readable(&plain).into_iter().collect::<Vec<_>>(),
            [("serviceaccounts", "default".to_owned())]
        );
    }
}
