//! Create: what the backend fills in, what it refuses, dry run.

use super::*;

#[tokio::test]
async fn create_sets_uid_timestamp_generation_and_the_revision_as_resource_version() {
    let fx = fixture().await;
    let created = fx
        .on("pods", "default", "")
        .create(pod("web", None))
        .await
        .unwrap();
    let meta = &created["metadata"];
    assert_eq!(meta["name"], "web");
    assert_eq!(meta["namespace"], "default");
    assert_eq!(meta["uid"].as_str().unwrap().len(), 36);
    assert!(parse_rfc3339(meta["creationTimestamp"].as_str().unwrap()).is_some());
    assert_eq!(meta["generation"], 1);
    assert_eq!(rv(&created), fx.store.revision());
    assert_eq!(created["status"]["phase"], "Pending");
    assert_eq!(fx.stored("pods", "default", "web").await.unwrap(), created);
}

#[tokio::test]
async fn objects_are_stored_in_go_field_order_with_their_type_meta_first() {
    let fx = fixture().await;
    let mut created = fx
        .on("pods", "default", "")
        .create(pod("web", Some("n1")))
        .await
        .unwrap();
    let key = ObjKey::new("pods", "default", "web");
    let text = fx.store.get(&key).await.unwrap().unwrap().value.clone();
    let text = String::from_utf8_lossy(&text);
    assert!(
        text.starts_with(
            r#"{"kind":"Pod","apiVersion":"v1","metadata":{"name":"web","namespace":"default","#
        ),
        "{text}"
    );
    let spec = text.find(r#""spec":{"#).expect("spec");
    assert!(spec < text.find(r#""status":"#).expect("status"), "{text}");
    created["metadata"]["labels"] = json!({"app": "a"});
    fx.on("pods", "default", "web")
        .update(created)
        .await
        .unwrap();
    let text = fx.store.get(&key).await.unwrap().unwrap().value.clone();
    assert!(text.starts_with(br#"{"kind":"Pod","apiVersion":"v1","metadata":{"name":"web","#));
}

#[tokio::test]
async fn only_pods_crds_and_custom_resources_get_a_generation() {
    let fx = fixture().await;
    let cm = fx
        .on("configmaps", "default", "")
        .create(configmap("c"))
        .await
        .unwrap();
    assert!(cm["metadata"].get("generation").is_none());
    let lease = json!({"metadata": {"name": "n1"}, "spec": {"holderIdentity": "n1"}});
    let lease = fx.on("leases", "default", "").create(lease).await.unwrap();
    assert!(lease["metadata"].get("generation").is_none());
    let mut renewed = lease.clone();
    renewed["spec"]["renewTime"] = json!("2026-05-01T10:00:00.000000Z");
    let renewed = fx
        .on("leases", "default", "n1")
        .update(renewed)
        .await
        .unwrap();
    assert!(renewed["metadata"].get("generation").is_none());
}

#[tokio::test]
async fn generate_name_appends_five_random_characters() {
    let fx = fixture().await;
    let body = json!({"metadata": {"generateName": "job-"}, "data": {}});
    let a = fx
        .on("configmaps", "default", "")
        .create(body.clone())
        .await
        .unwrap();
    let b = fx
        .on("configmaps", "default", "")
        .create(body)
        .await
        .unwrap();
    let (a, b) = (
        a["metadata"]["name"].as_str().unwrap(),
        b["metadata"]["name"].as_str().unwrap(),
    );
    assert!(a.starts_with("job-") && a.len() == 9, "{a}");
    assert_ne!(a, b);
}

#[tokio::test]
async fn create_of_an_existing_name_is_already_exists() {
    let fx = fixture().await;
    let call = fx.on("configmaps", "default", "");
    call.create(configmap("c")).await.unwrap();
    let err = call.create(configmap("c")).await.unwrap_err();
    assert_eq!((err.code, err.reason.as_str()), (409, "AlreadyExists"));
}

#[tokio::test]
async fn create_refuses_bodies_that_do_not_fit_the_request() {
    let fx = fixture().await;
    let call = fx.on("configmaps", "default", "");
    let mut with_rv = configmap("c");
    with_rv["metadata"]["resourceVersion"] = json!("5");
    assert_eq!(call.create(with_rv).await.unwrap_err().code, 400);
    let mut other_ns = configmap("c");
    other_ns["metadata"]["namespace"] = json!("kube-system");
    assert_eq!(call.create(other_ns).await.unwrap_err().code, 400);
    let wrong_kind = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "c"}});
    assert_eq!(call.create(wrong_kind).await.unwrap_err().code, 400);
    let err = call.create(configmap("Not_Valid")).await.unwrap_err();
    assert_eq!((err.code, err.reason.as_str()), (422, "Invalid"));
    assert!(err.message.contains("metadata.name"), "{}", err.message);
    let err = call.create(json!({"data": {}})).await.unwrap_err();
    assert_eq!(err.code, 422);
    let ns = json!({"metadata": {"name": "a.b"}});
    assert_eq!(
        fx.on("namespaces", "", "")
            .create(ns)
            .await
            .unwrap_err()
            .code,
        422
    );
}

#[tokio::test]
async fn create_in_a_missing_namespace_is_not_found() {
    let fx = fixture().await;
    let err = fx
        .on("configmaps", "nowhere", "")
        .create(configmap("c"))
        .await
        .unwrap_err();
    assert_eq!(err.code, 404);
    assert!(err.message.contains("namespaces"), "{}", err.message);
}

#[tokio::test]
async fn dry_run_answers_without_storing() {
    let fx = fixture().await;
    let before = fx.store.revision();
    let obj = fx
        .on("configmaps", "default", "")
        .dry_run()
        .create(configmap("c"))
        .await
        .unwrap();
    assert_eq!(obj["metadata"]["name"], "c");
    assert!(obj["metadata"]["uid"].is_string());
    assert!(fx.stored("configmaps", "default", "c").await.is_none());
    fx.on("configmaps", "default", "")
        .create(configmap("c"))
        .await
        .unwrap();
    let after_create = fx.store.revision();
    let mut changed = configmap("c");
    changed["data"]["a"] = json!("2");
    let obj = fx
        .on("configmaps", "default", "c")
        .dry_run()
        .update(changed)
        .await
        .unwrap();
    assert_eq!(obj["data"]["a"], "2");
    fx.on("configmaps", "default", "c")
        .dry_run()
        .delete(DeleteOptions::default())
        .await
        .unwrap();
    let stored = fx.stored("configmaps", "default", "c").await.unwrap();
    assert_eq!(stored["data"]["a"], "1");
    assert_eq!(fx.store.revision(), after_create);
    assert!(after_create > before);
}
