use serde_json::{Value, json};

use super::fieldset::FieldSet;
use super::*;
use crate::catalog::ResourceInfo;

const NOW: &str = "2026-01-01T00:00:00Z";
const MAIN: Scope = Scope::Main { skip_status: true };

fn deployments() -> ResourceInfo {
    ResourceInfo::new("apps", "v1", "Deployment", "deployments", true)
}

fn manager(name: &str) -> Manager<'_> {
    Manager {
        name,
        subresource: None,
        api_version: "apps/v1",
    }
}

fn deployment(replicas: i64, image: &str) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "default", "labels": {"app": "web"}},
        "spec": {
            "replicas": replicas,
            "template": {"spec": {"containers": [{"name": "c", "image": image}]}},
        },
    })
}

fn entry<'v>(obj: &'v Value, manager: &str, operation: &str) -> Option<&'v Value> {
    obj["metadata"]["managedFields"]
        .as_array()?
        .iter()
        .find(|e| e["manager"] == manager && e["operation"] == operation)
}

fn apply_as(live: &Value, config: &Value, who: &str, force: bool) -> Result<Value, Vec<Conflict>> {
    apply(
        &deployments(),
        MAIN,
        live,
        config,
        &manager(who),
        force,
        NOW,
    )
}

#[test]
fn fields_v1_round_trips_members_with_children() {
    let v1 = json!({
        "f:metadata": {"f:labels": {".": {}, "f:app": {}}},
        "f:spec": {"f:containers": {"k:{\"name\":\"c\"}": {".": {}, "f:image": {}, "f:name": {}}}},
    });
    let set = FieldSet::from_fields_v1(&v1);
    assert!(set.contains(&["f:metadata".into(), "f:labels".into()]));
    assert_eq!(set.to_fields_v1(), v1);
}

#[test]
fn apply_of_a_new_object_owns_its_fields_with_keyed_containers() {
    let obj = apply_as(&json!({}), &deployment(2, "nginx:1"), "kubectl", false).unwrap();
    let mine = entry(&obj, "kubectl", "Apply").unwrap();
    assert_eq!(mine["fieldsType"], "FieldsV1");
    assert_eq!(mine["apiVersion"], "apps/v1");
    let v1 = &mine["fieldsV1"];
    assert_eq!(v1["f:spec"]["f:replicas"], json!({}));
    let item = &v1["f:spec"]["f:template"]["f:spec"]["f:containers"]["k:{\"name\":\"c\"}"];
    assert_eq!(item, &json!({".": {}, "f:image": {}, "f:name": {}}));
    assert!(v1["f:metadata"].get("f:name").is_none());
    assert!(v1.get("f:kind").is_none());
}

#[test]
fn a_different_value_owned_by_another_manager_conflicts_unless_forced() {
    let live = apply_as(&json!({}), &deployment(2, "nginx:1"), "kubectl", false).unwrap();
    let err = apply_as(&live, &deployment(5, "nginx:1"), "other", false).unwrap_err();
    assert_eq!(err.len(), 1);
    assert_eq!(err[0].field, ".spec.replicas");
    assert_eq!(err[0].owner(), "conflict with \"kubectl\" using apps/v1");
    let status = conflict_error(&err).to_status();
    assert_eq!(
        status["message"],
        "Apply failed with 1 conflict: conflict with \"kubectl\" using apps/v1: .spec.replicas"
    );
    assert_eq!(
        status["details"]["causes"][0]["type"],
        "FieldManagerConflict"
    );

    let forced = apply_as(&live, &deployment(5, "nginx:1"), "other", true).unwrap();
    assert_eq!(forced["spec"]["replicas"], 5);
    let first = &entry(&forced, "kubectl", "Apply").unwrap()["fieldsV1"];
    assert!(first["f:spec"].get("f:replicas").is_none());
    let second = &entry(&forced, "other", "Apply").unwrap()["fieldsV1"];
    assert_eq!(second["f:spec"]["f:replicas"], json!({}));
}

#[test]
fn the_same_value_is_shared_without_conflict() {
    let live = apply_as(&json!({}), &deployment(2, "nginx:1"), "kubectl", false).unwrap();
    let shared = apply_as(&live, &deployment(2, "nginx:1"), "other", false).unwrap();
    assert!(entry(&shared, "kubectl", "Apply").is_some());
    assert!(entry(&shared, "other", "Apply").is_some());
}

#[test]
fn a_field_no_longer_applied_is_removed_unless_another_manager_owns_it() {
    let mut config = deployment(2, "nginx:1");
    config["metadata"]["labels"]["tier"] = json!("front");
    config["spec"]["minReadySeconds"] = json!(5);
    let live = apply_as(&json!({}), &config, "kubectl", false).unwrap();
    let shared = apply_as(
        &live,
        &json!({"spec": {"minReadySeconds": 5}}),
        "other",
        false,
    )
    .unwrap();

    let next = apply_as(&shared, &deployment(2, "nginx:1"), "kubectl", false).unwrap();
    assert!(next["metadata"]["labels"].get("tier").is_none());
    assert_eq!(next["metadata"]["labels"]["app"], "web");
    assert_eq!(next["spec"]["minReadySeconds"], 5, "other still owns it");
}

#[test]
fn a_container_no_longer_applied_is_removed_and_others_merge_by_name() {
    let mut two = deployment(1, "nginx:1");
    two["spec"]["template"]["spec"]["containers"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "side", "image": "busybox"}));
    let live = apply_as(&json!({}), &two, "kubectl", false).unwrap();
    let next = apply_as(&live, &deployment(1, "nginx:2"), "kubectl", false).unwrap();
    let containers = &next["spec"]["template"]["spec"]["containers"];
    assert_eq!(containers, &json!([{"name": "c", "image": "nginx:2"}]));
}

#[test]
fn an_update_takes_the_fields_it_changes_from_the_applier() {
    let live = apply_as(&json!({}), &deployment(2, "nginx:1"), "kubectl", false).unwrap();
    let mut scaled = live.clone();
    scaled["spec"]["replicas"] = json!(4);
    let scaler = Manager {
        name: "kubectl",
        subresource: Some("scale"),
        api_version: "apps/v1",
    };
    record_update(
        &deployments(),
        Scope::Scale,
        Some(&live),
        &mut scaled,
        Some(&scaler),
        NOW,
    );
    let update = entry(&scaled, "kubectl", "Update").unwrap();
    assert_eq!(update["subresource"], "scale");
    assert_eq!(update["fieldsV1"], json!({"f:spec": {"f:replicas": {}}}));

    let err = apply_as(&scaled, &deployment(2, "nginx:1"), "kubectl", false).unwrap_err();
    assert_eq!(
        err[0].owner(),
        "conflict with \"kubectl\" with subresource \"scale\" using apps/v1"
    );
}

#[test]
fn a_create_owns_every_field_and_a_server_write_keeps_the_entries() {
    let mut created = deployment(1, "nginx:1");
    let creator = manager("kubectl-create");
    record_update(
        &deployments(),
        MAIN,
        None,
        &mut created,
        Some(&creator),
        NOW,
    );
    let v1 = &entry(&created, "kubectl-create", "Update").unwrap()["fieldsV1"];
    assert_eq!(v1["f:metadata"]["f:labels"]["f:app"], json!({}));

    let mut by_server = created.clone();
    by_server["metadata"]["managedFields"] = json!([]);
    record_update(
        &deployments(),
        MAIN,
        Some(&created),
        &mut by_server,
        None,
        NOW,
    );
    assert_eq!(
        by_server["metadata"]["managedFields"],
        created["metadata"]["managedFields"]
    );
}

#[test]
fn a_no_op_apply_changes_nothing() {
    let live = apply_as(&json!({}), &deployment(2, "nginx:1"), "kubectl", false).unwrap();
    let again = apply(
        &deployments(),
        MAIN,
        &live,
        &deployment(2, "nginx:1"),
        &manager("kubectl"),
        false,
        "2030-01-01T00:00:00Z",
    )
    .unwrap();
    assert_eq!(again, live);
}

#[test]
fn status_scope_owns_only_the_status() {
    let config = json!({"status": {"replicas": 3}, "spec": {"replicas": 9}});
    let who = Manager {
        name: "ctl",
        subresource: Some("status"),
        api_version: "apps/v1",
    };
    let live = deployment(1, "nginx:1");
    let obj = apply(
        &deployments(),
        Scope::Status,
        &live,
        &config,
        &who,
        false,
        NOW,
    )
    .unwrap();
    assert_eq!(obj["spec"]["replicas"], 1);
    assert_eq!(obj["status"]["replicas"], 3);
    let v1 = &entry(&obj, "ctl", "Apply").unwrap()["fieldsV1"];
    assert_eq!(v1, &json!({"f:status": {"f:replicas": {}}}));
}

#[test]
fn yaml_and_json_apply_bodies_decode() {
    let yaml = b"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\ndata:\n  k: v\n";
    assert_eq!(decode_config(yaml).unwrap()["data"]["k"], "v");
    assert_eq!(decode_config(br#"{"a": 1}"#).unwrap()["a"], 1);
    assert_eq!(decode_config(b"- 1\n- 2\n").unwrap_err().code, 400);
}

#[test]
fn set_items_and_keyed_items_print_as_kube_does() {
    let path = vec![
        "f:spec".to_owned(),
        "k:{\"name\":\"c\"}".to_owned(),
        "v:\"x\"".to_owned(),
    ];
    assert_eq!(fieldset::display(&path), ".spec[name=\"c\"][=\"x\"]");
}

/// A custom resource whose schema keys `routes` by `host` and `port`, makes `tags` a set, and
/// sets `limits` whole.
fn gateways() -> ResourceInfo {
    let crd = json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "gateways.example.com"},
        "spec": {"group": "example.com", "scope": "Namespaced",
            "names": {"plural": "gateways", "singular": "gateway", "kind": "Gateway"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "properties": {
                        "routes": {"type": "array",
                            "x-kubernetes-list-type": "map",
                            "x-kubernetes-list-map-keys": ["host", "port"],
                            "items": {"type": "object", "properties": {
                                "host": {"type": "string"}, "port": {"type": "integer"},
                                "backend": {"type": "string"}}}},
                        "tags": {"type": "array", "x-kubernetes-list-type": "set",
                            "items": {"type": "string"}},
                        "limits": {"type": "object", "x-kubernetes-map-type": "atomic",
                            "additionalProperties": {"type": "integer"}}}}}}}}]}
    });
    crate::catalog::from_crd(&crd).unwrap().remove(0)
}

#[test]
fn a_custom_resource_merges_by_its_schemas_list_keys_sets_and_atomic_maps() {
    let info = gateways();
    let who = |name| Manager {
        name,
        subresource: None,
        api_version: "example.com/v1",
    };
    let gw = |spec: Value| {
        json!({"apiVersion": "example.com/v1", "kind": "Gateway",
               "metadata": {"name": "gw", "namespace": "default"}, "spec": spec})
    };
    let first = gw(json!({
        "routes": [{"host": "a", "port": 80, "backend": "web"}],
        "tags": ["x"], "limits": {"cpu": 1, "mem": 2}
    }));
    let live = apply(&info, MAIN, &json!({}), &first, &who("alice"), false, NOW).unwrap();
    // Bob adds a route with the same host on another port, a tag, and a limits map of his own.
    let second = gw(json!({
        "routes": [{"host": "a", "port": 443, "backend": "tls"}],
        "tags": ["y"]
    }));
    let live = apply(&info, MAIN, &live, &second, &who("bob"), false, NOW).unwrap();
    let routes = live["spec"]["routes"].as_array().unwrap();
    assert_eq!(routes.len(), 2, "keyed by host and port: {live}");
    assert_eq!(live["spec"]["tags"], json!(["x", "y"]));
    let bobs = entry(&live, "bob", "Apply").unwrap();
    assert!(
        bobs["fieldsV1"]["f:spec"]["f:routes"]
            .as_object()
            .unwrap()
            .contains_key(r#"k:{"host":"a","port":443}"#),
        "{bobs}"
    );
    // Bob changing one of alice's limits conflicts on the whole map, which is one field.
    let third = gw(json!({"limits": {"cpu": 1}}));
    let conflicts = apply(&info, MAIN, &live, &third, &who("bob"), false, NOW).unwrap_err();
    assert_eq!(conflicts.len(), 1, "{conflicts:?}");
    let taken = apply(&info, MAIN, &live, &third, &who("bob"), true, NOW).unwrap();
    assert_eq!(taken["spec"]["limits"], json!({"cpu": 1}), "replaced whole");
}

#[test]
fn container_ports_are_keyed_by_port_and_protocol_tcp_by_default() {
    let with_ports = |ports: Value| {
        let mut d = deployment(1, "nginx");
        d["spec"]["template"]["spec"]["containers"][0]["ports"] = ports;
        d
    };
    let alice = with_ports(json!([{"containerPort": 53}]));
    let live = apply_as(&json!({}), &alice, "alice", false).unwrap();
    let entry = entry(&live, "alice", "Apply").unwrap();
    let ports = &entry["fieldsV1"]["f:spec"]["f:template"]["f:spec"]["f:containers"][r#"k:{"name":"c"}"#]
        ["f:ports"];
    assert!(
        ports
            .as_object()
            .unwrap()
            .contains_key(r#"k:{"containerPort":53,"protocol":"TCP"}"#),
        "{entry}"
    );
    // The same port in UDP is another item, not a conflict over alice's.
    let bob = with_ports(json!([{"containerPort": 53, "protocol": "UDP"}]));
    let live = apply_as(&live, &bob, "bob", false).unwrap();
    let ports = &live["spec"]["template"]["spec"]["containers"][0]["ports"];
    assert_eq!(
        ports,
        &json!([{"containerPort": 53}, {"containerPort": 53, "protocol": "UDP"}])
    );
}

#[test]
fn applying_what_was_created_shares_a_defaulted_port_protocol_without_conflict() {
    let mut created = deployment(1, "nginx");
    created["spec"]["template"]["spec"]["containers"][0]["ports"] =
        json!([{"containerPort": 80, "protocol": "TCP"}]);
    record_update(
        &deployments(),
        MAIN,
        None,
        &mut created,
        Some(&manager("kubectl-create")),
        NOW,
    );
    // `kubectl apply --server-side` of the same file, whose port names no protocol.
    let mut file = deployment(1, "nginx");
    file["spec"]["template"]["spec"]["containers"][0]["ports"] = json!([{"containerPort": 80}]);
    let live =
        apply_as(&created, &file, "x", false).expect("equal values are shared, not a conflict");
    let ports = &live["spec"]["template"]["spec"]["containers"][0]["ports"];
    assert_eq!(ports, &json!([{"containerPort": 80, "protocol": "TCP"}]));
    let mut other = file.clone();
    other["spec"]["template"]["spec"]["containers"][0]["ports"][0]["name"] = json!("web");
    other["spec"]["template"]["spec"]["containers"][0]["image"] = json!("nginx:2");
    let err = apply_as(&created, &other, "x", false).unwrap_err();
    assert_eq!(err.len(), 1, "only the image differs: {err:?}");
}

#[test]
fn a_workloads_selector_is_one_field() {
    let mut alice = deployment(1, "nginx");
    alice["spec"]["selector"] = json!({"matchLabels": {"app": "web", "tier": "front"}});
    let live = apply_as(&json!({}), &alice, "alice", false).unwrap();
    let entry = entry(&live, "alice", "Apply").unwrap();
    assert_eq!(
        entry["fieldsV1"]["f:spec"]["f:selector"],
        json!({}),
        "{entry}"
    );
    // Another selector from bob conflicts as a whole, and forced replaces it whole.
    let mut bob = deployment(1, "nginx");
    bob["spec"]["selector"] = json!({"matchLabels": {"app": "web"}});
    let conflicts = apply_as(&live, &bob, "bob", false).unwrap_err();
    assert_eq!(conflicts.len(), 1);
    let live = apply_as(&live, &bob, "bob", true).unwrap();
    assert_eq!(
        live["spec"]["selector"],
        json!({"matchLabels": {"app": "web"}})
    );
}
