//! CertificateSigningRequests (`certificates.k8s.io/v1`), as kube-apiserver's registry
//! strategy writes them: a create records who asked (`spec.username`, `spec.uid`,
//! `spec.groups`, `spec.extra` from the authenticated user, whatever the body said) and starts
//! with no status (nobody creates a request already approved or issued), and asks for no
//! certificate shorter than ten minutes (`spec.expirationSeconds`); an update of the main
//! resource changes neither the request nor its status (those are the `approval` and `status`
//! subresources' to write).

use apimachinery::ApiError;
use serde_json::{Value, json};

use super::vocab::{Strategy, Target};
use super::{meta, validate};

/// The API group.
pub(super) const GROUP: &str = "certificates.k8s.io";

/// The shortest certificate a request may ask for, in seconds (`spec.expirationSeconds`).
const MIN_EXPIRATION_SECONDS: i64 = 600;

/// The requester fields of `spec`, which only the server writes.
const REQUESTER: [&str; 4] = ["username", "uid", "groups", "extra"];

/// CertificateSigningRequests.
pub(super) struct Csrs;

// === impl Csrs ===

impl Strategy for Csrs {
    fn prepare_create(&self, target: &Target, obj: &mut Value) -> Result<(), ApiError> {
        if let Some(s) = obj["spec"]["expirationSeconds"].as_i64()
            && s < MIN_EXPIRATION_SECONDS
        {
            let why = format!(
                "Invalid value: {s}: may not specify a duration less than 600 seconds (10 minutes)"
            );
            let name = meta::name(obj);
            return Err(validate::invalid(
                &target.info,
                name,
                "spec.expirationSeconds",
                why,
            ));
        }
        let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) else {
            return Ok(());
        };
        for field in REQUESTER {
            spec.remove(field);
        }
        if let Some(user) = &target.user {
            spec.insert("username".into(), json!(user.name));
            if !user.groups.is_empty() {
                spec.insert("groups".into(), json!(user.groups));
            }
        }
        if let Some(o) = obj.as_object_mut() {
            o.remove("status");
        }
        Ok(())
    }

    fn prepare_update(
        &self,
        _target: &Target,
        next: &mut Value,
        current: &Value,
    ) -> Result<(), ApiError> {
        let Some(next) = next.as_object_mut() else {
            return Ok(());
        };
        for part in ["spec", "status"] {
            match current.get(part) {
                Some(v) => next.insert(part.into(), v.clone()),
                None => next.remove(part),
            };
        }
        Ok(())
    }
}
