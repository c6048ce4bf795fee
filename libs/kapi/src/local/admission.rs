//! The admission plugins kube-apiserver runs on a new pod, in its order, each reading what it
//! needs from the store: ServiceAccount (the `default` account, refusing a missing one, the
//! `kube-api-access-*` projected token volume mounted in every container),
//! DefaultTolerationSeconds (300 s for `not-ready` and `unreachable` NoExecute taints) and
//! Priority (a priority class resolved to `spec.priority`); LimitRanger and ResourceQuota
//! follow, in `limits`. NamespaceLifecycle is the create's own check
//! (`create::check_namespace_open`). Mirror pods get no service account.

use apimachinery::{ApiError, ResourceInfo};
use objstore::ObjKey;
use serde_json::{Map, Value, json};

use super::meta;
use super::vocab::{Core, Target};

/// Where the token, CA and namespace are mounted in every container.
pub(super) const TOKEN_MOUNT: &str = "/var/run/secrets/kubernetes.io/serviceaccount";
/// The annotation a kubelet's mirror pod carries.
const MIRROR_ANNOTATION: &str = "kubernetes.io/config.mirror";
/// The taints DefaultTolerationSeconds tolerates for a while.
const NODE_PROBLEM_TAINTS: [&str; 2] = [
    "node.kubernetes.io/not-ready",
    "node.kubernetes.io/unreachable",
];
const DEFAULT_TOLERATION_SECONDS: i64 = 300;
/// The token lifetime kube-apiserver asks for (an hour and seven seconds, so kubelets can
/// tell the projected token from a legacy one).
const TOKEN_SECONDS: i64 = 3607;
/// The priority classes every cluster has.
const BUILTIN_CLASSES: [(&str, i64); 2] = [
    ("system-node-critical", 2_000_001_000),
    ("system-cluster-critical", 2_000_000_000),
];
/// Where priority classes are stored.
const PRIORITY_CLASSES: (&str, &str) = ("scheduling.k8s.io", "priorityclasses");
/// kube's alphabet for random suffixes.
const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

/// Runs the pod admission plugins on `pod`.
pub(super) async fn admit_pod(
    core: &Core,
    target: &Target,
    pod: &mut Value,
) -> Result<(), ApiError> {
    if !mirror(pod) {
        service_account(core, target, pod).await?;
    }
    default_tolerations(pod);
    priority(core, target, pod).await
}

/// True for a kubelet's mirror pod.
pub(super) fn mirror(pod: &Value) -> bool {
    pod.pointer("/metadata/annotations")
        .and_then(|a| a.get(MIRROR_ANNOTATION))
        .is_some()
}

async fn service_account(core: &Core, target: &Target, pod: &mut Value) -> Result<(), ApiError> {
    let spec = spec_mut(pod);
    let name = match spec.get("serviceAccountName").and_then(Value::as_str) {
        Some(n) if !n.is_empty() => n.to_owned(),
        _ => match spec.get("serviceAccount").and_then(Value::as_str) {
            Some(n) if !n.is_empty() => n.to_owned(),
            _ => "default".to_owned(),
        },
    };
    spec.insert("serviceAccountName".into(), json!(name));
    spec.insert("serviceAccount".into(), json!(name));
    let key = ObjKey::new("serviceaccounts", target.namespace.clone(), name.clone());
    let Some(account) = core.get(&key).await? else {
        let why = format!(
            "error looking up service account {}/{name}: serviceaccount \"{name}\" not found",
            target.namespace
        );
        return Err(forbidden(&target.info, pod, &why));
    };
    let automount = spec_mut(pod)
        .get("automountServiceAccountToken")
        .and_then(Value::as_bool)
        .or_else(|| {
            account
                .get("automountServiceAccountToken")
                .and_then(Value::as_bool)
        })
        .unwrap_or(true);
    if automount {
        mount_token(spec_mut(pod), &random_suffix());
    }
    Ok(())
}

/// Adds the `kube-api-access-<suffix>` volume and mounts it read-only in every container
/// and init container that has nothing at [`TOKEN_MOUNT`] yet; nothing when one has.
pub(super) fn mount_token(spec: &mut Map<String, Value>, suffix: &str) {
    let mounted = |c: &Value| {
        c.get("volumeMounts")
            .and_then(Value::as_array)
            .is_some_and(|m| {
                m.iter()
                    .any(|m| m.get("mountPath") == Some(&json!(TOKEN_MOUNT)))
            })
    };
    let containers = ["containers", "initContainers"];
    let any_mounted = containers.iter().any(|k| {
        spec.get(*k)
            .and_then(Value::as_array)
            .is_some_and(|cs| cs.iter().any(mounted))
    });
    if any_mounted {
        return;
    }
    let name = format!("kube-api-access-{suffix}");
    let volume = json!({"name": name, "projected": {"defaultMode": 420, "sources": [
        {"serviceAccountToken": {"expirationSeconds": TOKEN_SECONDS, "path": "token"}},
        {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
        {"downwardAPI": {"items": [{"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"},
                                    "path": "namespace"}]}},
    ]}});
    push(spec, "volumes", volume);
    let mount = json!({"name": name, "mountPath": TOKEN_MOUNT, "readOnly": true});
    for key in containers {
        let list = spec.get_mut(key).and_then(Value::as_array_mut);
        for c in list.into_iter().flatten().filter_map(Value::as_object_mut) {
            push(c, "volumeMounts", mount.clone());
        }
    }
}

/// Tolerates `not-ready` and `unreachable` NoExecute taints for 300 s, unless the pod says
/// how it tolerates them.
pub(super) fn default_tolerations(pod: &mut Value) {
    let spec = spec_mut(pod);
    for taint in NODE_PROBLEM_TAINTS {
        let tolerated = spec
            .get("tolerations")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .any(|t| {
                let key = t.get("key").and_then(Value::as_str).unwrap_or("");
                let effect = t.get("effect").and_then(Value::as_str).unwrap_or("");
                (key == taint || key.is_empty()) && (effect == "NoExecute" || effect.is_empty())
            });
        if !tolerated {
            let toleration = json!({"key": taint, "operator": "Exists", "effect": "NoExecute",
                                    "tolerationSeconds": DEFAULT_TOLERATION_SECONDS});
            push(spec, "tolerations", toleration);
        }
    }
}

/// Resolves `priorityClassName` (or the global default class) to `spec.priority` and
/// `spec.preemptionPolicy`; 403 for a class that does not exist or a priority that
/// disagrees with it.
async fn priority(core: &Core, target: &Target, pod: &mut Value) -> Result<(), ApiError> {
    let spec = spec_mut(pod);
    let class_name = spec
        .get("priorityClassName")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned();
    let class = if class_name.is_empty() {
        global_default(core).await?
    } else if let Some((_, value)) = BUILTIN_CLASSES.iter().find(|(n, _)| *n == class_name) {
        Some(json!({"metadata": {"name": class_name}, "value": value}))
    } else {
        let key = ObjKey::new(
            store_resource(core, PRIORITY_CLASSES),
            "",
            class_name.clone(),
        );
        match core.get(&key).await? {
            Some(c) => Some(c),
            None => {
                let why = format!("no PriorityClass with name {class_name} was found");
                return Err(forbidden(&target.info, pod, &why));
            }
        }
    };
    let value = class
        .as_ref()
        .and_then(|c| c.get("value"))
        .and_then(Value::as_i64)
        .unwrap_or(0);
    let preemption = class
        .as_ref()
        .and_then(|c| c.get("preemptionPolicy"))
        .cloned()
        .unwrap_or_else(|| json!("PreemptLowerPriority"));
    let spec = spec_mut(pod);
    if let Some(given) = spec.get("priority").and_then(Value::as_i64)
        && given != value
    {
        let why = format!(
            "the integer value of priority ({given}) must not be provided in pod spec; priority admission controller computed {value} from the given PriorityClass name"
        );
        return Err(forbidden(&target.info, pod, &why));
    }
    spec.insert("priority".into(), json!(value));
    spec.insert("preemptionPolicy".into(), preemption);
    if let Some(c) = class.filter(|_| class_name.is_empty()) {
        spec.insert("priorityClassName".into(), json!(meta::name(&c)));
    }
    Ok(())
}

/// The priority class marked `globalDefault`, if any.
async fn global_default(core: &Core) -> Result<Option<Value>, ApiError> {
    for stored in core
        .list(&store_resource(core, PRIORITY_CLASSES), None)
        .await?
    {
        let class: Value = serde_json::from_slice(&stored.value)
            .map_err(|e| ApiError::internal(format!("decoding a priority class: {e}")))?;
        if class.get("globalDefault") == Some(&json!(true)) {
            return Ok(Some(class));
        }
    }
    Ok(None)
}

/// The store resource of `(group, plural)`, as the registry names it.
fn store_resource(core: &Core, (group, plural): (&str, &str)) -> String {
    core.registry
        .get(group, "v1", plural)
        .map_or_else(|| format!("{plural}.{group}"), |info| info.store_resource())
}

fn spec_mut(pod: &mut Value) -> &mut Map<String, Value> {
    let spec = meta::object_mut(pod)
        .entry("spec")
        .or_insert_with(|| json!({}));
    meta::object_mut(spec)
}

fn push(map: &mut Map<String, Value>, key: &str, item: Value) {
    let slot = map.entry(key).or_insert_with(|| json!([]));
    if !slot.is_array() {
        *slot = json!([]);
    }
    if let Some(list) = slot.as_array_mut() {
        list.push(item);
    }
}

/// `pods "name" is forbidden: why` (403), as an admission plugin refuses.
fn forbidden(info: &ResourceInfo, pod: &Value, why: &str) -> ApiError {
    ApiError::forbidden(&info.group, &info.plural, meta::name(pod), why)
}

/// Five random characters of kube's alphabet.
fn random_suffix() -> String {
    let random = uuid::Uuid::new_v4();
    // Bytes 10..16 of a v4 uuid are all random.
    random.as_bytes()[10..15]
        .iter()
        .map(|b| char::from(ALPHABET[usize::from(*b) % ALPHABET.len()]))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_token_volume_is_mounted_read_only_in_every_container() {
        let mut spec = json!({"containers": [{"name": "a"}, {"name": "b"}], "initContainers": [{"name": "i"}]});
        let map = spec.as_object_mut().unwrap();
        mount_token(map, "abcde");
        let volume = &spec["volumes"][0];
        assert_eq!(volume["name"], "kube-api-access-abcde");
        let sources = &volume["projected"]["sources"];
        assert_eq!(sources[0]["serviceAccountToken"]["expirationSeconds"], 3607);
        assert_eq!(
            sources[1]["configMap"]["items"][0],
            json!({"key": "ca.crt", "path": "ca.crt"})
        );
        assert_eq!(sources[2]["downwardAPI"]["items"][0]["path"], "namespace");
        for c in ["containers", "initContainers"] {
            for container in spec[c].as_array().unwrap() {
                assert_eq!(
                    container["volumeMounts"][0],
                    json!({"name": "kube-api-access-abcde", "mountPath": TOKEN_MOUNT, "readOnly": true})
                );
            }
        }
    }

    #[test]
    fn a_pod_mounting_the_token_path_itself_gets_no_volume() {
        let mut spec = json!({"containers": [{"name": "a", "volumeMounts": [{"name": "mine", "mountPath": TOKEN_MOUNT}]}]});
        mount_token(spec.as_object_mut().unwrap(), "abcde");
        assert!(spec.get("volumes").is_none());
    }

    #[test]
    fn default_tolerations_are_added_unless_the_pod_tolerates_the_taints() {
        let mut pod = json!({"spec": {}});
        default_tolerations(&mut pod);
        let t = pod["spec"]["tolerations"].as_array().unwrap();
        assert_eq!(t.len(), 2);
        assert_eq!(
            t[0],
            json!({"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300})
        );
        default_tolerations(&mut pod);
        assert_eq!(pod["spec"]["tolerations"].as_array().unwrap().len(), 2);
        let mut all = json!({"spec": {"tolerations": [{"operator": "Exists"}]}});
        default_tolerations(&mut all);
        assert_eq!(all["spec"]["tolerations"].as_array().unwrap().len(), 1);
    }

    #[test]
    fn mirror_pods_are_recognised_by_their_annotation() {
        assert!(mirror(
            &json!({"metadata": {"annotations": {MIRROR_ANNOTATION: "x"}}})
        ));
        assert!(!mirror(&json!({"metadata": {}})));
        assert_eq!(random_suffix().len(), 5);
    }
}
