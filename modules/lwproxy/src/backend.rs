//! lwproxy's [`kapi::Backend`]: where a client's write goes.
//!
//! While the link is up, every write is forwarded: a [`ForwardedWrite`] (resourceVersion
//! preconditions rewritten for the cloud, see [`crate::envelope`]) goes to edgehub as a sync
//! request, and the cloud's [`ForwardedReply`] is applied to the edge store before the client
//! is answered with the object as stored, at its local revision (see [`crate::through`]). While it is
//! down, the writes a kubelet needs to keep reporting ([`LocalWrite`]) are applied to the edge
//! store and, in the same store transaction, queued for the cloud in metamanager's outbox as
//! what the client changed (a merge patch of the status write or of a lease's renew fields, or
//! the create of a lease made here: see [`local::upstream`]), so a replay never undoes what the
//! cloud changed meanwhile; every other write is a 503. A status write edgehub refuses to send (the link dropped under it) is applied
//! locally too. A write that was sent and got no answer in `forwardTimeout` (or lost its link
//! before the answer) may still be applied in the cloud: that is a 504 `Timeout` saying so,
//! as kube-apiserver answers, never a 503, which says nothing was done.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use apimachinery::forward::{self, LINK_LOST};
use apimachinery::patch::PatchType;
use apimachinery::status::OPTIMISTIC_LOCK_MSG;
use apimachinery::time::now_unix;
use apimachinery::{ApiError, ForwardedReply, ForwardedWrite};
use beehive::{Context, ErrorChain, Message, Operation, SyncError};
use bytes::Bytes;
use kapi::{Backend, DeleteOptions, WriteRequest};
use metamanager::CloudAnswer;
use objstore::{ObjKey, StoredObject};
use serde_json::Value;
use tokio::sync::watch;

use crate::echo::Answered;
use crate::envelope::{self, Change};
use crate::local::{self, LocalWrite, Subject};
use crate::tokens;
use crate::{HUB_MODULE, Link, MESSAGE_GROUP, NAME, through};

/// Tries of a local write whose object changed between read and write.
const LOCAL_ATTEMPTS: usize = 3;

/// Forwards writes to the cloud, or applies status writes locally while offline.
pub(crate) struct Forwarder {
    meta: metamanager::Handle,
    link: watch::Receiver<Link>,
    /// Set when the module runs: the way to edgehub and metamanager.
    ctx: OnceLock<Context>,
    timeout: Duration,
    /// The last answers of writes applied locally, to recognize their echo from the cloud.
    answered: Answered,
}

/// Why a forwarded write has no answer from the cloud.
enum Failure {
    /// An answer to give the client (the cloud's error, a local 409, a timeout).
    Api(ApiError),
    /// The write was not sent (no link, no edgehub, not running, edgehub refused it): a 503,
    /// nothing was applied.
    Unsent(String),
    /// The write was handed to edgehub and the link dropped before the answer: it may have
    /// been applied in the cloud.
    Unknown(String),
}

// === impl Forwarder ===

impl Forwarder {
    pub(crate) fn new(
        meta: metamanager::Handle,
        link: watch::Receiver<Link>,
        timeout: Duration,
    ) -> Arc<Forwarder> {
        Arc::new(Forwarder {
            meta,
            link,
            ctx: OnceLock::new(),
            timeout,
            answered: Answered::default(),
        })
    }

    /// Gives the backend its way into the module runtime (the first context stays).
    pub(crate) fn attach(&self, ctx: Context) {
        let _ = self.ctx.set(ctx);
    }

    fn online(&self) -> bool {
        *self.link.borrow() == Link::Up
    }

    fn context(&self) -> Result<&Context, Failure> {
        self.ctx
            .get()
            .ok_or_else(|| Failure::Unsent("lwproxy is not running yet".into()))
    }

    async fn write(
        &self,
        req: &WriteRequest<'_>,
        change: Change,
    ) -> Result<(u16, Value), ApiError> {
        check_names(req, &change)?;
        let local = LocalWrite::of(req.info, req.subresource, &change);
        let token = tokens::Ask::of(req, &change);
        if self.online() {
            match self.forward(req, &change).await {
                Ok(answer) => {
                    if let Some(ask) = &token {
                        self.keep_token(ask, &answer.1).await;
                    }
                    return Ok(answer);
                }
                Err(Failure::Api(e)) => return Err(e),
                // A token request has no effect but its answer: one kept here will do.
                Err(Failure::Unsent(reason) | Failure::Unknown(reason)) if token.is_some() => {
                    tracing::info!(account = req.name, %reason, "token request not sent; answering with the token kept here");
                }
                Err(Failure::Unsent(reason)) if local.is_none() => {
                    return Err(not_forwarded(req, &change, &reason));
                }
                Err(Failure::Unknown(reason)) if local.is_none() => {
                    return Err(may_still_complete(req, &change, &reason));
                }
                // A status write is queued as a merge patch with no resourceVersion: queuing
                // it again is harmless even if the cloud applied the first one.
                Err(Failure::Unsent(reason) | Failure::Unknown(reason)) => {
                    tracing::info!(resource = %req.info.plural, name = req.name, %reason, "status write not sent; applying it locally");
                }
            }
        }
        match (local, token) {
            (Some(write), _) => self.apply_locally(req, write, &change).await,
            (None, Some(ask)) => self.kept_token(req, &change, &ask).await,
            (None, None) => Err(self.refused_offline(req, &change).await),
        }
    }

    /// Keeps the token the cloud issued for `ask` (its `answer`), to answer the same ask while
    /// the cloud is away. A token not kept only costs that: the client has its answer.
    async fn keep_token(&self, ask: &tokens::Ask, answer: &Value) {
        let key = ask.key();
        let held = match self.held(&key).await {
            Ok(held) => held,
            Err(e) => {
                tracing::warn!(%key, error = %e.message, "kept tokens unreadable");
                return;
            }
        };
        let record = held
            .as_deref()
            .and_then(|h| serde_json::from_slice(&h.value).ok());
        let Some(record) = ask.remember(record, answer, now_unix()) else {
            return;
        };
        // Serializing plain strings and numbers cannot fail.
        let value = serde_json::to_value(&record).expect("a token record serializes");
        let based_on = held.as_deref().map(|h| h.revision);
        if let Err(e) = self.meta.put_local(key.clone(), value, based_on).await {
            tracing::warn!(%key, error = %ErrorChain(&e), "issued token not kept at the edge");
        }
    }

    /// The answer to a token request while the cloud is away: the token kept for the same
    /// ask, or a 503 saying why there is none.
    async fn kept_token(
        &self,
        req: &WriteRequest<'_>,
        change: &Change,
        ask: &tokens::Ask,
    ) -> Result<(u16, Value), ApiError> {
        let record = self.held(&ask.key()).await?;
        let record = record.and_then(|h| serde_json::from_slice::<tokens::Record>(&h.value).ok());
        let pod_key = ObjKey::new("pods", &ask.namespace, &ask.pod_name);
        let pod = self.held(&pod_key).await?;
        let pod = pod.and_then(|h| serde_json::from_slice::<Value>(&h.value).ok());
        match ask.answer_offline(record.as_ref(), pod.as_ref(), now_unix()) {
            Ok(answer) => Ok((201, answer)),
            Err(miss) => Err(ApiError::service_unavailable(format!(
                "the cloud is unreachable: this node has no link to it, and no token kept here \
                 answers the {} of {}: {}",
                change.verb(),
                target(req),
                miss.reason()
            ))),
        }
    }

    /// Why a write that cannot be made offline is refused: a create of an object this node
    /// holds is answered as the API would (409 AlreadyExists: a kubelet restarted while the
    /// cloud is away goes on from its `POST` of its Node to its status updates), anything else
    /// is the offline 503.
    async fn refused_offline(&self, req: &WriteRequest<'_>, change: &Change) -> ApiError {
        if let Change::Create(obj) = change
            && let Some(name) = obj["metadata"]["name"].as_str().filter(|n| !n.is_empty())
            && req.subresource.is_none()
            && matches!(self.held(&key(req, name)).await, Ok(Some(_)))
        {
            return ApiError::already_exists(&req.info.group, &req.info.plural, name);
        }
        offline(req, change)
    }

    /// Sends the write to the cloud, applies its answer to the edge store and returns it.
    async fn forward(
        &self,
        req: &WriteRequest<'_>,
        change: &Change,
    ) -> Result<(u16, Value), Failure> {
        let ctx = self.context()?;
        let mut write = envelope::envelope(req, change);
        let held = match req.name {
            "" => None,
            name => self.held(&key(req, name)).await.map_err(Failure::Api)?,
        };
        if let Some(held) = &held {
            let alias = self.answered.alias(held);
            if let Err(stale) = envelope::translate(&mut write, held, alias) {
                return Err(Failure::Api(stale.conflict(req, change, held)));
            }
        }
        let resource = message_resource(&key(req, write.object_name()));
        let msg = Message::new()
            .route(NAME, MESSAGE_GROUP, resource, change.operation())
            .with_content(encode(&write));
        let resp = match ctx.send_sync(HUB_MODULE, msg, self.timeout).await {
            Ok(resp) => resp,
            Err(SyncError::Timeout { timeout, .. }) => {
                let why = format!("the cloud did not answer within {timeout:?}");
                return Err(Failure::Api(may_still_complete(req, change, &why)));
            }
            Err(e) => return Err(Failure::Unsent(e.to_string())),
        };
        if resp.router.operation == Operation::Error {
            let why = text(&resp.content);
            // edgehub refuses what it cannot send, or says the link dropped under the request;
            // an error from the cloud is an answer.
            if resp.router.source == HUB_MODULE && why == LINK_LOST {
                return Err(Failure::Unknown(why));
            }
            if resp.router.source == HUB_MODULE {
                return Err(Failure::Unsent(why));
            }
            return Err(Failure::Api(not_forwarded(req, change, &why)));
        }
        let reply: ForwardedReply = serde_json::from_slice(&resp.content).map_err(|e| {
            Failure::Api(ApiError::internal(format!(
                "the cloud's answer is not a forwarded reply: {e}"
            )))
        })?;
        let answer = reply.into_result().map_err(Failure::Api)?;
        Ok(self
            .write_through(req, change, answer, held.as_deref())
            .await)
    }

    /// Applies the cloud's answer to the edge store; returns the answer for the client, at
    /// local revisions. When the store cannot take it the write still happened in the cloud:
    /// the answer goes out without the store (its version arrives downstream later).
    async fn write_through(
        &self,
        req: &WriteRequest<'_>,
        change: &Change,
        (code, body): (u16, Value),
        held: Option<&StoredObject>,
    ) -> (u16, Value) {
        let Some((name, stored)) = through::stored_as(req, change, code, &body) else {
            return (code, through::localize(body, held));
        };
        let key = key(req, &name);
        self.answered.forget(&key);
        let removed = matches!(stored, CloudAnswer::Gone { .. });
        match self.meta.write_through(key, stored).await {
            Ok(done) => (code, through::answer(req, body, removed, &done)),
            Err(e) => {
                tracing::warn!(resource = %req.info.plural, name, error = %ErrorChain(&e), "the cloud's answer could not be stored at the edge");
                (code, through::localize(body, held))
            }
        }
    }

    /// Applies a status write to the edge store and queues it for the cloud.
    async fn apply_locally(
        &self,
        req: &WriteRequest<'_>,
        write: LocalWrite,
        change: &Change,
    ) -> Result<(u16, Value), ApiError> {
        self.context().map_err(|_| offline(req, change))?;
        let name = match change {
            Change::Create(obj) => obj["metadata"]["name"].as_str().unwrap_or_default(),
            _ => req.name,
        };
        let key = key(req, name);
        let subject = Subject {
            info: req.info,
            namespace: req.namespace,
            name,
        };
        let code = if matches!(change, Change::Create(_)) {
            201
        } else {
            200
        };
        for _ in 0..LOCAL_ATTEMPTS {
            let held = self.held(&key).await?;
            let next = local::next_object(write, &subject, held.as_deref(), change)?;
            if req.dry_run {
                return Ok((code, dry_run_answer(next, held.as_deref())));
            }
            let queued = local::upstream(write, &subject, &key, held.as_deref(), &next)?;
            let based_on = held.map(|h| h.revision);
            // The change and the message that sends it commit together or not at all.
            let stored = self
                .meta
                .put_local_and_queue(key.clone(), next, based_on, &upstream(&key, &queued))
                .await
                .map_err(|e| internal("writing the edge store", &e))?;
            let Some(stored) = stored else {
                continue; // changed since it was read: read it again
            };
            self.answered.record(&stored);
            return Ok((code, answer(req, &stored)?));
        }
        Err(ApiError::conflict(
            &req.info.group,
            &req.info.plural,
            name,
            OPTIMISTIC_LOCK_MSG,
        ))
    }

    async fn held(&self, key: &ObjKey) -> Result<Option<Arc<StoredObject>>, ApiError> {
        self.meta
            .store()
            .get(key)
            .await
            .map_err(|e| internal("reading the edge store", &e))
    }
}

#[async_trait::async_trait]
impl Backend for Forwarder {
    async fn create(&self, req: &WriteRequest<'_>, obj: Value) -> Result<Value, ApiError> {
        let (_, body) = self.write(req, Change::Create(obj)).await?;
        Ok(body)
    }

    async fn update(&self, req: &WriteRequest<'_>, obj: Value) -> Result<Value, ApiError> {
        let (_, body) = self.write(req, Change::Update(obj)).await?;
        Ok(body)
    }

    async fn patch(
        &self,
        req: &WriteRequest<'_>,
        kind: PatchType,
        patch: Bytes,
    ) -> Result<Value, ApiError> {
        let (_, body) = self.write(req, Change::Patch(kind, patch)).await?;
        Ok(body)
    }

    async fn delete(
        &self,
        req: &WriteRequest<'_>,
        opts: DeleteOptions,
    ) -> Result<(u16, Value), ApiError> {
        self.write(req, Change::Delete(opts)).await
    }
}

// === helpers ===

/// Refuses (400) a write whose namespace or name could not be an object's, before it goes
/// anywhere: the cloud checks again, and acts as this node whatever it sent.
fn check_names(req: &WriteRequest<'_>, change: &Change) -> Result<(), ApiError> {
    forward::checked_namespace(req.namespace, Some(req.info.namespaced))?;
    forward::checked_name(req.name)?;
    if let Change::Create(obj) | Change::Update(obj) = change {
        let meta = &obj["metadata"];
        forward::checked_name(meta["name"].as_str().unwrap_or_default())?;
        if let Some(ns) = meta["namespace"].as_str().filter(|ns| *ns != req.namespace) {
            return Err(ApiError::bad_request(format!(
                "the namespace of the provided object ({ns:?}) does not match the namespace sent on the request ({:?})",
                req.namespace
            )));
        }
    }
    Ok(())
}

fn key(req: &WriteRequest<'_>, name: &str) -> ObjKey {
    ObjKey::new(req.info.store_resource(), req.namespace, name)
}

/// `<namespace>/<store resource>/<name>`, as metamanager and edgehub name objects.
fn message_resource(key: &ObjKey) -> String {
    format!("{}/{}/{}", key.namespace, key.resource, key.name)
}

/// The message queued in metamanager's outbox for a write made locally.
fn upstream(key: &ObjKey, write: &ForwardedWrite) -> Message {
    let operation = match write.verb.as_str() {
        "create" => Operation::Insert,
        _ => Operation::Patch,
    };
    Message::new()
        .route(NAME, MESSAGE_GROUP, message_resource(key), operation)
        .with_content(encode(write))
}

fn encode(write: &ForwardedWrite) -> Vec<u8> {
    // A ForwardedWrite is strings, options and a JSON value: it always serializes.
    serde_json::to_vec(write).expect("a forwarded write serializes")
}

/// The object as stored, with kind and apiVersion.
fn answer(req: &WriteRequest<'_>, stored: &StoredObject) -> Result<Value, ApiError> {
    through::as_stored(req, stored)
        .ok_or_else(|| ApiError::internal(format!("decoding stored {}", stored.key)))
}

/// A dry run answers what would be stored, at the held revision.
fn dry_run_answer(mut next: Value, held: Option<&StoredObject>) -> Value {
    if let (Some(held), Some(meta)) = (held, next["metadata"].as_object_mut()) {
        meta.insert(
            "resourceVersion".into(),
            Value::String(held.revision.to_string()),
        );
    }
    next
}

/// The 503 for a write that cannot be made while the node is offline.
fn offline(req: &WriteRequest<'_>, change: &Change) -> ApiError {
    ApiError::service_unavailable(format!(
        "the cloud is unreachable: this node has no link to it, so the {} of {} cannot be \
         made; while offline only pod and node status and leases are written (locally, sent \
         when the link is back)",
        change.verb(),
        target(req),
    ))
}

/// The 503 for a forwarded write the cloud did not answer.
fn not_forwarded(req: &WriteRequest<'_>, change: &Change, why: &str) -> ApiError {
    ApiError::service_unavailable(format!(
        "the {} of {} could not be made in the cloud: {why}",
        change.verb(),
        target(req),
    ))
}

/// The 504 for a write that was sent and got no answer: kube-apiserver's timeout Status
/// (`NewTimeoutError`, no `retryAfterSeconds`), saying the write may still be applied so a
/// client reads before it retries instead of making a duplicate.
fn may_still_complete(req: &WriteRequest<'_>, change: &Change, why: &str) -> ApiError {
    ApiError::timeout_after(
        format!(
            "request did not complete within requested timeout - {why}; the {} of {} was \
             sent to the cloud and may still complete: read it before trying again",
            change.verb(),
            target(req),
        ),
        0,
    )
}

/// `pods "web"`, or `a new pod` for a create.
fn target(req: &WriteRequest<'_>) -> String {
    match req.name {
        "" => format!("a new {}", req.info.singular),
        name => format!("{} {name:?}", req.info.plural),
    }
}

/// A 500 naming what failed, with its causes.
fn internal(what: &str, e: &dyn std::error::Error) -> ApiError {
    let mut message = format!("{what}: {e}");
    let mut source = e.source();
    while let Some(cause) = source {
        message.push_str(": ");
        message.push_str(&cause.to_string());
        source = cause.source();
    }
    ApiError::internal(message)
}

fn text(content: &[u8]) -> String {
    String::from_utf8_lossy(content).into_owned()
}
