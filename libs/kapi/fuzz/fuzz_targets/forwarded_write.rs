//! Arbitrary bytes as the content of a write a node forwards over the link: the cloud parses
//! it into a `NodeRequest` or refuses it, never panics, and whatever it takes becomes a path
//! whose segments are exactly the checked fields, none of which can add a segment, climb
//! (`..`) or start a query.
#![no_main]

use std::sync::OnceLock;

use apimachinery::ResourceInfo;
use apimachinery::forward::{KnownResource, NodeRequest};
use libfuzzer_sys::fuzz_target;
use percent_encoding::percent_decode_str;

fn builtins() -> &'static [ResourceInfo] {
    static BUILTINS: OnceLock<Vec<ResourceInfo>> = OnceLock::new();
    BUILTINS.get_or_init(apimachinery::catalog::builtins)
}

fn known(group: &str, version: &str, plural: &str) -> Option<KnownResource> {
    let found = builtins().iter().find(|i| {
        (i.group.as_str(), i.version.as_str(), i.plural.as_str()) == (group, version, plural)
    });
    found.map(KnownResource::of)
}

fuzz_target!(|data: &[u8]| {
    let Ok(write) = serde_json::from_slice::<apimachinery::ForwardedWrite>(data) else {
        return;
    };
    let Ok(req) = NodeRequest::parse(write, known) else {
        return;
    };
    let path = req.path();
    let (path, query) = match path.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (path.as_str(), None),
    };
    assert!(
        query.is_none_or(|q| q == "dryRun=All" && req.dry_run),
        "{path:?} {query:?}"
    );
    assert!(!path.contains('#'), "{path:?}");
    let segments: Vec<&str> = path.split('/').skip(1).collect();
    assert!(
        segments
            .iter()
            .all(|s| !s.is_empty() && *s != "." && *s != ".."),
        "{path:?}"
    );
    let mut expected = match req.group.as_str() {
        "" => vec!["api".to_owned(), req.version.clone()],
        g => vec!["apis".to_owned(), g.to_owned(), req.version.clone()],
    };
    if let Some(ns) = &req.namespace {
        expected.extend(["namespaces".to_owned(), ns.clone()]);
    }
    expected.push(req.resource.clone());
    expected.extend(req.name.clone());
    expected.extend(req.subresource.map(|s| s.as_str().to_owned()));
    // Each segment as the API server reads it.
    let decoded: Vec<String> = segments
        .iter()
        .map(|s| percent_decode_str(s).decode_utf8_lossy().into_owned())
        .collect();
    assert_eq!(decoded, expected, "{path:?}");
});
