//! The metamanager run loop: take a batch from the mailbox, apply the downstream writes in one
//! transaction, then answer: acks for what committed, results for queries.

use std::convert::Infallible;

use beehive::{Context, Mailbox, Message, Module, ModuleError, Operation, RestartPolicy};
use bytes::Bytes;
use objstore::{ListOptions, Mutation, StoredObject};
use serde::Deserialize;
use tokio_util::sync::CancellationToken;

use crate::apply::{self, Outcome};
use crate::error::MetaError;
use crate::object::{Parsed, Target};
use crate::{Config, GROUP, HUB_MODULE, Handle, NAME};

/// The metamanager module.
pub struct MetaManager {
    config: Config,
    handle: Handle,
}

type Decide =
    Box<dyn FnOnce(Option<&StoredObject>, u64) -> Result<(Mutation, Outcome), Infallible> + Send>;

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
        MetaManager { config, handle }
    }

    async fn handle_batch(&self, ctx: &Context, batch: Vec<Message>) -> Result<(), MetaError> {
        let (downstream, local): (Vec<_>, Vec<_>) = batch
            .into_iter()
            .partition(|m| m.router.source == HUB_MODULE && is_write(m.operation()));
        self.apply_downstream(ctx, downstream).await?;
        for msg in local {
            let reply = match msg.operation() {
                Operation::Query | Operation::Get | Operation::List => self.query(&msg).await,
                op if is_write(op) => self.enqueue_upstream(&msg).await,
                op => Err(MetaError::Unsupported(op.to_string())),
            };
            answer(ctx, &msg, reply).await;
        }
        Ok(())
    }

    /// Applies downstream writes in one transaction; acks each only after the commit.
    async fn apply_downstream(&self, ctx: &Context, msgs: Vec<Message>) -> Result<(), MetaError> {
        let mut items: Vec<(objstore::ObjKey, Decide)> = Vec::with_capacity(msgs.len());
        let mut applied = Vec::with_capacity(msgs.len());
        for msg in msgs {
            match decide(&msg) {
                Ok(item) => {
                    items.push(item);
                    applied.push(msg);
                }
                Err(e) => {
                    tracing::warn!(msg_id = %msg.id(), resource = msg.resource(), error = %e, "downstream message refused");
                    answer(ctx, &msg, Err(e)).await;
                }
            }
        }
        if items.is_empty() {
            return Ok(());
        }
        let results = self.handle.store().mutate_many(items).await?;
        for (msg, result) in applied.iter().zip(results) {
            let Ok(done) = result;
            tracing::debug!(msg_id = %msg.id(), resource = msg.resource(), outcome = ?done.output, "applied");
            answer(ctx, msg, Ok(Bytes::new())).await;
        }
        Ok(())
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

    /// Queues a local write for the cloud, coalesced with an unsent one for the same target.
    async fn enqueue_upstream(&self, msg: &Message) -> Result<Bytes, MetaError> {
        Target::parse(msg.resource())?;
        let key = format!("{}:{}", msg.operation(), msg.resource());
        // The local sender has its answer (this one); the queued copy is fire-and-forget, so the
        // cloud acks it without sending a reply back down.
        let mut queued = msg.clone();
        queued.header.sync = false;
        self.handle
            .store()
            .outbox_put(key, beehive::codec::encode(&queued).into())
            .await?;
        self.handle.notify_outbox();
        Ok(Bytes::new())
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
        let mut batch = Vec::with_capacity(max);
        loop {
            let n = tokio::select! {
                biased;
                _ = &mut cancelled => return Ok(()),
                n = mailbox.recv_many(&mut batch, max) => n,
            };
            if n == 0 {
                return Ok(());
            }
            // A store failure ends this run unacked; the cloud resends what was not acked.
            self.handle_batch(&ctx, std::mem::take(&mut batch)).await?;
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
    let resp = match result {
        Ok(content) => msg.response(NAME, content),
        Err(e) => msg.error_response(NAME, e.to_string()),
    };
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
