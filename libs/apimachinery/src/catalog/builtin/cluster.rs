//! Storage, quotas, networking and scheduling: persistent volumes and claims, limit ranges and
//! resource quotas (core/v1), networking.k8s.io/v1, storage.k8s.io/v1 (beyond CSI drivers and
//! nodes) and scheduling.k8s.io/v1.

use super::super::{CREATION_TIMESTAMP_DESCRIPTION, Column, ResourceInfo};

pub(super) fn all() -> Vec<ResourceInfo> {
    vec![
        persistentvolumes(),
        persistentvolumeclaims(),
        limitranges(),
        resourcequotas(),
        ingresses(),
        ingressclasses(),
        networkpolicies(),
        storageclasses(),
        volumeattachments(),
        csistoragecapacities(),
        priorityclasses(),
    ]
}

fn persistentvolumes() -> ResourceInfo {
    ResourceInfo::new("", "v1", "PersistentVolume", "persistentvolumes", false)
        .short_names(&["pv"])
        .subresources(&["status"])
        .columns(vec![
            Column::name(),
            Column::new("Capacity", "capacity is the description of the persistent volume's resources and capacity."),
            Column::new("Access Modes", "accessModes contains all ways the volume can be mounted."),
            Column::new("Reclaim Policy", "persistentVolumeReclaimPolicy defines what happens to a persistent volume when released from its claim."),
            Column::new("Status", "phase indicates if a volume is available, bound to a claim, or released by a claim."),
            Column::new("Claim", "claimRef is part of a bi-directional binding between PersistentVolume and PersistentVolumeClaim."),
            Column::new("StorageClass", "StorageClass of the pv"),
            Column::new("VolumeAttributesClass", "VolumeAttributesClass of the pv"),
            Column::new("Reason", "reason is a brief CamelCase string that describes any failure and is meant for machine parsing and tidy display in the CLI."),
            Column::age(),
            Column::new("VolumeMode", "volumeMode defines if a volume is intended to be used with a formatted filesystem or to remain in raw block state.").wide(),
        ])
}

fn persistentvolumeclaims() -> ResourceInfo {
    ResourceInfo::new(
        "",
        "v1",
        "PersistentVolumeClaim",
        "persistentvolumeclaims",
        true,
    )
    .short_names(&["pvc"])
    .subresources(&["status"])
    .columns(vec![
        Column::name(),
        Column::new(
            "Status",
            "phase represents the current phase of PersistentVolumeClaim.",
        ),
        Column::new(
            "Volume",
            "volumeName is the binding reference to the PersistentVolume backing this claim.",
        ),
        Column::new(
            "Capacity",
            "capacity represents the actual resources of the underlying volume.",
        ),
        Column::new(
            "Access Modes",
            "accessModes contains the actual access modes the volume backing the PVC has.",
        ),
        Column::new("StorageClass", "StorageClass of the pvc"),
        Column::new("VolumeAttributesClass", "VolumeAttributesClass of the pvc"),
        Column::age(),
        Column::new(
            "VolumeMode",
            "volumeMode defines what type of volume is required by the claim.",
        )
        .wide(),
    ])
}

fn limitranges() -> ResourceInfo {
    ResourceInfo::new("", "v1", "LimitRange", "limitranges", true)
        .short_names(&["limits"])
        .columns(vec![
            Column::name(),
            Column::new("Created At", CREATION_TIMESTAMP_DESCRIPTION).type_("date"),
        ])
}

fn resourcequotas() -> ResourceInfo {
    ResourceInfo::new("", "v1", "ResourceQuota", "resourcequotas", true)
        .short_names(&["quota"])
        .subresources(&["status"])
        .columns(vec![
            Column::name(),
            Column::age(),
            Column::new("Request", "Request represents a minimum amount of cpu/memory that a container may consume."),
            Column::new("Limit", "Limits control the maximum amount of cpu/memory that a container may use independent of contention on the node."),
        ])
}

fn ingresses() -> ResourceInfo {
    ResourceInfo::new("networking.k8s.io", "v1", "Ingress", "ingresses", true)
        .short_names(&["ing"])
        .subresources(&["status"])
        .columns(vec![
            Column::name(),
            Column::new("Class", "The name of the IngressClass resource that should be used for additional configuration"),
            Column::new("Hosts", "Hosts that incoming requests are matched against before the ingress rule"),
            Column::new("Address", "Address is a list containing ingress points for the load-balancer"),
            Column::new("Ports", "Ports of TLS configurations that open"),
            Column::age(),
        ])
}

fn ingressclasses() -> ResourceInfo {
    ResourceInfo::new(
        "networking.k8s.io",
        "v1",
        "IngressClass",
        "ingressclasses",
        false,
    )
    .columns(vec![
        Column::name(),
        Column::new(
            "Controller",
            "Controller that is responsible for handling this class",
        ),
        Column::new(
            "Parameters",
            "A reference to a resource with additional parameters",
        ),
        Column::age(),
    ])
}

fn networkpolicies() -> ResourceInfo {
    ResourceInfo::new(
        "networking.k8s.io",
        "v1",
        "NetworkPolicy",
        "networkpolicies",
        true,
    )
    .short_names(&["netpol"])
    .columns(vec![
        Column::name(),
        Column::new(
            "Pod-Selector",
            "podSelector selects the pods to which this NetworkPolicy object applies.",
        ),
        Column::age(),
    ])
}

fn storageclasses() -> ResourceInfo {
    ResourceInfo::new("storage.k8s.io", "v1", "StorageClass", "storageclasses", false)
        .short_names(&["sc"])
        .columns(vec![
            Column::name(),
            Column::new("Provisioner", "provisioner indicates the type of the provisioner."),
            Column::new("ReclaimPolicy", "reclaimPolicy controls the reclaimPolicy for dynamically provisioned PersistentVolumes of this storage class."),
            Column::new("VolumeBindingMode", "volumeBindingMode indicates how PersistentVolumeClaims should be provisioned and bound."),
            Column::new("AllowVolumeExpansion", "allowVolumeExpansion shows whether the storage class allow volume expand."),
            Column::age(),
        ])
}

fn volumeattachments() -> ResourceInfo {
    ResourceInfo::new(
        "storage.k8s.io",
        "v1",
        "VolumeAttachment",
        "volumeattachments",
        false,
    )
    .subresources(&["status"])
    .columns(vec![
        Column::name(),
        Column::new(
            "Attacher",
            "attacher indicates the name of the volume driver that MUST handle this request.",
        )
        .format("name"),
        Column::new(
            "PV",
            "persistentVolumeName represents the name of the persistent volume to attach.",
        ),
        Column::new(
            "Node",
            "nodeName represents the node that the volume should be attached to.",
        ),
        Column::new(
            "Attached",
            "attached indicates the volume is successfully attached.",
        )
        .type_("boolean"),
        Column::age(),
    ])
}

fn csistoragecapacities() -> ResourceInfo {
    ResourceInfo::new(
        "storage.k8s.io",
        "v1",
        "CSIStorageCapacity",
        "csistoragecapacities",
        true,
    )
    .columns(vec![
        Column::name(),
        Column::new(
            "StorageClassName",
            "storageClassName represents the name of the StorageClass that the reported capacity applies to.",
        ),
        Column::new(
            "Capacity",
            "capacity is the value reported by the CSI driver in its GetCapacityResponse for a GetCapacityRequest with topology and parameters that match the previous fields.",
        ),
    ])
}

fn priorityclasses() -> ResourceInfo {
    ResourceInfo::new("scheduling.k8s.io", "v1", "PriorityClass", "priorityclasses", false)
        .short_names(&["pc"])
        .columns(vec![
            Column::name(),
            Column::new("Value", "value represents the integer value of this priority class.").type_("integer"),
            Column::new("Global-Default", "globalDefault specifies whether this PriorityClass should be considered as the default priority for pods that do not have any priority class.").type_("boolean"),
            Column::age(),
            Column::new("PreemptionPolicy", "preemptionPolicy is the Policy for preempting pods with lower priority."),
        ])
}
