//! What a module is: a named, grouped, restartable async task with one mailbox.

use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::context::Context;
use crate::message::Message;

/// The error a module run ends with.
pub type ModuleError = Box<dyn std::error::Error + Send + Sync>;

/// A module: the unit beehive routes messages to.
///
/// `run` is called once per start (again after a restart). It should loop on
/// `tokio::select! { biased; _ = shutdown.cancelled() => break, m = mailbox.recv() => ... }`
/// so that shutdown wins over new work while the message in hand is finished.
#[async_trait]
pub trait Module: Send + Sync + 'static {
    /// Unique name; the key of the module's mailbox.
    fn name(&self) -> &str;

    /// The group whose messages this module receives.
    fn group(&self) -> &str;

    /// Disabled modules are not started and get no mailbox.
    fn enabled(&self) -> bool {
        true
    }

    /// What to do when `run` returns or panics.
    fn restart_policy(&self) -> RestartPolicy {
        RestartPolicy::never()
    }

    /// Runs the module until it finishes, fails or `shutdown` is cancelled.
    async fn run(
        &self,
        ctx: Context,
        mailbox: &mut Mailbox,
        shutdown: CancellationToken,
    ) -> Result<(), ModuleError>;
}

/// When a module is started again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Restart {
    /// Never: the first end is final.
    Never,
    /// After an error or a panic, not after a normal return.
    OnFailure,
    /// After any end, normal or not (until shutdown).
    Always,
}

/// Restart rule with exponential backoff.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RestartPolicy {
    pub restart: Restart,
    /// Wait before the first restart.
    pub initial_backoff: Duration,
    /// Factor applied to the wait after each restart (values below 1 count as 1).
    pub multiplier: f64,
    /// Largest wait between restarts.
    pub max_backoff: Duration,
    /// Restarts allowed before giving up; `None` means no limit.
    pub max_restarts: Option<u32>,
}

/// A module's inbox. Survives restarts of the module: messages queued while it restarts wait.
pub struct Mailbox {
    rx: mpsc::Receiver<Message>,
}

// === impl RestartPolicy ===

impl RestartPolicy {
    /// Run once.
    pub const fn never() -> Self {
        RestartPolicy {
            restart: Restart::Never,
            initial_backoff: Duration::from_secs(1),
            multiplier: 2.0,
            max_backoff: Duration::from_secs(30),
            max_restarts: None,
        }
    }

    /// Restart after failures: 1 s, doubling, capped at 30 s, unlimited (KubeEdge's defaults).
    pub const fn on_failure() -> Self {
        RestartPolicy {
            restart: Restart::OnFailure,
            ..Self::never()
        }
    }

    /// Restart after every end, with the same backoff as [`RestartPolicy::on_failure`].
    pub const fn always() -> Self {
        RestartPolicy {
            restart: Restart::Always,
            ..Self::never()
        }
    }

    /// The wait before restart number `attempt` (0-based).
    pub fn backoff(&self, attempt: u32) -> Duration {
        let factor = self.multiplier.max(1.0).powi(attempt.min(64) as i32);
        let secs = self.initial_backoff.as_secs_f64() * factor;
        Duration::from_secs_f64(secs.min(self.max_backoff.as_secs_f64()))
    }
}

impl Default for RestartPolicy {
    fn default() -> Self {
        Self::never()
    }
}

// === impl Mailbox ===

impl Mailbox {
    pub(crate) fn new(rx: mpsc::Receiver<Message>) -> Self {
        Mailbox { rx }
    }

    /// The next message; `None` once every sender is gone (runtime dropped).
    pub async fn recv(&mut self) -> Option<Message> {
        self.rx.recv().await
    }

    /// Waits for at least one message, then moves up to `limit` waiting messages into `buf`;
    /// returns how many (0 once every sender is gone). Cheaper per message than `recv` in a loop.
    pub async fn recv_many(&mut self, buf: &mut Vec<Message>, limit: usize) -> usize {
        self.rx.recv_many(buf, limit).await
    }

    /// Drops every message until `shutdown` or until every sender is gone: the run of a
    /// module that only serves or spawns work and is sent nothing it acts on.
    pub async fn ignore_until(&mut self, shutdown: &CancellationToken) {
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                m = self.rx.recv() => if m.is_none() { return },
            }
        }
    }

    /// A message if one is waiting, without waiting.
    pub fn try_recv(&mut self) -> Option<Message> {
        self.rx.try_recv().ok()
    }

    /// Messages waiting right now.
    pub fn len(&self) -> usize {
        self.rx.len()
    }

    pub fn is_empty(&self) -> bool {
        self.rx.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_and_is_capped() {
        let p = RestartPolicy {
            initial_backoff: Duration::from_millis(100),
            multiplier: 2.0,
            max_backoff: Duration::from_secs(1),
            ..RestartPolicy::on_failure()
        };
        assert_eq!(p.backoff(0), Duration::from_millis(100));
        assert_eq!(p.backoff(1), Duration::from_millis(200));
        assert_eq!(p.backoff(3), Duration::from_millis(800));
        assert_eq!(p.backoff(4), Duration::from_secs(1));
        assert_eq!(p.backoff(1000), Duration::from_secs(1));
    }

    #[test]
    fn a_multiplier_below_one_keeps_the_wait_flat() {
        let p = RestartPolicy {
            multiplier: 0.5,
            ..RestartPolicy::on_failure()
        };
        assert_eq!(p.backoff(5), p.initial_backoff);
    }
}
