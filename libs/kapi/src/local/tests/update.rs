//! Update and patch: preconditions, conflicts, status and spec writes, generation.

use super::*;

#[tokio::test]
async fn update_with_a_stale_resource_version_conflicts() {
    let fx = fixture().await;
    let created = fx
        .on("configmaps", "default", "")
        .create(configmap("c"))
        .await
        .unwrap();
    let call = fx.on("configmaps", "default", "c");
    let mut first = created.clone();
    first["data"]["a"] = json!("2");
    let updated = call.update(first).await.unwrap();
    assert!(rv(&updated) > rv(&created));
    assert_eq!(updated["metadata"]["uid"], created["metadata"]["uid"]);
    assert_eq!(
        updated["metadata"]["creationTimestamp"],
        created["metadata"]["creationTimestamp"]
    );
    let mut stale = created.clone();
    stale["data"]["a"] = json!("3");
    let err = call.update(stale).await.unwrap_err();
    assert_eq!((err.code, err.reason.as_str()), (409, "Conflict"));
    assert!(
        err.message.contains("the object has been modified"),
        "{}",
        err.message
    );
    let mut unconditional = configmap("c");
    unconditional["data"]["a"] = json!("4");
    assert_eq!(call.update(unconditional).await.unwrap()["data"]["a"], "4");
}

#[tokio::test]
async fn update_of_a_missing_object_is_not_found_and_names_must_match() {
    let fx = fixture().await;
    let err = fx
        .on("configmaps", "default", "c")
        .update(configmap("c"))
        .await
        .unwrap_err();
    assert_eq!(err.code, 404);
    fx.on("configmaps", "default", "")
        .create(configmap("c"))
        .await
        .unwrap();
    let err = fx
        .on("configmaps", "default", "c")
        .update(configmap("d"))
        .await
        .unwrap_err();
    assert_eq!(err.code, 400);
}

#[tokio::test]
async fn update_that_changes_nothing_keeps_the_resource_version() {
    let fx = fixture().await;
    let created = fx
        .on("configmaps", "default", "")
        .create(configmap("c"))
        .await
        .unwrap();
    let same = fx
        .on("configmaps", "default", "c")
        .update(created.clone())
        .await
        .unwrap();
    assert_eq!(same, created);
    assert_eq!(fx.store.revision(), rv(&created));
}

#[tokio::test]
async fn status_writes_touch_only_status_and_main_writes_keep_it() {
    let fx = fixture().await;
    let created = fx
        .on("pods", "default", "")
        .create(pod("web", Some("n1")))
        .await
        .unwrap();
    let mut body = created.clone();
    body["spec"]["nodeName"] = json!("elsewhere");
    body["status"] = json!({"phase": "Running"});
    let after_status = fx
        .on("pods", "default", "web")
        .status()
        .update(body)
        .await
        .unwrap();
    assert_eq!(after_status["status"]["phase"], "Running");
    assert_eq!(after_status["spec"]["nodeName"], "n1");
    assert_eq!(after_status["metadata"]["generation"], 1);

    let mut body = after_status.clone();
    body["status"] = json!({"phase": "Failed"});
    body["metadata"]["labels"] = json!({"app": "web"});
    let after_main = fx.on("pods", "default", "web").update(body).await.unwrap();
    assert_eq!(after_main["status"]["phase"], "Running");
    assert_eq!(after_main["metadata"]["labels"]["app"], "web");
}

#[tokio::test]
async fn generation_bumps_only_when_the_spec_changes() {
    let fx = fixture().await;
    let created = fx
        .on("pods", "default", "")
        .create(pod("web", Some("n1")))
        .await
        .unwrap();
    let call = fx.on("pods", "default", "web");
    let mut labelled = created.clone();
    labelled["metadata"]["labels"] = json!({"a": "b"});
    let labelled = call.update(labelled).await.unwrap();
    assert_eq!(labelled["metadata"]["generation"], 1);
    let mut respec = labelled.clone();
    respec["spec"]["containers"][0]["image"] = json!("nginx:2");
    let respec = call.update(respec).await.unwrap();
    assert_eq!(respec["metadata"]["generation"], 2);
    let mut forged = respec.clone();
    forged["metadata"]["generation"] = json!(40);
    assert_eq!(
        call.update(forged).await.unwrap()["metadata"]["generation"],
        2
    );
}

#[tokio::test]
async fn uid_in_the_body_is_a_precondition() {
    let fx = fixture().await;
    fx.on("configmaps", "default", "")
        .create(configmap("c"))
        .await
        .unwrap();
    let mut body = configmap("c");
    body["metadata"]["uid"] = json!("not-the-uid");
    let err = fx
        .on("configmaps", "default", "c")
        .update(body)
        .await
        .unwrap_err();
    assert_eq!(err.code, 409);
    assert!(
        err.message.contains("Precondition failed: UID"),
        "{}",
        err.message
    );
}

#[tokio::test]
async fn merge_json_and_strategic_patches_go_through_the_backend() {
    let fx = fixture().await;
    fx.on("pods", "default", "")
        .create(pod("web", Some("n1")))
        .await
        .unwrap();
    let call = fx.on("pods", "default", "web");

    let merged = call
        .patch(
            PatchType::Merge,
            json!({"metadata": {"labels": {"app": "web"}}}),
        )
        .await
        .unwrap();
    assert_eq!(merged["metadata"]["labels"]["app"], "web");

    let ops = json!([{"op": "replace", "path": "/spec/containers/0/image", "value": "nginx:2"}]);
    let patched = call.patch(PatchType::Json, ops).await.unwrap();
    assert_eq!(patched["spec"]["containers"][0]["image"], "nginx:2");
    assert_eq!(patched["metadata"]["generation"], 2);

    // Containers merge by name (a pod may only change their images).
    let smp = json!({"spec": {"containers": [{"name": "app", "image": "nginx:3"}]}});
    let patched = call.patch(PatchType::StrategicMerge, smp).await.unwrap();
    let containers = patched["spec"]["containers"].as_array().unwrap();
    assert_eq!(containers.len(), 1, "{containers:?}");
    assert_eq!(containers[0]["image"], "nginx:3");
    assert_eq!(
        containers[0]["terminationMessagePath"],
        "/dev/termination-log"
    );

    let status = json!({"spec": {"nodeName": "n2"}, "status": {"phase": "Running"}});
    let patched = call
        .status()
        .patch(PatchType::StrategicMerge, status)
        .await
        .unwrap();
    assert_eq!(patched["status"]["phase"], "Running");
    assert_eq!(patched["spec"]["nodeName"], "n1");
    assert_eq!(fx.stored("pods", "default", "web").await.unwrap(), patched);
}

#[tokio::test]
async fn patch_carrying_a_stale_resource_version_conflicts() {
    let fx = fixture().await;
    let created = fx
        .on("configmaps", "default", "")
        .create(configmap("c"))
        .await
        .unwrap();
    let call = fx.on("configmaps", "default", "c");
    call.patch(PatchType::Merge, json!({"data": {"b": "2"}}))
        .await
        .unwrap();
    let stale = json!({"metadata": {"resourceVersion": created["metadata"]["resourceVersion"]}, "data": {"c": "3"}});
    let err = call.patch(PatchType::Merge, stale).await.unwrap_err();
    assert_eq!((err.code, err.reason.as_str()), (409, "Conflict"));
}

#[tokio::test]
async fn patch_of_a_missing_object_is_not_found() {
    let fx = fixture().await;
    let err = fx
        .on("configmaps", "default", "c")
        .patch(PatchType::Merge, json!({"data": {}}))
        .await
        .unwrap_err();
    assert_eq!(err.code, 404);
}

#[tokio::test]
async fn concurrent_updates_from_the_same_version_have_one_winner() {
    let fx = Arc::new(fixture().await);
    let created = fx
        .on("configmaps", "default", "")
        .create(configmap("c"))
        .await
        .unwrap();
    let mut tasks = Vec::new();
    for i in 0..8 {
        let (fx, mut body) = (fx.clone(), created.clone());
        body["data"]["a"] = json!(i.to_string());
        tasks.push(tokio::spawn(async move {
            fx.on("configmaps", "default", "c").update(body).await
        }));
    }
    let mut won = 0;
    for task in tasks {
        match task.await.unwrap() {
            Ok(_) => won += 1,
            Err(e) => assert_eq!(e.code, 409),
        }
    }
    assert_eq!(won, 1);
}
