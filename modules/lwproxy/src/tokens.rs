//! Service-account tokens the cloud issued through lwproxy, kept at the edge so that a kubelet
//! restarted while the cloud is away still gets its pods' tokens: a TokenRequest
//! (`POST …/serviceaccounts/<sa>/token`) bound to a pod this node holds, for the audiences and
//! lifetime a token was already issued for, is answered offline with that token while it is
//! valid. Online every request goes to the cloud, and its answer replaces what is kept, so the
//! kubelet renews its tokens on its own schedule as soon as the cloud is back.
//!
//! What is kept lives in the edge store under [`RESOURCE`], one record per service account and
//! pod uid, with one entry per (audiences, lifetime) asked for. The resource is never served
//! nor sent to the cloud (its records have no cloud resourceVersion, so the reconnect resync
//! leaves them alone). Pure logic; [`crate::backend`] reads and writes the records.

use apimachinery::time::parse_rfc3339;
use kapi::WriteRequest;
use objstore::ObjKey;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::envelope::Change;

/// Where the kept tokens are stored: a resource no API serves.
pub(crate) const RESOURCE: &str = "issuedtokens.lwproxy.kubeedge.io";

/// A TokenRequest bound to a pod, as a kubelet makes it for a projected volume.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Ask {
    pub namespace: String,
    pub account: String,
    /// The audiences asked for, sorted (none: the API's own).
    pub audiences: Vec<String>,
    /// The lifetime asked for, in seconds (none: the API's default).
    pub expiration: Option<i64>,
    pub pod_name: String,
    pub pod_uid: String,
}

/// The record kept for one service account and pod.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct Record {
    #[serde(default)]
    pub metadata: RecordMeta,
    #[serde(default)]
    pub issued: Vec<Issued>,
}

/// The record's name and namespace, as the store indexes objects.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct RecordMeta {
    pub name: String,
    pub namespace: String,
}

/// A token the cloud issued for one (audiences, lifetime).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct Issued {
    pub audiences: Vec<String>,
    pub expiration: Option<i64>,
    /// When the token expires (Unix seconds).
    pub expires: i64,
    /// The cloud's answer, a TokenRequest with its status.
    pub answer: Value,
}

/// Why no kept token answers a request offline.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Miss {
    /// This node does not hold the pod, or holds another pod under that name.
    NoSuchPod,
    /// The pod runs as another service account.
    OtherAccount,
    /// No token was issued for these audiences and lifetime.
    NeverIssued,
    /// The token issued has expired.
    Expired,
}

// === impl Ask ===

impl Ask {
    /// The ask of a write, when it is a create of `serviceaccounts/<sa>/token` bound to a pod.
    pub(crate) fn of(req: &WriteRequest<'_>, change: &Change) -> Option<Ask> {
        let Change::Create(body) = change else {
            return None;
        };
        if !req.info.group.is_empty() || req.info.plural != "serviceaccounts" {
            return None;
        }
        if req.subresource != Some("token") || req.name.is_empty() || req.dry_run {
            return None;
        }
        let spec = &body["spec"];
        let bound = &spec["boundObjectRef"];
        let named = |v: &Value| v.as_str().filter(|s| !s.is_empty()).map(str::to_owned);
        if bound["kind"] != "Pod" {
            return None;
        }
        let mut audiences: Vec<String> = match &spec["audiences"] {
            Value::Null => Vec::new(),
            Value::Array(list) => list
                .iter()
                .map(|a| a.as_str().map(str::to_owned))
                .collect::<Option<_>>()?,
            _ => return None,
        };
        audiences.sort();
        audiences.dedup();
        Some(Ask {
            namespace: req.namespace.to_owned(),
            account: req.name.to_owned(),
            audiences,
            expiration: spec["expirationSeconds"].as_i64(),
            pod_name: named(&bound["name"])?,
            pod_uid: named(&bound["uid"])?,
        })
    }

    /// Where the record of this account and pod is kept.
    pub(crate) fn key(&self) -> ObjKey {
        ObjKey::new(RESOURCE, &self.namespace, self.record_name())
    }

    fn record_name(&self) -> String {
        format!("{}.{}", self.account, self.pod_uid)
    }

    fn same(&self, issued: &Issued) -> bool {
        issued.audiences == self.audiences && issued.expiration == self.expiration
    }

    /// `record` (the one held, if any) with the cloud's `answer` to this ask in place of the
    /// token issued before for the same audiences and lifetime, and without expired entries;
    /// `None` when the answer carries no token or expiry.
    pub(crate) fn remember(
        &self,
        record: Option<Record>,
        answer: &Value,
        now: i64,
    ) -> Option<Record> {
        answer["status"]["token"]
            .as_str()
            .filter(|t| !t.is_empty())?;
        let expires = parse_rfc3339(answer["status"]["expirationTimestamp"].as_str()?)?;
        let mut record = record.unwrap_or_default();
        record.metadata = RecordMeta {
            name: self.record_name(),
            namespace: self.namespace.clone(),
        };
        record
            .issued
            .retain(|issued| !self.same(issued) && issued.expires > now);
        record.issued.push(Issued {
            audiences: self.audiences.clone(),
            expiration: self.expiration,
            expires,
            answer: answer.clone(),
        });
        Some(record)
    }

    /// The answer for this ask while the cloud is away: the token kept in `record` for the same
    /// audiences and lifetime, if `pod` (this node's pod of that name, if held) is the pod the
    /// ask is bound to and runs as the account, and the token has not expired at `now`.
    pub(crate) fn answer_offline(
        &self,
        record: Option<&Record>,
        pod: Option<&Value>,
        now: i64,
    ) -> Result<Value, Miss> {
        let pod = pod
            .filter(|pod| pod["metadata"]["uid"] == self.pod_uid.as_str())
            .ok_or(Miss::NoSuchPod)?;
        let runs_as = pod["spec"]["serviceAccountName"]
            .as_str()
            .filter(|sa| !sa.is_empty())
            .unwrap_or("default");
        if runs_as != self.account {
            return Err(Miss::OtherAccount);
        }
        let issued = record
            .and_then(|r| r.issued.iter().find(|issued| self.same(issued)))
            .ok_or(Miss::NeverIssued)?;
        if issued.expires <= now {
            return Err(Miss::Expired);
        }
        Ok(issued.answer.clone())
    }
}

// === impl Miss ===

impl Miss {
    /// Why, for the client's 503.
    pub(crate) fn reason(&self) -> &'static str {
        match self {
            Miss::NoSuchPod => "the pod it is bound to is not on this node",
            Miss::OtherAccount => "the pod it is bound to runs as another service account",
            Miss::NeverIssued => "no token for these audiences and lifetime was issued here",
            Miss::Expired => "the token issued here has expired",
        }
    }
}

#[cfg(test)]
mod tests;
