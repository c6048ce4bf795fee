//! kube-apiserver's validation of the RBAC kinds (`pkg/apis/rbac/validation`): every rule has
//! verbs and either resources (with API groups) or non-resource URLs (never both, and never in
//! a namespaced Role); a binding's `roleRef` names a role of a kind it may bind and cannot
//! change; each subject has a known kind and a name (and a namespace, for a service account
//! in a ClusterRoleBinding).

use serde_json::Value;

use super::GROUP;
use crate::validation::FieldError;

/// The errors of a Role, ClusterRole, RoleBinding or ClusterRoleBinding (`kind`), all of them.
pub fn validate(kind: &str, obj: &Value) -> Vec<FieldError> {
    match kind {
        "Role" | "ClusterRole" => rules(obj, kind == "Role"),
        "RoleBinding" | "ClusterRoleBinding" => binding(obj, kind == "RoleBinding"),
        _ => Vec::new(),
    }
}

/// The error of an update that changes a binding's `roleRef`.
pub fn validate_update(kind: &str, next: &Value, current: &Value) -> Vec<FieldError> {
    let binding = matches!(kind, "RoleBinding" | "ClusterRoleBinding");
    if binding && next["roleRef"] != current["roleRef"] {
        return vec![FieldError::invalid(
            "roleRef",
            &next["roleRef"],
            "cannot change roleRef",
        )];
    }
    Vec::new()
}

fn rules(obj: &Value, namespaced: bool) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let Some(rules) = obj["rules"].as_array() else {
        return errs;
    };
    for (i, rule) in rules.iter().enumerate() {
        let at = |f: &str| format!("rules[{i}].{f}");
        let count = |f: &str| rule[f].as_array().map_or(0, Vec::len);
        if count("verbs") == 0 {
            errs.push(FieldError::required(
                at("verbs"),
                "verbs must contain at least one value",
            ));
        }
        if count("nonResourceURLs") > 0 {
            if namespaced {
                let why = "namespaced rules cannot apply to non-resource URLs";
                errs.push(FieldError::invalid(
                    at("nonResourceURLs"),
                    &rule["nonResourceURLs"],
                    why,
                ));
            }
            if count("apiGroups") > 0 || count("resources") > 0 || count("resourceNames") > 0 {
                let why = "rules cannot apply to both regular resources and non-resource URLs";
                errs.push(FieldError::invalid(
                    at("nonResourceURLs"),
                    &rule["nonResourceURLs"],
                    why,
                ));
            }
            continue;
        }
        if count("apiGroups") == 0 {
            let why = "resource rules must supply at least one api group";
            errs.push(FieldError::required(at("apiGroups"), why));
        }
        if count("resources") == 0 {
            let why = "resource rules must supply at least one resource";
            errs.push(FieldError::required(at("resources"), why));
        }
    }
    errs
}

fn binding(obj: &Value, namespaced: bool) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let role_ref = &obj["roleRef"];
    let kinds: &[&str] = match namespaced {
        true => &["Role", "ClusterRole"],
        false => &["ClusterRole"],
    };
    if role_ref["apiGroup"].as_str() != Some(GROUP) {
        errs.push(FieldError::unsupported(
            "roleRef.apiGroup",
            &role_ref["apiGroup"],
            &[GROUP],
        ));
    }
    if !role_ref["kind"]
        .as_str()
        .is_some_and(|k| kinds.contains(&k))
    {
        errs.push(FieldError::unsupported(
            "roleRef.kind",
            &role_ref["kind"],
            kinds,
        ));
    }
    if role_ref["name"].as_str().is_none_or(str::is_empty) {
        errs.push(FieldError::required("roleRef.name", ""));
    }
    let subjects = obj["subjects"].as_array().map_or(&[][..], Vec::as_slice);
    for (i, subject) in subjects.iter().enumerate() {
        let at = |f: &str| format!("subjects[{i}].{f}");
        if subject["name"].as_str().is_none_or(str::is_empty) {
            errs.push(FieldError::required(at("name"), ""));
        }
        match subject["kind"].as_str() {
            Some("ServiceAccount") => {
                let ns = subject["namespace"].as_str().unwrap_or_default();
                if ns.is_empty() && !namespaced {
                    errs.push(FieldError::required(at("namespace"), ""));
                }
            }
            Some("User" | "Group") => {
                if subject["apiGroup"].as_str() != Some(GROUP) {
                    errs.push(FieldError::unsupported(
                        at("apiGroup"),
                        &subject["apiGroup"],
                        &[GROUP],
                    ));
                }
            }
            _ => errs.push(FieldError::unsupported(
                at("kind"),
                &subject["kind"],
                &["ServiceAccount", "User", "Group"],
            )),
        }
    }
    errs
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn fields(errs: &[FieldError]) -> Vec<&str> {
        errs.iter().map(|e| e.field.as_str()).collect()
    }

    #[test]
    fn a_rule_needs_verbs_and_resources_with_groups_or_urls_but_not_both() {
        let role = json!({"rules": [
            {"verbs": [], "apiGroups": [""], "resources": ["pods"]},
            {"verbs": ["get"], "resources": ["pods"]},
            {"verbs": ["get"], "nonResourceURLs": ["/x"], "resources": ["pods"]},
            {"verbs": ["get"], "nonResourceURLs": ["/healthz"]},
        ]});
        let errs = validate("ClusterRole", &role);
        assert_eq!(
            fields(&errs),
            [
                "rules[0].verbs",
                "rules[1].apiGroups",
                "rules[2].nonResourceURLs"
            ]
        );
        assert_eq!(
            errs[0].why,
            "Required value: verbs must contain at least one value"
        );
        let namespaced = validate(
            "Role",
            &json!({"rules": [{"verbs": ["get"], "nonResourceURLs": ["/x"]}]}),
        );
        assert_eq!(
            namespaced[0].why,
            "Invalid value: [\"/x\"]: namespaced rules cannot apply to non-resource URLs"
        );
    }

    #[test]
    fn a_binding_needs_a_role_it_may_bind_and_known_subjects() {
        let binding = json!({
            "roleRef": {"apiGroup": GROUP, "kind": "Role", "name": "r"},
            "subjects": [{"kind": "ServiceAccount", "name": "bot"},
                         {"kind": "Robot", "name": "x"},
                         {"kind": "User", "apiGroup": GROUP}],
        });
        assert_eq!(
            fields(&validate("RoleBinding", &binding)),
            ["subjects[1].kind", "subjects[2].name"]
        );
        assert_eq!(
            fields(&validate("ClusterRoleBinding", &binding)),
            [
                "roleRef.kind",
                "subjects[0].namespace",
                "subjects[1].kind",
                "subjects[2].name"
            ]
        );
        assert_eq!(
            fields(&validate("RoleBinding", &json!({}))),
            ["roleRef.apiGroup", "roleRef.kind", "roleRef.name"]
        );
    }

    #[test]
    fn a_binding_role_ref_cannot_change() {
        let a = json!({"roleRef": {"apiGroup": GROUP, "kind": "ClusterRole", "name": "view"}});
        let b = json!({"roleRef": {"apiGroup": GROUP, "kind": "ClusterRole", "name": "edit"}});
        assert!(validate_update("RoleBinding", &a, &a).is_empty());
        assert_eq!(validate_update("RoleBinding", &b, &a)[0].field, "roleRef");
    }
}
