//! Subscriptions ([`apimachinery::subscribe`]): a node asks for a kind the node rules never
//! send it. The request is parsed into a checked [`Subscription`]; a kind the node rules deliver
//! is refused (403: their objects reach a node only as far as those rules allow), a configured
//! custom resource is answered with what the node holds of it already (pinned). Any other kind
//! is checked against the API ([`check`]): discovery (404 when not served, 405 when it cannot
//! be listed and watched) and a SubjectAccessReview for the node's identity (`system:node:<n>`
//! in `system:nodes`), for `list` and for `watch` cluster-wide, so the API's authorizer decides
//! (403 with its reason). Then the kind is watched (one watch per kind, shared by every
//! subscribed node), and once it has listed the node is answered with every object of the kind
//! and gets its changes from then on. An unsubscribe stops the delivery; the kind's watch stops
//! with its last subscriber.

use std::sync::atomic::Ordering;
use std::time::Duration;

use apimachinery::ApiError;
use apimachinery::subscribe::{SubscribeReply, Subscription};
use beehive::{Message, Operation};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::api::PostParams;

use crate::kinds::{Kind, Scope};
use crate::state::Out;
use crate::{NAME, Run};

/// A subscription checked against the API, back in the run loop.
pub(crate) struct Checked {
    pub node: String,
    pub subscription: Subscription,
    pub msg: Message,
    /// What the API serves, or why the node may not have it.
    pub result: Result<Served, ApiError>,
}

/// A kind the API serves.
pub(crate) struct Served {
    /// Its name (from discovery).
    pub kind: String,
    /// The CustomResourceDefinition of a custom resource.
    pub definition: Option<serde_json::Value>,
}

// === impl Run ===

impl Run<'_> {
    /// A subscribe or unsubscribe from `node`.
    pub(crate) async fn on_subscription(&mut self, node: &str, msg: Message) {
        let subscription = match Subscription::parse(&msg.content) {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(node_id = %node, resource = msg.resource(), reason = %e.message, "malformed subscription from a node");
                return self.answer_subscription(&msg, SubscribeReply::refused(&e));
            }
        };
        if msg.operation() == &Operation::Unsubscribe {
            return self.unsubscribe(node, &subscription, &msg).await;
        }
        let known = self
            .state
            .find_kind(&subscription.group, &subscription.resource)
            .map(|id| (id, self.state.kind(id).scope));
        match known {
            _ if subscription.always_delivered() => {
                self.refuse_node_scoped(node, &subscription, &msg)
            }
            Some((_, Scope::Subscribed)) | None => self.check(node, subscription, msg),
            Some((id, Scope::Custom)) => {
                let objects = self
                    .state
                    .desired(node)
                    .into_iter()
                    .filter(|o| o.kind == id)
                    .filter_map(|o| serde_json::from_slice(&o.json).ok())
                    .collect();
                let reply = SubscribeReply {
                    code: 200,
                    pinned: true,
                    objects,
                    ..SubscribeReply::default()
                };
                self.answer_subscription(&msg, reply);
            }
            Some(_) => self.refuse_node_scoped(node, &subscription, &msg),
        }
    }

    /// A subscription checked at the API: refused, or the node is subscribed (answered once
    /// the kind's watch has listed).
    pub(crate) async fn on_checked(&mut self, checked: Checked) {
        let Checked {
            node,
            subscription,
            msg,
            result,
        } = checked;
        let served = match result {
            Ok(served) => served,
            Err(e) => {
                self.ctl
                    .stats
                    .refused_subscriptions
                    .fetch_add(1, Ordering::Relaxed);
                tracing::info!(node_id = %node, resource = %subscription.store_resource(), code = e.code, reason = %e.message, "subscription refused");
                // A renewal refused (RBAC changed since): the node gets the kind no more.
                self.stop_delivering(&node, &subscription).await;
                return self.answer_subscription(&msg, SubscribeReply::refused(&e));
            }
        };
        let id = match self
            .state
            .find_kind(&subscription.group, &subscription.resource)
        {
            Some(id) => id,
            None => self
                .state
                .add_kind(Kind::subscribed(&subscription, &served.kind)),
        };
        match served.definition {
            Some(crd) => self.definitions.insert(id, crd),
            None => self.definitions.remove(&id),
        };
        if !self.kind_watches.contains_key(&id) {
            let stop = self.stop_watches.child_token();
            let kind = self.state.kind(id).clone();
            crate::watch::spawn_one(
                &self.ctl.client,
                id,
                &kind,
                self.watch_tx.clone(),
                &self.watches,
                &stop,
            );
            self.kind_watches.insert(id, stop);
            self.listed.remove(&id);
        }
        match self.listed.contains(&id) {
            true => self.deliver(id, &node, &msg),
            false => self.waiting.entry(id).or_default().push((node, msg)),
        }
    }

    /// Kind `kind` listed: the nodes waiting for it get their initial sync.
    pub(crate) fn kind_listed(&mut self, kind: usize) {
        self.listed.insert(kind);
        for (node, msg) in self.waiting.remove(&kind).unwrap_or_default() {
            self.deliver(kind, &node, &msg);
        }
    }

    /// Subscribes `node` to kind `id` and answers with every object of it.
    fn deliver(&mut self, id: usize, node: &str, msg: &Message) {
        let objects = self
            .state
            .subscribe(node, id)
            .iter()
            .filter_map(|o| serde_json::from_slice(&o.json).ok())
            .collect::<Vec<serde_json::Value>>();
        self.count_subscriptions();
        tracing::info!(node_id = %node, resource = %self.state.kind(id).store_resource(), objects = objects.len(), "node subscribed");
        let reply = SubscribeReply {
            code: 200,
            objects,
            definition: self.definitions.get(&id).cloned(),
            ..SubscribeReply::default()
        };
        self.answer_subscription(msg, reply);
    }

    async fn unsubscribe(&mut self, node: &str, subscription: &Subscription, msg: &Message) {
        if self.stop_delivering(node, subscription).await {
            tracing::info!(node_id = %node, resource = %subscription.store_resource(), "node unsubscribed");
        }
        let reply = SubscribeReply {
            code: 200,
            ..SubscribeReply::default()
        };
        self.answer_subscription(msg, reply);
    }

    /// Stops sending `subscription` to `node`, and sends it a delete of every object of the
    /// kind: queued behind (and replacing, per object) any upsert still on its way, so nothing
    /// of the kind is left at the node however the messages cross. The kind's watch stops with
    /// its last subscriber. Returns whether the node was subscribed.
    async fn stop_delivering(&mut self, node: &str, subscription: &Subscription) -> bool {
        let found = self
            .state
            .find_kind(&subscription.group, &subscription.resource)
            .filter(|id| self.state.kind(*id).scope == Scope::Subscribed)
            .filter(|id| self.state.subscribed(node, *id));
        let Some(id) = found else {
            return false;
        };
        let deletes: Vec<Out> = self
            .state
            .of_kind(id)
            .into_iter()
            .map(|o| Out::Delete(node.to_owned(), o))
            .collect();
        if self.state.unsubscribe(node, id) {
            if let Some(stop) = self.kind_watches.remove(&id) {
                stop.cancel();
            }
            self.listed.remove(&id);
            tracing::info!(resource = %subscription.store_resource(), "no node subscribes to the kind any more; its watch stopped");
        }
        self.count_subscriptions();
        self.send_all(deletes).await;
        true
    }

    fn refuse_node_scoped(&self, node: &str, subscription: &Subscription, msg: &Message) {
        self.ctl
            .stats
            .refused_subscriptions
            .fetch_add(1, Ordering::Relaxed);
        let e = ApiError::forbidden(
            &subscription.group,
            &subscription.resource,
            "",
            &format!(
                "User \"system:node:{node}\" cannot subscribe to {}: a node gets them only as \
                 the node rules deliver them (what its pods use)",
                subscription.resource
            ),
        );
        tracing::warn!(node_id = %node, resource = %subscription.store_resource(), "subscription to a node-scoped kind refused");
        self.answer_subscription(msg, SubscribeReply::refused(&e));
    }

    /// Checks the subscription at the API in a task; the result comes back as [`Checked`].
    fn check(&self, node: &str, subscription: Subscription, msg: Message) {
        let (client, tx) = (self.ctl.client.clone(), self.checks_tx.clone());
        let (timeout, node) = (self.ctl.config.request_timeout, node.to_owned());
        self.tasks.spawn(async move {
            let result = check(&client, &node, &subscription, timeout).await;
            let checked = Checked {
                node,
                subscription,
                msg,
                result,
            };
            let _ = tx.send(checked).await;
        });
    }

    fn answer_subscription(&self, msg: &Message, reply: SubscribeReply) {
        if msg.header.sync {
            let _ = self.ctx.respond(msg.response(NAME, reply.to_content()));
        }
    }

    fn count_subscriptions(&self) {
        let n = self.state.subscriptions() as u64;
        self.ctl.stats.subscriptions.store(n, Ordering::Relaxed);
    }
}

/// Whether `node` may have `subscription`: served (discovery), listable and watchable, and
/// allowed by the API's authorizer for the node's identity. Returns the kind's name, with the
/// CRD of a custom resource.
async fn check(
    client: &kube::Client,
    node: &str,
    subscription: &Subscription,
    timeout: Duration,
) -> Result<Served, ApiError> {
    let not_served = || {
        ApiError::new(
            404,
            "NotFound",
            format!(
                "the server could not find the requested resource: {} is not served by the API",
                subscription.store_resource()
            ),
        )
    };
    let api_version = subscription.api_version();
    let listing = async {
        match subscription.group.is_empty() {
            true => client.list_core_api_resources(&api_version).await,
            false => client.list_api_group_resources(&api_version).await,
        }
    };
    let resources = match bounded(timeout, listing).await? {
        Ok(list) => list,
        Err(kube::Error::Api(e)) if e.code == 404 => return Err(not_served()),
        Err(e) => return Err(unreachable(&e)),
    };
    let resource = resources
        .resources
        .iter()
        .find(|r| r.name == subscription.resource)
        .ok_or_else(not_served)?;
    for verb in ["list", "watch"] {
        if !resource.verbs.iter().any(|v| v == verb) {
            return Err(ApiError::method_not_supported(verb, &subscription.resource));
        }
        allowed(client, node, subscription, verb, timeout).await?;
    }
    Ok(Served {
        kind: resource.kind.clone(),
        definition: definition(client, subscription, timeout).await?,
    })
}

/// The CRD of `subscription` when it is a custom resource (`None` for a built-in kind or an
/// aggregated API).
async fn definition(
    client: &kube::Client,
    subscription: &Subscription,
    timeout: Duration,
) -> Result<Option<serde_json::Value>, ApiError> {
    let builtin = apimachinery::catalog::builtins()
        .iter()
        .any(|i| i.group == subscription.group && i.plural == subscription.resource);
    if builtin || subscription.group.is_empty() {
        return Ok(None);
    }
    let crds = kube::core::ApiResource {
        group: "apiextensions.k8s.io".into(),
        version: "v1".into(),
        api_version: "apiextensions.k8s.io/v1".into(),
        kind: "CustomResourceDefinition".into(),
        plural: "customresourcedefinitions".into(),
    };
    let api: kube::Api<kube::api::DynamicObject> = kube::Api::all_with(client.clone(), &crds);
    let name = format!("{}.{}", subscription.resource, subscription.group);
    match bounded(timeout, api.get_opt(&name)).await? {
        Ok(Some(crd)) => {
            let mut value = serde_json::to_value(&crd).map_err(|e| {
                ApiError::internal(format!("the CRD {name} does not serialize: {e}"))
            })?;
            apimachinery::managedfields::strip(&mut value);
            Ok(Some(value))
        }
        Ok(None) => Ok(None),
        Err(e) => Err(unreachable(&e)),
    }
}

/// Asks the API whether `node` may `verb` the resource cluster-wide.
async fn allowed(
    client: &kube::Client,
    node: &str,
    subscription: &Subscription,
    verb: &str,
    timeout: Duration,
) -> Result<(), ApiError> {
    let user = format!("system:node:{node}");
    let review = SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: Some(user.clone()),
            groups: Some(vec!["system:nodes".into(), "system:authenticated".into()]),
            resource_attributes: Some(ResourceAttributes {
                group: Some(subscription.group.clone()),
                version: Some(subscription.version.clone()),
                resource: Some(subscription.resource.clone()),
                verb: Some(verb.into()),
                ..ResourceAttributes::default()
            }),
            ..SubjectAccessReviewSpec::default()
        },
        ..SubjectAccessReview::default()
    };
    let api: kube::Api<SubjectAccessReview> = kube::Api::all(client.clone());
    let answered = match bounded(timeout, api.create(&PostParams::default(), &review)).await? {
        Ok(answered) => answered,
        Err(e) => return Err(unreachable(&e)),
    };
    let status = answered.status.unwrap_or_default();
    if status.allowed && !status.denied.unwrap_or(false) {
        return Ok(());
    }
    let group = match subscription.group.as_str() {
        "" => String::new(),
        g => format!(" in API group {g:?}"),
    };
    let mut why = format!(
        "User {user:?} cannot {verb} resource {:?}{group} at the cluster scope",
        subscription.resource
    );
    if let Some(reason) = status.reason.filter(|r| !r.is_empty()) {
        why.push_str(": ");
        why.push_str(&reason);
    }
    Err(ApiError::forbidden(
        &subscription.group,
        &subscription.resource,
        "",
        &why,
    ))
}

async fn bounded<T>(timeout: Duration, f: impl Future<Output = T>) -> Result<T, ApiError> {
    tokio::time::timeout(timeout, f).await.map_err(|_| {
        ApiError::timeout(format!(
            "the Kubernetes API did not answer within {timeout:?}"
        ))
    })
}

fn unreachable(e: &kube::Error) -> ApiError {
    ApiError::service_unavailable(format!("the Kubernetes API could not answer: {e}"))
}
