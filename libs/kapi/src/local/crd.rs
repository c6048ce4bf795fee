//! The strategies of CustomResourceDefinitions and of the custom resources they define, with
//! the apiextensions controllers' part done here: a stored CRD is validated and accepted at
//! once (`NamesAccepted`, `Established`), and its resources are served from the [`Registry`]
//! after each committed write. A deleted CRD is held by the `customresourcecleanup` finalizer
//! (as in kube) until `crd_cleanup`, above the verbs, has deleted its custom objects. A
//! custom object is only created while its CRD is there and not terminating.

use apimachinery::catalog::from_crd;
use apimachinery::crdschema::{self, FieldError, Part, Schema};
use apimachinery::time::now_rfc3339;
use apimachinery::{ApiError, ResourceInfo};
use objstore::{ListOptions, ObjKey, Store, StoreError, StoredObject};
use serde_json::{Map, Value, json};

use super::meta;
use super::vocab::{Cleanup, Core, Strategy, Target, parse};
use crate::Registry;

pub(super) const GROUP: &str = "apiextensions.k8s.io";
const KIND: &str = "CustomResourceDefinition";
/// Where CRDs are stored (`plural.group` of the CRD resource itself).
pub(super) const STORE_RESOURCE: &str = "customresourcedefinitions.apiextensions.k8s.io";
/// Holds a deleted CRD until its custom objects are gone.
pub(super) const CLEANUP_FINALIZER: &str = "customresourcecleanup.apiextensions.k8s.io";

/// CustomResourceDefinitions.
pub(super) struct Crds;

/// The objects of every CRD's resources.
pub(super) struct CustomResources;

/// Registers the resources of every stored CRD; returns how many CRDs were registered.
/// Call at start, before serving. CRDs that no longer parse are skipped with a warning.
pub async fn register_existing_crds(
    store: &Store,
    registry: &Registry,
) -> Result<usize, StoreError> {
    let listed = store.list(ListOptions::new(STORE_RESOURCE)).await?;
    let mut registered = 0;
    for item in listed.items {
        let obj = match serde_json::from_slice::<Value>(&item.value) {
            Ok(obj) => obj,
            Err(e) => {
                tracing::warn!(resource = %item.key, error = %e, "stored CRD is not JSON");
                continue;
            }
        };
        match register(registry, &obj) {
            Ok(()) => registered += 1,
            Err(e) => tracing::warn!(resource = %item.key, error = %e, "stored CRD not served"),
        }
    }
    // What was stored at start is served: the API's `crd-informer-synced` check passes from
    // now on (a CRD created later is served a moment after it is stored).
    registry.mark_crds_synced();
    Ok(registered)
}

// === impl Crds ===

#[async_trait::async_trait]
impl Strategy for Crds {
    fn tracks_generation(&self) -> bool {
        true
    }

    fn prepare_create(&self, target: &Target, obj: &mut Value) -> Result<(), ApiError> {
        prepare(&target.registry, obj, None)
    }

    fn prepare_update(
        &self,
        target: &Target,
        next: &mut Value,
        current: &Value,
    ) -> Result<(), ApiError> {
        prepare(&target.registry, next, Some(current))
    }

    fn mark_deleting(&self, obj: &mut Value) {
        mark_terminating(obj);
    }

    fn cleanup(&self) -> Option<Cleanup> {
        Some(Cleanup::CustomObjects)
    }

    /// The registry follows the stored CRD.
    async fn after_write(&self, core: &Core, name: &str) {
        sync(core, name).await;
    }
}

// === impl CustomResources ===

impl Strategy for CustomResources {
    fn tracks_generation(&self) -> bool {
        true
    }

    /// The CRD the resource comes from (`plural.group`).
    fn create_parent(&self, target: &Target) -> Option<ObjKey> {
        let info = &target.info;
        Some(key(&format!("{}.{}", info.plural, info.group)))
    }

    /// Prunes the fields the version's schema does not know and sets its defaults.
    fn canonicalize(&self, target: &Target, obj: &mut Value) -> Result<(), ApiError> {
        if let Some(schema) = target.info.schema.as_deref() {
            schema.prune(obj);
            schema.default(obj);
        }
        Ok(())
    }

    fn prepare_create(&self, target: &Target, obj: &mut Value) -> Result<(), ApiError> {
        check_schema(target, obj, None)
    }

    fn validate_update(
        &self,
        target: &Target,
        current: &Value,
        next: &Value,
    ) -> Result<(), ApiError> {
        check_schema(target, next, Some(current))
    }

    /// Refuses a custom object whose CRD is gone (404) or terminating (405).
    fn check_parent(&self, crd: Option<&StoredObject>) -> Result<(), ApiError> {
        let Some(crd) = crd else {
            let message = "the server could not find the requested resource";
            return Err(ApiError::new(404, "NotFound", message));
        };
        if meta::deleting(&parse(crd)?) {
            let message = "create not allowed while custom resource definition is terminating";
            return Err(ApiError::new(405, "MethodNotAllowed", message));
        }
        Ok(())
    }
}

// === helpers ===

/// Refuses (422) a custom object its version's schema does not admit; `current` is the
/// stored object of an update. A `status` write answers for the status only.
fn check_schema(target: &Target, obj: &Value, current: Option<&Value>) -> Result<(), ApiError> {
    let Some(schema) = target.info.schema.as_deref() else {
        return Ok(());
    };
    let part = match target.owner.subresource.as_deref() {
        Some("status") => Part::Status,
        _ => Part::Whole,
    };
    let errors = schema.validate(obj, current, part);
    if errors.is_empty() {
        return Ok(());
    }
    let info = &target.info;
    Err(crdschema::invalid(
        &info.group,
        &info.kind,
        meta::name(obj),
        &errors,
    ))
}

/// The errors of every version's `openAPIV3Schema` (not structural, a pattern or CEL rule
/// that does not compile), with their paths in the CRD.
fn schema_errors(obj: &Value) -> Vec<FieldError> {
    let versions = obj.pointer("/spec/versions").and_then(Value::as_array);
    let mut errors = Vec::new();
    for (i, version) in versions.into_iter().flatten().enumerate() {
        let Some(raw) = version.pointer("/schema/openAPIV3Schema") else {
            continue;
        };
        let base = format!("spec.versions[{i}].schema.openAPIV3Schema");
        if let Err(found) = Schema::compile(raw) {
            errors.extend(found.into_iter().map(|mut e| {
                e.field = if e.field.is_empty() {
                    base.clone()
                } else {
                    format!("{base}.{}", e.field)
                };
                e
            }));
        }
    }
    errors
}

/// Validates a CRD about to be stored (422) and sets its status; `previous` is the stored
/// CRD of an update.
fn prepare(registry: &Registry, obj: &mut Value, previous: Option<&Value>) -> Result<(), ApiError> {
    let name = meta::name(obj).to_owned();
    let invalid =
        |field: &str, why: String| ApiError::invalid(GROUP, KIND, &name, &[(field, &why)]);
    let resources = from_crd(obj).map_err(|e| invalid("spec", e.0))?;
    let errors = schema_errors(obj);
    if !errors.is_empty() {
        return Err(crdschema::invalid(GROUP, KIND, &name, &errors));
    }
    let group = obj
        .pointer("/spec/group")
        .and_then(Value::as_str)
        .unwrap_or("");
    let plural = obj
        .pointer("/spec/names/plural")
        .and_then(Value::as_str)
        .unwrap_or("");
    if name != format!("{plural}.{group}") {
        let why = format!("Invalid value: \"{name}\": must be spec.names.plural+\".\"+spec.group");
        return Err(invalid("metadata.name", why));
    }
    let shadows =
        |r: &std::sync::Arc<ResourceInfo>| !r.custom && r.group == group && r.plural == plural;
    if registry.all().iter().any(shadows) {
        let why = format!("Invalid value: \"{plural}\": {group}/{plural} is a built-in resource");
        return Err(invalid("spec.names.plural", why));
    }
    if previous.is_none() {
        add_finalizer(obj);
    }
    let status = status(obj, previous, &resources);
    meta::set_top(obj, "status", Some(status));
    Ok(())
}

/// Marks a CRD being deleted (`Terminating` condition).
fn mark_terminating(obj: &mut Value) {
    let terminating = condition(
        "Terminating",
        "InstanceDeletionInProgress",
        "CustomResource deletion is in progress",
        None,
    );
    let map = meta::object_mut(obj);
    let status = meta::object_mut(map.entry("status").or_insert_with(|| json!({})));
    let conditions = status.entry("conditions").or_insert_with(|| json!([]));
    if let Some(list) = conditions.as_array_mut() {
        list.retain(|c| c.get("type").and_then(Value::as_str) != Some("Terminating"));
        list.push(terminating);
    }
}

/// Brings the registry in line with the stored CRD `name` (after a committed write).
async fn sync(core: &Core, name: &str) {
    match core.get(&key(name)).await {
        Ok(Some(obj)) => {
            if let Err(e) = register(&core.registry, &obj) {
                tracing::warn!(crd = %name, error = %e, "CRD not served");
            }
        }
        Ok(None) => unregister(&core.registry, name),
        Err(e) => tracing::warn!(crd = %name, error = %e, "reading CRD"),
    }
}

pub(super) fn key(name: &str) -> ObjKey {
    ObjKey::new(STORE_RESOURCE, "", name)
}

/// Serves the resources `obj` defines, dropping versions it no longer serves.
fn register(registry: &Registry, obj: &Value) -> Result<(), apimachinery::catalog::CrdError> {
    let resources = from_crd(obj)?;
    let Some(first) = resources.first() else {
        unregister(registry, meta::name(obj));
        return Ok(());
    };
    let (group, plural) = (first.group.clone(), first.plural.clone());
    let stale = registry.all().iter().any(|r| {
        r.custom
            && r.group == group
            && r.plural == plural
            && !resources.iter().any(|n| n.version == r.version)
    });
    if stale {
        registry.remove(&group, &plural);
    }
    registry.upsert(resources);
    Ok(())
}

/// Stops serving the resources of CRD `name` (`plural.group`).
pub(super) fn unregister(registry: &Registry, name: &str) {
    if let Some((plural, group)) = name.split_once('.') {
        registry.remove(group, plural);
    }
}

fn add_finalizer(obj: &mut Value) {
    let meta = meta::metadata_mut(obj);
    let list = meta.entry("finalizers").or_insert_with(|| json!([]));
    if !list.is_array() {
        *list = json!([]);
    }
    if let Some(list) = list.as_array_mut()
        && !list.iter().any(|f| f == CLEANUP_FINALIZER)
    {
        list.push(json!(CLEANUP_FINALIZER));
    }
}

/// The status the apiextensions controllers would write: names accepted as asked (there is
/// no other CRD to conflict with that the registry would not already refuse), established,
/// and every version ever used for storage.
fn status(obj: &Value, previous: Option<&Value>, resources: &[ResourceInfo]) -> Value {
    let mut accepted = obj
        .pointer("/spec/names")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    let kind = accepted
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    accepted
        .entry("singular")
        .or_insert_with(|| Value::String(kind.to_lowercase()));
    accepted
        .entry("listKind")
        .or_insert_with(|| Value::String(format!("{kind}List")));
    let before = |t: &str| {
        previous?
            .pointer("/status/conditions")?
            .as_array()?
            .iter()
            .find(|c| c.get("type").and_then(Value::as_str) == Some(t))
            .cloned()
    };
    let since = |t: &str| {
        before(t)
            .filter(|c| c.get("status").and_then(Value::as_str) == Some("True"))
            .and_then(|c| c.get("lastTransitionTime").cloned())
    };
    let mut conditions = vec![
        condition(
            "NamesAccepted",
            "NoConflicts",
            "no conflicts found",
            since("NamesAccepted"),
        ),
        condition(
            "Established",
            "InitialNamesAccepted",
            "the initial names have been accepted",
            since("Established"),
        ),
    ];
    conditions.extend(before("Terminating"));
    json!({
        "acceptedNames": Value::Object(accepted),
        "conditions": conditions,
        "storedVersions": stored_versions(obj, previous, resources),
    })
}

/// The previous `storedVersions` plus the current storage version.
fn stored_versions(
    obj: &Value,
    previous: Option<&Value>,
    resources: &[ResourceInfo],
) -> Vec<Value> {
    let mut versions: Vec<Value> = previous
        .and_then(|p| p.pointer("/status/storedVersions"))
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let storage = obj
        .pointer("/spec/versions")
        .and_then(Value::as_array)
        .and_then(|vs| {
            vs.iter()
                .find(|v| v.get("storage").and_then(Value::as_bool) == Some(true))
        })
        .and_then(|v| v.get("name"))
        .and_then(Value::as_str)
        .or_else(|| resources.first().map(|r| r.version.as_str()));
    if let Some(storage) = storage
        && !versions.iter().any(|v| v == storage)
    {
        versions.push(Value::String(storage.to_owned()));
    }
    versions
}

fn condition(type_: &str, reason: &str, message: &str, since: Option<Value>) -> Value {
    let mut c = Map::new();
    c.insert("type".into(), json!(type_));
    c.insert("status".into(), json!("True"));
    c.insert(
        "lastTransitionTime".into(),
        since.unwrap_or_else(|| Value::String(now_rfc3339())),
    );
    c.insert("reason".into(), json!(reason));
    c.insert("message".into(), json!(message));
    Value::Object(c)
}
