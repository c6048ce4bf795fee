//! The LimitRanger and ResourceQuota admission plugins on a new pod, after those of
//! `admission`: the namespace's LimitRange defaults for containers (a limit and a request for
//! each resource a container leaves out) and its bounds, then a `pods` count quota.
//!
//! Unlike kube-apiserver's ResourceQuota, which charges `status.used` of the quota with
//! optimistic concurrency, the count is taken from the stored pods before the create's
//! transaction: two pods created at the same instant may both pass the last free slot.

use apimachinery::{ApiError, quantity};
use serde_json::{Map, Value, json};

use super::meta;
use super::vocab::{Core, Target};

/// The annotation LimitRanger leaves on a pod it changed.
const LIMIT_RANGER_ANNOTATION: &str = "kubernetes.io/limit-ranger";

/// Runs LimitRanger, then ResourceQuota, on `pod`.
pub(super) async fn admit_pod(
    core: &Core,
    target: &Target,
    pod: &mut Value,
) -> Result<(), ApiError> {
    limit_ranger(core, target, pod).await?;
    resource_quota(core, target, pod).await
}

/// Applies the `Container` limits of the namespace's LimitRanges: a default limit and request
/// for each resource a container leaves out (noted in the `kubernetes.io/limit-ranger`
/// annotation), then refuses (403) a container outside a `min`/`max`.
async fn limit_ranger(core: &Core, target: &Target, pod: &mut Value) -> Result<(), ApiError> {
    let ranges = core.list("limitranges", Some(&target.namespace)).await?;
    let mut notes = Vec::new();
    for stored in ranges {
        let range: Value = serde_json::from_slice(&stored.value)
            .map_err(|e| ApiError::internal(format!("decoding a limit range: {e}")))?;
        let limits = range.pointer("/spec/limits").and_then(Value::as_array);
        for item in limits.into_iter().flatten() {
            if item.get("type").and_then(Value::as_str) != Some("Container") {
                continue;
            }
            notes.extend(default_resources(spec_mut(pod), item));
            if let Some(why) = out_of_bounds(spec_mut(pod), item) {
                return Err(forbidden(target, pod, &why));
            }
        }
    }
    if !notes.is_empty() {
        let note = format!("LimitRanger plugin set: {}", notes.join("; "));
        let annotations = meta::metadata_mut(pod)
            .entry("annotations")
            .or_insert_with(|| json!({}));
        meta::object_mut(annotations).insert(LIMIT_RANGER_ANNOTATION.into(), json!(note));
    }
    Ok(())
}

/// Fills in `item`'s `default` (limits) and `defaultRequest` (requests; the default limit or
/// `max` when unset, as a LimitRange is defaulted) in every container; answers what it set.
pub(super) fn default_resources(spec: &mut Map<String, Value>, item: &Value) -> Vec<String> {
    let empty = Map::new();
    let part = |k: &str| item.get(k).and_then(Value::as_object).unwrap_or(&empty);
    let mut limits = part("max").clone();
    limits.extend(part("default").clone());
    let mut requests = limits.clone();
    requests.extend(part("defaultRequest").clone());
    let mut notes = Vec::new();
    for key in ["initContainers", "containers"] {
        let list = spec.get_mut(key).and_then(Value::as_array_mut);
        for c in list.into_iter().flatten().filter_map(Value::as_object_mut) {
            let name = c
                .get("name")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned();
            let resources = meta::object_mut(c.entry("resources").or_insert_with(|| json!({})));
            for (section, defaults) in [("requests", &requests), ("limits", &limits)] {
                let target =
                    meta::object_mut(resources.entry(section).or_insert_with(|| json!({})));
                let mut set = Vec::new();
                for (res, amount) in defaults {
                    if !target.contains_key(res) {
                        target.insert(res.clone(), amount.clone());
                        set.push(res.clone());
                    }
                }
                if target.is_empty() {
                    resources.remove(section);
                }
                if !set.is_empty() {
                    let what = if section == "requests" {
                        "request"
                    } else {
                        "limit"
                    };
                    notes.push(format!(
                        "{} {what} for {} {name}",
                        set.join(", "),
                        &key[..key.len() - 1]
                    ));
                }
            }
        }
    }
    notes
}

/// The first container resource outside `item`'s `min` or `max`, worded as LimitRanger.
fn out_of_bounds(spec: &Map<String, Value>, item: &Value) -> Option<String> {
    let containers = ["initContainers", "containers"]
        .iter()
        .filter_map(|k| spec.get(*k).and_then(Value::as_array))
        .flatten();
    for c in containers {
        for (bound, section, word) in [("max", "limits", "limit"), ("min", "requests", "request")] {
            let bounds = item.get(bound).and_then(Value::as_object);
            for (res, allowed) in bounds.into_iter().flatten() {
                let Some(allowed) = allowed.as_str() else {
                    continue;
                };
                let have = c
                    .pointer(&format!("/resources/{section}/{res}"))
                    .and_then(Value::as_str);
                let usage = if bound == "max" { "maximum" } else { "minimum" };
                let Some(have) = have else {
                    if bound == "max" {
                        return Some(format!(
                            "{usage} {res} usage per Container is {allowed}.  No limit is specified"
                        ));
                    }
                    continue;
                };
                let (a, h) = (amount(res, allowed), amount(res, have));
                let beyond = if bound == "max" { h > a } else { h < a };
                if beyond {
                    return Some(format!(
                        "{usage} {res} usage per Container is {allowed}, but {word} is {have}"
                    ));
                }
            }
        }
    }
    None
}

/// ResourceQuota on the pod count: 403 when a quota of the namespace sets `pods` (or
/// `count/pods`) and the pods not yet finished already reach it.
async fn resource_quota(core: &Core, target: &Target, pod: &Value) -> Result<(), ApiError> {
    let quotas = core.list("resourcequotas", Some(&target.namespace)).await?;
    let mut used = None;
    for stored in quotas {
        let quota: Value = serde_json::from_slice(&stored.value)
            .map_err(|e| ApiError::internal(format!("decoding a resource quota: {e}")))?;
        for key in ["pods", "count/pods"] {
            let Some(hard) = quota.pointer("/spec/hard").and_then(|h| h.get(key)) else {
                continue;
            };
            let hard = hard
                .as_str()
                .map_or_else(|| hard.as_i64(), quantity::units)
                .unwrap_or(0);
            let count = match used {
                Some(n) => n,
                None => *used.insert(running_pods(core, &target.namespace).await?),
            };
            if count + 1 > hard {
                let why = format!(
                    "exceeded quota: {}, requested: {key}=1, used: {key}={count}, limited: {key}={hard}",
                    meta::name(&quota)
                );
                return Err(forbidden(target, pod, &why));
            }
        }
    }
    Ok(())
}

/// The pods of `namespace` a quota counts: those not finished.
async fn running_pods(core: &Core, namespace: &str) -> Result<i64, ApiError> {
    let pods = core.list("pods", Some(namespace)).await?;
    let mut count = 0;
    for stored in pods {
        let pod: Value = serde_json::from_slice(&stored.value)
            .map_err(|e| ApiError::internal(format!("decoding a pod: {e}")))?;
        let phase = pod.pointer("/status/phase").and_then(Value::as_str);
        if !matches!(phase, Some("Succeeded" | "Failed")) {
            count += 1;
        }
    }
    Ok(count)
}

/// A quantity of resource `res` as a number to compare (CPU in millicores).
fn amount(res: &str, q: &str) -> i64 {
    let parsed = if res == "cpu" {
        quantity::milli(q)
    } else {
        quantity::units(q)
    };
    parsed.unwrap_or(0)
}

fn spec_mut(pod: &mut Value) -> &mut Map<String, Value> {
    let spec = meta::object_mut(pod)
        .entry("spec")
        .or_insert_with(|| json!({}));
    meta::object_mut(spec)
}

/// `pods "name" is forbidden: why` (403), as an admission plugin refuses.
fn forbidden(target: &Target, pod: &Value, why: &str) -> ApiError {
    let info = &target.info;
    ApiError::forbidden(&info.group, &info.plural, meta::name(pod), why)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limit_range_defaults_fill_only_what_a_container_leaves_out() {
        let mut spec = json!({"containers": [
            {"name": "bare"},
            {"name": "sized", "resources": {"limits": {"cpu": "2"}, "requests": {"cpu": "2"}}},
        ]});
        let item = json!({"type": "Container", "default": {"cpu": "500m", "memory": "256Mi"},
                          "defaultRequest": {"cpu": "100m"}});
        let notes = default_resources(spec.as_object_mut().unwrap(), &item);
        let bare = &spec["containers"][0]["resources"];
        assert_eq!(bare["limits"], json!({"cpu": "500m", "memory": "256Mi"}));
        assert_eq!(bare["requests"], json!({"cpu": "100m", "memory": "256Mi"}));
        let sized = &spec["containers"][1]["resources"];
        assert_eq!(sized["limits"], json!({"cpu": "2", "memory": "256Mi"}));
        assert_eq!(sized["requests"], json!({"cpu": "2", "memory": "256Mi"}));
        assert_eq!(notes[0], "cpu, memory request for container bare");
        assert_eq!(notes[1], "cpu, memory limit for container bare");
    }

    #[test]
    fn limits_beyond_the_range_are_named() {
        let item = json!({"type": "Container", "max": {"cpu": "1"}, "min": {"memory": "64Mi"}});
        let spec = json!({"containers": [{"name": "c", "resources": {
            "limits": {"cpu": "1500m"}, "requests": {"memory": "128Mi"}}}]});
        assert_eq!(
            out_of_bounds(spec.as_object().unwrap(), &item).as_deref(),
            Some("maximum cpu usage per Container is 1, but limit is 1500m")
        );
        let small = json!({"containers": [{"name": "c", "resources": {
            "limits": {"cpu": "500m"}, "requests": {"memory": "32Mi"}}}]});
        assert_eq!(
            out_of_bounds(small.as_object().unwrap(), &item).as_deref(),
            Some("minimum memory usage per Container is 64Mi, but request is 32Mi")
        );
    }
}
