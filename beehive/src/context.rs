//! The routing handle every module holds: addressed sends, group sends, sync requests and
//! responses.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use dashmap::DashMap;
use smol_str::SmolStr;
use tokio::sync::{mpsc, oneshot};

use crate::error::{RespondError, SendError, SyncError};
use crate::message::{Message, MsgId};

/// A clonable handle onto the routing table, bound to the module that holds it.
///
/// Every message a module sends leaves through its `Context`; the source of a message is not
/// rewritten, so modules set it with [`Message::route`].
#[derive(Clone)]
pub struct Context {
    shared: Arc<Shared>,
}

/// Counters kept by the runtime.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Messages dropped by `try_send` / `try_send_to_group` because a mailbox was full.
    pub dropped: u64,
    /// Responses that found no waiter (it had timed out, or never asked).
    pub late_responses: u64,
}

pub(crate) struct Shared {
    pub(crate) mailboxes: HashMap<SmolStr, mpsc::Sender<Message>>,
    pub(crate) groups: HashMap<SmolStr, Vec<(SmolStr, mpsc::Sender<Message>)>>,
    waiters: DashMap<MsgId, oneshot::Sender<Message>>,
    dropped: AtomicU64,
    late_responses: AtomicU64,
}

/// Removes a waiter when `send_sync` returns, whichever way it returns.
struct WaiterGuard<'a> {
    shared: &'a Shared,
    id: MsgId,
}

// === impl Context ===

impl Context {
    pub(crate) fn new(shared: Arc<Shared>) -> Self {
        Context { shared }
    }

    /// Puts `msg` in the mailbox of `module`, waiting for room if it is full (back-pressure;
    /// never drops).
    pub async fn send(&self, module: &str, msg: Message) -> Result<(), SendError> {
        let tx = self.mailbox(module)?;
        tx.send(msg)
            .await
            .map_err(|_| SendError::ModuleStopped(module.into()))
    }

    /// Puts `msg` in the mailbox of `module` if there is room; otherwise drops it, counts the
    /// drop and logs why.
    pub fn try_send(&self, module: &str, msg: Message) -> Result<(), SendError> {
        let tx = self.mailbox(module)?;
        self.try_put(module, tx, msg)
    }

    /// Sends `msg` to every member of `group`, waiting for room in each mailbox in turn.
    ///
    /// Members receive the group messages of one sender in the order they were sent. A member
    /// that has stopped is skipped; the call fails only if no member is left.
    pub async fn send_to_group(&self, group: &str, msg: Message) -> Result<(), SendError> {
        let members = self.members(group)?;
        let mut delivered = 0usize;
        if let Some(((_, last_tx), rest)) = members.split_last() {
            for (_, tx) in rest {
                delivered += tx.send(msg.clone()).await.is_ok() as usize;
            }
            delivered += last_tx.send(msg).await.is_ok() as usize;
        }
        match delivered {
            0 => Err(SendError::ModuleStopped(group.into())),
            _ => Ok(()),
        }
    }

    /// Like [`Context::send_to_group`] but never waits: members with a full mailbox miss the
    /// message, and each miss is counted and logged.
    pub fn try_send_to_group(&self, group: &str, msg: Message) -> Result<(), SendError> {
        let members = self.members(group)?;
        for (name, tx) in members {
            let _ = self.try_put(name, tx, msg.clone());
        }
        Ok(())
    }

    /// Sends `msg` to `module` marked as sync, and waits for the response routed back by
    /// [`Context::respond`]. `timeout` covers both the wait for mailbox room and the reply.
    pub async fn send_sync(
        &self,
        module: &str,
        mut msg: Message,
        timeout: Duration,
    ) -> Result<Message, SyncError> {
        msg.header.sync = true;
        let id = msg.id();
        let tx = self
            .mailbox(module)
            .map_err(|_| SyncError::NoSuchModule(module.into()))?;
        let (reply_tx, reply_rx) = oneshot::channel();
        // Register before sending, so even an instant response finds its waiter.
        self.shared.waiters.insert(id, reply_tx);
        let _guard = WaiterGuard {
            shared: &self.shared,
            id,
        };
        let exchange = async {
            tx.send(msg)
                .await
                .map_err(|_| SyncError::ModuleStopped(module.into()))?;
            reply_rx
                .await
                .map_err(|_| SyncError::ModuleStopped(module.into()))
        };
        tokio::time::timeout(timeout, exchange)
            .await
            .unwrap_or(Err(SyncError::Timeout {
                msg_id: id,
                timeout,
            }))
    }

    /// Routes a response to the `send_sync` call waiting on its parent id. Never waits. A
    /// response nobody waits for any more is counted and logged, and returned as an error.
    pub fn respond(&self, resp: Message) -> Result<(), RespondError> {
        let parent_id = resp
            .parent_id()
            .ok_or(RespondError::NotAResponse(resp.id()))?;
        let delivered = match self.shared.waiters.remove(&parent_id) {
            Some((_, waiter)) => waiter.send(resp).is_ok(),
            None => false,
        };
        if delivered {
            return Ok(());
        }
        self.shared.late_responses.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(%parent_id, "response arrived after its waiter gave up; discarded");
        Err(RespondError::NoWaiter { parent_id })
    }

    /// True while a `send_sync` call waits for a response to `id`.
    pub fn is_waiting(&self, id: MsgId) -> bool {
        self.shared.waiters.contains_key(&id)
    }

    /// Names of the members of `group`.
    pub fn group_members(&self, group: &str) -> Vec<SmolStr> {
        self.shared
            .groups
            .get(group)
            .map(|m| m.iter().map(|(n, _)| n.clone()).collect())
            .unwrap_or_default()
    }

    /// True if a module of that name is registered.
    pub fn has_module(&self, module: &str) -> bool {
        self.shared.mailboxes.contains_key(module)
    }

    /// A snapshot of the runtime's counters.
    pub fn stats(&self) -> Stats {
        Stats {
            dropped: self.shared.dropped.load(Ordering::Relaxed),
            late_responses: self.shared.late_responses.load(Ordering::Relaxed),
        }
    }

    fn mailbox(&self, module: &str) -> Result<&mpsc::Sender<Message>, SendError> {
        self.shared
            .mailboxes
            .get(module)
            .ok_or_else(|| SendError::NoSuchModule(module.into()))
    }

    fn members(&self, group: &str) -> Result<&[(SmolStr, mpsc::Sender<Message>)], SendError> {
        match self.shared.groups.get(group) {
            Some(m) if !m.is_empty() => Ok(m),
            _ => Err(SendError::NoSuchGroup(group.into())),
        }
    }

    fn try_put(
        &self,
        module: &str,
        tx: &mpsc::Sender<Message>,
        msg: Message,
    ) -> Result<(), SendError> {
        match tx.try_send(msg) {
            Ok(()) => Ok(()),
            Err(mpsc::error::TrySendError::Full(msg)) => {
                self.shared.dropped.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(
                    module, msg_id = %msg.id(), operation = %msg.operation(),
                    resource = msg.resource(), reason = "mailbox full", "message dropped"
                );
                Err(SendError::MailboxFull(module.into()))
            }
            Err(mpsc::error::TrySendError::Closed(_)) => {
                Err(SendError::ModuleStopped(module.into()))
            }
        }
    }
}

// === impl Shared ===

impl Shared {
    pub(crate) fn new(
        mailboxes: HashMap<SmolStr, mpsc::Sender<Message>>,
        groups: HashMap<SmolStr, Vec<(SmolStr, mpsc::Sender<Message>)>>,
    ) -> Self {
        Shared {
            mailboxes,
            groups,
            waiters: DashMap::new(),
            dropped: AtomicU64::new(0),
            late_responses: AtomicU64::new(0),
        }
    }
}

impl Drop for WaiterGuard<'_> {
    fn drop(&mut self) {
        self.shared.waiters.remove(&self.id);
    }
}
