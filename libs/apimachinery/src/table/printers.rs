//! Cells of the built-in kinds, as kube-apiserver's printers compute them
//! (`pkg/printers/internalversion/printers.go`). Each printer names its cells by column, so a
//! Table takes the ones its columns ask for.

use serde_json::{Value, json};

use crate::catalog::ResourceInfo;
use crate::time::{self, age_since};

mod cluster;
mod pod;
mod workloads;

/// A printer's cells, by column name.
type Cells = Vec<(&'static str, Value)>;
mod rbac;

/// The cells a printer computed, by column name, and the row's conditions.
#[derive(Default)]
pub(super) struct Printed {
    cells: Vec<(&'static str, Value)>,
    pub(super) conditions: Option<Value>,
}

// === impl Printed ===

impl Printed {
    fn new(cells: Vec<(&'static str, Value)>) -> Printed {
        Printed {
            cells,
            conditions: None,
        }
    }

    pub(super) fn cell(&self, column: &str) -> Option<&Value> {
        self.cells
            .iter()
            .find(|(name, _)| *name == column)
            .map(|(_, value)| value)
    }
}

/// The printer of a built-in kind; custom resources and unknown kinds print nothing here.
pub(super) fn print(info: &ResourceInfo, obj: &Value, now: i64) -> Printed {
    if info.custom {
        return Printed::default();
    }
    let name = ("Name", Value::from(text(obj, "/metadata/name")));
    let age = ("Age", Value::from(creation_age(obj, now)));
    let mut cells = match (info.group.as_str(), info.plural.as_str()) {
        ("", "pods") => return pod::print(obj, now),
        ("", "nodes") => node(obj),
        ("", "namespaces") => vec![("Status", Value::from(text(obj, "/status/phase")))],
        ("", "services") => service(obj),
        ("", "configmaps") => vec![("Data", Value::from(count(obj, &["data", "binaryData"])))],
        ("", "secrets") => secret(obj),
        ("", "serviceaccounts") => vec![("Secrets", Value::from(len(obj, "/secrets")))],
        ("", "endpoints") => vec![("Endpoints", Value::from(endpoints(obj)))],
        ("", "events") | ("events.k8s.io", "events") => event(obj, now),
        ("", "componentstatuses") => component_status(obj),
        ("coordination.k8s.io", "leases") => {
            vec![("Holder", Value::from(text(obj, "/spec/holderIdentity")))]
        }
        ("discovery.k8s.io", "endpointslices") => endpoint_slice(obj),
        ("apiextensions.k8s.io", "customresourcedefinitions") => {
            vec![("Created At", created_at(obj))]
        }
        ("storage.k8s.io", "csidrivers") => csi_driver(obj),
        ("storage.k8s.io", "csinodes") => vec![("Drivers", Value::from(len(obj, "/spec/drivers")))],
        ("node.k8s.io", "runtimeclasses") => vec![("Handler", Value::from(text(obj, "/handler")))],
        ("rbac.authorization.k8s.io", _) => rbac::print(obj),
        _ => more_cells(info, obj, now),
    };
    cells.extend([name, age]);
    Printed::new(cells)
}

/// The kinds of the [`workloads`] and [`cluster`] printers.
fn more_cells(info: &ResourceInfo, obj: &Value, now: i64) -> Cells {
    match (info.group.as_str(), info.plural.as_str()) {
        ("", "podtemplates") => workloads::pod_template(obj),
        ("", "replicationcontrollers") => workloads::replicas(obj, true),
        ("apps", "replicasets") => workloads::replicas(obj, false),
        ("apps", "deployments") => workloads::deployment(obj),
        ("apps", "statefulsets") => workloads::stateful_set(obj),
        ("apps", "daemonsets") => workloads::daemon_set(obj),
        ("apps", "controllerrevisions") => workloads::controller_revision(obj),
        ("batch", "jobs") => workloads::job(obj, now),
        ("batch", "cronjobs") => workloads::cron_job(obj, now),
        ("autoscaling", "horizontalpodautoscalers") => workloads::horizontal_pod_autoscaler(obj),
        ("policy", "poddisruptionbudgets") => workloads::pod_disruption_budget(obj),
        ("", "persistentvolumes") => cluster::persistent_volume(obj),
        ("", "persistentvolumeclaims") => cluster::persistent_volume_claim(obj),
        ("", "resourcequotas") => cluster::resource_quota(obj),
        ("networking.k8s.io", "ingresses") => cluster::ingress(obj),
        ("networking.k8s.io", "ingressclasses") => cluster::ingress_class(obj),
        ("networking.k8s.io", "networkpolicies") => cluster::network_policy(obj),
        ("storage.k8s.io", "storageclasses") => cluster::storage_class(obj),
        ("storage.k8s.io", "volumeattachments") => cluster::volume_attachment(obj),
        ("storage.k8s.io", "csistoragecapacities") => cluster::csi_storage_capacity(obj),
        ("scheduling.k8s.io", "priorityclasses") => cluster::priority_class(obj),
        ("certificates.k8s.io", "certificatesigningrequests") => {
            cluster::certificate_signing_request(obj)
        }
        ("admissionregistration.k8s.io", "validatingadmissionpolicies") => {
            cluster::validating_admission_policy(obj)
        }
        ("admissionregistration.k8s.io", "validatingadmissionpolicybindings") => {
            cluster::validating_admission_policy_binding(obj)
        }
        ("admissionregistration.k8s.io", _) => cluster::webhook_configuration(obj),
        ("apiregistration.k8s.io", "apiservices") => cluster::api_service(obj),
        // Limit ranges have only the generic `Name` and `Created At`.
        _ => Vec::new(),
    }
}

/// The string at a JSON pointer, or `""`.
pub(super) fn text<'v>(obj: &'v Value, pointer: &str) -> &'v str {
    obj.pointer(pointer).and_then(Value::as_str).unwrap_or("")
}

/// `metadata.creationTimestamp` in UTC (the `Created At` column of the default printer).
pub(super) fn created_at(obj: &Value) -> Value {
    let created = obj
        .pointer("/metadata/creationTimestamp")
        .and_then(Value::as_str)
        .and_then(time::parse_rfc3339);
    Value::from(created.map_or_else(|| "0001-01-01T00:00:00Z".to_owned(), time::format_rfc3339))
}

fn creation_age(obj: &Value, now: i64) -> String {
    age_since(
        obj.pointer("/metadata/creationTimestamp")
            .and_then(Value::as_str),
        now,
    )
}

fn items<'v>(obj: &'v Value, pointer: &str) -> &'v [Value] {
    obj.pointer(pointer)
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

fn len(obj: &Value, pointer: &str) -> i64 {
    i64::try_from(items(obj, pointer).len()).unwrap_or(i64::MAX)
}

/// The number of keys of the named top-level maps.
fn count(obj: &Value, maps: &[&str]) -> i64 {
    let keys: usize = maps
        .iter()
        .filter_map(|m| obj.get(*m).and_then(Value::as_object))
        .map(|m| m.len())
        .sum();
    i64::try_from(keys).unwrap_or(i64::MAX)
}

fn or_placeholder(s: &str, placeholder: &str) -> Value {
    Value::from(if s.is_empty() { placeholder } else { s })
}

/// Up to `max` entries joined with commas, then ` + N more...`; `empty` when there are none.
fn list_with_more(all: &[String], max: usize, empty: &str) -> String {
    if all.is_empty() {
        return empty.to_owned();
    }
    let shown = all[..all.len().min(max)].join(",");
    if all.len() > max {
        format!("{shown} + {} more...", all.len() - max)
    } else {
        shown
    }
}

fn node(obj: &Value) -> Vec<(&'static str, Value)> {
    let mut status: Vec<&str> = Vec::new();
    let ready = items(obj, "/status/conditions")
        .iter()
        .find(|c| c["type"] == "Ready");
    if let Some(ready) = ready {
        status.push(if ready["status"] == "True" {
            "Ready"
        } else {
            "NotReady"
        });
    } else {
        status.push("Unknown");
    }
    if obj.pointer("/spec/unschedulable") == Some(&Value::Bool(true)) {
        status.push("SchedulingDisabled");
    }
    let roles = node_roles(obj);
    let address = |kind: &str| {
        items(obj, "/status/addresses")
            .iter()
            .find(|a| a["type"] == kind)
            .and_then(|a| a["address"].as_str())
            .unwrap_or("<none>")
            .to_owned()
    };
    let info =
        |field: &str| or_placeholder(text(obj, &format!("/status/nodeInfo/{field}")), "<unknown>");
    vec![
        ("Status", Value::from(status.join(","))),
        ("Roles", or_placeholder(&roles.join(","), "<none>")),
        (
            "Version",
            Value::from(text(obj, "/status/nodeInfo/kubeletVersion")),
        ),
        ("Internal-IP", Value::from(address("InternalIP"))),
        ("External-IP", Value::from(address("ExternalIP"))),
        ("OS-Image", info("osImage")),
        ("Kernel-Version", info("kernelVersion")),
        ("Container-Runtime", info("containerRuntimeVersion")),
    ]
}

/// `node-role.kubernetes.io/<role>` label names and the `kubernetes.io/role` label value,
/// sorted.
fn node_roles(obj: &Value) -> Vec<String> {
    let mut roles: Vec<String> = obj
        .pointer("/metadata/labels")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .filter_map(
            |(key, value)| match key.strip_prefix("node-role.kubernetes.io/") {
                Some(role) if !role.is_empty() => Some(role.to_owned()),
                Some(_) => None,
                None if key == "kubernetes.io/role" => {
                    value.as_str().filter(|v| !v.is_empty()).map(str::to_owned)
                }
                None => None,
            },
        )
        .collect();
    roles.sort();
    roles.dedup();
    roles
}

fn service(obj: &Value) -> Vec<(&'static str, Value)> {
    let type_ = obj
        .pointer("/spec/type")
        .and_then(Value::as_str)
        .unwrap_or("ClusterIP");
    let cluster_ip = items(obj, "/spec/clusterIPs")
        .first()
        .and_then(Value::as_str)
        .unwrap_or_else(|| text(obj, "/spec/clusterIP"));
    let ports: Vec<String> = items(obj, "/spec/ports").iter().map(service_port).collect();
    vec![
        ("Type", Value::from(type_)),
        ("Cluster-IP", or_placeholder(cluster_ip, "<none>")),
        ("External-IP", Value::from(service_external_ip(obj, type_))),
        ("Port(s)", or_placeholder(&ports.join(","), "<none>")),
        (
            "Selector",
            Value::from(format_labels(obj.pointer("/spec/selector"))),
        ),
    ]
}

/// `80/TCP`, or `443:30443/TCP` with a node port.
fn service_port(port: &Value) -> String {
    let number = port["port"].as_i64().unwrap_or(0);
    let protocol = port["protocol"].as_str().unwrap_or("TCP");
    match port["nodePort"].as_i64() {
        Some(node_port) if node_port > 0 => format!("{number}:{node_port}/{protocol}"),
        _ => format!("{number}/{protocol}"),
    }
}

fn service_external_ip(obj: &Value, type_: &str) -> String {
    let external: Vec<&str> = items(obj, "/spec/externalIPs")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    match type_ {
        "ClusterIP" | "NodePort" if external.is_empty() => "<none>".to_owned(),
        "ClusterIP" | "NodePort" => external.join(","),
        "LoadBalancer" => {
            let ingress: Vec<&str> = items(obj, "/status/loadBalancer/ingress")
                .iter()
                .filter_map(|i| i["ip"].as_str().or_else(|| i["hostname"].as_str()))
                .filter(|s| !s.is_empty())
                .collect();
            let all: Vec<&str> = ingress.into_iter().chain(external).collect();
            if all.is_empty() {
                "<pending>".to_owned()
            } else {
                all.join(",")
            }
        }
        "ExternalName" => text(obj, "/spec/externalName").to_owned(),
        _ => "<unknown>".to_owned(),
    }
}

/// `k=v,k2=v2` sorted by key, or `<none>`.
fn format_labels(labels: Option<&Value>) -> String {
    let pairs: Vec<String> = labels
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or("")))
        .collect();
    if pairs.is_empty() {
        "<none>".to_owned()
    } else {
        pairs.join(",")
    }
}

fn secret(obj: &Value) -> Vec<(&'static str, Value)> {
    let data = obj.get("data").and_then(Value::as_object);
    let string_only = obj
        .get("stringData")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .filter(|(k, _)| !data.is_some_and(|d| d.contains_key(*k)))
        .count();
    let keys = data.map_or(0, |d| d.len()) + string_only;
    vec![
        ("Type", Value::from(text(obj, "/type"))),
        ("Data", Value::from(i64::try_from(keys).unwrap_or(i64::MAX))),
    ]
}

/// `ip:port` for every address and port of every subset (at most three shown).
fn endpoints(obj: &Value) -> String {
    let subsets = items(obj, "/subsets");
    if subsets.is_empty() {
        return "<none>".to_owned();
    }
    let mut all = Vec::new();
    for subset in subsets {
        let ips: Vec<&str> = items(subset, "/addresses")
            .iter()
            .filter_map(|a| a["ip"].as_str())
            .collect();
        let ports = items(subset, "/ports");
        if ports.is_empty() {
            all.extend(ips.iter().map(|ip| (*ip).to_owned()));
        }
        for port in ports {
            let number = port["port"].as_i64().unwrap_or(0);
            all.extend(ips.iter().map(|ip| join_host_port(ip, number)));
        }
    }
    list_with_more(&all, 3, "")
}

fn join_host_port(host: &str, port: i64) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

fn endpoint_slice(obj: &Value) -> Vec<(&'static str, Value)> {
    let ports: Vec<String> = items(obj, "/ports")
        .iter()
        .map(|p| match (p["port"].as_i64(), p["name"].as_str()) {
            (Some(port), _) => port.to_string(),
            (None, Some(name)) => name.to_owned(),
            (None, None) => "<unset>".to_owned(),
        })
        .collect();
    let addresses: Vec<String> = items(obj, "/endpoints")
        .iter()
        .flat_map(|e| items(e, "/addresses"))
        .filter_map(|a| a.as_str().map(str::to_owned))
        .collect();
    vec![
        ("AddressType", Value::from(text(obj, "/addressType"))),
        ("Ports", Value::from(list_with_more(&ports, 3, "<unset>"))),
        (
            "Endpoints",
            Value::from(list_with_more(&addresses, 3, "<unset>")),
        ),
    ]
}

/// Core/v1 events and events.k8s.io/v1 events (whose fields are named differently).
/// Status (`Healthy`, `Unhealthy`, `Unknown`), message and error of the `Healthy` condition.
fn component_status(obj: &Value) -> Cells {
    let healthy = obj["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == "Healthy");
    let (status, message, error) = match healthy {
        Some(c) => (
            if c["status"] == "True" {
                "Healthy"
            } else {
                "Unhealthy"
            },
            c["message"].as_str().unwrap_or_default(),
            c["error"].as_str().unwrap_or_default(),
        ),
        None => ("Unknown", "", ""),
    };
    vec![
        ("Status", Value::from(status)),
        ("Message", Value::from(message)),
        ("Error", Value::from(error)),
    ]
}

fn event(obj: &Value, now: i64) -> Vec<(&'static str, Value)> {
    let (first, last, count) = event_times(obj, now);
    let involved = if obj.get("involvedObject").is_some() {
        "/involvedObject"
    } else {
        "/regarding"
    };
    let kind = text(obj, &format!("{involved}/kind")).to_lowercase();
    let name = text(obj, &format!("{involved}/name"));
    let target = if name.is_empty() {
        kind
    } else {
        format!("{kind}/{name}")
    };
    vec![
        ("Last Seen", Value::from(last)),
        ("Type", Value::from(text(obj, "/type"))),
        ("Reason", Value::from(text(obj, "/reason"))),
        ("Object", Value::from(target)),
        (
            "Subobject",
            Value::from(text(obj, &format!("{involved}/fieldPath"))),
        ),
        ("Source", Value::from(event_source(obj))),
        (
            "Message",
            Value::from(first_text(obj, &["/message", "/note"]).trim()),
        ),
        ("First Seen", Value::from(first)),
        ("Count", Value::from(count)),
    ]
}

/// First seen, last seen (ages) and count; a series overrides the last two.
fn event_times(obj: &Value, now: i64) -> (String, String, i64) {
    let age = |s: &str| (!s.is_empty()).then(|| age_since(Some(s), now));
    let first = age(first_text(
        obj,
        &["/firstTimestamp", "/deprecatedFirstTimestamp"],
    ))
    .or_else(|| age(text(obj, "/eventTime")))
    .unwrap_or_else(|| "<unknown>".to_owned());
    let last = age(first_text(
        obj,
        &["/lastTimestamp", "/deprecatedLastTimestamp"],
    ))
    .unwrap_or_else(|| first.clone());
    let count = obj
        .get("count")
        .or_else(|| obj.get("deprecatedCount"))
        .and_then(Value::as_i64)
        .unwrap_or(0);
    match obj.get("series").filter(|s| s.is_object()) {
        Some(series) => (
            first,
            age_since(series["lastObservedTime"].as_str(), now),
            series["count"].as_i64().unwrap_or(count),
        ),
        None => (first, last, count.max(1)),
    }
}

/// `component, host`, falling back to the reporting controller and instance.
fn event_source(obj: &Value) -> String {
    let component = first_text(
        obj,
        &[
            "/source/component",
            "/deprecatedSource/component",
            "/reportingComponent",
            "/reportingController",
        ],
    );
    let host = first_text(
        obj,
        &[
            "/source/host",
            "/deprecatedSource/host",
            "/reportingInstance",
        ],
    );
    match (component, host) {
        ("", _) => "<unknown>".to_owned(),
        (c, "") => c.to_owned(),
        (c, h) => format!("{c}, {h}"),
    }
}

/// The first non-empty string among the pointers, or `""`.
fn first_text<'v>(obj: &'v Value, pointers: &[&str]) -> &'v str {
    pointers
        .iter()
        .map(|p| text(obj, p))
        .find(|s| !s.is_empty())
        .unwrap_or("")
}

fn csi_driver(obj: &Value) -> Vec<(&'static str, Value)> {
    let flag = |field: &str, default: bool| {
        obj.pointer(&format!("/spec/{field}"))
            .and_then(Value::as_bool)
            .unwrap_or(default)
    };
    let audiences: Vec<&str> = items(obj, "/spec/tokenRequests")
        .iter()
        .map(|t| t["audience"].as_str().unwrap_or(""))
        .collect();
    let modes: Vec<&str> = items(obj, "/spec/volumeLifecycleModes")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    vec![
        ("AttachRequired", json!(flag("attachRequired", true))),
        ("PodInfoOnMount", json!(flag("podInfoOnMount", false))),
        ("StorageCapacity", json!(flag("storageCapacity", false))),
        (
            "TokenRequests",
            or_placeholder(&audiences.join(","), "<unset>"),
        ),
        ("RequiresRepublish", json!(flag("requiresRepublish", false))),
        ("Modes", or_placeholder(&modes.join(","), "<none>")),
    ]
}

#[cfg(test)]
mod tests;
