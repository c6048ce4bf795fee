//! The built-in resources, with kube-apiserver's discovery data, selectable fields and the
//! columns of its server-side printers (`pkg/printers/internalversion/printers.go`): the first
//! core kinds here, the others by area in the submodules.

use super::{ALL_VERBS, CREATION_TIMESTAMP_DESCRIPTION, Column, ResourceInfo};

mod admin;
mod cluster;
mod workloads;

/// Descriptions the template-based printers share.
const CONTAINERS_DESCRIPTION: &str = "Names of each container in the template.";
const IMAGES_DESCRIPTION: &str = "Images referenced by each container in the template.";

pub(super) fn all() -> Vec<ResourceInfo> {
    let mut all = vec![
        namespaces(),
        nodes(),
        pods(),
        configmaps(),
        secrets(),
        services(),
        endpoints(),
        serviceaccounts(),
        core_events(),
        events_k8s_io(),
        leases(),
        endpointslices(),
        customresourcedefinitions(),
        csidrivers(),
        csinodes(),
        runtimeclasses(),
        bindings(),
        componentstatuses(),
    ];
    all.extend(workloads::all());
    all.extend(cluster::all());
    all.extend(admin::all());
    all
}

/// The wide `Containers` and `Images` columns of kinds with a pod template, and the wide
/// `Selector` column described by `selector`.
fn template_columns(selector: Option<&str>) -> Vec<Column> {
    let mut columns = vec![
        Column::new("Containers", CONTAINERS_DESCRIPTION).wide(),
        Column::new("Images", IMAGES_DESCRIPTION).wide(),
    ];
    if let Some(description) = selector {
        columns.push(Column::new("Selector", description).wide());
    }
    columns
}

fn namespaces() -> ResourceInfo {
    let verbs: Vec<&str> = ALL_VERBS
        .iter()
        .copied()
        .filter(|v| *v != "deletecollection")
        .collect();
    ResourceInfo::new("", "v1", "Namespace", "namespaces", false)
        .short_names(&["ns"])
        .verbs(&verbs)
        .subresources(&["status", "finalize"])
        .selectable(&["status.phase"])
        .columns(vec![
            Column::name(),
            Column::new("Status", "The status of the namespace"),
            Column::age(),
        ])
}

fn nodes() -> ResourceInfo {
    ResourceInfo::new("", "v1", "Node", "nodes", false)
        .short_names(&["no"])
        // `proxy` answers that the node cannot be reached yet (no tunnel to the kubelet).
        .subresources(&["status", "proxy"])
        .selectable(&["spec.unschedulable"])
        .columns(vec![
            Column::name(),
            Column::new("Status", "The status of the node"),
            Column::new("Roles", "The roles of the node"),
            Column::age(),
            Column::new("Version", "Kubelet Version reported by the node."),
            Column::new("Internal-IP", "List of addresses reachable to the node.").wide(),
            Column::new("External-IP", "List of addresses reachable to the node.").wide(),
            Column::new("OS-Image", "OS Image reported by the node from /etc/os-release (e.g. Debian GNU/Linux 7 (wheezy)).").wide(),
            Column::new("Kernel-Version", "Kernel Version reported by the node from 'uname -r' (e.g. 3.16.0-0.bpo.4-amd64).").wide(),
            Column::new("Container-Runtime", "ContainerRuntime Version reported by the node through runtime remote API (e.g. containerd://1.4.2).").wide(),
        ])
}

fn pods() -> ResourceInfo {
    ResourceInfo::new("", "v1", "Pod", "pods", true)
        .short_names(&["po"])
        .categories(&["all"])
        // `log`, `exec`, `attach`, `portforward` and `proxy` answer that the node cannot be
        // reached yet (no tunnel to the kubelet).
        .subresources(&[
            "status",
            "binding",
            "eviction",
            "ephemeralcontainers",
            "log",
            "exec",
            "attach",
            "portforward",
            "proxy",
        ])
        .selectable(&[
            "spec.nodeName",
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "spec.hostNetwork",
            "status.phase",
            "status.podIP",
            "status.nominatedNodeName",
        ])
        .columns(vec![
            Column::name(),
            Column::new("Ready", "The aggregate readiness state of this pod for accepting traffic."),
            Column::new("Status", "The aggregate status of the containers in this pod."),
            Column::new("Restarts", "The number of times the containers in this pod have been restarted and when the last container in this pod has restarted."),
            Column::age(),
            Column::new("IP", "podIP address allocated to the pod. Routable at least within the cluster. Empty if not yet allocated.").wide(),
            Column::new("Node", "NodeName indicates in which node this pod is scheduled. If empty, this pod is a candidate for scheduling by the scheduler defined in schedulerName.").wide(),
            Column::new("Nominated Node", "nominatedNodeName is set only when this pod preempts other pods on the node, but it cannot be scheduled right away as preemption victims receive their graceful termination periods.").wide(),
            Column::new("Readiness Gates", "If specified, all readiness gates will be evaluated for pod readiness. More info: https://git.k8s.io/enhancements/keps/sig-network/580-pod-readiness-gates").wide(),
        ])
}

/// `POST bindings` binds the pod the body names (as `pods/{name}/binding` does); nothing is
/// stored under it.
fn bindings() -> ResourceInfo {
    ResourceInfo::new("", "v1", "Binding", "bindings", true).verbs(&["create"])
}

fn configmaps() -> ResourceInfo {
    ResourceInfo::new("", "v1", "ConfigMap", "configmaps", true)
        .short_names(&["cm"])
        .columns(vec![
            Column::name(),
            Column::new("Data", "Data contains the configuration data.").type_("integer"),
            Column::age(),
        ])
}

fn secrets() -> ResourceInfo {
    ResourceInfo::new("", "v1", "Secret", "secrets", true)
        .selectable(&["type"])
        .columns(vec![
            Column::name(),
            Column::new(
                "Type",
                "Used to facilitate programmatic handling of secret data.",
            ),
            Column::new("Data", "Data contains the secret data.").type_("integer"),
            Column::age(),
        ])
}

fn services() -> ResourceInfo {
    ResourceInfo::new("", "v1", "Service", "services", true)
        .short_names(&["svc"])
        .categories(&["all"])
        .subresources(&["status", "proxy"])
        .selectable(&["spec.clusterIP", "spec.type"])
        .columns(vec![
            Column::name(),
            Column::new("Type", "type determines how the Service is exposed."),
            Column::new("Cluster-IP", "clusterIP is the IP address of the service and is usually assigned randomly."),
            Column::new("External-IP", "externalIPs is a list of IP addresses for which nodes in the cluster will also accept traffic for this service."),
            Column::new("Port(s)", "The list of ports that are exposed by this service."),
            Column::age(),
            Column::new("Selector", "Route service traffic to pods with label keys and values matching this selector.").wide(),
        ])
}

fn endpoints() -> ResourceInfo {
    ResourceInfo::new("", "v1", "Endpoints", "endpoints", true)
        .short_names(&["ep"])
        .columns(vec![
            Column::name(),
            Column::new(
                "Endpoints",
                "Endpoints of the service, as ip:port (at most three).",
            ),
            Column::age(),
        ])
}

fn serviceaccounts() -> ResourceInfo {
    ResourceInfo::new("", "v1", "ServiceAccount", "serviceaccounts", true)
        .short_names(&["sa"])
        // TokenRequest.
        .subresources(&["token"])
        .columns(vec![
            Column::name(),
            Column::new("Secrets", "Secrets is a list of the secrets in the same namespace that pods running using this ServiceAccount are allowed to use.").type_("integer"),
            Column::age(),
        ])
}

/// Deprecated since 1.19, still served by kube-apiserver (`kubectl get cs`): computed on each
/// read from the control plane's health, never stored.
fn componentstatuses() -> ResourceInfo {
    ResourceInfo::new("", "v1", "ComponentStatus", "componentstatuses", false)
        .short_names(&["cs"])
        .verbs(&["get", "list"])
        .columns(vec![
            Column::name(),
            Column::new("Status", "Status of the component conditions"),
            Column::new("Message", "Message of the component conditions"),
            Column::new("Error", "Error of the component conditions"),
        ])
}

fn core_events() -> ResourceInfo {
    ResourceInfo::new("", "v1", "Event", "events", true)
        .short_names(&["ev"])
        .selectable(&[
            "involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.name",
            "involvedObject.uid",
            "involvedObject.apiVersion",
            "involvedObject.resourceVersion",
            "involvedObject.fieldPath",
            "reason",
            "reportingComponent",
            "source",
            "type",
        ])
        .columns(event_columns())
}

fn events_k8s_io() -> ResourceInfo {
    ResourceInfo::new("events.k8s.io", "v1", "Event", "events", true)
        .short_names(&["ev"])
        .columns(event_columns())
}

fn event_columns() -> Vec<Column> {
    vec![
        Column::new("Last Seen", "The last time this event was observed."),
        Column::new(
            "Type",
            "Type of this event (Normal, Warning), new types could be added in the future.",
        ),
        Column::new(
            "Reason",
            "This should be a short, machine understandable string that gives the reason for the transition into the object's current status.",
        ),
        Column::new("Object", "The object that this event is about."),
        Column::new(
            "Subobject",
            "The sub-object (a field path such as spec.containers{name}) this event is about.",
        )
        .wide(),
        Column::new("Source", "The component reporting this event.").wide(),
        Column::new(
            "Message",
            "A human-readable description of the status of this operation.",
        ),
        Column::new(
            "First Seen",
            "The time at which the event was first recorded.",
        )
        .wide(),
        Column::new("Count", "The number of times this event has occurred.")
            .type_("integer")
            .wide(),
        Column::name().wide(),
    ]
}

fn leases() -> ResourceInfo {
    ResourceInfo::new("coordination.k8s.io", "v1", "Lease", "leases", true).columns(vec![
        Column::name(),
        Column::new(
            "Holder",
            "holderIdentity contains the identity of the holder of a current lease.",
        ),
        Column::age(),
    ])
}

fn endpointslices() -> ResourceInfo {
    ResourceInfo::new(
        "discovery.k8s.io",
        "v1",
        "EndpointSlice",
        "endpointslices",
        true,
    )
    .columns(vec![
        Column::name(),
        Column::new(
            "AddressType",
            "addressType specifies the type of address carried by this EndpointSlice.",
        ),
        Column::new(
            "Ports",
            "ports specifies the list of network ports exposed by each endpoint in this slice.",
        ),
        Column::new(
            "Endpoints",
            "endpoints is a list of unique endpoints in this slice.",
        ),
        Column::age(),
    ])
}

fn customresourcedefinitions() -> ResourceInfo {
    ResourceInfo::new(
        "apiextensions.k8s.io",
        "v1",
        "CustomResourceDefinition",
        "customresourcedefinitions",
        false,
    )
    .short_names(&["crd", "crds"])
    .categories(&["api-extensions"])
    .subresources(&["status"])
    .columns(vec![
        Column::name(),
        Column::new("Created At", CREATION_TIMESTAMP_DESCRIPTION).type_("date"),
    ])
}

fn csidrivers() -> ResourceInfo {
    ResourceInfo::new("storage.k8s.io", "v1", "CSIDriver", "csidrivers", false).columns(vec![
        Column::name(),
        Column::new("AttachRequired", "attachRequired indicates this CSI volume driver requires an attach operation.").type_("boolean"),
        Column::new("PodInfoOnMount", "podInfoOnMount indicates this CSI volume driver requires additional pod information (like podName, podUID, etc.) during mount operations.").type_("boolean"),
        Column::new("StorageCapacity", "storageCapacity indicates that the CSI volume driver wants pod scheduling to consider the storage capacity that the driver deployment will report.").type_("boolean"),
        Column::new("TokenRequests", "tokenRequests indicates the CSI driver needs pods' service account tokens it is mounting volume for to do necessary authentication."),
        Column::new("RequiresRepublish", "requiresRepublish indicates the CSI driver wants NodePublishVolume being periodically called to reflect any possible change in the mounted volume.").type_("boolean"),
        Column::new("Modes", "volumeLifecycleModes defines what kind of volumes this CSI volume driver supports."),
        Column::age(),
    ])
}

fn csinodes() -> ResourceInfo {
    ResourceInfo::new("storage.k8s.io", "v1", "CSINode", "csinodes", false).columns(vec![
        Column::name(),
        Column::new(
            "Drivers",
            "drivers is a list of information of all CSI Drivers existing on a node.",
        )
        .type_("integer"),
        Column::age(),
    ])
}

fn runtimeclasses() -> ResourceInfo {
    ResourceInfo::new("node.k8s.io", "v1", "RuntimeClass", "runtimeclasses", false).columns(vec![
        Column::name(),
        Column::new("Handler", "handler specifies the underlying runtime and configuration that the CRI implementation will use to handle pods of this class."),
        Column::age(),
    ])
}

#[cfg(test)]
mod tests;
