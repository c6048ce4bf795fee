//! The EdgeApplication controller: one copy of an application per target site.
//!
//! A kube-runtime `Controller` over EdgeApplications, also woken by the Deployments,
//! StatefulSets and DaemonSets it made (owner references). Each reconcile plans the
//! application with no I/O ([`plan`]: workloads copied per target as `<name>-<target>`,
//! overridden and pinned to their nodes; other objects once, Services closed to their group),
//! applies what changed with server-side apply, deletes what the spec no longer asks for
//! (the previous status lists what was applied), and records `status.workloadStatus`.
//! Everything carries an owner reference to the application, so deleting it deletes them.

mod crd;
mod image;
mod overrides;
mod plan;
#[cfg(test)]
mod tests;
pub mod types;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, StatefulSet};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams,
};
use kube::discovery::Scope;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Resource, ResourceExt};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::FIELD_MANAGER;
use plan::{Desired, Failed};
use types::{EdgeApplication, ManifestStatus, PROCESSING, ResourceIdentifier};

/// The label on every object an EdgeApplication made, valued with the application's name.
pub const EDGEAPP_LABEL: &str = "apps.kubeedge.io/edgeapplication-name";

/// The label a workload copy puts on its pods (and in its selector), valued with its target:
/// the group's name or `ls-<hash>`.
pub const TARGET_LABEL: &str = "apps.kubeedge.io/edgeapplication-target";

/// The annotation holding a hash of the applied template: equal means nothing to apply.
pub const HASH_ANNOTATION: &str = "apps.kubeedge.io/applied-template-hash";

/// How often an application whose objects are all available is reconciled anyway.
const RESYNC: Duration = Duration::from_secs(300);

/// How many objects of one application are applied at once.
const APPLY_CONCURRENCY: usize = 16;

/// How soon an application with objects still processing is looked at again.
const PROCESSING_RECHECK: Duration = Duration::from_secs(2);

/// A problem found by the decision logic, reported per manifest or target.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Problem(pub String);

// === impl Problem ===

impl Problem {
    pub(crate) fn new(reason: String) -> Problem {
        Problem(reason)
    }
}

/// Why a reconcile failed (it is retried with back-off).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Writing the status failed.
    #[error("writing the status of EdgeApplication {name}: {source}")]
    Status {
        name: String,
        #[source]
        source: kube::Error,
    },
    /// Applying or deleting objects failed.
    #[error("EdgeApplication {name}: {failed} of its objects could not be applied or deleted")]
    Objects { name: String, failed: usize },
}

/// The CustomResourceDefinition of EdgeApplication.
pub fn crd() -> Option<CustomResourceDefinition> {
    Some(crd::crd())
}

/// Reconciles EdgeApplications until shutdown.
pub async fn run(client: kube::Client, shutdown: CancellationToken) {
    let managed = watcher::Config::default().labels(EDGEAPP_LABEL);
    let ctx = Arc::new(Ctx {
        client: client.clone(),
        deployments: store(&client, &managed, &shutdown),
        statefulsets: store(&client, &managed, &shutdown),
        daemonsets: store(&client, &managed, &shutdown),
        kinds: Mutex::new(HashMap::new()),
        applied: Mutex::new(HashMap::new()),
        failures: Mutex::new(HashMap::new()),
    });
    let ready = futures::future::join3(
        ctx.deployments.wait_until_ready(),
        ctx.statefulsets.wait_until_ready(),
        ctx.daemonsets.wait_until_ready(),
    );
    tokio::select! {
        _ = shutdown.cancelled() => return,
        _ = ready => {}
    }
    let stop = shutdown.clone();
    Controller::new(
        Api::<EdgeApplication>::all(client.clone()),
        Default::default(),
    )
    .owns(Api::<Deployment>::all(client.clone()), managed.clone())
    .owns(Api::<StatefulSet>::all(client.clone()), managed.clone())
    .owns(Api::<DaemonSet>::all(client.clone()), managed)
    .graceful_shutdown_on(async move { stop.cancelled().await })
    .run(reconcile, error_policy, ctx)
    .for_each(|res| async move {
        if let Err(e) = res {
            tracing::debug!(error = %e, "edgeapplication reconcile");
        }
    })
    .await;
}

/// (group, version, kind).
type GvkKey = (String, String, String);

/// What reconciles share: the client, the stores of the workloads made, and caches.
struct Ctx {
    client: kube::Client,
    deployments: Store<Deployment>,
    statefulsets: Store<StatefulSet>,
    daemonsets: Store<DaemonSet>,
    /// Resolved kinds: (group, version, kind) to its resource and whether it is namespaced.
    kinds: Mutex<HashMap<GvkKey, (ApiResource, bool)>>,
    /// What was applied of the kinds with no store: object key to template hash and when.
    applied: Mutex<HashMap<String, (String, Instant)>>,
    /// Consecutive failed reconciles per application, for the back-off.
    failures: Mutex<HashMap<String, u32>>,
}

/// A reflector store of the managed objects of one kind, fed until shutdown.
fn store<K>(client: &kube::Client, wc: &watcher::Config, shutdown: &CancellationToken) -> Store<K>
where
    K: Resource<DynamicType = ()> + Clone + std::fmt::Debug + serde::de::DeserializeOwned,
    K: Send + Sync + 'static,
    K::Scope: Send,
{
    let (reader, writer) = reflector::store();
    let stream = reflector::reflector(writer, watcher(Api::<K>::all(client.clone()), wc.clone()))
        .default_backoff()
        .applied_objects();
    let shutdown = shutdown.clone();
    tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => break,
                item = stream.next() => match item {
                    None => break,
                    Some(Err(e)) => tracing::debug!(error = %e, "edgeapplication workload watch"),
                    Some(Ok(_)) => {}
                },
            }
        }
    });
    reader
}

/// One pass over an application: plan, apply, prune, report.
async fn reconcile(app: Arc<EdgeApplication>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    if app.metadata.deletion_timestamp.is_some() {
        // The garbage collector deletes what the owner references tie to it.
        return Ok(Action::await_change());
    }
    let name = app.name_any();
    let mut plan = plan::plan(&app);
    for p in &plan.problems {
        tracing::debug!(edgeapplication = %name, problem = %p, "edgeapplication scope");
    }
    let owner = owner_reference(&app);
    let mut available = Vec::new();
    let mut failed_io = 0;
    let desired = std::mem::take(&mut plan.desired);
    let ensured: Vec<_> = futures::stream::iter(desired)
        .map(|mut d| {
            let (ctx, owner) = (&ctx, &owner);
            async move {
                let r = ctx.ensure(&mut d, owner).await;
                (d, r)
            }
        })
        .buffered(APPLY_CONCURRENCY)
        .collect()
        .await;
    for (d, r) in ensured {
        match r {
            Ok(true) => {
                available.push(d.id.clone());
                plan.desired.push(d);
            }
            Ok(false) => plan.desired.push(d),
            Err(reason) => {
                failed_io += 1;
                plan.failed.push(Failed { id: d.id, reason });
            }
        }
    }
    let mut undeleted = Vec::new();
    for id in plan::stale(&plan, app.workload_status()) {
        if let Err(e) = ctx.delete(&id).await {
            tracing::debug!(edgeapplication = %name, object = %id.name, error = %e, "deleting");
            failed_io += 1;
            undeleted.push(id);
        }
    }
    let status = plan::status(&plan, &available, &undeleted);
    if status != app.workload_status() {
        for f in &plan.failed {
            tracing::warn!(edgeapplication = %name, reason = %f.reason, "not applied");
        }
        write_status(&ctx.client, &app, &status).await?;
    }
    ctx.failures
        .lock()
        .expect("failures lock")
        .remove(&key_of(&app));
    if failed_io > 0 {
        return Err(Error::Objects {
            name,
            failed: failed_io,
        });
    }
    let processing = status.iter().any(|s| s.conditions == PROCESSING);
    Ok(Action::requeue(if processing {
        PROCESSING_RECHECK
    } else {
        RESYNC
    }))
}

/// Retries a failed application with exponential back-off (0.5 s doubling, at most a minute).
fn error_policy(app: Arc<EdgeApplication>, e: &Error, ctx: Arc<Ctx>) -> Action {
    let mut failures = ctx.failures.lock().expect("failures lock");
    let n = failures.entry(key_of(&app)).or_insert(0);
    *n = n.saturating_add(1);
    let delay = Duration::from_millis(500).saturating_mul(1 << (*n - 1).min(7));
    tracing::warn!(error = %e, retry_in = ?delay.min(Duration::from_secs(60)), "edgeapplication");
    Action::requeue(delay.min(Duration::from_secs(60)))
}

// === impl Ctx ===

impl Ctx {
    /// Makes `d` exist as planned, applying it only when it differs from what was applied:
    /// whether it is available, or why it cannot be applied.
    async fn ensure(&self, d: &mut Desired, owner: &Value) -> Result<bool, String> {
        let (resource, namespaced) = self.resolve(&d.id).await?;
        if !namespaced {
            return Err(format!(
                "manifest {}: {} is cluster-scoped and cannot be owned by a namespaced EdgeApplication",
                d.id.ordinal, d.id.kind
            ));
        }
        d.id.resource = resource.plural.clone();
        d.object["metadata"]["ownerReferences"] = json!([owner]);
        let hash = format!("{:016x}", plan::fnv(d.object.to_string().as_bytes()));
        d.object["metadata"]["annotations"][HASH_ANNOTATION] = hash.clone().into();
        let owner_uid = owner["uid"].as_str().unwrap_or_default();
        let key = format!(
            "{}/{}/{}/{}",
            d.id.group, d.id.kind, d.id.namespace, d.id.name
        );
        if d.workload {
            if let Some(current) = self.stored(&d.id) {
                check_owner(&current, owner_uid)?;
                if current["metadata"]["annotations"][HASH_ANNOTATION] == hash.as_str() {
                    return Ok(plan::available(&current));
                }
            }
        } else {
            let fresh = self
                .applied
                .lock()
                .expect("applied lock")
                .get(&key)
                .is_some_and(|(h, at)| *h == hash && at.elapsed() < RESYNC);
            if fresh {
                return Ok(true);
            }
        }
        let api = self.api(&resource, &d.id.namespace);
        if !d.workload
            && let Ok(Some(current)) = api.get_opt(&d.id.name).await
        {
            check_owner(
                &serde_json::to_value(current).unwrap_or_default(),
                owner_uid,
            )?;
        }
        let params = PatchParams::apply(FIELD_MANAGER).force();
        let applied = api
            .patch(&d.id.name, &params, &Patch::Apply(&d.object))
            .await
            .map_err(|e| format!("applying {} {}: {e}", d.id.kind, d.id.name))?;
        if !d.workload {
            self.applied
                .lock()
                .expect("applied lock")
                .insert(key, (hash, Instant::now()));
        }
        Ok(plan::available(
            &serde_json::to_value(applied).unwrap_or_default(),
        ))
    }

    /// The stored workload named by `id`, as JSON.
    fn stored(&self, id: &ResourceIdentifier) -> Option<Value> {
        fn json<K: serde::Serialize>(v: Option<Arc<K>>) -> Option<Value> {
            v.map(|o| serde_json::to_value(&*o).unwrap_or_default())
        }
        let ns = id.namespace.as_str();
        let obj = match id.kind.as_str() {
            "Deployment" => json(self.deployments.get(&ObjectRef::new(&id.name).within(ns)))?,
            "StatefulSet" => json(self.statefulsets.get(&ObjectRef::new(&id.name).within(ns)))?,
            "DaemonSet" => json(self.daemonsets.get(&ObjectRef::new(&id.name).within(ns)))?,
            _ => return None,
        };
        // A stored object lacks apiVersion and kind, which `available` reads.
        let mut obj = obj;
        obj["kind"] = id.kind.clone().into();
        Some(obj)
    }

    /// Deletes a stale object (gone already is fine).
    async fn delete(&self, id: &ResourceIdentifier) -> Result<(), String> {
        let (resource, _) = self.resolve(id).await?;
        let api = self.api(&resource, &id.namespace);
        match api.delete(&id.name, &DeleteParams::background()).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => return Err(e.to_string()),
        }
        let key = format!("{}/{}/{}/{}", id.group, id.kind, id.namespace, id.name);
        self.applied.lock().expect("applied lock").remove(&key);
        Ok(())
    }

    /// The resource of an identifier's kind, from discovery (cached).
    async fn resolve(&self, id: &ResourceIdentifier) -> Result<(ApiResource, bool), String> {
        let key = (id.group.clone(), id.version.clone(), id.kind.clone());
        if let Some(hit) = self.kinds.lock().expect("kinds lock").get(&key) {
            return Ok(hit.clone());
        }
        let gvk = GroupVersionKind::gvk(&id.group, &id.version, &id.kind);
        let (resource, caps) = kube::discovery::pinned_kind(&self.client, &gvk)
            .await
            .map_err(|e| {
                let api_version = if id.group.is_empty() {
                    id.version.clone()
                } else {
                    format!("{}/{}", id.group, id.version)
                };
                format!(
                    "manifest {}: kind {} of apiVersion {api_version} is not served: {e}",
                    id.ordinal, id.kind
                )
            })?;
        let hit = (resource, caps.scope == Scope::Namespaced);
        self.kinds
            .lock()
            .expect("kinds lock")
            .insert(key, hit.clone());
        Ok(hit)
    }

    fn api(&self, resource: &ApiResource, namespace: &str) -> Api<DynamicObject> {
        Api::namespaced_with(self.client.clone(), namespace, resource)
    }
}

/// Refuses to take over an object another EdgeApplication made (two applications, or a
/// copy and a template, landing on one name).
fn check_owner(current: &Value, owner_uid: &str) -> Result<(), String> {
    let refs = current["metadata"]["ownerReferences"].as_array();
    let other = refs.into_iter().flatten().find(|r| {
        r["kind"] == "EdgeApplication" && r["uid"].as_str().is_some_and(|u| u != owner_uid)
    });
    match other {
        Some(r) => Err(format!(
            "{} {} belongs to EdgeApplication {}",
            current["kind"].as_str().unwrap_or("the object"),
            current["metadata"]["name"].as_str().unwrap_or_default(),
            r["name"].as_str().unwrap_or_default()
        )),
        None => Ok(()),
    }
}

/// The controller owner reference to `app`.
fn owner_reference(app: &EdgeApplication) -> Value {
    json!({
        "apiVersion": crate::API_VERSION,
        "kind": "EdgeApplication",
        "name": app.name_any(),
        "uid": app.metadata.uid.clone().unwrap_or_default(),
        "controller": true,
        "blockOwnerDeletion": true,
    })
}

/// Writes `status.workloadStatus`.
async fn write_status(
    client: &kube::Client,
    app: &EdgeApplication,
    status: &[ManifestStatus],
) -> Result<(), Error> {
    let name = app.name_any();
    let api: Api<EdgeApplication> = Api::namespaced(
        client.clone(),
        app.metadata.namespace.as_deref().unwrap_or("default"),
    );
    let body = json!({"status": {"workloadStatus": status}});
    api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&body))
        .await
        .map(|_| ())
        .map_err(|source| Error::Status { name, source })
}

/// `namespace/name` of an application.
fn key_of(app: &EdgeApplication) -> String {
    format!(
        "{}/{}",
        app.metadata.namespace.as_deref().unwrap_or_default(),
        app.name_any()
    )
}
