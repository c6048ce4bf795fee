//! Frames: the units the two hubs exchange, their MessagePack encoding, and a length-prefixed
//! framing for byte streams.
//!
//! Encoding: `[FRAME_FORMAT][msgpack(Frame)]`, structs as arrays, enum variants tagged by name.
//! On WebSocket one binary message carries one encoded frame. On a byte stream (QUIC stream,
//! raw TCP) each encoded frame is preceded by its length as 4 bytes big-endian, and
//! [`FrameReader`] takes the stream apart.
//!
//! Decoding checks the size before parsing, never panics, and allocates no more than the input
//! holds: sequences are grown element by element instead of trusting a declared length.

use std::collections::VecDeque;

use beehive::Message;
use serde::{Deserialize, Serialize};

use crate::digest::Digest;
use crate::error::FrameError;

/// The encoding format written by this build (the first byte of every encoded frame).
pub const FRAME_FORMAT: u8 = 1;

/// The protocol version this build speaks best.
pub const PROTOCOL_VERSION: u16 = 1;

/// Every protocol version this build speaks, best first.
pub const SUPPORTED_PROTOCOL_VERSIONS: &[u16] = &[PROTOCOL_VERSION];

/// Default largest encoded frame accepted (32 MiB, KubeEdge's payload limit).
pub const DEFAULT_MAX_FRAME: usize = 32 << 20;

/// Size of the length prefix used on byte streams.
pub const LENGTH_PREFIX_LEN: usize = 4;

/// Deepest MessagePack nesting accepted. Real frames nest about 5 levels; the limit keeps a
/// hostile frame of nested arrays inside an ignored field from recursing deeply.
const MAX_DEPTH: usize = 32;

/// Most selective ranges one [`Ack`] may carry.
pub const MAX_ACK_RANGES: usize = 64;

/// One protocol frame.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Frame {
    /// Edge → cloud, first frame of a connection.
    Hello(Hello),
    /// Cloud → edge: the session is accepted.
    Welcome(Welcome),
    /// Cloud → edge: the session is refused; the connection closes after it.
    Refuse {
        reason: String,
        /// When the edge may try again (set when the cloud is overloaded).
        retry_after_ms: Option<u32>,
    },
    /// One application message with its sequence number in the sender's sequence space.
    Data { seq: u64, msg: Box<Message> },
    /// What the sender of the ack has durably processed of the peer's data.
    Ack(Ack),
    /// Liveness probe; answered by a `Pong` with the same nonce.
    Ping { nonce: u64 },
    /// Answer to a `Ping`.
    Pong { nonce: u64 },
    /// Cloud → edge: digests differ, send the full inventory.
    InventoryRequest,
    /// Edge → cloud: one chunk of the inventory; `last` marks the final chunk.
    Inventory {
        #[serde(deserialize_with = "no_prealloc::deserialize")]
        entries: Vec<InventoryEntry>,
        last: bool,
    },
    /// Cloud → edge: every difference found by the resync has been acked; the edge store holds
    /// what the cloud meant it to hold when the resync began.
    ResyncDone { upserts: u32, deletes: u32 },
    /// Either way: the sender ends the session.
    Close { reason: String },
}

/// The edge's opening frame.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hello {
    /// Protocol versions the edge speaks, best first.
    #[serde(deserialize_with = "no_prealloc::deserialize")]
    pub protocol_versions: Vec<u16>,
    /// The node name; the cloud checks it against the client certificate.
    pub node_id: String,
    /// The digest of what the edge store holds (see [`mod@crate::digest`]).
    pub inventory_digest: Digest,
    /// What the edge accepts.
    pub limits: Limits,
    /// Reserved for resuming a session: edges send `None` today and the cloud ignores it (a
    /// reconnect is a new session: a node's newer session takes over from an older one by
    /// name). Kept so that the `Hello` encoding stays the same for older and newer peers.
    pub resume: Option<Resume>,
}

/// The cloud's acceptance.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Welcome {
    /// The protocol version chosen, one the edge offered.
    pub protocol_version: u16,
    /// The id of the new session (in both ends' logs).
    pub session_id: u64,
    /// What the cloud accepts.
    pub limits: Limits,
}

/// What one end accepts from the other.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Limits {
    /// Largest encoded frame accepted, in bytes.
    pub max_frame: u32,
    /// Most data frames the peer may have unacked (the receive window).
    pub recv_window: u32,
}

/// A reference to a previous session: reserved in [`Hello`], never sent today (see
/// [`Hello::resume`]). Sequence numbers never carry over a reconnect: unacked messages are sent
/// again with fresh numbers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Resume {
    pub session_id: u64,
}

/// One object the edge holds: its key (`resource/namespace/name`) and resourceVersion.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct InventoryEntry {
    pub key: String,
    pub resource_version: String,
}

/// An acknowledgement of data frames that were durably processed.
///
/// `cumulative` is the highest seq such that every seq up to it is processed (0: none).
/// `selective` lists inclusive ranges above `cumulative + 1` that are processed too, lowest
/// first, at most [`MAX_ACK_RANGES`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ack {
    pub cumulative: u64,
    #[serde(deserialize_with = "no_prealloc::deserialize")]
    pub selective: Vec<(u64, u64)>,
}

/// Incremental decoder for length-prefixed frames on a byte stream.
///
/// Feed it whatever the socket returned with [`push`](FrameReader::push) and take complete frames
/// with [`next_frame`](FrameReader::next_frame). A declared length above the limit is rejected
/// as soon as its 4 bytes are seen, before any of its body is buffered. After an error the reader
/// is spent: the stream cannot be resynchronised, so the session must end.
#[derive(Debug)]
pub struct FrameReader {
    max_frame: usize,
    header: [u8; LENGTH_PREFIX_LEN],
    header_len: usize,
    body: Option<Body>,
    ready: VecDeque<Vec<u8>>,
    failure: Option<FrameError>,
    spent: bool,
}

#[derive(Debug)]
struct Body {
    declared: usize,
    buf: Vec<u8>,
}

// === impl Frame ===

impl Frame {
    /// A short name of the frame kind, for logs and errors.
    pub fn kind(&self) -> &'static str {
        match self {
            Frame::Hello(_) => "hello",
            Frame::Welcome(_) => "welcome",
            Frame::Refuse { .. } => "refuse",
            Frame::Data { .. } => "data",
            Frame::Ack(_) => "ack",
            Frame::Ping { .. } => "ping",
            Frame::Pong { .. } => "pong",
            Frame::InventoryRequest => "inventory_request",
            Frame::Inventory { .. } => "inventory",
            Frame::ResyncDone { .. } => "resync_done",
            Frame::Close { .. } => "close",
        }
    }
}

/// Encodes a frame, format byte first.
pub fn encode(frame: &Frame) -> Vec<u8> {
    let mut buf = Vec::with_capacity(64 + content_len(frame));
    encode_into(frame, &mut buf);
    buf
}

/// Appends the encoding of `frame` to `buf`.
pub fn encode_into(frame: &Frame, buf: &mut Vec<u8>) {
    buf.push(FRAME_FORMAT);
    // Writing into a Vec cannot fail, and every field of Frame is serializable.
    rmp_serde::encode::write(buf, frame).expect("encoding a Frame into a Vec is infallible");
}

/// Decodes one frame produced by [`encode`]; `max_frame` is checked before anything is parsed.
pub fn decode(bytes: &[u8], max_frame: usize) -> Result<Frame, FrameError> {
    if bytes.len() > max_frame {
        return Err(FrameError::TooLarge {
            len: bytes.len() as u64,
            max: max_frame,
        });
    }
    let (&format, body) = bytes.split_first().ok_or(FrameError::Empty)?;
    if format != FRAME_FORMAT {
        return Err(FrameError::UnsupportedFormat {
            found: format,
            supported: FRAME_FORMAT,
        });
    }
    // A plain slice reader: it advances, so what is left over is visible afterwards, and it
    // copies a string only after checking that the input holds that many bytes.
    let mut rest = body;
    let mut de = rmp_serde::Deserializer::new(&mut rest);
    de.set_max_depth(MAX_DEPTH);
    let frame = Frame::deserialize(&mut de).map_err(FrameError::Malformed)?;
    drop(de);
    if !rest.is_empty() {
        return Err(FrameError::TrailingBytes { count: rest.len() });
    }
    Ok(frame)
}

/// Encodes a frame for a byte stream: 4-byte big-endian length, then the frame.
///
/// Fails with [`FrameError::TooLarge`] when the frame exceeds `max_frame` (the peer's limit), so
/// an oversized message is refused here rather than killing the session at the peer.
pub fn encode_prefixed(frame: &Frame, max_frame: usize) -> Result<Vec<u8>, FrameError> {
    let mut buf = Vec::with_capacity(LENGTH_PREFIX_LEN + 64 + content_len(frame));
    buf.extend_from_slice(&[0; LENGTH_PREFIX_LEN]);
    encode_into(frame, &mut buf);
    let len = buf.len() - LENGTH_PREFIX_LEN;
    let max = max_frame.min(u32::MAX as usize);
    if len > max {
        return Err(FrameError::TooLarge {
            len: len as u64,
            max,
        });
    }
    let prefix = u32::try_from(len).expect("len <= max <= u32::MAX was checked above");
    buf[..LENGTH_PREFIX_LEN].copy_from_slice(&prefix.to_be_bytes());
    Ok(buf)
}

/// The encoded size of a `Data` frame carrying `msg`, at the widest sequence number: what the
/// frame takes on the wire at most (length prefix not counted). Counted without building the
/// frame or its buffer, so a sender can check a message against the peer's limit before it
/// gives the message a sequence number.
pub fn data_frame_len(msg: &Message) -> usize {
    /// Serializes as `Frame::Data` does: the variant name tags the same fields.
    #[derive(Serialize)]
    enum Borrowed<'a> {
        Data { seq: u64, msg: &'a Message },
    }
    let mut counter = Counter(0);
    let data = Borrowed::Data { seq: u64::MAX, msg };
    // Counting bytes cannot fail, and every field of Message is serializable.
    rmp_serde::encode::write(&mut counter, &data).expect("counting an encoding is infallible");
    1 + counter.0
}

/// An `io::Write` that only counts.
struct Counter(usize);

impl std::io::Write for Counter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0 += buf.len();
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Picks the best protocol version both ends speak; `offered` is the peer's list.
pub fn choose_version(offered: &[u16], supported: &[u16]) -> Option<u16> {
    supported.iter().copied().find(|v| offered.contains(v))
}

fn content_len(frame: &Frame) -> usize {
    match frame {
        Frame::Data { msg, .. } => msg.content.len(),
        _ => 0,
    }
}

// === impl Limits ===

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_frame: DEFAULT_MAX_FRAME as u32,
            recv_window: 128,
        }
    }
}

// === impl Ack ===

impl Ack {
    /// True if this ack covers `seq`.
    pub fn covers(&self, seq: u64) -> bool {
        seq <= self.cumulative || self.selective.iter().any(|&(s, e)| s <= seq && seq <= e)
    }
}

// === impl FrameReader ===

impl FrameReader {
    /// A reader that accepts frames of up to `max_frame` bytes (prefix not counted).
    pub fn new(max_frame: usize) -> Self {
        FrameReader {
            max_frame,
            header: [0; LENGTH_PREFIX_LEN],
            header_len: 0,
            body: None,
            ready: VecDeque::new(),
            failure: None,
            spent: false,
        }
    }

    /// Takes bytes read from the stream. Bytes after an oversized length prefix are ignored.
    pub fn push(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() && self.failure.is_none() && !self.spent {
            let used = match self.body.take() {
                None => self.push_header(bytes),
                Some(body) => self.push_body(body, bytes),
            };
            bytes = &bytes[used..];
        }
    }

    /// The next complete frame, `Ok(None)` if more bytes are needed.
    pub fn next_frame(&mut self) -> Result<Option<Frame>, FrameError> {
        if self.spent {
            return Err(FrameError::StreamFailed);
        }
        if let Some(raw) = self.ready.pop_front() {
            return decode(&raw, self.max_frame)
                .map(Some)
                .inspect_err(|_| self.spent = true);
        }
        if let Some(e) = self.failure.take() {
            self.spent = true;
            return Err(e);
        }
        Ok(None)
    }

    /// Bytes held: partial prefix, partial body and complete frames not yet taken.
    pub fn buffered(&self) -> usize {
        let body = self.body.as_ref().map_or(0, |b| b.buf.len());
        self.header_len + body + self.ready.iter().map(Vec::len).sum::<usize>()
    }

    fn push_header(&mut self, bytes: &[u8]) -> usize {
        let n = (LENGTH_PREFIX_LEN - self.header_len).min(bytes.len());
        self.header[self.header_len..self.header_len + n].copy_from_slice(&bytes[..n]);
        self.header_len += n;
        if self.header_len == LENGTH_PREFIX_LEN {
            self.header_len = 0;
            self.start_body(u32::from_be_bytes(self.header) as usize);
        }
        n
    }

    fn start_body(&mut self, declared: usize) {
        if declared > self.max_frame {
            self.failure = Some(FrameError::TooLarge {
                len: declared as u64,
                max: self.max_frame,
            });
        } else if declared == 0 {
            self.ready.push_back(Vec::new());
        } else {
            self.body = Some(Body {
                declared,
                buf: Vec::new(),
            });
        }
    }

    fn push_body(&mut self, mut body: Body, bytes: &[u8]) -> usize {
        let n = (body.declared - body.buf.len()).min(bytes.len());
        body.grow_for(n);
        body.buf.extend_from_slice(&bytes[..n]);
        if body.buf.len() == body.declared {
            self.ready.push_back(body.buf);
        } else {
            self.body = Some(body);
        }
        n
    }
}

// === impl Body ===

impl Body {
    /// Grows geometrically, but never past the declared length, so a lying prefix costs at most
    /// twice the bytes actually received.
    fn grow_for(&mut self, n: usize) {
        let needed = self.buf.len() + n;
        if needed > self.buf.capacity() {
            let target = (self.buf.capacity() * 2).max(needed).min(self.declared);
            self.buf.reserve_exact(target - self.buf.len());
        }
    }
}

/// Deserializes a sequence without trusting its declared length for preallocation.
mod no_prealloc {
    use std::fmt;
    use std::marker::PhantomData;

    use serde::de::{Deserialize, Deserializer, SeqAccess, Visitor};

    pub fn deserialize<'de, D, T>(d: D) -> Result<Vec<T>, D::Error>
    where
        D: Deserializer<'de>,
        T: Deserialize<'de>,
    {
        d.deserialize_seq(SeqVisitor(PhantomData))
    }

    struct SeqVisitor<T>(PhantomData<T>);

    impl<'de, T: Deserialize<'de>> Visitor<'de> for SeqVisitor<T> {
        type Value = Vec<T>;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a sequence")
        }

        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<T>, A::Error> {
            let mut out = Vec::new();
            while let Some(item) = seq.next_element()? {
                out.push(item);
            }
            Ok(out)
        }
    }
}

#[cfg(test)]
mod tests;
