//! The inventory digest of what a store holds: the link protocol's digest ([`wire::digest`]),
//! one implementation for the edge store and the cloud, computed here over [`ObjKey`]s.
//!
//! An [`ObjKey`] enters the digest as [`canonical_key`], `resource/namespace/name` with the
//! fields as stored: the plural resource (`pods`, `configmaps`, `nodes`, `widgets.example.com`
//! for a custom resource) and an empty namespace for cluster-scoped objects. Pod `default/nginx`
//! at resourceVersion `42` is the entry `pods/default/nginx\042`, node `edge-1` at `7` is
//! `nodes//edge-1\07`. See [`wire::digest`](mod@wire::digest) for the hash and the sum.

pub use wire::Digest;

use crate::object::ObjKey;

/// The digest of these store entries, in any order.
pub fn of<'a>(entries: impl IntoIterator<Item = (&'a ObjKey, &'a str)>) -> Digest {
    wire::digest(
        entries
            .into_iter()
            .map(|(key, rv)| (canonical_key(key), rv)),
    )
}

/// `resource/namespace/name`: the key the digest and the cloud's inventory use for `key`.
pub fn canonical_key(key: &ObjKey) -> String {
    wire::object_key(&key.resource, Some(&key.namespace), &key.name)
}

#[cfg(test)]
mod tests {
    use xxhash_rust::xxh3::xxh3_128;

    use super::*;

    /// What the cloud computes (edgecontroller): wire's digest over `wire::object_key` strings.
    fn as_the_cloud_computes(entries: &[(&str, Option<&str>, &str, &str)]) -> Digest {
        wire::digest(
            entries
                .iter()
                .map(|(resource, ns, name, rv)| (wire::object_key(resource, *ns, name), *rv)),
        )
    }

    #[test]
    fn the_store_and_the_cloud_give_the_same_set_the_same_digest() {
        let store_side = of([
            (&ObjKey::new("pods", "default", "nginx"), "42"),
            (&ObjKey::new("nodes", "", "edge-1"), "7"),
            (&ObjKey::new("widgets.example.com", "team", "w"), "9"),
        ]);
        let cloud_side = as_the_cloud_computes(&[
            ("widgets.example.com", Some("team"), "w", "9"),
            ("nodes", None, "edge-1", "7"),
            ("pods", Some("default"), "nginx", "42"),
        ]);
        assert_eq!(store_side, cloud_side);
        let pinned = xxh3_128(b"pods/default/nginx\x0042")
            .wrapping_add(xxh3_128(b"nodes//edge-1\x007"))
            .wrapping_add(xxh3_128(b"widgets.example.com/team/w\x009"));
        assert_eq!(store_side.as_u128(), pinned);
    }

    #[test]
    fn the_empty_store_digests_to_zero() {
        assert_eq!(of([]), Digest::EMPTY);
    }

    #[test]
    fn a_different_version_changes_the_digest() {
        let key = ObjKey::new("pods", "ns", "a");
        assert_ne!(of([(&key, "1")]), of([(&key, "2")]));
    }
}
