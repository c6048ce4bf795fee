//! JSON bodies in the field order of Kubernetes' Go types, as kube-apiserver writes them
//! (`kind`, `apiVersion`, `metadata`, `spec`, `status`, and each nested struct in its
//! declaration order); map keys stay sorted, as Go writes maps.
//!
//! serde_json's maps are sorted, so the stored bytes and every `Value` come out in
//! alphabetical order. This module rewrites such bytes: it scans the JSON (no tree is built),
//! and writes each object's members in the order of its type ([`table`], generated from
//! k8s-pb's messages, whose fields go-to-protobuf declares in Go order). A member the type
//! does not name is looked for one level down (Go's inlined structs, such as a `Volume`'s
//! `VolumeSource`), else it keeps its place after the known ones. An object of a kind with no
//! Go type here (a custom resource) gets `kind`, `apiVersion` and `metadata` first and the
//! rest as stored.

#[rustfmt::skip]
mod table;
mod walk;

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::OnceLock;

use serde_json::Value;

use walk::{Check, Sink, Walk, Writer};

/// One Go type: its name (the k8s-pb module path) and its fields in declaration order.
pub(super) struct Ty {
    #[allow(dead_code)]
    pub(super) name: &'static str,
    pub(super) fields: &'static [F],
}

/// A field: its normalized name, the type of its value ([`NONE`] when not a struct; each
/// element of a list, each value of a map), and whether it is a map.
pub(super) struct F(pub(super) &'static str, pub(super) u16, pub(super) bool);

/// No type.
pub(super) const NONE: u16 = u16::MAX;

/// Kinds of `meta.k8s.io/v1` (also served under every group version) and their types.
const META_KINDS: &[(&str, &str)] = &[
    ("Status", "apimachinery::pkg::apis::meta::v1::Status"),
    ("Table", "apimachinery::pkg::apis::meta::v1::Table"),
    (
        "PartialObjectMetadata",
        "apimachinery::pkg::apis::meta::v1::PartialObjectMetadata",
    ),
    (
        "PartialObjectMetadataList",
        "apimachinery::pkg::apis::meta::v1::PartialObjectMetadataList",
    ),
    (
        "APIResourceList",
        "apimachinery::pkg::apis::meta::v1::APIResourceList",
    ),
    (
        "APIGroupList",
        "apimachinery::pkg::apis::meta::v1::APIGroupList",
    ),
    ("APIGroup", "apimachinery::pkg::apis::meta::v1::APIGroup"),
    (
        "APIVersions",
        "apimachinery::pkg::apis::meta::v1::APIVersions",
    ),
    (
        "DeleteOptions",
        "apimachinery::pkg::apis::meta::v1::DeleteOptions",
    ),
];

const OBJECT_META: &str = "apimachinery::pkg::apis::meta::v1::ObjectMeta";
const LIST_META: &str = "apimachinery::pkg::apis::meta::v1::ListMeta";

/// The written form of objects served as one kind and version: that `kind` and
/// `apiVersion` first (the stored ones dropped), then the kind's Go order. Made once per
/// list, it renders each item.
pub(crate) struct Served {
    /// The kind's Go type; none for a custom resource.
    ty: Option<u16>,
    /// A list kind with no Go type: `metadata` is a `ListMeta`, `items` are objects.
    is_list: bool,
    /// `{"kind":..,"apiVersion":..` as written.
    prefix: Vec<u8>,
}

/// Where a member goes among its struct's: its rank and how its value is written.
#[derive(Clone, Copy)]
pub(super) struct Place {
    rank: (u16, u16),
    how: How,
}

/// How a member's value is written.
#[derive(Clone, Copy)]
pub(super) enum How {
    /// As it is.
    Raw,
    /// A struct of this type, a list of them, or (`true`) a map of them.
    Typed(u16, bool),
    /// A list's items, each an object of its own kind.
    Items,
}

/// A `Value` as compact JSON in Go order (its type found from its own `kind` and
/// `apiVersion`).
pub(crate) fn value(value: &Value) -> Vec<u8> {
    // A `Value` always serializes.
    let raw = serde_json::to_vec(value).expect("a JSON value serializes");
    let mut w = Writer::new(raw.len());
    if top(&raw, None, &mut w).is_some() {
        w.finish()
    } else {
        w.finish();
        raw
    }
}

/// The object in `raw` in Go order, with `kind` and `apiVersion` set to the given ones (the
/// stored ones are dropped); `None` when `raw` is not a JSON object.
#[cfg(test)]
pub(crate) fn object(raw: &[u8], kind: &str, api_version: &str) -> Option<Vec<u8>> {
    Served::new(kind, api_version).object(raw)
}

// === impl Served ===

impl Served {
    pub(crate) fn new(kind: &str, api_version: &str) -> Self {
        let ty = type_of(api_version, kind);
        let mut prefix = Vec::with_capacity(kind.len() + api_version.len() + 24);
        prefix.extend_from_slice(b"{\"kind\":");
        write_string(kind, &mut prefix);
        prefix.extend_from_slice(b",\"apiVersion\":");
        write_string(api_version, &mut prefix);
        Served {
            ty,
            is_list: ty.is_none() && kind.strip_suffix("List").is_some(),
            prefix,
        }
    }

    /// True when `raw` is already exactly what [`Served::object`] writes (objects the
    /// embedded control plane stored in Go order), so it can be served as it is.
    pub(crate) fn is_written(&self, raw: &[u8]) -> bool {
        let Some(rest) = raw.strip_prefix(self.prefix.as_slice()) else {
            return false;
        };
        let mut check = Check;
        let mut w = Walk::new(rest, &mut check);
        self.rest(&mut w, true).and_then(|_| w.end()).is_some()
    }

    /// The object in `raw` in this form; `None` when `raw` is not a JSON object.
    pub(crate) fn object(&self, raw: &[u8]) -> Option<Vec<u8>> {
        let mut out = Writer::new(raw.len() + self.prefix.len() + 2);
        let written = self.object_into(raw, &mut out);
        let out = out.finish();
        written.map(|_| out)
    }

    fn object_into(&self, raw: &[u8], out: &mut Writer) -> Option<()> {
        out.put(&self.prefix);
        let mut w = Walk::new(raw, out);
        w.ws()?;
        w.eat(b'{')?;
        self.rest(&mut w, false)?;
        w.end()?;
        out.put(b"}");
        Some(())
    }

    /// The members after the type meta, through the closing brace.
    fn rest<S: Sink>(&self, w: &mut Walk<'_, '_, S>, after_first: bool) -> Option<()> {
        rest(w, self.ty, self.is_list, after_first)
    }
}

// === tables ===

fn types() -> &'static [Ty] {
    table::TYPES
}

fn type_named(name: &str) -> Option<u16> {
    static BY_NAME: OnceLock<HashMap<&'static str, u16>> = OnceLock::new();
    BY_NAME
        .get_or_init(|| {
            types()
                .iter()
                .enumerate()
                .map(|(i, t)| (t.name, i as u16))
                .collect()
        })
        .get(name)
        .copied()
}

/// The Go type of a kind served under `api_version`.
fn type_of(api_version: &str, kind: &str) -> Option<u16> {
    static KINDS: OnceLock<HashMap<(&'static str, &'static str), u16>> = OnceLock::new();
    let kinds = KINDS.get_or_init(|| {
        table::KINDS
            .iter()
            .map(|(a, k, t)| ((*a, *k), *t))
            .collect()
    });
    if let Some(t) = kinds.get(&(api_version, kind)) {
        return Some(*t);
    }
    META_KINDS
        .iter()
        .find(|(k, _)| *k == kind)
        .and_then(|(_, name)| type_named(name))
}

/// Where each normalized member name goes in a type.
type Index = HashMap<&'static str, Place, BuildHasherDefault<Fnv>>;

/// Each type's members by normalized name: its own fields, then `kind` and `apiVersion`
/// (TypeMeta, inlined first in the Go types that carry it), then the fields of each inlined
/// struct (a field of one takes that struct's place; the first such struct wins).
fn places(ty: u16) -> Option<&'static (Index, bool)> {
    static INDEX: OnceLock<Vec<(Index, bool)>> = OnceLock::new();
    INDEX.get_or_init(build_places).get(usize::from(ty))
}

/// Each type's index, and whether its own fields' normalized names are all different.
fn build_places() -> Vec<(Index, bool)> {
    let own: Vec<HashMap<&'static str, (u16, &'static F)>> = types()
        .iter()
        .map(|t| {
            let fields = t.fields.iter().enumerate();
            fields.map(|(i, f)| (f.0, (i as u16, f))).collect()
        })
        .collect();
    let field = field_place;
    let raw = |rank| Place {
        rank,
        how: How::Raw,
    };
    own.iter()
        .zip(types())
        .map(|(fields, t)| {
            let mut index: Index = fields
                .iter()
                .map(|(name, (pos, f))| (*name, field((*pos, 0), f)))
                .collect();
            index.entry("kind").or_insert(raw((0, 0)));
            index.entry("apiversion").or_insert(raw((0, 1)));
            for (pos, f) in t.fields.iter().enumerate() {
                let Some(inner) = own.get(usize::from(f.1)).filter(|_| !f.2) else {
                    continue;
                };
                for (name, (sub, g)) in inner {
                    index
                        .entry(name)
                        .or_insert_with(|| field((pos as u16, sub + 1), g));
                }
            }
            let unique = fields.len() == t.fields.len();
            (index, unique)
        })
        .collect()
}

/// Places the members of one struct: they mostly come in its type's order (objects stored
/// in Go order), so a member is first looked for among the fields after the last one found,
/// and only then in the index.
pub(super) struct Placer {
    index: &'static Index,
    fields: &'static [F],
    /// The type's own fields have different names, so one found by name is the one the
    /// index holds.
    unique: bool,
    next: usize,
}

impl Placer {
    pub(super) fn new(ty: u16) -> Option<Self> {
        let (index, unique) = places(ty)?;
        Some(Placer {
            index,
            fields: types()[usize::from(ty)].fields,
            unique: *unique,
            next: 0,
        })
    }

    pub(super) fn place(&mut self, name: &str) -> Place {
        let mut buf = [0u8; 64];
        let Some(norm) = normalize(name, &mut buf) else {
            return UNKNOWN;
        };
        let ahead = self.fields.get(self.next..).unwrap_or_default();
        if let Some(at) = ahead
            .iter()
            .position(|f| f.0 == norm)
            .filter(|_| self.unique)
        {
            let pos = self.next + at;
            self.next = pos + 1;
            return field_place((pos as u16, 0), &self.fields[pos]);
        }
        self.index.get(norm).copied().unwrap_or(UNKNOWN)
    }
}

/// A member no field names: after the known ones, as written.
const UNKNOWN: Place = Place {
    rank: (NONE, 0),
    how: How::Raw,
};

fn field_place(rank: (u16, u16), f: &F) -> Place {
    Place {
        rank,
        how: if f.1 == NONE {
            How::Raw
        } else {
            How::Typed(f.1, f.2)
        },
    }
}

/// Lowercase letters and digits of `name` (how the table names fields).
fn normalize<'b>(name: &str, buf: &'b mut [u8; 64]) -> Option<&'b str> {
    let mut n = 0;
    for b in name.bytes().filter(u8::is_ascii_alphanumeric) {
        *buf.get_mut(n)? = b.to_ascii_lowercase();
        n += 1;
    }
    std::str::from_utf8(&buf[..n]).ok()
}

/// FNV-1a: the index's names are a few bytes long, where SipHash's setup dominates.
struct Fnv(u64);

impl Default for Fnv {
    fn default() -> Self {
        Fnv(0xcbf2_9ce4_8422_2325)
    }
}

impl Hasher for Fnv {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0 ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3);
        }
    }
}

// === writing ===

/// A top-level object (or list item): `kind` and `apiVersion` first (the given ones, else
/// its own), then its type's order; a list kind's `metadata` and `items` (each again a
/// top-level object).
fn top<S: Sink>(raw: &[u8], type_meta: Option<(&str, &str)>, out: &mut S) -> Option<()> {
    let (kind, api_version) = match type_meta {
        Some((k, a)) => (Some(k.to_owned()), Some(a.to_owned())),
        None => {
            let (k, a) = walk::type_meta_of(raw);
            (k.and_then(string_of), a.and_then(string_of))
        }
    };
    let ty = match (&kind, &api_version) {
        (Some(k), Some(a)) => type_of(a, k),
        _ => None,
    };
    let is_list = ty.is_none() && kind.as_deref().is_some_and(|k| k.ends_with("List"));
    let mut head = Vec::new();
    head.push(b'{');
    if let Some(k) = &kind {
        head.extend_from_slice(b"\"kind\":");
        write_string(k, &mut head);
    }
    if let Some(a) = &api_version {
        if kind.is_some() {
            head.push(b',');
        }
        head.extend_from_slice(b"\"apiVersion\":");
        write_string(a, &mut head);
    }
    out.put(&head);
    let lead = head.len() > 1;
    let mut w = Walk::new(raw, out);
    w.ws()?;
    w.eat(b'{')?;
    rest_after(&mut w, ty, is_list, lead, false)?;
    w.end()?;
    out.put(b"}");
    Some(())
}

/// A top-level object's members after its type meta (written first), through its `}`.
fn rest<S: Sink>(
    w: &mut Walk<'_, '_, S>,
    ty: Option<u16>,
    is_list: bool,
    after_first: bool,
) -> Option<()> {
    rest_after(w, ty, is_list, true, after_first)
}

fn rest_after<S: Sink>(
    w: &mut Walk<'_, '_, S>,
    ty: Option<u16>,
    is_list: bool,
    lead: bool,
    after_first: bool,
) -> Option<()> {
    match ty {
        Some(ty) => {
            let mut placer = Placer::new(ty)?;
            w.members(lead, after_first, true, &mut |name| placer.place(name))
        }
        None => {
            let meta = type_named(if is_list { LIST_META } else { OBJECT_META });
            // Stable: metadata first, the rest as stored.
            let untyped = |name: &str| match name {
                "metadata" => Place {
                    rank: (0, 0),
                    how: meta.map_or(How::Raw, |m| How::Typed(m, false)),
                },
                "items" if is_list => Place {
                    rank: (1, 0),
                    how: How::Items,
                },
                _ => Place {
                    rank: (1, 0),
                    how: How::Raw,
                },
            };
            w.members(lead, after_first, true, &mut { untyped })
        }
    }
}

fn write_string(s: &str, out: &mut Vec<u8>) {
    // A `str` always serializes.
    serde_json::to_writer(&mut *out, s).expect("a string serializes");
}

fn string_of(raw: &[u8]) -> Option<String> {
    serde_json::from_slice(raw).ok()
}

#[cfg(test)]
mod tests;
