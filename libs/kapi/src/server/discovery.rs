//! Discovery: `/version`, `/api`, `/apis`, `/apis/<g>`, `/api/v1`, `/apis/<g>/<v>`, built from
//! the registry on every request. `/api` and `/apis` also answer in the aggregated
//! `apidiscovery.k8s.io/v2` form when the `Accept` header asks for it first.

use std::cmp::Reverse;
use std::collections::BTreeMap;
use std::sync::Arc;

use apimachinery::{ApiError, ResourceInfo};
use axum::http::header::{HOST, VARY};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::Response;
use serde_json::{Value, json};

use super::error::not_found_path;
use super::negotiate::{self, AGGREGATED_DISCOVERY, Discovery};
use super::path::Route;
use super::render::{self, JSON, json_response};
use super::subresource;
use crate::Api;

/// Answers a discovery route.
pub(crate) fn serve(api: &Api, route: &Route, headers: &HeaderMap) -> Result<Response, ApiError> {
    let all = api.registry.all();
    let doc = match route {
        Route::Version => {
            negotiate::output(headers, false)?;
            return Ok(json_response(StatusCode::OK, &api.version));
        }
        Route::ApiVersions | Route::GroupList => {
            let core = matches!(route, Route::ApiVersions);
            let groups = groups(&all, core);
            let resp = match negotiate::discovery(headers)? {
                Discovery::Aggregated => render::bytes_response(
                    StatusCode::OK,
                    AGGREGATED_DISCOVERY,
                    render::to_bytes(&aggregated(&groups)),
                ),
                Discovery::Legacy if core => json_response(StatusCode::OK, &api_versions(headers)),
                Discovery::Legacy => json_response(StatusCode::OK, &group_list(&groups)),
            };
            return Ok(vary_accept(resp));
        }
        Route::Group(name) => {
            negotiate::output(headers, false)?;
            let groups = groups(&all, false);
            let versions = groups.get(name.as_str()).ok_or_else(not_found_path)?;
            let mut doc = api_group(name, versions);
            doc["kind"] = json!("APIGroup");
            doc["apiVersion"] = json!("v1");
            doc
        }
        Route::ResourceList { group, version } => {
            negotiate::output(headers, false)?;
            let served: Vec<_> = all
                .iter()
                .filter(|r| r.group == *group && r.version == *version)
                .cloned()
                .collect();
            if served.is_empty() && !(group.is_empty() && version == "v1") {
                return Err(not_found_path());
            }
            resource_list(group, version, &served)
        }
        _ => return Err(not_found_path()),
    };
    Ok(json_response(StatusCode::OK, &doc))
}

/// The served group versions: group → versions (preferred first) → resources (by name).
type Groups = BTreeMap<String, Vec<(String, Vec<Arc<ResourceInfo>>)>>;

/// The core group alone (`core`) or every other group.
fn groups(all: &[Arc<ResourceInfo>], core: bool) -> Groups {
    let mut by_gv: BTreeMap<(String, String), Vec<Arc<ResourceInfo>>> = BTreeMap::new();
    for r in all.iter().filter(|r| r.group.is_empty() == core) {
        by_gv
            .entry((r.group.clone(), r.version.clone()))
            .or_default()
            .push(r.clone());
    }
    let mut groups = Groups::new();
    for ((group, version), mut resources) in by_gv {
        resources.sort_by(|a, b| a.plural.cmp(&b.plural));
        groups.entry(group).or_default().push((version, resources));
    }
    for versions in groups.values_mut() {
        versions.sort_by_key(|(v, _)| version_priority(v));
    }
    groups
}

/// Kubernetes version order: GA before beta before alpha, higher numbers first, anything
/// else last (alphabetically).
pub(crate) fn version_priority(v: &str) -> (u8, Reverse<u64>, Reverse<u64>, String) {
    let other = (3, Reverse(0), Reverse(0), v.to_owned());
    let Some(rest) = v.strip_prefix('v') else {
        return other;
    };
    let digits = rest.chars().take_while(char::is_ascii_digit).count();
    let Ok(major) = rest[..digits].parse::<u64>() else {
        return other;
    };
    let tail = &rest[digits..];
    let (class, minor) = if tail.is_empty() {
        (0, "0")
    } else if let Some(m) = tail.strip_prefix("beta") {
        (1, m)
    } else if let Some(m) = tail.strip_prefix("alpha") {
        (2, m)
    } else {
        return other;
    };
    match minor.parse::<u64>() {
        Ok(minor) => (class, Reverse(major), Reverse(minor), String::new()),
        Err(_) => other,
    }
}

fn api_versions(headers: &HeaderMap) -> Value {
    let host = headers
        .get(HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("");
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{ "clientCIDR": "0.0.0.0/0", "serverAddress": host }],
    })
}

fn group_list(groups: &Groups) -> Value {
    let groups: Vec<Value> = groups
        .iter()
        .map(|(name, versions)| api_group(name, versions))
        .collect();
    json!({ "kind": "APIGroupList", "apiVersion": "v1", "groups": groups })
}

/// One `APIGroup` (without kind/apiVersion, as inside an `APIGroupList`).
fn api_group(name: &str, versions: &[(String, Vec<Arc<ResourceInfo>>)]) -> Value {
    let gv = |v: &str| json!({ "groupVersion": format!("{name}/{v}"), "version": v });
    let list: Vec<Value> = versions.iter().map(|(v, _)| gv(v)).collect();
    json!({
        "name": name,
        "versions": list,
        "preferredVersion": versions.first().map(|(v, _)| gv(v)),
    })
}

/// `APIResourceList` of one group version, subresources included (`pods/status`).
fn resource_list(group: &str, version: &str, resources: &[Arc<ResourceInfo>]) -> Value {
    let mut entries = Vec::new();
    for r in resources {
        let mut main = json!({
            "name": r.plural,
            "singularName": r.singular,
            "namespaced": r.namespaced,
            "kind": r.kind,
            "verbs": r.verbs,
        });
        if !r.short_names.is_empty() {
            main["shortNames"] = json!(r.short_names);
        }
        if !r.categories.is_empty() {
            main["categories"] = json!(r.categories);
        }
        entries.push(main);
        for sub in &r.subresources {
            let spec = subresource::spec(sub);
            let mut entry = json!({
                "name": format!("{}/{sub}", r.plural),
                "singularName": "",
                "namespaced": r.namespaced,
                "kind": spec.kind.map_or(r.kind.as_str(), |(_, _, k)| k),
                "verbs": spec.verbs,
            });
            if let Some((g, v, _)) = spec.kind
                && (g != group || v != version)
            {
                entry["group"] = json!(g);
                entry["version"] = json!(v);
            }
            entries.push(entry);
        }
    }
    entries.sort_by(|a, b| a["name"].as_str().cmp(&b["name"].as_str()));
    let group_version = if group.is_empty() {
        version.to_owned()
    } else {
        format!("{group}/{version}")
    };
    json!({
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": group_version,
        "resources": entries,
    })
}

/// `APIGroupDiscoveryList` of these groups.
fn aggregated(groups: &Groups) -> Value {
    let items: Vec<Value> = groups
        .iter()
        .map(|(name, versions)| {
            let versions: Vec<Value> = versions
                .iter()
                .map(|(v, resources)| {
                    let resources: Vec<Value> =
                        resources.iter().map(|r| aggregated_resource(r)).collect();
                    json!({ "version": v, "freshness": "Current", "resources": resources })
                })
                .collect();
            json!({ "metadata": { "name": name }, "versions": versions })
        })
        .collect();
    json!({
        "kind": "APIGroupDiscoveryList",
        "apiVersion": "apidiscovery.k8s.io/v2",
        "metadata": {},
        "items": items,
    })
}

fn aggregated_resource(r: &ResourceInfo) -> Value {
    let kind = |g: &str, v: &str, k: &str| json!({ "group": g, "version": v, "kind": k });
    let subresources: Vec<Value> = r
        .subresources
        .iter()
        .map(|sub| {
            let spec = subresource::spec(sub);
            let (g, v, k) =
                spec.kind
                    .unwrap_or((r.group.as_str(), r.version.as_str(), r.kind.as_str()));
            json!({ "subresource": sub, "responseKind": kind(g, v, k), "verbs": spec.verbs })
        })
        .collect();
    let mut doc = json!({
        "resource": r.plural,
        "responseKind": kind(&r.group, &r.version, &r.kind),
        "scope": if r.namespaced { "Namespaced" } else { "Cluster" },
        "singularResource": r.singular,
        "verbs": r.verbs,
    });
    if !r.short_names.is_empty() {
        doc["shortNames"] = json!(r.short_names);
    }
    if !r.categories.is_empty() {
        doc["categories"] = json!(r.categories);
    }
    if !subresources.is_empty() {
        doc["subresources"] = json!(subresources);
    }
    doc
}

fn vary_accept(mut resp: Response) -> Response {
    resp.headers_mut()
        .insert(VARY, HeaderValue::from_static("Accept"));
    if resp
        .headers()
        .get(axum::http::header::CONTENT_TYPE)
        .is_none()
    {
        resp.headers_mut().insert(
            axum::http::header::CONTENT_TYPE,
            HeaderValue::from_static(JSON),
        );
    }
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_sort_like_kubernetes() {
        let mut vs = vec![
            "v1alpha1", "v2beta1", "foo", "v1", "v1beta2", "v2", "v1beta1",
        ];
        vs.sort_by_key(|v| version_priority(v));
        assert_eq!(
            vs,
            [
                "v2", "v1", "v2beta1", "v1beta2", "v1beta1", "v1alpha1", "foo"
            ]
        );
    }
}
