use axum::http::HeaderValue;
use serde_json::json;

use super::*;

fn id(s: &str) -> Id {
    Id::parse(s, "pod").unwrap()
}

#[test]
fn ids_split_into_scheme_name_and_port_as_kube_splits_them() {
    let parsed = |s: &str| {
        let i = id(s);
        (i.scheme, i.name, i.port)
    };
    let own = |a: &str, b: &str, c: &str| (a.to_owned(), b.to_owned(), c.to_owned());
    assert_eq!(parsed("web"), own("", "web", ""));
    assert_eq!(parsed("web:8080"), own("", "web", "8080"));
    assert_eq!(parsed("web:http"), own("", "web", "http"));
    assert_eq!(parsed("https:web:443"), own("https", "web", "443"));
    assert_eq!(parsed("http:web:"), own("http", "web", ""));
    for bad in ["", ":80", "ftp:web:21", "a:b:c:d"] {
        let e = Id::parse(bad, "service").unwrap_err();
        assert_eq!(
            (e.code, e.message.clone()),
            (400, format!("invalid service request {bad:?}"))
        );
    }
}

#[test]
fn a_pod_is_reached_at_its_ip_on_the_named_or_first_declared_port() {
    let pod = json!({
        "spec": {"nodeName": "edge-1", "containers": [
            {"name": "a"}, {"name": "b", "ports": [{"containerPort": 8080}, {"containerPort": 9090}]}]},
        "status": {"podIP": "10.244.1.7"},
    });
    let b = pod_backend(&pod, &id("web"), "default", false).unwrap();
    assert_eq!(b.addr.to_string(), "10.244.1.7:8080");
    assert_eq!((b.scheme.as_str(), b.node.as_str()), ("http", "edge-1"));
    assert_eq!(b.what, "pod \"default/web\"");
    let b = pod_backend(&pod, &id("https:web:9443"), "default", false).unwrap();
    assert_eq!((b.addr.port(), b.scheme.as_str()), (9443, "https"));
    let e = pod_backend(&pod, &id("web:http"), "default", false).unwrap_err();
    assert_eq!(e.code, 400);
    let no_ports =
        json!({"spec": {"containers": [{"name": "a"}]}, "status": {"podIP": "10.0.0.1"}});
    assert_eq!(
        pod_backend(&no_ports, &id("w"), "d", false)
            .unwrap()
            .addr
            .port(),
        80
    );
}

#[test]
fn loopback_link_local_and_missing_addresses_are_refused() {
    for ip in [
        "",
        "bogus",
        "0.0.0.0",
        "169.254.169.254",
        "224.0.0.1",
        "fe80::1",
        "::",
    ] {
        let e = allowed_ip(ip, true).unwrap_err();
        assert_eq!(
            (e.code, e.message.as_str()),
            (400, "address not allowed"),
            "{ip}"
        );
    }
    assert!(allowed_ip("127.0.0.1", false).is_err());
    assert!(allowed_ip("::1", false).is_err());
    assert!(allowed_ip("127.0.0.1", true).is_ok());
    assert!(allowed_ip("10.244.0.5", false).is_ok());
}

#[test]
fn a_service_port_number_means_the_port_of_that_name() {
    let svc = json!({"spec": {"ports": [{"name": "http", "port": 80}, {"name": "metrics", "port": 9100}]}});
    assert_eq!(service_port_name(&svc, &id("web:9100")).unwrap(), "metrics");
    assert_eq!(service_port_name(&svc, &id("web:http")).unwrap(), "http");
    assert_eq!(service_port_name(&svc, &id("web")).unwrap(), "");
    let e = service_port_name(&svc, &id("web:81")).unwrap_err();
    assert_eq!(
        (e.code, e.message.as_str()),
        (503, "no service port 81 found for service \"web\"")
    );
}

#[test]
fn only_ready_endpoints_of_the_named_port_are_candidates() {
    let slices = [
        json!({"ports": [{"name": "http", "port": 8080}, {"name": "admin", "port": 9000}],
        "endpoints": [
            {"addresses": ["10.0.0.1"], "conditions": {"ready": true}, "nodeName": "n1",
             "targetRef": {"kind": "Pod", "name": "web-0"}},
            {"addresses": ["10.0.0.2"], "conditions": {"ready": false},
             "targetRef": {"kind": "Pod", "name": "web-1"}},
            {"addresses": ["10.0.0.3"], "targetRef": {"kind": "Pod", "name": "web-2"}},
        ]}),
        json!({"ports": [{"name": "other", "port": 1}],
               "endpoints": [{"addresses": ["10.0.0.9"]}]}),
    ];
    let eps = ready_endpoints(&slices, "http");
    let got: Vec<(&str, u16, Option<&str>)> = eps
        .iter()
        .map(|e| (e.ip.as_str(), e.port, e.pod.as_deref()))
        .collect();
    assert_eq!(
        got,
        [
            ("10.0.0.1", 8080, Some("web-0")),
            ("10.0.0.3", 8080, Some("web-2"))
        ]
    );
    assert_eq!(eps[0].node, "n1");
    assert_eq!(ready_endpoints(&slices, "admin")[0].port, 9000);
    assert!(ready_endpoints(&slices, "nope").is_empty());
}

#[test]
fn the_forwarded_path_is_what_follows_proxy() {
    let ns = |p: &str| forwarded_path(p, true);
    assert_eq!(ns("/api/v1/namespaces/d/services/web:http/proxy/x"), "/x");
    assert_eq!(
        ns("/api/v1/namespaces/d/services/web/proxy/a/b%2Fc/"),
        "/a/b%2Fc/"
    );
    assert_eq!(ns("/api/v1/namespaces/d/pods/web/proxy"), "/");
    assert_eq!(ns("/api/v1/namespaces/d/pods/web/proxy/"), "/");
    assert_eq!(
        forwarded_path("/api/v1/nodes/n:9100/proxy/metrics", false),
        "/metrics"
    );
    assert_eq!(forwarded_path("/apis/g/v1/things/t/proxy/q", false), "/q");
}

#[test]
fn credentials_and_hop_by_hop_headers_are_not_sent_on() {
    let mut headers = HeaderMap::new();
    for (k, v) in [
        ("authorization", "Bearer secret"),
        ("impersonate-user", "admin"),
        ("connection", "keep-alive"),
        ("host", "api:6443"),
        ("accept", "text/plain"),
        ("x-trace", "1"),
    ] {
        headers.insert(HeaderName::from_static(k), HeaderValue::from_static(v));
    }
    let backend = Backend {
        scheme: "http".into(),
        addr: "10.0.0.1:8080".parse().unwrap(),
        node: String::new(),
        what: String::new(),
    };
    let out = forwarded_headers(&headers, &backend);
    let mut names: Vec<&str> = out.keys().map(HeaderName::as_str).collect();
    names.sort();
    assert_eq!(names, ["accept", "host", "x-trace"]);
    assert_eq!(out[header::HOST], "10.0.0.1:8080");
}

#[test]
fn methods_are_authorized_as_the_verbs_they_mean() {
    let v = |m: Method| verb(&m);
    assert_eq!(v(Method::GET), "get");
    assert_eq!(v(Method::HEAD), "get");
    assert_eq!(v(Method::POST), "create");
    assert_eq!(v(Method::PUT), "update");
    assert_eq!(v(Method::PATCH), "patch");
    assert_eq!(v(Method::DELETE), "delete");
    assert_eq!(v(Method::OPTIONS), "options");
}
