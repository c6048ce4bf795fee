//! An order-independent digest over `(key, resourceVersion)` pairs, so the cloud and an edge
//! node can tell in one comparison whether they hold the same objects at the same versions.
//!
//! # Canonical encoding
//!
//! The same definition as the link protocol's digest (`wire::digest`), so either side may
//! compute it from its own data:
//!
//! ```text
//! key            = resource "/" namespace "/" name     (empty namespace for cluster-scoped)
//! entry(key, rv) = xxh3_128(key_bytes ++ [0x00] ++ rv_bytes)      (XXH3 128-bit, seed 0)
//! digest(set)    = sum of entry(key, rv) over the set, wrapping u128 addition
//! ```
//!
//! e.g. `pod/default/nginx\042` for pod `default/nginx` at resourceVersion `42`, and
//! `node//edge-1\07` for cluster-scoped node `edge-1` at `7`. The parts are the [`ObjKey`]
//! fields as stored (the store does not rename resources). The empty set digests to 0.
//! Addition keeps the digest independent of order and lets [`Digest::remove`] undo
//! [`Digest::add`], so a holder can keep it up to date per write.

use std::fmt;

use xxhash_rust::xxh3::xxh3_128;

use crate::object::ObjKey;

/// The digest of a set of `(key, resourceVersion)` entries; see the module docs.
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Digest(u128);

// === impl Digest ===

impl Digest {
    /// The digest of the empty set.
    pub const EMPTY: Digest = Digest(0);

    /// The digest of these entries, in any order.
    pub fn of<'a>(entries: impl IntoIterator<Item = (&'a ObjKey, &'a str)>) -> Self {
        let mut digest = Self::EMPTY;
        for (key, rv) in entries {
            digest.add(key, rv);
        }
        digest
    }

    pub fn add(&mut self, key: &ObjKey, rv: &str) {
        self.0 = self.0.wrapping_add(entry_hash(&canonical_key(key), rv));
    }

    /// The inverse of [`Digest::add`].
    pub fn remove(&mut self, key: &ObjKey, rv: &str) {
        self.0 = self.0.wrapping_sub(entry_hash(&canonical_key(key), rv));
    }

    pub const fn from_u128(v: u128) -> Self {
        Digest(v)
    }

    pub const fn as_u128(self) -> u128 {
        self.0
    }
}

impl fmt::Debug for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Digest({:032x})", self.0)
    }
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:032x}", self.0)
    }
}

/// The digest of entries whose keys are already in canonical `resource/namespace/name` form
/// (what a peer that does not use [`ObjKey`] holds).
pub fn of_canonical<K: AsRef<str>, V: AsRef<str>>(
    entries: impl IntoIterator<Item = (K, V)>,
) -> Digest {
    let sum = entries.into_iter().fold(0u128, |sum, (key, rv)| {
        sum.wrapping_add(entry_hash(key.as_ref(), rv.as_ref()))
    });
    Digest(sum)
}

/// `resource/namespace/name`, the key part of the canonical encoding.
pub fn canonical_key(key: &ObjKey) -> String {
    format!("{}/{}/{}", key.resource, key.namespace, key.name)
}

/// The hash of one entry: `xxh3_128(key ++ [0] ++ rv)` with `key` from [`canonical_key`].
pub fn entry_hash(key: &str, rv: &str) -> u128 {
    let mut buf = Vec::with_capacity(key.len() + 1 + rv.len());
    buf.extend_from_slice(key.as_bytes());
    buf.push(0);
    buf.extend_from_slice(rv.as_bytes());
    xxh3_128(&buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str) -> ObjKey {
        ObjKey::new("pod", "ns", name)
    }

    #[test]
    fn entry_is_xxh3_128_of_the_slash_key_nul_and_version() {
        let mut d = Digest::EMPTY;
        d.add(&ObjKey::new("pod", "default", "nginx"), "42");
        assert_eq!(d.as_u128(), xxh3_128(b"pod/default/nginx\x0042"));
        let mut d = Digest::EMPTY;
        d.add(&ObjKey::new("node", "", "edge-1"), "7");
        assert_eq!(d.as_u128(), xxh3_128(b"node//edge-1\x007"));
    }

    #[test]
    fn digest_does_not_depend_on_order() {
        let (a, b) = (key("a"), key("b"));
        let one = Digest::of([(&a, "1"), (&b, "2")]);
        let two = Digest::of([(&b, "2"), (&a, "1")]);
        assert_eq!(one, two);
        assert_ne!(one, Digest::EMPTY);
    }

    #[test]
    fn a_different_version_changes_the_digest() {
        let a = key("a");
        assert_ne!(Digest::of([(&a, "1")]), Digest::of([(&a, "2")]));
    }

    #[test]
    fn canonical_string_keys_give_the_same_digest() {
        let (a, b) = (key("a"), key("b"));
        let from_keys = Digest::of([(&a, "1"), (&b, "2")]);
        assert_eq!(
            of_canonical([("pod/ns/b", "2"), ("pod/ns/a", "1")]),
            from_keys
        );
    }

    #[test]
    fn remove_undoes_add() {
        let (a, b) = (key("a"), key("b"));
        let mut d = Digest::of([(&a, "1"), (&b, "2")]);
        d.remove(&b, "2");
        assert_eq!(d, Digest::of([(&a, "1")]));
        d.remove(&a, "1");
        assert_eq!(d, Digest::EMPTY);
    }
}
