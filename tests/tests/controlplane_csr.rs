//! CertificateSigningRequests on the embedded control plane, driven by kubectl: the requester
//! is recorded, an approved request for kube's signers is issued with the API server's client
//! CA (the certificate authenticates as its subject), and one that breaks its signer's rules
//! is marked Failed.

use std::time::Duration;

use base64::Engine;
use e2e::{Pki, Ports, k8s_cloud, kubectl_ok, kubectl_stdin};
use k8s_openapi::api::authentication::v1::SelfSubjectReview;
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use kube::api::{Api, PostParams};
use serde_json::json;
use testkit::eventually;

const WAIT: Duration = Duration::from_secs(30);

fn b64(s: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(s)
}

/// A CSR object for `signer` asking with `csr_pem`, claiming to be someone else.
fn request(name: &str, signer: &str, csr_pem: &str, usages: &[&str]) -> String {
    json!({
        "apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest",
        "metadata": {"name": name},
        "spec": {"signerName": signer, "usages": usages, "request": b64(csr_pem),
                 "expirationSeconds": 3600,
                 "username": "forged", "groups": ["system:masters"]},
    })
    .to_string()
}

fn create(kubeconfig: &std::path::Path, body: &str) {
    let out = kubectl_stdin(kubeconfig, &["create", "-f", "-"], body);
    assert!(
        out.status.success(),
        "kubectl create: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approved_client_request_is_issued_and_its_certificate_authenticates_as_its_subject() {
    let pki = Pki::new();
    let cloud = k8s_cloud(&pki, Ports::default()).await;
    let client = cloud.kube().await;
    let kubeconfig = cloud.running.kubeconfig().unwrap().to_path_buf();
    let csrs: Api<CertificateSigningRequest> = Api::all(client.clone());

    let (csr_pem, key_pem) = pki::new_request("alice", Some("devs"), &[]).unwrap();
    let usages = ["digital signature", "client auth"];
    let body = request(
        "alice",
        "kubernetes.io/kube-apiserver-client",
        &csr_pem,
        &usages,
    );
    create(&kubeconfig, &body);
    let made = csrs.get("alice").await.unwrap();
    assert_ne!(made.spec.username.as_deref(), Some("forged"));
    assert!(made.spec.username.as_deref().is_some_and(|u| !u.is_empty()));
    assert_ne!(made.spec.groups, Some(vec!["system:masters".to_string()]));

    kubectl_ok(&kubeconfig, &["certificate", "approve", "alice"]);
    eventually("the certificate is issued", WAIT, || async {
        let csr = csrs.get("alice").await.unwrap();
        csr.status.and_then(|s| s.certificate).is_some()
    })
    .await;
    let issued = csrs.get("alice").await.unwrap();
    let cert_pem = String::from_utf8(issued.status.unwrap().certificate.unwrap().0).unwrap();
    let der = pki::first_cert(&cert_pem).unwrap();
    assert_eq!(
        pki::subject(&der),
        Some(("alice".to_string(), vec!["devs".to_string()]))
    );
    let (from, to) = pki::validity(&cert_pem).unwrap();
    assert!((3600..=3600 + 360).contains(&(to - from)), "{from}..{to}");

    // The certificate chains to the CA the API server trusts: it authenticates as alice.
    let mut config = kube::config::Kubeconfig::read_from(&kubeconfig).unwrap();
    for user in &mut config.auth_infos {
        if let Some(auth) = user.auth_info.as_mut() {
            auth.token = None;
            auth.client_certificate_data = Some(b64(&cert_pem));
            auth.client_key_data = Some(b64(&key_pem).into());
        }
    }
    let config = kube::Config::from_custom_kubeconfig(config, &Default::default())
        .await
        .unwrap();
    let alice = kube::Client::try_from(config).unwrap();
    let review: SelfSubjectReview = serde_json::from_value(json!({"metadata": {}})).unwrap();
    let who = Api::<SelfSubjectReview>::all(alice)
        .create(&PostParams::default(), &review)
        .await
        .unwrap();
    let info = who.status.unwrap().user_info.unwrap();
    assert_eq!(info.username.as_deref(), Some("alice"));
    assert!(
        info.groups
            .unwrap_or_default()
            .contains(&"devs".to_string())
    );
    cloud.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approved_kubelet_serving_request_without_names_is_failed_with_a_reason() {
    let pki = Pki::new();
    let cloud = k8s_cloud(&pki, Ports::default()).await;
    let client = cloud.kube().await;
    let kubeconfig = cloud.running.kubeconfig().unwrap().to_path_buf();
    let csrs: Api<CertificateSigningRequest> = Api::all(client.clone());

    let (csr_pem, _) = pki::new_request("system:node:n1", Some("system:nodes"), &[]).unwrap();
    let usages = ["digital signature", "key encipherment", "server auth"];
    let body = request(
        "n1-serving",
        "kubernetes.io/kubelet-serving",
        &csr_pem,
        &usages,
    );
    create(&kubeconfig, &body);
    kubectl_ok(&kubeconfig, &["certificate", "approve", "n1-serving"]);
    eventually("the request is marked Failed", WAIT, || async {
        let csr = csrs.get("n1-serving").await.unwrap();
        let conditions = csr.status.and_then(|s| s.conditions).unwrap_or_default();
        conditions.iter().any(|c| c.type_ == "Failed")
    })
    .await;
    let status = csrs.get("n1-serving").await.unwrap().status.unwrap();
    assert!(status.certificate.is_none());
    let conditions = status.conditions.unwrap();
    assert!(
        conditions.iter().any(|c| c.type_ == "Approved"),
        "{conditions:?}"
    );
    let failed = conditions.iter().find(|c| c.type_ == "Failed").unwrap();
    assert_eq!(failed.status, "True");
    assert_eq!(failed.reason.as_deref(), Some("SignerValidationFailure"));
    let message = failed.message.clone().unwrap_or_default();
    assert!(message.contains("DNS or IP subjectAltName"), "{message}");

    // The same node with a name is issued a serving certificate.
    let hosts = ["n1.local".to_string(), "10.0.0.5".to_string()];
    let (csr_pem, _) = pki::new_request("system:node:n1", Some("system:nodes"), &hosts).unwrap();
    let body = request(
        "n1-serving-2",
        "kubernetes.io/kubelet-serving",
        &csr_pem,
        &usages,
    );
    create(&kubeconfig, &body);
    kubectl_ok(&kubeconfig, &["certificate", "approve", "n1-serving-2"]);
    eventually("the serving certificate is issued", WAIT, || async {
        let csr = csrs.get("n1-serving-2").await.unwrap();
        csr.status.and_then(|s| s.certificate).is_some()
    })
    .await;
    cloud.stop().await;
}
