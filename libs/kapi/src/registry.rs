//! Which resources are served: the built-ins plus those CRDs add, looked up by URL parts.

use std::sync::{Arc, RwLock};

use apimachinery::ResourceInfo;

/// The served resources; cheap to clone, shared by every handler.
#[derive(Clone, Default)]
pub struct Registry {
    inner: Arc<RwLock<Vec<Arc<ResourceInfo>>>>,
    /// The CustomResourceDefinitions stored at start have all been served once (kube's
    /// `crd-informer-synced` post-start hook: it never fails again after that).
    crds_synced: Arc<std::sync::atomic::AtomicBool>,
}

impl Registry {
    /// A registry with these resources.
    pub fn new(resources: Vec<ResourceInfo>) -> Registry {
        Registry {
            inner: Arc::new(RwLock::new(resources.into_iter().map(Arc::new).collect())),
            crds_synced: Arc::default(),
        }
    }

    /// Whether the CRDs stored at start have all been served once.
    pub(crate) fn crds_synced(&self) -> bool {
        self.crds_synced.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Records that the CRDs stored at start have all been served.
    pub(crate) fn mark_crds_synced(&self) {
        self.crds_synced
            .store(true, std::sync::atomic::Ordering::Release);
    }

    /// The resource at `group`/`version`/`plural`.
    pub fn get(&self, group: &str, version: &str, plural: &str) -> Option<Arc<ResourceInfo>> {
        let all = self.inner.read().expect("registry lock poisoned");
        all.iter()
            .find(|r| r.group == group && r.version == version && r.plural == plural)
            .cloned()
    }

    /// The resource stored under `store_resource` (any served version; the first registered).
    pub fn by_store_resource(&self, store_resource: &str) -> Option<Arc<ResourceInfo>> {
        let all = self.inner.read().expect("registry lock poisoned");
        all.iter()
            .find(|r| r.store_resource() == store_resource)
            .cloned()
    }

    /// Every served resource.
    pub fn all(&self) -> Vec<Arc<ResourceInfo>> {
        self.inner.read().expect("registry lock poisoned").clone()
    }

    /// Adds (or replaces, by group/version/plural) resources, e.g. when a CRD is created.
    pub fn upsert(&self, resources: Vec<ResourceInfo>) {
        let mut all = self.inner.write().expect("registry lock poisoned");
        for r in resources {
            all.retain(|x| !(x.group == r.group && x.version == r.version && x.plural == r.plural));
            all.push(Arc::new(r));
        }
    }

    /// Removes every version of `group`/`plural` (a CRD was deleted).
    pub fn remove(&self, group: &str, plural: &str) {
        let mut all = self.inner.write().expect("registry lock poisoned");
        all.retain(|x| !(x.group == group && x.plural == plural));
    }
}
