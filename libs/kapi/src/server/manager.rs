//! The field manager of a write, as kube-apiserver takes it: `?fieldManager=` (at most 128
//! characters), else the program name that starts the User-Agent (`kubectl/v1.32.0 (...)` is
//! `kubectl`); `?force=true` only with a server-side apply, which must name its manager.

use apimachinery::ApiError;
use apimachinery::patch::PatchType;
use axum::http::{HeaderMap, header};

use super::query::Params;
use crate::FieldOwner;

/// kube-apiserver's limit on a manager's name.
const MAX_MANAGER: usize = 128;

/// The write's owner (no manager when neither the query nor the User-Agent names one).
pub(super) fn owner<'a>(params: &'a Params, headers: &'a HeaderMap) -> FieldOwner<'a> {
    let named = params.get("fieldManager").filter(|m| !m.is_empty());
    let manager = named.or_else(|| {
        let agent = headers.get(header::USER_AGENT)?.to_str().ok()?;
        let program = agent.split('/').next()?.trim();
        let end = program
            .char_indices()
            .nth(MAX_MANAGER)
            .map_or(program.len(), |(i, _)| i);
        Some(&program[..end]).filter(|p| !p.is_empty())
    });
    FieldOwner {
        manager,
        force: params.flag("force") == Some(true),
    }
}

/// Refuses what kube-apiserver refuses in a write's options (422): a `fieldManager` longer
/// than 128 characters, an apply without one, `force` on anything but an apply.
pub(super) fn check(params: &Params, patch: Option<PatchType>) -> Result<(), ApiError> {
    let manager = params.get("fieldManager").unwrap_or("");
    let apply = patch == Some(PatchType::Apply);
    if manager.chars().count() > MAX_MANAGER {
        let why = format!("Too long: may not be longer than {MAX_MANAGER}");
        return Err(invalid_options(apply, "fieldManager", &why));
    }
    if apply && manager.is_empty() {
        let why = "Required value: is required for apply patch";
        return Err(invalid_options(apply, "fieldManager", why));
    }
    if !apply && params.flag("force") == Some(true) {
        let why = "Unsupported value: true: may not be specified for non-apply patch";
        return Err(invalid_options(apply, "force", why));
    }
    Ok(())
}

fn invalid_options(apply: bool, field: &str, why: &str) -> ApiError {
    let kind = if apply {
        "PatchOptions"
    } else {
        "UpdateOptions"
    };
    ApiError::invalid("meta.k8s.io", kind, "", &[(field, why)])
}
