//! beehive: the in-process actor runtime shared by cloudcore and edgecore. Modules register with a
//! name and a group, each gets one bounded mailbox, and they exchange [`Message`]s through a
//! [`Context`]: addressed sends, ordered group sends, and sync requests answered by
//! [`Context::respond`]. No sockets, no storage: this crate is tested with no I/O at all. The
//! semantics are written down in `docs/semantics.md`.
#![forbid(unsafe_code)]

pub mod codec;
mod context;
mod error;
mod message;
mod module;
mod runtime;

pub use async_trait::async_trait;
pub use bytes::Bytes;
pub use smol_str::SmolStr;
pub use tokio_util::sync::CancellationToken;

pub use context::{Context, Stats};
pub use error::{DecodeError, ErrorChain, RegisterError, RespondError, SendError, SyncError};
pub use message::{Header, Message, MsgId, Operation, Router};
pub use module::{Mailbox, Module, ModuleError, Restart, RestartPolicy};
pub use runtime::{DEFAULT_MAILBOX, ModuleState, RunEnd, Running, Runtime, ShutdownReport};
