use serde_json::{Value, json};

use super::bootstrap::{self, Reconcile};
use super::*;

fn rule(v: Value) -> PolicyRule {
    serde_json::from_value(v).unwrap()
}

fn pods_in(verb_ns: &str) -> Request<'_> {
    Request::Resource {
        group: "",
        resource: "pods",
        subresource: None,
        namespace: verb_ns,
        name: "",
    }
}

fn res<'a>(group: &'a str, resource: &'a str, sub: Option<&'a str>, name: &'a str) -> Request<'a> {
    Request::Resource {
        group,
        resource,
        subresource: sub,
        namespace: "default",
        name,
    }
}

#[test]
fn a_rule_matches_verbs_groups_and_resources_with_wildcards() {
    let r = rule(json!({"verbs": ["get", "list"], "apiGroups": [""], "resources": ["pods"]}));
    assert!(r.allows("get", &pods_in("default")));
    assert!(!r.allows("delete", &pods_in("default")));
    assert!(!r.allows("get", &res("apps", "pods", None, "")));
    assert!(!r.allows("get", &res("", "secrets", None, "")));
    let any = rule(json!({"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}));
    assert!(any.allows(
        "deletecollection",
        &res("apps", "deployments", Some("scale"), "x")
    ));
    assert!(!any.allows("get", &Request::NonResource { path: "/api" }));
}

#[test]
fn subresources_match_as_resource_slash_sub_or_star_slash_sub() {
    let status =
        rule(json!({"verbs": ["update"], "apiGroups": [""], "resources": ["pods/status"]}));
    assert!(status.allows("update", &res("", "pods", Some("status"), "p")));
    assert!(!status.allows("update", &res("", "pods", None, "p")));
    assert!(!status.allows("update", &res("", "pods", Some("binding"), "p")));
    let parent = rule(json!({"verbs": ["update"], "apiGroups": [""], "resources": ["pods"]}));
    assert!(!parent.allows("update", &res("", "pods", Some("status"), "p")));
    let scale = rule(json!({"verbs": ["get"], "apiGroups": ["*"], "resources": ["*/scale"]}));
    assert!(scale.allows("get", &res("apps", "deployments", Some("scale"), "d")));
    assert!(!scale.allows("get", &res("apps", "deployments", None, "d")));
}

#[test]
fn resource_names_limit_a_rule_to_those_objects() {
    let r = rule(
        json!({"verbs": ["get"], "apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["a"]}),
    );
    assert!(r.allows("get", &res("", "configmaps", None, "a")));
    assert!(!r.allows("get", &res("", "configmaps", None, "b")));
    // A list names no object, so a rule with names never allows it.
    assert!(!r.allows("get", &res("", "configmaps", None, "")));
}

#[test]
fn non_resource_urls_match_exactly_or_by_a_trailing_star() {
    let r = rule(json!({"verbs": ["get"], "nonResourceURLs": ["/healthz", "/apis/*"]}));
    let path = |p| Request::NonResource { path: p };
    assert!(r.allows("get", &path("/healthz")));
    assert!(!r.allows("get", &path("/healthz/ping")));
    assert!(r.allows("get", &path("/apis/apps/v1")));
    assert!(!r.allows("get", &path("/apis")));
    assert!(!r.allows("post", &path("/healthz")));
    assert!(!r.allows("get", &pods_in("")));
    let all = rule(json!({"verbs": ["*"], "nonResourceURLs": ["*"]}));
    assert!(all.allows("get", &path("/openapi/v3")));
}

fn policy() -> Policy {
    let mut p = Policy::default();
    p.cluster_roles.insert(
        "reader".into(),
        vec![PolicyRule::resource(&["get", "list"], &[""], &["pods"])],
    );
    p.cluster_roles.insert(
        "health".into(),
        vec![PolicyRule::urls(&["get"], &["/healthz"])],
    );
    p.roles.insert(
        ("team".into(), "writer".into()),
        vec![PolicyRule::resource(&["create"], &[""], &["configmaps"])],
    );
    let binding = |v: Value| Binding::from_object(&v).unwrap();
    p.bindings = vec![
        binding(json!({"metadata": {"name": "w", "namespace": "team"},
            "roleRef": {"kind": "Role", "name": "writer"},
            "subjects": [{"kind": "ServiceAccount", "name": "bot"}]})),
        binding(json!({"metadata": {"name": "r", "namespace": "team"},
            "roleRef": {"kind": "ClusterRole", "name": "reader"},
            "subjects": [{"kind": "Group", "name": "devs"}]})),
        binding(json!({"metadata": {"name": "h"},
            "roleRef": {"kind": "ClusterRole", "name": "health"},
            "subjects": [{"kind": "User", "name": "alice"}]})),
        binding(
            json!({"metadata": {"name": "ns-health", "namespace": "team"},
            "roleRef": {"kind": "ClusterRole", "name": "health"},
            "subjects": [{"kind": "Group", "name": "devs"}]}),
        ),
    ];
    p
}

fn ask<'a>(
    user: &'a str,
    groups: &'a [String],
    verb: &'a str,
    request: Request<'a>,
) -> Attributes<'a> {
    Attributes {
        user,
        groups,
        verb,
        request,
    }
}

#[test]
fn a_role_binding_grants_only_in_its_namespace_to_its_subjects() {
    let p = policy();
    let bot = "system:serviceaccount:team:bot";
    let cm = |ns| Request::Resource {
        group: "",
        resource: "configmaps",
        subresource: None,
        namespace: ns,
        name: "",
    };
    let Decision::Allowed(why) = p.decide(&ask(bot, &[], "create", cm("team"))) else {
        panic!("the bot may create configmaps in team");
    };
    assert_eq!(
        why,
        "RBAC: allowed by RoleBinding \"w\" of Role \"writer\" to ServiceAccount \"team/bot\" in namespace \"team\""
    );
    assert_eq!(
        p.decide(&ask(bot, &[], "create", cm("other"))),
        Decision::NoOpinion
    );
    assert_eq!(
        p.decide(&ask(bot, &[], "create", cm(""))),
        Decision::NoOpinion
    );
    let other_bot = "system:serviceaccount:other:bot";
    assert_eq!(
        p.decide(&ask(other_bot, &[], "create", cm("team"))),
        Decision::NoOpinion
    );
    let devs = vec!["devs".to_owned()];
    assert!(matches!(
        p.decide(&ask("bob", &devs, "list", pods_in("team"))),
        Decision::Allowed(_)
    ));
    assert_eq!(
        p.decide(&ask("bob", &devs, "list", pods_in(""))),
        Decision::NoOpinion
    );
}

#[test]
fn only_cluster_role_bindings_grant_non_resource_urls() {
    let p = policy();
    let health = Request::NonResource { path: "/healthz" };
    assert!(matches!(
        p.decide(&ask("alice", &[], "get", health)),
        Decision::Allowed(_)
    ));
    let devs = vec!["devs".to_owned()];
    assert_eq!(
        p.decide(&ask("bob", &devs, "get", health)),
        Decision::NoOpinion
    );
    let rules = p.rules_for("bob", &devs, "team");
    assert_eq!(
        rules,
        vec![PolicyRule::resource(&["get", "list"], &[""], &["pods"])]
    );
}

#[test]
fn a_binding_to_a_missing_role_grants_nothing() {
    let mut p = policy();
    p.cluster_roles.remove("reader");
    let devs = vec!["devs".to_owned()];
    assert_eq!(
        p.decide(&ask("bob", &devs, "list", pods_in("team"))),
        Decision::NoOpinion
    );
}

fn labelled(name: &str, labels: Value, rules: Value) -> Value {
    json!({"metadata": {"name": name, "labels": labels}, "rules": rules})
}

#[test]
fn aggregation_takes_the_union_of_selected_roles_and_follows_chains() {
    let mut view = labelled(
        "view",
        json!({"rbac.authorization.k8s.io/aggregate-to-edit": "true"}),
        json!([]),
    );
    view["aggregationRule"] = json!({"clusterRoleSelectors": [{"matchLabels": {"rbac.authorization.k8s.io/aggregate-to-view": "true"}}]});
    let mut edit = labelled("edit", json!({}), json!([]));
    edit["aggregationRule"] = json!({"clusterRoleSelectors": [
        {"matchLabels": {"rbac.authorization.k8s.io/aggregate-to-edit": "true"}}]});
    let pods = json!({"verbs": ["get"], "apiGroups": [""], "resources": ["pods"]});
    let widgets =
        json!({"verbs": ["list"], "apiGroups": ["example.com"], "resources": ["widgets"]});
    let a = labelled(
        "a-view",
        json!({"rbac.authorization.k8s.io/aggregate-to-view": "true"}),
        json!([pods]),
    );
    let b = labelled(
        "b-view",
        json!({"rbac.authorization.k8s.io/aggregate-to-view": "true"}),
        json!([widgets, pods]),
    );
    let unrelated = labelled(
        "c",
        json!({"x": "y"}),
        json!([{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}]),
    );
    let changes = aggregate(&[view, edit, a, b, unrelated]);
    let want = vec![rule(pods.clone()), rule(widgets.clone())];
    assert_eq!(
        changes,
        vec![("edit".to_owned(), want.clone()), ("view".to_owned(), want)]
    );
}

#[test]
fn aggregation_changes_nothing_when_rules_already_match() {
    let pods = json!({"verbs": ["get"], "apiGroups": [""], "resources": ["pods"]});
    let mut view = labelled("view", json!({}), json!([pods]));
    view["aggregationRule"] = json!({"clusterRoleSelectors": [{"matchExpressions": [
        {"key": "agg", "operator": "In", "values": ["yes"]}]}]});
    let a = labelled("a", json!({"agg": "yes"}), json!([pods]));
    assert!(aggregate(&[view.clone(), a]).is_empty());
    // Its only source gone, the aggregated role is emptied.
    assert_eq!(aggregate(&[view]), vec![("view".to_owned(), vec![])]);
}

#[test]
fn label_selectors_support_match_labels_and_expressions() {
    let labels = json!({"a": "1", "b": "2"});
    let labels = labels.as_object().unwrap();
    assert!(selector_matches(&json!({}), labels));
    assert!(selector_matches(
        &json!({"matchLabels": {"a": "1"}}),
        labels
    ));
    assert!(!selector_matches(
        &json!({"matchLabels": {"a": "2"}}),
        labels
    ));
    let expr = |op: &str, values: Value| json!({"matchExpressions": [{"key": "b", "operator": op, "values": values}]});
    assert!(selector_matches(&expr("In", json!(["2", "3"])), labels));
    assert!(!selector_matches(&expr("NotIn", json!(["2"])), labels));
    assert!(selector_matches(&expr("Exists", json!([])), labels));
    assert!(!selector_matches(&expr("DoesNotExist", json!([])), labels));
    assert!(!selector_matches(&Value::Null, labels));
}

#[test]
fn coverage_takes_stars_literally() {
    let star = PolicyRule::resource(&["*"], &["*"], &["*"]);
    let pods = PolicyRule::resource(&["get"], &[""], &["pods"]);
    assert!(pods.covered_by(std::slice::from_ref(&star)));
    assert!(!star.covered_by(std::slice::from_ref(&pods)));
    let status = PolicyRule::resource(&["get"], &[""], &["pods/status"]);
    assert!(status.covered_by(&[PolicyRule::resource(&["get"], &[""], &["*/status"])]));
    let named = pods.clone().names(&["x"]);
    assert!(named.covered_by(std::slice::from_ref(&pods)));
    assert!(!pods.covered_by(&[named]));
    let health = PolicyRule::urls(&["get"], &["/healthz"]);
    assert!(health.covered_by(&[PolicyRule::urls(&["get"], &["/heal*"])]));
    assert!(!health.covered_by(&[pods]));
}

fn find<'a>(items: &'a [Value], name: &str) -> &'a Value {
    items
        .iter()
        .find(|i| i["metadata"]["name"] == name)
        .unwrap()
}

#[test]
fn bootstrap_objects_carry_the_autoupdate_annotation_and_defaults_label() {
    let roles = bootstrap::cluster_roles();
    for obj in roles
        .iter()
        .chain(&bootstrap::cluster_role_bindings())
        .chain(&bootstrap::roles())
    {
        let meta = &obj["metadata"];
        assert_eq!(meta["annotations"][bootstrap::AUTOUPDATE], "true", "{obj}");
        assert_eq!(
            meta["labels"][bootstrap::BOOTSTRAPPING],
            "rbac-defaults",
            "{obj}"
        );
    }
    assert_eq!(
        find(&roles, "edit")["metadata"]["labels"][bootstrap::AGGREGATE_TO_ADMIN],
        "true"
    );
    assert!(find(&roles, "admin")["aggregationRule"].is_object());
    for c in [
        "deployment-controller",
        "garbage-collector",
        "node-controller",
    ] {
        find(&roles, &format!("system:controller:{c}"));
    }
    // Every binding names a role that exists.
    for b in bootstrap::cluster_role_bindings() {
        find(&roles, b["roleRef"]["name"].as_str().unwrap());
    }
}

#[test]
fn the_bootstrap_policy_lets_anyone_authenticated_discover_and_review_itself() {
    let mut p = Policy::default();
    for role in bootstrap::cluster_roles() {
        p.cluster_roles.insert(
            role["metadata"]["name"].as_str().unwrap().into(),
            PolicyRule::of_role(&role),
        );
    }
    p.bindings = bootstrap::cluster_role_bindings()
        .iter()
        .filter_map(Binding::from_object)
        .collect();
    let sa = vec![
        AUTHENTICATED.to_owned(),
        "system:serviceaccounts".to_owned(),
    ];
    let anon = vec![UNAUTHENTICATED.to_owned()];
    let path = |p| Request::NonResource { path: p };
    let allowed = |d: Decision| matches!(d, Decision::Allowed(_));
    assert!(allowed(p.decide(&ask(
        "system:serviceaccount:a:b",
        &sa,
        "get",
        path("/apis/apps/v1")
    ))));
    assert!(!allowed(p.decide(&ask(
        ANONYMOUS,
        &anon,
        "get",
        path("/apis")
    ))));
    assert!(allowed(p.decide(&ask(
        ANONYMOUS,
        &anon,
        "get",
        path("/version")
    ))));
    let ssar = Request::Resource {
        group: "authorization.k8s.io",
        resource: "selfsubjectaccessreviews",
        subresource: None,
        namespace: "",
        name: "",
    };
    assert!(allowed(p.decide(&ask("x", &sa, "create", ssar))));
    assert!(!allowed(p.decide(&ask(
        "x",
        &sa,
        "list",
        pods_in("default")
    ))));
    let masters = vec!["system:masters".to_owned()];
    assert!(allowed(p.decide(&ask(
        "admin",
        &masters,
        "delete",
        pods_in("default")
    ))));
}

#[test]
fn reconciling_creates_missing_objects_and_adds_missing_rules_when_autoupdate() {
    let wanted = find(&bootstrap::cluster_roles(), "system:basic-user").clone();
    assert_eq!(
        bootstrap::reconcile_role(None, &wanted),
        Reconcile::Create(wanted.clone())
    );
    assert_eq!(
        bootstrap::reconcile_role(Some(&wanted), &wanted),
        Reconcile::Unchanged
    );
    // A rule taken away comes back; one added stays.
    let mut edited = wanted.clone();
    edited["rules"] = json!([{"verbs": ["create"], "apiGroups": ["authentication.k8s.io"], "resources": ["selfsubjectreviews"]},
                             {"verbs": ["get"], "apiGroups": [""], "resources": ["pods"]}]);
    let Reconcile::Update(fixed) = bootstrap::reconcile_role(Some(&edited), &wanted) else {
        panic!("the missing rule is added");
    };
    let rules = PolicyRule::of_role(&fixed);
    assert_eq!(rules.len(), 3);
    assert!(
        PolicyRule::of_role(&wanted)
            .iter()
            .all(|r| r.covered_by(&rules))
    );
    // Without autoupdate the administrator's version stays.
    edited["metadata"]["annotations"][bootstrap::AUTOUPDATE] = json!("false");
    assert_eq!(
        bootstrap::reconcile_role(Some(&edited), &wanted),
        Reconcile::Unchanged
    );
}

#[test]
fn reconciling_a_binding_adds_subjects_and_recreates_on_another_role() {
    let wanted = find(
        &bootstrap::cluster_role_bindings(),
        "system:public-info-viewer",
    )
    .clone();
    let mut edited = wanted.clone();
    edited["subjects"] = json!([{"kind": "User", "name": "carol"}]);
    let Reconcile::Update(fixed) = bootstrap::reconcile_binding(Some(&edited), &wanted) else {
        panic!("the missing subjects are added");
    };
    assert_eq!(fixed["subjects"].as_array().unwrap().len(), 3);
    edited["roleRef"]["name"] = json!("view");
    assert_eq!(
        bootstrap::reconcile_binding(Some(&edited), &wanted),
        Reconcile::Recreate(wanted.clone())
    );
}

#[test]
fn reconciling_an_aggregated_role_leaves_its_rules_to_aggregation() {
    let wanted = find(&bootstrap::cluster_roles(), "view").clone();
    let mut existing = wanted.clone();
    existing["rules"] = json!([{"verbs": ["get"], "apiGroups": [""], "resources": ["pods"]}]);
    assert_eq!(
        bootstrap::reconcile_role(Some(&existing), &wanted),
        Reconcile::Unchanged
    );
    existing["aggregationRule"]["clusterRoleSelectors"] = json!([]);
    let Reconcile::Update(fixed) = bootstrap::reconcile_role(Some(&existing), &wanted) else {
        panic!("the selector is restored");
    };
    assert_eq!(fixed["aggregationRule"], wanted["aggregationRule"]);
}

#[test]
fn the_bootstrap_view_edit_and_admin_roles_aggregate_as_in_kubernetes() {
    let roles = bootstrap::cluster_roles();
    let changes = aggregate(&roles);
    let rules = |name: &str| changes.iter().find(|(n, _)| n == name).unwrap().1.clone();
    let secrets = Request::Resource {
        group: "",
        resource: "secrets",
        subresource: None,
        namespace: "x",
        name: "",
    };
    let (view, edit, admin) = (rules("view"), rules("edit"), rules("admin"));
    assert!(!view.iter().any(|r| r.allows("list", &secrets)), "{view:?}");
    assert!(view.iter().any(|r| r.allows("list", &pods_in("x"))));
    assert!(edit.iter().any(|r| r.allows("create", &secrets)));
    assert!(
        admin
            .iter()
            .any(|r| r.allows("create", &res(GROUP, "rolebindings", None, "")))
    );
    assert!(
        !edit
            .iter()
            .any(|r| r.allows("create", &res(GROUP, "rolebindings", None, "")))
    );
}
