//! Kinds the node rules never send this node (namespaces, networkpolicies, events, custom
//! resources...) are not answered with an empty list: a read of one (list, watch or get) goes
//! through [`Subscriptions::layer`] first. A kind synced to this node is served from the store
//! as any other. Otherwise, with the link up, lwproxy subscribes ([`apimachinery::subscribe`]:
//! a sync request through edgehub), and the read waits (at most `subscriptionSyncTimeout`,
//! then a 504) until the cloud's answer: its initial sync is stored by metamanager (the kind
//! is synced from then on, its changes arrive downstream like any object), or its refusal is
//! the answer (403, 404; remembered for `subscriptionRefusalTtl`, and forgotten when the link
//! comes up again, as RBAC may have changed). Synced kinds are asked for again every
//! `subscriptionRenewInterval` (the cloud checks the node's RBAC again: a refusal takes the
//! kind out of the store and is the answer from then on). With the link down, a kind never synced is a 503
//! saying so. Subscriptions are kept in the edge store and asked again on every connect; one
//! unread for `subscriptionIdleTimeout` with no watch open is dropped: the cloud is told to
//! stop, and its objects leave the store.

mod path;
mod table;

use std::collections::HashSet;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use apimachinery::ApiError;
use apimachinery::subscribe::{SubscribeReply, Subscription};
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use beehive::{Context, ErrorChain, Message, Operation};
use futures::StreamExt;
use metamanager::{CloudAnswer, SubscriptionRecord};
use objstore::ObjKey;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::{HUB_MODULE, Link, MESSAGE_GROUP, NAME};

use self::table::{Admit, Table};

/// The store collection of CRDs.
const CRDS: &str = "customresourcedefinitions.apiextensions.k8s.io";

/// The subscription settings (from lwproxy's config).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Settings {
    /// How long a first read waits for the kind's initial sync.
    pub sync_timeout: Duration,
    /// Unread this long (and unwatched), a subscription is dropped.
    pub idle: Duration,
    /// How long a refusal is answered before the cloud is asked again.
    pub refusal_ttl: Duration,
    /// How long a subscribe request may wait for the cloud.
    pub request_timeout: Duration,
    /// How often a synced kind is asked for again.
    pub renew: Duration,
}

/// The subscriptions of this node; shared by the read gate and the module's tasks.
pub(crate) struct Subscriptions {
    meta: metamanager::Handle,
    link: watch::Receiver<Link>,
    ctx: OnceLock<Context>,
    settings: Settings,
    table: Mutex<Table>,
    /// Bumped whenever an answer changes the table: waiting reads look again.
    changed: watch::Sender<u64>,
    /// What lwproxy serves: a custom resource whose CRD the store holds came with the cloud's
    /// configured custom resources and is served as it is.
    registry: kapi::Registry,
    /// `(group, plural)` of the built-in kinds.
    builtins: HashSet<(String, String)>,
}

/// Counts a watch of a kind as open until its response body is dropped.
struct Open {
    subs: Arc<Subscriptions>,
    subscription: Subscription,
}

// === impl Subscriptions ===

impl std::fmt::Debug for Subscriptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Subscriptions")
            .field("counts", &self.counts())
            .finish_non_exhaustive()
    }
}

impl Subscriptions {
    pub(crate) fn new(
        meta: metamanager::Handle,
        link: watch::Receiver<Link>,
        registry: kapi::Registry,
        settings: Settings,
    ) -> Arc<Subscriptions> {
        let builtins = apimachinery::catalog::builtins()
            .into_iter()
            .map(|info| (info.group, info.plural))
            .collect();
        Arc::new(Subscriptions {
            meta,
            link,
            ctx: OnceLock::new(),
            settings,
            table: Mutex::new(Table::default()),
            changed: watch::channel(0).0,
            registry,
            builtins,
        })
    }

    /// True for a custom resource served from a CRD the store holds that came with the cloud's
    /// configured custom resources (not with a subscription).
    fn delivered_custom(&self, sub: &Subscription) -> bool {
        let key = (sub.group.clone(), sub.resource.clone());
        !self.builtins.contains(&key)
            && !self.lock().contains(sub)
            && self
                .registry
                .get(&sub.group, &sub.version, &sub.resource)
                .is_some()
    }

    /// `app` with its reads of subscribable kinds gated (see the module doc).
    pub(crate) fn layer(self: &Arc<Self>, app: axum::Router) -> axum::Router {
        app.layer(axum::middleware::from_fn_with_state(self.clone(), gate))
    }

    /// Loads the subscriptions kept in the store (their kinds are served from it). A restart
    /// counts as a read: the idle time starts again.
    pub(crate) async fn restore(&self) -> Result<(), metamanager::MetaError> {
        let records = self.meta.subscriptions().await?;
        let now = Instant::now();
        let mut table = self.lock();
        for r in records.into_iter().filter(|r| r.synced) {
            table.restore(r.subscription, now, r.pinned);
        }
        Ok(())
    }

    /// Gives the subscriptions their way to edgehub (the first context stays).
    pub(crate) fn attach(&self, ctx: Context) {
        let _ = self.ctx.set(ctx);
    }

    /// How many kinds are in each state.
    pub(crate) fn counts(&self) -> std::collections::BTreeMap<&'static str, u64> {
        self.lock().counts()
    }

    /// Renews the subscriptions on every connect and every `subscriptionRenewInterval`, and
    /// drops idle ones, until `shutdown`.
    pub(crate) async fn run(self: Arc<Self>, shutdown: CancellationToken) {
        let mut link = self.link.clone();
        let tick =
            (self.settings.idle / 4).clamp(Duration::from_millis(100), Duration::from_secs(30));
        let mut sweep = tokio::time::interval(tick);
        let mut renew = tokio::time::interval(self.settings.renew);
        renew.tick().await; // the first tick is now: the connect renews

        let mut was_up = false;
        loop {
            let up = *link.borrow_and_update() == Link::Up;
            if up && !was_up {
                let again = self.lock().reconnected();
                for sub in again {
                    tokio::spawn(self.clone().subscribe(sub));
                }
            }
            was_up = up;
            tokio::select! {
                biased;
                _ = shutdown.cancelled() => return,
                changed = link.changed() => if changed.is_err() { return },
                _ = sweep.tick() => self.sweep().await,
                _ = renew.tick() => if up {
                    let due = self.lock().renewals();
                    for sub in due {
                        tokio::spawn(self.clone().subscribe(sub));
                    }
                },
            }
        }
    }

    /// A read of `sub`: served, refused, or held until the kind is synced.
    async fn admit(self: &Arc<Self>, sub: &Subscription) -> Result<(), ApiError> {
        let online = *self.link.borrow() == Link::Up;
        let mut changed = self.changed.subscribe();
        let admit = self
            .lock()
            .admit(sub, Instant::now(), online, self.settings.refusal_ttl);
        match admit {
            Admit::Serve => return Ok(()),
            Admit::Refuse(e) => return Err(e),
            Admit::Ask => {
                tokio::spawn(self.clone().subscribe(sub.clone()));
            }
            Admit::Wait => {}
        }
        let waited = tokio::time::timeout(self.settings.sync_timeout, async {
            loop {
                if let Some(settled) = self.lock().settled(sub) {
                    return settled;
                }
                if changed.changed().await.is_err() {
                    return Err(ApiError::service_unavailable("lwproxy is stopping"));
                }
            }
        });
        waited.await.unwrap_or_else(|_| {
            Err(ApiError::timeout_after(
                format!(
                    "{} is not synced to this node yet: the cloud did not complete its initial \
                     sync within {:?}; try again",
                    sub.store_resource(),
                    self.settings.sync_timeout
                ),
                1,
            ))
        })
    }

    /// Asks the cloud for `sub` and records its answer (the initial sync stored first).
    async fn subscribe(self: Arc<Self>, sub: Subscription) {
        let answer = match self.ask(&sub, Operation::Subscribe).await {
            Ok(reply) => reply,
            Err(why) => {
                tracing::info!(resource = %sub.store_resource(), %why, "subscription not answered");
                self.lock().failed(&sub, why);
                return self.bump();
            }
        };
        let result = match answer.error() {
            Some(e) => {
                tracing::info!(resource = %sub.store_resource(), code = e.code, reason = %e.message, "subscription refused by the cloud");
                // A kind the node may no longer read leaves the store.
                if let Err(e) = self.drop_kind(&sub).await {
                    tracing::warn!(resource = %sub.store_resource(), error = %ErrorChain(&e), "a refused kind could not be removed from the edge store");
                }
                Err(e)
            }
            None => self.store_sync(&sub, answer).await,
        };
        self.lock().answered(&sub, result, Instant::now());
        self.bump();
    }

    /// Stores the cloud's initial sync of `sub` (first the CRD of a custom resource, and waits
    /// until lwproxy serves it); `Ok(pinned)`.
    async fn store_sync(
        &self,
        sub: &Subscription,
        answer: SubscribeReply,
    ) -> Result<bool, ApiError> {
        if let Some(crd) = answer.definition {
            self.store_definition(sub, crd).await?;
        }
        let record = SubscriptionRecord {
            subscription: sub.clone(),
            last_use: unix_now(),
            synced: true,
            pinned: answer.pinned,
        };
        match self.meta.sync_kind(&record, answer.objects).await {
            Ok(n) => {
                tracing::info!(resource = %sub.store_resource(), objects = n, "kind synced from the cloud");
                Ok(answer.pinned)
            }
            Err(e) => Err(ApiError::internal(format!(
                "storing the initial sync of {}: {}",
                sub.store_resource(),
                ErrorChain(&e)
            ))),
        }
    }

    /// Stores the CRD of custom resource `sub` and serves its kind.
    async fn store_definition(
        &self,
        sub: &Subscription,
        crd: serde_json::Value,
    ) -> Result<(), ApiError> {
        let key = crd_key(sub);
        // Served at once (the CRD follower, which sees the same write, does the same).
        let bytes = serde_json::to_vec(&crd).expect("a JSON value serializes");
        if let Err(e) = self
            .meta
            .write_through(key.clone(), CloudAnswer::Created(crd))
            .await
        {
            return Err(ApiError::internal(format!(
                "storing the definition of {}: {}",
                sub.store_resource(),
                ErrorChain(&e)
            )));
        }
        crate::crds::register(&self.registry, &key.name, &bytes);
        Ok(())
    }

    /// Removes what a subscription brought: the kind's objects, and the CRD of a custom
    /// resource.
    async fn drop_kind(&self, sub: &Subscription) -> Result<usize, metamanager::MetaError> {
        let removed = self.meta.drop_subscription(sub).await?;
        let key = (sub.group.clone(), sub.resource.clone());
        if !self.builtins.contains(&key) && !sub.group.is_empty() {
            let gone = CloudAnswer::Gone {
                uid: String::new(),
                resource_version: String::new(),
            };
            self.meta.write_through(crd_key(sub), gone).await?;
        }
        Ok(removed)
    }

    /// Sends a subscribe or unsubscribe for `sub`; the cloud's reply, or why there is none.
    async fn ask(&self, sub: &Subscription, op: Operation) -> Result<SubscribeReply, String> {
        let ctx = self.ctx.get().ok_or("lwproxy is not running yet")?;
        let msg = Message::new()
            .route(NAME, MESSAGE_GROUP, sub.message_resource(), op)
            .with_content(sub.to_content());
        let resp = ctx
            .send_sync(HUB_MODULE, msg, self.settings.request_timeout)
            .await
            .map_err(|e| e.to_string())?;
        let text = || String::from_utf8_lossy(&resp.content).into_owned();
        if resp.router.operation == Operation::Error {
            return Err(text());
        }
        serde_json::from_slice(&resp.content)
            .map_err(|e| format!("the cloud's answer is not a subscribe reply: {e}"))
    }

    /// Drops the idle subscriptions (while the link is up: the cloud must hear of it).
    async fn sweep(&self) {
        let online = *self.link.borrow() == Link::Up;
        let idle = self.lock().idle(Instant::now(), self.settings.idle);
        for sub in idle.into_iter().filter(|_| online) {
            if let Err(why) = self.ask(&sub, Operation::Unsubscribe).await {
                tracing::info!(resource = %sub.store_resource(), %why, "unsubscribe not answered; tried again later");
                continue;
            }
            self.lock().remove(&sub);
            match self.drop_kind(&sub).await {
                Ok(n) => {
                    tracing::info!(resource = %sub.store_resource(), objects = n, "idle subscription dropped")
                }
                Err(e) => {
                    tracing::warn!(resource = %sub.store_resource(), error = %ErrorChain(&e), "an idle kind could not be removed from the edge store")
                }
            }
            self.bump();
        }
    }

    fn bump(&self) {
        self.changed.send_modify(|n| *n += 1);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

// === impl Open ===

impl Open {
    fn new(subs: Arc<Subscriptions>, subscription: Subscription) -> Open {
        subs.lock().watching(&subscription, true, Instant::now());
        Open { subs, subscription }
    }
}

impl Drop for Open {
    fn drop(&mut self) {
        self.subs
            .lock()
            .watching(&self.subscription, false, Instant::now());
    }
}

/// The read gate.
async fn gate(State(subs): State<Arc<Subscriptions>>, req: Request, next: Next) -> Response {
    if req.method() != axum::http::Method::GET {
        return next.run(req).await;
    }
    let Some(read) = path::read_of(req.uri().path(), req.uri().query()) else {
        return next.run(req).await;
    };
    if subs.delivered_custom(&read.subscription) {
        return next.run(req).await;
    }
    if let Err(e) = subs.admit(&read.subscription).await {
        return status(&e);
    }
    let resp = next.run(req).await;
    if !read.watch || !resp.status().is_success() {
        return resp;
    }
    let open = Open::new(subs, read.subscription);
    let (parts, body) = resp.into_parts();
    let body = body.into_data_stream().map(move |chunk| {
        let _open = &open;
        chunk
    });
    Response::from_parts(parts, Body::from_stream(body))
}

/// `e` as a `Status` body.
fn status(e: &ApiError) -> Response {
    let code = StatusCode::from_u16(e.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let body = e.to_status().to_string();
    (code, [(header::CONTENT_TYPE, "application/json")], body).into_response()
}

/// Where the CRD of custom resource `sub` is stored.
fn crd_key(sub: &Subscription) -> ObjKey {
    ObjKey::new(CRDS, "", format!("{}.{}", sub.resource, sub.group))
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or_default()
}
