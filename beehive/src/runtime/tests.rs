use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use tokio::sync::mpsc;

use super::*;
use crate::error::{RespondError, SendError, SyncError};
use crate::message::{Message, Operation};
use crate::module::{ModuleError, RestartPolicy};

/// Forwards every message it receives to a test channel; answers sync messages with "pong".
struct Probe {
    name: &'static str,
    group: &'static str,
    out: mpsc::UnboundedSender<Message>,
}

#[async_trait::async_trait]
impl Module for Probe {
    fn name(&self) -> &str {
        self.name
    }
    fn group(&self) -> &str {
        self.group
    }
    async fn run(
        &self,
        ctx: Context,
        mb: &mut Mailbox,
        shutdown: CancellationToken,
    ) -> Result<(), ModuleError> {
        loop {
            tokio::select! {
                biased;
                _ = shutdown.cancelled() => return Ok(()),
                m = mb.recv() => {
                    let Some(m) = m else { return Ok(()) };
                    if m.header.sync {
                        let _ = ctx.respond(m.response(self.name, &b"pong"[..]));
                    }
                    let _ = self.out.send(m);
                }
            }
        }
    }
}

/// Fails (or panics) every run, counting its starts.
struct Flaky {
    starts: Arc<AtomicU32>,
    panic: bool,
    policy: RestartPolicy,
}

#[async_trait::async_trait]
impl Module for Flaky {
    fn name(&self) -> &str {
        "flaky"
    }
    fn group(&self) -> &str {
        "test"
    }
    fn restart_policy(&self) -> RestartPolicy {
        self.policy
    }
    async fn run(
        &self,
        _: Context,
        _: &mut Mailbox,
        _: CancellationToken,
    ) -> Result<(), ModuleError> {
        self.starts.fetch_add(1, Ordering::SeqCst);
        if self.panic {
            panic!("flaky module panics on purpose");
        }
        Err("flaky module fails on purpose".into())
    }
}

/// Ignores shutdown and never returns.
struct Stubborn;

#[async_trait::async_trait]
impl Module for Stubborn {
    fn name(&self) -> &str {
        "stubborn"
    }
    fn group(&self) -> &str {
        "test"
    }
    async fn run(
        &self,
        _: Context,
        _: &mut Mailbox,
        _: CancellationToken,
    ) -> Result<(), ModuleError> {
        std::future::pending::<()>().await;
        Ok(())
    }
}

fn probe(name: &'static str, group: &'static str) -> (Probe, mpsc::UnboundedReceiver<Message>) {
    let (out, rx) = mpsc::unbounded_channel();
    (Probe { name, group, out }, rx)
}

fn msg(n: u32) -> Message {
    Message::new()
        .route("test", "g", format!("default/pod/p{n}"), Operation::Update)
        .with_content(n.to_be_bytes().to_vec())
}

fn number(m: &Message) -> u32 {
    u32::from_be_bytes(m.content[..4].try_into().unwrap())
}

#[tokio::test]
async fn messages_to_one_module_arrive_in_send_order() {
    let (a, mut rx) = probe("a", "g");
    let mut rt = Runtime::new().with_default_capacity(8);
    rt.register(a);
    let running = rt.start(CancellationToken::new()).unwrap();
    let ctx = running.context();
    let sender = tokio::spawn(async move {
        for i in 0..1000 {
            ctx.send("a", msg(i)).await.unwrap();
        }
    });
    for i in 0..1000 {
        assert_eq!(number(&rx.recv().await.unwrap()), i);
    }
    sender.await.unwrap();
    running.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test]
async fn every_group_member_sees_group_messages_in_send_order() {
    let mut rt = Runtime::new().with_default_capacity(4);
    let mut outs = Vec::new();
    for name in ["m1", "m2", "m3"] {
        let (p, rx) = probe(name, "bus");
        rt.register(p);
        outs.push(rx);
    }
    let (other, mut other_rx) = probe("other", "elsewhere");
    rt.register(other);
    let running = rt.start(CancellationToken::new()).unwrap();
    let ctx = running.context();
    assert_eq!(ctx.group_members("bus"), ["m1", "m2", "m3"]);
    tokio::spawn(async move {
        for i in 0..500 {
            ctx.send_to_group("bus", msg(i)).await.unwrap();
        }
    });
    for rx in &mut outs {
        for i in 0..500 {
            assert_eq!(number(&rx.recv().await.unwrap()), i);
        }
    }
    assert!(
        other_rx.try_recv().is_err(),
        "a module outside the group got a group message"
    );
    running.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test]
async fn sending_to_unknown_names_is_a_typed_error() {
    let running = Runtime::new().start(CancellationToken::new()).unwrap();
    let ctx = running.context();
    assert_eq!(
        ctx.send("nope", msg(0)).await,
        Err(SendError::NoSuchModule("nope".into()))
    );
    assert_eq!(
        ctx.send_to_group("nope", msg(0)).await,
        Err(SendError::NoSuchGroup("nope".into()))
    );
    let err = ctx
        .send_sync("nope", msg(0), Duration::from_secs(1))
        .await
        .unwrap_err();
    assert_eq!(err, SyncError::NoSuchModule("nope".into()));
}

#[tokio::test]
async fn send_sync_returns_the_response_routed_by_parent_id() {
    let (a, _rx) = probe("a", "g");
    let mut rt = Runtime::new();
    rt.register(a);
    let running = rt.start(CancellationToken::new()).unwrap();
    let ctx = running.context();
    let req = msg(7);
    let id = req.id();
    let resp = ctx
        .send_sync("a", req, Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(resp.parent_id(), Some(id));
    assert_eq!(&resp.content[..], b"pong");
    assert!(!ctx.is_waiting(id));
    assert_eq!(ctx.stats().late_responses, 0);
}

#[tokio::test(start_paused = true)]
async fn send_sync_times_out_and_a_late_response_is_counted_without_blocking() {
    // The mailbox is never read: the request sits there until the waiter gives up.
    let mut rt = Runtime::new();
    rt.register(Stubborn);
    let running = rt.start(CancellationToken::new()).unwrap();
    let ctx = running.context();
    let req = msg(1);
    let late = req.response("stubborn", &b"too late"[..]);
    let err = ctx
        .send_sync("stubborn", req, Duration::from_millis(50))
        .await
        .unwrap_err();
    assert!(matches!(err, SyncError::Timeout { .. }), "{err:?}");
    let err = ctx.respond(late.clone()).unwrap_err();
    assert!(matches!(err, RespondError::NoWaiter { .. }));
    assert_eq!(ctx.stats().late_responses, 1);
    let mut not_a_response = late;
    not_a_response.header.parent_id = None;
    assert!(matches!(
        ctx.respond(not_a_response),
        Err(RespondError::NotAResponse(_))
    ));
    let report = running.shutdown(Duration::from_millis(10)).await;
    assert_eq!(report.timed_out, ["stubborn"]);
}

#[tokio::test(start_paused = true)]
async fn send_sync_times_out_while_waiting_for_mailbox_room() {
    let mut rt = Runtime::new().with_default_capacity(1);
    rt.register(Stubborn);
    let running = rt.start(CancellationToken::new()).unwrap();
    let ctx = running.context();
    ctx.send("stubborn", msg(0)).await.unwrap();
    let err = ctx
        .send_sync("stubborn", msg(1), Duration::from_millis(20))
        .await
        .unwrap_err();
    assert!(matches!(err, SyncError::Timeout { .. }));
    running.shutdown(Duration::from_millis(1)).await;
}

#[tokio::test]
async fn try_send_to_a_full_mailbox_drops_and_counts() {
    let mut rt = Runtime::new().with_default_capacity(2);
    rt.register(Stubborn);
    let running = rt.start(CancellationToken::new()).unwrap();
    let ctx = running.context();
    ctx.try_send("stubborn", msg(0)).unwrap();
    ctx.try_send("stubborn", msg(1)).unwrap();
    assert_eq!(
        ctx.try_send("stubborn", msg(2)),
        Err(SendError::MailboxFull("stubborn".into()))
    );
    ctx.try_send_to_group("test", msg(3)).unwrap();
    assert_eq!(ctx.stats().dropped, 2);
    running.shutdown(Duration::from_millis(1)).await;
}

#[tokio::test]
async fn a_module_that_stopped_for_good_refuses_messages() {
    let starts = Arc::new(AtomicU32::new(0));
    let mut rt = Runtime::new();
    rt.register(Flaky {
        starts: starts.clone(),
        panic: false,
        policy: RestartPolicy::never(),
    });
    let running = rt.start(CancellationToken::new()).unwrap();
    let ctx = running.context();
    let stopped = async {
        loop {
            if let Err(e) = ctx.send("flaky", msg(0)).await {
                return e;
            }
            tokio::task::yield_now().await;
        }
    };
    let err = tokio::time::timeout(Duration::from_secs(5), stopped)
        .await
        .unwrap();
    assert_eq!(err, SendError::ModuleStopped("flaky".into()));
    assert!(matches!(
        running.state("flaky"),
        Some(ModuleState::Stopped {
            starts: 1,
            last: RunEnd::Failed(_)
        })
    ));
    let err = ctx
        .send_sync("flaky", msg(0), Duration::from_secs(1))
        .await
        .unwrap_err();
    assert_eq!(err, SyncError::ModuleStopped("flaky".into()));
}

#[tokio::test(start_paused = true)]
async fn a_panicking_module_is_restarted_with_backoff_up_to_its_limit() {
    let starts = Arc::new(AtomicU32::new(0));
    let policy = RestartPolicy {
        initial_backoff: Duration::from_millis(100),
        multiplier: 2.0,
        max_backoff: Duration::from_millis(300),
        max_restarts: Some(3),
        ..RestartPolicy::on_failure()
    };
    let mut rt = Runtime::new();
    rt.register(Flaky {
        starts: starts.clone(),
        panic: true,
        policy,
    });
    let t0 = tokio::time::Instant::now();
    let running = rt.start(CancellationToken::new()).unwrap();
    let stopped = async {
        loop {
            if let Some(ModuleState::Stopped { starts, last }) = running.state("flaky") {
                return (starts, last);
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    };
    let (n, last) = tokio::time::timeout(Duration::from_secs(5), stopped)
        .await
        .unwrap();
    assert_eq!(n, 4, "one start and three restarts");
    assert_eq!(starts.load(Ordering::SeqCst), 4);
    assert_eq!(
        last,
        RunEnd::Panicked("flaky module panics on purpose".into())
    );
    // Backoffs: 100 + 200 + 300 (capped) = 600 ms of virtual time.
    let waited = t0.elapsed();
    assert!(
        waited >= Duration::from_millis(600) && waited < Duration::from_millis(700),
        "{waited:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn shutdown_interrupts_a_restart_backoff() {
    let starts = Arc::new(AtomicU32::new(0));
    let policy = RestartPolicy {
        initial_backoff: Duration::from_secs(3600),
        ..RestartPolicy::always()
    };
    let mut rt = Runtime::new();
    rt.register(Flaky {
        starts: starts.clone(),
        panic: false,
        policy,
    });
    let running = rt.start(CancellationToken::new()).unwrap();
    while running.state("flaky") != Some(ModuleState::Restarting { starts: 1 }) {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let report = running.shutdown(Duration::from_secs(1)).await;
    assert_eq!(report.stopped, ["flaky"]);
    assert!(report.timed_out.is_empty());
    assert_eq!(starts.load(Ordering::SeqCst), 1);
}

/// Takes a message, then works on it for a while before reporting it done.
struct Slow {
    done: mpsc::UnboundedSender<u32>,
}

#[async_trait::async_trait]
impl Module for Slow {
    fn name(&self) -> &str {
        "slow"
    }
    fn group(&self) -> &str {
        "test"
    }
    async fn run(
        &self,
        _: Context,
        mb: &mut Mailbox,
        shutdown: CancellationToken,
    ) -> Result<(), ModuleError> {
        loop {
            let m = tokio::select! {
                biased;
                _ = shutdown.cancelled() => return Ok(()),
                m = mb.recv() => m,
            };
            let Some(m) = m else { return Ok(()) };
            tokio::time::sleep(Duration::from_millis(100)).await;
            let _ = self.done.send(number(&m));
        }
    }
}

#[tokio::test(start_paused = true)]
async fn shutdown_lets_the_message_in_hand_finish_and_reports_stragglers() {
    let (done, mut done_rx) = mpsc::unbounded_channel();
    let mut rt = Runtime::new();
    rt.register(Slow { done });
    rt.register(Stubborn);
    let running = rt.start(CancellationToken::new()).unwrap();
    let ctx = running.context();
    ctx.send("slow", msg(1)).await.unwrap();
    ctx.send("slow", msg(2)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(10)).await; // "slow" now holds message 1
    let report = running.shutdown(Duration::from_secs(1)).await;
    assert_eq!(report.stopped, ["slow"]);
    assert_eq!(report.timed_out, ["stubborn"]);
    assert_eq!(
        done_rx.recv().await,
        Some(1),
        "the message in hand was finished"
    );
    assert_eq!(
        done_rx.recv().await,
        None,
        "no new message was taken after shutdown"
    );
}

struct Off;

#[async_trait::async_trait]
impl Module for Off {
    fn name(&self) -> &str {
        "off"
    }
    fn group(&self) -> &str {
        "test"
    }
    fn enabled(&self) -> bool {
        false
    }
    async fn run(
        &self,
        _: Context,
        _: &mut Mailbox,
        _: CancellationToken,
    ) -> Result<(), ModuleError> {
        unreachable!("a disabled module is never run")
    }
}

#[tokio::test]
async fn disabled_modules_get_no_mailbox_and_duplicates_are_refused() {
    let mut rt = Runtime::new();
    rt.register(Off);
    let running = rt.start(CancellationToken::new()).unwrap();
    assert!(!running.context().has_module("off"));
    assert!(running.modules().is_empty());

    let mut rt = Runtime::new();
    rt.register(Stubborn).register(Stubborn);
    let err = rt.start(CancellationToken::new()).err().unwrap();
    assert_eq!(err, RegisterError::Duplicate("stubborn".into()));
}

/// An error with a cause, as a module's store errors are.
#[derive(Debug, thiserror::Error)]
#[error("edge store")]
struct Outer(#[source] std::io::Error);

/// Fails once with [`Outer`].
struct Chained;

#[async_trait::async_trait]
impl Module for Chained {
    fn name(&self) -> &str {
        "chained"
    }
    fn group(&self) -> &str {
        "test"
    }
    async fn run(
        &self,
        _: Context,
        _: &mut Mailbox,
        _: CancellationToken,
    ) -> Result<(), ModuleError> {
        Err(Outer(std::io::Error::other("database or disk is full")).into())
    }
}

#[tokio::test]
async fn a_failed_run_is_reported_with_its_whole_cause_chain() {
    let mut rt = Runtime::new();
    rt.register(Chained);
    let running = rt.start(CancellationToken::new()).unwrap();
    let stopped = async {
        loop {
            if let Some(ModuleState::Stopped { last, .. }) = running.state("chained") {
                return last;
            }
            tokio::task::yield_now().await;
        }
    };
    let last = tokio::time::timeout(Duration::from_secs(5), stopped)
        .await
        .unwrap();
    assert_eq!(
        last,
        RunEnd::Failed("edge store: database or disk is full".into())
    );
}
