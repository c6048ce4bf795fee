//! The documents built from one registry state: the definitions every served kind needs,
//! the Swagger 2.0 document (`/openapi/v2`) and one OpenAPI 3.0 document per group version
//! (`/openapi/v3/<api/v1 | apis/g/v>`), each with the paths of its resources.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use apimachinery::ResourceInfo;
use serde_json::{Map, Value, json};

use super::builtin::{builtins, ref_name};
use super::crd;
use super::paths::{self, Version};
use super::{Gvk, REF_V3};

/// The served kinds and the definitions they reach, references in the v2 form.
pub(super) struct Model {
    pub(super) definitions: BTreeMap<String, Value>,
    /// Definitions taken from CRDs (published in v2 in a reduced form).
    crd_names: BTreeSet<String>,
    /// Each served resource with its kind's definition name.
    pub(super) kinds: Vec<(Arc<ResourceInfo>, String)>,
}

// === impl Model ===

impl Model {
    /// The model of `resources`, with the schemas of `crds` (CRD objects) for custom ones.
    pub(super) fn new(resources: &[Arc<ResourceInfo>], crds: &[Value]) -> Model {
        let builtins = builtins();
        let crd_defs = crd::definitions(crds);
        let mut own = BTreeMap::new();
        let mut crd_names = BTreeSet::new();
        let mut kinds = Vec::new();
        for r in resources {
            let gvk = Gvk::new(&r.group, &r.version, &r.kind);
            let name = match (r.custom, crd_defs.get(&gvk), builtins.kinds.get(&gvk)) {
                (true, Some((name, schema)), _) => {
                    crd_names.insert(name.clone());
                    own.insert(name.clone(), schema.clone());
                    name.clone()
                }
                (false, _, Some(name)) => name.clone(),
                _ => {
                    let name = crd::definition_name(&gvk);
                    own.insert(name.clone(), crd::permissive(&gvk));
                    name
                }
            };
            kinds.push((r.clone(), name));
        }
        kinds.sort_by(|a, b| {
            (&a.0.group, &a.0.version, &a.0.plural).cmp(&(&b.0.group, &b.0.version, &b.0.plural))
        });
        let roots: Vec<&str> = kinds.iter().map(|(_, n)| n.as_str()).collect();
        let definitions = reachable(&roots, |name| {
            own.get(name).or_else(|| builtins.definitions.get(name))
        });
        Model {
            definitions,
            crd_names,
            kinds,
        }
    }

    /// The Swagger 2.0 document: every definition, and the paths of every resource.
    pub(super) fn v2(&self) -> Value {
        let definitions: Map<String, Value> = self
            .definitions
            .iter()
            .map(|(name, schema)| {
                let schema = if self.crd_names.contains(name) {
                    crd::to_v2(schema)
                } else {
                    schema.clone()
                };
                (name.clone(), schema)
            })
            .collect();
        let mut paths = Map::new();
        for (r, definition) in &self.kinds {
            paths::add(&mut paths, r, definition, Version::V2);
        }
        json!({
            "swagger": "2.0",
            "info": { "title": "Kubernetes", "version": "unversioned" },
            "paths": paths,
            "definitions": definitions,
        })
    }

    /// The OpenAPI 3.0 documents by their path key (`api/v1`, `apis/apps/v1`).
    pub(super) fn v3(&self) -> BTreeMap<String, Value> {
        let mut by_gv: BTreeMap<String, Vec<&(Arc<ResourceInfo>, String)>> = BTreeMap::new();
        for k in &self.kinds {
            by_gv.entry(gv_path(&k.0)).or_default().push(k);
        }
        by_gv
            .into_iter()
            .map(|(path, kinds)| {
                let roots: Vec<&str> = kinds.iter().map(|(_, n)| n.as_str()).collect();
                let schemas: Map<String, Value> =
                    reachable(&roots, |name| self.definitions.get(name))
                        .into_iter()
                        .map(|(name, schema)| (name, to_v3(&schema)))
                        .collect();
                let mut paths = Map::new();
                for (r, definition) in kinds {
                    paths::add(&mut paths, r, definition, Version::V3);
                }
                let doc = json!({
                    "openapi": "3.0.0",
                    "info": { "title": "Kubernetes", "version": "unversioned" },
                    "paths": paths,
                    "components": { "schemas": schemas },
                });
                (path, doc)
            })
            .collect()
    }
}

/// The OpenAPI path key of a resource's group version: `api/v1`, `apis/apps/v1`.
pub(super) fn gv_path(r: &ResourceInfo) -> String {
    if r.group.is_empty() {
        format!("api/{}", r.version)
    } else {
        format!("apis/{}/{}", r.group, r.version)
    }
}

/// The definitions reachable from `roots` through `$ref`s, as `lookup` finds them (names it
/// does not know are left out).
fn reachable<'a>(
    roots: &[&str],
    lookup: impl Fn(&str) -> Option<&'a Value>,
) -> BTreeMap<String, Value> {
    let mut out = BTreeMap::new();
    let mut todo: Vec<String> = roots.iter().map(|s| s.to_string()).collect();
    while let Some(name) = todo.pop() {
        if out.contains_key(&name) {
            continue;
        }
        let Some(schema) = lookup(&name) else {
            continue;
        };
        refs(schema, &mut |r| {
            if !out.contains_key(r) {
                todo.push(r.to_owned());
            }
        });
        out.insert(name, schema.clone());
    }
    out
}

/// Calls `f` with the definition name of every `$ref` in `schema`.
fn refs(schema: &Value, f: &mut impl FnMut(&str)) {
    match schema {
        Value::Object(map) => {
            if let Some(name) = ref_name(map) {
                f(name);
            }
            map.values().for_each(|v| refs(v, f));
        }
        Value::Array(list) => list.iter().for_each(|v| refs(v, f)),
        _ => {}
    }
}

/// The OpenAPI 3.0 form of a v2-form schema: references under `#/components/schemas/`, and a
/// reference with siblings (a description) wrapped in `allOf`, as Kubernetes publishes it.
fn to_v3(schema: &Value) -> Value {
    match schema {
        Value::Object(map) => {
            let mut out: Map<String, Value> = map
                .iter()
                .filter(|(k, _)| k.as_str() != "$ref")
                .map(|(k, v)| {
                    let v = match k.as_str() {
                        // Values of these are data, not schemas.
                        "enum" | "default" | "example" | "required" => v.clone(),
                        k if k.starts_with("x-") => v.clone(),
                        _ => to_v3(v),
                    };
                    (k.clone(), v)
                })
                .collect();
            if let Some(name) = ref_name(map) {
                let reference = json!({ "$ref": format!("{REF_V3}{name}") });
                if out.is_empty() {
                    return reference;
                }
                out.insert("allOf".into(), json!([reference]));
            }
            Value::Object(out)
        }
        Value::Array(list) => Value::Array(list.iter().map(to_v3).collect()),
        other => other.clone(),
    }
}
