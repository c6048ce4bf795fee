//! The first version of the Go order writer (a scan per level, a sort per struct), kept as
//! the reference the one-pass writer must match byte for byte.

use std::collections::HashMap;
use std::sync::OnceLock;

use serde_json::Value;

use super::super::{
    F, LIST_META, NONE, OBJECT_META, string_of, type_named, type_of, types, write_string,
};

/// A `Value` as compact JSON in Go order (its type found from its own `kind` and
/// `apiVersion`).
pub(super) fn value(value: &Value) -> Vec<u8> {
    // A `Value` always serializes.
    let raw = serde_json::to_vec(value).expect("a JSON value serializes");
    let mut out = Vec::with_capacity(raw.len());
    if top(&raw, None, &mut out).is_some() {
        out
    } else {
        raw
    }
}

/// The object in `raw` in Go order, with `kind` and `apiVersion` set to the given ones (the
/// stored ones are dropped); `None` when `raw` is not a JSON object.
pub(super) fn object(raw: &[u8], kind: &str, api_version: &str) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(raw.len() + kind.len() + api_version.len() + 32);
    top(raw, Some((kind, api_version)), &mut out)?;
    Some(out)
}

/// Each type's fields by normalized name: (position, field).
fn field_index(ty: u16) -> Option<&'static HashMap<&'static str, (u16, &'static F)>> {
    static INDEX: OnceLock<Vec<HashMap<&'static str, (u16, &'static F)>>> = OnceLock::new();
    INDEX
        .get_or_init(|| {
            types()
                .iter()
                .map(|t| {
                    t.fields
                        .iter()
                        .enumerate()
                        .map(|(i, f)| (f.0, (i as u16, f)))
                        .collect()
                })
                .collect()
        })
        .get(usize::from(ty))
}

// === writing ===

/// A top-level object (or list item): `kind` and `apiVersion` first, then its type's order;
/// a list kind's `metadata` and `items` (each again a top-level object).
fn top(raw: &[u8], type_meta: Option<(&str, &str)>, out: &mut Vec<u8>) -> Option<()> {
    let members = members(raw)?;
    let stored = |name: &str| {
        members
            .iter()
            .find(|m| m.name == name)
            .and_then(|m| string_of(m.value))
    };
    let (kind, api_version) = match type_meta {
        Some((k, a)) => (Some(k.to_owned()), Some(a.to_owned())),
        None => (stored("kind"), stored("apiVersion")),
    };
    let ty = match (&kind, &api_version) {
        (Some(k), Some(a)) => type_of(a, k),
        _ => None,
    };
    let item_kind = kind.as_deref().and_then(|k| k.strip_suffix("List"));
    // A list kind has no Go type in the table: ListMeta and each item as its own kind.
    let is_list = ty.is_none() && item_kind.is_some();
    out.push(b'{');
    let mut first = true;
    if let Some(k) = &kind {
        first = false;
        out.extend_from_slice(b"\"kind\":");
        write_string(k, out);
    }
    if let Some(a) = &api_version {
        if !first {
            out.push(b',');
        }
        first = false;
        out.extend_from_slice(b"\"apiVersion\":");
        write_string(a, out);
    }
    let rest = members
        .iter()
        .filter(|m| m.name != "kind" && m.name != "apiVersion");
    match ty {
        Some(ty) => fields(rest.collect(), ty, first, out)?,
        None => {
            let meta = if is_list { LIST_META } else { OBJECT_META };
            let meta = type_named(meta).unwrap_or(NONE);
            let mut rest: Vec<&Member<'_>> = rest.collect();
            // Stable: metadata first, the rest as stored.
            rest.sort_by_key(|m| m.name != "metadata");
            for m in rest {
                if !first {
                    out.push(b',');
                }
                first = false;
                out.extend_from_slice(m.key);
                out.push(b':');
                match m.name {
                    "metadata" => value_of(m.value, meta, false, out)?,
                    "items" if is_list => items(m.value, out)?,
                    _ => out.extend_from_slice(m.value),
                }
            }
        }
    }
    out.push(b'}');
    Some(())
}

/// A list's items, each a top-level object.
fn items(raw: &[u8], out: &mut Vec<u8>) -> Option<()> {
    out.push(b'[');
    for (i, item) in elements(raw)?.into_iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        if item.first() == Some(&b'{') {
            top(item, None, out)?;
        } else {
            out.extend_from_slice(item);
        }
    }
    out.push(b']');
    Some(())
}

/// The members of a struct of type `ty` in its order (`first`: nothing written before).
fn fields(members: Vec<&Member<'_>>, ty: u16, mut first: bool, out: &mut Vec<u8>) -> Option<()> {
    let index = field_index(ty)?;
    let mut placed: Vec<((u16, u16), u16, bool, &Member<'_>)> = members
        .into_iter()
        .map(|m| {
            let (rank, vty, map) = place(ty, index, m.name);
            (rank, vty, map, m)
        })
        .collect();
    placed.sort_by_key(|p| p.0);
    for (_, vty, map, m) in placed {
        if !first {
            out.push(b',');
        }
        first = false;
        out.extend_from_slice(m.key);
        out.push(b':');
        value_of(m.value, vty, map, out)?;
    }
    Some(())
}

/// Where a member goes in its type: its rank, the type of its value, whether it is a map.
fn place(
    ty: u16,
    index: &HashMap<&'static str, (u16, &'static F)>,
    name: &str,
) -> ((u16, u16), u16, bool) {
    let mut buf = [0u8; 64];
    let Some(norm) = normalize(name, &mut buf) else {
        return ((NONE, 0), NONE, false);
    };
    if let Some((pos, f)) = index.get(norm) {
        return ((*pos, 0), f.1, f.2);
    }
    // TypeMeta is inlined first in the Go types that carry it.
    if norm == "kind" {
        return ((0, 0), NONE, false);
    }
    if norm == "apiversion" {
        return ((0, 1), NONE, false);
    }
    // A field of an inlined struct takes that struct's place.
    let fields = &types()[usize::from(ty)].fields;
    for (pos, f) in fields.iter().enumerate() {
        if f.1 == NONE || f.2 {
            continue;
        }
        if let Some((sub, inner)) = field_index(f.1).and_then(|i| i.get(norm)) {
            return ((pos as u16, sub + 1), inner.1, inner.2);
        }
    }
    ((NONE, 0), NONE, false)
}

/// A member's value: a struct of type `ty`, a list of them, or a map of them.
fn value_of(raw: &[u8], ty: u16, map: bool, out: &mut Vec<u8>) -> Option<()> {
    if ty == NONE {
        out.extend_from_slice(raw);
        return Some(());
    }
    match raw.first() {
        Some(b'{') if map => {
            out.push(b'{');
            for (i, m) in members(raw)?.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                out.extend_from_slice(m.key);
                out.push(b':');
                value_of(m.value, ty, false, out)?;
            }
            out.push(b'}');
        }
        Some(b'{') => {
            let members = members(raw)?;
            out.push(b'{');
            fields(members.iter().collect(), ty, true, out)?;
            out.push(b'}');
        }
        Some(b'[') => {
            out.push(b'[');
            for (i, e) in elements(raw)?.into_iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                value_of(e, ty, map, out)?;
            }
            out.push(b']');
        }
        _ => out.extend_from_slice(raw),
    }
    Some(())
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

// === scanning ===

/// One member of a JSON object: its key as written (quoted), its unescaped-enough name (the
/// text between the quotes), and its value as written.
struct Member<'a> {
    key: &'a [u8],
    name: &'a str,
    value: &'a [u8],
}

/// The members of the JSON object in `raw` (`None` when it is not one).
fn members(raw: &[u8]) -> Option<Vec<Member<'_>>> {
    let mut s = Scan { b: raw, i: 0 };
    s.ws();
    s.eat(b'{')?;
    let mut out = Vec::new();
    s.ws();
    if s.peek() == Some(b'}') {
        s.i += 1;
        return s.end().map(|_| out);
    }
    loop {
        s.ws();
        let key = s.string()?;
        let name = std::str::from_utf8(&key[1..key.len() - 1]).ok()?;
        s.ws();
        s.eat(b':')?;
        s.ws();
        let value = s.value()?;
        out.push(Member { key, name, value });
        s.ws();
        match s.next()? {
            b',' => continue,
            b'}' => break,
            _ => return None,
        }
    }
    s.end().map(|_| out)
}

/// The elements of the JSON array in `raw`.
fn elements(raw: &[u8]) -> Option<Vec<&[u8]>> {
    let mut s = Scan { b: raw, i: 0 };
    s.ws();
    s.eat(b'[')?;
    let mut out = Vec::new();
    s.ws();
    if s.peek() == Some(b']') {
        s.i += 1;
        return s.end().map(|_| out);
    }
    loop {
        s.ws();
        out.push(s.value()?);
        s.ws();
        match s.next()? {
            b',' => continue,
            b']' => break,
            _ => return None,
        }
    }
    s.end().map(|_| out)
}

/// A cursor over JSON text that steps over whole values without decoding them.
struct Scan<'a> {
    b: &'a [u8],
    i: usize,
}

impl<'a> Scan<'a> {
    fn peek(&self) -> Option<u8> {
        self.b.get(self.i).copied()
    }

    fn next(&mut self) -> Option<u8> {
        let c = self.peek()?;
        self.i += 1;
        Some(c)
    }

    fn eat(&mut self, c: u8) -> Option<()> {
        (self.next()? == c).then_some(())
    }

    fn ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\n' | b'\r' | b'\t')) {
            self.i += 1;
        }
    }

    /// Only whitespace is left.
    fn end(&mut self) -> Option<()> {
        self.ws();
        (self.i == self.b.len()).then_some(())
    }

    /// A string, quotes included.
    fn string(&mut self) -> Option<&'a [u8]> {
        let start = self.i;
        self.eat(b'"')?;
        loop {
            match self.next()? {
                b'"' => return Some(&self.b[start..self.i]),
                b'\\' => {
                    self.next()?;
                }
                _ => {}
            }
        }
    }

    /// Any value, as written.
    fn value(&mut self) -> Option<&'a [u8]> {
        let start = self.i;
        match self.peek()? {
            b'"' => {
                self.string()?;
            }
            b'{' | b'[' => self.nested()?,
            _ => {
                while let Some(c) = self.peek() {
                    if matches!(c, b',' | b'}' | b']' | b' ' | b'\n' | b'\r' | b'\t') {
                        break;
                    }
                    self.i += 1;
                }
                if self.i == start {
                    return None;
                }
            }
        }
        Some(&self.b[start..self.i])
    }

    /// An object or array, brackets balanced (strings stepped over).
    fn nested(&mut self) -> Option<()> {
        let mut depth = 0usize;
        loop {
            match self.peek()? {
                b'"' => {
                    self.string()?;
                    continue;
                }
                b'{' | b'[' => depth += 1,
                b'}' | b']' => {
                    depth = depth.checked_sub(1)?;
                    if depth == 0 {
                        self.i += 1;
                        return Some(());
                    }
                }
                _ => {}
            }
            self.i += 1;
        }
    }
}
