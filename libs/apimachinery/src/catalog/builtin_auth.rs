//! The RBAC resources (`rbac.authorization.k8s.io/v1`) and the review resources
//! (`authorization.k8s.io/v1`, `authentication.k8s.io/v1`), with kube-apiserver's discovery
//! data and printer columns. The reviews are create-only: answered, never stored.

use super::{CREATION_TIMESTAMP_DESCRIPTION, Column, ResourceInfo};

pub(super) fn all() -> Vec<ResourceInfo> {
    vec![
        rbac("ClusterRole", "clusterroles", false),
        rbac("ClusterRoleBinding", "clusterrolebindings", false),
        rbac("Role", "roles", true),
        rbac("RoleBinding", "rolebindings", true),
        review(
            "authorization.k8s.io",
            "SubjectAccessReview",
            "subjectaccessreviews",
            false,
        ),
        review(
            "authorization.k8s.io",
            "SelfSubjectAccessReview",
            "selfsubjectaccessreviews",
            false,
        ),
        review(
            "authorization.k8s.io",
            "SelfSubjectRulesReview",
            "selfsubjectrulesreviews",
            false,
        ),
        review(
            "authorization.k8s.io",
            "LocalSubjectAccessReview",
            "localsubjectaccessreviews",
            true,
        ),
        review(
            "authentication.k8s.io",
            "TokenReview",
            "tokenreviews",
            false,
        ),
        review(
            "authentication.k8s.io",
            "SelfSubjectReview",
            "selfsubjectreviews",
            false,
        ),
    ]
}

fn rbac(kind: &str, plural: &str, namespaced: bool) -> ResourceInfo {
    let columns = match kind.ends_with("Binding") {
        true => vec![
            Column::name(),
            Column::new("Role", "Role used for this binding."),
            Column::age(),
            Column::new("Users", "Users in the binding").wide(),
            Column::new("Groups", "Groups in the binding").wide(),
            Column::new("ServiceAccounts", "ServiceAccounts in the binding").wide(),
        ],
        false => vec![
            Column::name(),
            Column::new("Created At", CREATION_TIMESTAMP_DESCRIPTION).type_("date"),
        ],
    };
    ResourceInfo::new("rbac.authorization.k8s.io", "v1", kind, plural, namespaced).columns(columns)
}

fn review(group: &str, kind: &str, plural: &str, namespaced: bool) -> ResourceInfo {
    ResourceInfo::new(group, "v1", kind, plural, namespaced).verbs(&["create"])
}
