//! CertificateSigningRequests: the requester is the authenticated user.

use super::*;

fn csr(name: &str) -> Value {
    json!({
        "apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest",
        "metadata": {"name": name},
        "spec": {"request": "LS0t", "signerName": "kubernetes.io/kube-apiserver-client",
                 "usages": ["client auth"],
                 "username": "someone-else", "uid": "forged", "groups": ["system:masters"],
                 "extra": {"scopes": ["all"]}},
        "status": {"conditions": [{"type": "Approved", "status": "True"}],
                   "certificate": "LS0t"},
    })
}

#[tokio::test]
async fn a_created_request_records_the_requester_not_what_the_body_claims() {
    let mut fx = fixture().await;
    fx.user = User {
        name: "alice".into(),
        groups: vec!["devs".into(), "system:authenticated".into()],
    };
    let made = fx
        .on("certificatesigningrequests", "", "")
        .create(csr("a"))
        .await
        .unwrap();
    let spec = &made["spec"];
    assert_eq!(spec["username"], "alice");
    assert_eq!(spec["groups"], json!(["devs", "system:authenticated"]));
    assert!(spec.get("uid").is_none(), "{spec}");
    assert!(spec.get("extra").is_none(), "{spec}");
    assert!(made.get("status").is_none(), "{made}");
    let stored = fx
        .stored("certificatesigningrequests", "", "a")
        .await
        .unwrap();
    assert_eq!(stored["spec"]["username"], "alice");
}

#[tokio::test]
async fn an_update_changes_neither_the_request_nor_its_status() {
    let fx = fixture().await;
    let made = fx
        .on("certificatesigningrequests", "", "")
        .create(csr("a"))
        .await
        .unwrap();
    let mut next = made.clone();
    next["spec"]["username"] = json!("mallory");
    next["status"] = json!({"certificate": "LS0t"});
    next["metadata"]["labels"] = json!({"a": "b"});
    let updated = fx
        .on("certificatesigningrequests", "", "a")
        .update(next)
        .await
        .unwrap();
    assert_eq!(updated["spec"]["username"], "admin");
    assert!(updated.get("status").is_none(), "{updated}");
    assert_eq!(updated["metadata"]["labels"]["a"], "b");
}

#[tokio::test]
async fn a_request_for_less_than_ten_minutes_is_invalid() {
    let fx = fixture().await;
    let mut body = csr("short");
    body["spec"]["expirationSeconds"] = json!(599);
    let err = fx
        .on("certificatesigningrequests", "", "")
        .create(body)
        .await
        .unwrap_err();
    assert_eq!(err.code, 422);
    assert!(
        err.message.contains("spec.expirationSeconds"),
        "{}",
        err.message
    );
}
