//! Cluster administration: certificates.k8s.io/v1, admissionregistration.k8s.io/v1 and
//! apiregistration.k8s.io/v1. Admission configurations and API services are stored only: no
//! webhook is called, no policy evaluated, no API aggregated.

use super::super::{Column, ResourceInfo};

/// The category kube-apiserver gives the kinds that extend the API.
const API_EXTENSIONS: &[&str] = &["api-extensions"];

pub(super) fn all() -> Vec<ResourceInfo> {
    vec![
        certificatesigningrequests(),
        webhook_configurations(
            "MutatingWebhookConfiguration",
            "mutatingwebhookconfigurations",
        ),
        webhook_configurations(
            "ValidatingWebhookConfiguration",
            "validatingwebhookconfigurations",
        ),
        validatingadmissionpolicies(),
        validatingadmissionpolicybindings(),
        apiservices(),
    ]
}

fn certificatesigningrequests() -> ResourceInfo {
    ResourceInfo::new(
        "certificates.k8s.io",
        "v1",
        "CertificateSigningRequest",
        "certificatesigningrequests",
        false,
    )
    .short_names(&["csr"])
    .subresources(&["approval", "status"])
    .selectable(&["spec.signerName"])
    .columns(vec![
        Column::name(),
        Column::age(),
        Column::new(
            "SignerName",
            "signerName indicates the requested signer, and is a qualified name.",
        ),
        Column::new(
            "Requestor",
            "username contains the name of the user that created the CertificateSigningRequest.",
        ),
        Column::new(
            "RequestedDuration",
            "expirationSeconds is the requested duration of validity of the issued certificate.",
        ),
        Column::new(
            "Condition",
            "conditions applied to the request. Known conditions are \"Approved\", \"Denied\", and \"Failed\".",
        ),
    ])
}

fn webhook_configurations(kind: &str, plural: &str) -> ResourceInfo {
    ResourceInfo::new("admissionregistration.k8s.io", "v1", kind, plural, false)
        .categories(API_EXTENSIONS)
        .columns(vec![
            Column::name(),
            Column::new(
                "Webhooks",
                "Webhooks indicates the number of webhooks registered in this configuration",
            )
            .type_("integer"),
            Column::age(),
        ])
}

fn validatingadmissionpolicies() -> ResourceInfo {
    ResourceInfo::new(
        "admissionregistration.k8s.io",
        "v1",
        "ValidatingAdmissionPolicy",
        "validatingadmissionpolicies",
        false,
    )
    .categories(API_EXTENSIONS)
    .subresources(&["status"])
    .columns(vec![
        Column::name(),
        Column::new(
            "Validations",
            "Validations indicates the number of validation rules defined in this configuration",
        )
        .type_("integer"),
        Column::new(
            "ParamKind",
            "ParamKind specifies the kind of resources used to parameterize this policy",
        ),
        Column::age(),
    ])
}

fn validatingadmissionpolicybindings() -> ResourceInfo {
    ResourceInfo::new(
        "admissionregistration.k8s.io",
        "v1",
        "ValidatingAdmissionPolicyBinding",
        "validatingadmissionpolicybindings",
        false,
    )
    .categories(API_EXTENSIONS)
    .columns(vec![
        Column::name(),
        Column::new(
            "PolicyName",
            "PolicyName references a ValidatingAdmissionPolicy name which the ValidatingAdmissionPolicyBinding binds to.",
        ),
        Column::new(
            "ParamRef",
            "ParamRef specifies the parameter resource used to configure the admission control policy.",
        ),
        Column::age(),
    ])
}

/// kube-aggregator's table: `Name`, `Service`, `Available`, `Age`.
fn apiservices() -> ResourceInfo {
    ResourceInfo::new(
        "apiregistration.k8s.io",
        "v1",
        "APIService",
        "apiservices",
        false,
    )
    .categories(API_EXTENSIONS)
    .subresources(&["status"])
    .columns(vec![
        Column::name(),
        Column::new(
            "Service",
            "The reference to the service that hosts this API endpoint.",
        ),
        Column::new("Available", "Whether this service is available."),
        Column::age(),
    ])
}
