//! What an EdgeApplication asks for, with no I/O: the objects to apply (one copy of each
//! workload per target, everything else once), the manifests and targets that cannot be
//! applied and why, what to prune, and the status.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use serde_json::{Value, json};

use super::types::{
    AVAILABLE, EdgeApplication, ManifestStatus, Overriders, PROCESSING, ResourceIdentifier,
};
use super::{EDGEAPP_LABEL, Problem, TARGET_LABEL, overrides};
use crate::{BELONGING_TO, RANGE_NODEGROUP, SERVICE_TOPOLOGY};

/// The kinds copied once per target (in group `apps`).
pub(crate) const WORKLOAD_KINDS: [&str; 3] = ["Deployment", "StatefulSet", "DaemonSet"];

/// Where a copy goes.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Target {
    /// The copy's name suffix and its pods' [`TARGET_LABEL`] value: the group's name, or
    /// `ls-<hash>` for a label selector.
    pub id: String,
    /// How the copy is pinned.
    pub pin: Pin,
    /// What the copy changes.
    pub overriders: Overriders,
}

/// How a copy is kept on its target's nodes.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Pin {
    /// Nodes labelled [`BELONGING_TO`]`=<group>`.
    Group(String),
    /// Nodes matching a label selector.
    Labels(LabelSelector),
}

/// One object to apply.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Desired {
    /// Which object (and which manifest it came from).
    pub id: ResourceIdentifier,
    /// The whole object, as it is applied.
    pub object: Value,
    /// Whether it is a per-target workload copy.
    pub workload: bool,
}

/// A manifest (or one target's copy of it) that cannot be applied.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Failed {
    /// As much of the identifier as is known (the ordinal always).
    pub id: ResourceIdentifier,
    /// Why.
    pub reason: String,
}

/// The outcome of planning one EdgeApplication.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Plan {
    /// What to apply, in manifest then target order.
    pub desired: Vec<Desired>,
    /// What cannot be applied.
    pub failed: Vec<Failed>,
    /// What is wrong with the scope (a target named twice, ...), reported, not fatal.
    pub problems: Vec<String>,
}

/// Plans `app`: every manifest checked and defaulted, workloads copied per target.
pub(crate) fn plan(app: &EdgeApplication) -> Plan {
    let mut out = Plan::default();
    let (targets, target_problems) = targets(app);
    out.problems = target_problems.into_iter().map(|p| p.0).collect();
    let namespace = app.metadata.namespace.clone().unwrap_or_default();
    for (ordinal, manifest) in app.spec.workload_template.manifests.iter().enumerate() {
        let base = match normalize(manifest, &namespace) {
            Ok(base) => base,
            Err(p) => {
                out.failed.push(Failed {
                    id: ResourceIdentifier {
                        ordinal,
                        ..Default::default()
                    },
                    reason: format!("manifest {ordinal}: {}", p.0),
                });
                continue;
            }
        };
        if is_workload(&base) {
            for t in &targets {
                let mut id = identify(ordinal, &base);
                id.name = format!("{}-{}", id.name, t.id);
                match copy_for(&base, t, &id.name) {
                    Ok(object) => out.desired.push(Desired {
                        id,
                        object,
                        workload: true,
                    }),
                    Err(p) => out.failed.push(Failed {
                        reason: format!("manifest {ordinal}, target {}: {}", t.id, p.0),
                        id,
                    }),
                }
            }
        } else {
            let mut object = base;
            if object["kind"] == "Service" && object["apiVersion"] == "v1" {
                let annotations = object_at(&mut object, &["metadata", "annotations"]);
                annotations
                    .entry(SERVICE_TOPOLOGY)
                    .or_insert_with(|| RANGE_NODEGROUP.into());
            }
            out.desired.push(Desired {
                id: identify(ordinal, &object),
                object,
                workload: false,
            });
        }
    }
    refuse_collisions(&mut out);
    let app_label = app_label(app);
    for d in &mut out.desired {
        label(&mut d.object, &[(EDGEAPP_LABEL, &app_label)]);
    }
    out
}

/// The targets of `app`, each once: a NodeGroup named twice (kubeedge #4860/#5497) is taken
/// once, with the first entry's overriders, and reported.
pub(crate) fn targets(app: &EdgeApplication) -> (Vec<Target>, Vec<Problem>) {
    let scope = &app.spec.workload_scope;
    let mut seen = BTreeSet::new();
    let mut targets = Vec::new();
    let mut problems = Vec::new();
    for g in &scope.target_node_groups {
        if g.name.is_empty() {
            problems.push(Problem::new("a targetNodeGroups entry has no name".into()));
        } else if !seen.insert(g.name.clone()) {
            problems.push(Problem::new(format!(
                "node group {:?} is named more than once in targetNodeGroups; the first entry counts",
                g.name
            )));
        } else {
            targets.push(Target {
                id: label_value(&g.name),
                pin: Pin::Group(g.name.clone()),
                overriders: g.overriders.clone(),
            });
        }
    }
    for l in &scope.target_node_labels {
        let id = format!("ls-{}", selector_hash(&l.label_selector));
        if seen.insert(id.clone()) {
            targets.push(Target {
                id,
                pin: Pin::Labels(l.label_selector.clone()),
                overriders: l.overriders.clone(),
            });
        } else {
            problems.push(Problem::new(format!(
                "a label selector is given more than once in targetNodeLabels ({id})"
            )));
        }
    }
    (targets, problems)
}

/// A stable hash of a label selector (FNV-1a over its JSON), ten hex digits.
pub(crate) fn selector_hash(selector: &LabelSelector) -> String {
    let text = serde_json::to_string(selector).unwrap_or_default();
    format!("{:010x}", fnv(text.as_bytes()) & 0xff_ffff_ffff)
}

/// FNV-1a, 64 bits.
pub(crate) fn fnv(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// A label value for `s`: itself when it fits (63 characters), else a prefix and a hash.
pub(crate) fn label_value(s: &str) -> String {
    if s.len() <= 63 {
        s.to_owned()
    } else {
        let cut = s.char_indices().nth(46).map_or(s.len(), |(i, _)| i);
        format!(
            "{}-{:016x}",
            s[..cut].trim_end_matches(['-', '.', '_']),
            fnv(s.as_bytes())
        )
    }
}

/// The [`EDGEAPP_LABEL`] value of `app`'s objects.
pub(crate) fn app_label(app: &EdgeApplication) -> String {
    label_value(app.metadata.name.as_deref().unwrap_or_default())
}

/// Checks a manifest and fills what users leave out: the EdgeApplication's namespace
/// (kubeedge #5475), a workload's legacy apiVersion (`extensions/v1beta1`, `apps/v1beta1`,
/// `apps/v1beta2`) as `apps/v1`, and a missing workload selector as the template's labels
/// (what those versions defaulted).
fn normalize(manifest: &Value, namespace: &str) -> Result<Value, Problem> {
    let mut obj = manifest.clone();
    let Some(map) = obj.as_object_mut() else {
        return Err(Problem::new("not an object".into()));
    };
    let api_version = string_field(map, "apiVersion")?;
    let kind = string_field(map, "kind")?;
    let meta = map
        .get_mut("metadata")
        .and_then(Value::as_object_mut)
        .ok_or_else(|| Problem::new("metadata is missing".into()))?;
    let name = meta
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or("")
        .trim()
        .to_owned();
    if name.is_empty() {
        return Err(Problem::new("metadata.name is missing".into()));
    }
    meta.insert("name".into(), name.into());
    match meta.get("namespace").and_then(Value::as_str).map(str::trim) {
        None | Some("") => {
            meta.insert("namespace".into(), namespace.into());
        }
        Some(ns) if ns == namespace => {}
        Some(ns) => {
            return Err(Problem::new(format!(
                "namespace {ns:?} is not the EdgeApplication's ({namespace:?}): an object can only be owned from its own namespace"
            )));
        }
    }
    for field in [
        "uid",
        "resourceVersion",
        "creationTimestamp",
        "managedFields",
        "generation",
    ] {
        meta.remove(field);
    }
    map.remove("status");
    let legacy = ["extensions/v1beta1", "apps/v1beta1", "apps/v1beta2"];
    let workload = WORKLOAD_KINDS.contains(&kind.as_str());
    let api_version = if workload && legacy.contains(&api_version.as_str()) {
        "apps/v1".to_owned()
    } else {
        api_version
    };
    map.insert("apiVersion".into(), api_version.into());
    map.insert("kind".into(), kind.into());
    if is_workload(&obj) {
        default_selector(&mut obj)?;
    }
    Ok(obj)
}

/// A trimmed, non-empty string field of the manifest's top level.
fn string_field(map: &serde_json::Map<String, Value>, field: &str) -> Result<String, Problem> {
    let v = map.get(field).and_then(Value::as_str).unwrap_or("").trim();
    if v.is_empty() {
        Err(Problem::new(format!("{field} is missing")))
    } else {
        Ok(v.to_owned())
    }
}

/// Whether `obj` is an `apps/v1` Deployment, StatefulSet or DaemonSet.
fn is_workload(obj: &Value) -> bool {
    obj["apiVersion"] == "apps/v1"
        && obj["kind"]
            .as_str()
            .is_some_and(|k| WORKLOAD_KINDS.contains(&k))
}

/// A workload with no selector selects its template's labels.
fn default_selector(obj: &mut Value) -> Result<(), Problem> {
    let labels = obj
        .pointer("/spec/template/metadata/labels")
        .filter(|l| l.as_object().is_some_and(|m| !m.is_empty()))
        .cloned();
    let has_selector = obj.pointer("/spec/selector").is_some_and(|s| !s.is_null());
    match (has_selector, labels) {
        (true, _) => Ok(()),
        (false, Some(labels)) => {
            object_at(obj, &["spec", "selector"]).insert("matchLabels".into(), labels);
            Ok(())
        }
        (false, None) => Err(Problem::new(
            "a workload needs spec.selector or labels on its pod template".into(),
        )),
    }
}

/// The identifier of a normalized object.
fn identify(ordinal: usize, obj: &Value) -> ResourceIdentifier {
    let api_version = obj["apiVersion"].as_str().unwrap_or("");
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    ResourceIdentifier {
        ordinal,
        group: group.into(),
        version: version.into(),
        kind: obj["kind"].as_str().unwrap_or("").into(),
        resource: String::new(),
        namespace: obj["metadata"]["namespace"].as_str().unwrap_or("").into(),
        name: obj["metadata"]["name"].as_str().unwrap_or("").into(),
    }
}

/// The copy of workload `base` for target `t`, named `name`: overridden, its pods labelled
/// with the target (in the selector too, so two copies never select each other's pods) and
/// pinned to the target's nodes by required node affinity.
fn copy_for(base: &Value, t: &Target, name: &str) -> Result<Value, Problem> {
    if name.len() > 253 {
        return Err(Problem::new(format!(
            "the copy's name {name:?} is longer than 253 characters"
        )));
    }
    let mut obj = base.clone();
    obj["metadata"]["name"] = name.into();
    overrides::apply(&mut obj, &t.overriders)?;
    object_at(&mut obj, &["spec", "template", "metadata", "labels"])
        .insert(TARGET_LABEL.into(), t.id.clone().into());
    let selector = object_at(&mut obj, &["spec", "selector"]);
    if selector.get("matchLabels").is_none_or(|m| !m.is_object()) {
        selector.insert("matchLabels".into(), json!({}));
    }
    selector["matchLabels"][TARGET_LABEL] = t.id.clone().into();
    label(&mut obj, &[(TARGET_LABEL, t.id.as_str())]);
    pin(&mut obj, &t.pin)?;
    Ok(obj)
}

/// Adds the target's node requirements to every required node affinity term (or makes the
/// one term), keeping the template's own constraints (its nodeSelector too, but for a
/// [`BELONGING_TO`] key, which the target decides).
fn pin(obj: &mut Value, pin: &Pin) -> Result<(), Problem> {
    let requirements = requirements(pin)?;
    let pod = object_at(obj, &["spec", "template", "spec"]);
    if let Some(selector) = pod.get_mut("nodeSelector").and_then(Value::as_object_mut) {
        selector.remove(BELONGING_TO);
    }
    let required = pod
        .entry("affinity")
        .or_insert_with(|| json!({}))
        .as_object_mut()
        .ok_or_else(|| Problem::new("affinity is not an object".into()))?
        .entry("nodeAffinity")
        .or_insert_with(|| json!({}))
        .as_object_mut()
        .ok_or_else(|| Problem::new("nodeAffinity is not an object".into()))?
        .entry("requiredDuringSchedulingIgnoredDuringExecution")
        .or_insert_with(|| json!({"nodeSelectorTerms": []}));
    let terms = required
        .as_object_mut()
        .and_then(|r| {
            r.entry("nodeSelectorTerms")
                .or_insert_with(|| json!([]))
                .as_array_mut()
        })
        .ok_or_else(|| Problem::new("nodeSelectorTerms is not a list".into()))?;
    if terms.is_empty() {
        terms.push(json!({}));
    }
    for term in terms.iter_mut() {
        let Some(term) = term.as_object_mut() else {
            return Err(Problem::new("a nodeSelectorTerm is not an object".into()));
        };
        let exprs = term.entry("matchExpressions").or_insert_with(|| json!([]));
        let Some(exprs) = exprs.as_array_mut() else {
            return Err(Problem::new("matchExpressions is not a list".into()));
        };
        if matches!(pin, Pin::Group(_)) {
            exprs.retain(|e| e["key"] != BELONGING_TO);
        }
        exprs.extend(requirements.iter().cloned());
    }
    Ok(())
}

/// A target's node selector requirements.
fn requirements(pin: &Pin) -> Result<Vec<Value>, Problem> {
    match pin {
        Pin::Group(g) => Ok(vec![
            json!({"key": BELONGING_TO, "operator": "In", "values": [g]}),
        ]),
        Pin::Labels(sel) => {
            let mut out: Vec<Value> = sel
                .match_labels
                .iter()
                .flatten()
                .map(|(k, v)| json!({"key": k, "operator": "In", "values": [v]}))
                .collect();
            for e in sel.match_expressions.iter().flatten() {
                let op = e.operator.as_str();
                if !["In", "NotIn", "Exists", "DoesNotExist"].contains(&op) {
                    return Err(Problem::new(format!(
                        "label selector operator {op:?} is not In, NotIn, Exists or DoesNotExist"
                    )));
                }
                let mut r = json!({"key": e.key, "operator": op});
                if let Some(values) = e.values.as_ref().filter(|v| !v.is_empty()) {
                    r["values"] = json!(values);
                }
                out.push(r);
            }
            if out.is_empty() {
                return Err(Problem::new(
                    "an empty label selector would select every node".into(),
                ));
            }
            Ok(out)
        }
    }
}

/// Two planned objects with the same kind, namespace and name (`nginx` for group `a-b` and
/// `nginx-a` for group `b`): the first keeps the name, the later ones are refused.
fn refuse_collisions(out: &mut Plan) {
    let mut seen: BTreeMap<(String, String, String, String), usize> = BTreeMap::new();
    let mut kept = Vec::new();
    for d in out.desired.drain(..) {
        let key = (
            d.id.group.clone(),
            d.id.kind.clone(),
            d.id.namespace.clone(),
            d.id.name.clone(),
        );
        match seen.get(&key) {
            Some(first) => out.failed.push(Failed {
                reason: format!(
                    "manifest {}: {} {:?} is already made from manifest {first}",
                    d.id.ordinal, d.id.kind, d.id.name
                ),
                id: d.id,
            }),
            None => {
                seen.insert(key, d.id.ordinal);
                kept.push(d);
            }
        }
    }
    out.desired = kept;
}

/// Adds `labels` to the object's own labels.
fn label(obj: &mut Value, labels: &[(&str, &str)]) {
    let map = object_at(obj, &["metadata", "labels"]);
    for (k, v) in labels {
        map.insert((*k).into(), (*v).into());
    }
}

/// The object at `path`, made (and replacing a non-object) where missing.
fn object_at<'a>(obj: &'a mut Value, path: &[&str]) -> &'a mut serde_json::Map<String, Value> {
    let mut at = obj;
    for seg in path {
        if !at.is_object() {
            *at = json!({});
        }
        at = at
            .as_object_mut()
            .expect("made an object just above")
            .entry(*seg)
            .or_insert_with(|| json!({}));
    }
    if !at.is_object() {
        *at = json!({});
    }
    at.as_object_mut().expect("made an object just above")
}

/// The identifiers in `previous` that are no longer planned: applied earlier, now to be
/// deleted. A manifest or copy that failed keeps what it had (a typo does not delete a
/// running application).
pub(crate) fn stale(plan: &Plan, previous: &[ManifestStatus]) -> Vec<ResourceIdentifier> {
    let mut out: Vec<ResourceIdentifier> = Vec::new();
    for s in previous {
        let id = &s.identifier;
        let planned = plan.desired.iter().any(|d| d.id.same_object(id));
        let kept = plan
            .failed
            .iter()
            .any(|f| f.id.same_object(id) || (f.id.kind.is_empty() && f.id.ordinal == id.ordinal));
        let known = !id.name.is_empty() && !id.kind.is_empty();
        if known && !planned && !kept && !out.iter().any(|o| o.same_object(id)) {
            out.push(id.clone());
        }
    }
    out
}

/// Whether a workload reports that it runs as its spec asks: the controller saw the current
/// generation and every replica is updated and available.
pub(crate) fn available(obj: &Value) -> bool {
    let status = &obj["status"];
    let int = |v: &Value| v.as_i64().unwrap_or(0);
    let generation = int(&obj["metadata"]["generation"]);
    if int(&status["observedGeneration"]) < generation {
        return false;
    }
    match obj["kind"].as_str() {
        Some("Deployment") => {
            let want = obj["spec"]["replicas"].as_i64().unwrap_or(1);
            int(&status["updatedReplicas"]) >= want
                && int(&status["availableReplicas"]) >= want
                && int(&status["replicas"]) <= want.max(int(&status["updatedReplicas"]))
        }
        Some("StatefulSet") => {
            let want = obj["spec"]["replicas"].as_i64().unwrap_or(1);
            let ready = status["availableReplicas"]
                .as_i64()
                .unwrap_or_else(|| int(&status["readyReplicas"]));
            int(&status["updatedReplicas"]) >= want && ready >= want
        }
        Some("DaemonSet") => {
            let want = int(&status["desiredNumberScheduled"]);
            int(&status["updatedNumberScheduled"]) >= want
                && int(&status["numberAvailable"]) >= want
        }
        _ => true,
    }
}

/// The status: one entry per planned object (`Available` for those in `available_ids`), one
/// per failed manifest or copy, one per stale object not yet deleted; sorted by ordinal and
/// name, each object once.
pub(crate) fn status(
    plan: &Plan,
    available_ids: &[ResourceIdentifier],
    undeleted: &[ResourceIdentifier],
) -> Vec<ManifestStatus> {
    let mut out: Vec<ManifestStatus> = Vec::new();
    let mut push = |identifier: &ResourceIdentifier, conditions: &str| {
        let dup = out.iter().any(|s| {
            s.identifier == *identifier
                || (!identifier.name.is_empty() && s.identifier.same_object(identifier))
        });
        if !dup {
            out.push(ManifestStatus {
                identifier: identifier.clone(),
                conditions: conditions.into(),
            });
        }
    };
    for d in &plan.desired {
        let ok = available_ids.iter().any(|a| a.same_object(&d.id));
        push(&d.id, if ok { AVAILABLE } else { PROCESSING });
    }
    for f in &plan.failed {
        push(&f.id, PROCESSING);
    }
    for id in undeleted {
        push(id, PROCESSING);
    }
    out.sort_by(|a, b| {
        let key = |s: &ManifestStatus| (s.identifier.ordinal, s.identifier.name.clone());
        key(a).cmp(&key(b))
    });
    out
}
