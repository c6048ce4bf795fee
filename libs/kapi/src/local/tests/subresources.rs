//! Pod subresources: binding and eviction.

use super::*;

#[tokio::test]
async fn binding_assigns_the_node_once() {
    let fx = fixture().await;
    fx.on("pods", "default", "")
        .create(pod("web", None))
        .await
        .unwrap();
    let binding = json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "web"}, "target": {"kind": "Node", "name": "n1"}});
    let call = fx.on("pods", "default", "web").sub("binding");
    call.create(binding.clone()).await.unwrap();
    let stored = fx.stored("pods", "default", "web").await.unwrap();
    assert_eq!(stored["spec"]["nodeName"], "n1");
    assert_eq!(call.create(binding).await.unwrap_err().code, 409);
}

#[tokio::test]
async fn eviction_deletes_the_pod() {
    let fx = fixture().await;
    fx.on("pods", "default", "")
        .create(pod("web", Some("n1")))
        .await
        .unwrap();
    let eviction = json!({"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "web"}, "deleteOptions": {"gracePeriodSeconds": 0}});
    let status = fx
        .on("pods", "default", "web")
        .sub("eviction")
        .create(eviction)
        .await
        .unwrap();
    assert_eq!(status["status"], "Success");
    assert!(fx.stored("pods", "default", "web").await.is_none());
}
