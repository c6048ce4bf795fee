//! The registry of shared caches: one watch and one [`Cache`] per resource type for every
//! controller of the process, started by the first controller that asks for it, its task
//! tracked and stopped at shutdown.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::Resource;
use kube::api::Api;
use kube::runtime::{WatchStreamExt, watcher};
use serde::de::DeserializeOwned;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::queue::Queue;
use crate::slim::slim_pod;
use crate::store::Cache;

/// The shared caches of one process (cheap to clone; clones share them).
#[derive(Clone)]
pub struct Stores {
    inner: Arc<Inner>,
}

struct Inner {
    client: kube::Client,
    tasks: TaskTracker,
    shutdown: CancellationToken,
    /// `Arc<Cache<K>>` by `TypeId` of `K`.
    caches: Mutex<HashMap<TypeId, Arc<dyn Any + Send + Sync>>>,
}

/// What a shared cache can hold.
pub trait Watched:
    Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug + Send + Sync + 'static
{
}

impl<K> Watched for K where
    K: Resource<DynamicType = ()>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static
{
}

// === impl Stores ===

impl Stores {
    /// No caches yet; each watch asked for later runs through `client` until `shutdown`.
    pub fn new(client: kube::Client, shutdown: CancellationToken) -> Stores {
        Stores {
            inner: Arc::new(Inner {
                client,
                tasks: TaskTracker::new(),
                shutdown,
                caches: Mutex::new(HashMap::new()),
            }),
        }
    }

    /// The client the watches use.
    pub fn client(&self) -> &kube::Client {
        &self.inner.client
    }

    /// The shared cache of every `K`, whole objects (its watch starts with the first ask).
    pub fn cache<K: Watched>(&self) -> Arc<Cache<K>> {
        self.cache_with(|k| k)
    }

    /// The shared cache of pods, as [`slim_pod`] leaves them: one copy for every controller.
    pub fn pods(&self) -> Arc<Cache<Pod>> {
        self.cache_with(slim_pod)
    }

    /// The shared cache of every `K`, each change queueing the object's key: how a controller
    /// follows the objects it reconciles.
    pub fn keyed<K: Watched>(&self, queue: &Queue) -> Arc<Cache<K>> {
        let cache = self.cache::<K>();
        cache.keyed(queue);
        cache
    }

    /// The shared pod cache, each change queueing the pod's controller when that is of kind
    /// `owner`: how a controller follows the pods it owns.
    pub fn owned_pods(&self, owner: &'static str, queue: &Queue) -> Arc<Cache<Pod>> {
        let cache = self.pods();
        cache.owners(owner, queue);
        cache
    }

    /// The shared cache of every `K`, keeping what `keep` leaves of each object. The first ask
    /// for a type decides what is kept; later asks share that cache whatever they pass.
    pub fn cache_with<K: Watched>(&self, keep: fn(K) -> K) -> Arc<Cache<K>> {
        let mut caches = self.inner.caches.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(held) = caches.get(&TypeId::of::<K>())
            && let Ok(cache) = held.clone().downcast::<Cache<K>>()
        {
            return cache;
        }
        let cache = Arc::new(Cache::new(keep));
        caches.insert(TypeId::of::<K>(), cache.clone());
        let api = Api::<K>::all(self.inner.client.clone());
        self.spawn(watch(api, cache.clone(), self.inner.shutdown.clone()));
        cache
    }

    /// Runs `task` as one of the runtime's tracked tasks ([`Stores::stopped`] waits for it).
    pub fn spawn<F>(&self, task: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        self.inner.tasks.spawn(task);
    }

    /// How many resource types are watched.
    pub fn watched(&self) -> usize {
        self.inner
            .caches
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .len()
    }

    /// Waits until every tracked task has ended (they end at the shutdown given to
    /// [`Stores::new`]).
    pub async fn stopped(&self) {
        self.inner.tasks.close();
        self.inner.tasks.wait().await;
    }
}

/// Feeds `api`'s watch events into `cache` until shutdown; a failed watch is retried with
/// kube-runtime's default back-off (and relists when its resourceVersion is too old).
async fn watch<K: Watched>(api: Api<K>, cache: Arc<Cache<K>>, shutdown: CancellationToken) {
    let mut events = watcher(api, watcher::Config::default())
        .default_backoff()
        .boxed();
    loop {
        let event = tokio::select! {
            biased;
            _ = shutdown.cancelled() => return,
            e = events.next() => e,
        };
        match event {
            Some(Ok(e)) => cache.apply(e),
            Some(Err(e)) => {
                tracing::debug!(resource = %K::plural(&()), error = %e, "watch failed; retrying")
            }
            None => return,
        }
    }
}
