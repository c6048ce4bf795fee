//! Errors of the link protocol. Every error caused by a peer's bytes or frames ends that one
//! session; none of them panics.

use beehive::{Message, Operation};

/// Bytes could not be decoded into a [`Frame`](crate::Frame).
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    /// The input is empty.
    #[error("empty frame")]
    Empty,
    /// The frame is larger than this end accepts.
    #[error("frame of {len} bytes exceeds the limit of {max} bytes")]
    TooLarge { len: u64, max: usize },
    /// The format byte is not one this build reads.
    #[error("frame format {found} is not supported (this build reads format {supported})")]
    UnsupportedFormat { found: u8, supported: u8 },
    /// The MessagePack body does not describe a frame.
    #[error("malformed frame body")]
    Malformed(#[source] rmp_serde::decode::Error),
    /// A whole frame was read but bytes were left over.
    #[error("{count} trailing bytes after the frame")]
    TrailingBytes { count: usize },
    /// The stream reader failed earlier and reads nothing more.
    #[error("frame stream already failed")]
    StreamFailed,
}

/// An ack from the peer does not fit what was sent: the peer is broken or hostile.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum AckError {
    /// The ack covers a sequence number that was never sent in this session.
    #[error("ack for seq {seq} but the highest seq sent is {highest_sent}")]
    BeyondSent { seq: u64, highest_sent: u64 },
    /// A selective range ends before it starts.
    #[error("selective ack range {start}..={end} is inverted")]
    InvertedRange { start: u64, end: u64 },
    /// The ack carries more selective ranges than the protocol allows.
    #[error("ack carries {count} selective ranges, more than the limit of {max}")]
    TooManyRanges { count: usize, max: usize },
}

/// A data frame or an application report does not fit the receiver's state.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RecvError {
    /// Sequence number 0 is never used; sequence spaces start at 1.
    #[error("seq 0 is not a valid sequence number")]
    ZeroSeq,
    /// The peer sent past the receive window it was given.
    #[error("seq {seq} is beyond the receive window (highest acceptable is {limit})")]
    BeyondWindow { seq: u64, limit: u64 },
    /// The application reported on a seq that is not delivered and unprocessed.
    #[error("seq {seq} is not waiting to be processed")]
    NotPending { seq: u64 },
}

/// The per-node queue is full and refused a message for a key it does not hold.
///
/// The message is handed back; the caller counts the refusal and recovers with a resync (the
/// next reconnect diffs the whole inventory), so nothing is lost silently.
#[derive(Debug, thiserror::Error)]
#[error("queue is full ({capacity} keys pending), refused {key:?}")]
pub struct QueueFull {
    /// The key that was refused.
    pub key: String,
    /// The refused message, handed back.
    pub msg: Box<Message>,
    /// The capacity of the queue in keys.
    pub capacity: usize,
}

/// An inventory sent by the edge during resync is not acceptable.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum InventoryError {
    /// The inventory holds more entries than the cloud accepts.
    #[error("inventory exceeds the limit of {max} entries")]
    TooManyEntries { max: usize },
    /// The same key appears twice in one inventory.
    #[error("key {key:?} appears twice in the inventory")]
    DuplicateKey { key: String },
    /// An inventory chunk arrived after the last one.
    #[error("inventory chunk after the last one")]
    AfterLast,
}

/// The send window holds as many messages as it may; the message is handed back.
#[derive(Debug, thiserror::Error)]
#[error("send window is full")]
pub struct WindowFull {
    /// The refused message, handed back.
    pub msg: Box<Message>,
}

/// The opening exchange failed; the connection closes.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum HandshakeError {
    /// The node id in `Hello` differs from the one in the client certificate.
    #[error("node claims to be {claimed:?} but its certificate says {certified:?}")]
    NodeMismatch { claimed: String, certified: String },
    /// The two ends share no protocol version.
    #[error("no common protocol version (peer offered {offered:?})")]
    NoCommonVersion { offered: Vec<u16> },
    /// The cloud refused the session.
    #[error("session refused: {reason}")]
    Refused {
        reason: String,
        retry_after: Option<std::time::Duration>,
    },
    /// A frame other than the expected answer arrived first.
    #[error("unexpected {kind} frame during the handshake")]
    Unexpected { kind: &'static str },
}

/// Why a session ends ([`crate::Session`]).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SessionError {
    /// The peer acked what was never sent, or sent an ack the window cannot take.
    #[error("bad ack: {0}")]
    Ack(#[from] AckError),
    /// The peer sent data outside its window, or the application reported a seq it never got.
    #[error("bad data: {0}")]
    Recv(#[from] RecvError),
    /// The inventory the peer sent breaks a limit.
    #[error("bad inventory: {0}")]
    Inventory(#[from] InventoryError),
    /// A frame this end never takes in a session (a hello, a welcome, an inventory not asked).
    #[error("unexpected {0} frame in a session")]
    Unexpected(&'static str),
    /// The peer was silent for the keepalive timeout.
    #[error("peer silent for the keepalive timeout")]
    PeerDead,
    /// The peer sent `Close`.
    #[error("peer closed the session: {0}")]
    PeerClosed(String),
}

/// A resource string is not in the form it should be; the string is named.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum ResourceError {
    /// Not an object key `resource/namespace/name` with a resource and a name.
    #[error("{0:?} is not an object key (resource/namespace/name)")]
    BadKey(String),
    /// Not an object's message resource `namespace/resource/name` with a resource and a name.
    #[error("{0:?} is not an object resource (namespace/resource/name)")]
    BadMessageResource(String),
    /// Not `node/<node>` or `node/<node>/...` with a node name.
    #[error("{0:?} does not name a node (node/<node>/...)")]
    NotNodeScoped(String),
}

/// A message between cloudhub and the controller does not fit the controller protocol
/// ([`crate::ToController`]); the message's resource and operation are named.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum ControlError {
    /// The resource does not name a node.
    #[error("{operation} {resource:?} does not name a node (node/<node>/...)")]
    NotNodeScoped {
        resource: String,
        operation: Operation,
    },
    /// The operation and resource are no question or event of the controller protocol.
    #[error("{operation} {resource:?} is not a controller question or event")]
    Unknown {
        resource: String,
        operation: Operation,
    },
    /// The content does not decode as the protocol says.
    #[error("{operation} {resource:?} carries content that does not decode: {reason}")]
    BadContent {
        resource: String,
        operation: Operation,
        reason: String,
    },
}
