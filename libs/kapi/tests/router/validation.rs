//! What the local backend refuses before it stores anything: ConfigMap and Secret data whose keys
//! would escape a mounted volume or whose values are not what the kind holds, and names that break
//! their kind's rule (named as the cause, not a field derived from them).

use axum::http::{Method, StatusCode};
use serde_json::{Value, json};

use crate::support::local_harness;

const JSON: &str = "application/json";

fn first_cause(status: &Value) -> (String, String) {
    let cause = &status["details"]["causes"][0];
    let text = |k: &str| cause[k].as_str().unwrap_or_default().to_owned();
    (text("field"), text("message"))
}

#[tokio::test]
async fn configmap_keys_that_are_paths_dots_or_empty_are_refused() {
    let h = local_harness().await;
    for key in ["../../etc/cron.d/x", "..", ".", "", "a/b"] {
        let body = json!({"metadata": {"name": "cm"}, "data": {key: "* * * * * root sh"}});
        let reply = h
            .call(
                Method::POST,
                "/api/v1/namespaces/default/configmaps",
                JSON,
                body,
            )
            .await;
        let status = reply.assert_status(422, "Invalid");
        let (field, _) = first_cause(&status);
        assert_eq!(field, format!("data[{key}]"), "{status}");
    }
    let good = json!({"metadata": {"name": "cm"}, "data": {"app.yaml": "x: 1"}});
    let reply = h
        .call(
            Method::POST,
            "/api/v1/namespaces/default/configmaps",
            JSON,
            good,
        )
        .await;
    assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.json());
    let sneaky = json!({"data": {"../escape": "boom"}});
    let reply = h
        .call(
            Method::PATCH,
            "/api/v1/namespaces/default/configmaps/cm",
            "application/merge-patch+json",
            sneaky,
        )
        .await;
    reply.assert_status(422, "Invalid");
    let stored = h
        .get("/api/v1/namespaces/default/configmaps/cm")
        .await
        .json();
    assert_eq!(stored["data"], json!({"app.yaml": "x: 1"}));
}

#[tokio::test]
async fn secret_string_data_is_stored_as_base64_data_and_bad_base64_is_refused() {
    let h = local_harness().await;
    let body = json!({
        "metadata": {"name": "creds"},
        "data": {"user": "YWRtaW4="},
        "stringData": {"password": "s3cr3t"},
    });
    let reply = h
        .call(
            Method::POST,
            "/api/v1/namespaces/default/secrets",
            JSON,
            body,
        )
        .await;
    assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.json());
    let stored = h
        .get("/api/v1/namespaces/default/secrets/creds")
        .await
        .json();
    assert_eq!(
        stored["data"],
        json!({"user": "YWRtaW4=", "password": "czNjcjN0"})
    );
    assert!(stored.get("stringData").is_none(), "{stored}");

    let update = json!({"stringData": {"user": "root"}});
    let reply = h
        .call(
            Method::PATCH,
            "/api/v1/namespaces/default/secrets/creds",
            "application/merge-patch+json",
            update,
        )
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.json());
    assert_eq!(reply.json()["data"]["user"], "cm9vdA==");
    assert!(reply.json().get("stringData").is_none());

    let bad = json!({"metadata": {"name": "bad"}, "data": {"k": "not base64!"}});
    let reply = h
        .call(
            Method::POST,
            "/api/v1/namespaces/default/secrets",
            JSON,
            bad,
        )
        .await;
    let status = reply.assert_status(400, "BadRequest");
    assert!(
        status["message"]
            .as_str()
            .unwrap()
            .contains("illegal base64"),
        "{status}"
    );
    let escaping = json!({"metadata": {"name": "esc"}, "stringData": {"../../etc/cron.d/x": "x"}});
    let reply = h
        .call(
            Method::POST,
            "/api/v1/namespaces/default/secrets",
            JSON,
            escaping,
        )
        .await;
    let status = reply.assert_status(422, "Invalid");
    assert_eq!(first_cause(&status).0, "data[../../etc/cron.d/x]");
}

#[tokio::test]
async fn a_namespace_name_too_long_is_blamed_on_metadata_name() {
    let h = local_harness().await;
    let name = "n".repeat(300);
    let reply = h
        .call(
            Method::POST,
            "/api/v1/namespaces",
            JSON,
            json!({"metadata": {"name": name}}),
        )
        .await;
    let status = reply.assert_status(422, "Invalid");
    let (field, message) = first_cause(&status);
    assert_eq!(field, "metadata.name", "{status}");
    assert!(
        message.contains("must be no more than 63 characters"),
        "{message}"
    );
}
