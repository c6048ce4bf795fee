//! Arbitrary patches applied to arbitrary documents: the first byte picks the patch type (JSON
//! patch, merge patch, strategic merge patch of a Pod), the rest is the document, a newline,
//! and the patch. Every patch must apply or give an error, never panic, and nothing it makes
//! may be larger than the patch limit (copy amplification included).
#![no_main]

use apimachinery::patch::{self, MAX_PATCHED_BYTES, PatchType};
use libfuzzer_sys::fuzz_target;
use serde_json::{Value, json};

fuzz_target!(|data: &[u8]| {
    let Some((&selector, rest)) = data.split_first() else {
        return;
    };
    let kind = match selector % 3 {
        0 => PatchType::Json,
        1 => PatchType::Merge,
        _ => PatchType::StrategicMerge,
    };
    let (doc, body) = match rest.iter().position(|b| *b == b'\n') {
        Some(at) => (&rest[..at], &rest[at + 1..]),
        None => (&b""[..], rest),
    };
    let original = match serde_json::from_slice::<Value>(doc) {
        Ok(value) if value.is_object() => value,
        _ => json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "default", "labels": {"a": "b"}},
            "spec": {"containers": [{"name": "c", "image": "i", "args": ["x"]}]},
        }),
    };
    let pods = apimachinery::catalog::builtins()
        .into_iter()
        .find(|r| r.group.is_empty() && r.plural == "pods")
        .expect("pods are built in");
    if let Ok(patched) = patch::apply(&pods, kind, &original, body) {
        assert!(patched.is_object());
        let size = patch::encoded_len(&patched);
        assert!(size <= MAX_PATCHED_BYTES, "a patch made {size} bytes");
    }
});
