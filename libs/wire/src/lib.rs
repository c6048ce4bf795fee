//! wire: the cloud–edge link protocol shared by cloudhub and edgehub, as pure logic with no I/O.
//! The hubs own the sockets and the clock; this crate decides what goes on the wire and when,
//! driven by the `now: Instant` they pass in (like quinn-proto), so it is tested with a virtual
//! clock and a simulated lossy network.
//!
//! # Frames
//!
//! A [`Frame`] is encoded as one format byte ([`FRAME_FORMAT`]) followed by MessagePack. On
//! WebSocket one binary message carries one frame; on a byte stream (QUIC stream) each frame is
//! preceded by its length as 4 bytes big-endian ([`encode_prefixed`], [`FrameReader`]). Every
//! decoder checks the size against a limit before parsing, never panics on bad bytes, and never
//! allocates more than the input holds. Bad bytes end that one session.
//!
//! A connection opens with `Hello` from the edge; the cloud checks it with [`answer_hello`] (the
//! node id must match the client certificate, a protocol version must be shared) and answers
//! `Welcome` or `Refuse`.
//!
//! | frame | direction | meaning |
//! |---|---|---|
//! | `Hello` | edge → cloud | node id, protocol versions, inventory digest, limits, previous session |
//! | `Welcome` / `Refuse` | cloud → edge | chosen version, session id, limits / why not, when to retry |
//! | `Data { seq, msg }` | both | one [`beehive::Message`] |
//! | `Ack { cumulative, selective }` | both | what the peer's data has been durably processed |
//! | `Ping` / `Pong` | both | liveness, both ends check ([`Keepalive`]) |
//! | `InventoryRequest` / `Inventory` / `ResyncDone` | see below | reconnect without relist |
//! | `Close` | both | the sender ends the session, with a reason |
//!
//! # Sessions and sequence spaces
//!
//! A session is one connection after a `Welcome`. Each direction has its own sequence space per
//! session, starting at 1. Sequence numbers never carry over: when a session ends, the sender's
//! unacked messages go back to its queue ([`Outbound::reset_for_new_session`]) and are sent
//! again in the next session with fresh numbers and their original message ids. Delivery is
//! exactly once per session and at least once across sessions; the edge store drops a version it
//! already holds.
//!
//! # Acks mean "durably processed"
//!
//! The receiver ([`Receiver`]) hands each arriving seq to the application once. The application
//! may process them in any order (different objects commit independently) and reports each with
//! [`Receiver::processed`] only after it is durable (for the edge: committed to SQLite). An
//! `Ack` carries `cumulative`, the highest seq with every seq up to it processed, plus up to
//! [`MAX_ACK_RANGES`] selective ranges of processed seqs above it. Acks are sent every
//! [`RecvConfig::ack_every`] processed frames or after [`RecvConfig::ack_delay`], and at once
//! when the peer resends something already processed.
//!
//! # Window
//!
//! The sender ([`SendWindow`]) keeps up to `window` messages unacked (default 128, narrowed to
//! the peer's advertised receive window), and never sends a seq more than `window` above the
//! lowest unacked one, so the receiver's state is bounded too. Each message has its own
//! retransmission timer: RTO from an RFC 6298 estimator (Karn's rule: no samples from
//! retransmitted messages), doubled per retransmission up to a cap. There is no fast
//! retransmit: on a reliable stream a hole in the acks means "still being processed", not
//! "lost". With a 50 ms RTT this moves over a hundred messages per round trip where KubeEdge's
//! stop-and-wait moves one.
//!
//! # Per-node keyed queue
//!
//! Downstream messages wait in a [`KeyedQueue`] keyed by object: the latest version replaces a
//! pending one in place, a delete supersedes what was pending for its key, and at most one
//! version per key is in flight, so versions of one object reach the edge in order even though
//! the edge processes objects concurrently. A full queue refuses new keys with [`QueueFull`]
//! (never a silent drop); the caller counts it and resyncs the node. [`Outbound`] joins queue and
//! window.
//!
//! # Resync on reconnect
//!
//! `Hello` carries the [`Digest`] of the edge store. If the cloud's digest of what the node
//! should hold is equal, the cloud sends `ResyncDone { 0, 0 }`. Otherwise it sends
//! `InventoryRequest`, the edge sends its inventory in chunks ([`inventory_frames`]), and the
//! cloud queues only the differences ([`plan_resync`]), deletes included, then `ResyncDone` once
//! they are all acked ([`ResyncProgress`]). See [`resync`] and [`mod@digest`] for the details and the
//! canonical digest definition.
//!
//! # Object references and the controller protocol
//!
//! An object is named by an [`ObjectRef`] (resource, namespace, name), written as a key
//! (`resource/namespace/name`, for digests, inventories and queues) or as a message resource
//! (`namespace/resource/name`). Inside the cloud, cloudhub and the controller module exchange
//! [`ToController`] questions and events and their answers over node-scoped resources
//! ([`NodeResource`], `node/<node>/...`); the table is in the `control` module.
//!
//! # Limits
//!
//! Largest frame ([`DEFAULT_MAX_FRAME`], 32 MiB, both ends advertise theirs in [`Limits`]; a
//! queued message too large for the smaller of the two is dropped from the queue and handed to
//! the application as [`Event::Oversized`], so one huge object never wedges the link);
//! receive window; selective ranges per ack ([`MAX_ACK_RANGES`]); inventory entries
//! ([`DEFAULT_MAX_INVENTORY`]); keyed queue capacity. Crossing any of them is an error, never a
//! panic and never an unbounded buffer.
#![forbid(unsafe_code)]

mod control;
pub mod digest;
mod error;
pub mod frame;
mod handshake;
mod keepalive;
mod objref;
mod outbound;
mod queue;
mod recv;
pub mod resync;
mod session;
mod window;

#[cfg(test)]
mod testing;

pub use control::{
    NodeResource, ToController, digest_answer, read_digest_answer, read_resync_answer,
    resync_answer,
};
pub use digest::{Digest, digest, entry_hash};
pub use error::{
    AckError, ControlError, FrameError, HandshakeError, InventoryError, QueueFull, RecvError,
    ResourceError, SessionError, WindowFull,
};
pub use frame::{
    Ack, DEFAULT_MAX_FRAME, FRAME_FORMAT, Frame, FrameReader, Hello, InventoryEntry,
    LENGTH_PREFIX_LEN, Limits, MAX_ACK_RANGES, PROTOCOL_VERSION, Resume,
    SUPPORTED_PROTOCOL_VERSIONS, Welcome, choose_version, data_frame_len, decode, encode,
    encode_into, encode_prefixed,
};
pub use handshake::{Accepted, HelloCheck, ResyncStart, answer_hello, read_welcome};
pub use keepalive::{Keepalive, KeepaliveAction, KeepaliveConfig};
pub use objref::{ObjectRef, object_key};
pub use outbound::{Acked, Outbound, Oversized};
pub use queue::{KeyedQueue, Pushed};
pub use recv::{Arrival, Receiver, RecvConfig, RecvStats};
pub use resync::{
    DEFAULT_MAX_INVENTORY, Inventory, InventoryCollector, ResyncPlan, ResyncProgress,
    inventory_frames, plan_resync,
};
pub use session::{Event, Role, Session, SessionConfig, SessionStats};
pub use window::{RttEstimator, SendWindow, Transmit, WindowConfig, WindowStats};
