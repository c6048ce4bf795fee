//! A container's environment, as the kubelet builds it: service variables first (the
//! `kubernetes` service's `KUBERNETES_SERVICE_*` always, the pod namespace's services unless
//! `enableServiceLinks: false`), then `envFrom`, then `env` with `$(VAR)` references expanded.
//! Pure: the worker reads the referenced objects from the edge store into [`Refs`] first.

use std::collections::{BTreeMap, HashMap};

use k8s_openapi::api::core::v1::{Container, Pod};
use serde_json::Value;

use crate::error::EdgedError;

/// The objects a pod's env and volumes reference, read from the edge store.
#[derive(Clone, Debug, Default)]
pub struct Refs {
    /// ConfigMaps of the pod's namespace, by name.
    pub configmaps: HashMap<String, Value>,
    /// Secrets of the pod's namespace, by name.
    pub secrets: HashMap<String, Value>,
    /// Services of the pod's namespace.
    pub services: Vec<Value>,
    /// `default/kubernetes`, if the node holds it.
    pub kubernetes: Option<Value>,
    /// Service-account tokens for the pod's projected volumes.
    pub tokens: HashMap<crate::tokens::TokenKey, Vec<u8>>,
}

/// What a pod knows of where it runs (for `fieldRef`s).
#[derive(Clone, Debug, Default)]
pub struct Placement {
    /// The pod's IP (empty before its sandbox has one).
    pub pod_ip: String,
    /// The node's IP.
    pub host_ip: String,
}

/// A configmap's or secret's data by key, decoded (base64 in a secret's `data` and in `binaryData`).
pub fn data(obj: &Value, secret: bool) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    for (field, b64) in [("data", secret), ("binaryData", true)] {
        let Some(map) = obj[field].as_object() else {
            continue;
        };
        for (k, v) in map {
            let s = v.as_str().unwrap_or_default();
            let bytes = if b64 {
                base64_decode(s).unwrap_or_default()
            } else {
                s.as_bytes().to_vec()
            };
            out.insert(k.clone(), bytes);
        }
    }
    out
}

/// The container's environment, in order.
pub fn container_env(
    pod: &Pod,
    c: &Container,
    refs: &Refs,
    at: &Placement,
) -> Result<Vec<(String, String)>, EdgedError> {
    let mut env: Vec<(String, String)> = Vec::new();
    let set = |env: &mut Vec<(String, String)>, k: String, v: String| match env
        .iter_mut()
        .find(|(key, _)| *key == k)
    {
        Some(slot) => slot.1 = v,
        None => env.push((k, v)),
    };
    let links = pod
        .spec
        .as_ref()
        .and_then(|s| s.enable_service_links)
        .unwrap_or(true);
    let services = refs
        .kubernetes
        .iter()
        .chain(refs.services.iter().filter(|_| links));
    for svc in services {
        for (k, v) in service_env(svc) {
            set(&mut env, k, v);
        }
    }
    for from in c.env_from.iter().flatten() {
        let prefix = from.prefix.clone().unwrap_or_default();
        let (name, secret, optional) = match (&from.config_map_ref, &from.secret_ref) {
            (Some(r), _) => (r.name.clone(), false, r.optional.unwrap_or(false)),
            (_, Some(r)) => (r.name.clone(), true, r.optional.unwrap_or(false)),
            _ => continue,
        };
        match lookup(refs, &name, secret) {
            Some(obj) => {
                for (k, v) in data(obj, secret) {
                    set(
                        &mut env,
                        format!("{prefix}{k}"),
                        String::from_utf8_lossy(&v).into_owned(),
                    );
                }
            }
            None if optional => {}
            None => return Err(missing(secret, &name)),
        }
    }
    for var in c.env.iter().flatten() {
        let value = match (&var.value, &var.value_from) {
            (_, Some(from)) => match value_from(pod, c, from, refs, at)? {
                Some(v) => v,
                None => continue,
            },
            (Some(v), None) => expand(v, &env),
            (None, None) => String::new(),
        };
        set(&mut env, var.name.clone(), value);
    }
    Ok(env)
}

fn lookup<'a>(refs: &'a Refs, name: &str, secret: bool) -> Option<&'a Value> {
    if secret {
        refs.secrets.get(name)
    } else {
        refs.configmaps.get(name)
    }
}

fn missing(secret: bool, name: &str) -> EdgedError {
    let kind = if secret { "secret" } else { "configmap" };
    EdgedError::pod(
        "CreateContainerConfigError",
        format!("{kind} \"{name}\" not found"),
    )
}

fn value_from(
    pod: &Pod,
    c: &Container,
    from: &k8s_openapi::api::core::v1::EnvVarSource,
    refs: &Refs,
    at: &Placement,
) -> Result<Option<String>, EdgedError> {
    let key_ref = match (&from.config_map_key_ref, &from.secret_key_ref) {
        (Some(r), _) => Some((
            r.name.clone(),
            r.key.clone(),
            false,
            r.optional.unwrap_or(false),
        )),
        (_, Some(r)) => Some((
            r.name.clone(),
            r.key.clone(),
            true,
            r.optional.unwrap_or(false),
        )),
        _ => None,
    };
    if let Some((name, key, secret, optional)) = key_ref {
        let Some(obj) = lookup(refs, &name, secret) else {
            return if optional {
                Ok(None)
            } else {
                Err(missing(secret, &name))
            };
        };
        return match data(obj, secret).remove(&key) {
            Some(v) => Ok(Some(String::from_utf8_lossy(&v).into_owned())),
            None if optional => Ok(None),
            None => Err(EdgedError::pod(
                "CreateContainerConfigError",
                format!(
                    "couldn't find key {key} in {} {}/{name}",
                    if secret { "Secret" } else { "ConfigMap" },
                    pod.metadata.namespace.as_deref().unwrap_or("default")
                ),
            )),
        };
    }
    if let Some(f) = &from.field_ref {
        return Ok(Some(field_value(pod, &f.field_path, at)));
    }
    if let Some(r) = &from.resource_field_ref {
        return Ok(Some(resource_value(
            c,
            &r.resource,
            r.divisor.as_ref().map(|d| d.0.as_str()),
        )));
    }
    Ok(None)
}

/// A downward-API field of the pod (`metadata.name`, `status.podIP`, `metadata.labels['x']`).
pub fn field_value(pod: &Pod, path: &str, at: &Placement) -> String {
    let m = &pod.metadata;
    let spec = pod.spec.clone().unwrap_or_default();
    let map_entry = |map: &Option<BTreeMap<String, String>>, key: &str| {
        map.as_ref()
            .and_then(|m| m.get(key))
            .cloned()
            .unwrap_or_default()
    };
    let all = |map: &Option<BTreeMap<String, String>>| {
        map.iter()
            .flatten()
            .map(|(k, v)| format!("{k}=\"{v}\""))
            .collect::<Vec<_>>()
            .join("\n")
    };
    if let Some(key) = bracketed(path, "metadata.labels") {
        return map_entry(&m.labels, key);
    }
    if let Some(key) = bracketed(path, "metadata.annotations") {
        return map_entry(&m.annotations, key);
    }
    match path {
        "metadata.name" => m.name.clone().unwrap_or_default(),
        "metadata.namespace" => m.namespace.clone().unwrap_or_default(),
        "metadata.uid" => m.uid.clone().unwrap_or_default(),
        "metadata.labels" => all(&m.labels),
        "metadata.annotations" => all(&m.annotations),
        "spec.nodeName" => spec.node_name.unwrap_or_default(),
        "spec.serviceAccountName" => spec.service_account_name.unwrap_or_default(),
        "status.podIP" | "status.podIPs" => at.pod_ip.clone(),
        "status.hostIP" | "status.hostIPs" => at.host_ip.clone(),
        _ => String::new(),
    }
}

fn bracketed<'a>(path: &'a str, field: &str) -> Option<&'a str> {
    let rest = path.strip_prefix(field)?.strip_prefix("['")?;
    rest.strip_suffix("']")
}

/// A container's resource request or limit, in units of `divisor` (default 1; CPU rounds up).
pub fn resource_value(c: &Container, resource: &str, divisor: Option<&str>) -> String {
    let (section, name) = resource.split_once('.').unwrap_or(("limits", resource));
    let r = c.resources.clone().unwrap_or_default();
    let map = if section == "requests" {
        r.requests
    } else {
        r.limits
    };
    let q = map.and_then(|m| m.get(name).map(|q| q.0.clone()));
    let cpu = name == "cpu";
    let divisor = divisor.unwrap_or("1");
    let value = match (&q, cpu) {
        (Some(q), true) => apimachinery::quantity::milli(q).unwrap_or(0),
        (Some(q), false) => apimachinery::quantity::units(q).unwrap_or(0),
        (None, _) => 0,
    };
    let div = if cpu {
        apimachinery::quantity::milli(divisor)
    } else {
        apimachinery::quantity::units(divisor)
    };
    let div = div.filter(|d| *d > 0).unwrap_or(1);
    ((value + div - 1) / div).to_string()
}

/// `$(VAR)` references to earlier variables expanded, `$$` escapes a `$`; an unknown
/// reference stays as written, as the kubelet leaves it.
pub fn expand(s: &str, env: &[(String, String)]) -> String {
    let mut out = String::new();
    let mut rest = s;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        if let Some(tail) = after.strip_prefix('$') {
            out.push('$');
            rest = tail;
        } else if let Some(name_end) = after.strip_prefix('(').and_then(|a| a.find(')')) {
            let name = &after[1..=name_end];
            match env.iter().find(|(k, _)| k == name) {
                Some((_, v)) => out.push_str(v),
                None => out.push_str(&rest[i..i + name_end + 3]),
            }
            rest = &after[name_end + 2..];
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

/// The docker-links style variables of one service.
fn service_env(svc: &Value) -> Vec<(String, String)> {
    let ip = svc["spec"]["clusterIP"].as_str().unwrap_or_default();
    if ip.is_empty() || ip == "None" {
        return Vec::new();
    }
    let name = svc["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_uppercase()
        .replace('-', "_");
    let ports = svc["spec"]["ports"].as_array().cloned().unwrap_or_default();
    let Some(first) = ports.first() else {
        return Vec::new();
    };
    let mut env = vec![
        (format!("{name}_SERVICE_HOST"), ip.to_string()),
        (format!("{name}_SERVICE_PORT"), first["port"].to_string()),
    ];
    for p in &ports {
        if let Some(pn) = p["name"].as_str().filter(|n| !n.is_empty()) {
            let pn = pn.to_uppercase().replace('-', "_");
            env.push((format!("{name}_SERVICE_PORT_{pn}"), p["port"].to_string()));
        }
    }
    let proto = |p: &Value| p["protocol"].as_str().unwrap_or("TCP").to_string();
    env.push((
        format!("{name}_PORT"),
        format!("{}://{ip}:{}", proto(first).to_lowercase(), first["port"]),
    ));
    for p in &ports {
        let (port, pr) = (p["port"].to_string(), proto(p));
        let base = format!("{name}_PORT_{port}_{pr}");
        env.push((base.clone(), format!("{}://{ip}:{port}", pr.to_lowercase())));
        env.push((format!("{base}_PROTO"), pr.to_lowercase()));
        env.push((format!("{base}_PORT"), port.clone()));
        env.push((format!("{base}_ADDR"), ip.to_string()));
    }
    env
}

/// Standard base64, as Kubernetes stores secret data.
pub fn base64_decode(s: &str) -> Option<Vec<u8>> {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD
        .decode(s.trim())
        .ok()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn pod() -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "web", "namespace": "shop", "uid": "u1", "labels": {"app": "web"}},
            "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "busybox",
                "resources": {"limits": {"memory": "64Mi", "cpu": "1500m"}},
                "envFrom": [{"configMapRef": {"name": "cm"}, "prefix": "CM_"}],
                "env": [
                    {"name": "A", "value": "one"},
                    {"name": "B", "value": "$(A)-two-$$(A)-$(NOPE)"},
                    {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                    {"name": "APP", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['app']"}}},
                    {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                    {"name": "PASS", "valueFrom": {"secretKeyRef": {"name": "s", "key": "pw"}}},
                    {"name": "MEM", "valueFrom": {"resourceFieldRef": {"resource": "limits.memory", "divisor": "1Mi"}}},
                    {"name": "CPU", "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu"}}},
                ]}]},
        }))
        .unwrap()
    }

    fn refs() -> Refs {
        Refs {
            configmaps: [("cm".into(), json!({"data": {"k": "v"}}))].into(),
            secrets: [("s".into(), json!({"data": {"pw": "aHVudGVyMg=="}}))].into(),
            services: vec![
                json!({"metadata": {"name": "db-main"}, "spec": {"clusterIP": "10.0.0.5", "ports": [{"port": 5432, "protocol": "TCP"}]}}),
            ],
            kubernetes: Some(
                json!({"metadata": {"name": "kubernetes"}, "spec": {"clusterIP": "10.0.0.1", "ports": [{"name": "https", "port": 443}]}}),
            ),
            ..Refs::default()
        }
    }

    #[test]
    fn env_values_references_and_services_resolve_as_the_kubelet_does() {
        let p = pod();
        let c = &p.spec.as_ref().unwrap().containers[0];
        let at = Placement {
            pod_ip: "10.1.0.4".into(),
            host_ip: "192.0.2.1".into(),
        };
        let env: HashMap<_, _> = container_env(&p, c, &refs(), &at)
            .unwrap()
            .into_iter()
            .collect();
        assert_eq!(env["A"], "one");
        assert_eq!(env["B"], "one-two-$(A)-$(NOPE)");
        assert_eq!(env["POD"], "web");
        assert_eq!(env["APP"], "web");
        assert_eq!(env["IP"], "10.1.0.4");
        assert_eq!(env["PASS"], "hunter2");
        assert_eq!(env["MEM"], "64");
        assert_eq!(env["CPU"], "2");
        assert_eq!(env["CM_k"], "v");
        assert_eq!(env["KUBERNETES_SERVICE_HOST"], "10.0.0.1");
        assert_eq!(env["KUBERNETES_SERVICE_PORT"], "443");
        assert_eq!(env["KUBERNETES_SERVICE_PORT_HTTPS"], "443");
        assert_eq!(env["DB_MAIN_SERVICE_HOST"], "10.0.0.5");
        assert_eq!(env["DB_MAIN_PORT_5432_TCP_ADDR"], "10.0.0.5");
    }

    #[test]
    fn a_missing_secret_is_a_config_error_naming_it() {
        let p = pod();
        let c = &p.spec.as_ref().unwrap().containers[0];
        let mut r = refs();
        r.secrets.clear();
        let e = container_env(&p, c, &r, &Placement::default()).unwrap_err();
        assert_eq!(
            e.to_string(),
            "CreateContainerConfigError: secret \"s\" not found"
        );
    }

    #[test]
    fn base64_decodes_with_and_without_padding() {
        assert_eq!(base64_decode("aGk=").unwrap(), b"hi");
        assert_eq!(base64_decode("aGVsbG8=").unwrap(), b"hello");
        assert!(base64_decode("a!==").is_none());
    }
}
