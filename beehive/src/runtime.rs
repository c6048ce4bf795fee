//! Registration, start, restart and shutdown of modules.

use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use dashmap::DashMap;
use futures::FutureExt;
use smol_str::SmolStr;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::context::{Context, Shared};
use crate::error::{ErrorChain, RegisterError};
use crate::module::{Mailbox, Module, Restart};

/// Default mailbox capacity (KubeEdge's channel size).
pub const DEFAULT_MAILBOX: usize = 1024;

/// Collects modules before they start.
pub struct Runtime {
    modules: Vec<(Arc<dyn Module>, usize)>,
    default_capacity: usize,
}

/// The started runtime: a context for sending from outside the modules, and the module tasks.
pub struct Running {
    ctx: Context,
    shutdown: CancellationToken,
    tasks: Vec<(SmolStr, JoinHandle<()>)>,
    states: Arc<DashMap<SmolStr, ModuleState>>,
}

/// Where a module is in its life.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ModuleState {
    /// `run` is executing (`starts` counts runs so far, this one included).
    Running { starts: u32 },
    /// Waiting out the backoff before the next run.
    Restarting { starts: u32 },
    /// Ended for good: normal return, shutdown, policy `Never`, or out of restarts.
    Stopped { starts: u32, last: RunEnd },
}

/// How one run of a module ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RunEnd {
    Completed,
    /// The error and its whole cause chain (`outer: inner: root`).
    Failed(String),
    Panicked(String),
}

/// What a shutdown achieved.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct ShutdownReport {
    /// Modules that stopped within the grace period.
    pub stopped: Vec<SmolStr>,
    /// Modules still running when the grace period ran out (their tasks were aborted).
    pub timed_out: Vec<SmolStr>,
}

// === impl Runtime ===

impl Runtime {
    pub fn new() -> Self {
        Runtime {
            modules: Vec::new(),
            default_capacity: DEFAULT_MAILBOX,
        }
    }

    /// Mailbox capacity for modules registered without one.
    pub fn with_default_capacity(mut self, capacity: usize) -> Self {
        self.default_capacity = capacity;
        self
    }

    /// Adds a module with the default mailbox capacity. Disabled modules are logged and skipped.
    pub fn register(&mut self, module: impl Module) -> &mut Self {
        let capacity = self.default_capacity;
        self.register_with_capacity(Arc::new(module), capacity)
    }

    /// Adds a module with its own mailbox capacity.
    pub fn register_with_capacity(
        &mut self,
        module: Arc<dyn Module>,
        capacity: usize,
    ) -> &mut Self {
        if module.enabled() {
            self.modules.push((module, capacity));
        } else {
            tracing::info!(module = module.name(), "module disabled; not started");
        }
        self
    }

    /// Builds the routing table and starts every module under `shutdown`.
    pub fn start(self, shutdown: CancellationToken) -> Result<Running, RegisterError> {
        let mut mailboxes = HashMap::new();
        let mut groups: HashMap<SmolStr, Vec<_>> = HashMap::new();
        let mut receivers = Vec::with_capacity(self.modules.len());
        for (module, capacity) in &self.modules {
            let name = SmolStr::new(module.name());
            if *capacity == 0 {
                return Err(RegisterError::ZeroCapacity(name));
            }
            let (tx, rx) = mpsc::channel(*capacity);
            if mailboxes.insert(name.clone(), tx.clone()).is_some() {
                return Err(RegisterError::Duplicate(name));
            }
            groups
                .entry(SmolStr::new(module.group()))
                .or_default()
                .push((name, tx));
            receivers.push(rx);
        }
        let ctx = Context::new(Arc::new(Shared::new(mailboxes, groups)));
        let states = Arc::new(DashMap::new());
        let tasks = self
            .modules
            .into_iter()
            .zip(receivers)
            .map(|((module, _), rx)| {
                let name = SmolStr::new(module.name());
                let keeper = Keeper {
                    module,
                    ctx: ctx.clone(),
                    shutdown: shutdown.clone(),
                    states: states.clone(),
                    name: name.clone(),
                };
                let span = tracing::info_span!("module", module = %name);
                (
                    name,
                    tokio::spawn(keeper.run(Mailbox::new(rx)).instrument(span)),
                )
            })
            .collect();
        Ok(Running {
            ctx,
            shutdown,
            tasks,
            states,
        })
    }
}

impl Default for Runtime {
    fn default() -> Self {
        Self::new()
    }
}

// === impl Running ===

impl Running {
    /// A context for code outside the modules (tests, daemons) to send and ask.
    pub fn context(&self) -> Context {
        self.ctx.clone()
    }

    /// The state of a module, `None` if it is not registered.
    pub fn state(&self, module: &str) -> Option<ModuleState> {
        self.states.get(module).map(|s| s.clone())
    }

    /// Names of the modules started, in registration order.
    pub fn modules(&self) -> Vec<SmolStr> {
        self.tasks.iter().map(|(n, _)| n.clone()).collect()
    }

    /// Cancels the shutdown token and waits up to `grace` for every module to stop. Modules still
    /// running then are aborted and named in the report.
    pub async fn shutdown(self, grace: Duration) -> ShutdownReport {
        self.shutdown.cancel();
        self.join(grace).await
    }

    /// Waits for every module to stop (after an external cancel of the shutdown token), up to
    /// `grace` from now.
    pub async fn join(self, grace: Duration) -> ShutdownReport {
        let deadline = tokio::time::Instant::now() + grace;
        let mut report = ShutdownReport::default();
        for (name, mut task) in self.tasks {
            match tokio::time::timeout_at(deadline, &mut task).await {
                Ok(_) => report.stopped.push(name),
                Err(_) => {
                    tracing::warn!(module = %name, ?grace, "module did not stop within the grace period; aborted");
                    task.abort();
                    report.timed_out.push(name);
                }
            }
        }
        report
    }
}

/// Runs one module, restarting it as its policy says.
struct Keeper {
    module: Arc<dyn Module>,
    ctx: Context,
    shutdown: CancellationToken,
    states: Arc<DashMap<SmolStr, ModuleState>>,
    name: SmolStr,
}

impl Keeper {
    async fn run(self, mut mailbox: Mailbox) {
        let policy = self.module.restart_policy();
        let mut starts = 0u32;
        loop {
            starts += 1;
            self.set(ModuleState::Running { starts });
            let end = self.run_once(&mut mailbox).await;
            let again = match (&end, policy.restart) {
                (_, Restart::Always)
                | (RunEnd::Failed(_) | RunEnd::Panicked(_), Restart::OnFailure) => {
                    !self.shutdown.is_cancelled()
                }
                _ => false,
            };
            let restarts = starts - 1;
            let exhausted = policy.max_restarts.is_some_and(|max| restarts >= max);
            if !again || exhausted {
                if again {
                    tracing::error!(
                        module = %self.name,
                        restarts,
                        "module failed and has no restarts left; it stays stopped"
                    );
                }
                self.set(ModuleState::Stopped { starts, last: end });
                return;
            }
            let wait = policy.backoff(restarts);
            tracing::warn!(
                module = %self.name,
                ?end,
                ?wait,
                restarts,
                "module ended; restarting after backoff"
            );
            self.set(ModuleState::Restarting { starts });
            tokio::select! {
                biased;
                _ = self.shutdown.cancelled() => {
                    self.set(ModuleState::Stopped { starts, last: end });
                    return;
                }
                _ = tokio::time::sleep(wait) => {}
            }
        }
    }

    async fn run_once(&self, mailbox: &mut Mailbox) -> RunEnd {
        let run = self
            .module
            .run(self.ctx.clone(), mailbox, self.shutdown.clone());
        match AssertUnwindSafe(run).catch_unwind().await {
            Ok(Ok(())) => RunEnd::Completed,
            Ok(Err(e)) => {
                let error = ErrorChain(e.as_ref()).to_string();
                tracing::error!(module = %self.name, %error, "module failed");
                RunEnd::Failed(error)
            }
            Err(panic) => {
                let what = panic_message(panic.as_ref());
                tracing::error!(module = %self.name, panic = %what, "module panicked");
                RunEnd::Panicked(what)
            }
        }
    }

    fn set(&self, state: ModuleState) {
        self.states.insert(self.name.clone(), state);
    }
}

fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        s.to_string()
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic payload".to_string()
    }
}

#[cfg(test)]
mod tests;
