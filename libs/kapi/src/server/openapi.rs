//! OpenAPI v3, minimal: enough for `kubectl create/apply/replace` (default
//! `--validate=strict`) to find, for every served kind, a PATCH operation tagged with
//! `x-kubernetes-group-version-kind` that declares the `fieldValidation` query parameter.
//! kubectl then sends `fieldValidation=Strict` and validates nothing on the client side.
//!
//! The documents carry no schemas: PATCH operations declare no request body, so
//! `kubectl apply` computes its patches from its compiled-in types (strategic merge) or as
//! JSON merge patches (custom resources) instead of from an empty schema. `/openapi/v2` is not
//! served (clients fetch it as protobuf).

use std::collections::BTreeMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Arc;

use apimachinery::{ApiError, ResourceInfo};
use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{Map, Value, json};

use super::error::not_found_path;
use super::path::Route;
use super::render::{self, JSON};
use crate::Api;

/// Answers `/openapi/v3` and `/openapi/v3/<api/v1 | apis/g/v>`.
pub(crate) fn serve(api: &Api, route: &Route) -> Result<Response, ApiError> {
    let by_gv = group_versions(&api.registry.all());
    let doc = match route {
        Route::OpenApiRoot => {
            let paths: Map<String, Value> = by_gv
                .iter()
                .map(|(path, resources)| {
                    let hash = hash(&document(resources));
                    let url = format!("/openapi/v3/{path}?hash={hash}");
                    (path.clone(), json!({ "serverRelativeURL": url }))
                })
                .collect();
            json!({ "paths": paths })
        }
        Route::OpenApiGroupVersion(path) => document(by_gv.get(path).ok_or_else(not_found_path)?),
        _ => return Err(not_found_path()),
    };
    Ok(render::bytes_response(
        StatusCode::OK,
        JSON,
        render::to_bytes(&doc),
    ))
}

/// Resources by their OpenAPI path key (`api/v1`, `apis/apps/v1`).
fn group_versions(all: &[Arc<ResourceInfo>]) -> BTreeMap<String, Vec<Arc<ResourceInfo>>> {
    let mut by_gv: BTreeMap<String, Vec<Arc<ResourceInfo>>> = BTreeMap::new();
    for r in all {
        let key = if r.group.is_empty() {
            format!("api/{}", r.version)
        } else {
            format!("apis/{}/{}", r.group, r.version)
        };
        by_gv.entry(key).or_default().push(r.clone());
    }
    for resources in by_gv.values_mut() {
        resources.sort_by(|a, b| a.plural.cmp(&b.plural));
    }
    by_gv
}

/// The document of one group version.
fn document(resources: &[Arc<ResourceInfo>]) -> Value {
    let mut paths = Map::new();
    for r in resources {
        let prefix = if r.group.is_empty() {
            format!("/api/{}", r.version)
        } else {
            format!("/apis/{}/{}", r.group, r.version)
        };
        let scope = if r.namespaced {
            "/namespaces/{namespace}"
        } else {
            ""
        };
        let collection = format!("{prefix}{scope}/{}", r.plural);
        paths.insert(collection.clone(), collection_item(r));
        paths.insert(format!("{collection}/{{name}}"), object_item(r));
    }
    json!({
        "openapi": "3.0.0",
        "info": { "title": "Kubernetes", "version": "unversioned" },
        "paths": paths,
        "components": { "schemas": {} },
    })
}

fn collection_item(r: &ResourceInfo) -> Value {
    let mut item = json!({
        "get": operation(r, "list", &[]),
        "post": operation(r, "post", WRITE_PARAMS),
    });
    if r.namespaced {
        item["parameters"] = json!([path_param("namespace")]);
    }
    item
}

fn object_item(r: &ResourceInfo) -> Value {
    let mut params = vec![path_param("name")];
    if r.namespaced {
        params.push(path_param("namespace"));
    }
    json!({
        "parameters": params,
        "get": operation(r, "get", &[]),
        "put": operation(r, "put", WRITE_PARAMS),
        "patch": operation(r, "patch", PATCH_PARAMS),
        "delete": operation(r, "delete", &["dryRun", "gracePeriodSeconds", "propagationPolicy"]),
    })
}

const WRITE_PARAMS: &[&str] = &["dryRun", "fieldManager", "fieldValidation"];
const PATCH_PARAMS: &[&str] = &["dryRun", "fieldManager", "fieldValidation", "force"];

fn operation(r: &ResourceInfo, action: &str, query: &[&str]) -> Value {
    let params: Vec<Value> = query
        .iter()
        .map(|name| json!({ "name": name, "in": "query", "schema": { "type": "string" } }))
        .collect();
    json!({
        "operationId": format!("{action}{}", r.kind),
        "parameters": params,
        "responses": { "200": { "description": "OK" } },
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": {
            "group": r.group,
            "version": r.version,
            "kind": r.kind,
        },
    })
}

fn path_param(name: &str) -> Value {
    json!({ "name": name, "in": "path", "required": true, "schema": { "type": "string" } })
}

/// A content hash for the `?hash=` of the root document's URLs.
fn hash(doc: &Value) -> String {
    let mut h = DefaultHasher::new();
    doc.to_string().hash(&mut h);
    format!("{:016X}", h.finish())
}
