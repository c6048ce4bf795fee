//! Pod defaulting (`SetDefaults_PodSpec`, `SetDefaults_Container`, probes, volumes, ports,
//! resources), on a pod's `spec` or a workload's `spec.template.spec`.

use serde_json::{Map, Value, json};

use super::{child, field_mut, items, or_set};

/// What `defaultMode` holds when a volume does not say (0644).
pub const DEFAULT_MODE: i64 = 420;

/// The kinds of volume whose files get `defaultMode`.
const MODE_SOURCES: [&str; 4] = ["configMap", "secret", "projected", "downwardAPI"];

/// Defaults a Pod (its `spec`; the status is the server's).
pub fn pod(obj: &mut Value) {
    if let Some(map) = obj.as_object_mut() {
        spec(child(map, "spec"));
    }
}

/// Defaults the pod template `template` of a workload (`spec.template`).
pub fn template(template: &mut Map<String, Value>) {
    spec(child(template, "spec"));
}

/// Defaults a pod spec.
pub fn spec(spec: &mut Map<String, Value>) {
    or_set(spec, "restartPolicy", json!("Always"));
    or_set(spec, "dnsPolicy", json!("ClusterFirst"));
    or_set(spec, "schedulerName", json!("default-scheduler"));
    or_set(spec, "terminationGracePeriodSeconds", json!(30));
    or_set(spec, "securityContext", json!({}));
    or_set(spec, "enableServiceLinks", json!(true));
    let host_network = spec.get("hostNetwork").and_then(Value::as_bool) == Some(true);
    for key in ["containers", "initContainers"] {
        for c in items(spec, key) {
            container(c, host_network);
        }
    }
    for c in items(spec, "ephemeralContainers") {
        container(c, host_network);
    }
    for v in items(spec, "volumes") {
        volume(v);
    }
}

/// `Always` for an image without a tag or tagged `latest`, else `IfNotPresent`.
pub fn pull_policy(image: &str) -> &'static str {
    if image.contains('@') {
        return "IfNotPresent";
    }
    let last = image.rsplit('/').next().unwrap_or(image);
    match last.split_once(':') {
        None => "Always",
        Some((_, "latest")) => "Always",
        Some(_) => "IfNotPresent",
    }
}

fn container(c: &mut Map<String, Value>, host_network: bool) {
    let image = c.get("image").and_then(Value::as_str).unwrap_or("");
    let policy = pull_policy(image);
    or_set(c, "imagePullPolicy", json!(policy));
    or_set(c, "terminationMessagePath", json!("/dev/termination-log"));
    or_set(c, "terminationMessagePolicy", json!("File"));
    or_set(c, "resources", json!({}));
    for port in items(c, "ports") {
        or_set(port, "protocol", json!("TCP"));
        if host_network
            && port.get("hostPort").is_none_or(Value::is_null)
            && let Some(p) = port.get("containerPort").cloned()
        {
            port.insert("hostPort".into(), p);
        }
    }
    for probe in ["livenessProbe", "readinessProbe", "startupProbe"] {
        if let Some(p) = field_mut(c, probe) {
            self::probe(p);
        }
    }
    for hook in ["postStart", "preStop"] {
        if let Some(handler) = c
            .get_mut("lifecycle")
            .and_then(|l| l.get_mut(hook))
            .and_then(Value::as_object_mut)
        {
            http_get(handler);
        }
    }
    for env in items(c, "env") {
        if let Some(field_ref) = env
            .get_mut("valueFrom")
            .and_then(|v| v.get_mut("fieldRef"))
            .and_then(Value::as_object_mut)
        {
            or_set(field_ref, "apiVersion", json!("v1"));
        }
    }
    if let Some(resources) = field_mut(c, "resources") {
        requests_from_limits(resources);
    }
}

fn probe(p: &mut Map<String, Value>) {
    or_set(p, "timeoutSeconds", json!(1));
    or_set(p, "periodSeconds", json!(10));
    or_set(p, "successThreshold", json!(1));
    or_set(p, "failureThreshold", json!(3));
    http_get(p);
    if let Some(grpc) = field_mut(p, "grpc") {
        or_set(grpc, "service", json!(""));
    }
}

/// `httpGet`: path `/`, scheme `HTTP`.
fn http_get(handler: &mut Map<String, Value>) {
    if let Some(get) = field_mut(handler, "httpGet") {
        or_set(get, "path", json!("/"));
        or_set(get, "scheme", json!("HTTP"));
    }
}

/// A resource with a limit and no request requests its limit.
fn requests_from_limits(resources: &mut Map<String, Value>) {
    let Some(limits) = resources.get("limits").and_then(Value::as_object).cloned() else {
        return;
    };
    if limits.is_empty() {
        return;
    }
    let requests = child(resources, "requests");
    for (name, limit) in limits {
        requests.entry(name).or_insert(limit);
    }
}

fn volume(v: &mut Map<String, Value>) {
    let has_source = v.keys().any(|k| k != "name");
    if !has_source {
        v.insert("emptyDir".into(), json!({}));
    }
    for source in MODE_SOURCES {
        if let Some(s) = field_mut(v, source) {
            or_set(s, "defaultMode", json!(DEFAULT_MODE));
            downward_items(s);
            for projection in items(s, "sources") {
                if let Some(d) = field_mut(projection, "downwardAPI") {
                    downward_items(d);
                }
                if let Some(t) = field_mut(projection, "serviceAccountToken") {
                    or_set(t, "expirationSeconds", json!(3600));
                }
            }
        }
    }
    if let Some(host_path) = field_mut(v, "hostPath") {
        or_set(host_path, "type", json!(""));
    }
}

/// A downward API item's `fieldRef.apiVersion` is `v1`.
fn downward_items(source: &mut Map<String, Value>) {
    for item in items(source, "items") {
        if let Some(field_ref) = field_mut(item, "fieldRef") {
            or_set(field_ref, "apiVersion", json!("v1"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bare_pod_gets_the_spec_and_container_defaults() {
        let mut p = json!({"spec": {"containers": [{"name": "c", "image": "nginx"}]}});
        pod(&mut p);
        let spec = &p["spec"];
        assert_eq!(spec["restartPolicy"], "Always");
        assert_eq!(spec["dnsPolicy"], "ClusterFirst");
        assert_eq!(spec["schedulerName"], "default-scheduler");
        assert_eq!(spec["terminationGracePeriodSeconds"], 30);
        assert_eq!(spec["securityContext"], json!({}));
        assert_eq!(spec["enableServiceLinks"], true);
        let c = &spec["containers"][0];
        assert_eq!(c["imagePullPolicy"], "Always");
        assert_eq!(c["terminationMessagePath"], "/dev/termination-log");
        assert_eq!(c["terminationMessagePolicy"], "File");
        assert_eq!(c["resources"], json!({}));
    }

    #[test]
    fn defaulting_twice_changes_nothing_and_keeps_what_the_client_said() {
        let mut p = json!({"spec": {"restartPolicy": "Never", "containers": [
            {"name": "c", "image": "nginx:1.25", "imagePullPolicy": "Never"}]}});
        pod(&mut p);
        let once = p.clone();
        pod(&mut p);
        assert_eq!(p, once);
        assert_eq!(p["spec"]["restartPolicy"], "Never");
        assert_eq!(p["spec"]["containers"][0]["imagePullPolicy"], "Never");
    }

    #[test]
    fn pull_policy_follows_the_tag() {
        assert_eq!(pull_policy("nginx"), "Always");
        assert_eq!(pull_policy("nginx:latest"), "Always");
        assert_eq!(pull_policy("nginx:1.25"), "IfNotPresent");
        assert_eq!(pull_policy("registry:5000/app"), "Always");
        assert_eq!(pull_policy("registry:5000/app:v1"), "IfNotPresent");
        assert_eq!(pull_policy("app@sha256:abcd"), "IfNotPresent");
    }

    #[test]
    fn ports_probes_and_resources_get_their_defaults() {
        let mut p = json!({"spec": {"hostNetwork": true, "containers": [{
            "name": "c", "image": "a:1",
            "ports": [{"containerPort": 80}],
            "livenessProbe": {"httpGet": {"port": 80}},
            "readinessProbe": {"tcpSocket": {"port": 80}, "periodSeconds": 5},
            "resources": {"limits": {"cpu": "1", "memory": "1Gi"}, "requests": {"cpu": "500m"}},
        }]}});
        pod(&mut p);
        let c = &p["spec"]["containers"][0];
        assert_eq!(
            c["ports"][0],
            json!({"containerPort": 80, "hostPort": 80, "protocol": "TCP"})
        );
        let live = &c["livenessProbe"];
        assert_eq!(
            (&live["timeoutSeconds"], &live["periodSeconds"]),
            (&json!(1), &json!(10))
        );
        assert_eq!(
            (&live["successThreshold"], &live["failureThreshold"]),
            (&json!(1), &json!(3))
        );
        assert_eq!(live["httpGet"]["path"], "/");
        assert_eq!(live["httpGet"]["scheme"], "HTTP");
        assert_eq!(c["readinessProbe"]["periodSeconds"], 5);
        assert_eq!(
            c["resources"]["requests"],
            json!({"cpu": "500m", "memory": "1Gi"})
        );
    }

    #[test]
    fn volumes_get_their_mode_and_a_bare_volume_is_an_empty_dir() {
        let mut p = json!({"spec": {"containers": [], "volumes": [
            {"name": "cm", "configMap": {"name": "x"}},
            {"name": "s", "secret": {"secretName": "x", "defaultMode": 256}},
            {"name": "p", "projected": {"sources": [
                {"downwardAPI": {"items": [{"path": "ns", "fieldRef": {"fieldPath": "metadata.namespace"}}]}},
                {"serviceAccountToken": {"path": "token"}},
            ]}},
            {"name": "d", "downwardAPI": {"items": []}},
            {"name": "e"},
        ]}});
        pod(&mut p);
        let v = &p["spec"]["volumes"];
        assert_eq!(v[0]["configMap"]["defaultMode"], 420);
        assert_eq!(v[1]["secret"]["defaultMode"], 256);
        assert_eq!(v[2]["projected"]["defaultMode"], 420);
        let sources = &v[2]["projected"]["sources"];
        assert_eq!(
            sources[0]["downwardAPI"]["items"][0]["fieldRef"]["apiVersion"],
            "v1"
        );
        assert_eq!(sources[1]["serviceAccountToken"]["expirationSeconds"], 3600);
        assert_eq!(v[3]["downwardAPI"]["defaultMode"], 420);
        assert_eq!(v[4]["emptyDir"], json!({}));
    }
}
