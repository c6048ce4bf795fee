use serde_json::json;

use super::*;

fn pod() -> Value {
    json!({
        "metadata": {"name": "web", "namespace": "default", "uid": "u-1"},
        "spec": {"nodeName": "edge-1",
                 "containers": [{"name": "app"}],
                 "initContainers": [{"name": "init"}]},
        "status": {"phase": "Running"},
    })
}

fn call(pod: &Value, sub: &str, query: &str) -> Result<KubeletCall, ApiError> {
    pod_call(pod, "web", sub, &Params::parse(Some(query)))
}

#[test]
fn a_log_goes_to_container_logs_with_the_options_sorted_and_the_container_defaulted() {
    let c = call(
        &pod(),
        "log",
        "follow=true&tailLines=10&timestamps=1&limitBytes=5&previous=false&insecureSkipTLSVerifyBackend=true",
    )
    .unwrap();
    assert_eq!(c.node, "edge-1");
    assert_eq!(
        c.path,
        "/containerLogs/default/web/app?follow=true&limitBytes=5&tailLines=10&timestamps=true"
    );
    assert!(c.follow);
    let c = call(
        &pod(),
        "log",
        "container=init&sinceTime=2026-05-01T12:00:00%2B02:00",
    )
    .unwrap();
    assert_eq!(
        c.path,
        "/containerLogs/default/web/init?sinceTime=2026-05-01T10%3A00%3A00Z"
    );
    assert!(!c.follow);
}

#[test]
fn log_options_are_validated_as_kube_apiserver_validates_them() {
    let e = call(&pod(), "log", "tailLines=-1&limitBytes=0").unwrap_err();
    assert_eq!((e.code, e.reason.as_str()), (422, "Invalid"));
    assert_eq!(
        e.message,
        "PodLogOptions \"web\" is invalid: [tailLines: Invalid value: -1: must be greater than \
         or equal to 0, limitBytes: Invalid value: 0: must be greater than 0]"
    );
    let e = call(
        &pod(),
        "log",
        "sinceSeconds=5&sinceTime=2026-05-01T10:00:00Z",
    )
    .unwrap_err();
    assert!(
        e.message.contains("at most one of `sinceTime`"),
        "{}",
        e.message
    );
    let e = call(&pod(), "log", "sinceSeconds=0").unwrap_err();
    assert!(
        e.message.contains("sinceSeconds: Invalid value: 0"),
        "{}",
        e.message
    );
    let e = call(&pod(), "log", "tailLines=ten").unwrap_err();
    assert_eq!(e.code, 400);
    let e = call(&pod(), "log", "sinceTime=yesterday").unwrap_err();
    assert_eq!((e.code, e.message.contains("sinceTime")), (400, true));
}

#[test]
fn exec_and_attach_name_the_pod_uid_and_send_the_kubelet_flags() {
    let c = call(
        &pod(),
        "exec",
        "command=sh&command=-c&command=echo%20hi&stdin=true&stdout=true&stderr=false&tty=1",
    )
    .unwrap();
    assert_eq!(
        c.path,
        "/exec/default/web/u-1/app?command=sh&command=-c&command=echo+hi&input=1&output=1&tty=1"
    );
    let c = call(
        &pod(),
        "attach",
        "container=app&stdout=1&stderr=1&command=x",
    )
    .unwrap();
    assert_eq!(c.path, "/attach/default/web/u-1/app?error=1&output=1");
    assert!(!c.follow);
    let mut no_uid = pod();
    no_uid["metadata"]["uid"].take();
    let c = call(&no_uid, "attach", "stdout=1").unwrap();
    assert_eq!(c.path, "/attach/default/web/app?output=1");
}

#[test]
fn port_forward_names_the_pod_uid_and_its_ports() {
    let c = call(&pod(), "portforward", "ports=8080&ports=80,443").unwrap();
    assert_eq!(c.path, "/portForward/default/web/u-1?port=8080%2C80%2C443");
    let c = call(&pod(), "portforward", "").unwrap();
    assert_eq!(c.path, "/portForward/default/web/u-1");
    let e = call(&pod(), "portforward", "ports=0").unwrap_err();
    assert_eq!((e.code, e.message.contains("\"0\"")), (400, true));
}

#[test]
fn containers_are_checked_and_defaulted_as_kube_apiserver_does() {
    let two = json!({"spec": {"nodeName": "n", "containers": [{"name": "a"}, {"name": "b"}],
                              "initContainers": [{"name": "i"}]}});
    let e = container_of(&two, "web", None).unwrap_err();
    assert_eq!(
        e.message,
        "a container name must be specified for pod web, choose one of: [i a b]"
    );
    assert_eq!(container_of(&two, "web", Some("i")).unwrap(), "i");
    let e = container_of(&two, "web", Some("c")).unwrap_err();
    assert_eq!(e.message, "container c is not valid for pod web");
    let e = call(&json!({"spec": {"containers": []}}), "log", "").unwrap_err();
    assert_eq!(e.message, "pod web does not have a host assigned");
    let mut done = pod();
    done["status"]["phase"] = "Succeeded".into();
    assert!(call(&done, "log", "").is_ok());
    let e = call(&done, "exec", "command=ls&stdout=1").unwrap_err();
    assert!(e.message.contains("completed pod"), "{}", e.message);
}
