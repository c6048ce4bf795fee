//! kube-apiserver's defaulting of the built-in kinds, on their JSON: what a field holds when a
//! client leaves it out (`SetDefaults_*` of `k8s.io/kubernetes/pkg/apis/*/v1`). Pure and
//! idempotent: defaulting a defaulted object changes nothing, so it runs on every write.
//!
//! - [`pod`]: pod specs, alone and as the templates of workloads.
//! - [`service`]: what a Service holds besides its allocated addresses.
//! - [`workloads`]: Deployments, ReplicaSets, StatefulSets, DaemonSets, Jobs, CronJobs.

pub mod pod;
pub mod service;
pub mod workloads;

use serde_json::{Map, Value};

/// The object `map[key]`, made (or replacing a non-object) when absent.
pub fn child<'a>(map: &'a mut Map<String, Value>, key: &str) -> &'a mut Map<String, Value> {
    let slot = map
        .entry(key.to_owned())
        .or_insert_with(|| Value::Object(Map::new()));
    if !slot.is_object() {
        *slot = Value::Object(Map::new());
    }
    match slot {
        Value::Object(m) => m,
        _ => unreachable!("made an object just above"),
    }
}

/// Sets `map[key]` to `value` when it is absent or null.
pub fn or_set(map: &mut Map<String, Value>, key: &str, value: Value) {
    match map.get(key) {
        None | Some(Value::Null) => {
            map.insert(key.to_owned(), value);
        }
        Some(_) => {}
    }
}

/// The objects of the array `map[key]` (none when it is absent or not an array).
pub(crate) fn items<'a>(
    map: &'a mut Map<String, Value>,
    key: &str,
) -> impl Iterator<Item = &'a mut Map<String, Value>> {
    map.get_mut(key)
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
        .filter_map(Value::as_object_mut)
}

/// `obj[key]` as an object, when it is one.
pub(crate) fn field_mut<'a>(
    map: &'a mut Map<String, Value>,
    key: &str,
) -> Option<&'a mut Map<String, Value>> {
    map.get_mut(key).and_then(Value::as_object_mut)
}
