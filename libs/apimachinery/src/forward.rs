//! The envelope of a write an edge node asks the cloud to make: lwproxy parses a client's REST
//! write, sends it upstream as a [`ForwardedWrite`] (JSON message content), edgecontroller
//! authorizes it for the node, replays it against the Kubernetes API and answers with a
//! [`ForwardedReply`]: the API's code and body, unchanged. The cloud acts only on the
//! [`NodeRequest`] a write parses into: typed, each path segment checked, its path escaped.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::status::ApiError;

mod request;

pub use request::{
    BodyType, KnownResource, NodeRequest, Subresource, Verb, checked_name, checked_namespace,
};

/// The error content a forwarded write gets from the edge's hub when the link dropped after
/// the write was handed over and before the cloud's reply came: the write may have been
/// applied, so its outcome is unknown (unlike the hub's other refusals, which sent nothing).
pub const LINK_LOST: &str = "the link to the cloud was lost before the reply came";

/// One write, as the REST layer parsed it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct ForwardedWrite {
    /// `create`, `update`, `patch` or `delete`.
    pub verb: String,
    /// API group (`""` for core).
    pub group: String,
    pub version: String,
    /// Plural resource name (`pods`, `leases`).
    pub resource: String,
    /// `""` for cluster-scoped resources.
    pub namespace: String,
    /// `""` for a create.
    pub name: String,
    /// `status`, `binding`, ... or `None`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub subresource: Option<String>,
    /// The body's media type (for a patch: which patch type).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content_type: Option<String>,
    /// The object (create, update), the patch (patch) or the `DeleteOptions` (delete).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub body: Option<Value>,
    /// `dryRun=All`.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub dry_run: bool,
}

/// The API's answer to a [`ForwardedWrite`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ForwardedReply {
    /// HTTP status code.
    pub code: u16,
    /// The response body (the object, or a `Status`).
    pub body: Value,
}

// === impl ForwardedWrite ===

impl ForwardedWrite {
    /// The name the write is about: the URL's, else the body's `metadata.name` (a create).
    pub fn object_name(&self) -> &str {
        if !self.name.is_empty() {
            return &self.name;
        }
        self.body
            .as_ref()
            .and_then(|b| b["metadata"]["name"].as_str())
            .unwrap_or("")
    }

    /// The store resource (`plural`, or `plural.group`).
    pub fn store_resource(&self) -> String {
        if self.group.is_empty() {
            self.resource.clone()
        } else {
            format!("{}.{}", self.resource, self.group)
        }
    }
}

// === impl ForwardedReply ===

impl ForwardedReply {
    /// The reply for an error (its `Status`).
    pub fn from_error(e: &ApiError) -> ForwardedReply {
        ForwardedReply {
            code: e.code,
            body: e.to_status(),
        }
    }

    /// The body for a 2xx answer, else the `Status` as an error.
    pub fn into_result(self) -> Result<(u16, Value), ApiError> {
        if (200..300).contains(&self.code) {
            return Ok((self.code, self.body));
        }
        Err(ApiError::from_status(self.code, &self.body))
    }
}

impl ApiError {
    /// The error a `Status` body describes (code from the HTTP answer when the body has none).
    pub fn from_status(code: u16, status: &Value) -> ApiError {
        let text = |k: &str| status[k].as_str().unwrap_or_default().to_owned();
        let mut reason = text("reason");
        if reason.is_empty() {
            reason = "Unknown".into();
        }
        let mut message = text("message");
        if message.is_empty() {
            message = format!("the server answered {code}");
        }
        ApiError {
            code: status["code"]
                .as_u64()
                .and_then(|c| u16::try_from(c).ok())
                .unwrap_or(code),
            reason,
            message,
            details: status.get("details").cloned().filter(|d| !d.is_null()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_status_reply_becomes_the_same_error() {
        let e = ApiError::forbidden("", "pods", "p", "node n1 may not");
        let reply = ForwardedReply::from_error(&e);
        let back = reply.clone().into_result().unwrap_err();
        assert_eq!(back, e);
        let json = serde_json::to_string(&reply).unwrap();
        let again: ForwardedReply = serde_json::from_str(&json).unwrap();
        assert_eq!(again, reply);
    }
}
