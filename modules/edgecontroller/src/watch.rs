//! One watch per resource type (kube-runtime's watcher: list, then watch, relist on 410),
//! turned into events for the run loop.

use futures::StreamExt;
use kube::Client;
use kube::api::{Api, DynamicObject};
use kube::runtime::{WatchStreamExt, watcher};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::kinds::Kind;
use crate::state::Obj;

/// What a watch saw.
pub(crate) enum WatchEvent {
    Apply(Obj),
    /// The object at this key was deleted.
    Delete(String),
    /// A (re)list finished: everything of the kind there is now.
    Relisted {
        kind: usize,
        objs: Vec<Obj>,
    },
}

/// Starts a watch for every kind; events go to `tx` until `shutdown`.
pub(crate) fn spawn(
    client: &Client,
    kinds: &[Kind],
    tx: mpsc::Sender<WatchEvent>,
    tasks: &TaskTracker,
    shutdown: &CancellationToken,
) {
    for (id, kind) in kinds.iter().enumerate() {
        spawn_one(client, id, kind, tx.clone(), tasks, shutdown);
    }
}

/// Starts the watch of kind `kind` (id `id`); events go to `tx` until `stop`.
pub(crate) fn spawn_one(
    client: &Client,
    id: usize,
    kind: &Kind,
    tx: mpsc::Sender<WatchEvent>,
    tasks: &TaskTracker,
    stop: &CancellationToken,
) {
    let (client, kind, stop) = (client.clone(), kind.clone(), stop.clone());
    tasks.spawn(async move {
        tokio::select! {
            _ = stop.cancelled() => {}
            _ = watch(client, id, kind, tx) => {}
        }
    });
}

async fn watch(client: Client, id: usize, kind: Kind, tx: mpsc::Sender<WatchEvent>) {
    let ar = kind.api_resource();
    let api: Api<DynamicObject> = match &kind.namespace {
        Some(ns) => Api::namespaced_with(client, ns, &ar),
        None => Api::all_with(client, &ar),
    };
    let mut config = watcher::Config::default();
    if let Some(fields) = &kind.field_selector {
        config = config.fields(fields);
    }
    // kube-runtime's backoff paces retries after errors (exponential, reset on success).
    let stream = watcher::watcher(api, config).default_backoff();
    futures::pin_mut!(stream);
    let mut listing: Option<Vec<Obj>> = None;
    let mut failing = false;
    while let Some(event) = stream.next().await {
        let obj = |o: DynamicObject| to_obj(id, &kind, o);
        let sent = match event {
            Ok(watcher::Event::Init) => {
                listing = Some(Vec::new());
                continue;
            }
            Ok(watcher::Event::InitApply(o)) => {
                listing.get_or_insert_default().push(obj(o));
                continue;
            }
            Ok(watcher::Event::InitDone) => {
                let objs = listing.take().unwrap_or_default();
                tracing::debug!(resource = %kind.store_resource(), objects = objs.len(), "listed");
                tx.send(WatchEvent::Relisted { kind: id, objs }).await
            }
            Ok(watcher::Event::Apply(o)) => tx.send(WatchEvent::Apply(obj(o))).await,
            Ok(watcher::Event::Delete(o)) => tx.send(WatchEvent::Delete(obj(o).key)).await,
            Err(e) if kind.optional => {
                // Its CRD is not installed (the site controllers are off): said once, then
                // retried under the backoff without a word until it is.
                if !failing {
                    tracing::info!(resource = %kind.store_resource(), error = %e, "optional kind not served; retrying quietly");
                }
                failing = true;
                continue;
            }
            Err(e) => {
                tracing::warn!(resource = %kind.store_resource(), error = %e, "watch failed; retrying");
                continue;
            }
        };
        failing = false;
        if sent.is_err() {
            return; // the run loop ended
        }
    }
}

fn to_obj(id: usize, kind: &Kind, obj: DynamicObject) -> Obj {
    // A DynamicObject always serializes.
    let value = serde_json::to_value(&obj).expect("an object serializes");
    Obj::from_value(id, kind, value)
}
