//! What the controllers share besides the runtime ([`reconciler`]: shared caches, work
//! queues): label selector matching, owner references and status writes.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, OwnerReference};
use kube::Resource;
use kube::api::Api;
use serde::de::DeserializeOwned;

pub use reconciler::{controller_of, key};

/// A write's result, an object already gone counting as done.
pub fn ignore_gone(r: Result<(), kube::Error>) -> Result<(), kube::Error> {
    match r {
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        other => other,
    }
}

/// Merges `status` into the status of `name` (an object already gone counts as done).
pub async fn write_status<K>(
    api: &Api<K>,
    name: &str,
    status: serde_json::Value,
) -> Result<(), kube::Error>
where
    K: Clone + DeserializeOwned + std::fmt::Debug,
{
    write_status_over(api, name, None, status).await
}

/// Like [`write_status`], only over `resource_version` when given: a status decided on a copy
/// the object has moved on from is refused (409) and the sync runs again on the new one.
pub async fn write_status_over<K>(
    api: &Api<K>,
    name: &str,
    resource_version: Option<&str>,
    status: serde_json::Value,
) -> Result<(), kube::Error>
where
    K: Clone + DeserializeOwned + std::fmt::Debug,
{
    let mut body = serde_json::json!({ "status": status });
    if let Some(rv) = resource_version {
        body["metadata"] = serde_json::json!({ "resourceVersion": rv });
    }
    let patch = kube::api::Patch::Merge(body);
    let written = api
        .patch_status(name, &kube::api::PatchParams::default(), &patch)
        .await;
    ignore_gone(written.map(|_| ()))
}

/// Whether `labels` match `selector` (`matchLabels` and `matchExpressions`; an empty selector
/// matches everything).
pub fn selects(selector: &LabelSelector, labels: &BTreeMap<String, String>) -> bool {
    let equal = selector
        .match_labels
        .iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v));
    equal
        && selector.match_expressions.iter().flatten().all(|e| {
            let values = e.values.as_deref().unwrap_or_default();
            let value = labels.get(&e.key);
            match e.operator.as_str() {
                "In" => value.is_some_and(|v| values.contains(v)),
                "NotIn" => value.is_none_or(|v| !values.contains(v)),
                "Exists" => value.is_some(),
                "DoesNotExist" => value.is_none(),
                _ => false,
            }
        })
}

/// A controller reference to `owner`.
pub fn controller_ref<K: Resource<DynamicType = ()>>(owner: &K) -> OwnerReference {
    OwnerReference {
        api_version: K::api_version(&()).into_owned(),
        kind: K::kind(&()).into_owned(),
        name: owner.meta().name.clone().unwrap_or_default(),
        uid: owner.meta().uid.clone().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn selectors_match_labels_and_expressions() {
        let sel: LabelSelector = serde_json::from_value(json!({
            "matchLabels": {"app": "web"},
            "matchExpressions": [
                {"key": "tier", "operator": "In", "values": ["front", "edge"]},
                {"key": "canary", "operator": "DoesNotExist"},
            ],
        }))
        .unwrap();
        let labels = |v: serde_json::Value| -> BTreeMap<String, String> {
            serde_json::from_value(v).unwrap()
        };
        assert!(selects(
            &sel,
            &labels(json!({"app": "web", "tier": "edge"}))
        ));
        assert!(!selects(
            &sel,
            &labels(json!({"app": "web", "tier": "back"}))
        ));
        assert!(!selects(
            &sel,
            &labels(json!({"app": "web", "tier": "edge", "canary": "1"}))
        ));
        assert!(!selects(&sel, &labels(json!({"tier": "edge"}))));
        assert!(selects(&LabelSelector::default(), &labels(json!({}))));
    }
}
