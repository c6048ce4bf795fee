//! CRDs: registration, validation, termination and updates of the served versions.

use super::*;

#[tokio::test]
async fn crds_register_their_resources_and_take_them_away_on_delete() {
    let fx = fixture().await;
    let crd = fx
        .on("customresourcedefinitions", "", "")
        .create(widget_crd())
        .await
        .unwrap();
    let conditions = crd["status"]["conditions"].as_array().unwrap();
    assert!(
        conditions
            .iter()
            .any(|c| c["type"] == "Established" && c["status"] == "True")
    );
    assert_eq!(crd["status"]["acceptedNames"]["kind"], "Widget");
    assert!(fx.registry.get("example.com", "v1", "widgets").is_some());

    let widget = json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": {"size": 1}, "status": {"ok": true}});
    let created = fx
        .on("widgets", "default", "")
        .create(widget)
        .await
        .unwrap();
    assert!(
        created.get("status").is_none(),
        "status subresource: status dropped on create"
    );
    assert_eq!(created["metadata"]["generation"], 1);

    fx.on("customresourcedefinitions", "", "widgets.example.com")
        .delete(DeleteOptions::default())
        .await
        .unwrap();
    eventually("CRD and widgets gone", PATIENCE, || async {
        fx.registry.get("example.com", "v1", "widgets").is_none()
            && fx
                .stored("customresourcedefinitions", "", "widgets.example.com")
                .await
                .is_none()
    })
    .await;
    let key = ObjKey::new("widgets.example.com", "default", "w");
    assert!(fx.store.get(&key).await.unwrap().is_none());
}

#[tokio::test]
async fn invalid_crds_are_refused() {
    let fx = fixture().await;
    let mut crd = widget_crd();
    crd["metadata"]["name"] = json!("gadgets.example.com");
    let err = fx
        .on("customresourcedefinitions", "", "")
        .create(crd)
        .await
        .unwrap_err();
    assert_eq!(err.code, 422);
    let mut crd = widget_crd();
    crd["spec"]["versions"] = json!([]);
    let err = fx
        .on("customresourcedefinitions", "", "")
        .create(crd)
        .await
        .unwrap_err();
    assert_eq!(err.code, 422);
    assert!(fx.registry.get("example.com", "v1", "widgets").is_none());
}

#[tokio::test]
async fn stored_crds_are_registered_at_start() {
    let fx = fixture().await;
    fx.on("customresourcedefinitions", "", "")
        .create(widget_crd())
        .await
        .unwrap();
    let fresh = Registry::new(builtins());
    assert_eq!(register_existing_crds(&fx.store, &fresh).await.unwrap(), 1);
    assert!(fresh.get("example.com", "v1", "widgets").is_some());
}

#[tokio::test]
async fn a_terminating_crd_refuses_new_objects_until_its_objects_are_gone() {
    let fx = fixture().await;
    fx.on("customresourcedefinitions", "", "")
        .create(widget_crd())
        .await
        .unwrap();
    let widget = |name: &str| json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": name, "finalizers": ["example.com/hold"]}});
    fx.on("widgets", "default", "")
        .create(widget("w"))
        .await
        .unwrap();
    let smp = json!({"spec": {"size": 2}});
    let err = fx
        .on("widgets", "default", "w")
        .patch(PatchType::StrategicMerge, smp)
        .await
        .unwrap_err();
    assert_eq!(err.code, 415);

    let crd = fx.on("customresourcedefinitions", "", "widgets.example.com");
    let marked = crd.delete(DeleteOptions::default()).await.unwrap();
    let conditions = marked["status"]["conditions"].as_array().unwrap();
    assert!(conditions.iter().any(|c| c["type"] == "Terminating"));
    eventually("widget marked", PATIENCE, || async {
        fx.stored("widgets", "default", "w")
            .await
            .is_some_and(|w| w["metadata"]["deletionTimestamp"].is_string())
    })
    .await;
    let err = fx
        .on("widgets", "default", "")
        .create(widget("late"))
        .await
        .unwrap_err();
    assert_eq!(err.code, 405);
    assert!(fx.registry.get("example.com", "v1", "widgets").is_some());

    let release = json!({"metadata": {"finalizers": null}});
    fx.on("widgets", "default", "w")
        .patch(PatchType::Merge, release)
        .await
        .unwrap();
    eventually("CRD gone", PATIENCE, || async {
        fx.stored("customresourcedefinitions", "", "widgets.example.com")
            .await
            .is_none()
    })
    .await;
    assert!(fx.registry.get("example.com", "v1", "widgets").is_none());
}

#[tokio::test]
async fn crd_updates_keep_the_status_and_follow_new_versions() {
    let fx = fixture().await;
    let created = fx
        .on("customresourcedefinitions", "", "")
        .create(widget_crd())
        .await
        .unwrap();
    let mut body = created.clone();
    body["status"] = json!({});
    body["spec"]["versions"] = json!([
        {"name": "v1", "served": true, "storage": false, "schema": {"openAPIV3Schema": {"type": "object"}}},
        {"name": "v2", "served": true, "storage": true, "schema": {"openAPIV3Schema": {"type": "object"}}},
    ]);
    let updated = fx
        .on("customresourcedefinitions", "", "widgets.example.com")
        .update(body)
        .await
        .unwrap();
    assert_eq!(updated["status"]["storedVersions"], json!(["v1", "v2"]));
    assert_eq!(updated["metadata"]["generation"], 2);
    assert!(fx.registry.get("example.com", "v2", "widgets").is_some());
    assert!(fx.registry.get("example.com", "v1", "widgets").is_some());
}
