//! The one way in for the cloud's objects. Downstream writes (the cloud's inserts, updates and
//! deletes that metamanager applies as the cloud's version) arrive on a channel of their own,
//! whose sending end, [`Downstream`], only the wiring gets from [`MetaManager::downstream`]
//! and gives to the link (edgehub). Everything in metamanager's beehive mailbox is local,
//! whatever module name it claims as its source: a local module cannot write as the cloud.
//!
//! [`MetaManager::downstream`]: crate::MetaManager::downstream

use beehive::Message;
use tokio::sync::{mpsc, oneshot};

use crate::error::MetaError;

/// The sending end of metamanager's downstream queue: what the link holds to store the cloud's
/// objects. Clones share the queue; hand them to the link only.
#[derive(Clone)]
pub struct Downstream {
    tx: mpsc::Sender<FromCloud>,
}

/// A downstream write as metamanager receives it.
pub(crate) struct FromCloud {
    pub(crate) msg: Message,
    /// Where the commit report goes; `None`: to the mailbox of the module the message names as
    /// its source (edgehub, which acks the cloud once it has it).
    pub(crate) reply: Option<oneshot::Sender<Message>>,
}

// === impl Downstream ===

impl Downstream {
    pub(crate) fn new(tx: mpsc::Sender<FromCloud>) -> Self {
        Downstream { tx }
    }

    /// Queues `msg` (an insert, update or delete from the cloud), waiting for room. Once it has
    /// committed (or was refused), metamanager sends the response for it to the module named by
    /// `msg.router.source`.
    pub async fn send(&self, msg: Message) -> Result<(), MetaError> {
        let item = FromCloud { msg, reply: None };
        self.tx.send(item).await.map_err(|_| MetaError::Gone)
    }

    /// Queues `msg` and waits for its commit report: a response once it is on disk, an error
    /// response when it was refused.
    pub async fn apply(&self, msg: Message) -> Result<Message, MetaError> {
        let (reply, report) = oneshot::channel();
        let item = FromCloud {
            msg,
            reply: Some(reply),
        };
        self.tx.send(item).await.map_err(|_| MetaError::Gone)?;
        report.await.map_err(|_| MetaError::Gone)
    }
}

impl std::fmt::Debug for Downstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Downstream").finish_non_exhaustive()
    }
}
