use serde_json::json;

use super::*;

const NOW: i64 = 1_700_000_000;

fn parse(body: Value) -> Result<Request, ApiError> {
    Request::parse(&body, "builder")
}

fn invalid_message(body: Value) -> String {
    let e = parse(body).unwrap_err();
    assert_eq!(
        (e.code, e.reason.as_str()),
        (422, "Invalid"),
        "{}",
        e.message
    );
    e.message
}

#[test]
fn an_empty_request_is_for_the_api_for_an_hour() {
    let request = parse(json!({"spec": {"audiences": []}})).unwrap();
    assert_eq!(
        request,
        Request {
            audiences: vec![jwt::ISSUER.into()],
            expiration_seconds: 3600,
            bound: None,
        }
    );
    assert_eq!(parse(json!({})).unwrap(), request);
}

#[test]
fn the_lifetime_is_at_least_ten_minutes_and_shortened_to_two_days() {
    assert_eq!(
        invalid_message(json!({"spec": {"expirationSeconds": 599}})),
        "TokenRequest.authentication.k8s.io \"\" is invalid: spec.expirationSeconds: Invalid value: 599: may not specify a duration less than 10 minutes"
    );
    let too_long = invalid_message(json!({"spec": {"expirationSeconds": (1i64 << 32) + 1}}));
    assert!(too_long.contains("larger than 2^32 seconds"), "{too_long}");
    let asked = |secs: i64| {
        parse(json!({"spec": {"expirationSeconds": secs}}))
            .unwrap()
            .expiration_seconds
    };
    assert_eq!(asked(600), 600);
    assert_eq!(asked(7200), 7200);
    assert_eq!(asked(72 * 3600), MAX_EXPIRATION_SECONDS);
}

#[test]
fn a_token_binds_to_a_pod_or_a_secret_by_name() {
    let bound = |r: Value| parse(json!({"spec": {"boundObjectRef": r}}));
    let pod = bound(json!({"kind": "Pod", "apiVersion": "v1", "name": "web", "uid": "u1"}));
    assert_eq!(
        pod.unwrap().bound,
        Some(BoundRef {
            kind: BoundKind::Pod,
            name: "web".into(),
            uid: "u1".into(),
        })
    );
    let secret = bound(json!({"kind": "Secret", "name": "s"})).unwrap();
    assert_eq!(secret.bound.unwrap().kind, BoundKind::Secret);
    let node = bound(json!({"kind": "Node", "apiVersion": "v1", "name": "n1"})).unwrap_err();
    assert_eq!(
        (node.code, node.message.as_str()),
        (400, "cannot bind token to object of type /v1, Kind=Node")
    );
    let deployment = bound(json!({"kind": "Pod", "apiVersion": "apps/v1", "name": "web"}));
    assert_eq!(deployment.unwrap_err().code, 400);
    let unnamed = bound(json!({"kind": "Pod", "apiVersion": "v1"})).unwrap_err();
    assert!(
        unnamed
            .message
            .contains("spec.boundObjectRef.name: Required value"),
        "{}",
        unnamed.message
    );
}

#[test]
fn a_request_for_another_account_or_of_another_kind_is_refused() {
    let other = invalid_message(json!({"metadata": {"name": "other"}}));
    assert!(
        other.contains("metadata.name: Invalid value: \"other\": must match the service account name if specified"),
        "{other}"
    );
    assert!(parse(json!({"metadata": {"name": "builder", "namespace": "default"}})).is_ok());
    let configmap = parse(json!({"kind": "ConfigMap"})).unwrap_err();
    assert_eq!(configmap.code, 400);
    let v1beta1 = parse(json!({"apiVersion": "authentication.k8s.io/v1beta1"})).unwrap_err();
    assert_eq!(v1beta1.code, 400);
    let typed = parse(json!({"apiVersion": API_VERSION, "kind": KIND})).unwrap();
    assert_eq!(typed.expiration_seconds, 3600);
    for malformed in [
        json!({"spec": "all"}),
        json!({"spec": {"audiences": "api"}}),
        json!({"spec": {"expirationSeconds": "1h"}}),
        json!({"metadata": []}),
    ] {
        assert_eq!(
            parse(malformed.clone()).unwrap_err().code,
            400,
            "{malformed}"
        );
    }
}

#[test]
fn the_answer_is_the_request_with_its_defaults_and_the_token() {
    let body = json!({
        "apiVersion": API_VERSION, "kind": KIND,
        "metadata": {"namespace": "default", "labels": {"a": "b"}},
        "spec": {"audiences": ["api"], "expirationSeconds": 72 * 3600,
                 "boundObjectRef": {"kind": "Pod", "apiVersion": "v1", "name": "web"}},
    });
    let request = Request::parse(&body, "builder").unwrap();
    let answer = request.answer(&body, "default", "builder", "t.o.k", NOW);
    assert_eq!(
        answer,
        json!({
            "apiVersion": API_VERSION, "kind": KIND,
            "metadata": {"name": "builder", "namespace": "default", "labels": {"a": "b"},
                         "creationTimestamp": "2023-11-14T22:13:20Z"},
            "spec": {"audiences": ["api"], "expirationSeconds": MAX_EXPIRATION_SECONDS,
                     "boundObjectRef": {"kind": "Pod", "apiVersion": "v1", "name": "web"}},
            "status": {"token": "t.o.k", "expirationTimestamp": "2023-11-16T22:13:20Z"},
        })
    );
}

#[test]
fn a_pod_runs_as_the_default_account_unless_it_names_one() {
    assert_eq!(pod_service_account(&json!({"spec": {}})), "default");
    let named = json!({"spec": {"serviceAccountName": "builder"}});
    assert_eq!(pod_service_account(&named), "builder");
    let deprecated = json!({"spec": {"serviceAccount": "builder"}});
    assert_eq!(pod_service_account(&deprecated), "builder");
}

#[test]
fn a_key_is_made_once_and_read_back() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("apiserver/sa.key");
    let writer = objstore::Writer::open(dir.path().join("s.db"), Default::default()).unwrap();
    let store = writer.reader();
    let first = Tokens::load_or_generate(&path, store.clone()).unwrap();
    let made = std::fs::read_to_string(&path).unwrap();
    assert!(made.starts_with("-----BEGIN PRIVATE KEY-----\n"), "{made}");
    let again = Tokens::load_or_generate(&path, store.clone()).unwrap();
    assert_eq!(std::fs::read_to_string(&path).unwrap(), made, "kept");
    let claims = Claims {
        iss: jwt::ISSUER.into(),
        sub: Claims::subject("default", "builder"),
        aud: vec![jwt::ISSUER.into()],
        exp: NOW + 600,
        iat: NOW,
        nbf: NOW,
        kubernetes: Private {
            namespace: "default".into(),
            serviceaccount: Ref {
                name: "builder".into(),
                uid: "u".into(),
            },
            pod: None,
            secret: None,
        },
    };
    let token = first.signer.sign(&claims).unwrap();
    assert_eq!(again.signer.verify(&token, NOW), Ok(claims));
    std::fs::write(&path, "not a key").unwrap();
    assert!(matches!(
        Tokens::load_or_generate(&path, store),
        Err(ApiServerError::ServiceAccountKey { .. })
    ));
}
