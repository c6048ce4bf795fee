//! A `CertificateSigningRequest` written to the `approval` subresource in Kubernetes'
//! protobuf encoding, as `kubectl certificate approve|deny` sends it (its typed client speaks
//! protobuf), decoded to the JSON the approval takes: name, uid, resourceVersion and
//! `status.conditions`. The spec is skipped: an approval never writes it.
//!
//! The body is the magic `k8s\0`, then a `runtime.Unknown` whose `raw` holds the object;
//! the messages below carry the field numbers of `k8s.io/api/certificates/v1`.

use apimachinery::ApiError;
use apimachinery::time::format_rfc3339;
use prost::Message;
use serde_json::{Map, Value, json};

const MAGIC: &[u8] = b"k8s\0";
const PROTOBUF: &str = "application/vnd.kubernetes.protobuf";

/// `runtime.Unknown`.
#[derive(Clone, PartialEq, Message)]
struct Unknown {
    #[prost(bytes = "vec", optional, tag = "2")]
    raw: Option<Vec<u8>>,
}

/// `CertificateSigningRequest`, without its spec.
#[derive(Clone, PartialEq, Message)]
struct Request {
    #[prost(message, optional, tag = "1")]
    metadata: Option<ObjectMeta>,
    #[prost(message, optional, tag = "3")]
    status: Option<Status>,
}

/// The identity fields of `ObjectMeta`.
#[derive(Clone, PartialEq, Message)]
struct ObjectMeta {
    #[prost(string, optional, tag = "1")]
    name: Option<String>,
    #[prost(string, optional, tag = "5")]
    uid: Option<String>,
    #[prost(string, optional, tag = "6")]
    resource_version: Option<String>,
}

/// `CertificateSigningRequestStatus`, without the certificate.
#[derive(Clone, PartialEq, Message)]
struct Status {
    #[prost(message, repeated, tag = "1")]
    conditions: Vec<Condition>,
}

/// `CertificateSigningRequestCondition`.
#[derive(Clone, PartialEq, Message)]
struct Condition {
    #[prost(string, optional, tag = "1")]
    kind: Option<String>,
    #[prost(string, optional, tag = "2")]
    reason: Option<String>,
    #[prost(string, optional, tag = "3")]
    message: Option<String>,
    #[prost(message, optional, tag = "4")]
    last_update_time: Option<Time>,
    #[prost(message, optional, tag = "5")]
    last_transition_time: Option<Time>,
    #[prost(string, optional, tag = "6")]
    status: Option<String>,
}

/// `metav1.Time`.
#[derive(Clone, PartialEq, Message)]
struct Time {
    #[prost(int64, optional, tag = "1")]
    seconds: Option<i64>,
}

/// The approval's JSON when the body is protobuf (`None` for any other content type); 400
/// when it does not decode.
pub(crate) fn decode(content_type: Option<&str>, body: &[u8]) -> Result<Option<Value>, ApiError> {
    let essence = content_type
        .and_then(|ct| ct.split(';').next())
        .map(str::trim)
        .unwrap_or_default();
    if !essence.eq_ignore_ascii_case(PROTOBUF) {
        return Ok(None);
    }
    let bad =
        |why: String| ApiError::bad_request(format!("the protobuf body does not decode: {why}"));
    let envelope = body
        .strip_prefix(MAGIC)
        .ok_or_else(|| bad("it lacks the k8s protobuf prefix".to_owned()))?;
    let unknown = Unknown::decode(envelope).map_err(|e| bad(e.to_string()))?;
    let request = Request::decode(unknown.raw.unwrap_or_default().as_slice())
        .map_err(|e| bad(e.to_string()))?;
    Ok(Some(to_json(request)))
}

fn to_json(request: Request) -> Value {
    let meta = request.metadata.unwrap_or_default();
    let mut metadata = Map::new();
    for (key, value) in [
        ("name", meta.name),
        ("uid", meta.uid),
        ("resourceVersion", meta.resource_version),
    ] {
        if let Some(value) = value.filter(|v| !v.is_empty()) {
            metadata.insert(key.to_owned(), Value::String(value));
        }
    }
    let conditions: Vec<Value> = request
        .status
        .unwrap_or_default()
        .conditions
        .into_iter()
        .map(|c| {
            let time = |t: Option<Time>| t.and_then(|t| t.seconds).map(format_rfc3339);
            let mut condition = Map::new();
            for (key, value) in [
                ("type", c.kind),
                ("status", c.status),
                ("reason", c.reason),
                ("message", c.message),
                ("lastUpdateTime", time(c.last_update_time)),
                ("lastTransitionTime", time(c.last_transition_time)),
            ] {
                if let Some(value) = value {
                    condition.insert(key.to_owned(), Value::String(value));
                }
            }
            Value::Object(condition)
        })
        .collect();
    json!({
        "apiVersion": "certificates.k8s.io/v1",
        "kind": "CertificateSigningRequest",
        "metadata": metadata,
        "status": {"conditions": conditions},
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_approval_in_protobuf_decodes_to_its_conditions() {
        let request = Request {
            metadata: Some(ObjectMeta {
                name: Some("alice".into()),
                uid: Some("u1".into()),
                resource_version: Some("42".into()),
            }),
            status: Some(Status {
                conditions: vec![Condition {
                    kind: Some("Approved".into()),
                    status: Some("True".into()),
                    reason: Some("KubectlApprove".into()),
                    message: Some("This CSR was approved by kubectl certificate approve.".into()),
                    last_update_time: Some(Time { seconds: Some(0) }),
                    last_transition_time: None,
                }],
            }),
        };
        let unknown = Unknown {
            raw: Some(request.encode_to_vec()),
        };
        let body = [MAGIC, &unknown.encode_to_vec()].concat();
        let decoded = decode(Some("application/vnd.kubernetes.protobuf"), &body)
            .unwrap()
            .unwrap();
        assert_eq!(decoded["metadata"]["name"], "alice");
        assert_eq!(decoded["metadata"]["resourceVersion"], "42");
        let condition = &decoded["status"]["conditions"][0];
        assert_eq!(condition["type"], "Approved");
        assert_eq!(condition["status"], "True");
        assert_eq!(condition["lastUpdateTime"], "1970-01-01T00:00:00Z");
        assert!(condition.get("lastTransitionTime").is_none());
    }

    #[test]
    fn other_bodies_are_left_to_the_json_path_or_refused() {
        assert!(decode(Some("application/json"), b"{}").unwrap().is_none());
        assert!(decode(None, b"{}").unwrap().is_none());
        let e = decode(Some(PROTOBUF), b"nope").unwrap_err();
        assert_eq!(e.code, 400);
    }
}
