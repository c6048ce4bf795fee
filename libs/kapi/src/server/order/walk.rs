//! One pass over JSON text that writes each struct's members in their type's order
//! ([`Writer`]), or checks that the text already is exactly what the writer would write
//! ([`Check`]). No tree is built and nothing is scanned twice: a struct's members are written
//! as they come, each remembered as a segment of the output, and moved only when a member
//! came before one of lower rank (so text already in order is copied once, and checked
//! without being copied at all).

use std::cell::Cell;

use super::{How, Place};

/// Receives the walked text: writes it, or compares it with the form it would be written in.
pub(super) trait Sink {
    /// The written form differs from the text here (whitespace or a member dropped): `None`
    /// when checking, nothing to do when writing.
    fn differs(&mut self) -> Option<()>;
    fn put(&mut self, bytes: &[u8]);
    /// How much has been written.
    fn len(&self) -> usize;
    /// Starts a struct's members (`lead`: a comma goes before the first, as something is
    /// written before them).
    fn open(&mut self, lead: bool) -> Mark;
    /// A member of rank `rank` was written from `start` up to here.
    fn member(&mut self, mark: &mut Mark, rank: (u16, u16), start: usize) -> Option<()>;
    /// Ends a struct's members: puts them in rank order if they were not.
    fn close(&mut self, mark: Mark);
    /// False for a sink that only checks (a list's items are not checked).
    fn writes(&self) -> bool;
}

/// Where one struct's members start, and whether they came in rank order.
pub(super) struct Mark {
    region: usize,
    base: usize,
    lead: bool,
    last: (u16, u16),
    sorted: bool,
}

/// One member as written: its rank and where its `"key":value` text is in the output.
#[derive(Clone, Copy)]
struct Seg {
    rank: (u16, u16),
    start: usize,
    end: usize,
}

/// Writes the text in order into `out`.
pub(super) struct Writer {
    pub(super) out: Vec<u8>,
    segs: Vec<Seg>,
    scratch: Vec<u8>,
}

/// Checks that the text is already in the written form.
pub(super) struct Check;

/// A cursor over JSON text and the sink it feeds.
pub(super) struct Walk<'a, 's, S> {
    s: Scan<'a>,
    sink: &'s mut S,
}

thread_local! {
    /// Segment and scratch buffers kept between objects (a list renders thousands).
    static SPARE: Cell<(Vec<Seg>, Vec<u8>)> = const { Cell::new((Vec::new(), Vec::new())) };
}

// === impl Writer ===

impl Writer {
    /// A writer whose output starts with room for `capacity` bytes (its work buffers are
    /// this thread's spare ones).
    pub(super) fn new(capacity: usize) -> Self {
        let (segs, scratch) = SPARE.take();
        Writer {
            out: Vec::with_capacity(capacity),
            segs,
            scratch,
        }
    }

    /// The output (the work buffers go back to this thread's spares).
    pub(super) fn finish(mut self) -> Vec<u8> {
        self.segs.clear();
        self.scratch.clear();
        SPARE.set((
            std::mem::take(&mut self.segs),
            std::mem::take(&mut self.scratch),
        ));
        std::mem::take(&mut self.out)
    }
}

impl Sink for Writer {
    fn differs(&mut self) -> Option<()> {
        Some(())
    }

    fn put(&mut self, bytes: &[u8]) {
        self.out.extend_from_slice(bytes);
    }

    fn len(&self) -> usize {
        self.out.len()
    }

    fn open(&mut self, lead: bool) -> Mark {
        Mark {
            region: self.out.len(),
            base: self.segs.len(),
            lead,
            last: (0, 0),
            sorted: true,
        }
    }

    fn member(&mut self, mark: &mut Mark, rank: (u16, u16), start: usize) -> Option<()> {
        let end = self.out.len();
        self.segs.push(Seg { rank, start, end });
        mark.sorted &= rank >= mark.last;
        mark.last = rank;
        Some(())
    }

    fn close(&mut self, mark: Mark) {
        if !mark.sorted {
            let Writer { out, segs, scratch } = self;
            let segs = &mut segs[mark.base..];
            // Stable: members of one rank keep their order.
            segs.sort_by_key(|s| s.rank);
            scratch.clear();
            scratch.extend_from_slice(&out[mark.region..]);
            out.truncate(mark.region);
            for (i, seg) in segs.iter().enumerate() {
                if i > 0 || mark.lead {
                    out.push(b',');
                }
                out.extend_from_slice(&scratch[seg.start - mark.region..seg.end - mark.region]);
            }
        }
        self.segs.truncate(mark.base);
    }

    fn writes(&self) -> bool {
        true
    }
}

// === impl Check ===

impl Sink for Check {
    fn differs(&mut self) -> Option<()> {
        None
    }

    fn put(&mut self, _: &[u8]) {}

    fn len(&self) -> usize {
        0
    }

    fn open(&mut self, lead: bool) -> Mark {
        Mark {
            region: 0,
            base: 0,
            lead,
            last: (0, 0),
            sorted: true,
        }
    }

    fn member(&mut self, mark: &mut Mark, rank: (u16, u16), _: usize) -> Option<()> {
        if rank < mark.last {
            return None;
        }
        mark.last = rank;
        Some(())
    }

    fn close(&mut self, _: Mark) {}

    fn writes(&self) -> bool {
        false
    }
}

// === impl Walk ===

impl<'a, 's, S: Sink> Walk<'a, 's, S> {
    pub(super) fn new(text: &'a [u8], sink: &'s mut S) -> Self {
        Walk {
            s: Scan { b: text, i: 0 },
            sink,
        }
    }

    /// Skips whitespace (a difference for a checking sink).
    pub(super) fn ws(&mut self) -> Option<()> {
        if self.s.ws() {
            self.sink.differs()?;
        }
        Some(())
    }

    pub(super) fn eat(&mut self, c: u8) -> Option<()> {
        self.s.eat(c)
    }

    /// Only whitespace is left.
    pub(super) fn end(&mut self) -> Option<()> {
        self.ws()?;
        (self.s.i == self.s.b.len()).then_some(())
    }

    /// A struct's members, after its `{` (or, with `after_first`, after its first member)
    /// up to and including its `}`, each placed by `place`. With `drop_type_meta`, members
    /// named `kind` and `apiVersion` are left out; `lead` as in [`Sink::open`].
    pub(super) fn members(
        &mut self,
        lead: bool,
        after_first: bool,
        drop_type_meta: bool,
        place: &mut dyn FnMut(&str) -> Place,
    ) -> Option<()> {
        let mut mark = self.sink.open(lead);
        self.ws()?;
        if self.s.peek() == Some(b'}') {
            self.s.i += 1;
            self.sink.close(mark);
            return Some(());
        }
        if after_first {
            self.s.eat(b',')?;
            self.ws()?;
        }
        let mut wrote = false;
        loop {
            let key = self.s.string()?;
            let name = std::str::from_utf8(&key[1..key.len() - 1]).ok()?;
            self.ws()?;
            self.s.eat(b':')?;
            self.ws()?;
            if drop_type_meta && (name == "kind" || name == "apiVersion") {
                self.sink.differs()?;
                self.s.value()?;
            } else {
                if wrote || lead {
                    self.sink.put(b",");
                }
                wrote = true;
                let start = self.sink.len();
                self.sink.put(key);
                self.sink.put(b":");
                let p = place(name);
                self.value(p.how)?;
                self.sink.member(&mut mark, p.rank, start)?;
            }
            self.ws()?;
            match self.s.next()? {
                b',' => self.ws()?,
                b'}' => break,
                _ => return None,
            }
        }
        self.sink.close(mark);
        Some(())
    }

    /// A member's value.
    fn value(&mut self, how: How) -> Option<()> {
        match how {
            How::Raw => self.raw(),
            How::Typed(index, map) => self.typed(index, map),
            How::Items => self.items(),
        }
    }

    fn raw(&mut self) -> Option<()> {
        let v = self.s.value()?;
        self.sink.put(v);
        Some(())
    }

    /// A struct of type `ty`, a list of them, or (`map`) a map of them.
    fn typed(&mut self, ty: u16, map: bool) -> Option<()> {
        match self.s.peek()? {
            b'{' if map => {
                self.s.i += 1;
                self.sink.put(b"{");
                self.map_members(ty)?;
                self.sink.put(b"}");
            }
            b'{' => {
                let mut placer = super::Placer::new(ty)?;
                self.s.i += 1;
                self.sink.put(b"{");
                self.members(false, false, false, &mut |name| placer.place(name))?;
                self.sink.put(b"}");
            }
            b'[' => {
                self.s.i += 1;
                self.sink.put(b"[");
                self.elements(|w| w.typed(ty, map))?;
                self.sink.put(b"]");
            }
            _ => self.raw()?,
        }
        Some(())
    }

    /// A map's members (after its `{`, through its `}`), as they come, each value a struct
    /// of type `ty`.
    fn map_members(&mut self, ty: u16) -> Option<()> {
        self.ws()?;
        if self.s.peek() == Some(b'}') {
            self.s.i += 1;
            return Some(());
        }
        let mut first = true;
        loop {
            if !first {
                self.sink.put(b",");
            }
            first = false;
            let key = self.s.string()?;
            self.ws()?;
            self.s.eat(b':')?;
            self.ws()?;
            self.sink.put(key);
            self.sink.put(b":");
            self.typed(ty, false)?;
            self.ws()?;
            match self.s.next()? {
                b',' => self.ws()?,
                b'}' => return Some(()),
                _ => return None,
            }
        }
    }

    /// An array's elements (after its `[`, through its `]`), each by `each`.
    fn elements(&mut self, each: impl Fn(&mut Self) -> Option<()>) -> Option<()> {
        self.ws()?;
        if self.s.peek() == Some(b']') {
            self.s.i += 1;
            return Some(());
        }
        let mut first = true;
        loop {
            if !first {
                self.sink.put(b",");
            }
            first = false;
            each(self)?;
            self.ws()?;
            match self.s.next()? {
                b',' => self.ws()?,
                b']' => return Some(()),
                _ => return None,
            }
        }
    }

    /// A list's items: each object a top-level one of its own kind (written only).
    fn items(&mut self) -> Option<()> {
        if !self.sink.writes() {
            return None;
        }
        if self.s.peek()? != b'[' {
            return self.raw();
        }
        self.s.i += 1;
        self.sink.put(b"[");
        self.elements(|w| {
            let item = w.s.value()?;
            if item.first() == Some(&b'{') {
                super::top(item, None, &mut *w.sink)
            } else {
                w.sink.put(item);
                Some(())
            }
        })?;
        self.sink.put(b"]");
        Some(())
    }
}

/// The first `kind` and `apiVersion` members of the object in `raw` (each as written, quotes
/// included), looking no deeper than its own members; nothing when it is not an object.
pub(super) fn type_meta_of(raw: &[u8]) -> (Option<&[u8]>, Option<&[u8]>) {
    let mut s = Scan { b: raw, i: 0 };
    let (mut kind, mut api_version) = (None, None);
    let mut step = || -> Option<()> {
        s.ws();
        s.eat(b'{')?;
        s.ws();
        if s.peek() == Some(b'}') {
            return Some(());
        }
        loop {
            s.ws();
            let key = s.string()?;
            s.ws();
            s.eat(b':')?;
            s.ws();
            let value = s.value()?;
            match key {
                b"\"kind\"" if kind.is_none() => kind = Some(value),
                b"\"apiVersion\"" if api_version.is_none() => api_version = Some(value),
                _ => {}
            }
            s.ws();
            match s.next()? {
                b',' => continue,
                _ => return Some(()),
            }
        }
    };
    step();
    (kind, api_version)
}

// === scanning ===

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

    /// Skips whitespace; true when there was some.
    fn ws(&mut self) -> bool {
        let start = self.i;
        while matches!(self.peek(), Some(b' ' | b'\n' | b'\r' | b'\t')) {
            self.i += 1;
        }
        self.i > start
    }

    /// A string, quotes included.
    fn string(&mut self) -> Option<&'a [u8]> {
        let start = self.i;
        self.eat(b'"')?;
        loop {
            let rest = self.b.get(self.i..)?;
            let at = rest.iter().position(|c| matches!(c, b'"' | b'\\'))?;
            self.i += at + 1;
            if rest[at] == b'"' {
                return Some(&self.b[start..self.i]);
            }
            // An escape: the next byte is part of it.
            self.next()?;
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
                // A number, `true`, `false` or `null`: nothing that starts or ends another
                // token belongs to one.
                while let Some(c) = self.peek() {
                    if matches!(
                        c,
                        b',' | b'}'
                            | b']'
                            | b' '
                            | b'\n'
                            | b'\r'
                            | b'\t'
                            | b'"'
                            | b'{'
                            | b'['
                            | b':'
                    ) {
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
