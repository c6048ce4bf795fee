//! Namespaces: creation at start, protected ones, deletion and finalize.

use super::*;

#[tokio::test]
async fn ensure_namespaces_creates_active_namespaces_once() {
    let fx = fixture().await;
    let ns = fx.stored("namespaces", "", "default").await.unwrap();
    assert_eq!(ns["status"]["phase"], "Active");
    assert_eq!(
        ns["metadata"]["labels"]["kubernetes.io/metadata.name"],
        "default"
    );
    let revision = fx.store.revision();
    fx.backend
        .ensure_namespaces(&["default", "kube-system"])
        .await
        .unwrap();
    assert_eq!(fx.store.revision(), revision);
}

#[tokio::test]
async fn system_namespaces_cannot_be_deleted() {
    let fx = fixture().await;
    let err = fx
        .on("namespaces", "", "default")
        .delete(DeleteOptions::default())
        .await
        .unwrap_err();
    assert_eq!((err.code, err.reason.as_str()), (403, "Forbidden"));
}

#[tokio::test]
async fn deleting_a_namespace_refuses_new_content_and_empties_it() {
    let fx = fixture().await;
    fx.on("namespaces", "", "")
        .create(json!({"metadata": {"name": "team"}}))
        .await
        .unwrap();
    fx.on("configmaps", "team", "")
        .create(configmap("plain"))
        .await
        .unwrap();
    fx.on("pods", "team", "")
        .create(pod("unscheduled", None))
        .await
        .unwrap();
    let mut held = configmap("held");
    held["metadata"]["finalizers"] = json!(["example.com/hold"]);
    fx.on("configmaps", "team", "").create(held).await.unwrap();

    let marked = fx
        .on("namespaces", "", "team")
        .delete(DeleteOptions::default())
        .await
        .unwrap();
    assert_eq!(marked["status"]["phase"], "Terminating");
    let err = fx
        .on("configmaps", "team", "")
        .create(configmap("late"))
        .await
        .unwrap_err();
    assert_eq!(err.code, 403);
    assert!(
        err.message.contains("because it is being terminated"),
        "{}",
        err.message
    );

    eventually("plain objects deleted", PATIENCE, || async {
        fx.stored("configmaps", "team", "plain").await.is_none()
            && fx.stored("pods", "team", "unscheduled").await.is_none()
    })
    .await;
    let held = fx.stored("configmaps", "team", "held").await.unwrap();
    assert!(held["metadata"]["deletionTimestamp"].is_string());
    assert!(fx.stored("namespaces", "", "team").await.is_some());

    let release = json!({"metadata": {"finalizers": null}});
    fx.on("configmaps", "team", "held")
        .patch(PatchType::Merge, release)
        .await
        .unwrap();
    eventually("namespace gone", PATIENCE, || async {
        fx.stored("namespaces", "", "team").await.is_none()
    })
    .await;
}

#[tokio::test]
async fn only_finalize_changes_the_finalizers_of_a_namespace() {
    let fx = fixture().await;
    fx.on("namespaces", "", "")
        .create(json!({"metadata": {"name": "team"}}))
        .await
        .unwrap();
    let ns = fx.on("namespaces", "", "team");
    let mut spec_change = fx.stored("namespaces", "", "team").await.unwrap();
    spec_change["spec"]["finalizers"] = json!([]);
    let kept = ns.update(spec_change).await.unwrap();
    assert_eq!(
        kept["spec"]["finalizers"],
        json!(["kubernetes"]),
        "only finalize changes them"
    );
    let finalized = ns
        .sub("finalize")
        .update(json!({"spec": {"finalizers": []}}))
        .await
        .unwrap();
    assert_eq!(finalized["spec"]["finalizers"], json!([]));
}
