//! The metamanager run loop: take what is waiting on the downstream queue and in the mailbox,
//! apply the downstream writes in one transaction, then answer: acks for what committed,
//! results for queries.

use std::convert::Infallible;
use std::time::Duration;

use beehive::{
    Context, ErrorChain, Mailbox, Message, Module, ModuleError, Operation, RestartPolicy,
};
use bytes::Bytes;
use objstore::{ListOptions, Mutation, StoredObject};
use serde::Deserialize;
use tokio::sync::{Mutex, mpsc};
use tokio_util::sync::CancellationToken;

use crate::apply::{self, Outcome};
use crate::downstream::{Downstream, FromCloud};
use crate::error::MetaError;
use crate::object::{Parsed, Target};
use crate::{Config, GROUP, Handle, NAME};

/// The metamanager module.
pub struct MetaManager {
    config: Config,
    handle: Handle,
    /// Kept so the downstream queue never closes while the module exists.
    cloud_tx: mpsc::Sender<FromCloud>,
    /// The downstream queue (locked by the one running `run`; kept across restarts).
    cloud_rx: Mutex<mpsc::Receiver<FromCloud>>,
}

type Decide =
    Box<dyn FnOnce(Option<&StoredObject>, u64) -> Result<(Mutation, Outcome), Infallible> + Send>;

/// The wait before trying held writes (or a probe) again: doubles from [`Backoff::FIRST`] up to
/// [`Backoff::MAX`], so writes resume within a second of the disk having room again.
struct Backoff {
    current: Duration,
}

/// Selectors a list query may carry as JSON content (equality only).
#[derive(Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
struct ListQuery {
    label_selector: String,
    field_selector: String,
}

// === impl MetaManager ===

impl MetaManager {
    pub fn new(config: Config, handle: Handle) -> Self {
        let (cloud_tx, cloud_rx) = mpsc::channel(config.max_batch.max(1));
        MetaManager {
            config,
            handle,
            cloud_tx,
            cloud_rx: Mutex::new(cloud_rx),
        }
    }

    /// The way in for the cloud's objects: give it to the link (edgehub) and nobody else.
    /// Messages in the mailbox are local, whichever module they name as their source.
    pub fn downstream(&self) -> Downstream {
        Downstream::new(self.cloud_tx.clone())
    }

    /// Applies a batch: downstream writes first (in one transaction), then local messages.
    /// Returns the downstream writes the store could not commit, still unanswered. While
    /// writes are held (`holding`) from an earlier batch, this batch's downstream writes queue
    /// behind them (order per object holds) and only its local messages are answered: reads go
    /// on while the disk is full.
    async fn handle_batch(
        &self,
        ctx: &Context,
        downstream: Vec<FromCloud>,
        local: Vec<Message>,
        holding: bool,
    ) -> Vec<FromCloud> {
        let held = match holding {
            false => self.apply_downstream(ctx, downstream).await,
            true => downstream,
        };
        for msg in local {
            let reply = match msg.operation() {
                Operation::Query | Operation::Get | Operation::List => self.query(&msg).await,
                op if is_write(op) => self.enqueue_upstream(&msg).await,
                op => Err(MetaError::Unsupported(op.to_string())),
            };
            answer(ctx, &msg, reply).await;
        }
        held
    }

    /// Applies downstream writes in one transaction; acks each only after the commit. When the
    /// store cannot write, nothing is answered and the messages come back to be tried again.
    async fn apply_downstream(&self, ctx: &Context, msgs: Vec<FromCloud>) -> Vec<FromCloud> {
        let mut items: Vec<(objstore::ObjKey, Decide)> = Vec::with_capacity(msgs.len());
        let mut applied = Vec::with_capacity(msgs.len());
        for item in msgs {
            match decide(&item.msg) {
                Ok(decided) => {
                    items.push(decided);
                    applied.push(item);
                }
                Err(e) => {
                    let msg = &item.msg;
                    tracing::warn!(msg_id = %msg.id(), resource = msg.resource(), error = %e, "downstream message refused");
                    report(ctx, item, Err(e)).await;
                }
            }
        }
        if items.is_empty() {
            return Vec::new();
        }
        let results = match self.handle.writer().mutate_many(items).await {
            Ok(results) => results,
            Err(e) => {
                tracing::debug!(module = NAME, messages = applied.len(), error = %ErrorChain(&e), "downstream batch not committed");
                return applied;
            }
        };
        for (item, result) in applied.into_iter().zip(results) {
            let Ok(done) = result;
            let msg = &item.msg;
            tracing::debug!(msg_id = %msg.id(), resource = msg.resource(), outcome = ?done.output, "applied");
            report(ctx, item, Ok(Bytes::new())).await;
        }
        Vec::new()
    }

    /// Tries the held writes again, or probes the store when nothing is held; answers
    /// whether the store writes again.
    async fn retry(&self, ctx: &Context, held: &mut Vec<FromCloud>) -> bool {
        if held.is_empty() {
            return self.handle.writer().probe().await.is_ok();
        }
        *held = self.apply_downstream(ctx, std::mem::take(held)).await;
        held.is_empty()
    }

    async fn query(&self, msg: &Message) -> Result<Bytes, MetaError> {
        let target = Target::parse(msg.resource())?;
        let store = self.handle.store();
        if !target.name.is_empty() {
            return match store.get(&target.key()).await? {
                Some(obj) => Ok(obj.value.clone()),
                None => Ok(Bytes::from_static(b"null")),
            };
        }
        let query: ListQuery = match msg.content.is_empty() {
            true => ListQuery::default(),
            false => {
                serde_json::from_slice(&msg.content).map_err(|source| MetaError::BadContent {
                    resource: msg.resource().into(),
                    source,
                })?
            }
        };
        let mut opts = ListOptions {
            resource: target.resource.clone(),
            ..Default::default()
        };
        if !target.namespace.is_empty() {
            opts.filter.namespace = Some(target.namespace.clone());
        }
        opts.filter.labels = pairs(&query.label_selector).collect();
        if let Some((k, v)) = pairs(&query.field_selector).next() {
            opts.filter.field = Some((k, v));
        }
        let list = store.list(opts).await?;
        Ok(json_array(list.items.iter().map(|o| &o.value[..])))
    }

    /// Logs why the store cannot write, once per failed batch taken from the mailbox.
    fn report_failure(&self, held: usize) {
        let Some(e) = self.handle.store().write_failure() else {
            return;
        };
        tracing::warn!(module = NAME, error = %ErrorChain(&e), held, "edge store cannot write; downstream messages held unacknowledged and retried");
    }

    /// Queues a local write for the cloud, coalesced with an unsent one for the same target.
    async fn enqueue_upstream(&self, msg: &Message) -> Result<Bytes, MetaError> {
        let entry = crate::outbox_entry(msg)?;
        self.handle
            .writer()
            .outbox_put(entry.key, entry.payload)
            .await?;
        self.handle.notify_outbox();
        Ok(Bytes::new())
    }
}

// === impl Backoff ===

impl Backoff {
    const FIRST: Duration = Duration::from_millis(50);
    const MAX: Duration = Duration::from_secs(1);

    fn current(&self) -> Duration {
        self.current
    }

    fn grow(&mut self) {
        self.current = (self.current * 2).min(Self::MAX);
    }

    fn reset(&mut self) {
        self.current = Self::FIRST;
    }
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            current: Self::FIRST,
        }
    }
}

#[beehive::async_trait]
impl Module for MetaManager {
    fn name(&self) -> &str {
        NAME
    }

    fn group(&self) -> &str {
        GROUP
    }

    fn enabled(&self) -> bool {
        self.config.enable
    }

    fn restart_policy(&self) -> RestartPolicy {
        RestartPolicy::on_failure()
    }

    async fn run(
        &self,
        ctx: Context,
        mailbox: &mut Mailbox,
        shutdown: CancellationToken,
    ) -> Result<(), ModuleError> {
        let cancelled = shutdown.cancelled();
        tokio::pin!(cancelled);
        let max = self.config.max_batch.max(1);
        let mut cloud_rx = self.cloud_rx.lock().await;
        let (mut cloud, mut local) = (Vec::with_capacity(max), Vec::with_capacity(max));
        // Downstream writes the store could not commit yet, in arrival order. They are never
        // dropped (their seqs would stay unacked for the session) and never answered before
        // they commit; later downstream writes queue behind them so per-object order holds,
        // while local reads are still answered.
        let mut held: Vec<FromCloud> = Vec::new();
        let mut retry = Backoff::default();
        loop {
            let failing = !held.is_empty() || self.handle.store().write_failure().is_some();
            let pause = retry.current();
            tokio::select! {
                biased;
                _ = &mut cancelled => return Ok(()),
                _ = tokio::time::sleep(pause), if failing => {
                    if self.retry(&ctx, &mut held).await {
                        retry.reset();
                        tracing::info!(module = NAME, "edge store writes again");
                    } else {
                        retry.grow();
                    }
                    continue;
                }
                // A write through the handle (lwproxy, edgehub) hit the failure: start probing.
                _ = self.handle.store().write_failed(), if !failing => continue,
                _ = cloud_rx.recv_many(&mut cloud, max) => {}
                n = mailbox.recv_many(&mut local, max) => {
                    if n == 0 {
                        return Ok(());
                    }
                }
            }
            // Whichever woke us, take what waits on the other side too, so neither starves.
            take_ready(&mut cloud, max, || cloud_rx.try_recv().ok());
            take_ready(&mut local, max, || mailbox.try_recv());
            let was_held = !held.is_empty();
            let (cloud, local) = (std::mem::take(&mut cloud), std::mem::take(&mut local));
            let more = self.handle_batch(&ctx, cloud, local, was_held).await;
            held.extend(more);
            if !was_held && !held.is_empty() {
                self.report_failure(held.len());
            }
        }
    }
}

/// Adds what `next` has ready right now to `batch`, up to `max` items.
fn take_ready<T>(batch: &mut Vec<T>, max: usize, mut next: impl FnMut() -> Option<T>) {
    while batch.len() < max {
        match next() {
            Some(item) => batch.push(item),
            None => return,
        }
    }
}

fn is_write(op: &Operation) -> bool {
    matches!(
        op,
        Operation::Insert
            | Operation::Update
            | Operation::Patch
            | Operation::Delete
            | Operation::Upload
    )
}

/// Parses a downstream message into the store decision for its key.
fn decide(msg: &Message) -> Result<(objstore::ObjKey, Decide), MetaError> {
    let target = Target::parse(msg.resource())?;
    if target.name.is_empty() {
        return Err(MetaError::BadResource(msg.resource().into()));
    }
    let parsed = Parsed::from_json(msg.resource(), &msg.content)?;
    let resource = target.resource.clone();
    let decide: Decide = match msg.operation() {
        Operation::Insert | Operation::Update => {
            Box::new(move |cur, rev| Ok(apply::upsert(cur, parsed, &resource, rev)))
        }
        Operation::Delete => {
            Box::new(move |cur, _| Ok(apply::delete(cur, &parsed.uid, &parsed.resource_version)))
        }
        op => return Err(MetaError::Unsupported(op.to_string())),
    };
    Ok((target.key(), decide))
}

/// Sends the result back: through `respond` for a sync request, else to the sender's mailbox.
async fn answer(ctx: &Context, msg: &Message, result: Result<Bytes, MetaError>) {
    deliver(ctx, msg, response(msg, result)).await;
}

/// Reports a downstream write's outcome: to its waiter, or as for a local message.
async fn report(ctx: &Context, item: FromCloud, result: Result<Bytes, MetaError>) {
    let resp = response(&item.msg, result);
    match item.reply {
        Some(reply) => {
            let _ = reply.send(resp);
        }
        None => deliver(ctx, &item.msg, resp).await,
    }
}

fn response(msg: &Message, result: Result<Bytes, MetaError>) -> Message {
    match result {
        Ok(content) => msg.response(NAME, content),
        Err(e) => msg.error_response(NAME, e.to_string()),
    }
}

async fn deliver(ctx: &Context, msg: &Message, resp: Message) {
    if msg.header.sync {
        let _ = ctx.respond(resp);
    } else if ctx.has_module(&msg.router.source)
        && let Err(e) = ctx.send(&msg.router.source, resp).await
    {
        tracing::warn!(msg_id = %msg.id(), error = %e, "could not answer the sender");
    }
}

fn pairs(selector: &str) -> impl Iterator<Item = (String, String)> + '_ {
    selector
        .split(',')
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| {
            (
                k.trim().to_string(),
                v.trim_start_matches('=').trim().to_string(),
            )
        })
}

fn json_array<'a>(items: impl Iterator<Item = &'a [u8]>) -> Bytes {
    let mut out = b"[".to_vec();
    for (i, item) in items.enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(item);
    }
    out.push(b']');
    out.into()
}

#[cfg(test)]
mod tests;
