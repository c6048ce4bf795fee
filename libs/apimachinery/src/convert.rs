//! Conversion between the versions of a kind served from one stored collection. The only
//! built-in kind served in two shapes is HorizontalPodAutoscaler: `autoscaling/v2` (stored,
//! preferred) and `autoscaling/v1`. v1 has one metric, the CPU utilization target; what v2
//! has beyond it (other metrics, behavior, conditions, current metrics) rides in v1 as
//! annotations, as kube-apiserver keeps it, so that a v1 client's update loses nothing.

use serde_json::{Map, Value, json};

const METRICS: &str = "autoscaling.alpha.kubernetes.io/metrics";
const BEHAVIOR: &str = "autoscaling.alpha.kubernetes.io/behavior";
const CONDITIONS: &str = "autoscaling.alpha.kubernetes.io/conditions";
const CURRENT_METRICS: &str = "autoscaling.alpha.kubernetes.io/current-metrics";

/// Whether objects of `group`/`kind` differ between the versions served (and so are
/// converted to the one a request names).
pub fn has_versions(group: &str, kind: &str) -> bool {
    group == "autoscaling" && kind == "HorizontalPodAutoscaler"
}

/// Converts `obj` (whatever version its `apiVersion` names) to `group/version`, setting
/// `apiVersion`. Kinds with one shape are only relabelled.
pub fn to_version(group: &str, version: &str, obj: &mut Value) {
    let api_version = format!("{group}/{version}");
    let from = obj.get("apiVersion").and_then(Value::as_str).unwrap_or("");
    let is_hpa = obj.get("kind").and_then(Value::as_str) == Some("HorizontalPodAutoscaler");
    if is_hpa && group == "autoscaling" && from != api_version {
        match version {
            "v1" if from != "autoscaling/v1" => hpa_v2_to_v1(obj),
            "v2" if from == "autoscaling/v1" => hpa_v1_to_v2(obj),
            _ => {}
        }
    }
    if let Some(map) = obj.as_object_mut() {
        map.insert("apiVersion".into(), Value::String(api_version));
    }
}

fn object(v: &mut Value) -> &mut Map<String, Value> {
    if !v.is_object() {
        *v = json!({});
    }
    v.as_object_mut().expect("made an object")
}

fn annotations(obj: &mut Value) -> &mut Map<String, Value> {
    let meta = object(object(obj).entry("metadata").or_insert_with(|| json!({})));
    object(meta.entry("annotations").or_insert_with(|| json!({})))
}

/// Whether a v2 metric is the CPU utilization target v1 has a field for.
fn is_cpu_utilization(metric: &Value) -> bool {
    metric["type"] == "Resource"
        && metric["resource"]["name"] == "cpu"
        && metric["resource"]["target"]["type"] == "Utilization"
}

fn hpa_v2_to_v1(obj: &mut Value) {
    let mut spec = obj.get("spec").cloned().unwrap_or_else(|| json!({}));
    let mut status = obj.get("status").cloned();
    let mut notes: Vec<(&str, Value)> = Vec::new();
    let spec_map = object(&mut spec);
    let metrics = spec_map.remove("metrics");
    let metrics = metrics.as_ref().and_then(Value::as_array);
    let mut others = Vec::new();
    for m in metrics.into_iter().flatten() {
        if is_cpu_utilization(m) && !spec_map.contains_key("targetCPUUtilizationPercentage") {
            let target = m["resource"]["target"]["averageUtilization"].clone();
            spec_map.insert("targetCPUUtilizationPercentage".into(), target);
        } else {
            others.push(m.clone());
        }
    }
    if !others.is_empty() {
        notes.push((METRICS, Value::Array(others)));
    }
    if let Some(behavior) = spec_map.remove("behavior") {
        notes.push((BEHAVIOR, behavior));
    }
    if let Some(status) = status.as_mut() {
        let status = object(status);
        if let Some(conditions) = status.remove("conditions") {
            notes.push((CONDITIONS, conditions));
        }
        let current = status.remove("currentMetrics");
        let current = current.as_ref().and_then(Value::as_array);
        let mut others = Vec::new();
        for m in current.into_iter().flatten() {
            let cpu = m["type"] == "Resource" && m["resource"]["name"] == "cpu";
            let utilization = &m["resource"]["current"]["averageUtilization"];
            if cpu && !utilization.is_null() {
                status.insert(
                    "currentCPUUtilizationPercentage".into(),
                    utilization.clone(),
                );
            } else {
                others.push(m.clone());
            }
        }
        if !others.is_empty() {
            notes.push((CURRENT_METRICS, Value::Array(others)));
        }
    }
    let map = object(obj);
    map.insert("spec".into(), spec);
    if let Some(status) = status {
        map.insert("status".into(), status);
    }
    for (key, value) in notes {
        annotations(obj).insert(key.into(), Value::String(value.to_string()));
    }
}

fn hpa_v1_to_v2(obj: &mut Value) {
    let mut read = |key: &str| {
        let notes = annotations(obj);
        let v = notes.remove(key);
        v.and_then(|v| {
            v.as_str()
                .and_then(|s| serde_json::from_str::<Value>(s).ok())
        })
    };
    let (extra, behavior) = (read(METRICS), read(BEHAVIOR));
    let (conditions, current_extra) = (read(CONDITIONS), read(CURRENT_METRICS));
    let map = object(obj);
    if let Some(meta) = map.get_mut("metadata").and_then(Value::as_object_mut)
        && meta
            .get("annotations")
            .and_then(Value::as_object)
            .is_some_and(Map::is_empty)
    {
        meta.remove("annotations");
    }
    let spec = object(map.entry("spec").or_insert_with(|| json!({})));
    let mut metrics = Vec::new();
    if let Some(target) = spec.remove("targetCPUUtilizationPercentage") {
        metrics.push(json!({"type": "Resource", "resource": {"name": "cpu",
            "target": {"type": "Utilization", "averageUtilization": target}}}));
    }
    metrics.extend(
        extra
            .and_then(|v| v.as_array().cloned())
            .unwrap_or_default(),
    );
    if !metrics.is_empty() {
        spec.insert("metrics".into(), Value::Array(metrics));
    }
    if let Some(behavior) = behavior {
        spec.insert("behavior".into(), behavior);
    }
    if let Some(status) = map.get_mut("status").and_then(Value::as_object_mut) {
        let mut current = Vec::new();
        if let Some(cpu) = status.remove("currentCPUUtilizationPercentage") {
            current.push(json!({"type": "Resource", "resource": {"name": "cpu",
                "current": {"averageUtilization": cpu}}}));
        }
        current.extend(
            current_extra
                .and_then(|v| v.as_array().cloned())
                .unwrap_or_default(),
        );
        if !current.is_empty() {
            status.insert("currentMetrics".into(), Value::Array(current));
        }
        if let Some(conditions) = conditions {
            status.insert("conditions".into(), conditions);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v2() -> Value {
        json!({
            "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {
                "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                "minReplicas": 1, "maxReplicas": 5,
                "metrics": [
                    {"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 80}}},
                    {"type": "Resource", "resource": {"name": "memory", "target": {"type": "AverageValue", "averageValue": "100Mi"}}}
                ],
                "behavior": {"scaleDown": {"stabilizationWindowSeconds": 60}}
            },
            "status": {
                "currentReplicas": 2, "desiredReplicas": 2,
                "currentMetrics": [{"type": "Resource", "resource": {"name": "cpu", "current": {"averageUtilization": 40, "averageValue": "100m"}}}],
                "conditions": [{"type": "AbleToScale", "status": "True"}]
            }
        })
    }

    #[test]
    fn a_v2_autoscaler_reads_as_v1_with_its_cpu_target_and_comes_back_whole() {
        let mut obj = v2();
        to_version("autoscaling", "v1", &mut obj);
        assert_eq!(obj["apiVersion"], "autoscaling/v1");
        assert_eq!(obj["spec"]["targetCPUUtilizationPercentage"], 80);
        assert!(obj["spec"].get("metrics").is_none(), "{obj}");
        assert_eq!(obj["status"]["currentCPUUtilizationPercentage"], 40);
        let notes = obj["metadata"]["annotations"].as_object().unwrap();
        assert!(notes[METRICS].as_str().unwrap().contains("memory"), "{obj}");
        assert!(notes.contains_key(BEHAVIOR) && notes.contains_key(CONDITIONS));
        to_version("autoscaling", "v2", &mut obj);
        let mut want = v2();
        // The current CPU value v1 has no field for is dropped; the rest comes back.
        want["status"]["currentMetrics"][0]["resource"]["current"] =
            json!({"averageUtilization": 40});
        assert_eq!(obj, want);
    }

    #[test]
    fn a_v1_autoscaler_stores_as_v2() {
        let mut obj = json!({
            "apiVersion": "autoscaling/v1", "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": "web"},
            "spec": {"scaleTargetRef": {"kind": "Deployment", "name": "web"}, "maxReplicas": 3,
                     "targetCPUUtilizationPercentage": 50}
        });
        to_version("autoscaling", "v2", &mut obj);
        assert_eq!(obj["apiVersion"], "autoscaling/v2");
        assert_eq!(
            obj["spec"]["metrics"],
            json!([{"type": "Resource", "resource": {"name": "cpu",
                "target": {"type": "Utilization", "averageUtilization": 50}}}])
        );
        assert!(obj["metadata"].get("annotations").is_none(), "{obj}");
    }
}
