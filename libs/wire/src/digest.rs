//! An order-independent 128-bit digest over the `(key, resourceVersion)` pairs a node holds.
//!
//! # Canonical definition
//!
//! The one implementation: the edge store (`objstore::digest`) and the cloud both compute it
//! with this code, so equal sets give equal digests:
//!
//! ```text
//! entry(key, rv) = xxh3_128(key_bytes ++ [0x00] ++ rv_bytes)      (XXH3 128-bit, seed 0)
//! digest(set)    = sum of entry(key, rv) over the set, wrapping u128 addition
//! key            = "<resource>/<namespace>/<name>"                 (see [`ObjectRef::key`](crate::ObjectRef::key))
//! ```
//!
//! `key` uses the plural resource as the store keeps it (`pods`, `configmaps`, `nodes`, and
//! `widgets.example.com` for a custom resource), and cluster-scoped objects have an empty
//! namespace segment: `pods/default/nginx`, `nodes//edge-1`. The empty set digests to 0. On the wire the digest is 16 bytes, big-endian.
//!
//! Addition (rather than XOR) keeps two copies of the same entry from cancelling out, and makes
//! [`Digest::remove`] the exact inverse of [`Digest::add`], so a store can keep its digest up to
//! date per write instead of rescanning.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use xxhash_rust::xxh3::xxh3_128;

/// The digest of a set of `(key, resourceVersion)` pairs; see the module docs for the definition.
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Digest(u128);

/// The digest of one set given as pairs, in any order.
pub fn digest<K, V>(entries: impl IntoIterator<Item = (K, V)>) -> Digest
where
    K: AsRef<str>,
    V: AsRef<str>,
{
    let mut d = Digest::EMPTY;
    for (key, rv) in entries {
        d.add(key.as_ref(), rv.as_ref());
    }
    d
}

/// The hash of one entry: `xxh3_128(key ++ [0] ++ rv)`.
pub fn entry_hash(key: &str, resource_version: &str) -> u128 {
    let mut buf = Vec::with_capacity(key.len() + 1 + resource_version.len());
    buf.extend_from_slice(key.as_bytes());
    buf.push(0);
    buf.extend_from_slice(resource_version.as_bytes());
    xxh3_128(&buf)
}

// === impl Digest ===

impl Digest {
    /// The digest of the empty set.
    pub const EMPTY: Digest = Digest(0);

    /// Adds one entry to the set.
    pub fn add(&mut self, key: &str, resource_version: &str) {
        self.0 = self.0.wrapping_add(entry_hash(key, resource_version));
    }

    /// Removes one entry from the set; the inverse of [`Digest::add`].
    pub fn remove(&mut self, key: &str, resource_version: &str) {
        self.0 = self.0.wrapping_sub(entry_hash(key, resource_version));
    }

    /// Replaces the entry `key@old` with `key@new` (an update in a store).
    pub fn replace(&mut self, key: &str, old: &str, new: &str) {
        self.remove(key, old);
        self.add(key, new);
    }

    pub const fn from_u128(v: u128) -> Self {
        Digest(v)
    }

    pub const fn as_u128(self) -> u128 {
        self.0
    }

    /// The wire form: 16 bytes, big-endian.
    pub const fn to_bytes(self) -> [u8; 16] {
        self.0.to_be_bytes()
    }

    pub const fn from_bytes(bytes: [u8; 16]) -> Self {
        Digest(u128::from_be_bytes(bytes))
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

impl Serialize for Digest {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(&self.to_bytes())
    }
}

impl<'de> Deserialize<'de> for Digest {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = Digest;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("16 bytes of digest")
            }
            fn visit_bytes<E: serde::de::Error>(self, v: &[u8]) -> Result<Digest, E> {
                let raw: [u8; 16] = v
                    .try_into()
                    .map_err(|_| E::invalid_length(v.len(), &self))?;
                Ok(Digest::from_bytes(raw))
            }
        }
        d.deserialize_bytes(V)
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn empty_set_digests_to_zero() {
        assert_eq!(digest(Vec::<(&str, &str)>::new()), Digest::EMPTY);
        assert_eq!(Digest::EMPTY.as_u128(), 0);
    }

    #[test]
    fn entry_hash_is_xxh3_of_key_nul_rv() {
        assert_eq!(
            entry_hash("pods/default/nginx", "42"),
            xxh3_128(b"pods/default/nginx\x0042")
        );
    }

    #[test]
    fn separator_keeps_key_and_rv_apart() {
        assert_ne!(entry_hash("ab", "c"), entry_hash("a", "bc"));
    }

    #[test]
    fn duplicate_entries_do_not_cancel_out() {
        let once = digest([("k", "1")]);
        let twice = digest([("k", "1"), ("k", "1")]);
        assert_ne!(twice, Digest::EMPTY);
        assert_ne!(twice, once);
    }

    #[test]
    fn replace_equals_digest_of_updated_set() {
        let mut d = digest([("a", "1"), ("b", "1")]);
        d.replace("b", "1", "2");
        assert_eq!(d, digest([("a", "1"), ("b", "2")]));
    }

    #[test]
    fn wire_form_is_sixteen_big_endian_bytes() {
        let d = Digest::from_u128(0x0102_0304_0506_0708_090a_0b0c_0d0e_0f10);
        assert_eq!(d.to_bytes()[0], 1);
        assert_eq!(d.to_bytes()[15], 0x10);
        let encoded = rmp_serde::to_vec(&d).unwrap();
        assert_eq!(encoded.len(), 2 + 16, "bin8 header plus 16 bytes");
        assert_eq!(rmp_serde::from_slice::<Digest>(&encoded).unwrap(), d);
    }

    proptest! {
        #[test]
        fn digest_ignores_order(mut entries in proptest::collection::vec(("[a-z/]{0,12}", "[0-9]{0,6}"), 0..20)) {
            let forward = digest(entries.iter().map(|(k, v)| (k.as_str(), v.as_str())));
            entries.reverse();
            let backward = digest(entries.iter().map(|(k, v)| (k.as_str(), v.as_str())));
            prop_assert_eq!(forward, backward);
        }

        #[test]
        fn remove_undoes_add(entries in proptest::collection::vec(("[a-z/]{0,12}", "[0-9]{0,6}"), 0..20), key in "[a-z]{1,8}", rv in "[0-9]{1,4}") {
            let base = digest(entries.iter().map(|(k, v)| (k.as_str(), v.as_str())));
            let mut d = base;
            d.add(&key, &rv);
            d.remove(&key, &rv);
            prop_assert_eq!(d, base);
        }
    }
}
