//! CertificateSigningRequest signing, as kube-controller-manager's `csrsigning` controller:
//! an approved request (not denied, not failed, not issued yet) for one of kube's signers
//! (`kubernetes.io/kube-apiserver-client`, `kubernetes.io/kube-apiserver-client-kubelet`,
//! `kubernetes.io/kubelet-serving`) is signed with the CA the embedded API server checks client
//! certificates against, and the certificate written to `status.certificate`. A request that
//! does not fit its signer's rules gets a `Failed` condition (reason
//! `SignerValidationFailure`) saying why. Requests for other signers (the join records of
//! `kubeedge.io/...`, which cloudhub's certificate service answers) are left alone.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use kube::api::{Api, Patch, PatchParams};
use pki::Usage;
use reconciler::{Cache, Stores};
use serde_json::json;
use tokio_util::sync::CancellationToken;

/// Name of the controller (field manager).
pub const NAME: &str = "csrsigning-controller";
/// kube-apiserver client certificates for anyone.
pub const KUBE_APISERVER_CLIENT: &str = "kubernetes.io/kube-apiserver-client";
/// kube-apiserver client certificates for kubelets.
pub const KUBE_APISERVER_CLIENT_KUBELET: &str = "kubernetes.io/kube-apiserver-client-kubelet";
/// Kubelet serving certificates.
pub const KUBELET_SERVING: &str = "kubernetes.io/kubelet-serving";
/// The shortest certificate a request may ask for (`spec.expirationSeconds`).
pub const MIN_EXPIRATION: Duration = Duration::from_secs(600);
/// The reason of the `Failed` condition of a request that does not fit its signer.
pub const VALIDATION_FAILURE: &str = "SignerValidationFailure";
/// Delay before a request whose status could not be written is tried again.
const RETRY: Duration = Duration::from_secs(2);

/// What to do with one request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Nothing: not ours, not approved, or settled.
    Skip,
    /// Issue a certificate with these usages, valid this long.
    Sign {
        usages: Vec<Usage>,
        validity: Duration,
    },
    /// Mark it `Failed`, saying why.
    Fail(String),
}

/// Runs the controller until shutdown, signing with `ca`; no certificate outlives `max`.
pub async fn run(stores: Stores, ca: Arc<pki::Ca>, max: Duration, shutdown: CancellationToken) {
    let client = stores.client().clone();
    let (tx, rx) = reconciler::queue();
    let csrs = stores.keyed::<CertificateSigningRequest>(&tx);
    let api: Api<CertificateSigningRequest> = Api::all(client);
    let backoff = reconciler::Backoff {
        base: RETRY,
        max: RETRY * 30,
    };
    reconciler::work_with(rx, "csrsigning", backoff, shutdown, |name| {
        let (api, csrs, ca) = (&api, &csrs, &ca);
        async move {
            sync(api, csrs, ca, max, &name)
                .await
                .map(|()| reconciler::Action::AwaitChange)
        }
    })
    .await
}

/// What `csr` calls for, no certificate lasting longer than `max`.
pub fn decide(csr: &CertificateSigningRequest, max: Duration) -> Action {
    let spec = &csr.spec;
    let signer = spec.signer_name.as_str();
    if ![
        KUBE_APISERVER_CLIENT,
        KUBE_APISERVER_CLIENT_KUBELET,
        KUBELET_SERVING,
    ]
    .contains(&signer)
    {
        return Action::Skip;
    }
    let status = csr.status.clone().unwrap_or_default();
    if status.certificate.as_ref().is_some_and(|c| !c.0.is_empty()) {
        return Action::Skip;
    }
    let conditions = status.conditions.unwrap_or_default();
    let holds = |t: &str| {
        conditions
            .iter()
            .any(|c| c.type_ == t && c.status == "True")
    };
    if !holds("Approved") || holds("Denied") || holds("Failed") {
        return Action::Skip;
    }
    let Ok(pem) = std::str::from_utf8(&spec.request.0) else {
        return Action::Fail("spec.request is not a PEM CERTIFICATE REQUEST".into());
    };
    let request = match pki::read_request(pem) {
        Ok(r) => r,
        Err(e) => return Action::Fail(e.to_string()),
    };
    let usages = match usages(spec.usages.as_deref().unwrap_or_default()) {
        Ok(u) => u,
        Err(why) => return Action::Fail(why),
    };
    let checked = match signer {
        KUBELET_SERVING => check_kubelet_serving(&request, &usages),
        KUBE_APISERVER_CLIENT_KUBELET => check_kubelet_client(&request, &usages),
        _ => check_client(&request, &usages),
    };
    if let Err(why) = checked {
        return Action::Fail(why);
    }
    let asked = spec
        .expiration_seconds
        .map(|s| Duration::from_secs(u64::try_from(s).unwrap_or(0)));
    let validity = asked.map_or(max, |a| a.max(MIN_EXPIRATION).min(max));
    Action::Sign { usages, validity }
}

/// Signs or fails the request `name` as [`decide`] says.
async fn sync(
    api: &Api<CertificateSigningRequest>,
    csrs: &Cache<CertificateSigningRequest>,
    ca: &pki::Ca,
    max: Duration,
    name: &str,
) -> Result<(), kube::Error> {
    let Some(csr) = csrs.get(name) else {
        return Ok(());
    };
    let status = match decide(&csr, max) {
        Action::Skip => return Ok(()),
        Action::Sign { usages, validity } => {
            let pem = std::str::from_utf8(&csr.spec.request.0).unwrap_or_default();
            match ca.sign_request(pem, &usages, validity) {
                Ok(cert) => {
                    let cert = k8s_openapi::ByteString(cert.into_bytes());
                    json!({"certificate": cert})
                }
                Err(e) => failed(&csr, &e.to_string()),
            }
        }
        Action::Fail(why) => failed(&csr, &why),
    };
    let patch = json!({"status": status});
    let params = PatchParams::default();
    match api.patch_status(name, &params, &Patch::Merge(&patch)).await {
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        other => other.map(|_| ()),
    }
}

/// The status conditions of `csr` with `Failed` added.
fn failed(csr: &CertificateSigningRequest, why: &str) -> serde_json::Value {
    let now = apimachinery::time::now_rfc3339();
    let mut conditions: Vec<serde_json::Value> = csr
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .filter_map(|c| serde_json::to_value(c).ok())
        .collect();
    conditions.push(json!({
        "type": "Failed", "status": "True", "reason": VALIDATION_FAILURE, "message": why,
        "lastUpdateTime": now, "lastTransitionTime": now,
    }));
    json!({"conditions": conditions})
}

/// The usages named in `spec.usages` that a signer here may grant.
fn usages(names: &[String]) -> Result<Vec<Usage>, String> {
    names
        .iter()
        .map(|n| match n.as_str() {
            "digital signature" => Ok(Usage::DigitalSignature),
            "key encipherment" => Ok(Usage::KeyEncipherment),
            "server auth" => Ok(Usage::ServerAuth),
            "client auth" => Ok(Usage::ClientAuth),
            other => Err(format!("usage {other:?} is not allowed for this signer")),
        })
        .collect()
}

/// `kubernetes.io/kubelet-serving`: a node's serving certificate.
fn check_kubelet_serving(r: &pki::Request, usages: &[Usage]) -> Result<(), String> {
    check_usages(usages, Usage::ServerAuth)?;
    check_node_subject(r)?;
    if r.dns_names.is_empty() && r.ip_addresses.is_empty() {
        return Err("DNS or IP subjectAltName is required".into());
    }
    if !r.emails.is_empty() || !r.uris.is_empty() || r.other_names > 0 {
        return Err("only DNS and IP subjectAltNames are allowed".into());
    }
    Ok(())
}

/// `kubernetes.io/kube-apiserver-client-kubelet`: a node's client certificate.
fn check_kubelet_client(r: &pki::Request, usages: &[Usage]) -> Result<(), String> {
    check_usages(usages, Usage::ClientAuth)?;
    check_node_subject(r)?;
    if !r.dns_names.is_empty()
        || !r.ip_addresses.is_empty()
        || !r.emails.is_empty()
        || !r.uris.is_empty()
        || r.other_names > 0
    {
        return Err("subjectAltNames are not allowed".into());
    }
    Ok(())
}

/// `kubernetes.io/kube-apiserver-client`: any user's client certificate.
fn check_client(r: &pki::Request, usages: &[Usage]) -> Result<(), String> {
    check_usages(usages, Usage::ClientAuth)?;
    if r.common_name.is_empty() {
        return Err("subject common name is required".into());
    }
    if r.organizations.len() > 1 {
        return Err("at most one subject organization is supported by this signer".into());
    }
    Ok(())
}

/// Usages are digital signature, key encipherment and `needed` only, `needed` among them.
fn check_usages(usages: &[Usage], needed: Usage) -> Result<(), String> {
    let allowed = [Usage::DigitalSignature, Usage::KeyEncipherment, needed];
    if let Some(u) = usages.iter().find(|u| !allowed.contains(u)) {
        return Err(format!(
            "usage {:?} is not allowed for this signer",
            label(*u)
        ));
    }
    if !usages.contains(&needed) {
        return Err(format!("usage {:?} is required", label(needed)));
    }
    Ok(())
}

/// The name of a usage in `spec.usages`.
fn label(u: Usage) -> &'static str {
    match u {
        Usage::DigitalSignature => "digital signature",
        Usage::KeyEncipherment => "key encipherment",
        Usage::ServerAuth => "server auth",
        Usage::ClientAuth => "client auth",
    }
}

/// CN `system:node:<name>` and O `system:nodes` alone.
fn check_node_subject(r: &pki::Request) -> Result<(), String> {
    if r.organizations != [pki::NODES_GROUP] {
        return Err(format!(
            "subject organization must be exactly {:?}, not {:?}",
            pki::NODES_GROUP,
            r.organizations
        ));
    }
    match r.common_name.strip_prefix(pki::NODE_CN_PREFIX) {
        Some(node) if !node.is_empty() => Ok(()),
        _ => Err(format!(
            "subject common name must be {}<node name>, not {:?}",
            pki::NODE_CN_PREFIX,
            r.common_name
        )),
    }
}

#[cfg(test)]
mod tests;
