//! Resources from an `apiextensions.k8s.io/v1` CustomResourceDefinition.

use serde_json::Value;

use super::{CREATION_TIMESTAMP_DESCRIPTION, Column, CrdError, ResourceInfo};

/// What every version of the CRD shares.
struct Names {
    group: String,
    kind: String,
    list_kind: String,
    plural: String,
    singular: String,
    namespaced: bool,
    short_names: Vec<String>,
    categories: Vec<String>,
}

pub(super) fn resources(crd: &Value) -> Result<Vec<ResourceInfo>, CrdError> {
    let names = names(crd)?;
    let versions = crd
        .pointer("/spec/versions")
        .and_then(Value::as_array)
        .filter(|v| !v.is_empty())
        .ok_or_else(|| missing("spec.versions"))?;
    let mut resources = Vec::new();
    for (i, version) in versions.iter().enumerate() {
        let path = format!("spec.versions[{i}]");
        let name = required_str(version, "name", &path)?;
        if version.get("served").and_then(Value::as_bool) != Some(true) {
            continue;
        }
        resources.push(resource(&names, name, version, &path)?);
    }
    Ok(resources)
}

fn names(crd: &Value) -> Result<Names, CrdError> {
    let spec = crd.get("spec").ok_or_else(|| missing("spec"))?;
    let group = required_str(spec, "group", "spec")?.to_owned();
    let names = spec.get("names").ok_or_else(|| missing("spec.names"))?;
    let kind = required_str(names, "kind", "spec.names")?.to_owned();
    let plural = required_str(names, "plural", "spec.names")?.to_owned();
    let namespaced = match spec.get("scope").and_then(Value::as_str) {
        Some("Namespaced") => true,
        Some("Cluster") => false,
        Some(other) => {
            return Err(CrdError(format!(
                "spec.scope must be Namespaced or Cluster, not \"{other}\""
            )));
        }
        None => return Err(missing("spec.scope")),
    };
    Ok(Names {
        list_kind: optional_str(names, "listKind").unwrap_or_else(|| format!("{kind}List")),
        singular: optional_str(names, "singular").unwrap_or_else(|| kind.to_lowercase()),
        short_names: string_list(names, "shortNames", "spec.names")?,
        categories: string_list(names, "categories", "spec.names")?,
        group,
        kind,
        plural,
        namespaced,
    })
}

fn resource(
    names: &Names,
    version: &str,
    spec: &Value,
    path: &str,
) -> Result<ResourceInfo, CrdError> {
    let mut subresources = Vec::new();
    for sub in ["status", "scale"] {
        if spec.pointer(&format!("/subresources/{sub}")).is_some() {
            subresources.push(sub.to_owned());
        }
    }
    let mut info = ResourceInfo::new(
        &names.group,
        version,
        &names.kind,
        &names.plural,
        names.namespaced,
    );
    info.list_kind = names.list_kind.clone();
    info.singular = names.singular.clone();
    info.short_names = names.short_names.clone();
    info.categories = names.categories.clone();
    info.subresources = subresources;
    info.selectable_fields = selectable_fields(spec, path)?;
    info.columns = columns(spec, path)?;
    info.custom = true;
    info.structure = spec
        .pointer("/schema/openAPIV3Schema")
        .cloned()
        .map(std::sync::Arc::new);
    // Compiled once here, where the served version is made. A schema that does not compile
    // (a CRD stored before schemas were checked) leaves the version unvalidated; writes of
    // CRDs are refused such schemas before they are stored.
    info.schema = info
        .structure
        .as_deref()
        .and_then(|raw| crate::crdschema::Schema::compile(raw).ok())
        .map(std::sync::Arc::new);
    Ok(info)
}

/// `selectableFields[].jsonPath` (`.spec.color`) as field names (`spec.color`).
fn selectable_fields(spec: &Value, path: &str) -> Result<Vec<String>, CrdError> {
    let Some(fields) = spec.get("selectableFields") else {
        return Ok(Vec::new());
    };
    let fields = fields
        .as_array()
        .ok_or_else(|| invalid(&format!("{path}.selectableFields"), "must be a list"))?;
    fields
        .iter()
        .enumerate()
        .map(|(i, field)| {
            let at = format!("{path}.selectableFields[{i}]");
            let json_path = required_str(field, "jsonPath", &at)?;
            let name = json_path.strip_prefix('.').unwrap_or(json_path);
            if name.is_empty() || name.contains(['[', ']', '*', '@']) {
                return Err(invalid(
                    &format!("{at}.jsonPath"),
                    "must be a simple path like .spec.field",
                ));
            }
            Ok(name.to_owned())
        })
        .collect()
}

/// `Name`, then the additional printer columns, or `Age` when there are none (as
/// kube-apiserver serves CRDs without printer columns).
fn columns(spec: &Value, path: &str) -> Result<Vec<Column>, CrdError> {
    let mut columns = vec![Column::name().json_path(".metadata.name")];
    let printer = match spec.get("additionalPrinterColumns") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(printer)) => printer.clone(),
        Some(_) => {
            let at = format!("{path}.additionalPrinterColumns");
            return Err(invalid(&at, "must be a list"));
        }
    };
    if printer.is_empty() {
        columns.push(
            Column::new("Age", CREATION_TIMESTAMP_DESCRIPTION)
                .type_("date")
                .json_path(".metadata.creationTimestamp"),
        );
    }
    for (i, col) in printer.iter().enumerate() {
        columns.push(printer_column(
            col,
            &format!("{path}.additionalPrinterColumns[{i}]"),
        )?);
    }
    Ok(columns)
}

fn printer_column(col: &Value, at: &str) -> Result<Column, CrdError> {
    let type_ = required_str(col, "type", at)?;
    if !matches!(type_, "string" | "integer" | "number" | "boolean" | "date") {
        return Err(invalid(
            &format!("{at}.type"),
            "must be one of string, integer, number, boolean, date",
        ));
    }
    let priority = col.get("priority").and_then(Value::as_i64).unwrap_or(0);
    Ok(Column {
        name: required_str(col, "name", at)?.to_owned(),
        type_: type_.to_owned(),
        format: optional_str(col, "format").unwrap_or_default(),
        description: optional_str(col, "description").unwrap_or_default(),
        priority: i32::try_from(priority).unwrap_or(i32::MAX),
        json_path: required_str(col, "jsonPath", at)?.to_owned(),
    })
}

fn required_str<'a>(obj: &'a Value, key: &str, at: &str) -> Result<&'a str, CrdError> {
    obj.get(key)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .ok_or_else(|| missing(&format!("{at}.{key}")))
}

fn optional_str(obj: &Value, key: &str) -> Option<String> {
    obj.get(key)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
}

fn string_list(obj: &Value, key: &str, at: &str) -> Result<Vec<String>, CrdError> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(items)) => items
            .iter()
            .map(|item| {
                item.as_str()
                    .map(str::to_owned)
                    .ok_or_else(|| invalid(&format!("{at}.{key}"), "must be a list of strings"))
            })
            .collect(),
        Some(_) => Err(invalid(&format!("{at}.{key}"), "must be a list of strings")),
    }
}

fn missing(field: &str) -> CrdError {
    CrdError(format!("{field} is required"))
}

fn invalid(field: &str, why: &str) -> CrdError {
    CrdError(format!("{field} {why}"))
}
