//! Delete: graceful pod deletion, finalizers, preconditions.

use super::*;

#[tokio::test]
async fn scheduled_pods_are_deleted_gracefully_until_the_final_delete() {
    let fx = fixture().await;
    let created = fx
        .on("pods", "default", "")
        .create(pod("web", Some("n1")))
        .await
        .unwrap();
    let call = fx.on("pods", "default", "web");
    let marked = call.delete(DeleteOptions::default()).await.unwrap();
    assert_eq!(marked["metadata"]["deletionGracePeriodSeconds"], 30);
    let at = parse_rfc3339(marked["metadata"]["deletionTimestamp"].as_str().unwrap()).unwrap();
    let created_at =
        parse_rfc3339(created["metadata"]["creationTimestamp"].as_str().unwrap()).unwrap();
    assert!(at >= created_at + 29, "{at} vs {created_at}");
    assert!(fx.stored("pods", "default", "web").await.is_some());

    let shorter = call.delete(grace(10)).await.unwrap();
    assert_eq!(shorter["metadata"]["deletionGracePeriodSeconds"], 10);
    let longer = call.delete(grace(60)).await.unwrap();
    assert_eq!(longer["metadata"]["deletionGracePeriodSeconds"], 10);

    let wrong_uid = DeleteOptions {
        uid: Some("other".into()),
        ..grace(0)
    };
    assert_eq!(call.delete(wrong_uid).await.unwrap_err().code, 409);
    let kubelet = DeleteOptions {
        uid: created["metadata"]["uid"].as_str().map(str::to_owned),
        ..grace(0)
    };
    let gone = call.delete(kubelet).await.unwrap();
    assert_eq!(gone["metadata"]["name"], "web");
    // Its last state says it is gone: the grace period was shortened to 0 (kube-apiserver's
    // answer; lwproxy tells a removal from a mark by it).
    assert_eq!(gone["metadata"]["deletionGracePeriodSeconds"], 0);
    assert!(fx.stored("pods", "default", "web").await.is_none());
}

#[tokio::test]
async fn unscheduled_pods_are_deleted_at_once() {
    let fx = fixture().await;
    fx.on("pods", "default", "")
        .create(pod("web", None))
        .await
        .unwrap();
    fx.on("pods", "default", "web")
        .delete(DeleteOptions::default())
        .await
        .unwrap();
    assert!(fx.stored("pods", "default", "web").await.is_none());
    let err = fx
        .on("pods", "default", "web")
        .delete(DeleteOptions::default())
        .await
        .unwrap_err();
    assert_eq!(err.code, 404);
}

#[tokio::test]
async fn finalizers_keep_the_object_until_the_last_is_removed() {
    let fx = fixture().await;
    let mut body = configmap("c");
    body["metadata"]["finalizers"] = json!(["example.com/hold"]);
    fx.on("configmaps", "default", "")
        .create(body)
        .await
        .unwrap();
    let call = fx.on("configmaps", "default", "c");
    let marked = call.delete(DeleteOptions::default()).await.unwrap();
    assert!(marked["metadata"]["deletionTimestamp"].is_string());
    assert_eq!(marked["metadata"]["deletionGracePeriodSeconds"], 0);
    assert!(fx.stored("configmaps", "default", "c").await.is_some());

    let more = json!({"metadata": {"finalizers": ["example.com/hold", "example.com/more"]}});
    let err = call.patch(PatchType::Merge, more).await.unwrap_err();
    assert_eq!(err.code, 422);

    let mut release = marked.clone();
    release["metadata"]["finalizers"] = json!([]);
    let last = call.update(release).await.unwrap();
    assert_eq!(last["metadata"]["name"], "c");
    assert!(fx.stored("configmaps", "default", "c").await.is_none());
}

#[tokio::test]
async fn delete_preconditions_must_match() {
    let fx = fixture().await;
    let created = fx
        .on("configmaps", "default", "")
        .create(configmap("c"))
        .await
        .unwrap();
    let call = fx.on("configmaps", "default", "c");
    let stale = DeleteOptions {
        resource_version: Some("1".into()),
        ..DeleteOptions::default()
    };
    let err = call.delete(stale).await.unwrap_err();
    assert_eq!((err.code, err.reason.as_str()), (409, "Conflict"));
    let current = DeleteOptions {
        resource_version: created["metadata"]["resourceVersion"]
            .as_str()
            .map(str::to_owned),
        ..DeleteOptions::default()
    };
    call.delete(current).await.unwrap();
    assert!(fx.stored("configmaps", "default", "c").await.is_none());
}
