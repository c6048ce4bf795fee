//! NodeRestriction's rules for what a node may change of its own Node's metadata and spec: it
//! may set only the kubelet's well-known labels (and those under `kubelet.kubernetes.io/` and
//! `node.kubernetes.io/`) among the `kubernetes.io` and `k8s.io` namespaces, never a
//! `node-restriction.kubernetes.io/` label, and it may not change its taints once registered.
//! Labels outside those namespaces (`site=shop-1`) are the node's to set.

use std::collections::BTreeSet;

use serde_json::Value;

/// The labels a kubelet sets on its own Node (`kubeletapis.KubeletLabels`).
const KUBELET_LABELS: &[&str] = &[
    "kubernetes.io/hostname",
    "kubernetes.io/arch",
    "kubernetes.io/os",
    "beta.kubernetes.io/arch",
    "beta.kubernetes.io/os",
    "beta.kubernetes.io/instance-type",
    "node.kubernetes.io/instance-type",
    "failure-domain.beta.kubernetes.io/zone",
    "failure-domain.beta.kubernetes.io/region",
    "topology.kubernetes.io/zone",
    "topology.kubernetes.io/region",
];

/// Label namespaces (and their subdomains) a kubelet may use freely.
const KUBELET_NAMESPACES: &[&str] = &["kubelet.kubernetes.io", "node.kubernetes.io"];

/// Why NodeRestriction refuses node `node`'s write that makes its Node `new` (`old`: the Node
/// as stored, `None` for a create), in kube-apiserver's words, if it does.
pub fn node_change_refusal(node: &str, old: Option<&Value>, new: &Value) -> Option<String> {
    let labels = |obj: &Value| -> Vec<(String, String)> {
        let map = obj["metadata"]["labels"].as_object();
        let pairs = map.into_iter().flatten();
        pairs
            .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_owned()))
            .collect()
    };
    let new_labels = labels(new);
    let Some(old) = old else {
        let refused = forbidden(new_labels.iter().map(|(k, _)| k.as_str()));
        return (!refused.is_empty()).then(|| {
            format!(
                "node {node:?} is not allowed to set the following labels: {}",
                join(&refused)
            )
        });
    };
    let old_labels = labels(old);
    let changed: BTreeSet<&str> = symmetric_keys(&old_labels, &new_labels);
    let refused = forbidden(changed.into_iter());
    if !refused.is_empty() {
        return Some(format!(
            "node {node:?} is not allowed to modify labels: {}",
            join(&refused)
        ));
    }
    let taints = |obj: &Value| {
        obj["spec"]["taints"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    };
    (taints(old) != taints(new)).then(|| format!("node {node:?} is not allowed to modify taints"))
}

/// Whether a node may set or change label `key` on its own Node.
pub fn node_may_set_label(key: &str) -> bool {
    let Some((namespace, _)) = key.split_once('/') else {
        return true;
    };
    let within = |ns: &str, domain: &str| ns == domain || ns.ends_with(&format!(".{domain}"));
    if within(namespace, "node-restriction.kubernetes.io") {
        return false;
    }
    let kubernetes = within(namespace, "kubernetes.io") || within(namespace, "k8s.io");
    !kubernetes
        || KUBELET_LABELS.contains(&key)
        || KUBELET_NAMESPACES.iter().any(|d| within(namespace, d))
}

/// The keys added, removed or changed between `old` and `new`.
fn symmetric_keys<'a>(
    old: &'a [(String, String)],
    new: &'a [(String, String)],
) -> BTreeSet<&'a str> {
    let mut changed = BTreeSet::new();
    for (k, v) in new {
        if !old.iter().any(|(ok, ov)| ok == k && ov == v) {
            changed.insert(k.as_str());
        }
    }
    for (k, _) in old {
        if !new.iter().any(|(nk, _)| nk == k) {
            changed.insert(k.as_str());
        }
    }
    changed
}

fn forbidden<'a>(keys: impl Iterator<Item = &'a str>) -> Vec<&'a str> {
    let mut refused: Vec<&str> = keys.filter(|k| !node_may_set_label(k)).collect();
    refused.sort_unstable();
    refused
}

fn join(keys: &[&str]) -> String {
    keys.join(", ")
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn node(labels: Value, taints: Value) -> Value {
        json!({"metadata": {"name": "n1", "labels": labels}, "spec": {"taints": taints}})
    }

    #[test]
    fn a_node_sets_kubelet_labels_and_its_own_but_not_roles_or_restricted_ones() {
        for ok in [
            "site",
            "example.com/rack",
            "kubernetes.io/os",
            "topology.kubernetes.io/zone",
            "node.kubernetes.io/exclude-from-external-load-balancers",
            "foo.kubelet.kubernetes.io/x",
        ] {
            assert!(node_may_set_label(ok), "{ok}");
        }
        for refused in [
            "node-role.kubernetes.io/control-plane",
            "node-restriction.kubernetes.io/pci",
            "a.node-restriction.kubernetes.io/pci",
            "kubernetes.io/role",
            "x.k8s.io/y",
        ] {
            assert!(!node_may_set_label(refused), "{refused}");
        }
    }

    #[test]
    fn a_create_is_refused_naming_every_forbidden_label() {
        let new = node(
            json!({"site": "a", "node-role.kubernetes.io/control-plane": "", "node-restriction.kubernetes.io/pci": "1"}),
            json!([]),
        );
        assert_eq!(
            node_change_refusal("n1", None, &new).as_deref(),
            Some(
                "node \"n1\" is not allowed to set the following labels: node-restriction.kubernetes.io/pci, node-role.kubernetes.io/control-plane"
            )
        );
        let plain = node(
            json!({"site": "a", "kubernetes.io/os": "linux"}),
            json!([{"key": "k", "effect": "NoSchedule"}]),
        );
        assert_eq!(
            node_change_refusal("n1", None, &plain),
            None,
            "taints may be set at registration"
        );
    }

    #[test]
    fn an_update_may_keep_what_an_admin_set_but_not_change_it() {
        let taint = json!([{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]);
        let old = node(
            json!({"node-role.kubernetes.io/edge": "", "site": "a"}),
            taint.clone(),
        );
        let kept = node(
            json!({"node-role.kubernetes.io/edge": "", "site": "b"}),
            taint.clone(),
        );
        assert_eq!(node_change_refusal("n1", Some(&old), &kept), None);
        let unlabelled = node(json!({"site": "a"}), taint.clone());
        assert_eq!(
            node_change_refusal("n1", Some(&old), &unlabelled).as_deref(),
            Some("node \"n1\" is not allowed to modify labels: node-role.kubernetes.io/edge")
        );
        let untainted = node(
            json!({"node-role.kubernetes.io/edge": "", "site": "a"}),
            json!([]),
        );
        assert_eq!(
            node_change_refusal("n1", Some(&old), &untainted).as_deref(),
            Some("node \"n1\" is not allowed to modify taints")
        );
    }
}
