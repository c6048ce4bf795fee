//! Label and field selectors turned into an object-store [`Filter`]: equalities become index
//! hints, the full selectors a predicate.

use std::sync::Arc;

use apimachinery::selector::{FieldSelector, LabelSelector};
use apimachinery::{ApiError, ResourceInfo};
use objstore::Filter;

use super::query::ReadParams;

const NAME: &str = "metadata.name";
const NAMESPACE: &str = "metadata.namespace";

/// The filter of a list, watch or deletecollection: the path's namespace, the object name of
/// a single-object watch, and the selectors. Unparsable selectors and unsupported fields are
/// 400.
pub(crate) fn filter(
    info: &ResourceInfo,
    namespace: Option<&str>,
    name: Option<&str>,
    params: &ReadParams,
) -> Result<Filter, ApiError> {
    let labels = params
        .label_selector
        .as_deref()
        .map(LabelSelector::parse)
        .transpose()
        .map_err(|e| ApiError::bad_request(e.message))?
        .filter(|s| !s.is_empty());
    let fields = params
        .field_selector
        .as_deref()
        .map(FieldSelector::parse)
        .transpose()
        .map_err(|e| ApiError::bad_request(e.message))?
        .filter(|s| !s.is_empty());
    if let Some(fields) = &fields {
        check_fields(info, fields, name)?;
    }
    let mut filter = Filter {
        namespace: namespace.map(str::to_owned),
        ..Filter::default()
    };
    filter.field = match name {
        Some(name) => Some((NAME.to_owned(), name.to_owned())),
        None => fields.as_ref().and_then(index_hint),
    };
    if let Some(labels) = &labels {
        filter.labels = labels.equalities().into_iter().collect();
    }
    if labels.is_some() || fields.is_some() {
        filter.predicate = Some(Arc::new(move |obj: &objstore::StoredObject| {
            labels.as_ref().is_none_or(|l| l.matches(&obj.labels))
                && fields
                    .as_ref()
                    .is_none_or(|f| f.matches(&|field: &str| obj.field(field).map(str::to_owned)))
        }));
    }
    Ok(filter)
}

/// Only `metadata.name`, `metadata.namespace` and the resource's selectable fields; a
/// single-object request's name must agree with a `metadata.name` selector.
fn check_fields(
    info: &ResourceInfo,
    fields: &FieldSelector,
    name: Option<&str>,
) -> Result<(), ApiError> {
    for field in fields.fields() {
        let known = field == NAME || field == NAMESPACE || info.selectable_fields.contains(&field);
        if !known {
            return Err(ApiError::bad_request(format!(
                "field label not supported: {field}"
            )));
        }
    }
    let Some(name) = name else {
        return Ok(());
    };
    for (field, value) in fields.equalities() {
        if field == NAME && value != name {
            return Err(ApiError::bad_request(format!(
                "fieldSelector metadata.name={value} does not match the name {name:?} in the path"
            )));
        }
    }
    Ok(())
}

/// The equality the store should look up through its index: `metadata.name` first (one
/// row), then an indexed field, then `metadata.namespace`.
fn index_hint(fields: &FieldSelector) -> Option<(String, String)> {
    let eqs = fields.equalities();
    let rank = |f: &str| match f {
        NAME => 0,
        NAMESPACE => 2,
        _ => 1,
    };
    eqs.into_iter().min_by_key(|(f, _)| rank(f))
}
