//! Errors of the runtime and of the message codec.

use std::fmt;
use std::time::Duration;

use smol_str::SmolStr;

use crate::message::MsgId;

/// A message could not be put in a mailbox.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SendError {
    /// No module of that name is registered.
    #[error("no module named {0:?}")]
    NoSuchModule(SmolStr),
    /// No module belongs to that group.
    #[error("no module in group {0:?}")]
    NoSuchGroup(SmolStr),
    /// The module has stopped for good; its mailbox is closed.
    #[error("module {0:?} has stopped")]
    ModuleStopped(SmolStr),
    /// The mailbox is full (only from `try_send`); the message was dropped.
    #[error("mailbox of module {0:?} is full, message dropped")]
    MailboxFull(SmolStr),
}

/// A `send_sync` request got no response.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SyncError {
    /// No response arrived within the deadline (enqueue and reply together).
    #[error("no response to {msg_id} within {timeout:?}")]
    Timeout { msg_id: MsgId, timeout: Duration },
    /// No module of that name is registered.
    #[error("no module named {0:?}")]
    NoSuchModule(SmolStr),
    /// The module stopped before answering.
    #[error("module {0:?} stopped before answering")]
    ModuleStopped(SmolStr),
}

/// A response could not be matched with a waiting request.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RespondError {
    /// The message has no parent id, so it answers nothing.
    #[error("message {0} is not a response: it has no parent id")]
    NotAResponse(MsgId),
    /// Nobody waits for this response any more (the waiter timed out or never existed).
    #[error("no waiter for response to {parent_id}: it gave up or never asked")]
    NoWaiter { parent_id: MsgId },
}

/// Bytes could not be decoded into a message.
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    /// The input is empty.
    #[error("empty input")]
    Empty,
    /// The input is larger than the decoder accepts.
    #[error("encoded message of {len} bytes exceeds the limit of {max} bytes")]
    TooLarge { len: usize, max: usize },
    /// The format version byte is not one this build reads.
    #[error(
        "message format version {found} is not supported (this build reads version {supported})"
    )]
    UnsupportedVersion { found: u8, supported: u8 },
    /// The MessagePack body does not describe a message.
    #[error("malformed message body")]
    Malformed(#[source] rmp_serde::decode::Error),
    /// A whole message was read but bytes were left over.
    #[error("{count} trailing bytes after the message")]
    TrailingBytes { count: usize },
}

/// The runtime could not be built.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RegisterError {
    /// Two enabled modules have the same name.
    #[error("module {0:?} is registered twice")]
    Duplicate(SmolStr),
    /// A mailbox capacity of zero was asked for.
    #[error("module {0:?} asked for a mailbox of capacity 0")]
    ZeroCapacity(SmolStr),
}

/// Displays an error followed by each of its sources, `: `-separated, as anyhow's `{:#}` does:
/// `edge store: object store write failed: database or disk is full`.
pub struct ErrorChain<'a>(pub &'a (dyn std::error::Error + 'static));

impl fmt::Display for ErrorChain<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)?;
        let mut source = self.0.source();
        while let Some(cause) = source {
            write!(f, ": {cause}")?;
            source = cause.source();
        }
        Ok(())
    }
}
