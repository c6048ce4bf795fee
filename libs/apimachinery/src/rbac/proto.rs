//! The review kinds in Kubernetes' protobuf encoding, decoded to their JSON form: kubectl's
//! typed clients (`kubectl auth can-i`, `kubectl auth whoami`) send them in protobuf, which the
//! REST layer otherwise refuses. Only the fields the reviews read are decoded (`spec`); the
//! rest is skipped.
//!
//! A body is the magic `k8s\0`, then a `runtime.Unknown` (1: typeMeta {1: apiVersion, 2:
//! kind}, 2: raw), whose `raw` is the object (1: metadata, 2: spec, 3: status).

use serde_json::{Map, Value, json};

const MAGIC: &[u8] = b"k8s\0";

/// One field of a message, by wire type.
enum Wire<'a> {
    Varint,
    Bytes(&'a [u8]),
    Fixed,
}

/// The JSON form of a review of kind `kind` sent as `content_type` (`None` unless that is
/// protobuf, the kind is a review and the body decodes).
pub fn decode_review(content_type: Option<&str>, kind: &str, body: &[u8]) -> Option<Value> {
    let essence = content_type?.split(';').next()?.trim();
    if !essence.eq_ignore_ascii_case("application/vnd.kubernetes.protobuf") {
        return None;
    }
    let unknown = body.strip_prefix(MAGIC)?;
    let mut api_version = String::new();
    let mut raw: &[u8] = &[];
    for (field, wire) in fields(unknown)? {
        match (field, wire) {
            (1, Wire::Bytes(meta)) => {
                for (f, w) in fields(meta)? {
                    if let (1, Wire::Bytes(v)) = (f, w) {
                        api_version = String::from_utf8(v.to_vec()).ok()?;
                    }
                }
            }
            (2, Wire::Bytes(bytes)) => raw = bytes,
            _ => {}
        }
    }
    let spec = match fields(raw)?.into_iter().find(|(f, _)| *f == 2) {
        Some((_, Wire::Bytes(spec))) => Some(spec),
        _ => None,
    };
    let spec = match kind {
        "SubjectAccessReview" | "LocalSubjectAccessReview" | "SelfSubjectAccessReview" => {
            access_spec(spec.unwrap_or_default())?
        }
        "SelfSubjectRulesReview" => strings(spec.unwrap_or_default(), &[(1, "namespace")])?,
        "TokenReview" => token_spec(spec.unwrap_or_default())?,
        "SelfSubjectReview" => {
            return Some(json!({"apiVersion": api_version, "kind": kind, "metadata": {}}));
        }
        _ => return None,
    };
    Some(json!({"apiVersion": api_version, "kind": kind, "metadata": {}, "spec": spec}))
}

/// `SubjectAccessReviewSpec` (and the self and local ones, which have its first two fields).
fn access_spec(buf: &[u8]) -> Option<Value> {
    let mut spec = Map::new();
    let mut groups = Vec::new();
    for (field, wire) in fields(buf)? {
        let Wire::Bytes(bytes) = wire else { continue };
        match field {
            1 => {
                let names = [
                    (1, "namespace"),
                    (2, "verb"),
                    (3, "group"),
                    (4, "version"),
                    (5, "resource"),
                    (6, "subresource"),
                    (7, "name"),
                ];
                spec.insert("resourceAttributes".into(), strings(bytes, &names)?);
            }
            2 => {
                let names = [(1, "path"), (2, "verb")];
                spec.insert("nonResourceAttributes".into(), strings(bytes, &names)?);
            }
            3 => {
                spec.insert("user".into(), text(bytes)?.into());
            }
            4 => groups.push(Value::from(text(bytes)?)),
            6 => {
                spec.insert("uid".into(), text(bytes)?.into());
            }
            _ => {}
        }
    }
    if !groups.is_empty() {
        spec.insert("groups".into(), Value::Array(groups));
    }
    Some(Value::Object(spec))
}

/// `TokenReviewSpec`: 1 token, 2 audiences.
fn token_spec(buf: &[u8]) -> Option<Value> {
    let mut spec = Map::new();
    let mut audiences = Vec::new();
    for (field, wire) in fields(buf)? {
        match (field, wire) {
            (1, Wire::Bytes(b)) => {
                spec.insert("token".into(), text(b)?.into());
            }
            (2, Wire::Bytes(b)) => audiences.push(Value::from(text(b)?)),
            _ => {}
        }
    }
    if !audiences.is_empty() {
        spec.insert("audiences".into(), Value::Array(audiences));
    }
    Some(Value::Object(spec))
}

/// A message of string fields, named by number.
fn strings(buf: &[u8], names: &[(u32, &str)]) -> Option<Value> {
    let mut out = Map::new();
    for (field, wire) in fields(buf)? {
        let Some((_, name)) = names.iter().find(|(n, _)| *n == field) else {
            continue;
        };
        if let Wire::Bytes(b) = wire {
            out.insert((*name).into(), text(b)?.into());
        }
    }
    Some(Value::Object(out))
}

fn text(bytes: &[u8]) -> Option<&str> {
    std::str::from_utf8(bytes).ok()
}

/// The fields of a message, in order; `None` if it is malformed.
fn fields(mut buf: &[u8]) -> Option<Vec<(u32, Wire<'_>)>> {
    let mut out = Vec::new();
    while !buf.is_empty() {
        let tag = varint(&mut buf)?;
        let field = u32::try_from(tag >> 3).ok()?;
        let wire = match tag & 7 {
            0 => {
                varint(&mut buf)?;
                Wire::Varint
            }
            1 => {
                buf = buf.get(8..)?;
                Wire::Fixed
            }
            2 => {
                let len = usize::try_from(varint(&mut buf)?).ok()?;
                let (bytes, rest) = (buf.get(..len)?, buf.get(len..)?);
                buf = rest;
                Wire::Bytes(bytes)
            }
            5 => {
                buf = buf.get(4..)?;
                Wire::Fixed
            }
            _ => return None,
        };
        out.push((field, wire));
    }
    Some(out)
}

fn varint(buf: &mut &[u8]) -> Option<u64> {
    let mut value = 0u64;
    for shift in (0..64).step_by(7) {
        let (&byte, rest) = buf.split_first()?;
        *buf = rest;
        value |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Some(value);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field(n: u32, bytes: &[u8]) -> Vec<u8> {
        let mut out = vec![
            u8::try_from(n << 3 | 2).unwrap(),
            u8::try_from(bytes.len()).unwrap(),
        ];
        out.extend_from_slice(bytes);
        out
    }

    #[test]
    fn a_protobuf_self_subject_access_review_decodes_to_its_json_form() {
        let attrs = [
            field(1, b"team"),
            field(2, b"list"),
            field(5, b"configmaps"),
        ]
        .concat();
        let spec = field(1, &attrs);
        let object = [field(1, b""), field(2, &spec), vec![0x08, 0x96, 0x01]].concat();
        let type_meta = [
            field(1, b"authorization.k8s.io/v1"),
            field(2, b"SelfSubjectAccessReview"),
        ]
        .concat();
        let body = [MAGIC.to_vec(), field(1, &type_meta), field(2, &object)].concat();
        let ct = Some("application/vnd.kubernetes.protobuf");
        let got = decode_review(ct, "SelfSubjectAccessReview", &body).unwrap();
        assert_eq!(
            got,
            json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
                   "metadata": {}, "spec": {"resourceAttributes":
                       {"namespace": "team", "verb": "list", "resource": "configmaps"}}})
        );
        assert_eq!(
            decode_review(Some("application/json"), "SelfSubjectAccessReview", &body),
            None
        );
        assert_eq!(decode_review(ct, "Pod", &body), None);
        assert_eq!(
            decode_review(ct, "SelfSubjectAccessReview", &body[..body.len() - 2]),
            None
        );
    }
}
