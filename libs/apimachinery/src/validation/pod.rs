//! Pod validation (`ValidatePodSpec` and `ValidatePodUpdate`, the parts clients meet): the
//! containers and their names, images, ports and mounts, volumes, the pod's policies, and the
//! few spec fields an update may change.

use std::collections::HashSet;

use serde_json::{Map, Value, json};

use super::{DNS_LABEL_MSG, FieldError, is_dns_label, is_port_name, list_at, port_number, str_at};

const RESTART_POLICIES: [&str; 3] = ["Always", "OnFailure", "Never"];
const DNS_POLICIES: [&str; 4] = ["ClusterFirstWithHostNet", "ClusterFirst", "Default", "None"];
const PULL_POLICIES: [&str; 3] = ["Always", "IfNotPresent", "Never"];
const PROTOCOLS: [&str; 3] = ["TCP", "UDP", "SCTP"];

/// The message kube-apiserver gives when an update changes a field it may not.
const UPDATE_FORBIDDEN: &str = "pod updates may not change fields other than \
    `spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,\
    `spec.tolerations` (only additions to existing tolerations),\
    `spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)";

/// Validates a pod spec found at `path` (`spec`, or `spec.template.spec` in a workload).
pub fn spec(spec: &Value, path: &str) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let volumes = volumes(&mut errs, spec, path);
    let containers = list_at(spec, "containers");
    if containers.is_empty() {
        errs.push(FieldError::required(format!("{path}.containers"), ""));
    }
    let mut names = HashSet::new();
    for key in ["initContainers", "containers"] {
        for (i, c) in list_at(spec, key).iter().enumerate() {
            container(
                &mut errs,
                c,
                &format!("{path}.{key}[{i}]"),
                &volumes,
                &mut names,
            );
        }
    }
    one_of(&mut errs, spec, path, "restartPolicy", &RESTART_POLICIES);
    one_of(&mut errs, spec, path, "dnsPolicy", &DNS_POLICIES);
    for key in ["terminationGracePeriodSeconds", "activeDeadlineSeconds"] {
        if let Some(v) = spec.get(key).filter(|v| !v.is_null()) {
            let ok = v.as_i64().is_some_and(|n| key.starts_with('t') || n > 0);
            if !ok {
                let why = if key.starts_with('t') {
                    "must be an integer"
                } else {
                    "must be between 1 and 2147483647, inclusive"
                };
                errs.push(FieldError::invalid(format!("{path}.{key}"), v, why));
            }
        }
    }
    errs
}

/// Validates a Pod.
pub fn pod(obj: &Value) -> Vec<FieldError> {
    spec(obj.get("spec").unwrap_or(&Value::Null), "spec")
}

/// What an update of `old` to `new` may not change: every spec field but the images, the
/// active deadline, added tolerations, and a grace period that was negative (or of a pod
/// being deleted).
pub fn update(new: &Value, old: &Value) -> Vec<FieldError> {
    let (Some(new_spec), Some(old_spec)) = (new.get("spec"), old.get("spec")) else {
        return Vec::new();
    };
    let mut errs = spec(new_spec, "spec");
    let mut munged = new_spec.clone();
    let Some(m) = munged.as_object_mut() else {
        return errs;
    };
    for key in ["containers", "initContainers"] {
        copy_images(m, old_spec, key);
    }
    copy(m, old_spec, "activeDeadlineSeconds");
    let old_grace = old_spec
        .get("terminationGracePeriodSeconds")
        .and_then(Value::as_i64);
    let deleting = old
        .pointer("/metadata/deletionTimestamp")
        .is_some_and(|v| !v.is_null());
    if old_grace.is_some_and(|g| g < 0) || deleting {
        copy(m, old_spec, "terminationGracePeriodSeconds");
    }
    let old_tolerations = list_at(old_spec, "tolerations");
    let new_tolerations = list_at(new_spec, "tolerations");
    if old_tolerations.iter().all(|t| new_tolerations.contains(t)) {
        copy(m, old_spec, "tolerations");
    }
    if munged != *old_spec {
        let changed = changed_fields(&munged, old_spec);
        let why = format!("{UPDATE_FORBIDDEN} (changed: {})", changed.join(", "));
        errs.push(FieldError::forbidden("spec", &why));
    }
    errs
}

fn container(
    errs: &mut Vec<FieldError>,
    c: &Value,
    path: &str,
    volumes: &HashSet<&str>,
    names: &mut HashSet<String>,
) {
    let name = str_at(c, "name");
    if name.is_empty() {
        errs.push(FieldError::required(format!("{path}.name"), ""));
    } else if !is_dns_label(name) {
        errs.push(FieldError::invalid(
            format!("{path}.name"),
            &json!(name),
            DNS_LABEL_MSG,
        ));
    } else if !names.insert(name.to_owned()) {
        errs.push(FieldError::duplicate(format!("{path}.name"), &json!(name)));
    }
    if str_at(c, "image").trim().is_empty() {
        errs.push(FieldError::required(format!("{path}.image"), ""));
    }
    one_of(errs, c, path, "imagePullPolicy", &PULL_POLICIES);
    let mut port_names = HashSet::new();
    for (i, p) in list_at(c, "ports").iter().enumerate() {
        let at = format!("{path}.ports[{i}]");
        port_number(
            errs,
            &format!("{at}.containerPort"),
            p.get("containerPort"),
            true,
        );
        if p.get("hostPort").and_then(Value::as_i64) != Some(0) {
            port_number(errs, &format!("{at}.hostPort"), p.get("hostPort"), false);
        }
        one_of(errs, p, &at, "protocol", &PROTOCOLS);
        let port_name = str_at(p, "name");
        if !port_name.is_empty() {
            if !is_port_name(port_name) {
                let why = "must be no more than 15 characters, contain only lowercase \
                    alphanumeric characters or '-', contain at least one letter, and not \
                    start or end with '-' or contain '--'";
                errs.push(FieldError::invalid(
                    format!("{at}.name"),
                    &json!(port_name),
                    why,
                ));
            } else if !port_names.insert(port_name) {
                errs.push(FieldError::duplicate(
                    format!("{at}.name"),
                    &json!(port_name),
                ));
            }
        }
    }
    for (i, m) in list_at(c, "volumeMounts").iter().enumerate() {
        let at = format!("{path}.volumeMounts[{i}]");
        let vol = str_at(m, "name");
        if vol.is_empty() {
            errs.push(FieldError::required(format!("{at}.name"), ""));
        } else if !volumes.contains(vol) {
            errs.push(FieldError::not_found(format!("{at}.name"), &json!(vol)));
        }
        if str_at(m, "mountPath").is_empty() {
            errs.push(FieldError::required(format!("{at}.mountPath"), ""));
        }
    }
}

/// Checks the volumes' names; answers them for the mounts.
fn volumes<'a>(errs: &mut Vec<FieldError>, spec: &'a Value, path: &str) -> HashSet<&'a str> {
    let mut names = HashSet::new();
    for (i, v) in list_at(spec, "volumes").iter().enumerate() {
        let at = format!("{path}.volumes[{i}].name");
        let name = str_at(v, "name");
        if name.is_empty() {
            errs.push(FieldError::required(at, ""));
        } else if !is_dns_label(name) {
            errs.push(FieldError::invalid(at, &json!(name), DNS_LABEL_MSG));
        } else if !names.insert(name) {
            errs.push(FieldError::duplicate(at, &json!(name)));
        }
    }
    names
}

/// `obj[key]`, when set, must be one of `allowed`.
pub(crate) fn one_of(
    errs: &mut Vec<FieldError>,
    obj: &Value,
    path: &str,
    key: &str,
    allowed: &[&str],
) {
    match obj.get(key) {
        None | Some(Value::Null) => {}
        Some(v) if v.as_str().is_some_and(|s| allowed.contains(&s)) => {}
        Some(v) => errs.push(FieldError::unsupported(format!("{path}.{key}"), v, allowed)),
    }
}

fn copy_images(m: &mut Map<String, Value>, old_spec: &Value, key: &str) {
    let old = list_at(old_spec, key);
    if let Some(new) = m.get_mut(key).and_then(Value::as_array_mut)
        && new.len() == old.len()
    {
        for (n, o) in new.iter_mut().zip(old) {
            if let (Some(n), Some(image)) = (n.as_object_mut(), o.get("image")) {
                n.insert("image".into(), image.clone());
            }
        }
    }
}

fn copy(m: &mut Map<String, Value>, old_spec: &Value, key: &str) {
    match old_spec.get(key) {
        Some(v) => m.insert(key.to_owned(), v.clone()),
        None => m.remove(key),
    };
}

/// The top-level spec fields that differ.
fn changed_fields(new: &Value, old: &Value) -> Vec<String> {
    let empty = Map::new();
    let n = new.as_object().unwrap_or(&empty);
    let o = old.as_object().unwrap_or(&empty);
    let mut keys: Vec<&String> = n.keys().chain(o.keys()).collect();
    keys.sort();
    keys.dedup();
    keys.into_iter()
        .filter(|k| n.get(*k) != o.get(*k))
        .map(|k| format!("spec.{k}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(errs: &[FieldError]) -> Vec<(&str, &str)> {
        errs.iter()
            .map(|e| (e.field.as_str(), e.why.as_str()))
            .collect()
    }

    #[test]
    fn a_pod_needs_containers_with_names_and_images() {
        let errs = pod(&json!({"spec": {}}));
        assert_eq!(fields(&errs), [("spec.containers", "Required value")]);
        let errs = pod(&json!({"spec": {"containers": [{"name": "a"}, {"image": "x"}]}}));
        assert_eq!(
            fields(&errs),
            [
                ("spec.containers[0].image", "Required value"),
                ("spec.containers[1].name", "Required value")
            ]
        );
    }

    #[test]
    fn container_names_ports_and_mounts_are_checked() {
        let p = json!({"spec": {"volumes": [{"name": "v", "emptyDir": {}}], "containers": [
            {"name": "a", "image": "x", "ports": [{"containerPort": 0}, {"containerPort": 80, "protocol": "HTTP"}]},
            {"name": "a", "image": "x", "volumeMounts": [{"name": "w", "mountPath": "/w"}, {"name": "v"}]},
            {"name": "Bad_Name", "image": "x"},
        ], "restartPolicy": "Sometimes"}});
        let errs = pod(&p);
        let got: Vec<&str> = errs.iter().map(|e| e.field.as_str()).collect();
        assert_eq!(
            got,
            [
                "spec.containers[0].ports[0].containerPort",
                "spec.containers[0].ports[1].protocol",
                "spec.containers[1].name",
                "spec.containers[1].volumeMounts[0].name",
                "spec.containers[1].volumeMounts[1].mountPath",
                "spec.containers[2].name",
                "spec.restartPolicy",
            ]
        );
        assert!(errs[2].why.starts_with("Duplicate value"));
        assert_eq!(errs[3].why, "Not found: \"w\"");
    }

    #[test]
    fn updates_may_change_images_deadlines_and_add_tolerations() {
        let old = json!({"spec": {"containers": [{"name": "a", "image": "x:1"}],
            "tolerations": [{"key": "k", "operator": "Exists"}]}});
        let mut new = old.clone();
        new["spec"]["containers"][0]["image"] = json!("x:2");
        new["spec"]["activeDeadlineSeconds"] = json!(30);
        new["spec"]["tolerations"]
            .as_array_mut()
            .unwrap()
            .push(json!({"key": "j", "operator": "Exists"}));
        assert_eq!(update(&new, &old), []);
    }

    #[test]
    fn updates_of_other_spec_fields_are_forbidden() {
        let old = json!({"spec": {"containers": [{"name": "a", "image": "x:1"}],
            "tolerations": [{"key": "k", "operator": "Exists"}]}});
        let mut new = old.clone();
        new["spec"]["restartPolicy"] = json!("Never");
        new["spec"]["tolerations"] = json!([]);
        let errs = update(&new, &old);
        assert_eq!(errs.len(), 1);
        assert_eq!(errs[0].field, "spec");
        assert!(
            errs[0]
                .why
                .starts_with("Forbidden: pod updates may not change fields")
        );
        assert!(
            errs[0]
                .why
                .ends_with("(changed: spec.restartPolicy, spec.tolerations)")
        );
    }
}
