//! Cells of the storage, quota, networking, scheduling and administration kinds.

use serde_json::{Value, json};

use super::workloads::quantity;
use super::{Cells, items, or_placeholder, text};
use crate::fields::format_label_selector;
use crate::time::human_age;

/// Access modes in kubectl's short form and order.
const ACCESS_MODES: [(&str, &str); 4] = [
    ("ReadWriteOnce", "RWO"),
    ("ReadOnlyMany", "ROX"),
    ("ReadWriteMany", "RWX"),
    ("ReadWriteOncePod", "RWOP"),
];

/// The storage class annotation that predates `spec.storageClassName`.
const BETA_CLASS_ANNOTATION: &str = "volume.beta.kubernetes.io/storage-class";

pub(super) fn persistent_volume(obj: &Value) -> Cells {
    let phase = if deleting(obj) {
        "Terminating"
    } else {
        text(obj, "/status/phase")
    };
    let claim = match text(obj, "/spec/claimRef/name") {
        "" => String::new(),
        name => format!("{}/{name}", text(obj, "/spec/claimRef/namespace")),
    };
    vec![
        (
            "Capacity",
            Value::from(quantity_at(obj, "/spec/capacity/storage")),
        ),
        (
            "Access Modes",
            Value::from(access_modes(obj, "/spec/accessModes")),
        ),
        (
            "Reclaim Policy",
            Value::from(text(obj, "/spec/persistentVolumeReclaimPolicy")),
        ),
        ("Status", Value::from(phase)),
        ("Claim", Value::from(claim)),
        ("StorageClass", Value::from(class_of(obj))),
        (
            "VolumeAttributesClass",
            or_placeholder(text(obj, "/spec/volumeAttributesClassName"), "<unset>"),
        ),
        ("Reason", Value::from(text(obj, "/status/reason"))),
        (
            "VolumeMode",
            or_placeholder(text(obj, "/spec/volumeMode"), "<unset>"),
        ),
    ]
}

pub(super) fn persistent_volume_claim(obj: &Value) -> Cells {
    let phase = if deleting(obj) {
        "Terminating"
    } else {
        text(obj, "/status/phase")
    };
    let volume = text(obj, "/spec/volumeName");
    let (capacity, modes) = if volume.is_empty() {
        (String::new(), String::new())
    } else {
        (
            quantity_at(obj, "/status/capacity/storage"),
            access_modes(obj, "/status/accessModes"),
        )
    };
    vec![
        ("Status", Value::from(phase)),
        ("Volume", Value::from(volume)),
        ("Capacity", Value::from(capacity)),
        ("Access Modes", Value::from(modes)),
        ("StorageClass", Value::from(class_of(obj))),
        (
            "VolumeAttributesClass",
            or_placeholder(text(obj, "/spec/volumeAttributesClassName"), "<unset>"),
        ),
        (
            "VolumeMode",
            or_placeholder(text(obj, "/spec/volumeMode"), "<unset>"),
        ),
    ]
}

/// `Request` and `Limit`: `resource: used/hard` for every hard limit, sorted, `limits.*` in
/// the second.
pub(super) fn resource_quota(obj: &Value) -> Cells {
    let hard = obj.pointer("/spec/hard").and_then(Value::as_object);
    let (mut requests, mut limits) = (Vec::new(), Vec::new());
    for (resource, limit) in hard.into_iter().flatten() {
        let used = obj
            .pointer("/status/used")
            .and_then(|u| u.get(resource))
            .and_then(quantity)
            .unwrap_or_else(|| "0".to_owned());
        let entry = format!("{resource}: {used}/{}", quantity(limit).unwrap_or_default());
        if resource.starts_with("limits.") {
            limits.push(entry);
        } else {
            requests.push(entry);
        }
    }
    vec![
        ("Request", Value::from(requests.join(", "))),
        ("Limit", Value::from(limits.join(", "))),
    ]
}

pub(super) fn ingress(obj: &Value) -> Cells {
    let rules = items(obj, "/spec/rules");
    let hosts: Vec<&str> = rules
        .iter()
        .take(3)
        .filter_map(|r| r["host"].as_str())
        .filter(|h| !h.is_empty())
        .collect();
    let hosts = match (hosts.is_empty(), rules.len() > 3) {
        (true, _) => "*".to_owned(),
        (false, true) => format!("{} + {} more...", hosts.join(","), rules.len() - 3),
        (false, false) => hosts.join(","),
    };
    let addresses: Vec<&str> = items(obj, "/status/loadBalancer/ingress")
        .iter()
        .filter_map(|i| i["ip"].as_str().or_else(|| i["hostname"].as_str()))
        .filter(|s| !s.is_empty())
        .collect();
    let mut address = addresses.join(",");
    if address.len() > 16 {
        address.truncate(13);
        address.push_str("...");
    }
    let ports = if items(obj, "/spec/tls").is_empty() {
        "80"
    } else {
        "80, 443"
    };
    vec![
        (
            "Class",
            or_placeholder(text(obj, "/spec/ingressClassName"), "<none>"),
        ),
        ("Hosts", Value::from(hosts)),
        ("Address", Value::from(address)),
        ("Ports", Value::from(ports)),
    ]
}

pub(super) fn ingress_class(obj: &Value) -> Cells {
    let parameters = match obj.pointer("/spec/parameters") {
        Some(p) if p.is_object() => {
            let kind = p["kind"].as_str().unwrap_or_default();
            let name = p["name"].as_str().unwrap_or_default();
            match p["apiGroup"].as_str().filter(|g| !g.is_empty()) {
                Some(group) => format!("{kind}.{group}/{name}"),
                None => format!("{kind}/{name}"),
            }
        }
        _ => "<none>".to_owned(),
    };
    vec![
        ("Controller", Value::from(text(obj, "/spec/controller"))),
        ("Parameters", Value::from(parameters)),
    ]
}

pub(super) fn network_policy(obj: &Value) -> Cells {
    vec![(
        "Pod-Selector",
        Value::from(format_label_selector(obj.pointer("/spec/podSelector"))),
    )]
}

/// The default class's name is marked `(default)`.
pub(super) fn storage_class(obj: &Value) -> Cells {
    let annotations = obj.pointer("/metadata/annotations");
    let is_default = [
        "storageclass.kubernetes.io/is-default-class",
        "storageclass.beta.kubernetes.io/is-default-class",
    ]
    .iter()
    .any(|a| annotations.and_then(|m| m.get(*a)) == Some(&json!("true")));
    let name = text(obj, "/metadata/name");
    let name = if is_default {
        format!("{name} (default)")
    } else {
        name.to_owned()
    };
    let expansion = obj
        .get("allowVolumeExpansion")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    vec![
        ("Name", Value::from(name)),
        ("Provisioner", Value::from(text(obj, "/provisioner"))),
        (
            "ReclaimPolicy",
            or_placeholder(text(obj, "/reclaimPolicy"), "Delete"),
        ),
        (
            "VolumeBindingMode",
            or_placeholder(text(obj, "/volumeBindingMode"), "Immediate"),
        ),
        ("AllowVolumeExpansion", Value::from(expansion.to_string())),
    ]
}

pub(super) fn volume_attachment(obj: &Value) -> Cells {
    let attached = obj
        .pointer("/status/attached")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    vec![
        ("Attacher", Value::from(text(obj, "/spec/attacher"))),
        (
            "PV",
            Value::from(text(obj, "/spec/source/persistentVolumeName")),
        ),
        ("Node", Value::from(text(obj, "/spec/nodeName"))),
        ("Attached", Value::from(attached)),
    ]
}

pub(super) fn csi_storage_capacity(obj: &Value) -> Cells {
    let capacity = obj
        .get("capacity")
        .and_then(quantity)
        .unwrap_or_else(|| "<unset>".to_owned());
    vec![
        (
            "StorageClassName",
            Value::from(text(obj, "/storageClassName")),
        ),
        ("Capacity", Value::from(capacity)),
    ]
}

pub(super) fn priority_class(obj: &Value) -> Cells {
    let global = obj
        .get("globalDefault")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    vec![
        (
            "Value",
            json!(obj.get("value").and_then(Value::as_i64).unwrap_or(0)),
        ),
        ("Global-Default", Value::from(global)),
        (
            "PreemptionPolicy",
            or_placeholder(text(obj, "/preemptionPolicy"), "<unset>"),
        ),
    ]
}

/// `Condition`: `Approved`, `Denied` or `Pending`, then `,Failed` and `,Issued`.
pub(super) fn certificate_signing_request(obj: &Value) -> Cells {
    let has = |kind: &str| {
        items(obj, "/status/conditions")
            .iter()
            .any(|c| c["type"] == kind && c["status"] != "False")
    };
    let mut condition = if has("Denied") {
        "Denied".to_owned()
    } else if has("Approved") {
        "Approved".to_owned()
    } else {
        "Pending".to_owned()
    };
    if has("Failed") {
        condition.push_str(",Failed");
    }
    if !text(obj, "/status/certificate").is_empty() {
        condition.push_str(",Issued");
    }
    let duration = obj
        .pointer("/spec/expirationSeconds")
        .and_then(Value::as_i64)
        .map_or_else(|| "<none>".to_owned(), human_age);
    vec![
        ("SignerName", Value::from(text(obj, "/spec/signerName"))),
        ("Requestor", Value::from(text(obj, "/spec/username"))),
        ("RequestedDuration", Value::from(duration)),
        ("Condition", Value::from(condition)),
    ]
}

pub(super) fn webhook_configuration(obj: &Value) -> Cells {
    vec![("Webhooks", json!(items(obj, "/webhooks").len()))]
}

pub(super) fn validating_admission_policy(obj: &Value) -> Cells {
    let param_kind = match obj.pointer("/spec/paramKind") {
        Some(p) if p.is_object() => format!(
            "{}/{}",
            p["apiVersion"].as_str().unwrap_or_default(),
            p["kind"].as_str().unwrap_or_default()
        ),
        _ => "<unset>".to_owned(),
    };
    vec![
        ("Validations", json!(items(obj, "/spec/validations").len())),
        ("ParamKind", Value::from(param_kind)),
    ]
}

pub(super) fn validating_admission_policy_binding(obj: &Value) -> Cells {
    let param_ref = match obj.pointer("/spec/paramRef") {
        Some(p) if p.is_object() => {
            let name = p["name"].as_str().unwrap_or_default();
            let namespace = p["namespace"].as_str().unwrap_or_default();
            match (name, namespace) {
                ("", _) => format_label_selector(p.get("selector")),
                (name, "") => name.to_owned(),
                (name, ns) => format!("{ns}/{name}"),
            }
        }
        _ => "<unset>".to_owned(),
    };
    vec![
        ("PolicyName", Value::from(text(obj, "/spec/policyName"))),
        ("ParamRef", Value::from(param_ref)),
    ]
}

/// `Service` is `namespace/name` or `Local`; `Available` the condition's status, with its
/// reason when not `True`.
pub(super) fn api_service(obj: &Value) -> Cells {
    let service = match text(obj, "/spec/service/name") {
        "" => "Local".to_owned(),
        name => format!("{}/{name}", text(obj, "/spec/service/namespace")),
    };
    let available = items(obj, "/status/conditions")
        .iter()
        .find(|c| c["type"] == "Available")
        .map_or_else(
            || "Unknown".to_owned(),
            |c| match c["status"].as_str().unwrap_or_default() {
                "True" => "True".to_owned(),
                status => format!("{status} ({})", c["reason"].as_str().unwrap_or_default()),
            },
        );
    vec![
        ("Service", Value::from(service)),
        ("Available", Value::from(available)),
    ]
}

fn deleting(obj: &Value) -> bool {
    obj.pointer("/metadata/deletionTimestamp")
        .is_some_and(|t| !t.is_null())
}

fn quantity_at(obj: &Value, pointer: &str) -> String {
    obj.pointer(pointer).and_then(quantity).unwrap_or_default()
}

/// `RWO,RWX`: the modes present, in kubectl's order.
fn access_modes(obj: &Value, pointer: &str) -> String {
    let have: Vec<&str> = items(obj, pointer)
        .iter()
        .filter_map(Value::as_str)
        .collect();
    let modes: Vec<&str> = ACCESS_MODES
        .iter()
        .filter(|(long, _)| have.contains(long))
        .map(|(_, short)| *short)
        .collect();
    modes.join(",")
}

/// `spec.storageClassName`, or the beta annotation that preceded it.
fn class_of(obj: &Value) -> String {
    let annotation = obj
        .pointer("/metadata/annotations")
        .and_then(|a| a.get(BETA_CLASS_ANNOTATION))
        .and_then(Value::as_str);
    annotation
        .unwrap_or_else(|| text(obj, "/spec/storageClassName"))
        .to_owned()
}
