mod differential;
mod reference;
mod speed;

use serde_json::json;

use super::{Served, object, value};

fn text(bytes: Vec<u8>) -> String {
    String::from_utf8(bytes).unwrap()
}

#[test]
fn a_pod_is_written_in_go_struct_order() {
    let stored = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"uid": "u", "resourceVersion": "5", "namespace": "default", "name": "p",
                     "labels": {"b": "2", "a": "1"}, "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "i",
                  "ports": [{"protocol": "TCP", "containerPort": 80}]}]},
        "status": {"podIP": "10.0.0.1", "phase": "Running", "hostIP": "10.0.0.2"}
    });
    let raw = serde_json::to_vec(&stored).unwrap();
    let out = text(object(&raw, "Pod", "v1").unwrap());
    assert_eq!(
        out,
        concat!(
            r#"{"kind":"Pod","apiVersion":"v1","#,
            r#""metadata":{"name":"p","namespace":"default","uid":"u","resourceVersion":"5","#,
            r#""creationTimestamp":"2026-01-01T00:00:00Z","labels":{"a":"1","b":"2"}},"#,
            r#""spec":{"containers":[{"name":"c","image":"i","ports":[{"containerPort":80,"protocol":"TCP"}]}],"#,
            r#""nodeName":"n1"},"#,
            r#""status":{"phase":"Running","hostIP":"10.0.0.2","podIP":"10.0.0.1"}}"#
        )
    );
}

#[test]
fn the_served_kind_and_api_version_replace_the_stored_ones() {
    let raw = br#"{"apiVersion":"apps/v1beta9","kind":"Old","metadata":{"name":"d"}}"#;
    let out = text(object(raw, "Deployment", "apps/v1").unwrap());
    assert_eq!(
        out,
        r#"{"kind":"Deployment","apiVersion":"apps/v1","metadata":{"name":"d"}}"#
    );
}

#[test]
fn a_custom_resource_gets_type_meta_and_metadata_first_and_the_rest_as_stored() {
    let raw = br#"{"apiVersion":"x.io/v1","kind":"W","a":1,"metadata":{"uid":"u","name":"w"},"z":{"b":1,"a":2}}"#;
    let out = text(object(raw, "W", "x.io/v1").unwrap());
    assert_eq!(
        out,
        r#"{"kind":"W","apiVersion":"x.io/v1","metadata":{"name":"w","uid":"u"},"a":1,"z":{"b":1,"a":2}}"#
    );
}

#[test]
fn inlined_struct_fields_take_the_place_of_their_struct() {
    // Volume is `name` then the inlined VolumeSource; Probe is its inlined handler first.
    let raw = serde_json::to_vec(&json!({"apiVersion": "v1", "kind": "Pod", "spec": {
        "volumes": [{"configMap": {"name": "c"}, "name": "v"}],
        "containers": [{"name": "c", "livenessProbe": {"periodSeconds": 3, "httpGet": {"port": 8, "path": "/"}}}]
    }}))
    .unwrap();
    let out = text(object(&raw, "Pod", "v1").unwrap());
    assert!(
        out.contains(r#""volumes":[{"name":"v","configMap":{"name":"c"}}]"#),
        "{out}"
    );
    assert!(
        out.contains(r#""livenessProbe":{"httpGet":{"path":"/","port":8},"periodSeconds":3}"#),
        "{out}"
    );
}

#[test]
fn lists_status_and_watch_events_follow_their_types() {
    let list = value(&json!({"apiVersion": "v1", "kind": "ConfigMapList",
        "metadata": {"resourceVersion": "3", "continue": "c"},
        "items": [{"apiVersion": "v1", "kind": "ConfigMap", "data": {"k": "v"}, "metadata": {"name": "a"}}]}));
    assert_eq!(
        text(list),
        r#"{"kind":"ConfigMapList","apiVersion":"v1","metadata":{"resourceVersion":"3","continue":"c"},"items":[{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"a"},"data":{"k":"v"}}]}"#
    );
    let status = value(
        &json!({"apiVersion": "v1", "kind": "Status", "code": 404, "details": {"name": "x", "kind": "pods"},
        "message": "m", "metadata": {}, "reason": "NotFound", "status": "Failure"}),
    );
    assert_eq!(
        text(status),
        r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"m","reason":"NotFound","details":{"name":"x","kind":"pods"},"code":404}"#
    );
}

#[test]
fn text_that_is_not_a_json_object_is_refused_without_panicking() {
    for bad in [
        &b"[1]"[..],
        b"{\"a\":",
        b"{\"a\" 1}",
        b"",
        b"{\"a\":1}}",
        b"\"s\"",
        b"{\"a\":[}",
    ] {
        assert!(
            object(bad, "Pod", "v1").is_none(),
            "{:?}",
            String::from_utf8_lossy(bad)
        );
    }
}

#[test]
fn text_stored_in_go_order_is_recognized_and_other_text_is_not() {
    let stored = br#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","namespace":"n"},"spec":{"nodeName":"n1","containers":[]}}"#;
    let served = Served::new("Pod", "v1");
    assert!(
        !served.is_written(stored),
        "alphabetical text is not Go order"
    );
    let written = served.object(stored).unwrap();
    assert!(served.is_written(&written));
    assert!(
        !Served::new("Pod", "v2").is_written(&written),
        "another version"
    );
    for changed in [
        br#"{"kind":"Pod","apiVersion":"v1","metadata":{"namespace":"n","name":"p"}}"#.as_slice(),
        br#"{"kind":"Pod","apiVersion":"v1","metadata":{"name":"p"}, "spec":{}}"#,
        br#"{"kind":"Pod","apiVersion":"v1","metadata":{"name":"p"},"kind":"Pod"}"#,
        br#"{"kind":"Pod","apiVersion":"v1","metadata":{"name":"p"}} "#,
        br#"{"kind":"Pod","apiVersion":"v1","status":{},"spec":{}}"#,
    ] {
        assert!(
            !served.is_written(changed),
            "{}",
            String::from_utf8_lossy(changed)
        );
    }
}
