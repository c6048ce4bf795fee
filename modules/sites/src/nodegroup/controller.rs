//! The NodeGroup controller's I/O: kube-runtime's `Controller` over NodeGroups, requeued by
//! Node changes; each reconcile applies a [`plan`](super::plan) (label patches, evictions,
//! status) and a finalizer makes a group's deletion release its nodes first.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::{StreamExt, future};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Resource, ResourceExt};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::plan::{self, GroupView, LabelPatch, NodeView};
use super::types::{NodeGroup, ReadyStatus};
use crate::{BELONGING_TO, FIELD_MANAGER};

/// The finalizer that holds a deleted NodeGroup until its nodes are released.
pub const FINALIZER: &str = "apps.kubeedge.io/nodegroup-controller";

/// How long a reconciled group waits before it is looked at again with no change seen. Short:
/// a Node change is seen by the controller's trigger watch and by the node cache the reconcile
/// reads through two watches, so a reconcile can run on a cache a moment behind its trigger and
/// decide nothing; the next resync sees the change (one shared cache for both is the fix).
const RESYNC: Duration = Duration::from_secs(10);

/// The first and the longest wait before a failed reconcile is retried.
const BACKOFF: (Duration, Duration) = (Duration::from_millis(500), Duration::from_secs(300));

/// Why a reconcile failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A request to the Kubernetes API failed.
    #[error("{what}: {source}")]
    Api {
        /// What was being done.
        what: String,
        #[source]
        source: kube::Error,
    },
}

/// What every reconcile shares.
struct Ctx {
    client: kube::Client,
    nodes: Store<Node>,
    groups: Store<NodeGroup>,
    /// Group → nodes that left it whose group pods may still have to go (kept until done, so
    /// a failed delete is retried although the node no longer carries the label).
    pending: Mutex<BTreeMap<String, BTreeSet<String>>>,
    /// Group → consecutive failed reconciles (the back-off exponent).
    failures: Mutex<HashMap<String, u32>>,
}

/// Reconciles NodeGroups until `shutdown`.
pub async fn run(client: kube::Client, shutdown: CancellationToken) {
    let nodes_api = Api::<Node>::all(client.clone());
    let (nodes, writer) = reflector::store();
    let node_cache = reflector::reflector(
        writer,
        watcher(nodes_api.clone(), watcher::Config::default()),
    )
    .default_backoff()
    .for_each(|_| future::ready(()));
    let stop = shutdown.clone();
    let node_cache = tokio::spawn(async move {
        tokio::select! {
            _ = node_cache => {}
            _ = stop.cancelled() => {}
        }
    });
    tokio::select! {
        _ = shutdown.cancelled() => {}
        ready = nodes.wait_until_ready() => if ready.is_ok() {
            controller(client, nodes_api, nodes, shutdown.clone()).await;
        }
    }
    let _ = node_cache.await;
}

/// Runs the controller over NodeGroups, with `nodes` (synced) for the reconciles.
async fn controller(
    client: kube::Client,
    nodes_api: Api<Node>,
    nodes: Store<Node>,
    shutdown: CancellationToken,
) {
    let groups_api = Api::<NodeGroup>::all(client.clone());
    let controller = Controller::new(groups_api, watcher::Config::default());
    let groups = controller.store();
    let ctx = Arc::new(Ctx {
        client,
        nodes,
        groups: groups.clone(),
        pending: Mutex::default(),
        failures: Mutex::default(),
    });
    controller
        .watches(nodes_api, watcher::Config::default(), move |node: Node| {
            groups_of(&groups, &node)
        })
        .graceful_shutdown_on(shutdown.cancelled_owned())
        .run(reconcile, error_policy, ctx)
        .for_each(|result| {
            if let Err(e) = result {
                tracing::debug!(error = %e, "nodegroup controller");
            }
            future::ready(())
        })
        .await;
}

/// The groups a Node change concerns (see [`plan::concerns`]).
fn groups_of(groups: &Store<NodeGroup>, node: &Node) -> Vec<ObjectRef<NodeGroup>> {
    let name = node.name_any();
    groups
        .state()
        .iter()
        .filter(|g| plan::concerns(g, &name, node.labels()))
        .map(|g| ObjectRef::from_obj(g.as_ref()))
        .collect()
}

async fn reconcile(group: Arc<NodeGroup>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    let held = group.finalizers().iter().any(|f| f == FINALIZER);
    let action = match (group.metadata.deletion_timestamp.is_some(), held) {
        (false, true) => apply(&group, &ctx, false).await?,
        // The update that adds the finalizer brings the group back.
        (false, false) => {
            hold(&ctx.client, &group, true).await?;
            Action::await_change()
        }
        (true, true) => {
            apply(&group, &ctx, true).await?;
            hold(&ctx.client, &group, false).await?;
            Action::await_change()
        }
        (true, false) => Action::await_change(),
    };
    lock(&ctx.failures).remove(&group.name_any());
    Ok(action)
}

/// Adds (`true`) or removes [`FINALIZER`], keeping the others: a merge patch of the list with
/// the group's resourceVersion as precondition, so a concurrent change to the list is not lost.
/// (Not a JSON patch with a `test` of the absent list, as kube-runtime's `finalizer` helper
/// sends: the embedded control plane refuses a `test` of a missing path.)
async fn hold(client: &kube::Client, group: &NodeGroup, on: bool) -> Result<(), Error> {
    let mut finalizers: Vec<&str> = group
        .finalizers()
        .iter()
        .map(String::as_str)
        .filter(|f| *f != FINALIZER)
        .collect();
    if on {
        finalizers.push(FINALIZER);
    }
    let name = group.name_any();
    let body = json!({"metadata": {
        "finalizers": finalizers,
        "resourceVersion": group.metadata.resource_version,
    }});
    let api = Api::<NodeGroup>::all(client.clone());
    match api
        .patch(&name, &PatchParams::default(), &Patch::Merge(&body))
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 && !on => Ok(()),
        Err(source) => Err(Error::Api {
            what: format!("updating the finalizers of NodeGroup {name}"),
            source,
        }),
    }
}

/// Retries a failed group with exponential back-off.
fn error_policy(group: Arc<NodeGroup>, error: &Error, ctx: Arc<Ctx>) -> Action {
    let name = group.name_any();
    let mut failures = lock(&ctx.failures);
    let n = failures.entry(name.clone()).or_default();
    *n = n.saturating_add(1);
    let wait = backoff(*n);
    tracing::warn!(nodegroup = %name, error = %error, retry_in = ?wait, "reconciling the NodeGroup failed");
    Action::requeue(wait)
}

/// The wait before retry after `failures` consecutive failures: doubling from the first
/// [`BACKOFF`] to the longest.
fn backoff(failures: u32) -> Duration {
    let doublings = failures.saturating_sub(1).min(31);
    BACKOFF.0.saturating_mul(1 << doublings).min(BACKOFF.1)
}

/// One reconcile of `group`: labels, evictions, then the status (unless it is being deleted,
/// when every member is released).
async fn apply(group: &NodeGroup, ctx: &Ctx, deleting: bool) -> Result<Action, Error> {
    let name = group.name_any();
    let nodes = ctx.nodes.state();
    let view = GroupView {
        name: &name,
        spec: &group.spec,
        deleting,
    };
    let exists = |g: &str| ctx.groups.get(&ObjectRef::new(g)).is_some();
    let plan = plan::plan(view, nodes.iter().map(|n| node_view(n)), exists);
    for patch in &plan.patches {
        label(&ctx.client, &name, patch).await?;
    }
    lock(&ctx.pending)
        .entry(name.clone())
        .or_default()
        .extend(plan.leaving.iter().cloned());
    evict(ctx, &name, &plan.leaving).await?;
    if deleting {
        return Ok(Action::await_change());
    }
    if group.status.as_ref() != Some(&plan.status) {
        let api = Api::<NodeGroup>::all(ctx.client.clone());
        let body = json!({"status": plan.status});
        api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&body))
            .await
            .map_err(|source| Error::Api {
                what: format!("writing the status of NodeGroup {name}"),
                source,
            })?;
    }
    Ok(Action::requeue(RESYNC))
}

/// Applies one label change to a node (a merge patch of its labels only, never a full update
/// that could race with the node's status writes).
async fn label(client: &kube::Client, group: &str, patch: &LabelPatch) -> Result<(), Error> {
    let api = Api::<Node>::all(client.clone());
    let mut metadata = json!({"labels": patch.labels});
    if let Some(rv) = &patch.precondition {
        metadata["resourceVersion"] = json!(rv);
    }
    let params = PatchParams {
        field_manager: Some(FIELD_MANAGER.to_owned()),
        ..PatchParams::default()
    };
    let body = json!({"metadata": metadata});
    let failed = |source| Error::Api {
        what: format!("labelling node {} for NodeGroup {group}", patch.node),
        source,
    };
    match api.patch(&patch.node, &params, &Patch::Merge(&body)).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        // The node changed since it was seen unclaimed: fine if the change was this claim.
        Err(kube::Error::Api(s)) if s.code == 409 => {
            let now = api.get(&patch.node).await.map_err(failed)?;
            match now.labels().get(BELONGING_TO).map(String::as_str) == Some(group) {
                true => Ok(()),
                false => Err(failed(kube::Error::Api(s))),
            }
        }
        Err(source) => Err(failed(source)),
    }
}

/// Deletes the pods placed for `group` on the nodes that left it (`just_left` now, others
/// earlier with a delete still to do). A node back in the group keeps its pods.
async fn evict(ctx: &Ctx, group: &str, just_left: &[String]) -> Result<(), Error> {
    let todo: Vec<String> = lock(&ctx.pending)
        .get(group)
        .map(|nodes| nodes.iter().cloned().collect())
        .unwrap_or_default();
    for node in todo {
        let now = match just_left.contains(&node) {
            true => None,
            false => ctx
                .nodes
                .get(&ObjectRef::new(&node))
                .and_then(|n| n.labels().get(BELONGING_TO).cloned()),
        };
        if now.as_deref() != Some(group) {
            evict_from(&ctx.client, group, &node, now.as_deref()).await?;
        }
        let mut pending = lock(&ctx.pending);
        if let Some(nodes) = pending.get_mut(group) {
            nodes.remove(&node);
            if nodes.is_empty() {
                pending.remove(group);
            }
        }
    }
    Ok(())
}

/// Deletes the pods on `node` (its group label now `now`) placed for `group`.
async fn evict_from(
    client: &kube::Client,
    group: &str,
    node: &str,
    now: Option<&str>,
) -> Result<(), Error> {
    let failed = |source| Error::Api {
        what: format!("deleting NodeGroup {group}'s pods on node {node}, which left it"),
        source,
    };
    let on_node = ListParams::default().fields(&format!("spec.nodeName={node}"));
    let pods = Api::<Pod>::all(client.clone())
        .list(&on_node)
        .await
        .map_err(failed)?;
    for pod in pods {
        let placed = pod
            .spec
            .as_ref()
            .is_some_and(|spec| plan::evicts(spec, group, now));
        let ns = pod.meta().namespace.clone().unwrap_or_default();
        if !placed || pod.meta().deletion_timestamp.is_some() {
            continue;
        }
        let name = pod.name_any();
        tracing::info!(nodegroup = %group, node_id = %node, pod = %format!("{ns}/{name}"), "deleting a pod of the group from a node that left it");
        match Api::<Pod>::namespaced(client.clone(), &ns)
            .delete(&name, &DeleteParams::default())
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(source) => return Err(failed(source)),
        }
    }
    Ok(())
}

/// What the plan sees of a Node.
fn node_view(node: &Node) -> NodeView<'_> {
    let ready = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
        .map(|c| c.status.as_str());
    NodeView {
        name: node.metadata.name.as_deref().unwrap_or_default(),
        labels: node.labels(),
        ready: ReadyStatus::from_condition(ready),
        resource_version: node.metadata.resource_version.as_deref(),
    }
}

/// Locks a mutex of plain bookkeeping: a panic elsewhere cannot leave it inconsistent.
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retries_back_off_by_doubling_up_to_the_longest_wait() {
        let waits: Vec<u64> = [1, 2, 3, 4].map(|n| backoff(n).as_millis() as u64).to_vec();
        assert_eq!(waits, [500, 1000, 2000, 4000]);
        assert_eq!(backoff(20), BACKOFF.1);
        assert_eq!(backoff(u32::MAX), BACKOFF.1);
    }
}
