//! The layering of `local`, checked on its sources: every module imports only modules of a
//! lower layer, or of its own layer without a cycle, and none imports the root (`local.rs`),
//! which declares and calls them all. Vocabulary at the bottom, kind strategies above it, the
//! verbs above those, the cleanups that call the verbs above the verbs, the router on top.

use std::collections::BTreeMap;

/// The root's source: its `mod` lines say which modules must be placed in [`LAYERS`].
const ROOT: &str = include_str!("../../local.rs");

/// Every module of `local` (but the tests): name, layer, source.
const LAYERS: &[(&str, u8, &str)] = &[
    // Vocabulary: imports no other module of `local`.
    ("meta", 0, include_str!("../meta.rs")),
    ("vocab", 0, include_str!("../vocab.rs")),
    ("validate", 1, include_str!("../validate.rs")),
    ("owners", 1, include_str!("../owners.rs")),
    // Strategies: what each kind adds to the verbs.
    ("admission", 2, include_str!("../admission.rs")),
    ("crd", 2, include_str!("../crd.rs")),
    ("csr", 2, include_str!("../csr.rs")),
    ("limits", 2, include_str!("../limits.rs")),
    ("services", 2, include_str!("../services.rs")),
    ("workloads", 2, include_str!("../workloads.rs")),
    ("namespace", 2, include_str!("../namespace.rs")),
    ("pods", 2, include_str!("../pods.rs")),
    ("strategy", 3, include_str!("../strategy.rs")),
    ("subresources", 2, include_str!("../subresources.rs")),
    // Verbs: written once, calling the strategy of the resource.
    ("create", 4, include_str!("../create.rs")),
    ("update", 4, include_str!("../update.rs")),
    ("delete", 4, include_str!("../delete.rs")),
    // Above the verbs: they call the verbs.
    (
        "pod_subresources",
        5,
        include_str!("../pod_subresources.rs"),
    ),
    ("namespace_drain", 5, include_str!("../namespace_drain.rs")),
    ("crd_cleanup", 5, include_str!("../crd_cleanup.rs")),
    ("scale", 5, include_str!("../scale.rs")),
];

/// What an import names when it is no module of `local`: an item of the root.
const ROOT_NAME: &str = "local";

#[test]
fn every_module_of_local_has_a_layer() {
    let placed: Vec<&str> = LAYERS.iter().map(|(name, _, _)| *name).collect();
    for declared in declared_modules(ROOT) {
        assert!(
            placed.contains(&declared),
            "local::{declared} is missing from LAYERS"
        );
    }
}

#[test]
fn the_vocabulary_imports_no_other_local_module() {
    for (module, imports) in import_graph() {
        let layer = LAYERS.iter().find(|(n, _, _)| *n == module).map(|l| l.1);
        if layer == Some(0) {
            assert!(imports.is_empty(), "local::{module} imports {imports:?}");
        }
    }
}

#[test]
fn local_modules_form_no_import_cycle() {
    if let Some(cycle) = find_cycle(&import_graph()) {
        panic!(
            "the modules of local import each other: {}",
            cycle.join(" -> ")
        );
    }
}

#[test]
fn local_modules_import_only_their_own_layer_or_lower() {
    let layer = |name: &str| LAYERS.iter().find(|(n, _, _)| *n == name).map(|l| l.1);
    for (module, imports) in import_graph() {
        if module == ROOT_NAME {
            continue;
        }
        for import in imports {
            assert_ne!(
                import, ROOT_NAME,
                "local::{module} imports from the root, which imports it"
            );
            assert!(
                layer(import) <= layer(module),
                "local::{module} (layer {:?}) imports local::{import} (layer {:?}) above it",
                layer(module),
                layer(import)
            );
        }
    }
}

#[test]
fn imports_are_read_from_use_lines_groups_and_paths() {
    let source = "use super::{Core, update::Part, meta};\nuse super::create;\n\
                  // super::ignored\nfn f() { super::delete::x(); crate::local::crd::y(); }\n\
                  #[cfg(test)]\nmod tests {\n    use super::*;\n}\n";
    let modules = ["create", "update", "meta", "delete", "crd"];
    let found = imports(source, &modules);
    assert_eq!(
        found,
        ["crd", "create", "delete", ROOT_NAME, "meta", "update"]
    );
}

/// Module → the modules (or [`ROOT_NAME`]) it imports; the root imports every module it
/// declares.
fn import_graph() -> BTreeMap<&'static str, Vec<&'static str>> {
    let modules: Vec<&str> = LAYERS.iter().map(|(name, _, _)| *name).collect();
    let mut graph: BTreeMap<_, _> = LAYERS
        .iter()
        .map(|(name, _, source)| (*name, imports(source, &modules)))
        .collect();
    graph.insert(ROOT_NAME, declared_modules(ROOT));
    graph
}

/// The `mod name;` lines of the root, but the tests.
fn declared_modules(root: &str) -> Vec<&str> {
    root.lines()
        .filter_map(|line| line.trim().strip_prefix("mod "))
        .filter_map(|rest| rest.strip_suffix(';'))
        .filter(|name| *name != "tests")
        .collect()
}

/// The local modules `source` names through `super::` or `crate::local::` (sorted, once
/// each), with [`ROOT_NAME`] for any other name; comments and the inline tests are skipped.
fn imports<'a>(source: &str, modules: &[&'a str]) -> Vec<&'a str> {
    let code = source
        .split("#[cfg(test)]\nmod tests")
        .next()
        .unwrap_or_default();
    let mut found = Vec::new();
    for line in code.lines().filter(|l| !l.trim_start().starts_with("//")) {
        for prefix in ["super::", "crate::local::"] {
            for (at, _) in line.match_indices(prefix) {
                found.extend(named_after(&line[at + prefix.len()..]));
            }
        }
    }
    let mut resolved: Vec<&str> = found
        .into_iter()
        .map(|name| {
            modules
                .iter()
                .find(|m| **m == name)
                .copied()
                .unwrap_or(ROOT_NAME)
        })
        .collect();
    resolved.sort_unstable();
    resolved.dedup();
    resolved
}

/// The first path segments after `super::`: one name, or each entry of a `{...}` group.
fn named_after(rest: &str) -> Vec<String> {
    let Some(group) = rest.strip_prefix('{') else {
        return vec![first_segment(rest)];
    };
    let group = group.split('}').next().unwrap_or_default();
    group
        .split(',')
        .map(str::trim)
        .filter(|entry| !entry.is_empty())
        .map(first_segment)
        .collect()
}

fn first_segment(path: &str) -> String {
    path.chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect()
}

/// A cycle of the graph, as the path that closes it, if there is one.
fn find_cycle(graph: &BTreeMap<&'static str, Vec<&'static str>>) -> Option<Vec<&'static str>> {
    let mut done = Vec::new();
    for start in graph.keys() {
        let mut path = Vec::new();
        if let Some(cycle) = visit(graph, start, &mut path, &mut done) {
            return Some(cycle);
        }
    }
    None
}

fn visit(
    graph: &BTreeMap<&'static str, Vec<&'static str>>,
    node: &'static str,
    path: &mut Vec<&'static str>,
    done: &mut Vec<&'static str>,
) -> Option<Vec<&'static str>> {
    if let Some(at) = path.iter().position(|n| *n == node) {
        let mut cycle = path[at..].to_vec();
        cycle.push(node);
        return Some(cycle);
    }
    if done.contains(&node) {
        return None;
    }
    path.push(node);
    for next in graph.get(node).into_iter().flatten() {
        if let Some(cycle) = visit(graph, next, path, done) {
            return Some(cycle);
        }
    }
    path.pop();
    done.push(node);
    None
}
