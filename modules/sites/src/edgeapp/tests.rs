use serde_json::{Value, json};

use super::image::{Component, ImageRef, Operator};
use super::plan::{self, Plan};
use super::types::{AVAILABLE, EdgeApplication, ManifestStatus, PROCESSING, ResourceIdentifier};
use super::{EDGEAPP_LABEL, TARGET_LABEL, overrides};
use crate::{BELONGING_TO, RANGE_NODEGROUP, SERVICE_TOPOLOGY};

fn app(manifests: Value, scope: Value) -> EdgeApplication {
    serde_json::from_value(json!({
        "metadata": {"name": "web", "namespace": "shop", "uid": "u-1"},
        "spec": {"workloadTemplate": {"manifests": manifests}, "workloadScope": scope},
    }))
    .unwrap()
}

fn deployment(name: &str) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": {"containers": [
                {"name": "app", "image": "registry.local/web:1.0", "args": ["--a", "--b"],
                 "env": [{"name": "A", "value": "1"}]},
                {"name": "side", "image": "busybox"}]}}}})
}

fn service(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name},
        "spec": {"selector": {"app": name}, "ports": [{"port": 80}]}})
}

fn groups(names: &[&str]) -> Value {
    json!({"targetNodeGroups": names.iter().map(|n| json!({"name": n})).collect::<Vec<_>>()})
}

fn by_name<'a>(plan: &'a Plan, name: &str) -> &'a Value {
    &plan
        .desired
        .iter()
        .find(|d| d.id.name == name)
        .unwrap_or_else(|| panic!("{name} is planned: {plan:#?}"))
        .object
}

fn image(s: &str, component: Component, op: Operator, value: &str) -> String {
    let mut i = ImageRef::parse(s).unwrap();
    i.apply(component, op, value).unwrap();
    i.to_string()
}

fn overridden(overriders: Value) -> Result<Value, String> {
    let mut obj = deployment("web");
    let o = serde_json::from_value(overriders).unwrap();
    overrides::apply(&mut obj, &o).map(|_| obj).map_err(|p| p.0)
}

#[test]
fn image_references_split_into_registry_repository_and_tag() {
    let cases = [
        ("nginx", None, "nginx", None),
        ("nginx:1.25", None, "nginx", Some(":1.25")),
        (
            "library/nginx:latest",
            None,
            "library/nginx",
            Some(":latest"),
        ),
        (
            "k8s.gcr.io/kube-apiserver:v1.19.1",
            Some("k8s.gcr.io"),
            "kube-apiserver",
            Some(":v1.19.1"),
        ),
        (
            "fictional.registry.example:10443/fictional/nginx",
            Some("fictional.registry.example:10443"),
            "fictional/nginx",
            None,
        ),
        (
            "localhost/app@sha256:abc",
            Some("localhost"),
            "app",
            Some("@sha256:abc"),
        ),
    ];
    for (s, registry, repository, tag) in cases {
        let i = ImageRef::parse(s).unwrap();
        assert_eq!(i.registry.as_deref(), registry, "{s}");
        assert_eq!(i.repository, repository, "{s}");
        assert_eq!(i.tag.as_deref(), tag, "{s}");
        assert_eq!(i.to_string(), s, "round trip");
    }
    assert!(ImageRef::parse("").is_err());
    assert!(ImageRef::parse("a b").is_err());
}

#[test]
fn each_operator_changes_each_image_component() {
    use Component::*;
    use Operator::*;
    let s = "registry.local/team/web:1.0";
    assert_eq!(
        image(s, Registry, Replace, "hangzhou.registry.io"),
        "hangzhou.registry.io/team/web:1.0"
    );
    assert_eq!(
        image(s, Registry, Add, ":5000"),
        "registry.local:5000/team/web:1.0"
    );
    assert_eq!(image(s, Registry, Remove, ""), "team/web:1.0");
    assert_eq!(
        image("nginx", Registry, Add, "mirror.io"),
        "mirror.io/nginx"
    );
    assert_eq!(
        image(s, Repository, Replace, "other/app"),
        "registry.local/other/app:1.0"
    );
    assert_eq!(
        image(s, Repository, Add, "-canary"),
        "registry.local/team/web-canary:1.0"
    );
    assert_eq!(image(s, Tag, Replace, "1.1"), "registry.local/team/web:1.1");
    assert_eq!(
        image(s, Tag, Add, "-rc1"),
        "registry.local/team/web:1.0-rc1"
    );
    assert_eq!(image(s, Tag, Remove, ""), "registry.local/team/web");
    assert_eq!(
        image("nginx", Tag, Replace, "sha256:ab12"),
        "nginx@sha256:ab12"
    );
    let mut i = ImageRef::parse(s).unwrap();
    assert!(
        i.apply(Repository, Remove, "").is_err(),
        "an image needs a repository"
    );
    assert!(i.apply(Tag, Replace, "").is_err(), "replace needs a value");
}

#[test]
fn components_and_operators_parse_in_any_case_and_refuse_others() {
    assert_eq!(Component::parse("registry").unwrap(), Component::Registry);
    assert_eq!(Component::parse("Tag").unwrap(), Component::Tag);
    assert!(Component::parse("host").unwrap_err().0.contains("host"));
    assert_eq!(Operator::parse("Replace").unwrap(), Operator::Replace);
    assert!(Operator::parse("patch").is_err());
}

#[test]
fn an_image_overrider_without_predicate_changes_every_container() {
    let obj = overridden(json!({"imageOverriders": [
        {"component": "Registry", "operator": "replace", "value": "mirror.io"}]}))
    .unwrap();
    let c = &obj["spec"]["template"]["spec"]["containers"];
    assert_eq!(c[0]["image"], "mirror.io/web:1.0");
    assert_eq!(c[1]["image"], "mirror.io/busybox");
}

#[test]
fn an_image_overrider_with_a_predicate_path_changes_only_that_image() {
    for path in [
        "/spec/template/spec/containers/1/image",
        "spec/template/spec/containers/1/image",
    ] {
        let obj = overridden(json!({"imageOverriders": [
            {"component": "Tag", "operator": "replace", "value": "1.36", "predicate": {"path": path}}]}))
        .unwrap();
        let c = &obj["spec"]["template"]["spec"]["containers"];
        assert_eq!(c[0]["image"], "registry.local/web:1.0");
        assert_eq!(c[1]["image"], "busybox:1.36");
    }
    let err = overridden(
        json!({"imageOverriders": [{"component": "Tag", "operator": "replace",
        "value": "1", "predicate": {"path": "/spec/template/spec/containers/7/image"}}]}),
    )
    .unwrap_err();
    assert!(err.contains("containers/7"), "{err}");
}

#[test]
fn env_overriders_add_remove_and_replace_by_name() {
    let env = |o: Value| {
        overridden(json!({"envOverriders": [o]})).unwrap()["spec"]["template"]["spec"]["containers"]
            [0]["env"]
            .clone()
    };
    assert_eq!(
        env(
            json!({"containerName": "app", "operator": "add", "value": [{"name": "B", "value": "2"}]})
        ),
        json!([{"name": "A", "value": "1"}, {"name": "B", "value": "2"}])
    );
    assert_eq!(
        env(json!({"containerName": "app", "operator": "remove", "value": [{"name": "A"}]})),
        json!([])
    );
    assert_eq!(
        env(json!({"containerName": "app", "operator": "replace",
            "value": [{"name": "A", "value": "9"}, {"name": "C", "value": "3"}]})),
        json!([{"name": "A", "value": "9"}, {"name": "C", "value": "3"}])
    );
    let side = overridden(
        json!({"envOverriders": [{"containerName": "side", "operator": "add",
        "value": [{"name": "X", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}]}]}),
    )
    .unwrap();
    assert_eq!(
        side["spec"]["template"]["spec"]["containers"][1]["env"][0]["valueFrom"]["fieldRef"]["fieldPath"],
        "spec.nodeName"
    );
    let err = overridden(
        json!({"envOverriders": [{"containerName": "nope", "operator": "add",
        "value": [{"name": "X"}]}]}),
    )
    .unwrap_err();
    assert!(err.contains("nope"), "{err}");
}

#[test]
fn command_and_args_overriders_append_and_remove_items() {
    let obj = overridden(json!({
        "argsOverriders": [{"containerName": "app", "operator": "remove", "value": ["--a"]},
                           {"containerName": "app", "operator": "add", "value": ["--c"]}],
        "commandOverriders": [{"containerName": "side", "operator": "add", "value": ["sh", "-c"]}]}))
    .unwrap();
    let c = &obj["spec"]["template"]["spec"]["containers"];
    assert_eq!(c[0]["args"], json!(["--b", "--c"]));
    assert_eq!(c[1]["command"], json!(["sh", "-c"]));
    assert!(overridden(json!({"argsOverriders": [{"containerName": "app", "operator": "replace", "value": []}]})).is_err());
}

#[test]
fn resources_and_replicas_overriders_set_their_fields() {
    let obj = overridden(
        json!({"replicas": 4, "resourcesOverriders": [{"containerName": "app",
        "value": {"limits": {"cpu": "500m"}}}]}),
    )
    .unwrap();
    assert_eq!(obj["spec"]["replicas"], 4);
    assert_eq!(
        obj["spec"]["template"]["spec"]["containers"][0]["resources"],
        json!({"limits": {"cpu": "500m"}})
    );
    let mut ds = deployment("d");
    ds["kind"] = "DaemonSet".into();
    ds["spec"].as_object_mut().unwrap().remove("replicas");
    overrides::apply(
        &mut ds,
        &serde_json::from_value(json!({"replicas": 3})).unwrap(),
    )
    .unwrap();
    assert!(
        ds["spec"].get("replicas").is_none(),
        "a DaemonSet has no replicas"
    );
}

#[test]
fn a_workload_is_copied_per_group_pinned_and_overridden_and_a_service_once_closed_to_its_group() {
    let plan = plan::plan(&app(
        json!([deployment("web"), service("web")]),
        json!({"targetNodeGroups": [
            {"name": "g1", "overriders": {"replicas": 2, "imageOverriders": [{"component": "Tag", "operator": "replace", "value": "1.1"}]}},
            {"name": "g2", "overriders": {"replicas": 3}}]}),
    ));
    assert!(plan.failed.is_empty(), "{plan:#?}");
    let names: Vec<_> = plan.desired.iter().map(|d| d.id.name.as_str()).collect();
    assert_eq!(names, ["web-g1", "web-g2", "web"]);
    let g1 = by_name(&plan, "web-g1");
    assert_eq!(g1["metadata"]["namespace"], "shop");
    assert_eq!(g1["spec"]["replicas"], 2);
    assert_eq!(
        g1["spec"]["template"]["spec"]["containers"][0]["image"],
        "registry.local/web:1.1"
    );
    assert_eq!(by_name(&plan, "web-g2")["spec"]["replicas"], 3);
    let term = &g1["spec"]["template"]["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        ["nodeSelectorTerms"];
    assert_eq!(
        term,
        &json!([{"matchExpressions": [{"key": BELONGING_TO, "operator": "In", "values": ["g1"]}]}])
    );
    assert_eq!(g1["metadata"]["labels"][EDGEAPP_LABEL], "web");
    let svc = by_name(&plan, "web");
    assert_eq!(
        svc["metadata"]["annotations"][SERVICE_TOPOLOGY],
        RANGE_NODEGROUP
    );
    assert_eq!(svc["metadata"]["namespace"], "shop");
}

#[test]
fn two_copies_never_select_each_others_pods() {
    let plan = plan::plan(&app(json!([deployment("web")]), groups(&["g1", "g2"])));
    let (a, b) = (by_name(&plan, "web-g1"), by_name(&plan, "web-g2"));
    let selects = |sel: &Value, pod: &Value| {
        sel["matchLabels"]
            .as_object()
            .unwrap()
            .iter()
            .all(|(k, v)| &pod[k] == v)
    };
    let pods = |d: &Value| d["spec"]["template"]["metadata"]["labels"].clone();
    assert!(selects(&a["spec"]["selector"], &pods(a)) && selects(&b["spec"]["selector"], &pods(b)));
    assert!(
        !selects(&a["spec"]["selector"], &pods(b)) && !selects(&b["spec"]["selector"], &pods(a))
    );
    assert_eq!(pods(a)[TARGET_LABEL], "g1");
}

#[test]
fn a_group_named_twice_is_taken_once_and_reported() {
    // kubeedge #4860 / #5497: the same NodeGroup twice in targetNodeGroups.
    let plan = plan::plan(&app(json!([deployment("web")]), groups(&["g1", "g1"])));
    assert_eq!(plan.desired.len(), 1);
    assert_eq!(plan.problems.len(), 1, "{:?}", plan.problems);
    let status = plan::status(&plan, &[], &[]);
    assert_eq!(
        status.len(),
        1,
        "one status entry, not duplicates: {status:?}"
    );
}

#[test]
fn names_that_collide_between_copies_are_refused_not_overwritten() {
    // kubeedge #5497: `nginx` for group `a-b` and `nginx-a` for group `b` both make `nginx-a-b`.
    let plan = plan::plan(&app(
        json!([deployment("nginx"), deployment("nginx-a")]),
        groups(&["a-b", "b"]),
    ));
    let names: Vec<_> = plan.desired.iter().map(|d| d.id.name.as_str()).collect();
    assert_eq!(names, ["nginx-a-b", "nginx-b", "nginx-a-a-b"]);
    assert_eq!(plan.failed.len(), 1);
    assert_eq!(plan.failed[0].id.ordinal, 1);
    assert!(
        plan.failed[0].reason.contains("nginx-a-b"),
        "{}",
        plan.failed[0].reason
    );
    // A group named like the application.
    let plan = plan::plan(&app(json!([deployment("web")]), groups(&["web"])));
    assert_eq!(plan.desired[0].id.name, "web-web");
}

#[test]
fn manifests_as_users_write_them_are_defaulted_or_refused_with_a_reason() {
    // kubeedge #5475: no namespace in the manifests of an application in a namespace.
    let mut legacy = deployment("old");
    legacy["apiVersion"] = "extensions/v1beta1".into();
    legacy["spec"].as_object_mut().unwrap().remove("selector");
    let mut elsewhere = service("x");
    elsewhere["metadata"]["namespace"] = "other".into();
    let plan = plan::plan(&app(
        json!([legacy, elsewhere, {"kind": "ConfigMap", "metadata": {"name": "c"}}, "text"]),
        groups(&["g1"]),
    ));
    let old = by_name(&plan, "old-g1");
    assert_eq!(old["apiVersion"], "apps/v1");
    assert_eq!(old["spec"]["selector"]["matchLabels"]["app"], "old");
    let reasons: Vec<_> = plan
        .failed
        .iter()
        .map(|f| (f.id.ordinal, f.reason.as_str()))
        .collect();
    assert_eq!(reasons.len(), 3, "{reasons:?}");
    assert!(reasons[0].1.contains("\"other\""), "{reasons:?}");
    assert!(
        reasons[1].1.contains("apiVersion is missing"),
        "{reasons:?}"
    );
    assert!(reasons[2].1.contains("not an object"), "{reasons:?}");
}

#[test]
fn label_targets_are_named_by_a_stable_hash_and_pinned_by_their_selector() {
    let scope = json!({"targetNodeLabels": [{"labelSelector": {"matchLabels": {"region": "west"},
        "matchExpressions": [{"key": "gpu", "operator": "Exists"}]}, "overriders": {"replicas": 5}}]});
    let plan = plan::plan(&app(json!([deployment("web")]), scope.clone()));
    let name = &plan.desired[0].id.name;
    assert!(
        name.starts_with("web-ls-") && name.len() == "web-ls-".len() + 10,
        "{name}"
    );
    assert_eq!(
        &plan::plan(&app(json!([deployment("web")]), scope)).desired[0]
            .id
            .name,
        name
    );
    let obj = &plan.desired[0].object;
    assert_eq!(obj["spec"]["replicas"], 5);
    assert_eq!(
        obj["spec"]["template"]["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
            ["nodeSelectorTerms"][0]["matchExpressions"],
        json!([{"key": "region", "operator": "In", "values": ["west"]}, {"key": "gpu", "operator": "Exists"}])
    );
}

#[test]
fn the_templates_own_node_constraints_are_kept_beside_the_group() {
    let mut d = deployment("web");
    d["spec"]["template"]["spec"]["nodeSelector"] =
        json!({"kubernetes.io/arch": "arm64", BELONGING_TO: "old"});
    d["spec"]["template"]["spec"]["affinity"] = json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
        {"nodeSelectorTerms": [{"matchExpressions": [{"key": "a", "operator": "Exists"}]}, {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}]}}});
    let plan = plan::plan(&app(json!([d]), groups(&["g1"])));
    let pod = &plan.desired[0].object["spec"]["template"]["spec"];
    assert_eq!(pod["nodeSelector"], json!({"kubernetes.io/arch": "arm64"}));
    let terms = &pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        ["nodeSelectorTerms"];
    let group = json!({"key": BELONGING_TO, "operator": "In", "values": ["g1"]});
    assert_eq!(
        terms[0]["matchExpressions"],
        json!([{"key": "a", "operator": "Exists"}, group])
    );
    assert_eq!(
        terms[1]["matchExpressions"],
        json!([group]),
        "every ORed term gets the group"
    );
}

fn status_of(ids: &[(usize, &str, &str)]) -> Vec<ManifestStatus> {
    ids.iter()
        .map(|(ordinal, kind, name)| ManifestStatus {
            identifier: ResourceIdentifier {
                ordinal: *ordinal,
                group: if *kind == "Service" { "" } else { "apps" }.into(),
                version: "v1".into(),
                kind: (*kind).into(),
                namespace: "shop".into(),
                name: (*name).into(),
                ..Default::default()
            },
            conditions: PROCESSING.into(),
        })
        .collect()
}

#[test]
fn targets_and_manifests_removed_from_the_spec_are_pruned_and_failed_ones_kept() {
    let before = status_of(&[
        (0, "Deployment", "web-g1"),
        (0, "Deployment", "web-g2"),
        (1, "Service", "web"),
    ]);
    let plan = plan::plan(&app(json!([deployment("web")]), groups(&["g1"])));
    let stale: Vec<_> = plan::stale(&plan, &before)
        .into_iter()
        .map(|i| i.name)
        .collect();
    assert_eq!(stale, ["web-g2", "web"]);
    // A manifest that no longer parses keeps what it made (a typo deletes nothing).
    let plan = plan::plan(&app(
        json!([{"metadata": {"name": "web"}}, service("web")]),
        groups(&["g1"]),
    ));
    assert!(plan::stale(&plan, &before).is_empty());
}

#[test]
fn status_lists_each_object_once_sorted_with_its_condition() {
    let plan = plan::plan(&app(
        json!([service("web"), deployment("web")]),
        groups(&["g2", "g1"]),
    ));
    let available = vec![plan.desired[1].id.clone()];
    let undeleted = status_of(&[(1, "Deployment", "web-g3")])[0]
        .identifier
        .clone();
    let status = plan::status(&plan, &available, &[undeleted]);
    let got: Vec<_> = status
        .iter()
        .map(|s| {
            (
                s.identifier.ordinal,
                s.identifier.name.as_str(),
                s.conditions.as_str(),
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            (0, "web", PROCESSING),
            (1, "web-g1", PROCESSING),
            (1, "web-g2", AVAILABLE),
            (1, "web-g3", PROCESSING)
        ]
    );
}

#[test]
fn a_workload_is_available_when_its_controller_reports_every_replica_updated_and_available() {
    let d = |generation: i64, observed: i64, updated: i64, avail: i64| {
        json!({"kind": "Deployment",
        "metadata": {"generation": generation}, "spec": {"replicas": 2},
        "status": {"observedGeneration": observed, "replicas": 2, "updatedReplicas": updated, "availableReplicas": avail}})
    };
    assert!(plan::available(&d(2, 2, 2, 2)));
    assert!(
        !plan::available(&d(3, 2, 2, 2)),
        "the new generation is not seen yet"
    );
    assert!(!plan::available(&d(2, 2, 1, 2)));
    assert!(!plan::available(&d(2, 2, 2, 1)));
    let ds = json!({"kind": "DaemonSet", "metadata": {"generation": 1}, "status": {"observedGeneration": 1,
        "desiredNumberScheduled": 3, "updatedNumberScheduled": 3, "numberAvailable": 2}});
    assert!(!plan::available(&ds));
    assert!(plan::available(&json!({"kind": "ConfigMap"})));
}

#[test]
fn the_crd_is_kubeedges_namespaced_edgeapplication_with_a_status_subresource() {
    let crd = super::crd().unwrap();
    assert_eq!(
        crd.metadata.name.as_deref(),
        Some("edgeapplications.apps.kubeedge.io")
    );
    assert_eq!(crd.spec.scope, "Namespaced");
    assert_eq!(crd.spec.names.short_names, Some(vec!["eapp".to_owned()]));
    let v = &crd.spec.versions[0];
    assert_eq!(v.name, "v1alpha1");
    assert!(v.subresources.as_ref().unwrap().status.is_some());
    let schema = serde_json::to_value(&v.schema).unwrap();
    let manifests = &schema["openAPIV3Schema"]["properties"]["spec"]["properties"]["workloadTemplate"]
        ["properties"]["manifests"];
    assert_eq!(
        manifests["items"]["x-kubernetes-preserve-unknown-fields"],
        true
    );
}
