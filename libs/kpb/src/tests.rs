use k8s_pb::api::apps::v1 as apps;
use k8s_pb::apimachinery::pkg::apis::meta::v1 as meta;
use prost::Message;
use serde_json::{Value, json};

use super::*;

fn pod() -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "web-0",
            "namespace": "default",
            "uid": "6f1c2a9e-0000-4000-8000-000000000001",
            "resourceVersion": "42",
            "creationTimestamp": "2026-11-25T18:00:00Z",
            "labels": {"app": "web"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-5d9", "uid": "u1", "controller": true}],
            "managedFields": [{"manager": "kubectl", "operation": "Apply", "apiVersion": "v1", "fieldsType": "FieldsV1",
                               "fieldsV1": {"f:spec": {"f:containers": {}}}}]
        },
        "spec": {
            "nodeName": "edge-1",
            "terminationGracePeriodSeconds": 0,
            "containers": [{
                "name": "web",
                "image": "busybox:1.36",
                "command": ["sh", "-c", "sleep 3600"],
                "env": [{"name": "MODE", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "mode"}}}],
                "ports": [{"containerPort": 80, "protocol": "TCP"}],
                "resources": {"limits": {"memory": "64Mi", "cpu": "250m"}},
                "readinessProbe": {"httpGet": {"path": "/", "port": "http"}, "periodSeconds": 5}
            }]
        },
        "status": {
            "phase": "Running",
            "podIP": "10.0.0.7",
            "startTime": "2026-11-25T18:00:01Z",
            "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2026-11-25T18:00:02Z"}]
        }
    })
}

/// A body as Go's serializer writes it (empty strings for the encoding fields included).
fn envelope(api_version: &str, kind: &str, raw: Vec<u8>) -> Vec<u8> {
    let mut body = MAGIC.to_vec();
    k8s_pb::apimachinery::pkg::runtime::Unknown {
        type_meta: Some(k8s_pb::apimachinery::pkg::runtime::TypeMeta {
            api_version: Some(api_version.into()),
            kind: Some(kind.into()),
        }),
        raw: Some(raw),
        content_encoding: Some(String::new()),
        content_type: Some(String::new()),
    }
    .encode(&mut body)
    .unwrap();
    body
}

#[test]
fn a_pod_round_trips_through_protobuf_unchanged() {
    let body = encode(pod()).unwrap();
    assert_eq!(&body[..4], MAGIC);
    assert_eq!(decode(&body).unwrap(), pod());
}

#[test]
fn the_envelope_names_the_kind_and_carries_the_message() {
    let body = encode(pod()).unwrap();
    let unknown =
        k8s_pb::apimachinery::pkg::runtime::Unknown::decode(&body[MAGIC.len()..]).unwrap();
    let tm = unknown.type_meta.unwrap();
    assert_eq!(
        (tm.api_version.as_deref(), tm.kind.as_deref()),
        (Some("v1"), Some("Pod"))
    );
    let msg = k8s_pb::api::core::v1::Pod::decode(unknown.raw.unwrap().as_slice()).unwrap();
    let spec = msg.spec.unwrap();
    assert_eq!(spec.node_name.as_deref(), Some("edge-1"));
    // Go embeds ProbeHandler and LocalObjectReference; JSON inlines them.
    let c = &spec.containers[0];
    let probe = c.readiness_probe.as_ref().unwrap();
    let port = probe
        .handler
        .as_ref()
        .unwrap()
        .http_get
        .as_ref()
        .unwrap()
        .port
        .as_ref();
    assert_eq!(port.unwrap().str_val.as_deref(), Some("http"));
    let key_ref = c.env[0]
        .value_from
        .as_ref()
        .unwrap()
        .config_map_key_ref
        .as_ref()
        .unwrap();
    assert_eq!(
        key_ref
            .local_object_reference
            .as_ref()
            .unwrap()
            .name
            .as_deref(),
        Some("cfg")
    );
    assert_eq!(
        c.resources.as_ref().unwrap().limits["memory"]
            .string
            .as_deref(),
        Some("64Mi")
    );
    let created = msg.metadata.unwrap().creation_timestamp.unwrap();
    assert_eq!(created.seconds, Some(1_795_629_600));
}

#[test]
fn go_zero_values_are_left_out_but_pointer_zeros_are_kept() {
    // Go encodes non-pointer fields even when zero; a real API server's JSON omits them.
    let d = apps::Deployment {
        metadata: Some(meta::ObjectMeta {
            name: Some("web".into()),
            generate_name: Some(String::new()),
            resource_version: Some(String::new()),
            creation_timestamp: Some(meta::Time::default()),
            ..Default::default()
        }),
        spec: Some(apps::DeploymentSpec {
            replicas: Some(0),
            min_ready_seconds: Some(0),
            paused: Some(false),
            selector: Some(meta::LabelSelector::default()),
            ..Default::default()
        }),
        ..Default::default()
    };
    let v = decode(&envelope("apps/v1", "Deployment", d.encode_to_vec())).unwrap();
    assert_eq!(v["metadata"], json!({"name": "web"}));
    assert_eq!(
        v["spec"]["replicas"],
        json!(0),
        "a pointer's zero is a value"
    );
    assert!(v["spec"].get("minReadySeconds").is_none(), "{v}");
    assert!(v["spec"].get("paused").is_none(), "{v}");
    assert_eq!(
        (v["apiVersion"].as_str(), v["kind"].as_str()),
        (Some("apps/v1"), Some("Deployment"))
    );
}

#[test]
fn lists_and_other_groups_round_trip() {
    let list = json!({
        "apiVersion": "v1",
        "kind": "ConfigMapList",
        "metadata": {"resourceVersion": "7", "continue": "abc"},
        "items": [
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "namespace": "default"}, "data": {"k": "v"}},
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "b", "namespace": "default"}, "binaryData": {"x": "AAEC"}}
        ]
    });
    assert_eq!(decode(&encode(list.clone()).unwrap()).unwrap(), list);
    let svc = json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"type": "ClusterIP", "clusterIP": "10.96.0.10", "selector": {"app": "web"},
                 "ports": [{"port": 80, "targetPort": 8080, "protocol": "TCP"}]}
    });
    assert_eq!(decode(&encode(svc.clone()).unwrap()).unwrap(), svc);
    let lease = json!({
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": "edge-1", "namespace": "kube-node-lease"},
        "spec": {"holderIdentity": "edge-1", "leaseDurationSeconds": 40, "renewTime": "2026-11-25T18:00:00.123456Z"}
    });
    assert_eq!(decode(&encode(lease.clone()).unwrap()).unwrap(), lease);
}

#[test]
fn a_delete_options_body_from_any_group_decodes() {
    let opts = meta::DeleteOptions {
        grace_period_seconds: Some(0),
        propagation_policy: Some("Foreground".into()),
        ..Default::default()
    };
    let v = decode(&envelope("apps/v1", "DeleteOptions", opts.encode_to_vec())).unwrap();
    assert_eq!(v["gracePeriodSeconds"], json!(0));
    assert_eq!(v["propagationPolicy"], json!("Foreground"));
}

#[test]
fn watch_frames_are_length_prefixed_events_with_an_embedded_body() {
    let mut stream = watch_frame("ADDED", pod()).unwrap();
    let len = u32::from_be_bytes(stream[..4].try_into().unwrap()) as usize;
    assert_eq!(len, stream.len() - 4);
    let event = meta::WatchEvent::decode(&stream[4..]).unwrap();
    assert_eq!(event.r#type.as_deref(), Some("ADDED"));
    assert!(event.object.unwrap().raw.unwrap().starts_with(MAGIC));
    stream.extend(watch_frame("DELETED", pod()).unwrap());
    let cut = stream.len() - 3;
    let (events, used) = read_watch_frames(&stream[..cut]).unwrap();
    assert_eq!(events.len(), 1, "the cut frame waits for more bytes");
    assert_eq!(used, len + 4);
    let (events, used) = read_watch_frames(&stream).unwrap();
    assert_eq!(used, stream.len());
    assert_eq!(events[1].0, "DELETED");
    assert_eq!(events[1].1, pod());
}

#[test]
fn bad_bodies_say_what_is_wrong() {
    assert!(matches!(decode(b"{\"kind\":\"Pod\"}"), Err(Error::NoMagic)));
    assert!(matches!(decode(b"k8s\0\xff\xff"), Err(Error::Envelope(_))));
    let custom =
        json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}});
    let e = encode(custom).unwrap_err();
    assert!(
        e.to_string()
            .contains("Widget (example.com/v1) has no protobuf form"),
        "{e}"
    );
    assert!(supports("v1", "Pod") && supports("apps/v1", "DeploymentList"));
    assert!(!supports("example.com/v1", "Widget"));
}

#[test]
fn every_served_built_in_group_has_protobuf_kinds() {
    let kinds: Vec<_> = kinds().collect();
    for (v, k) in [
        ("v1", "Node"),
        ("v1", "Event"),
        ("apps/v1", "StatefulSet"),
        ("batch/v1", "CronJob"),
        ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"),
        ("certificates.k8s.io/v1", "CertificateSigningRequest"),
        ("authorization.k8s.io/v1", "SelfSubjectAccessReview"),
        ("authentication.k8s.io/v1", "TokenReview"),
        ("storage.k8s.io/v1", "CSINode"),
        ("discovery.k8s.io/v1", "EndpointSlice"),
        ("events.k8s.io/v1", "Event"),
        ("policy/v1", "Eviction"),
        ("autoscaling/v2", "HorizontalPodAutoscaler"),
    ] {
        assert!(kinds.contains(&(v, k)), "{v} {k}");
    }
}

#[test]
fn a_custom_resource_definition_and_its_schema_round_trip() {
    let crd = json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {
            "group": "example.com",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
            "scope": "Namespaced",
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "x-kubernetes-preserve-unknown-fields": false,
                    "properties": {
                        "spec": {"type": "object", "required": ["size"], "properties": {
                            "size": {"type": "integer", "minimum": 0, "maximum": 10, "default": 3},
                            "mode": {"type": "string", "enum": ["a", "b"]},
                            "tags": {"type": "array", "items": {"type": "string"}},
                            "extra": {"type": "object", "additionalProperties": {"type": "string"}},
                            "open": {"type": "object", "additionalProperties": true},
                            "port": {"x-kubernetes-int-or-string": true, "anyOf": [{"type": "integer"}, {"type": "string"}]}
                        }}
                    }
                }}
            }]
        }
    });
    assert_eq!(decode(&encode(crd.clone()).unwrap()).unwrap(), crd);
}

#[test]
fn a_list_framed_item_by_item_from_stored_text_is_the_same_list() {
    let text = serde_json::to_vec(&pod()).unwrap();
    let mut other = pod();
    other["metadata"]["name"] = json!("web-1");
    let meta = json!({"resourceVersion": "9", "continue": "next"});
    let framed = encode_list(
        "v1",
        "PodList",
        "Pod",
        meta.clone(),
        [Json::Text(&text), Json::Value(other.clone())],
    )
    .unwrap();
    let whole = encode(
        json!({"apiVersion": "v1", "kind": "PodList", "metadata": meta,
                              "items": [pod(), other]}),
    )
    .unwrap();
    assert_eq!(framed, whole);
    assert_eq!(
        encode_as("v1", "Pod", Json::Text(&text)).unwrap(),
        encode(pod()).unwrap()
    );
    let e = encode_list("example.com/v1", "WidgetList", "Widget", json!({}), []).unwrap_err();
    assert!(matches!(e, Error::Unsupported { .. }), "{e}");
}

#[test]
fn envelopes_nested_without_end_stop_at_a_depth_and_do_not_exhaust_the_stack() {
    // A ControllerRevision whose data is a ControllerRevision whose data is ... 10,000 deep.
    let mut body = encode(
        json!({"apiVersion": "apps/v1", "kind": "ControllerRevision",
                                 "metadata": {"name": "r"}, "revision": 1}),
    )
    .unwrap();
    for _ in 0..10_000 {
        let raw = k8s_pb::api::apps::v1::ControllerRevision {
            data: Some(k8s_pb::apimachinery::pkg::runtime::RawExtension { raw: Some(body) }),
            revision: Some(1),
            ..Default::default()
        };
        body = envelope("apps/v1", "ControllerRevision", raw.encode_to_vec());
    }
    let v = std::thread::Builder::new()
        .stack_size(256 * 1024)
        .spawn(move || decode(&body).map(|v| v["revision"].clone()))
        .unwrap()
        .join()
        .expect("no stack overflow");
    assert_eq!(v.unwrap(), json!(1));
}

/// Writes the seeds of the `protobuf_body` fuzz target (`cargo test -p kpb -- --ignored`).
#[test]
#[ignore]
fn write_fuzz_seeds() {
    let dir = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../kapi/fuzz/seeds/protobuf_body"
    );
    std::fs::create_dir_all(dir).unwrap();
    let list = json!({"apiVersion": "v1", "kind": "ConfigMapList", "metadata": {"resourceVersion": "7"},
        "items": [{"metadata": {"name": "a"}, "data": {"k": "v"}}]});
    let seeds = [
        ("pod", encode(pod()).unwrap()),
        ("configmaplist", encode(list).unwrap()),
        ("watch", watch_frame("ADDED", pod()).unwrap()),
    ];
    for (name, bytes) in seeds {
        std::fs::write(format!("{dir}/{name}"), bytes).unwrap();
    }
}
