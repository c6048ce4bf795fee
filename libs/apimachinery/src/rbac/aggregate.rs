//! ClusterRole aggregation, as kube-controller-manager's clusterrole-aggregation controller
//! does it: a ClusterRole with an `aggregationRule` holds the union of the rules of every other
//! ClusterRole one of its `clusterRoleSelectors` selects (roles taken in name order, each rule
//! once), and nothing else.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use super::PolicyRule;

/// Aggregation chains (`edit` is aggregated into `admin`) are followed this many times at most.
const MAX_ROUNDS: usize = 8;

/// The ClusterRoles among `cluster_roles` whose rules must change, with their new rules, once
/// every aggregation (chains included) has settled.
pub fn aggregate(cluster_roles: &[Value]) -> Vec<(String, Vec<PolicyRule>)> {
    let mut roles: BTreeMap<String, (&Value, Vec<PolicyRule>)> = cluster_roles
        .iter()
        .map(|r| (name(r).to_owned(), (r, PolicyRule::of_role(r))))
        .collect();
    let mut changed: BTreeMap<String, Vec<PolicyRule>> = BTreeMap::new();
    for _ in 0..MAX_ROUNDS {
        let mut round = Vec::new();
        for (name, (role, rules)) in &roles {
            let Some(selectors) = role["aggregationRule"]["clusterRoleSelectors"].as_array() else {
                continue;
            };
            let wanted = union(name, selectors, &roles);
            if &wanted != rules {
                round.push((name.clone(), wanted));
            }
        }
        if round.is_empty() {
            break;
        }
        for (name, rules) in round {
            if let Some(entry) = roles.get_mut(&name) {
                entry.1 = rules.clone();
            }
            changed.insert(name, rules);
        }
    }
    changed.into_iter().collect()
}

/// Whether a `metav1.LabelSelector` (`matchLabels`, `matchExpressions` with `In`, `NotIn`,
/// `Exists`, `DoesNotExist`) selects `labels`. An empty selector selects everything; one that
/// does not parse selects nothing.
pub fn selector_matches(selector: &Value, labels: &Map<String, Value>) -> bool {
    let Some(selector) = selector.as_object() else {
        return false;
    };
    let label = |key: &str| labels.get(key).and_then(Value::as_str);
    let by_label = selector
        .get("matchLabels")
        .and_then(Value::as_object)
        .is_none_or(|m| {
            m.iter()
                .all(|(k, v)| v.as_str().is_some() && label(k) == v.as_str())
        });
    let by_expression = selector
        .get("matchExpressions")
        .and_then(Value::as_array)
        .is_none_or(|exprs| exprs.iter().all(|e| expression_matches(e, &label)));
    by_label && by_expression
}

fn expression_matches<'v>(expr: &Value, label: &dyn Fn(&str) -> Option<&'v str>) -> bool {
    let key = expr["key"].as_str().unwrap_or_default();
    let values: Vec<&str> = expr["values"]
        .as_array()
        .map(|v| v.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let value = label(key);
    match expr["operator"].as_str() {
        Some("In") => value.is_some_and(|v| values.contains(&v)),
        Some("NotIn") => !value.is_some_and(|v| values.contains(&v)),
        Some("Exists") => value.is_some(),
        Some("DoesNotExist") => value.is_none(),
        _ => false,
    }
}

/// The union of the rules of the roles (other than `own`) any selector selects.
fn union(
    own: &str,
    selectors: &[Value],
    roles: &BTreeMap<String, (&Value, Vec<PolicyRule>)>,
) -> Vec<PolicyRule> {
    let mut rules: Vec<PolicyRule> = Vec::new();
    for selector in selectors {
        for (name, (role, role_rules)) in roles {
            let labels = role["metadata"]["labels"].as_object();
            let empty = Map::new();
            if name == own || !selector_matches(selector, labels.unwrap_or(&empty)) {
                continue;
            }
            for rule in role_rules {
                if !rules.contains(rule) {
                    rules.push(rule.clone());
                }
            }
        }
    }
    rules
}

fn name(role: &Value) -> &str {
    role["metadata"]["name"].as_str().unwrap_or_default()
}
