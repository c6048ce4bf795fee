//! Objects past the store's limit (1.5 MiB, etcd's default) are refused with 413
//! `RequestEntityTooLarge` by every write that would store them, and nothing is stored.

use axum::http::{Method, StatusCode};
use serde_json::{Value, json};

use crate::support::{Harness, local_harness};

const JSON: &str = "application/json";
/// Pod templates: their containers' `args` take any length, unlike a ConfigMap's data (1 MiB).
const PT: &str = "/api/v1/namespaces/default/podtemplates";

/// 1.6 MiB of data: the request fits the 3 MiB body limit, the object does not fit the store.
fn big() -> String {
    "x".repeat(1024 * 1024 + 600 * 1024)
}

fn template(name: &str, arg: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "PodTemplate",
        "metadata": {"name": name, "namespace": "default"},
        "template": containers(arg),
    })
}

fn containers(arg: &str) -> Value {
    json!({
        "metadata": {"labels": {"app": "a"}},
        "spec": {"containers": [{"name": "c", "image": "nginx", "args": [arg]}]},
    })
}

/// The 413 names the object and the limit.
fn assert_too_large(reply: &crate::support::Reply, name: &str) {
    let status = reply.assert_status(413, "RequestEntityTooLarge");
    let message = status["message"].as_str().unwrap();
    assert!(
        message.contains(&format!("podtemplates \"{name}\"")),
        "{message}"
    );
    assert!(message.contains("1572864"), "{message}");
    assert_eq!(status["details"]["name"], name, "{status}");
}

async fn stored(h: &Harness, name: &str) -> Option<Value> {
    let reply = h.get(&format!("{PT}/{name}")).await;
    (reply.status == StatusCode::OK).then(|| reply.json())
}

#[tokio::test]
async fn a_create_of_a_too_large_object_is_413_and_stores_nothing() {
    let h = local_harness().await;
    let revision = h.store.revision();
    for uri in [PT.to_owned(), format!("{PT}?dryRun=All")] {
        let reply = h
            .call(Method::POST, &uri, JSON, template("big", &big()))
            .await;
        assert_too_large(&reply, "big");
    }
    assert!(stored(&h, "big").await.is_none());
    assert_eq!(h.store.revision(), revision, "nothing was written");

    let reply = h.call(Method::POST, PT, JSON, template("small", "x")).await;
    assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.json());
}

#[tokio::test]
async fn an_update_or_any_patch_that_makes_an_object_too_large_is_413_and_keeps_it() {
    let h = local_harness().await;
    let reply = h
        .call(Method::POST, PT, JSON, template("cm", "small"))
        .await;
    assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.json());
    let before = stored(&h, "cm").await.unwrap();
    let uri = format!("{PT}/cm");

    let reply = h
        .call(Method::PUT, &uri, JSON, template("cm", &big()))
        .await;
    assert_too_large(&reply, "cm");

    let patches = [
        (
            "application/json-patch+json",
            json!([{"op": "add", "path": "/template/spec/containers/0/args/-", "value": big()}]),
        ),
        (
            "application/merge-patch+json",
            json!({"template": containers(&big())}),
        ),
        (
            "application/strategic-merge-patch+json",
            json!({"template": containers(&big())}),
        ),
        ("application/apply-patch+yaml", template("cm", &big())),
    ];
    for (content_type, patch) in patches {
        let reply = h
            .call(
                Method::PATCH,
                &format!("{uri}?fieldManager=test"),
                content_type,
                patch,
            )
            .await;
        assert_eq!(
            reply.status.as_u16(),
            413,
            "{content_type}: {}",
            reply.json()
        );
        assert_too_large(&reply, "cm");
    }
    assert_eq!(
        stored(&h, "cm").await.unwrap(),
        before,
        "the object is unchanged"
    );
}

#[tokio::test]
async fn an_apply_that_creates_a_too_large_object_is_413_and_stores_nothing() {
    let h = local_harness().await;
    let reply = h
        .call(
            Method::PATCH,
            &format!("{PT}/fresh?fieldManager=test"),
            "application/apply-patch+yaml",
            template("fresh", &big()),
        )
        .await;
    assert_too_large(&reply, "fresh");
    assert!(stored(&h, "fresh").await.is_none());
}

#[tokio::test]
async fn copies_that_would_grow_an_object_past_the_limit_are_refused() {
    let h = local_harness().await;
    let value = "x".repeat(256 * 1024);
    let reply = h.call(Method::POST, PT, JSON, template("cm", &value)).await;
    assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.json());
    let ops: Vec<Value> = (0..40)
        .map(|i| json!({"op": "copy", "from": "/template", "path": format!("/t{i}")}))
        .collect();
    let reply = h
        .call(
            Method::PATCH,
            &format!("{PT}/cm"),
            "application/json-patch+json",
            Value::Array(ops),
        )
        .await;
    let status = reply.assert_status(413, "RequestEntityTooLarge");
    assert!(
        status["message"].as_str().unwrap().contains("copy"),
        "{status}"
    );
}
