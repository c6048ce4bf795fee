//! The built-in kinds against what `kubectl api-resources` and `kubectl get` show on a real
//! 1.32 cluster.

use super::super::ResourceInfo;
use super::all;

fn find(group: &str, version: &str, plural: &str) -> ResourceInfo {
    all()
        .into_iter()
        .find(|i| i.group == group && i.version == version && i.plural == plural)
        .unwrap_or_else(|| panic!("{plural}.{group}/{version} is a builtin"))
}

/// A row of [`EXTRAS`].
type Extras = (
    &'static str,
    &'static str,
    &'static str,
    &'static [&'static str],
    &'static [&'static str],
);

fn headers(info: &ResourceInfo, wide: bool) -> Vec<String> {
    info.columns
        .iter()
        .filter(|c| wide || c.priority == 0)
        .map(|c| c.name.to_uppercase())
        .collect()
}

/// `kubectl api-resources` rows: name, short names, group/version, namespaced, kind.
#[rustfmt::skip]
const API_RESOURCES: &[(&str, &str, &str, bool, &str)] = &[
    ("limitranges", "limits", "v1", true, "LimitRange"),
    ("persistentvolumeclaims", "pvc", "v1", true, "PersistentVolumeClaim"),
    ("persistentvolumes", "pv", "v1", false, "PersistentVolume"),
    ("podtemplates", "", "v1", true, "PodTemplate"),
    ("replicationcontrollers", "rc", "v1", true, "ReplicationController"),
    ("resourcequotas", "quota", "v1", true, "ResourceQuota"),
    ("mutatingwebhookconfigurations", "", "admissionregistration.k8s.io/v1", false, "MutatingWebhookConfiguration"),
    ("validatingadmissionpolicies", "", "admissionregistration.k8s.io/v1", false, "ValidatingAdmissionPolicy"),
    ("validatingadmissionpolicybindings", "", "admissionregistration.k8s.io/v1", false, "ValidatingAdmissionPolicyBinding"),
    ("validatingwebhookconfigurations", "", "admissionregistration.k8s.io/v1", false, "ValidatingWebhookConfiguration"),
    ("apiservices", "", "apiregistration.k8s.io/v1", false, "APIService"),
    ("controllerrevisions", "", "apps/v1", true, "ControllerRevision"),
    ("daemonsets", "ds", "apps/v1", true, "DaemonSet"),
    ("deployments", "deploy", "apps/v1", true, "Deployment"),
    ("replicasets", "rs", "apps/v1", true, "ReplicaSet"),
    ("statefulsets", "sts", "apps/v1", true, "StatefulSet"),
    ("horizontalpodautoscalers", "hpa", "autoscaling/v2", true, "HorizontalPodAutoscaler"),
    ("cronjobs", "cj", "batch/v1", true, "CronJob"),
    ("jobs", "", "batch/v1", true, "Job"),
    ("certificatesigningrequests", "csr", "certificates.k8s.io/v1", false, "CertificateSigningRequest"),
    ("ingressclasses", "", "networking.k8s.io/v1", false, "IngressClass"),
    ("ingresses", "ing", "networking.k8s.io/v1", true, "Ingress"),
    ("networkpolicies", "netpol", "networking.k8s.io/v1", true, "NetworkPolicy"),
    ("poddisruptionbudgets", "pdb", "policy/v1", true, "PodDisruptionBudget"),
    ("priorityclasses", "pc", "scheduling.k8s.io/v1", false, "PriorityClass"),
    ("csistoragecapacities", "", "storage.k8s.io/v1", true, "CSIStorageCapacity"),
    ("storageclasses", "sc", "storage.k8s.io/v1", false, "StorageClass"),
    ("volumeattachments", "", "storage.k8s.io/v1", false, "VolumeAttachment"),
];

/// Group, version, plural, categories, subresources.
#[rustfmt::skip]
const EXTRAS: &[Extras] = &[
    ("apps", "v1", "deployments", &["all"], &["status", "scale"]),
    ("apps", "v1", "replicasets", &["all"], &["status", "scale"]),
    ("apps", "v1", "statefulsets", &["all"], &["status", "scale"]),
    ("apps", "v1", "daemonsets", &["all"], &["status"]),
    ("apps", "v1", "controllerrevisions", &[], &[]),
    ("", "v1", "replicationcontrollers", &["all"], &["status", "scale"]),
    ("batch", "v1", "jobs", &["all"], &["status"]),
    ("batch", "v1", "cronjobs", &["all"], &["status"]),
    ("autoscaling", "v2", "horizontalpodautoscalers", &["all"], &["status"]),
    ("policy", "v1", "poddisruptionbudgets", &[], &["status"]),
    ("certificates.k8s.io", "v1", "certificatesigningrequests", &[], &["approval", "status"]),
    ("apiregistration.k8s.io", "v1", "apiservices", &["api-extensions"], &["status"]),
    ("admissionregistration.k8s.io", "v1", "validatingwebhookconfigurations", &["api-extensions"], &[]),
    ("networking.k8s.io", "v1", "ingresses", &[], &["status"]),
    ("storage.k8s.io", "v1", "volumeattachments", &[], &["status"]),
    ("", "v1", "nodes", &[], &["status", "proxy"]),
];

/// Group, version, plural, and the `kubectl get` header.
#[rustfmt::skip]
const COLUMNS: &[(&str, &str, &str, &[&str])] = &[
    ("apps", "v1", "deployments", &["NAME", "READY", "UP-TO-DATE", "AVAILABLE", "AGE"]),
    ("apps", "v1", "replicasets", &["NAME", "DESIRED", "CURRENT", "READY", "AGE"]),
    ("apps", "v1", "statefulsets", &["NAME", "READY", "AGE"]),
    ("apps", "v1", "daemonsets", &["NAME", "DESIRED", "CURRENT", "READY", "UP-TO-DATE", "AVAILABLE", "NODE SELECTOR", "AGE"]),
    ("apps", "v1", "controllerrevisions", &["NAME", "CONTROLLER", "REVISION", "AGE"]),
    ("batch", "v1", "jobs", &["NAME", "STATUS", "COMPLETIONS", "DURATION", "AGE"]),
    ("batch", "v1", "cronjobs", &["NAME", "SCHEDULE", "TIMEZONE", "SUSPEND", "ACTIVE", "LAST SCHEDULE", "AGE"]),
    ("autoscaling", "v2", "horizontalpodautoscalers", &["NAME", "REFERENCE", "TARGETS", "MINPODS", "MAXPODS", "REPLICAS", "AGE"]),
    ("policy", "v1", "poddisruptionbudgets", &["NAME", "MIN AVAILABLE", "MAX UNAVAILABLE", "ALLOWED DISRUPTIONS", "AGE"]),
    ("", "v1", "persistentvolumes", &["NAME", "CAPACITY", "ACCESS MODES", "RECLAIM POLICY", "STATUS", "CLAIM", "STORAGECLASS", "VOLUMEATTRIBUTESCLASS", "REASON", "AGE"]),
    ("", "v1", "persistentvolumeclaims", &["NAME", "STATUS", "VOLUME", "CAPACITY", "ACCESS MODES", "STORAGECLASS", "VOLUMEATTRIBUTESCLASS", "AGE"]),
    ("", "v1", "limitranges", &["NAME", "CREATED AT"]),
    ("", "v1", "resourcequotas", &["NAME", "AGE", "REQUEST", "LIMIT"]),
    ("", "v1", "podtemplates", &["NAME", "CONTAINERS", "IMAGES", "POD LABELS"]),
    ("", "v1", "replicationcontrollers", &["NAME", "DESIRED", "CURRENT", "READY", "AGE"]),
    ("networking.k8s.io", "v1", "ingresses", &["NAME", "CLASS", "HOSTS", "ADDRESS", "PORTS", "AGE"]),
    ("networking.k8s.io", "v1", "ingressclasses", &["NAME", "CONTROLLER", "PARAMETERS", "AGE"]),
    ("networking.k8s.io", "v1", "networkpolicies", &["NAME", "POD-SELECTOR", "AGE"]),
    ("storage.k8s.io", "v1", "storageclasses", &["NAME", "PROVISIONER", "RECLAIMPOLICY", "VOLUMEBINDINGMODE", "ALLOWVOLUMEEXPANSION", "AGE"]),
    ("storage.k8s.io", "v1", "volumeattachments", &["NAME", "ATTACHER", "PV", "NODE", "ATTACHED", "AGE"]),
    ("storage.k8s.io", "v1", "csistoragecapacities", &["NAME", "STORAGECLASSNAME", "CAPACITY"]),
    ("scheduling.k8s.io", "v1", "priorityclasses", &["NAME", "VALUE", "GLOBAL-DEFAULT", "AGE", "PREEMPTIONPOLICY"]),
    ("certificates.k8s.io", "v1", "certificatesigningrequests", &["NAME", "AGE", "SIGNERNAME", "REQUESTOR", "REQUESTEDDURATION", "CONDITION"]),
    ("admissionregistration.k8s.io", "v1", "mutatingwebhookconfigurations", &["NAME", "WEBHOOKS", "AGE"]),
    ("admissionregistration.k8s.io", "v1", "validatingadmissionpolicies", &["NAME", "VALIDATIONS", "PARAMKIND", "AGE"]),
    ("admissionregistration.k8s.io", "v1", "validatingadmissionpolicybindings", &["NAME", "POLICYNAME", "PARAMREF", "AGE"]),
    ("apiregistration.k8s.io", "v1", "apiservices", &["NAME", "SERVICE", "AVAILABLE", "AGE"]),
];

#[test]
fn discovery_rows_match_kubectl_api_resources() {
    for (plural, short, api_version, namespaced, kind) in API_RESOURCES {
        let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
        let info = find(group, version, plural);
        assert_eq!(info.short_names.join(","), *short, "{plural}");
        assert_eq!(info.namespaced, *namespaced, "{plural}");
        assert_eq!(info.kind, *kind, "{plural}");
        assert_eq!(info.singular, kind.to_lowercase(), "{plural}");
        assert_eq!(info.list_kind, format!("{kind}List"), "{plural}");
        assert_eq!(info.verbs, super::super::ALL_VERBS, "{plural}");
    }
    // HorizontalPodAutoscalers are served as v1 too, with the same discovery data.
    let v1 = find("autoscaling", "v1", "horizontalpodautoscalers");
    assert_eq!(v1.store_resource(), "horizontalpodautoscalers.autoscaling");
    assert_eq!(v1.short_names, ["hpa"]);
    let bindings = find("", "v1", "bindings");
    assert_eq!(
        (bindings.kind.as_str(), bindings.namespaced),
        ("Binding", true)
    );
    assert_eq!(bindings.verbs, ["create"]);
}

#[test]
fn categories_and_subresources_are_kube_apiservers() {
    let cases = EXTRAS;
    for (group, version, plural, categories, subresources) in cases {
        let info = find(group, version, plural);
        assert_eq!(info.categories, *categories, "{plural}");
        assert_eq!(info.subresources, *subresources, "{plural}");
    }
}

#[test]
fn selectable_fields_are_the_registries_ones() {
    assert!(find("batch", "v1", "jobs").is_selectable("status.successful"));
    assert!(find("apps", "v1", "replicasets").is_selectable("status.replicas"));
    assert!(find("", "v1", "replicationcontrollers").is_selectable("status.replicas"));
    let csr = find("certificates.k8s.io", "v1", "certificatesigningrequests");
    assert!(csr.is_selectable("spec.signerName"));
    assert!(!find("apps", "v1", "deployments").is_selectable("status.replicas"));
}

#[test]
fn columns_match_kubectl_get() {
    let cases = COLUMNS;
    for (group, version, plural, want) in cases {
        assert_eq!(
            headers(&find(group, version, plural), false),
            *want,
            "{plural}"
        );
    }
    assert_eq!(
        headers(&find("apps", "v1", "deployments"), true)[5..],
        ["CONTAINERS", "IMAGES", "SELECTOR"]
    );
    assert_eq!(
        headers(&find("apps", "v1", "statefulsets"), true)[3..],
        ["CONTAINERS", "IMAGES"]
    );
}
