//! The bootstrap roles and bindings, reconciled at start through the API
//! ([`apimachinery::rbac::bootstrap`] says what to do with each).

use apimachinery::ApiError;
use apimachinery::rbac::bootstrap::{self, Reconcile};
use kapi::{Api, DeleteOptions, User, WriteRequest};
use serde_json::Value;

use crate::auth::{MASTERS, stored_object};

/// Creates the missing bootstrap objects and adds what autoupdated ones lack.
pub(crate) async fn reconcile(api: &Api) -> Result<(), ApiError> {
    let kinds: [(&str, Vec<Value>, bool); 4] = [
        ("clusterroles", bootstrap::cluster_roles(), true),
        ("roles", bootstrap::roles(), true),
        (
            "clusterrolebindings",
            bootstrap::cluster_role_bindings(),
            false,
        ),
        ("rolebindings", bootstrap::role_bindings(), false),
    ];
    for (plural, wanted, is_role) in kinds {
        for obj in &wanted {
            reconcile_one(api, plural, obj, is_role).await?;
        }
    }
    Ok(())
}

/// The user the control plane writes its own objects as.
pub(crate) fn apiserver_user() -> User {
    User {
        name: "system:apiserver".into(),
        groups: vec![MASTERS.into()],
    }
}

async fn reconcile_one(
    api: &Api,
    plural: &str,
    wanted: &Value,
    is_role: bool,
) -> Result<(), ApiError> {
    let info = api
        .registry
        .get(apimachinery::rbac::GROUP, "v1", plural)
        .ok_or_else(|| ApiError::internal(format!("{plural} are not served")))?;
    let namespace = wanted["metadata"]["namespace"].as_str().unwrap_or_default();
    let name = wanted["metadata"]["name"].as_str().unwrap_or_default();
    let existing = stored_object(&api.store, &info.store_resource(), namespace, name).await?;
    let action = match is_role {
        true => bootstrap::reconcile_role(existing.as_ref(), wanted),
        false => bootstrap::reconcile_binding(existing.as_ref(), wanted),
    };
    let user = apiserver_user();
    let req = |name| WriteRequest {
        info: &info,
        namespace,
        name,
        subresource: None,
        user: &user,
        dry_run: false,
        owner: Default::default(),
        collection: false,
    };
    match action {
        Reconcile::Unchanged => return Ok(()),
        Reconcile::Create(obj) => create(api, &req(""), obj).await?,
        Reconcile::Update(obj) => drop(api.backend.update(&req(name), obj).await?),
        Reconcile::Recreate(obj) => {
            api.backend
                .delete(&req(name), DeleteOptions::default())
                .await?;
            create(api, &req(""), obj).await?;
        }
    }
    tracing::info!(
        resource = plural,
        namespace,
        name,
        "reconciled a bootstrap RBAC object"
    );
    Ok(())
}

/// Creates `obj`; one created meanwhile (another server start) is fine.
async fn create(api: &Api, req: &WriteRequest<'_>, obj: Value) -> Result<(), ApiError> {
    match api.backend.create(req, obj).await {
        Ok(_) => Ok(()),
        Err(e) if e.code == 409 => Ok(()),
        Err(e) => Err(e),
    }
}
