//! Cells of the RBAC kinds, as kube-apiserver prints them: roles show when they were created;
//! bindings their role (`ClusterRole/view`) and, wide, their users, groups and service
//! accounts (`namespace/name`).

use serde_json::Value;

use super::{created_at, text};

/// The cells of a Role, ClusterRole, RoleBinding or ClusterRoleBinding.
pub(super) fn print(obj: &Value) -> Vec<(&'static str, Value)> {
    if obj.get("roleRef").is_none() {
        return vec![("Created At", created_at(obj))];
    }
    let role = format!(
        "{}/{}",
        text(obj, "/roleRef/kind"),
        text(obj, "/roleRef/name")
    );
    vec![
        ("Role", Value::from(role)),
        ("Users", Value::from(subjects(obj, "User"))),
        ("Groups", Value::from(subjects(obj, "Group"))),
        (
            "ServiceAccounts",
            Value::from(subjects(obj, "ServiceAccount")),
        ),
    ]
}

/// The names of the subjects of `kind`, comma-separated (service accounts as
/// `namespace/name`).
fn subjects(obj: &Value, kind: &str) -> String {
    let Some(subjects) = obj["subjects"].as_array() else {
        return String::new();
    };
    subjects
        .iter()
        .filter(|s| s["kind"] == kind)
        .map(|s| {
            let name = s["name"].as_str().unwrap_or_default();
            match kind {
                "ServiceAccount" => {
                    format!("{}/{name}", s["namespace"].as_str().unwrap_or_default())
                }
                _ => name.to_owned(),
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_binding_prints_its_role_and_subjects_by_kind() {
        let binding = json!({
            "metadata": {"name": "b"},
            "roleRef": {"kind": "ClusterRole", "name": "view"},
            "subjects": [{"kind": "User", "name": "alice"}, {"kind": "Group", "name": "devs"},
                         {"kind": "ServiceAccount", "name": "bot", "namespace": "team"},
                         {"kind": "User", "name": "bob"}],
        });
        let cells = print(&binding);
        assert_eq!(
            cells,
            vec![
                ("Role", json!("ClusterRole/view")),
                ("Users", json!("alice, bob")),
                ("Groups", json!("devs")),
                ("ServiceAccounts", json!("team/bot")),
            ]
        );
    }

    #[test]
    fn a_role_prints_when_it_was_created() {
        let role = json!({"metadata": {"name": "r", "creationTimestamp": "2024-01-02T03:04:05Z"}});
        assert_eq!(
            print(&role),
            vec![("Created At", json!("2024-01-02T03:04:05Z"))]
        );
    }
}
