//! Field ownership in the writes: the verbs call these on the object they are about to store,
//! so `metadata.managedFields` says which manager set which field (an `Update` entry for
//! creates, updates and patches, an `Apply` entry for server-side apply). The logic itself is
//! pure, in [`apimachinery::managedfields`]; this is where a [`Target`] meets it.

use apimachinery::ApiError;
use apimachinery::managedfields::{self, Manager, Scope};
use apimachinery::time::now_rfc3339;
use serde_json::Value;

use super::vocab::Target;

/// The scope of a write to the main resource (its status left to the subresource, if any).
pub(super) fn main_scope(target: &Target) -> Scope {
    Scope::Main {
        skip_status: target.has_status_subresource(),
    }
}

/// Records a non-apply write of `new` over `old` (`None`: a create) by the target's manager;
/// the entries `new` came with are replaced.
pub(super) fn record(target: &Target, scope: Scope, old: Option<&Value>, new: &mut Value) {
    let api_version = target.info.api_version();
    let manager = target.owner.manager.as_deref().map(|name| Manager {
        name,
        subresource: target.owner.subresource.as_deref(),
        api_version: &api_version,
    });
    let now = now_rfc3339();
    managedfields::record_update(&target.info, scope, old, new, manager.as_ref(), &now);
}

/// Server-side apply of `config` over `live` (`{}`: none yet) by the target's manager: the
/// object to store, with its entries, or the 409 listing the conflicts.
pub(super) fn apply(
    target: &Target,
    scope: Scope,
    live: &Value,
    config: &Value,
) -> Result<Value, ApiError> {
    let Some(name) = target.owner.manager.as_deref() else {
        return Err(ApiError::internal("an apply without a field manager"));
    };
    let api_version = target.info.api_version();
    let who = Manager {
        name,
        subresource: target.owner.subresource.as_deref(),
        api_version: &api_version,
    };
    let force = target.owner.force;
    let now = now_rfc3339();
    managedfields::apply(&target.info, scope, live, config, &who, force, &now)
        .map_err(|conflicts| managedfields::conflict_error(&conflicts))
}

/// Puts `from`'s entries on `to` (after a merge that kept the current object's metadata).
pub(super) fn carry(from: &Value, to: &mut Value) {
    let entries = from.pointer("/metadata/managedFields").cloned();
    if let Some(meta) = to.get_mut("metadata").and_then(Value::as_object_mut) {
        match entries {
            Some(entries) => meta.insert("managedFields".into(), entries),
            None => meta.remove("managedFields"),
        };
    }
}
