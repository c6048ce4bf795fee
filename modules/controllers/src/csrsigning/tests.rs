use rcgen::{CertificateParams, DistinguishedName, DnType, KeyPair};
use serde_json::json;

use super::*;

const DAY: Duration = Duration::from_secs(86400);

fn pem(cn: &str, orgs: &[&str], sans: &[&str]) -> String {
    let key = KeyPair::generate().unwrap();
    let mut params =
        CertificateParams::new(sans.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap();
    params.distinguished_name = DistinguishedName::new();
    params.distinguished_name.push(DnType::CommonName, cn);
    for o in orgs {
        params.distinguished_name.push(DnType::OrganizationName, *o);
    }
    params.serialize_request(&key).unwrap().pem().unwrap()
}

fn csr(
    signer: &str,
    request: &str,
    usages: &[&str],
    conditions: &[&str],
) -> CertificateSigningRequest {
    let conditions: Vec<_> = conditions
        .iter()
        .map(|t| json!({"type": t, "status": "True"}))
        .collect();
    serde_json::from_value(json!({
        "metadata": {"name": "r"},
        "spec": {"signerName": signer, "usages": usages,
                 "request": k8s_openapi::ByteString(request.as_bytes().to_vec())},
        "status": {"conditions": conditions},
    }))
    .unwrap()
}

fn failure(action: Action) -> String {
    match action {
        Action::Fail(why) => why,
        other => panic!("not failed: {other:?}"),
    }
}

#[test]
fn an_approved_client_request_is_signed_for_the_longest_allowed_time() {
    let r = csr(
        KUBE_APISERVER_CLIENT,
        &pem("alice", &["devs"], &[]),
        &["client auth"],
        &["Approved"],
    );
    assert_eq!(
        decide(&r, DAY),
        Action::Sign {
            usages: vec![Usage::ClientAuth],
            validity: DAY
        }
    );
}

#[test]
fn requests_not_approved_denied_failed_issued_or_for_other_signers_are_left_alone() {
    let client = pem("alice", &[], &[]);
    let usages = ["client auth"];
    for conditions in [
        &[][..],
        &["Approved", "Denied"],
        &["Approved", "Failed"],
        &["Denied"],
    ] {
        let r = csr(KUBE_APISERVER_CLIENT, &client, &usages, conditions);
        assert_eq!(decide(&r, DAY), Action::Skip, "{conditions:?}");
    }
    let other = csr("kubeedge.io/node-join", &client, &usages, &["Approved"]);
    assert_eq!(decide(&other, DAY), Action::Skip);
    let mut issued = csr(KUBE_APISERVER_CLIENT, &client, &usages, &["Approved"]);
    issued.status.as_mut().unwrap().certificate = Some(k8s_openapi::ByteString(b"x".to_vec()));
    assert_eq!(decide(&issued, DAY), Action::Skip);
}

#[test]
fn expiration_seconds_is_honoured_between_ten_minutes_and_the_maximum() {
    let mut r = csr(
        KUBE_APISERVER_CLIENT,
        &pem("alice", &[], &[]),
        &["client auth"],
        &["Approved"],
    );
    let validity = |r: &CertificateSigningRequest| match decide(r, DAY) {
        Action::Sign { validity, .. } => validity,
        other => panic!("{other:?}"),
    };
    r.spec.expiration_seconds = Some(3600);
    assert_eq!(validity(&r), Duration::from_secs(3600));
    r.spec.expiration_seconds = Some(60);
    assert_eq!(validity(&r), MIN_EXPIRATION);
    r.spec.expiration_seconds = Some(10 * 86400);
    assert_eq!(validity(&r), DAY);
}

#[test]
fn a_kubelet_serving_request_must_be_a_nodes_with_dns_or_ip_names() {
    let good = pem(
        "system:node:n1",
        &["system:nodes"],
        &["n1.local", "10.0.0.5"],
    );
    let usages = ["digital signature", "key encipherment", "server auth"];
    let r = csr(KUBELET_SERVING, &good, &usages, &["Approved"]);
    assert!(
        matches!(decide(&r, DAY), Action::Sign { .. }),
        "{:?}",
        decide(&r, DAY)
    );

    let no_names = pem("system:node:n1", &["system:nodes"], &[]);
    let why = failure(decide(
        &csr(KUBELET_SERVING, &no_names, &usages, &["Approved"]),
        DAY,
    ));
    assert!(
        why.contains("DNS or IP subjectAltName is required"),
        "{why}"
    );

    let not_a_node = pem("alice", &["system:nodes"], &["n1.local"]);
    let why = failure(decide(
        &csr(KUBELET_SERVING, &not_a_node, &usages, &["Approved"]),
        DAY,
    ));
    assert!(why.contains("system:node:"), "{why}");

    let wrong_group = pem("system:node:n1", &["admins"], &["n1.local"]);
    let why = failure(decide(
        &csr(KUBELET_SERVING, &wrong_group, &usages, &["Approved"]),
        DAY,
    ));
    assert!(why.contains("organization"), "{why}");

    let client_usage = csr(
        KUBELET_SERVING,
        &good,
        &["client auth", "server auth"],
        &["Approved"],
    );
    let why = failure(decide(&client_usage, DAY));
    assert!(why.contains("\"client auth\" is not allowed"), "{why}");
}

#[test]
fn a_kubelet_client_request_has_no_alternative_names() {
    let usages = ["digital signature", "client auth"];
    let good = pem("system:node:n1", &["system:nodes"], &[]);
    let r = csr(KUBE_APISERVER_CLIENT_KUBELET, &good, &usages, &["Approved"]);
    assert!(matches!(decide(&r, DAY), Action::Sign { .. }));
    let named = pem("system:node:n1", &["system:nodes"], &["n1.local"]);
    let r = csr(
        KUBE_APISERVER_CLIENT_KUBELET,
        &named,
        &usages,
        &["Approved"],
    );
    assert!(failure(decide(&r, DAY)).contains("subjectAltNames"));
}

#[test]
fn a_client_request_needs_client_auth_and_a_readable_request() {
    let r = csr(
        KUBE_APISERVER_CLIENT,
        &pem("alice", &[], &[]),
        &["server auth"],
        &["Approved"],
    );
    assert!(failure(decide(&r, DAY)).contains("\"server auth\" is not allowed"));
    let r = csr(
        KUBE_APISERVER_CLIENT,
        &pem("alice", &[], &[]),
        &["digital signature"],
        &["Approved"],
    );
    assert!(failure(decide(&r, DAY)).contains("\"client auth\" is required"));
    let r = csr(
        KUBE_APISERVER_CLIENT,
        "not a CSR",
        &["client auth"],
        &["Approved"],
    );
    assert!(failure(decide(&r, DAY)).contains("unreadable CSR"));
    let r = csr(
        KUBE_APISERVER_CLIENT,
        &pem("alice", &[], &[]),
        &["code signing"],
        &["Approved"],
    );
    assert!(failure(decide(&r, DAY)).contains("code signing"));
}

#[test]
fn a_failed_condition_keeps_the_approval() {
    let r = csr(KUBE_APISERVER_CLIENT, "x", &[], &["Approved"]);
    let status = failed(&r, "bad");
    let types: Vec<_> = status["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["type"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(types, ["Approved", "Failed"]);
    assert_eq!(status["conditions"][1]["reason"], VALIDATION_FAILURE);
}
